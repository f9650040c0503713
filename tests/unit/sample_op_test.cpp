// ops::sample (on the CPU: its scalar reference, cpu::sample_row) against the host Sampler: the
// same parameters and seed draw the same tokens, ties go to the lower id, greedy rows take the
// argmax, bad rows and non-finite logits give errors or some token, never a crash. The engine's
// step_sample runs it after a forward. The CUDA kernel is held to the reference exactly in
// tests/gpu/cuda_ops_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/isa.h"
#include "backends/cpu/kernels.h"
#include "base/error.h"
#include "core/ops.h"
#include "runtime/decode_graphs.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "test_util.h"

namespace hearth {
namespace {

std::vector<float> random_logits(std::mt19937& rng, int64_t V, float scale, float step) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(V));
  for (float& x : v) x = step > 0 ? std::round(d(rng) / step) * step : d(rng);  // step > 0: many ties
  return v;
}

std::vector<SamplingParams> parameter_sets(int64_t V) {
  std::vector<SamplingParams> sets;
  for (float temperature : {0.5f, 1.0f, 1.7f})
    for (int64_t top_k : {int64_t{0}, int64_t{1}, int64_t{5}, V})
      for (float top_p : {1.0f, 0.9f, 0.3f})
        for (float min_p : {0.0f, 0.05f, 0.5f})
          sets.push_back({.temperature = temperature, .top_k = top_k, .top_p = top_p, .min_p = min_p});
  return sets;
}

int32_t op_sample(const std::vector<float>& logits, const SampleRow& row) {
  Context ctx{nullptr, kCpu};
  const int64_t V = static_cast<int64_t>(logits.size());
  const Tensor x = Tensor::from_f32({1, V}, logits.data());
  const Tensor rows = sample_rows({&row, 1});
  Tensor ids = Tensor::empty({1}, DType::kI32);
  ops::sample(ctx, x, rows, ids);
  return ids.data<int32_t>()[0];
}

// The op's weights are exp in 2^-40 units by its own exp, the Sampler's float exp summed in
// double: a draw within that rounding of a boundary may fall on the neighbour. Over these
// fixed seeds none does; the bound leaves room for another libm.
TEST(SampleOp, DrawsTheHostSamplersTokens) {
  std::mt19937 rng(11);
  int64_t draws = 0, differ = 0;
  for (int64_t V : {1, 7, 1000, 32000}) {
    for (float step : {0.0f, 0.5f}) {
      const std::vector<float> logits = random_logits(rng, V, 3.0f, step);
      uint64_t seed = 100;
      for (SamplingParams p : parameter_sets(V)) {
        p.seed = ++seed;
        Sampler host(p), device(p);
        for (int i = 0; i < (V >= 32000 ? 3 : 8); ++i) {
          const int32_t want = host.sample(logits.data(), V);
          const int32_t got = op_sample(logits, device.device_row());
          ASSERT_GE(got, 0);
          ASSERT_LT(got, V);
          ++draws;
          if (got != want) {
            ++differ;
            ADD_FAILURE() << "V=" << V << " step=" << step << " T=" << p.temperature << " top_k=" << p.top_k
                          << " top_p=" << p.top_p << " min_p=" << p.min_p << " draw " << i << ": got " << got
                          << " want " << want;
          }
        }
      }
    }
  }
  EXPECT_GT(draws, 1000);
  EXPECT_EQ(differ, 0);
}

TEST(SampleOp, TiesGoToTheLowerId) {
  // Five equal best logits: top_k = 2 keeps ids 3 and 9 (the lowest two), whatever the draw.
  std::vector<float> logits(20, -1.0f);
  for (int i : {3, 9, 12, 15, 18}) logits[size_t(i)] = 2.0f;
  std::set<int32_t> seen;
  for (uint64_t u = 0; u < 64; ++u) {
    const int32_t id = op_sample(logits, {.temperature = 1.0f, .top_k = 2, .u = u << 58});
    EXPECT_TRUE(id == 3 || id == 9) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 2u);
  // u = 0 takes the first kept token; just under 1, the last.
  EXPECT_EQ(op_sample(logits, {.temperature = 1.0f, .u = 0}), 3);
  EXPECT_EQ(op_sample(logits, {.temperature = 1.0f, .top_k = 5, .u = ~uint64_t{0}}), 18);
}

TEST(SampleOp, GreedyRowsTakeTheArgmax) {
  std::mt19937 rng(12);
  for (int64_t V : {1, 3, 5000}) {
    const std::vector<float> logits = random_logits(rng, V, 2.0f, 0.25f);
    const auto want = static_cast<int32_t>(cpu::argmax_row(cpu::Isa::kScalar, logits.data(), V));
    EXPECT_EQ(op_sample(logits, {}), want) << V;
    EXPECT_EQ(op_sample(logits, {.temperature = 0.0f, .top_k = 1, .u = 12345}), want) << V;
  }
}

