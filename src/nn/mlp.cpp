#include "nn/mlp.h"

#include <array>

#include "core/ops.h"

namespace hearth {

GatedMlp GatedMlp::load(const WeightLoader& w, const std::string& prefix, int64_t hidden, int64_t intermediate) {
  return GatedMlp{Linear::load(w, prefix + ".gate_proj", hidden, intermediate),
                  Linear::load(w, prefix + ".up_proj", hidden, intermediate),
                  Linear::load(w, prefix + ".down_proj", intermediate, hidden)};
}

void GatedMlp::add_to(Context& ctx, Tensor& residual, const RmsNorm& norm) const {
  const int64_t T = residual.dim(0), I = gate.out_features();
  Tensor g = Tensor::empty({T, I}, DType::kF32, ctx.device), u = Tensor::empty({T, I}, DType::kF32, ctx.device);
  const std::array<ops::MatmulPart, 2> gate_up = {gate.part(g), up.part(u)};
  ops::gated_mlp(ctx, residual, norm.weight, norm.eps, gate_up, down.part(residual, true));
}

}  // namespace hearth
