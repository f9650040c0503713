#include "runtime/block_pool.h"

#include "base/error.h"

namespace hearth {

BlockPool::BlockPool(int64_t n_blocks) : refcount_(static_cast<size_t>(n_blocks), 0) {
  for (int64_t i = n_blocks - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

std::optional<int32_t> BlockPool::allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t b = free_.back();
  free_.pop_back();
  refcount_[static_cast<size_t>(b)] = 1;
  return b;
}

void BlockPool::retain(int32_t block) {
  HEARTH_CHECK(refcount_.at(static_cast<size_t>(block)) > 0);
  ++refcount_[static_cast<size_t>(block)];
}

void BlockPool::release(int32_t block) {
  int32_t& rc = refcount_.at(static_cast<size_t>(block));
  HEARTH_CHECK(rc > 0);
  if (--rc == 0) free_.push_back(block);
}

}  // namespace hearth
