#include "nn/mlp.h"

#include "core/ops.h"

namespace hearth {

GatedMlp GatedMlp::load(const WeightLoader& w, const std::string& prefix, int64_t hidden, int64_t intermediate) {
  return GatedMlp{Linear::load(w, prefix + ".gate_proj", hidden, intermediate),
                  Linear::load(w, prefix + ".up_proj", hidden, intermediate),
                  Linear::load(w, prefix + ".down_proj", intermediate, hidden)};
}

Tensor GatedMlp::forward(Context& ctx, const Tensor& x) const {
  Tensor g = gate.forward(ctx, x);
  const Tensor u = up.forward(ctx, x);
  ops::silu_mul(ctx, g, u, g);
  return down.forward(ctx, g);
}

}  // namespace hearth
