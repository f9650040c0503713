// The prompt cache: full KV blocks of earlier sequences, found again by their exact token
// prefix, so a request that resends a history (multi-turn chat, agents) computes only what
// is new. It lives on the paged KV blocks: an entry is one block the cache holds a reference
// on, keyed by (parent block, the block's tokens). The parent link makes a key name the whole
// prefix exactly, with no hash-collision risk; since a key names its parent block, only
// leaves (entries no other entry extends) are ever evicted, least recently used first.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/block_pool.h"

namespace hearth {

class PrefixCache {
 public:
  // max_blocks: the most blocks the cache may hold (its byte cap / bytes per block); 0 disables it.
  PrefixCache(BlockPool& pool, int64_t block_size, int64_t max_blocks);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The cached blocks that hold the longest prefix of tokens[0, limit) made of whole blocks,
  // each retained once for the caller (who releases them like its own).
  std::vector<int32_t> match(std::span<const int32_t> tokens, int64_t limit);
  // Offers a sequence's blocks; the first n_valid tokens have their K/V computed. Whole
  // blocks not cached yet become entries (the cache retains them), within the cap.
  void insert(std::span<const int32_t> tokens, std::span<const int32_t> blocks, int64_t n_valid);
  // Drops the least recently used leaf; false when the cache is empty.
  bool evict_one();
  void clear();

  bool enabled() const { return max_blocks_ > 0; }
  int64_t n_entries() const { return static_cast<int64_t>(entries_.size()); }
  int64_t max_blocks() const { return max_blocks_; }

 private:
  struct Key {
    int32_t parent;  // -1 for the first block of a sequence
    uint64_t hash;   // of the block's tokens; equal hashes are confirmed on the tokens
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return static_cast<size_t>(k.hash ^ (uint64_t(uint32_t(k.parent)) << 1)); }
  };
  struct Entry {
    Key key;
    std::vector<int32_t> tokens;
    int32_t children = 0;
    uint64_t last_use = 0;
  };
  // The cached block that extends `parent` with exactly these tokens, or -1.
  int32_t find(int32_t parent, std::span<const int32_t> tokens) const;
  void touch(int32_t block, Entry& e);
  void erase(int32_t block);

  BlockPool& pool_;
  int64_t block_size_;
  int64_t max_blocks_;
  uint64_t clock_ = 0;
  std::unordered_multimap<Key, int32_t, KeyHash> index_;  // key -> block
  std::unordered_map<int32_t, Entry> entries_;            // block -> entry
  std::set<std::pair<uint64_t, int32_t>> leaves_;         // (last_use, block) of entries with no children
};

}  // namespace hearth
