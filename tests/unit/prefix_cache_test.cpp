#include "runtime/prefix_cache.h"

#include <gtest/gtest.h>

#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/generation.h"
#include "test_util.h"

namespace hearth {
namespace {

std::vector<int32_t> iota_tokens(int32_t from, int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = from + i;
  return t;
}

// A sequence's blocks as the engine would have them: freshly allocated, one per 4 tokens.
std::vector<int32_t> allocate(BlockPool& pool, size_t n) {
  std::vector<int32_t> b;
  for (size_t i = 0; i < n; ++i) b.push_back(*pool.allocate());
  return b;
}

void release(BlockPool& pool, const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) pool.release(b);
}

TEST(PrefixCache, MatchesWholeBlocksOfTheLongestPrefix) {
  BlockPool pool(16);
  PrefixCache cache(pool, 4, 16);
  const auto tokens = iota_tokens(100, 10);  // 2 whole blocks + 2 tokens
  const auto blocks = allocate(pool, 3);
  cache.insert(tokens, blocks, 10);
  EXPECT_EQ(cache.n_entries(), 2) << "only whole computed blocks are cached";
  release(pool, blocks);
  EXPECT_EQ(pool.n_free(), 14) << "the cache holds its two blocks";

  auto longer = tokens;
  longer.push_back(7);
  EXPECT_EQ(cache.match(longer, 11), (std::vector<int32_t>{blocks[0], blocks[1]}));
  EXPECT_EQ(pool.refcount(blocks[0]), 2) << "a match is retained for the caller";
  pool.release(blocks[0]);
  pool.release(blocks[1]);
  // The limit keeps the last token out of a match; a diverging block stops it.
  EXPECT_EQ(cache.match(std::vector<int32_t>(tokens.begin(), tokens.begin() + 8), 7).size(), 1u);
  pool.release(blocks[0]);
  auto diverged = tokens;
  diverged[5] = 1;
  EXPECT_EQ(cache.match(diverged, 10), (std::vector<int32_t>{blocks[0]}));
  pool.release(blocks[0]);
  // Same second block after a different first block is a different prefix.
  auto other_start = tokens;
  other_start[0] = 1;
  EXPECT_TRUE(cache.match(other_start, 10).empty());
}

TEST(PrefixCache, EvictsLeavesLeastRecentlyUsedFirstWithinItsCap) {
  BlockPool pool(16);
  PrefixCache cache(pool, 2, 3);
  const auto a = iota_tokens(0, 4), b = iota_tokens(50, 4);
  const auto ba = allocate(pool, 2), bb = allocate(pool, 2);
  cache.insert(a, ba, 4);
  cache.insert(b, bb, 4);  // over the cap of 3: a's leaf (older) goes, b's chain stays
  release(pool, ba);
  release(pool, bb);
  EXPECT_EQ(cache.n_entries(), 3);
  EXPECT_EQ(cache.match(a, 4).size(), 1u) << "a keeps its first block, its leaf was evicted";
  pool.release(ba[0]);
  EXPECT_EQ(cache.match(b, 4).size(), 2u);
  pool.release(bb[0]);
  pool.release(bb[1]);
  // Evicting everything gives every block back, leaves before their parents.
  while (cache.evict_one()) {
  }
  EXPECT_EQ(cache.n_entries(), 0);
  EXPECT_EQ(pool.n_free(), 16);
}

TEST(PrefixCache, DisabledCacheHoldsNothing) {
  BlockPool pool(4);
  PrefixCache cache(pool, 2, 0);
  const auto t = iota_tokens(0, 4);
  const auto blocks = allocate(pool, 2);
  cache.insert(t, blocks, 4);
  release(pool, blocks);
  EXPECT_EQ(pool.n_free(), 4);
  EXPECT_TRUE(cache.match(t, 4).empty());
}

// The engine path: a repeated prompt reuses its blocks, gives the same greedy tokens, and
// the cache hands blocks back when a request needs the whole pool.
TEST(PrefixCache, EngineReusesPromptsAndGivesBlocksBack) {
  const std::string dir = testing::data_path("parity/qwen3");
  auto m = load_model(dir);
  ThreadPool threads(1);
  EngineOptions eo{.block_size = 4, .kv_tokens = 64, .prompt_cache_bytes = int64_t{1} << 40};
  Engine engine(*m, Context{&threads, kCpu}, eo);
  const auto prompt = testing::read_ids(dir + "/reference.safetensors", "tokens");
  const auto greedy = testing::read_ids(dir + "/reference.safetensors", "greedy");
  GenerationRequest req;
  req.prompt = prompt;
  req.max_tokens = static_cast<int64_t>(greedy.size());
  req.ignore_eos = true;
  auto run = [&](int64_t* cached) {
    GenerationStream s(engine, req);
    std::vector<int32_t> got;
    while (auto ev = s.next()) got.push_back(ev->token);
    *cached = s.stats().cached_tokens;
    return got;
  };
  int64_t cached = -1;
  EXPECT_EQ(run(&cached), greedy);
  EXPECT_EQ(cached, 0);
  EXPECT_GT(engine.prefix_cache().n_entries(), 0);
  EXPECT_EQ(run(&cached), greedy) << "a cached prefix changes nothing";
  EXPECT_EQ(cached, (static_cast<int64_t>(prompt.size()) - 1) / 4 * 4);
  // A prompt of the prompt and the reply so far (a second turn) reuses the reply's blocks too.
  req.prompt.insert(req.prompt.end(), greedy.begin(), greedy.begin() + 4);
  req.max_tokens = static_cast<int64_t>(greedy.size()) - 4;
  const auto rest = run(&cached);
  EXPECT_EQ(rest, std::vector<int32_t>(greedy.begin() + 4, greedy.end()));
  EXPECT_GE(cached, static_cast<int64_t>(prompt.size()) / 4 * 4);
  // A prompt that needs every block evicts the cache instead of failing.
  req.prompt = std::vector<int32_t>(60, 5);
  req.max_tokens = 4;
  EXPECT_EQ(run(&cached).size(), 4u);
  EXPECT_EQ(cached, 0);
  engine.prefix_cache().clear();
  EXPECT_EQ(engine.pool().n_free(), engine.pool().n_blocks());
}

}  // namespace
}  // namespace hearth
