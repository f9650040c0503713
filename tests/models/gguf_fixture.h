// GGUF files made in the test from the parity fixtures (HF safetensors + config.json) by Hearth's
// exporter (formats/gguf_export.h: llama.cpp's metadata keys, tensor names, Q/K row permutation,
// rope_freqs.weight, byte-level BPE vocabulary), with hooks to break them for error tests. The
// exporter and the loader are inverses written in one place, so the independent check is the
// model tests' comparison of the GGUF model's logits with the safetensors checkpoint's.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "formats/gguf.h"
#include "formats/gguf_export.h"
#include "formats/gguf_writer.h"
#include "test_util.h"

namespace hearth::testing {

using GgufKv = GgufKeyValues;

inline void set_kv(GgufKv& kv, const std::string& key, GgufValue v) {
  for (auto& [k, old] : kv) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  kv.emplace_back(key, std::move(v));
}
inline void erase_kv(GgufKv& kv, const std::string& key) {
  std::erase_if(kv, [&](const auto& e) { return e.first == key; });
}

struct GgufFixtureOptions {
  GgmlType matrix_type = GgmlType::kF32;  // 2-D weights; norms, biases and rope_freqs stay F32
  std::function<void(GgufKv&)> edit_metadata = {};
  // The type of a tensor (by GGUF name) instead of the default; a type the writer cannot encode
  // gets zero bytes.
  std::function<std::optional<GgmlType>(const std::string&)> type_for = {};
  std::string drop = {};  // a tensor (GGUF name) to leave out
};

// Rewrites the GGUF file at PATH with the tensors in `retype` declared as the given types and
// zero bytes (types the exporter has no encoder for, for tests of types Hearth refuses).
inline void retype_gguf_tensors(const std::string& path, const std::map<std::string, GgmlType>& retype) {
  auto file = GgufFile::open(path);
  GgufWriter w(path, {.overwrite = true});
  for (const auto& [k, v] : file->metadata().entries())
    if (k != "general.alignment") w.set_metadata(k, v);
  for (const GgufTensorInfo& t : file->tensors()) {
    auto it = retype.find(t.name);
    w.add_tensor(t.name, it == retype.end() ? t.type : it->second, t.shape());
  }
  for (const GgufTensorInfo& t : file->tensors()) {
    auto it = retype.find(t.name);
    if (it == retype.end()) {
      const Tensor raw = file->raw(t);
      w.write_tensor_data(t.name, raw.raw(), raw.nbytes());
    } else {
      const std::vector<uint8_t> zeros(row_bytes(it->second, t.shape().dim(-1)) *
                                       static_cast<size_t>(t.shape().numel() / t.shape().dim(-1)));
      w.write_tensor_data(t.name, zeros.data(), zeros.size());
    }
  }
  w.finish();
}

// Writes tests/data/parity/FIXTURE as a GGUF file at OUT through Hearth's exporter (with the
// tiny tokenizer's vocabulary, which fits the fixtures' 1000 ids), edited as OPTIONS say, and
// returns OUT.
inline std::string write_gguf_fixture(const std::string& fixture, const std::string& out,
                                      const GgufFixtureOptions& options = {}) {
  GgufExportPlan plan = plan_gguf_export(data_path("parity/" + fixture),
                                         {.type = options.matrix_type, .tokenizer_dir = data_path("tiny_tokenizer")});
  if (options.edit_metadata) options.edit_metadata(plan.metadata);
  std::erase_if(plan.tensors, [&](const GgufExportTensor& t) { return t.name == options.drop; });
  std::map<std::string, GgmlType> retype;
  for (GgufExportTensor& t : plan.tensors) {
    const std::optional<GgmlType> type = options.type_for ? options.type_for(t.name) : std::nullopt;
    if (!type) continue;
    if (*type == GgmlType::kF32 || *type == GgmlType::kF16 || *type == GgmlType::kBF16 || *type == GgmlType::kQ8_0 ||
        *type == GgmlType::kQ4_0) {
      t.type = *type;
    } else {
      retype[t.name] = *type;
    }
  }
  write_gguf_export(plan, out, {.overwrite = true, .progress = {}});
  if (!retype.empty()) retype_gguf_tensors(out, retype);
  return out;
}

}  // namespace hearth::testing
