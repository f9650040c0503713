// The engine owns a model's KV cache and block pool and runs flat-batch steps over any set
// of sequences: prefill, chunked prefill, decode and mixtures of them are the same call.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "models/model.h"
#include "runtime/block_pool.h"
#include "runtime/decode_graphs.h"
#include "runtime/prefix_cache.h"
#include "runtime/sampler.h"

namespace hearth {

struct Sequence {
  std::vector<int32_t> tokens;  // prompt + generated so far
  int64_t n_cached = 0;         // tokens whose K/V are in the cache
  std::vector<int32_t> blocks;  // block table
};

struct EngineOptions {
  int64_t block_size = 16;
  // KV capacity in tokens across all sequences; 0 = the model's max context, capped at
  // 4096 (the f32 cache of a large model is big; pages are only touched when used).
  int64_t kv_tokens = 0;
  // Prompt cache cap in bytes of KV; 0 disables it. Cached blocks are pool blocks, so the
  // cache never holds more than the pool, and gives blocks back when the pool runs dry.
  int64_t prompt_cache_bytes = 0;
  // Element type of the KV cache (f32, f16 or bf16); none = the model's default_kv_dtype().
  std::optional<DType> kv_dtype = std::nullopt;
};

class Engine {
 public:
  Engine(const Model& model, Context ctx, EngineOptions options = {});
  ~Engine();

  // One sequence's part of a step: cache its next n_tokens uncached tokens.
  struct Work {
    Sequence* seq;
    int64_t n_tokens;
    bool all_logits = false;
  };
  // Runs one forward for all work items; returns logits [R, vocab] for each item's last new
  // token (or every new token with all_logits), in order. Throws InputError when the KV
  // cache cannot hold the tokens.
  Tensor step(const std::vector<Work>& work);
  // The same, with each of those rows' token drawn on the device (ops::sample with rows[i] for
  // work[i]; temperature 0 takes the argmax), so only the ids cross to the host.
  std::vector<int32_t> step_sample(const std::vector<Work>& work, std::span<const SampleRow> rows);
  // Draws on the device with the Sampler's logit processors and logprobs there too: the rows'
  // logits are edited first (ops::edit_logits; LogitEdit::row is the work item), and with
  // top_logprobs >= 0 each chosen token's logprob and that many alternatives come back
  // (ops::logprobs, from the edited logits), not the logits.
  struct Draws {
    std::span<const SampleRow> rows;
    std::span<const LogitEdit> edits = {};
    int top_logprobs = -1;
  };
  struct Drawn {
    std::vector<int32_t> ids;
    std::vector<TokenLogprobs> logprobs;  // one per row with top_logprobs >= 0, else none
  };
  Drawn step_draw(const std::vector<Work>& work, const Draws& draws);
  // Starts a new sequence (no blocks yet) from the prompt cache: attaches the cached blocks
  // of the longest whole-block prefix of its tokens, leaving at least the last token to
  // compute (its logits are needed, and a shared block is never written). Returns the number
  // of tokens reused.
  int64_t attach_cached_prefix(Sequence& seq);
  // Offers the sequence's computed blocks to the prompt cache, then returns its blocks to the pool.
  void release(Sequence& seq);

  const Model& model() const { return model_; }
  Context& context() { return ctx_; }
  const Context& context() const { return ctx_; }
  const KvCache& kv() const { return kv_; }
  const BlockPool& pool() const { return pool_; }
  const PrefixCache& prefix_cache() const { return prefix_cache_; }
  PrefixCache& prefix_cache() { return prefix_cache_; }
  int64_t block_bytes() const;  // KV bytes of one block, all layers
  int64_t block_size() const { return options_.block_size; }
  // Decode steps that replayed a recorded device graph (0 on the CPU).
  int64_t graph_replays() const { return graphs_ ? graphs_->replays() : 0; }

 private:
  void reserve(Sequence& seq, int64_t n_total);
  // step's work: the logits on the host (draws null), or what the draws give.
  struct Output {
    Tensor logits_or_ids, chosen = {}, top_ids = {}, top = {};
  };
  Output run(const std::vector<Work>& work, const Draws* draws);
  const Model& model_;
  Context ctx_;
  EngineOptions options_;
  KvCache kv_;
  BlockPool pool_;
  PrefixCache prefix_cache_;              // after pool_: it holds references into it
  std::unique_ptr<DecodeGraphs> graphs_;  // on a GPU, unless HEARTH_DEVICE_GRAPHS=0; after kv_
};

}  // namespace hearth
