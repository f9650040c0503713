// Qwen2 / Qwen2.5 (model_type "qwen2"): biases on q/k/v (never on o), optional sliding
// window on the layers from max_window_layers on (or as layer_types lists).
#include "models/dense_decoder.h"

namespace hearth {
namespace {

std::unique_ptr<Model> make_qwen2(const JsonConfig& c, const WeightLoader& w) {
  DecoderArgs args = DecoderArgs::parse_common(c);
  args.qwen_windows(c);
  auto model = std::make_unique<DenseDecoder>(args, c, w);
  for (int64_t i = 0; i < args.n_layers; ++i) {
    const Attention& a = model->attention(i);
    if (!a.q.bias.defined() || !a.k.bias.defined() || !a.v.bias.defined()) {
      throw FileError(w.store().source(), "qwen2 layer " + std::to_string(i) + " lacks q/k/v_proj.bias");
    }
  }
  return model;
}

const ModelRegistration kRegistration({"qwen2"}, &make_qwen2);

}  // namespace
}  // namespace hearth
