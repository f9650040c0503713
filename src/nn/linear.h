// Basic layers and the typed weight loader they share.
#pragma once

#include <optional>
#include <string>

#include "core/context.h"
#include "core/tensor.h"
#include "formats/weight_store.h"

namespace hearth {

struct LoadOptions {
  // Convert matrices to this dtype at load time (tests, --dtype); default keeps the file's.
  std::optional<DType> weight_dtype;
};

// Reads tensors from a WeightStore with the shape checks and load-time conversions every
// layer needs. Errors name the tensor and both shapes.
class WeightLoader {
 public:
  WeightLoader(const WeightStore& store, LoadOptions options) : store_(store), options_(options) {}
  // A [rows, cols] float matrix, zero-copy unless a dtype conversion was asked for.
  Tensor matrix(const std::string& name, int64_t rows, int64_t cols) const;
  // A [n] vector converted to f32 (norm weights, biases). Optional: undefined when absent.
  Tensor vector_f32(const std::string& name, int64_t n) const;
  Tensor optional_vector_f32(const std::string& name, int64_t n) const;
  bool has(const std::string& name) const { return store_.has(name); }
  const WeightStore& store() const { return store_; }

 private:
  const WeightStore& store_;
  LoadOptions options_;
};

// y = x w^T + b. weight: [out, in]; bias: [out] f32 or undefined.
struct Linear {
  Tensor weight;
  Tensor bias;
  // Loads PREFIX.weight (and PREFIX.bias when present).
  static Linear load(const WeightLoader& w, const std::string& prefix, int64_t in, int64_t out);
  int64_t out_features() const { return weight.dim(0); }
  // x: [T, in] -> [T, out]
  Tensor forward(Context& ctx, const Tensor& x) const;
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