TEST(SampleOp, NonFiniteLogitsGiveSomeToken) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<std::vector<float>> rows = {
      {nan, nan, nan}, {-inf, -inf, -inf}, {1.0f, inf, 2.0f}, {nan, 1.0f, -inf}, {inf, inf, nan}};
  for (const auto& logits : rows) {
    for (const SampleRow& row : {SampleRow{}, SampleRow{.temperature = 1.0f, .top_p = 0.5f, .u = 1ull << 63},
                                 SampleRow{.temperature = 0.7f, .top_k = 2, .log_min_p = std::log(0.1f)}}) {
      const int32_t id = op_sample(logits, row);
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 3);
    }
  }
  // A number beats NaN; an infinite logit is the only token with weight (inf - inf is NaN, so
  // the row's kept weight is 0 and it gives its best token).
  EXPECT_EQ(op_sample({nan, 1.0f, -inf}, {.temperature = 1.0f, .u = ~uint64_t{0}}), 1);
  EXPECT_EQ(op_sample({1.0f, inf, 2.0f}, {.temperature = 1.0f, .u = 1ull << 63}), 1);
}

TEST(SampleOp, RefusesBadShapes) {
  Context ctx{nullptr, kCpu};
  const std::vector<float> v(8, 0.0f);
  const Tensor x = Tensor::from_f32({2, 4}, v.data());
  Tensor ids = Tensor::empty({2}, DType::kI32);
  const Tensor five = Tensor::zeros({2, 5}, DType::kI32), one_row = Tensor::zeros({1, 6}, DType::kI32);
  EXPECT_THROW(ops::sample(ctx, x, five, ids), InputError);
  EXPECT_THROW(ops::sample(ctx, x, one_row, ids), InputError);
  Tensor one_id = Tensor::empty({1}, DType::kI32);
  EXPECT_THROW(ops::sample(ctx, x, Tensor::zeros({2, 6}, DType::kI32), one_id), InputError);
  EXPECT_THROW(ops::sample(ctx, x, Tensor::zeros({2, 6}, DType::kF32), ids), InputError);
}

// ops::logprobs (its CPU reference, core/logprobs.h) against a plain sort and log_softmax in long
// double: the best come out by descending logit, ties by lower id, NaN last; n up to min(V, 20).
TEST(LogprobsOp, IsLogSoftmaxWithTheBestInOrder) {
  Context ctx{nullptr, kCpu};
  std::mt19937 rng(3);
  for (int64_t V : {1, 7, 1000, 32000}) {
    for (float step : {0.0f, 0.5f}) {
      std::vector<float> l = random_logits(rng, V, 3.0f, step);
      if (V > 10) l[3] = NAN, l[4] = -0.0f, l[5] = 0.0f;
      const int64_t R = 1;
      for (int n : {0, 1, 5, 20}) {
        const int64_t k = std::min<int64_t>(n, V);
        const int32_t chosen = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
        const Tensor x = Tensor::from_f32({R, V}, l.data());
        const Tensor ids = Tensor::from_i32({R}, &chosen);
        Tensor lp = Tensor::empty({R}, DType::kF32), top_ids = Tensor::empty({R, k}, DType::kI32),
               top = Tensor::empty({R, k}, DType::kF32);
        ops::logprobs(ctx, x, ids, lp, top_ids, top);
        long double mx = -INFINITY, z = 0;
        for (float v : l)
          if (!std::isnan(v)) mx = std::max<long double>(mx, v);
        for (float v : l) z += std::isnan(v) ? 0 : std::exp(static_cast<long double>(v) - mx);
        auto want = [&](int32_t i) { return static_cast<double>(l[size_t(i)] - mx - std::log(z)); };
        std::vector<int32_t> order(static_cast<size_t>(V));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
          const float va = l[size_t(a)], vb = l[size_t(b)];
          if (std::isnan(va) || std::isnan(vb)) return !std::isnan(va) && std::isnan(vb);
          return va > vb;
        });
        if (!std::isnan(l[size_t(chosen)])) {
          EXPECT_NEAR(lp.data<float>()[0], want(chosen), 1e-5);
        }
        for (int64_t j = 0; j < k; ++j) {
          const int32_t id = top_ids.data<int32_t>()[j];
          ASSERT_EQ(id, order[size_t(j)]) << "V " << V << ", n " << n << ", place " << j;
          if (!std::isnan(l[size_t(id)])) {
            EXPECT_NEAR(top.data<float>()[j], want(id), 1e-5);
          }
        }
      }
    }
  }
}

