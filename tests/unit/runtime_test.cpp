#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"
#include "models/model.h"
#include "nn/batch.h"
#include "runtime/block_pool.h"
#include "runtime/engine.h"
#include "runtime/generation.h"
#include "runtime/prompt.h"
#include "runtime/sampler.h"
#include "test_util.h"

namespace hearth {
namespace {

TEST(BlockPool, RefcountsAndReuse) {
  BlockPool pool(3);
  const int32_t a = *pool.allocate(), b = *pool.allocate(), c = *pool.allocate();
  EXPECT_EQ(a, 0);
  EXPECT_FALSE(pool.allocate());
  pool.retain(b);
  pool.release(b);
  EXPECT_EQ(pool.n_free(), 0);
  pool.release(b);
  EXPECT_EQ(pool.n_free(), 1);
  EXPECT_EQ(*pool.allocate(), b);
  pool.release(a);
  pool.release(c);
  EXPECT_EQ(pool.n_free(), 2);
}

TEST(Batch, SlotsAndLogitRowsFollowBlockTables) {
  const std::vector<int32_t> t1{5, 6, 7}, t2{8};
  const std::vector<int32_t> blocks1{3, 0}, blocks2{1, 2};
  const Batch b = Batch::build({{t1, 1, blocks1, false}, {t2, 2, blocks2, true}}, 2);
  // Sequence 1: positions 1, 2, 3 in blocks 3, 0, 0 -> slots 7, 0, 1.
  // Sequence 2: position 2 in its second block (2) -> slot 4.
  auto ints = [](const Tensor& t) { return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel()); };
  EXPECT_EQ(ints(b.positions), (std::vector<int32_t>{1, 2, 3, 2}));
  EXPECT_EQ(ints(b.slots), (std::vector<int32_t>{7, 0, 1, 4}));
  EXPECT_EQ(ints(b.logits_rows), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(ints(b.attn.seq_starts), (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(ints(b.attn.context_lens), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(ints(b.attn.block_tables), (std::vector<int32_t>{3, 0, 1, 2}));
}

TEST(Batch, RefusesTooFewBlocks) {
  const std::vector<int32_t> t{1, 2, 3};
  const std::vector<int32_t> blocks{0};
  EXPECT_THROW(Batch::build({{t, 0, blocks, false}}, 2), InputError);
}

TEST(Sampler, GreedyAndSeededSampling) {
  const std::vector<float> logits{0.1f, 2.0f, 1.9f, -1.0f};
  Sampler greedy(SamplingParams{});
  EXPECT_EQ(greedy.sample(logits.data(), 4), 1);
  Sampler top1(SamplingParams{.temperature = 1.0f, .top_k = 1, .seed = 3});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(top1.sample(logits.data(), 4), 1);
  Sampler tiny_p(SamplingParams{.temperature = 1.0f, .top_p = 0.01f, .seed = 3});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(tiny_p.sample(logits.data(), 4), 1);
  // Same seed, same draws.
  Sampler s1(SamplingParams{.temperature = 0.8f, .seed = 42}), s2(SamplingParams{.temperature = 0.8f, .seed = 42});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s1.sample(logits.data(), 4), s2.sample(logits.data(), 4));
  EXPECT_THROW(Sampler(SamplingParams{.temperature = -1.0f}), InputError);
  EXPECT_THROW(Sampler(SamplingParams{.top_p = 0.0f}), InputError);
}

TEST(Sampler, FrequenciesFollowSoftmax) {
  const std::vector<float> logits{0.0f, 1.0f, 2.0f};
  Sampler s(SamplingParams{.temperature = 1.0f, .seed = 1});
  std::vector<int> counts(3);
  const int n = 30000;
  for (int i = 0; i < n; ++i) counts[static_cast<size_t>(s.sample(logits.data(), 3))]++;
  const double z = 1 + std::exp(1.0) + std::exp(2.0);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(counts[static_cast<size_t>(i)] / double(n), std::exp(double(i)) / z, 0.015);
  // top_p 0.7 keeps tokens 2 (p=.665) and 1 (p=.245) only.
  Sampler p(SamplingParams{.temperature = 1.0f, .top_p = 0.7f, .seed = 1});
  for (int i = 0; i < 2000; ++i) EXPECT_NE(p.sample(logits.data(), 3), 0);
}

TEST(Generation, StopsAtEosUnlessIgnored) {
  const std::string dir = testing::data_path("parity/qwen3");
  auto m = load_model(dir);
  ThreadPool pool(1);
  Engine engine(*m, Context{&pool, kCpu});
  const auto prompt = testing::read_ids(dir + "/reference.safetensors", "tokens");
  const auto greedy = testing::read_ids(dir + "/reference.safetensors", "greedy");
  GenerationRequest req;
  req.prompt = prompt;
  req.max_tokens = 10;
  req.eos_ids = {greedy[3]};  // pretend the 4th greedy token ends the sequence
  {
    GenerationStream s(engine, req);
    std::vector<int32_t> got;
    FinishReason last = FinishReason::kNone;
    while (auto ev = s.next()) {
      got.push_back(ev->token);
      last = ev->finish;
    }
    EXPECT_EQ(got, std::vector<int32_t>(greedy.begin(), greedy.begin() + 4));
    EXPECT_EQ(last, FinishReason::kStop);
  }
  EXPECT_EQ(engine.pool().n_free(), engine.pool().n_blocks()) << "a finished stream returns its blocks";
  req.ignore_eos = true;
  GenerationStream s(engine, req);
  int n = 0;
  while (s.next()) ++n;
  EXPECT_EQ(n, 10);
  EXPECT_EQ(s.finish_reason(), FinishReason::kLength);
}

TEST(Generation, RejectsBadPromptsAndFullCache) {
  const std::string dir = testing::data_path("parity/qwen3");
  auto m = load_model(dir);
  ThreadPool pool(1);
  Engine engine(*m, Context{&pool, kCpu}, EngineOptions{.block_size = 4, .kv_tokens = 8});
  GenerationRequest req;
  EXPECT_THROW(GenerationStream(engine, req), InputError);  // empty
  req.prompt = {1, 2, 100000};
  EXPECT_THROW(GenerationStream(engine, req), InputError);  // outside vocabulary
  req.prompt = std::vector<int32_t>(12, 5);
  GenerationStream s(engine, req);
  EXPECT_THROW(s.next(), InputError);  // 12 tokens do not fit 8 slots
}

}  // namespace
// Request JSON: nesting refused while parsing (a deep document must not reach a recursive copy),
// numbers past a double's range refused as invalid JSON, both as InputError naming the source.
TEST(RequestJson, BoundsNestingAndNumbers) {
  const auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_EQ(parse_request_json(nested(kMaxRequestDepth), "body").dump().size(), 2u * kMaxRequestDepth);
  for (const int depth : {kMaxRequestDepth + 1, 100000, 1000000}) {
    try {
      parse_request_json(nested(depth), "body");
      ADD_FAILURE() << "depth " << depth << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("body nests deeper than 512 levels"), std::string::npos) << e.what();
    }
  }
  const std::string deep_in_object = R"({"tools": [{"a": )" + nested(100000) + "}]}";
  EXPECT_THROW(parse_request_json(deep_in_object, "body"), InputError);
  for (const char* bad : {R"({"t": 1e309})", "{not json", ""}) {
    try {
      parse_request_json(bad, "stdin");
      ADD_FAILURE() << bad << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("stdin is not valid JSON"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parse_request_json(R"({"b": 1, "a": [true, null]})", "x").dump(), R"({"b":1,"a":[true,null]})");
}

}  // namespace hearth
