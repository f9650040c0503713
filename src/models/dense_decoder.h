// The pre-norm decoder shared by the dense Llama family (llama, mistral, qwen2, qwen3):
//   x = embed(tokens)
//   per layer: x += attn(rms_norm(x)); x += mlp(rms_norm(x))
//   logits = lm_head(rms_norm(x[rows]))
// Architecture files parse their config into DecoderArgs (windows, head_dim, ...) and
// check the weights that make them different (biases, q/k norms); the math lives here.
#pragma once

#include <vector>

#include "models/model.h"
#include "nn/attention.h"
#include "nn/mlp.h"

namespace hearth {

struct DecoderArgs {
  int64_t vocab_size = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t n_layers = 0;
  AttentionShape attention;
  float norm_eps = 1e-6f;
  bool tie_embeddings = false;
  int64_t max_context = 0;
  std::vector<int32_t> windows;  // per layer; 0 = full attention

  // The fields every Llama-family config.json has, validated, with HF's defaults.
  static DecoderArgs parse_common(const JsonConfig& config);
  // Per-layer windows from `layer_types` ("sliding_attention" gets sliding_window).
  void windows_from_layer_types(const JsonConfig& config);
  // Qwen style: layer_types when present, else use_sliding_window puts sliding_window on the
  // layers from max_window_layers on.
  void qwen_windows(const JsonConfig& config);
};

class DenseDecoder : public Model {
 public:
  // Loads model.embed_tokens, model.layers.N.{input_layernorm, self_attn, post_attention_layernorm,
  // mlp}, model.norm and lm_head (the embedding when tied).
  DenseDecoder(const DecoderArgs& args, const JsonConfig& config, const WeightLoader& w);
  Tensor forward(Context& ctx, const Batch& batch, KvCache& kv) const override;

  const Attention& attention(int64_t layer) const { return layers_[static_cast<size_t>(layer)].attention; }
  const GatedMlp& mlp(int64_t layer) const { return layers_[static_cast<size_t>(layer)].mlp; }
  const Embedding& embedding() const { return embed_; }
  const Linear& lm_head() const { return lm_head_; }

 private:
  struct Layer {
    RmsNorm input_norm;
    Attention attention;
    RmsNorm post_norm;
    GatedMlp mlp;
  };
  DecoderArgs args_;
  Rope rope_;
  Embedding embed_;  // [vocab, hidden], float or quantized
  std::vector<Layer> layers_;
  void account_weights();  // fills info_'s decode_weight_bytes, params and weight_format
  RmsNorm final_norm_;
  Linear lm_head_;
};

}  // namespace hearth
