// A Hugging Face checkpoint (llama / mistral / qwen2 / qwen3; f32, bf16 or f16 safetensors, with
// its byte-level BPE tokenizer.json) as a GGUF file that llama.cpp loads: the metadata keys,
// tensor names, Q/K row order and tensor types that llama.cpp's convert_hf_to_gguf.py and
// llama-quantize write. The inverse of formats/gguf_model.h; docs/gguf.md has the mapping.
//
//   GgufExportPlan plan = plan_gguf_export(dir, {.type = GgmlType::kQ4_0});  // reads headers only
//   write_gguf_export(plan, "model.gguf", {});  // tensor by tensor, published atomically
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/ggml_blocks.h"
#include "core/shape.h"
#include "formats/gguf_value.h"

namespace hearth {

using GgufKeyValues = std::vector<std::pair<std::string, GgufValue>>;

struct GgufExportTensor {
  std::string name;           // llama.cpp's name
  std::string source;         // the HF tensor it is made from; empty for `values`
  GgmlType type;              // F32, F16, Q8_0, Q4_0 or Q6_K
  Shape shape;                // torch order
  int64_t permute_heads = 0;  // > 0: rows reordered for ggml's interleaved-pair RoPE (llama q/k)
  std::vector<float> values;  // a computed tensor (rope_freqs.weight)
};

struct GgufExportPlan {
  std::string model_dir;
  GgufKeyValues metadata;  // in the order they are written
  std::vector<GgufExportTensor> tensors;
};

struct GgufExportOptions {
  // The file type: 2-D weight matrices in this type (F32, F16, Q8_0, Q4_0); 1-D tensors F32;
  // with Q4_0 the output matrix (or the tied embedding) Q6_K, as llama-quantize does.
  GgmlType type = GgmlType::kF16;
  std::string tokenizer_dir;  // tokenizer.json + tokenizer_config.json; default: the model directory
};

// "f32", "f16", "q8_0", "q4_0" -> the type; nullopt for anything else.
std::optional<GgmlType> gguf_export_type(const std::string& name);

// The metadata and tensor list for MODEL_DIR (config.json + safetensors headers; no tensor data
// is read). FileError for a missing or malformed config/tokenizer; Unsupported, naming the
// thing, for an architecture, dtype, RoPE type, tokenizer model or pre-tokenizer llama.cpp's
// GGUF has no form for here; InputError for a tensor without a llama.cpp name.
GgufExportPlan plan_gguf_export(const std::string& model_dir, const GgufExportOptions& options);

// tokenizer.ggml.* and tokenizer.chat_template for the byte-level BPE tokenizer in DIR, the
// token list padded with UNUSED "[PADi]" entries to VOCAB_SIZE (the embedding's rows), as
// convert_hf_to_gguf.py writes them. tokenizer.ggml.pre is named from the pre-tokenizer's
// regex. Special token ids come from tokenizer_config.json, else from CONFIG_JSON's *_token_id.
GgufKeyValues gguf_tokenizer_metadata(const std::string& dir, int64_t vocab_size, const std::string& config_json = "");

struct GgufWriteOptions {
  bool overwrite = false;  // else an existing non-empty destination is refused
  std::function<void(size_t done, size_t total, const std::string& tensor)> progress = {};
};

// Writes the plan: each tensor read from the mapped checkpoint, converted row by row (memory
// near the largest output tensor) and published atomically at the end.
void write_gguf_export(const GgufExportPlan& plan, const std::string& path, const GgufWriteOptions& options);

}  // namespace hearth
