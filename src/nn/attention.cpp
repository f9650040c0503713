#include "nn/attention.h"

#include <cmath>

#include "core/ops.h"

namespace hearth {

Attention Attention::load(const WeightLoader& w, const std::string& prefix, const AttentionShape& s, float norm_eps) {
  if (s.n_heads <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0 || s.n_heads % s.n_kv_heads != 0) {
    throw InputError(w.store().source() + ": attention needs heads divisible by kv heads, got " +
                     std::to_string(s.n_heads) + " and " + std::to_string(s.n_kv_heads));
  }
  Attention a;
  a.shape = s;
  a.q = Linear::load(w, prefix + ".q_proj", s.hidden, s.n_heads * s.head_dim);
  a.k = Linear::load(w, prefix + ".k_proj", s.hidden, s.n_kv_heads * s.head_dim);
  a.v = Linear::load(w, prefix + ".v_proj", s.hidden, s.n_kv_heads * s.head_dim);
  a.o = Linear::load(w, prefix + ".o_proj", s.n_heads * s.head_dim, s.hidden);
  if (w.has(prefix + ".q_norm.weight")) a.q_norm = RmsNorm::load(w, prefix + ".q_norm.weight", s.head_dim, norm_eps);
  if (w.has(prefix + ".k_norm.weight")) a.k_norm = RmsNorm::load(w, prefix + ".k_norm.weight", s.head_dim, norm_eps);
  a.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  return a;
}

void Attention::add_to(Context& ctx, Tensor& residual, const RmsNorm& norm, const Batch& batch, const Rope& rope,
                       ops::KvLayer& kv) const {
  const int64_t T = residual.dim(0);
  const std::vector<Tensor> qkv = Linear::forward_group(ctx, residual, {&q, &k, &v}, &norm);
  Tensor qh = qkv[0].reshape({T, shape.n_heads, shape.head_dim});
  Tensor kh = qkv[1].reshape({T, shape.n_kv_heads, shape.head_dim});
  const Tensor vh = qkv[2].reshape({T, shape.n_kv_heads, shape.head_dim});
  if (q_norm.defined()) ops::rms_norm(ctx, qh, q_norm.weight, q_norm.eps, qh);
  if (k_norm.defined()) ops::rms_norm(ctx, kh, k_norm.weight, k_norm.eps, kh);
  ops::rope_kv_write(ctx, qh, kh, vh, batch.positions, rope.inv_freq, rope.attention_factor, batch.slots, kv);
  Tensor attn = Tensor::empty(qh.shape(), DType::kF32, ctx.device);
  ops::attention_project(ctx, qh, kv, batch.attn, scale, window, attn, o.part(residual, true));
}

}  // namespace hearth
