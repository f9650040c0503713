// Qwen3 (model_type "qwen3"): RMSNorm on each query and key head before rope (q_norm,
// k_norm), an explicit head_dim that need not equal hidden / heads, no q/k/v bias unless
// attention_bias says so.
#include "models/dense_decoder.h"

namespace hearth {
namespace {

std::unique_ptr<Model> make_qwen3(const JsonConfig& c, const WeightLoader& w) {
  DecoderArgs args = DecoderArgs::parse_common(c);
  args.qwen_windows(c);
  auto model = std::make_unique<DenseDecoder>(args, c, w);
  for (int64_t i = 0; i < args.n_layers; ++i) {
    const Attention& a = model->attention(i);
    if (!a.q_norm.defined() || !a.k_norm.defined()) {
      throw FileError(w.store().source(),
                      "qwen3 layer " + std::to_string(i) + " lacks self_attn.q_norm/k_norm weights");
    }
  }
  return model;
}

const ModelRegistration kRegistration({"qwen3"}, &make_qwen3);

}  // namespace
}  // namespace hearth
