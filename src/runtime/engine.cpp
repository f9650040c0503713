#include "runtime/engine.h"

#include <algorithm>

#include "base/error.h"
#include "base/knobs.h"

namespace hearth {
namespace {

int64_t blocks_for(const Model& m, const EngineOptions& o) {
  int64_t tokens = o.kv_tokens > 0 ? o.kv_tokens : std::min<int64_t>(m.info().max_context, 4096);
  tokens = std::max<int64_t>(tokens, o.block_size);
  return (tokens + o.block_size - 1) / o.block_size;
}

int64_t cache_blocks(const KvCache& kv, const EngineOptions& o) {
  if (o.prompt_cache_bytes <= 0 || kv.n_blocks == 0) return 0;
  const auto per_block = static_cast<int64_t>(kv.bytes()) / kv.n_blocks;
  return per_block == 0 ? kv.n_blocks : std::min(kv.n_blocks, o.prompt_cache_bytes / per_block);
}

}  // namespace

Engine::Engine(const Model& model, Context ctx, EngineOptions options)
    : model_(model),
      ctx_(ctx),
      options_(options),
      kv_(model.allocate_kv(blocks_for(model, options), options.block_size,
                            options.kv_dtype.value_or(model.default_kv_dtype()), ctx.device)),
      pool_(kv_.n_blocks),
      prefix_cache_(pool_, options.block_size, cache_blocks(kv_, options)) {
  HEARTH_CHECK(options.block_size > 0);
  if (ctx.device.type != DeviceType::kCpu && knobs::device_graphs())
    graphs_ = std::make_unique<DecodeGraphs>(model_, kv_);
}

Engine::~Engine() = default;

int64_t Engine::block_bytes() const { return kv_.n_blocks == 0 ? 0 : static_cast<int64_t>(kv_.bytes()) / kv_.n_blocks; }

void Engine::reserve(Sequence& seq, int64_t n_total) {
  const int64_t need = (n_total + options_.block_size - 1) / options_.block_size;
  while (static_cast<int64_t>(seq.blocks.size()) < need) {
    auto b = pool_.allocate();
    // The prompt cache gives back blocks before a request is refused for want of them.
    while (!b && prefix_cache_.evict_one()) b = pool_.allocate();
    if (!b) {
      throw InputError("KV cache full: " + std::to_string(n_total) + " tokens need " + std::to_string(need) +
                       " blocks of " + std::to_string(options_.block_size) + ", " + std::to_string(pool_.n_free()) +
                       " free");
    }
    seq.blocks.push_back(*b);
  }
}

Tensor Engine::step(const std::vector<Work>& work) { return run(work, nullptr).logits_or_ids; }

std::vector<int32_t> Engine::step_sample(const std::vector<Work>& work, std::span<const SampleRow> rows) {
  return step_draw(work, Draws{rows}).ids;
}

Engine::Drawn Engine::step_draw(const std::vector<Work>& work, const Draws& draws) {
  HEARTH_CHECK(draws.rows.size() == work.size());
  const Output out = run(work, &draws);
  const Tensor& ids = out.logits_or_ids;
  Drawn drawn{{ids.data<int32_t>(), ids.data<int32_t>() + ids.numel()}, {}};
  if (draws.top_logprobs >= 0) {
    const int64_t n = out.top.dim(1);
    for (int64_t r = 0; r < ids.numel(); ++r) {
      TokenLogprobs& lp = drawn.logprobs.emplace_back();
      lp.logprob = out.chosen.data<float>()[r];
      for (int64_t j = 0; j < n; ++j)
        lp.top.emplace_back(out.top_ids.data<int32_t>()[r * n + j], out.top.data<float>()[r * n + j]);
    }
  }
  return drawn;
}

Engine::Output Engine::run(const std::vector<Work>& work, const Draws* draws) {
  std::vector<SeqStep> steps;
  for (const Work& w : work) {
    Sequence& s = *w.seq;
    if (w.n_tokens <= 0 || s.n_cached + w.n_tokens > static_cast<int64_t>(s.tokens.size())) {
      throw InputError("engine step: asked for " + std::to_string(w.n_tokens) + " tokens, sequence has " +
                       std::to_string(s.tokens.size() - static_cast<size_t>(s.n_cached)) + " uncached");
    }
    reserve(s, s.n_cached + w.n_tokens);
    steps.push_back(SeqStep{std::span<const int32_t>(s.tokens.data() + s.n_cached, static_cast<size_t>(w.n_tokens)),
                            static_cast<int32_t>(s.n_cached), std::span<const int32_t>(s.blocks), w.all_logits});
  }
  // Built on the host, run on the context's device; logits (or the ids drawn from them, and
  // their logprobs) come back to the host.
  auto forward = [&]() -> Output {
    const std::span<const SampleRow> rows = draws ? draws->rows : std::span<const SampleRow>{};
    Tensor logits, ids;
    if (graphs_ && graphs_->fits(steps)) {
      const DecodeGraphs::Outputs out = graphs_->run(ctx_, steps, rows);
      logits = out.logits;
      ids = out.ids;
    } else {
      logits = model_.forward(ctx_, Batch::build(steps, options_.block_size).to_device(ctx_.device), kv_);
    }
    if (!draws) return {logits};
    HEARTH_CHECK(static_cast<int64_t>(rows.size()) == logits.dim(0));
    if (!draws->edits.empty()) {
      // The graph drew from the logits before the edits: draw again from the edited ones.
      ops::edit_logits(ctx_, logits, logit_edits(draws->edits).to_device(ctx_.device));
      ids = Tensor();
    }
    if (!ids.defined()) {
      ids = Tensor::empty({logits.dim(0)}, DType::kI32, ctx_.device);
      ops::sample(ctx_, logits, sample_rows(rows).to_device(ctx_.device), ids);
    }
    Output out{ids};
    if (draws->top_logprobs >= 0) {
      const int64_t R = logits.dim(0), n = std::min<int64_t>(draws->top_logprobs, logits.dim(1));
      out.chosen = Tensor::empty({R}, DType::kF32, ctx_.device);
      out.top_ids = Tensor::empty({R, n}, DType::kI32, ctx_.device);
      out.top = Tensor::empty({R, n}, DType::kF32, ctx_.device);
      ops::logprobs(ctx_, logits, ids, out.chosen, out.top_ids, out.top);
    }
    return out;
  };
  Output out;
  try {
    out = forward();
    for (Tensor* t : {&out.logits_or_ids, &out.chosen, &out.top_ids, &out.top}) {
      if (t->defined()) *t = t->to_device(kCpu);
    }
  } catch (...) {
    // What the device's kernels recorded in this failed step is this step's, not the next one's.
    try {
      ops::check_errors(ctx_);
    } catch (const InputError&) {
    }
    throw;
  }
  ops::check_errors(ctx_);
  for (const Work& w : work) w.seq->n_cached += w.n_tokens;
  return out;
}

int64_t Engine::attach_cached_prefix(Sequence& seq) {
  HEARTH_CHECK(seq.blocks.empty() && seq.n_cached == 0);
  const auto n = static_cast<int64_t>(seq.tokens.size());
  seq.blocks = prefix_cache_.match(seq.tokens, n - 1);
  seq.n_cached = static_cast<int64_t>(seq.blocks.size()) * options_.block_size;
  return seq.n_cached;
}

void Engine::release(Sequence& seq) {
  prefix_cache_.insert(seq.tokens, seq.blocks, seq.n_cached);
  for (int32_t b : seq.blocks) pool_.release(b);
  seq.blocks.clear();
  seq.n_cached = 0;
}

}  // namespace hearth
