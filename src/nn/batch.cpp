#include "nn/batch.h"

#include <algorithm>

#include "base/error.h"

namespace hearth {

Batch Batch::build(const std::vector<SeqStep>& seqs, int64_t block_size, int64_t table_width) {
  HEARTH_CHECK(block_size > 0);
  const int64_t S = static_cast<int64_t>(seqs.size());
  int64_t T = 0, max_blocks = 1;
  for (const SeqStep& s : seqs) {
    T += static_cast<int64_t>(s.tokens.size());
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(s.blocks.size()));
  }
  if (table_width > 0) {
    HEARTH_CHECK_MSG(table_width >= max_blocks, "batch: block tables of width " + std::to_string(table_width) +
                                                    " cannot hold " + std::to_string(max_blocks) + " blocks");
    max_blocks = table_width;
  }
  std::vector<int32_t> tokens, positions, slots, starts{0}, ctx, tables(static_cast<size_t>(S * max_blocks), 0), rows;
  for (int64_t si = 0; si < S; ++si) {
    const SeqStep& s = seqs[static_cast<size_t>(si)];
    const int64_t end = s.context_len + static_cast<int64_t>(s.tokens.size());
    if (s.context_len < 0 || end > static_cast<int64_t>(s.blocks.size()) * block_size) {
      throw InputError("batch: sequence " + std::to_string(si) + " needs " + std::to_string(end) +
                       " cache slots, its " + std::to_string(s.blocks.size()) + " blocks hold " +
                       std::to_string(s.blocks.size() * block_size));
    }
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      const int64_t pos = s.context_len + static_cast<int64_t>(i);
      if (s.all_logits || i + 1 == s.tokens.size()) rows.push_back(static_cast<int32_t>(tokens.size()));
      tokens.push_back(s.tokens[i]);
      positions.push_back(static_cast<int32_t>(pos));
      slots.push_back(
          static_cast<int32_t>(s.blocks[static_cast<size_t>(pos / block_size)] * block_size + pos % block_size));
    }
    starts.push_back(static_cast<int32_t>(tokens.size()));
    ctx.push_back(s.context_len);
    std::copy(s.blocks.begin(), s.blocks.end(), tables.begin() + si * max_blocks);
  }
  Batch b;
  b.tokens = Tensor::from_i32({T}, tokens.data());
  b.positions = Tensor::from_i32({T}, positions.data());
  b.slots = Tensor::from_i32({T}, slots.data());
  b.attn.seq_starts = Tensor::from_i32({S + 1}, starts.data());
  b.attn.context_lens = Tensor::from_i32({S}, ctx.data());
  b.attn.block_tables = Tensor::from_i32({S, max_blocks}, tables.data());
  b.logits_rows = Tensor::from_i32({static_cast<int64_t>(rows.size())}, rows.data());
  return b;
}

Batch Batch::to_device(Device device) const {
  Batch b;
  b.tokens = tokens.to_device(device);
  b.positions = positions.to_device(device);
  b.slots = slots.to_device(device);
  b.attn.seq_starts = attn.seq_starts.to_device(device);
  b.attn.context_lens = attn.context_lens.to_device(device);
  b.attn.block_tables = attn.block_tables.to_device(device);
  b.logits_rows = logits_rows.to_device(device);
  return b;
}

}  // namespace hearth