TEST(LogprobsOp, RefusesBadShapesAndChoices) {
  Context ctx{nullptr, kCpu};
  const std::vector<float> v(8, 0.0f);
  const Tensor x = Tensor::from_f32({2, 4}, v.data());
  const std::vector<int32_t> good{0, 3}, bad{0, 4};
  Tensor lp = Tensor::empty({2}, DType::kF32);
  Tensor ti = Tensor::empty({2, 2}, DType::kI32), t = Tensor::empty({2, 2}, DType::kF32);
  EXPECT_NO_THROW(ops::logprobs(ctx, x, Tensor::from_i32({2}, good.data()), lp, ti, t));
  EXPECT_THROW(ops::logprobs(ctx, x, Tensor::from_i32({2}, bad.data()), lp, ti, t), InputError);
  Tensor ti5 = Tensor::empty({2, 5}, DType::kI32), t5 = Tensor::empty({2, 5}, DType::kF32);  // n > V
  EXPECT_THROW(ops::logprobs(ctx, x, Tensor::from_i32({2}, good.data()), lp, ti5, t5), InputError);
  Tensor lp1 = Tensor::empty({1}, DType::kF32);
  EXPECT_THROW(ops::logprobs(ctx, x, Tensor::from_i32({2}, good.data()), lp1, ti, t), InputError);
}

TEST(EditLogitsOp, RefusesEditsOutsideTheLogits) {
  Context ctx{nullptr, kCpu};
  const std::vector<float> v(8, 1.0f);
  for (const LogitEdit& e : {LogitEdit{.row = 2, .id = 0}, LogitEdit{.row = 0, .id = 4}, LogitEdit{.row = -1, .id = 0},
                             LogitEdit{.row = 0, .id = -1}}) {
    Tensor x = Tensor::from_f32({2, 4}, v.data());
    EXPECT_THROW(ops::edit_logits(ctx, x, logit_edits({&e, 1})), InputError) << e.row << " " << e.id;
  }
  Tensor x = Tensor::from_f32({2, 4}, v.data());
  EXPECT_THROW(ops::edit_logits(ctx, x, Tensor::zeros({1, 4}, DType::kI32)), InputError);
  ops::edit_logits(ctx, x, logit_edits(std::vector<LogitEdit>{}));  // none: nothing to do
  const LogitEdit e{.row = 1, .id = 2, .bias = 1.0f, .penalty = 4.0f, .sub = 0.25f};
  ops::edit_logits(ctx, x, logit_edits({&e, 1}));
  EXPECT_EQ(x.data<float>()[6], 0.25f);  // (1 + 1) / 4 - 0.25
  EXPECT_EQ(x.data<float>()[5], 1.0f);
}

// The engine's device draw, with and without logit processors, with logprobs (on the CPU: the
// ops' references), gives the host Sampler's tokens and logprobs from the same step's logits.
TEST(SampleOp, EngineStepDrawProcessesAndReportsLogprobsAsTheHost) {
  const auto model = load_model(testing::data_path("parity/qwen3"), LoadOptions{});
  const int64_t vocab = model->info().vocab_size;
  for (const SamplingParams& p :
       {SamplingParams{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 5},
        SamplingParams{.repetition_penalty = 1.5f, .logit_bias = {{17, -100.0f}, {3, 4.0f}}},
        SamplingParams{
            .temperature = 0.9f, .top_k = 30, .presence_penalty = 1.0f, .frequency_penalty = 0.5f, .seed = 8}}) {
    Sampler host(p), device(p);
    Engine a(*model, Context{nullptr, kCpu}), b(*model, Context{nullptr, kCpu});
    Sequence sa, sb;
    sa.tokens = sb.tokens = {1, 17, 42, 7};
    for (int step = 0; step < 6; ++step) {
      const int64_t n = step == 0 ? 4 : 1;
      const Tensor logits = a.step({{&sa, n}});
      TokenLogprobs want_lp;
      const int32_t want = host.sample(logits.data<float>(), logits.dim(1), sa.tokens, 4, &want_lp, 5);
      const SampleRow row = device.device_row();
      const Engine::Drawn got = b.step_draw({{&sb, n}}, {{&row, 1}, device.edits(vocab, sb.tokens, 4), 5});
      ASSERT_EQ(got.ids.at(0), want) << "step " << step;
      ASSERT_EQ(got.logprobs.size(), 1u);
      EXPECT_EQ(got.logprobs[0].logprob, want_lp.logprob);
      EXPECT_EQ(got.logprobs[0].top, want_lp.top);
      sa.tokens.push_back(want);
      sb.tokens.push_back(got.ids[0]);
    }
  }
}

}  // namespace
}  // namespace hearth
