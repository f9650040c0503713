// Running a loaded model the way the model tests compare them: one prefill's logits at every
// position, and a greedy continuation.
#pragma once

#include <vector>

#include "base/thread_pool.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/generation.h"

namespace hearth::testing {

// Logits [tokens, vocab] of one prefill over `tokens` (2 threads).
inline Tensor prefill_logits(const Model& m, const std::vector<int32_t>& tokens) {
  ThreadPool pool(2);
  Engine engine(m, Context{&pool, kCpu}, EngineOptions{.block_size = 16, .kv_tokens = 128});
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

}  // namespace hearth::testing
