// A loaded model: one forward over a flat batch. Architectures register a factory under
// their config.json model_type; load_model() picks it.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/generation_config.h"
#include "formats/json_config.h"
#include "nn/batch.h"
#include "nn/kv_cache.h"
#include "nn/linear.h"

namespace hearth {

struct ModelInfo {
  std::string model_type;
  std::string dir;  // the model directory or GGUF file
  int64_t vocab_size = 0;
  int64_t hidden = 0;
  int64_t n_layers = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_context = 0;    // max_position_embeddings
  uint64_t weight_bytes = 0;  // bytes of all weights as stored
  // What one decoded token reads, as loaded: every matrix (quantized ones with their scales)
  // incl. the LM head, one embedding row, the f32 norms and biases. For the roofline.
  uint64_t decode_weight_bytes = 0;
  uint64_t params = 0;          // logical parameters (a quantized [N, K] matrix counts N*K)
  std::string weight_format;    // of most matrix bytes: "bf16", "affine 4-bit/64", "Q4_0", ...
  GenerationConfig generation;  // sampling defaults and eos ids
};

class Model;
std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options);

class Model {
 public:
  virtual ~Model() = default;
  const ModelInfo& info() const { return info_; }
  // Runs the batch, writing new K/V into `kv`. Returns logits [R, vocab] f32 for the rows
  // listed in batch.logits_rows, in that order.
  virtual Tensor forward(Context& ctx, const Batch& batch, KvCache& kv) const = 0;
  KvCache allocate_kv(int64_t n_blocks, int64_t block_size, DType dtype, Device device = kCpu) const {
    return KvCache::allocate(info_.n_layers, n_blocks, block_size, info_.n_kv_heads, info_.head_dim, dtype, device);
  }
  // The KV element type when none is asked for: f32 for f32 weights (exact parity with the
  // reference), else f16, as llama.cpp keeps it (half the bytes that decode reads; 11
  // significant bits, more than bf16's 8, and K/V values sit far inside f16's range).
  DType default_kv_dtype() const { return info_.weight_format == "f32" ? DType::kF32 : DType::kF16; }

 protected:
  ModelInfo info_;

 private:
  friend std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options);
  friend std::unique_ptr<Model> build_model(const JsonConfig& config, const WeightSource& weights,
                                            const LoadOptions& options, QuantConfig quant);
};

using ModelFactory = std::unique_ptr<Model> (*)(const JsonConfig& config, const WeightLoader& weights);

// Static registration: `const ModelRegistration kReg({"llama", "mistral"}, &make_llama);`
struct ModelRegistration {
  ModelRegistration(std::initializer_list<std::string_view> model_types, ModelFactory factory);
};
std::vector<std::string> registered_model_types();

// Loads PATH: a model directory (config.json, generation_config.json, safetensors) or a GGUF
// file (llama, qwen2, qwen3 as llama.cpp converts them; formats/gguf_model.h). Both go through
// the same factory and WeightLoader. Throws FileError naming the file for anything malformed or
// an unknown model_type / architecture.
std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options);
inline std::unique_ptr<Model> load_model(const std::string& path) { return load_model(path, LoadOptions{}); }

}  // namespace hearth
