#include "nn/linear.h"

#include "base/mapped_file.h"
#include "core/backend.h"
#include "core/ops.h"

namespace hearth {

Tensor WeightLoader::matrix(const std::string& name, int64_t rows, int64_t cols) const {
  if (const std::optional<GgmlType> type = store_.block_type(name)) {
    throw FileError(store_.source(), quoted(name) + " is " + std::string(ggml_type_name(*type)) +
                                         "-quantized; expected a float [" + std::to_string(rows) + ", " +
                                         std::to_string(cols) + "] matrix");
  }
  Tensor t = store_.get(name);
  if (t.shape() != Shape({rows, cols})) {
    throw FileError(store_.source(),
                    quoted(name) + " has shape " + t.shape().str() + ", expected " + Shape({rows, cols}).str());
  }
  if (!is_float(t.dtype())) {
    throw FileError(store_.source(),
                    quoted(name) + " has dtype " + std::string(dtype_name(t.dtype())) + "; expected f32, bf16 or f16");
  }
  if (options_.weight_dtype && *options_.weight_dtype != t.dtype()) t = t.to(*options_.weight_dtype);
  return t.to_device(options_.device);
}

Tensor WeightLoader::vector_f32(const std::string& name, int64_t n) const {
  if (const std::optional<GgmlType> type = store_.block_type(name)) {
    throw FileError(store_.source(),
                    quoted(name) + " is " + std::string(ggml_type_name(*type)) + "-quantized; expected a float vector");
  }
  Tensor t = store_.get(name);
  if (t.shape() != Shape({n})) {
    throw FileError(store_.source(), quoted(name) + " has shape " + t.shape().str() + ", expected " + Shape({n}).str());
  }
  if (!is_float(t.dtype())) {
    throw FileError(store_.source(),
                    quoted(name) + " has dtype " + std::string(dtype_name(t.dtype())) + "; expected a float type");
  }
  return t.to(DType::kF32).to_device(options_.device);
}

Tensor WeightLoader::optional_vector_f32(const std::string& name, int64_t n) const {
  return store_.has(name) ? vector_f32(name, n) : Tensor();
}

QuantizedMatrix WeightLoader::ggml_blocks(const std::string& name, GgmlType type, int64_t rows, int64_t cols) const {
  const GgmlTypeInfo& info = ggml_type_info(type);
  const Tensor blocks = store_.get(name);
  if (cols % info.block_size != 0 || blocks.rank() != 2 ||
      blocks.shape() != Shape({rows, static_cast<int64_t>(row_bytes(type, cols))})) {
    // The logical shape: a row of b bytes holds b / block_bytes blocks of block_size elements.
    std::string got = blocks.shape().str();
    if (blocks.rank() >= 1) {
      std::vector<int64_t> dims;
      for (int i = 0; i < blocks.rank(); ++i) dims.push_back(blocks.dim(i));
      dims.back() = dims.back() / static_cast<int64_t>(info.block_bytes) * info.block_size;
      got = Shape::from(dims.begin(), dims.end()).str();
    }
    throw FileError(store_.source(), quoted(name) + " is " + info.name + " " + got + ", expected [" +
                                         std::to_string(rows) + ", " + std::to_string(cols) + "]");
  }
  return ggml_quantized(type, rows, cols, blocks);
}

QuantizedMatrix WeightLoader::quantized(const std::string& prefix, int64_t rows, int64_t cols) const {
  const std::optional<GgmlType> type = store_.block_type(prefix + ".weight");
  const QuantizedMatrix stored = type ? ggml_blocks(prefix + ".weight", *type, rows, cols) : affine(prefix, rows, cols);
  if (!stored.defined()) return stored;
  QuantizedMatrix q = stored;
  // Q4_0 and Q8_0 are symmetric affine codes: repacked once, they take the affine kernels.
  if (type == GgmlType::kQ4_0 || type == GgmlType::kQ8_0) q = ggml_to_affine(q);
  q = backend_for(options_.device).prepare(q, options_.device);
  // What was copied into another layout need not stay resident in the mapped file.
  auto still_used = [&](const Tensor& t) {
    for (const Tensor* u : {&q.packed, &q.scales, &q.biases})
      if (u->defined() && u->raw() == t.raw()) return true;
    return false;
  };
  for (const Tensor* t : {&stored.packed, &stored.scales, &stored.biases}) {
    if (t->defined() && t->is_view_of_external() && !still_used(*t)) drop_resident_pages(t->raw(), t->nbytes());
  }
  return q;
}

QuantizedMatrix WeightLoader::affine(const std::string& prefix, int64_t rows, int64_t cols) const {
  QuantizedMatrix q;
  if (!store_.has(prefix + ".scales")) return q;
  const std::optional<QuantSpec> spec = quant_.spec_for(prefix);
  if (!spec) {
    throw FileError(store_.source(), "'" + prefix + ".scales' is present but config.json does not quantize '" + prefix +
                                         "' (no quantization section, or the module is marked false)");
  }
  if (cols % spec->group_size != 0 || cols * spec->bits % 32 != 0) {
    throw FileError(store_.source(), "'" + prefix + "' has " + std::to_string(cols) +
                                         " columns, not a multiple of the group size " +
                                         std::to_string(spec->group_size));
  }
  q.spec = *spec;
  q.rows = rows;
  q.cols = cols;
  q.packed = store_.get(prefix + ".weight");
  q.scales = store_.get(prefix + ".scales");
  q.biases = store_.get(prefix + ".biases");
  const Shape packed_shape({rows, cols * spec->bits / 32}), group_shape({rows, cols / spec->group_size});
  if (q.packed.dtype() != DType::kU32 || q.packed.shape() != packed_shape) {
    throw FileError(store_.source(), "quantized '" + prefix + ".weight' is " + q.packed.str() + ", expected " +
                                         packed_shape.str() + " u32 for " + std::to_string(spec->bits) + "-bit [" +
                                         std::to_string(rows) + ", " + std::to_string(cols) + "]");
  }
  for (const auto& [name, t] : {std::pair{".scales", &q.scales}, std::pair{".biases", &q.biases}}) {
    if (!is_float(t->dtype()) || t->shape() != group_shape || t->dtype() != q.scales.dtype()) {
      throw FileError(store_.source(), "'" + prefix + name + "' is " + t->str() + ", expected " + group_shape.str() +
                                           " (groups of " + std::to_string(spec->group_size) +
                                           ") in the dtype of the scales");
    }
  }
  return q;
}

Linear Linear::load(const WeightLoader& w, const std::string& prefix, int64_t in, int64_t out) {
  Linear l;
  l.qweight = w.quantized(prefix, out, in);
  if (!l.qweight.defined()) l.weight = w.matrix(prefix + ".weight", out, in);
  l.bias = w.optional_vector_f32(prefix + ".bias", out);
  return l;
}

Tensor Linear::forward(Context& ctx, const Tensor& x) const {
  Tensor y = Tensor::empty({x.dim(0), out_features()}, DType::kF32, ctx.device);
  if (qweight.defined()) {
    ops::quantized_matmul(ctx, x, qweight, bias, y);
  } else {
    ops::matmul(ctx, x, weight, bias, y);
  }
  return y;
}

ops::MatmulPart Linear::part(Tensor& y, bool accumulate) const {
  return qweight.defined() ? ops::MatmulPart{nullptr, &bias, &y, &qweight, accumulate}
                           : ops::MatmulPart{&weight, &bias, &y, nullptr, accumulate};
}

std::vector<Tensor> Linear::forward_group(Context& ctx, const Tensor& x, std::initializer_list<const Linear*> layers,
                                          const RmsNorm* norm) {
  std::vector<Tensor> ys;
  std::vector<ops::MatmulPart> parts;
  ys.reserve(layers.size());  // parts point into it
  for (const Linear* l : layers) {
    ys.push_back(Tensor::empty({x.dim(0), l->out_features()}, DType::kF32, ctx.device));
    parts.push_back(l->part(ys.back()));
  }
  if (norm != nullptr) {
    ops::norm_matmul_group(ctx, x, norm->weight, norm->eps, parts);
  } else {
    ops::matmul_group(ctx, x, parts);
  }
  return ys;
}

Embedding Embedding::load(const WeightLoader& w, const std::string& prefix, int64_t vocab, int64_t dim) {
  Embedding e;
  e.qtable = w.quantized(prefix, vocab, dim);
  if (!e.qtable.defined()) e.table = w.matrix(prefix + ".weight", vocab, dim);
  return e;
}

Tensor Embedding::forward(Context& ctx, const Tensor& ids) const {
  Tensor out = Tensor::empty({ids.dim(0), qtable.defined() ? qtable.cols : table.dim(1)}, DType::kF32, ctx.device);
  if (qtable.defined()) {
    ops::quantized_embedding(ctx, qtable, ids, out);
  } else {
    ops::embedding(ctx, table, ids, out);
  }
  return out;
}

RmsNorm RmsNorm::load(const WeightLoader& w, const std::string& name, int64_t dim, float eps) {
  return RmsNorm{w.vector_f32(name, dim), eps};
}

Tensor RmsNorm::forward(Context& ctx, const Tensor& x) const {
  Tensor y = Tensor::empty(x.shape(), DType::kF32, ctx.device);
  ops::rms_norm(ctx, x, weight, eps, y);
  return y;
}

}  // namespace hearth
