// The flat batch every model forward takes: the new tokens of several sequences,
// concatenated, plus where each sequence lives in the paged KV cache.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/ops.h"

namespace hearth {

// One sequence's part of a step.
struct SeqStep {
  std::span<const int32_t> tokens;  // new tokens this step
  int32_t context_len = 0;          // tokens already in the cache
  std::span<const int32_t> blocks;  // the sequence's block table (covers context + new tokens)
  bool all_logits = false;          // logits for every new token, not just the last
};

struct Batch {
  Tensor tokens;             // [T] i32
  Tensor positions;          // [T] i32: absolute positions (= cache index for these models)
  Tensor slots;              // [T] i32: KV slot each new token is written to
  ops::AttentionBatch attn;  // seq_starts [S+1], context_lens [S], block_tables [S, max_blocks]
  Tensor logits_rows;        // [R] i32: rows of the batch that need logits
  int64_t n_tokens() const { return tokens.dim(0); }

  // Throws InputError when a sequence's blocks cannot hold its tokens. The block tables are as
  // wide as the longest one, or `table_width` when that is given (a recorded graph's inputs
  // keep one shape; it must be at least the longest).
  static Batch build(const std::vector<SeqStep>& seqs, int64_t block_size, int64_t table_width = 0);
  // The same batch with every tensor on `device`.
  Batch to_device(Device device) const;
};

}  // namespace hearth
