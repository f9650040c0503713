#include "runtime/decode_graphs.h"

#include <cstring>

#include "base/error.h"
#include "core/device_memory.h"

namespace hearth {
namespace {

// The parts of a batch of S decode rows, in the order they sit in a graph's inputs.
std::vector<const Tensor*> parts(const Batch& b) {
  return {&b.tokens,      &b.positions,        &b.slots, &b.attn.seq_starts, &b.attn.context_lens,
          &b.logits_rows, &b.attn.block_tables};
}

}  // namespace

namespace {

// Structs of 4-byte words as an [n, words] i32 tensor on the CPU, their bytes.
template <typename T>
Tensor word_rows(std::span<const T> items) {
  static_assert(sizeof(T) % 4 == 0);
  Tensor t = Tensor::empty({static_cast<int64_t>(items.size()), int64_t{sizeof(T) / 4}}, DType::kI32, kCpu);
  if (!items.empty()) std::memcpy(t.raw(), items.data(), items.size_bytes());
  return t;
}

}  // namespace

Tensor sample_rows(std::span<const SampleRow> rows) { return word_rows(rows); }
Tensor logit_edits(std::span<const LogitEdit> edits) { return word_rows(edits); }

DecodeGraphs::DecodeGraphs(const Model& model, KvCache& kv) : model_(model), kv_(kv) {}

DecodeGraphs::~DecodeGraphs() = default;

bool DecodeGraphs::fits(const std::vector<SeqStep>& steps) const {
  if (unsupported_ || steps.empty() || static_cast<int64_t>(steps.size()) > kMaxSeqs) return false;
  for (const SeqStep& s : steps) {
    if (s.tokens.size() != 1) return false;  // all_logits of one token is its logits
  }
  return true;
}

void DecodeGraphs::upload(Context& ctx, Recorded& r, const std::vector<SeqStep>& steps,
                          std::span<const SampleRow> rows) const {
  // Built on the host as any batch (and checked there), with the tables the graph's width.
  const Batch host = Batch::build(steps, kv_.block_size, kv_.n_blocks);
  const std::vector<SampleRow> greedy(rows.empty() ? steps.size() : 0);
  HEARTH_CHECK(rows.empty() || rows.size() == steps.size());
  const Tensor params = sample_rows(rows.empty() ? std::span<const SampleRow>(greedy) : rows);
  std::vector<int32_t> packed(params.data<int32_t>(), params.data<int32_t>() + params.numel());
  packed.reserve(static_cast<size_t>(r.inputs.numel()));
  for (const Tensor* t : parts(host)) packed.insert(packed.end(), t->data<int32_t>(), t->data<int32_t>() + t->numel());
  HEARTH_CHECK(static_cast<int64_t>(packed.size()) == r.inputs.numel());
  device_memory(ctx.device.type).to_device(ctx.device, r.inputs.raw(), packed.data(), r.inputs.nbytes());
}

namespace {

DecodeGraphs::Outputs forward(Context& ctx, const Model& model, const Batch& batch, const Tensor& rows, KvCache& kv) {
  DecodeGraphs::Outputs out{model.forward(ctx, batch, kv), Tensor()};
  out.ids = Tensor::empty({out.logits.dim(0)}, DType::kI32, ctx.device);
  ops::sample(ctx, out.logits, rows, out.ids);
  return out;
}

}  // namespace

DecodeGraphs::Outputs DecodeGraphs::run(Context& ctx, const std::vector<SeqStep>& steps,
                                        std::span<const SampleRow> rows) {
  HEARTH_CHECK(fits(steps));
  const auto S = static_cast<int64_t>(steps.size());
  std::unique_ptr<Recorded>& slot = by_size_[static_cast<size_t>(S)];
  if (slot != nullptr) {
    upload(ctx, *slot, steps, rows);
    slot->graph->replay();
    ++replays_;
    return slot->out;
  }
  auto r = std::make_unique<Recorded>();
  const int64_t width = kv_.n_blocks;
  constexpr int64_t kRowWords = sizeof(SampleRow) / 4;
  r->inputs = Tensor::empty({6 * S + 1 + S * width + S * kRowWords}, DType::kI32, ctx.device);
  int64_t at = 0;
  auto next = [&](const Shape& shape) {
    const Tensor t = r->inputs.slice_rows(at, at + shape.numel()).reshape(shape);
    at += shape.numel();
    return t;
  };
  r->sample_rows = next({S, kRowWords});  // first: its 64-bit fields stay 8-byte aligned
  r->batch.tokens = next({S});
  r->batch.positions = next({S});
  r->batch.slots = next({S});
  r->batch.attn.seq_starts = next({S + 1});
  r->batch.attn.context_lens = next({S});
  r->batch.logits_rows = next({S});
  r->batch.attn.block_tables = next({S, width});
  upload(ctx, *r, steps, rows);
  const Outputs eager = forward(ctx, model_, r->batch, r->sample_rows, kv_);
  Recorded& rec = *r;
  rec.graph = ops::record_graph(ctx, [&] { rec.out = forward(ctx, model_, rec.batch, rec.sample_rows, kv_); });
  if (rec.graph == nullptr) {
    unsupported_ = true;
  } else {
    slot = std::move(r);
  }
  return eager;
}

}  // namespace hearth
