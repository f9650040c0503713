// Running a loaded model the way the model tests compare them: one prefill's logits at every
// position, and a greedy continuation.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "base/thread_pool.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/generation.h"

namespace hearth::testing {

// Logits [tokens, vocab] of one prefill over `tokens` (2 threads); the KV cache of kv_dtype
// (none: the model's default).
inline Tensor prefill_logits(const Model& m, const std::vector<int32_t>& tokens,
                             std::optional<DType> kv_dtype = std::nullopt) {
  ThreadPool pool(2);
  Engine engine(m, Context{&pool, kCpu}, EngineOptions{.block_size = 16, .kv_tokens = 128, .kv_dtype = kv_dtype});
  Sequence s;
  s.tokens = tokens;
  return engine.step({{&s, static_cast<int64_t>(tokens.size()), true}});
}

// n greedy tokens after `prompt`, end-of-sequence ignored (1 thread).
inline std::vector<int32_t> greedy(const Model& m, const std::vector<int32_t>& prompt, int64_t n) {
  ThreadPool pool(1);
  Engine engine(m, Context{&pool, kCpu}, EngineOptions{.block_size = 16, .kv_tokens = 128});
  GenerationRequest req;
  req.prompt = prompt;
  req.max_tokens = n;
  req.ignore_eos = true;
  GenerationStream s(engine, req);
  std::vector<int32_t> out;
  while (auto ev = s.next()) out.push_back(ev->token);
  return out;
}

// Decode agrees with prefill: the greedy continuation of `prompt` (n tokens) is, at every step,
// the argmax of the model's own prefill logits, up to rel_tol * (1 + |top|) (the two paths may
// round differently, e.g. x to int8 per group in a different kernel).
inline void expect_greedy_is_prefill_argmax(const Model& m, const std::vector<int32_t>& prompt, int64_t n,
                                            float rel_tol) {
  const std::vector<int32_t> gen = greedy(m, prompt, n);
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), gen.begin(), gen.end() - 1);
  const Tensor all = prefill_logits(m, seq);
  const int64_t V = all.dim(1);
  for (size_t i = 0; i < gen.size(); ++i) {
    const float* row = all.data<float>() + (prompt.size() - 1 + i) * static_cast<size_t>(V);
    const float top = *std::max_element(row, row + V);
    EXPECT_GE(row[gen[i]], top - rel_tol * (1.0f + std::abs(top))) << "step " << i;
  }
}

}  // namespace hearth::testing
