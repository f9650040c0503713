// Multi-head self-attention with GQA over the paged KV cache: projections, optional q/k
// RMSNorm (Qwen3), rotary embedding, cache write, varlen attention, output projection.
#pragma once

#include "nn/batch.h"
#include "nn/linear.h"
#include "nn/rope.h"

namespace hearth {

struct AttentionShape {
  int64_t hidden = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
};

struct Attention {
  AttentionShape shape;
  Linear q, k, v, o;  // biases present when the checkpoint has them
  RmsNorm q_norm;     // per-head norms over head_dim; undefined when the model has none
  RmsNorm k_norm;
  float scale = 1.0f;  // softmax scale, usually 1/sqrt(head_dim)
  int32_t window = 0;  // sliding window in tokens; 0 = full causal

  // Loads PREFIX.{q,k,v,o}_proj and, when present, PREFIX.{q,k}_norm.
  static Attention load(const WeightLoader& w, const std::string& prefix, const AttentionShape& shape, float norm_eps);

  // residual: [T, hidden] += attention(norm(residual))
  void add_to(Context& ctx, Tensor& residual, const RmsNorm& norm, const Batch& batch, const Rope& rope,
              ops::KvLayer& kv) const;
};

}  // namespace hearth
