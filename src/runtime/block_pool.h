// Reference-counted KV blocks. A sequence owns a list of block ids; a block returns to the
// free list when its last owner releases it (prefix sharing will add owners later).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace hearth {

class BlockPool {
 public:
  explicit BlockPool(int64_t n_blocks);
  int64_t n_blocks() const { return static_cast<int64_t>(refcount_.size()); }
  int64_t n_free() const { return static_cast<int64_t>(free_.size()); }
  // A block with refcount 1, or nullopt when the pool is exhausted.
  std::optional<int32_t> allocate();
  void retain(int32_t block);
  void release(int32_t block);
  int32_t refcount(int32_t block) const { return refcount_.at(static_cast<size_t>(block)); }

 private:
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_;  // stack; lowest ids handed out first
};

}  // namespace hearth
