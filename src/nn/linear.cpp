#include "nn/linear.h"

#include "core/ops.h"

namespace hearth {

Tensor WeightLoader::matrix(const std::string& name, int64_t rows, int64_t cols) const {
  Tensor t = store_.get(name);
  if (t.shape() != Shape({rows, cols})) {
    throw FileError(store_.source(),
                    "tensor '" + name + "' has shape " + t.shape().str() + ", expected " + Shape({rows, cols}).str());
  }
  if (!is_float(t.dtype())) {
    throw FileError(store_.source(), "tensor '" + name + "' has dtype " + std::string(dtype_name(t.dtype())) +
                                         "; expected f32, bf16 or f16");
  }
  if (options_.weight_dtype && *options_.weight_dtype != t.dtype()) return t.to(*options_.weight_dtype);
  return t;
}

Tensor WeightLoader::vector_f32(const std::string& name, int64_t n) const {
  Tensor t = store_.get(name);
  if (t.shape() != Shape({n})) {
    throw FileError(store_.source(),
                    "tensor '" + name + "' has shape " + t.shape().str() + ", expected " + Shape({n}).str());
  }
  if (!is_float(t.dtype())) {
    throw FileError(store_.source(), "tensor '" + name + "' has dtype " + std::string(dtype_name(t.dtype())) +
                                         "; expected a float type");
  }
  return t.to(DType::kF32);
}

Tensor WeightLoader::optional_vector_f32(const std::string& name, int64_t n) const {
  return store_.has(name) ? vector_f32(name, n) : Tensor();
}

Linear Linear::load(const WeightLoader& w, const std::string& prefix, int64_t in, int64_t out) {
  return Linear{w.matrix(prefix + ".weight", out, in), w.optional_vector_f32(prefix + ".bias", out)};
}

Tensor Linear::forward(Context& ctx, const Tensor& x) const {
  Tensor y = Tensor::empty({x.dim(0), weight.dim(0)}, DType::kF32);
  ops::matmul(ctx, x, weight, bias, y);
  return y;
}

RmsNorm RmsNorm::load(const WeightLoader& w, const std::string& name, int64_t dim, float eps) {
  return RmsNorm{w.vector_f32(name, dim), eps};
}

Tensor RmsNorm::forward(Context& ctx, const Tensor& x) const {
  Tensor y = Tensor::empty(x.shape(), DType::kF32);
  ops::rms_norm(ctx, x, weight, eps, y);
  return y;
}

}  // namespace hearth
