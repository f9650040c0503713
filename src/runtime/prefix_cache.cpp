#include "runtime/prefix_cache.h"

#include <algorithm>

#include "base/error.h"

namespace hearth {

namespace {

// FNV-1a over the token ids, finished with a splitmix64 round to spread the bits.
uint64_t hash_tokens(std::span<const int32_t> tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens) {
    h ^= static_cast<uint32_t>(t);
    h *= 1099511628211ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

}  // namespace

PrefixCache::PrefixCache(BlockPool& pool, int64_t block_size, int64_t max_blocks)
    : pool_(pool), block_size_(block_size), max_blocks_(std::max<int64_t>(max_blocks, 0)) {
  HEARTH_CHECK(block_size > 0);
}

PrefixCache::~PrefixCache() { clear(); }

void PrefixCache::clear() {
  for (const auto& [block, e] : entries_) pool_.release(block);
  entries_.clear();
  index_.clear();
  leaves_.clear();
}

int32_t PrefixCache::find(int32_t parent, std::span<const int32_t> tokens) const {
  auto [lo, hi] = index_.equal_range(Key{parent, hash_tokens(tokens)});
  for (auto it = lo; it != hi; ++it) {
    const Entry& e = entries_.at(it->second);
    if (std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end())) return it->second;
  }
  return -1;
}

void PrefixCache::touch(int32_t block, Entry& e) {
  if (e.children == 0) leaves_.erase({e.last_use, block});
  e.last_use = ++clock_;
  if (e.children == 0) leaves_.insert({e.last_use, block});
}

std::vector<int32_t> PrefixCache::match(std::span<const int32_t> tokens, int64_t limit) {
  std::vector<int32_t> out;
  if (!enabled()) return out;
  limit = std::min<int64_t>(limit, static_cast<int64_t>(tokens.size()));
  int32_t parent = -1;
  for (int64_t start = 0; start + block_size_ <= limit; start += block_size_) {
    const int32_t b = find(parent, tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(block_size_)));
    if (b < 0) break;
    out.push_back(b);
    parent = b;
  }
  // Deepest first, so that a chain's parents are always more recently used than its leaf.
  for (auto it = out.rbegin(); it != out.rend(); ++it) {
    touch(*it, entries_.at(*it));
    pool_.retain(*it);
  }
  return out;
}

void PrefixCache::insert(std::span<const int32_t> tokens, std::span<const int32_t> blocks, int64_t n_valid) {
  if (!enabled()) return;
  n_valid = std::min<int64_t>(n_valid, static_cast<int64_t>(tokens.size()));
  const int64_t n_full = std::min<int64_t>(n_valid / block_size_, static_cast<int64_t>(blocks.size()));
  int32_t parent = -1;
  std::vector<int32_t> chain;
  for (int64_t i = 0; i < n_full; ++i) {
    auto block_tokens = tokens.subspan(static_cast<size_t>(i * block_size_), static_cast<size_t>(block_size_));
    int32_t b = find(parent, block_tokens);
    if (b < 0) {
      b = blocks[static_cast<size_t>(i)];
      if (entries_.count(b) != 0) break;  // the block caches another prefix (not expected)
      // A new entry. Link it to its parent first, so that making room cannot evict the parent
      // (the rest of the chain are parents already, so none of it is a leaf either).
      if (parent >= 0) {
        Entry& p = entries_.at(parent);
        if (p.children++ == 0) leaves_.erase({p.last_use, parent});
      }
      bool room = true;
      while (room && n_entries() >= max_blocks_) room = evict_one();
      if (!room) {
        if (parent >= 0) {
          Entry& p = entries_.at(parent);
          if (--p.children == 0) leaves_.insert({p.last_use, parent});
        }
        break;
      }
      pool_.retain(b);
      Entry e{Key{parent, hash_tokens(block_tokens)}, std::vector<int32_t>(block_tokens.begin(), block_tokens.end())};
      index_.emplace(e.key, b);
      entries_.emplace(b, std::move(e));
      leaves_.insert({0, b});  // touched below
    }
    chain.push_back(b);
    parent = b;
  }
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) touch(*it, entries_.at(*it));
}

bool PrefixCache::evict_one() {
  if (leaves_.empty()) return false;
  erase(leaves_.begin()->second);
  return true;
}

void PrefixCache::erase(int32_t block) {
  auto it = entries_.find(block);
  HEARTH_CHECK(it != entries_.end() && it->second.children == 0);
  Entry& e = it->second;
  leaves_.erase({e.last_use, block});
  auto [lo, hi] = index_.equal_range(e.key);
  for (auto i = lo; i != hi; ++i) {
    if (i->second == block) {
      index_.erase(i);
      break;
    }
  }
  if (e.key.parent >= 0) {
    Entry& p = entries_.at(e.key.parent);
    if (--p.children == 0) {
      leaves_.insert({p.last_use, e.key.parent});
    }
  }
  entries_.erase(it);
  pool_.release(block);
}

}  // namespace hearth
