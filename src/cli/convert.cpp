// hearth convert: a Hugging Face checkpoint -> an MLX affine-quantized one, as mlx_lm.convert
// writes it (mlx_lm can load the result), or -> a GGUF file that llama.cpp loads
// (formats/gguf_export.h). Tensor by tensor, so memory stays near the largest tensor; the
// output is staged beside the destination and renamed into place at the end.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "base/timer.h"
#include "cli/flags.h"
#include "cli/verbs.h"
#include "core/quant.h"
#include "formats/gguf_export.h"
#include "formats/safetensors.h"
#include "formats/weight_store.h"

namespace hearth::cli {

namespace {

namespace fs = std::filesystem;

// mlx_lm quantizes every Linear and Embedding whose input width fits the groups: in a HF
// checkpoint, the rank-2 ".weight" tensors.
bool quantizable(const std::string& name, const Tensor& t, const QuantSpec& spec) {
  return t.rank() == 2 && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 && is_float(t.dtype()) &&
         t.dim(1) % spec.group_size == 0;
}

// One line, redrawn in place on a terminal: "convert [=====>    ] 12/40 tensors".
void progress(size_t done, size_t total, const std::string& what) {
  if (isatty(STDERR_FILENO) == 0) return;
  const int width = 30;
  const int filled = total == 0 ? width : static_cast<int>(width * done / total);
  std::fprintf(stderr, "\rconvert [%s%s] %zu/%zu %-40.40s", std::string(static_cast<size_t>(filled), '=').c_str(),
               std::string(static_cast<size_t>(width - filled), ' ').c_str(), done, total, what.c_str());
  if (done == total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

void write_config(const fs::path& src, const fs::path& dst, const QuantSpec& spec) {
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(read_text_file((src / "config.json").string()));
  if (config.contains("quantization") || config.contains("quantization_config")) {
    throw InputError(src.string() + " is already quantized (config.json has a quantization section)");
  }
  const nlohmann::ordered_json q = {{"group_size", spec.group_size}, {"bits", spec.bits}, {"mode", "affine"}};
  config["quantization"] = q;
  config["quantization_config"] = q;
  write_file_atomic((dst / "config.json").string(), config.dump(4) + "\n");
}

int convert_to_gguf(const std::string& src, const std::string& type_name, const std::string& out) {
  const std::optional<GgmlType> type = gguf_export_type(type_name);
  if (!type) {
    throw Unsupported("convert: --type '" + type_name + "' is not implemented (f16, bf16, q8_0, q4_0, f32 are)");
  }
  if (out.empty()) throw InputError("convert: --out FILE.gguf is required with --to gguf");
  if (fs::exists(out) && !(fs::is_regular_file(out) && fs::is_empty(out))) {
    throw FileError(out, "exists and is not an empty file; refusing to overwrite it");
  }
  const Timer timer;
  const GgufExportPlan plan = plan_gguf_export(src, {.type = *type, .tokenizer_dir = {}});
  write_gguf_export(plan, out, {.overwrite = true, .progress = progress});  // checked above: absent or empty
  std::map<std::string, size_t> by_type;                                    // "Q4_0" -> tensors of that type
  for (const GgufExportTensor& t : plan.tensors) ++by_type[std::string(ggml_type_name(t.type))];
  std::string types;
  for (const auto& [name, n] : by_type) types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + name;
  std::printf("hearth: wrote %s (%zu tensors: %s) in %.1f s\n", out.c_str(), plan.tensors.size(), types.c_str(),
              timer.seconds());
  return 0;
}

}  // namespace

// mlx_lm.convert's flags that Hearth does not implement, refused by name rather than as unknown.
constexpr const char* kMlxLmOnlyFlags[] = {"--q-mode",     "--quant-predicate",   "--dtype", "--upload-repo",
                                           "--dequantize", "--trust-remote-code", "-d"};

int run_convert(const std::vector<std::string>& args) {
  std::string src, hf_path, mlx_path, to, type, out;
  bool quantize = false;
  int64_t bits = 4, group_size = 64;
  Flags f("convert",
          "SRC -q [--q-bits 4] [--q-group-size 64] --mlx-path OUT\n"
          "       hearth convert SRC --to gguf --type f16|bf16|q8_0|q4_0 --out FILE.gguf",
          "Converts a Hugging Face checkpoint (config.json + f32/bf16/f16 safetensors) tensor by tensor\n"
          "into MLX affine-quantized form (docs/quantization.md), or with --to gguf into a GGUF file\n"
          "that llama.cpp loads (docs/gguf.md: llama/mistral/qwen2/qwen3, byte-level BPE tokenizers;\n"
          "q4_0 keeps the output matrix in Q6_K as llama-quantize does). The output must not exist or\n"
          "be empty; it appears only when the conversion has finished.");
  f.positional("SRC", "The source model directory.", &src);
  f.add("hf-path", "The source model directory, as mlx_lm.convert takes it (instead of SRC).", &hf_path);
  f.add("quantize", "Quantize to MLX affine (also -q). Required unless --to gguf.", &quantize);
  f.add("q-bits", "Bits per weight: 2, 3, 4, 5, 6 or 8 (default 4; 4 and 8 have fast kernels).", &bits);
  f.add("q-group-size", "Weights per scale/bias group: 32, 64 or 128 (default 64).", &group_size);
  f.add("mlx-path", "Output directory.", &mlx_path);
  f.add("to", "Output format: mlx (default, with -q) or gguf.", &to);
  f.add("type", "With --to gguf: f16 (default), bf16, q8_0 or q4_0 for the weight matrices (f32 too).", &type);
  f.add("out", "With --to gguf: the output file.", &out);
  f.alias("-q", "quantize");
  for (const char* flag : kMlxLmOnlyFlags)
    f.refuse(flag, std::string("mlx_lm.convert's ") + flag + " is not implemented");
  if (!f.parse(args)) return 0;
  if (!hf_path.empty()) {
    if (!src.empty()) throw InputError("convert: give the source as SRC or --hf-path, not both");
    src = hf_path;
  }
  if (src.empty()) throw InputError("convert: the source model directory is required (see hearth convert --help)");
  if (to == "gguf") {
    for (const char* flag : {"quantize", "q-bits", "q-group-size", "mlx-path"}) {
      if (f.given(flag))
        throw InputError(std::string("convert: --") + flag + " does not apply to --to gguf (use --type)");
    }
    return convert_to_gguf(src, type.empty() ? "f16" : type, out);
  }
  if (!to.empty() && to != "mlx") throw Unsupported("convert: --to '" + to + "' is not implemented (mlx, gguf are)");
  if (!type.empty() || !out.empty()) throw InputError("convert: --type and --out go with --to gguf");
  if (!quantize) throw InputError("convert: only quantized output is implemented; pass -q");
  if (mlx_path.empty()) throw InputError("convert: --mlx-path is required");
  const QuantSpec spec{static_cast<int>(bits), static_cast<int>(group_size)};
  check_quant_spec(spec);

  const fs::path src_dir(src), dst_dir(mlx_path);
  if (!fs::exists(src_dir / "config.json")) throw FileError(src, "not a model directory (no config.json)");
  if (fs::exists(dst_dir) && !(fs::is_directory(dst_dir) && fs::is_empty(dst_dir))) {
    throw FileError(mlx_path, "exists and is not an empty directory; refusing to overwrite it");
  }
  const fs::path stage = dst_dir.string() + ".partial-" + std::to_string(::getpid());
  fs::remove_all(stage);
  fs::create_directories(stage);
  try {
    const Timer timer;
    const WeightStore store = WeightStore::open_dir(src);
    const std::vector<std::string> names = store.names();
    // The header needs every output tensor's shape up front.
    std::vector<SafetensorsWriter::Spec> specs;
    for (const std::string& name : names) {
      const Tensor t = store.get(name);
      std::vector<int64_t> shape;
      for (int i = 0; i < t.rank(); ++i) shape.push_back(t.dim(i));
      if (!quantizable(name, t, spec)) {
        specs.push_back({name, t.dtype(), shape});
        continue;
      }
      const std::string prefix = name.substr(0, name.size() - 7);
      specs.push_back({name, DType::kU32, {t.dim(0), t.dim(1) * spec.bits / 32}});
      specs.push_back({prefix + ".scales", t.dtype(), {t.dim(0), t.dim(1) / spec.group_size}});
      specs.push_back({prefix + ".biases", t.dtype(), {t.dim(0), t.dim(1) / spec.group_size}});
    }
    SafetensorsWriter writer((stage / "model.safetensors").string(), specs, {{"format", "mlx"}});
    size_t done = 0, quantized = 0;
    for (const std::string& name : names) {
      progress(done, names.size(), name);
      const Tensor t = store.get(name);
      if (!quantizable(name, t, spec)) {
        writer.write(t);
      } else {
        const QuantizedMatrix q = affine_quantize(t, spec, t.dtype());
        writer.write(q.packed);
        writer.write(q.scales);
        writer.write(q.biases);
        ++quantized;
      }
      // Read once: its mapped pages leave the resident set (memory stays near one tensor).
      if (t.is_view_of_external()) drop_resident_pages(t.raw(), t.nbytes());
      ++done;
    }
    progress(done, names.size(), "");
    writer.finish();
    write_config(src_dir, stage, spec);
    // Everything else a model directory carries (tokenizer, templates, generation config).
    for (const auto& entry : fs::directory_iterator(src_dir)) {
      const std::string fname = entry.path().filename().string();
      if (!entry.is_regular_file() || fname == "config.json" || entry.path().extension() == ".safetensors" ||
          fname == "model.safetensors.index.json") {
        continue;
      }
      fs::copy_file(entry.path(), stage / fname);
    }
    if (fs::exists(dst_dir)) fs::remove(dst_dir);  // empty, checked above
    fs::rename(stage, dst_dir);
    std::printf("hearth: wrote %s (%zu of %zu tensors quantized to %d bits, groups of %d) in %.1f s\n",
                mlx_path.c_str(), quantized, names.size(), spec.bits, spec.group_size, timer.seconds());
  } catch (...) {
    std::error_code ec;
    fs::remove_all(stage, ec);
    throw;
  }
  return 0;
}

}  // namespace hearth::cli
