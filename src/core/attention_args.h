// What an attention kernel reads, unpacked from the op's tensors once for every backend
// (ops::attention in core/ops.h gives the semantics). Pointers are on the op's device.
#pragma once

#include <cstdint>

#include "core/ops.h"

namespace hearth {

struct AttentionArgs {
  const float* q;  // [T, Hq, Dh]
  float* out;      // [T, Hq, Dh]
  int64_t T, Hq, Hkv, Dh;
  const void* k_cache;  // [n_blocks, block_size, Hkv, Dh] of kv_dtype
  const void* v_cache;
  DType kv_dtype;  // f32, f16 or bf16
  int64_t block_size;
  const int32_t* seq_starts;    // [S + 1]
  const int32_t* context_lens;  // [S]
  const int32_t* block_tables;  // [S, max_blocks]
  int64_t n_seqs, max_blocks;
  float scale;
  int32_t window;  // <= 0: none
};

inline AttentionArgs attention_args(const Tensor& q, const ops::KvLayer& cache, const ops::AttentionBatch& batch,
                                    float scale, int32_t window, Tensor& out) {
  AttentionArgs a{};
  a.q = q.data<float>();
  a.out = out.data<float>();
  a.T = q.dim(0);
  a.Hq = q.dim(1);
  a.Hkv = cache.k.dim(2);
  a.Dh = q.dim(2);
  a.k_cache = cache.k.raw();
  a.v_cache = cache.v.raw();
  a.kv_dtype = cache.k.dtype();
  a.block_size = cache.k.dim(1);
  a.seq_starts = batch.seq_starts.data<int32_t>();
  a.context_lens = batch.context_lens.data<int32_t>();
  a.block_tables = batch.block_tables.data<int32_t>();
  a.n_seqs = batch.context_lens.dim(0);
  a.max_blocks = batch.block_tables.dim(1);
  a.scale = scale;
  a.window = window;
  return a;
}

}  // namespace hearth
