// The paged KV storage of a model: per layer, K and V as [n_blocks, block_size, Hkv, Dh].
// Which blocks belong to which sequence is the runtime's business (runtime/block_pool).
#pragma once

#include <vector>

#include "core/ops.h"

namespace hearth {

struct KvCache {
  int64_t n_blocks = 0;
  int64_t block_size = 0;
  std::vector<ops::KvLayer> layers;

  static KvCache allocate(int64_t n_layers, int64_t n_blocks, int64_t block_size, int64_t n_kv_heads, int64_t head_dim,
                          DType dtype, Device device = kCpu) {
    KvCache c;
    c.n_blocks = n_blocks;
    c.block_size = block_size;
    for (int64_t i = 0; i < n_layers; ++i) {
      c.layers.push_back({Tensor::zeros({n_blocks, block_size, n_kv_heads, head_dim}, dtype, device),
                          Tensor::zeros({n_blocks, block_size, n_kv_heads, head_dim}, dtype, device)});
    }
    return c;
  }
  size_t bytes() const {
    size_t n = 0;
    for (const auto& l : layers) n += l.k.nbytes() + l.v.nbytes();
    return n;
  }
};

}  // namespace hearth
