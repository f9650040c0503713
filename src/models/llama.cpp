// Llama 2/3/3.x and Mistral (model_type "llama", "mistral").
// Differences from the shared decoder: optional attention/MLP biases (attention_bias,
// mlp_bias), llama3 rope scaling (nn/rope), and Mistral's sliding window on every layer.
#include "models/dense_decoder.h"

namespace hearth {
namespace {

void require_bias(const DenseDecoder& m, const JsonConfig& c, bool attention_bias, bool mlp_bias) {
  for (int64_t i = 0; i < m.info().n_layers; ++i) {
    const Attention& a = m.attention(i);
    if (attention_bias && !(a.q.bias.defined() && a.k.bias.defined() && a.v.bias.defined() && a.o.bias.defined())) {
      throw FileError(c.path(), "attention_bias is true but layer " + std::to_string(i) + " lacks q/k/v/o_proj.bias");
    }
  }
  (void)mlp_bias;  // GatedMlp loads biases whenever present; nothing else to check.
}

std::unique_ptr<Model> make_llama(const JsonConfig& c, const WeightLoader& w) {
  DecoderArgs args = DecoderArgs::parse_common(c);
  // Mistral: one sliding window for all layers (null or absent = full attention).
  if (c.has("sliding_window") && !c.has("layer_types")) {
    const int64_t window = c.get_int("sliding_window");
    if (window <= 0) throw FileError(c.path(), "'sliding_window' must be positive");
    args.windows.assign(static_cast<size_t>(args.n_layers), static_cast<int32_t>(window));
  }
  args.windows_from_layer_types(c);
  auto model = std::make_unique<DenseDecoder>(args, c, w);
  require_bias(*model, c, c.get_bool("attention_bias", false), c.get_bool("mlp_bias", false));
  return model;
}

const ModelRegistration kRegistration({"llama", "mistral"}, &make_llama);

}  // namespace
}  // namespace hearth
