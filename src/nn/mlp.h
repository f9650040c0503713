// The SiLU-gated MLP of Llama-family models: down(silu(gate(x)) * up(x)).
#pragma once

#include "nn/linear.h"

namespace hearth {

struct GatedMlp {
  Linear gate, up, down;
  // Loads PREFIX.{gate,up,down}_proj.
  static GatedMlp load(const WeightLoader& w, const std::string& prefix, int64_t hidden, int64_t intermediate);
  // residual: [T, hidden] += mlp(norm(residual))
  void add_to(Context& ctx, Tensor& residual, const RmsNorm& norm) const;
};

}  // namespace hearth
