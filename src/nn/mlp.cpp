#include "nn/mlp.h"

#include "core/ops.h"

namespace hearth {

GatedMlp GatedMlp::load(const WeightLoader& w, const std::string& prefix, int64_t hidden, int64_t intermediate) {
  return GatedMlp{Linear::load(w, prefix + ".gate_proj", hidden, intermediate),
                  Linear::load(w, prefix + ".up_proj", hidden, intermediate),
                  Linear::load(w, prefix + ".down_proj", intermediate, hidden)};
}

void GatedMlp::add_to(Context& ctx, Tensor& residual, const RmsNorm& norm) const {
  std::vector<Tensor> gu = Linear::forward_group(ctx, residual, {&gate, &up}, &norm);
  down.add_silu_mul_to(ctx, residual, gu[0], gu[1]);
}

}  // namespace hearth
