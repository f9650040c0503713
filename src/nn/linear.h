// Basic layers and the typed weight loader they share.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/device.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "formats/quant_config.h"
#include "formats/weight_source.h"

namespace hearth {

struct LoadOptions {
  // Convert matrices to this dtype at load time (tests, --dtype); default keeps the file's.
  std::optional<DType> weight_dtype = std::nullopt;
  // The device the model runs on: every weight is loaded into its memory, and quantized
  // matrices take its backend's layout (Backend::prepare).
  Device device = kCpu;
};

// Reads tensors, by Hugging Face name, from a WeightSource (a safetensors directory or a GGUF
// file: formats/weight_source.h) with the shape checks and load-time conversions every layer
// needs. Errors name the tensor as the file names it, and both shapes.
class WeightLoader {
 public:
  WeightLoader(const WeightSource& store, LoadOptions options, QuantConfig quant = {})
      : store_(store), options_(options), quant_(std::move(quant)) {}
  // A [rows, cols] float matrix, zero-copy unless a dtype conversion was asked for.
  Tensor matrix(const std::string& name, int64_t rows, int64_t cols) const;
  // A [n] vector converted to f32 (norm weights, biases). Optional: undefined when absent.
  Tensor vector_f32(const std::string& name, int64_t n) const;
  Tensor optional_vector_f32(const std::string& name, int64_t n) const;
  // The quantized [rows, cols] matrix of module `prefix`, or an undefined one when the module
  // is not quantized: ggml blocks when the source stores PREFIX.weight in a block type (GGUF),
  // else MLX affine when PREFIX.scales exists (PREFIX.weight packed, PREFIX.scales,
  // PREFIX.biases; shapes and dtypes checked against the config's spec).
  QuantizedMatrix quantized(const std::string& prefix, int64_t rows, int64_t cols) const;
  bool has(const std::string& name) const { return store_.has(name); }
  const LoadOptions& options() const { return options_; }
  const QuantConfig& quant() const { return quant_; }
  const WeightSource& store() const { return store_; }

 private:
  std::string quoted(const std::string& name) const { return "tensor '" + store_.stored_name(name) + "'"; }
  QuantizedMatrix ggml_blocks(const std::string& name, GgmlType type, int64_t rows, int64_t cols) const;
  QuantizedMatrix affine(const std::string& prefix, int64_t rows, int64_t cols) const;

  const WeightSource& store_;
  LoadOptions options_;
  QuantConfig quant_;
};

// y = x w^T + b. weight: [out, in] float, or qweight: the same matrix quantized; bias: [out]
// f32 or undefined.
struct RmsNorm;

struct Linear {
  Tensor weight;
  Tensor bias;
  QuantizedMatrix qweight;
  // Loads PREFIX.weight (quantized with PREFIX.scales/.biases when present) and PREFIX.bias.
  static Linear load(const WeightLoader& w, const std::string& prefix, int64_t in, int64_t out);
  int64_t out_features() const { return qweight.defined() ? qweight.rows : weight.dim(0); }
  // x: [T, in] -> [T, out]
  Tensor forward(Context& ctx, const Tensor& x) const;
  // This layer as a part of a matmul group writing y (adding to it where it accumulates).
  ops::MatmulPart part(Tensor& y, bool accumulate = false) const;
  // The same x through several layers (q, k, v; gate, up): their outputs, in order, from one
  // ops::matmul_group; with `norm`, of norm(x) (ops::norm_matmul_group).
  static std::vector<Tensor> forward_group(Context& ctx, const Tensor& x, std::initializer_list<const Linear*> layers,
                                           const RmsNorm* norm = nullptr);
};

// A token embedding table [V, D], float or quantized; tied LM heads reuse it as a Linear.
struct Embedding {
  Tensor table;
  QuantizedMatrix qtable;
  static Embedding load(const WeightLoader& w, const std::string& prefix, int64_t vocab, int64_t dim);
  // ids: [T] i32 -> [T, D] f32
  Tensor forward(Context& ctx, const Tensor& ids) const;
  Linear as_linear() const { return Linear{table, Tensor(), qtable}; }
};

struct RmsNorm {
  Tensor weight;  // [D] f32
  float eps = 1e-6f;
  static RmsNorm load(const WeightLoader& w, const std::string& name, int64_t dim, float eps);
  bool defined() const { return weight.defined(); }
  // x: [..., D] -> new tensor like x
  Tensor forward(Context& ctx, const Tensor& x) const;
};

}  // namespace hearth
