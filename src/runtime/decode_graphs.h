// Decode steps on a GPU as recorded device graphs: a step of S sequences that each add one
// token (S <= kMaxSeqs) replays the graph recorded for S, one launch instead of a launch per
// kernel. Each graph owns its inputs, a Batch whose tensors keep one place and one shape (block
// tables as wide as the whole pool) and the rows' sampling parameters, refreshed by one copy per
// step; the graph's kernels read them when they run.
#pragma once

#include <array>
#include <memory>
#include <span>
#include <vector>

#include "models/model.h"

namespace hearth {

class DecodeGraphs {
 public:
  static constexpr int64_t kMaxSeqs = 8;

  // For `model` writing into `kv` (both outlive this) on ctx's device.
  DecodeGraphs(const Model& model, KvCache& kv);
  ~DecodeGraphs();

  // Whether the step can replay a graph: one new token per sequence, its logits only, at most
  // kMaxSeqs sequences, and graphs not found missing on this device.
  bool fits(const std::vector<SeqStep>& steps) const;
  // What a step leaves on the device, valid until the next run: logits [S, vocab] and the ids
  // drawn from them [S] i32 (ops::sample; so a step copies only S ids to the host).
  struct Outputs {
    Tensor logits, ids;
  };
  // Runs the step (fits() holds), drawing row i's id with rows[i] (none: the argmax). The first
  // step of each size runs eagerly and then records the graph (recording queues nothing, and the
  // eager run has loaded every kernel first).
  Outputs run(Context& ctx, const std::vector<SeqStep>& steps, std::span<const SampleRow> rows = {});
  int64_t replays() const { return replays_; }

 private:
  struct Recorded {
    Tensor inputs;  // i32: sample rows, tokens, positions, slots, seq_starts, context_lens, logits_rows, block_tables
    Batch batch;    // views of `inputs`
    Tensor sample_rows;  // [S, 6] view of `inputs`
    Outputs out;         // written by each replay
    std::unique_ptr<DeviceGraph> graph;
  };
  void upload(Context& ctx, Recorded& r, const std::vector<SeqStep>& steps, std::span<const SampleRow> rows) const;

  const Model& model_;
  KvCache& kv_;
  bool unsupported_ = false;  // the device records no graphs
  int64_t replays_ = 0;
  std::array<std::unique_ptr<Recorded>, kMaxSeqs + 1> by_size_;
};

// rows as ops::sample's rows tensor [R, 6] i32, on the CPU.
Tensor sample_rows(std::span<const SampleRow> rows);
// edits as ops::edit_logits's edits tensor [E, 5] i32, on the CPU.
Tensor logit_edits(std::span<const LogitEdit> edits);

}  // namespace hearth
