#include "models/dense_decoder.h"

#include <map>

#include "base/error.h"
#include "core/ops.h"

namespace hearth {
namespace {

int64_t positive(const JsonConfig& c, const std::string& key, int64_t v) {
  if (v <= 0) throw FileError(c.path(), "'" + key + "' must be positive, got " + std::to_string(v));
  return v;
}

}  // namespace

DecoderArgs DecoderArgs::parse_common(const JsonConfig& c) {
  DecoderArgs a;
  a.vocab_size = positive(c, "vocab_size", c.get_int("vocab_size"));
  a.hidden = positive(c, "hidden_size", c.get_int("hidden_size"));
  a.intermediate = positive(c, "intermediate_size", c.get_int("intermediate_size"));
  a.n_layers = positive(c, "num_hidden_layers", c.get_int("num_hidden_layers"));
  a.attention.hidden = a.hidden;
  a.attention.n_heads = positive(c, "num_attention_heads", c.get_int("num_attention_heads"));
  a.attention.n_kv_heads = positive(c, "num_key_value_heads", c.get_int("num_key_value_heads", a.attention.n_heads));
  if (c.has("head_dim")) {
    a.attention.head_dim = positive(c, "head_dim", c.get_int("head_dim"));
  } else {
    if (a.hidden % a.attention.n_heads != 0)
      throw FileError(c.path(), "'hidden_size' is not divisible by 'num_attention_heads'");
    a.attention.head_dim = a.hidden / a.attention.n_heads;
  }
  if (a.attention.n_heads % a.attention.n_kv_heads != 0) {
    throw FileError(c.path(), "'num_attention_heads' is not divisible by 'num_key_value_heads'");
  }
  const double eps = c.get_float("rms_norm_eps", 1e-6);
  // A negative or huge epsilon turns every norm into NaN or zero: garbage, not an error, later.
  if (!(eps > 0 && eps < 1)) throw FileError(c.path(), "'rms_norm_eps' must be in (0, 1), got " + std::to_string(eps));
  a.norm_eps = static_cast<float>(eps);
  a.tie_embeddings = c.get_bool("tie_word_embeddings", false);
  a.max_context = positive(c, "max_position_embeddings", c.get_int("max_position_embeddings", 4096));
  const std::string act = c.get_string("hidden_act", "silu");
  if (act != "silu") throw Unsupported(c.path() + ": hidden_act '" + act + "' is not supported (silu is)");
  a.windows.assign(static_cast<size_t>(a.n_layers), 0);
  return a;
}

void DecoderArgs::windows_from_layer_types(const JsonConfig& c) {
  const std::vector<std::string> types = c.get_string_list("layer_types");
  if (types.empty()) return;
  if (static_cast<int64_t>(types.size()) != n_layers) {
    throw FileError(c.path(), "'layer_types' has " + std::to_string(types.size()) + " entries for " +
                                  std::to_string(n_layers) + " layers");
  }
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] == "sliding_attention") {
      windows[i] = static_cast<int32_t>(positive(c, "sliding_window", c.get_int("sliding_window")));
    } else if (types[i] != "full_attention") {
      throw Unsupported(c.path() + ": layer type '" + types[i] + "' is not supported");
    }
  }
}

void DecoderArgs::qwen_windows(const JsonConfig& c) {
  if (c.has("layer_types")) return windows_from_layer_types(c);
  if (!c.get_bool("use_sliding_window", false)) return;
  const int32_t window = static_cast<int32_t>(positive(c, "sliding_window", c.get_int("sliding_window")));
  for (int64_t i = c.get_int("max_window_layers", n_layers); i < n_layers; ++i)
    windows[static_cast<size_t>(i)] = window;
}

DenseDecoder::DenseDecoder(const DecoderArgs& args, const JsonConfig& config, const WeightLoader& w) : args_(args) {
  rope_ = Rope::from_config(config, args.attention.head_dim);
  // GGUF files carry Llama 3's RoPE scaling as per-frequency divisors (docs/gguf.md).
  if (w.has("rope_freqs.weight")) {
    const Tensor divisors = w.vector_f32("rope_freqs.weight", rope_.inv_freq.dim(0)).to_device(kCpu);
    for (int64_t i = 0; i < divisors.dim(0); ++i) rope_.inv_freq.data<float>()[i] /= divisors.data<float>()[i];
  }
  rope_.inv_freq = rope_.inv_freq.to_device(w.options().device);
  embed_ = Embedding::load(w, "model.embed_tokens", args.vocab_size, args.hidden);
  for (int64_t i = 0; i < args.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i);
    Layer layer{RmsNorm::load(w, p + ".input_layernorm.weight", args.hidden, args.norm_eps),
                Attention::load(w, p + ".self_attn", args.attention, args.norm_eps),
                RmsNorm::load(w, p + ".post_attention_layernorm.weight", args.hidden, args.norm_eps),
                GatedMlp::load(w, p + ".mlp", args.hidden, args.intermediate)};
    layer.attention.window = args.windows[static_cast<size_t>(i)];
    layers_.push_back(std::move(layer));
  }
  final_norm_ = RmsNorm::load(w, "model.norm.weight", args.hidden, args.norm_eps);
  lm_head_ = args.tie_embeddings ? embed_.as_linear() : Linear::load(w, "lm_head", args.hidden, args.vocab_size);
  account_weights();
  info_.vocab_size = args.vocab_size;
  info_.hidden = args.hidden;
  info_.n_layers = args.n_layers;
  info_.n_kv_heads = args.attention.n_kv_heads;
  info_.head_dim = args.attention.head_dim;
  info_.max_context = args.max_context;
}

void DenseDecoder::account_weights() {
  std::map<std::string, uint64_t> by_format;
  auto tensor_bytes = [](const Tensor& t) -> uint64_t { return t.defined() ? t.nbytes() : 0; };
  auto matrix = [&](const Linear& l) {
    const bool q = l.qweight.defined();
    const uint64_t bytes =
        q ? tensor_bytes(l.qweight.packed) + tensor_bytes(l.qweight.scales) + tensor_bytes(l.qweight.biases)
          : tensor_bytes(l.weight);
    std::string format = q ? l.qweight.str() : std::string(dtype_name(l.weight.dtype()));
    if (q) format = format.substr(0, format.find(" ["));  // without the shape
    by_format[format] += bytes;
    info_.decode_weight_bytes += bytes + tensor_bytes(l.bias);
    info_.params += static_cast<uint64_t>(q ? l.qweight.rows * l.qweight.cols : l.weight.numel());
  };
  auto norm = [&](const RmsNorm& n) {
    info_.decode_weight_bytes += tensor_bytes(n.weight);
    if (n.weight.defined()) info_.params += static_cast<uint64_t>(n.weight.numel());
  };
  for (const Layer& l : layers_) {
    norm(l.input_norm);
    norm(l.post_norm);
    for (const Linear* m :
         {&l.attention.q, &l.attention.k, &l.attention.v, &l.attention.o, &l.mlp.gate, &l.mlp.up, &l.mlp.down}) {
      matrix(*m);
    }
    norm(l.attention.q_norm);
    norm(l.attention.k_norm);
  }
  norm(final_norm_);
  matrix(lm_head_);
  // The embedding: one row per token; as a tied head it was counted whole above.
  const Linear embed = embed_.as_linear();
  const uint64_t embed_bytes = embed.qweight.defined() ? embed.qweight.nbytes() : tensor_bytes(embed.weight);
  const int64_t rows = embed.qweight.defined() ? embed.qweight.rows : embed.weight.dim(0);
  info_.decode_weight_bytes += embed_bytes / static_cast<uint64_t>(std::max<int64_t>(rows, 1));
  if (!args_.tie_embeddings) info_.params += static_cast<uint64_t>(rows) * static_cast<uint64_t>(args_.hidden);
  uint64_t most = 0;
  for (const auto& [format, bytes] : by_format) {
    if (bytes > most) {
      most = bytes;
      info_.weight_format = format;
    }
  }
}

Tensor DenseDecoder::forward(Context& ctx, const Batch& batch, KvCache& kv) const {
  HEARTH_CHECK(static_cast<int64_t>(kv.layers.size()) == args_.n_layers);
  Tensor x = embed_.forward(ctx, batch.tokens);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    l.attention.add_to(ctx, x, l.input_norm, batch, rope_, kv.layers[i]);
    l.mlp.add_to(ctx, x, l.post_norm);
  }
  // Only the rows that need logits go through the final norm and the LM head (one group, so that
  // a backend may compute the norm inside the head's matvec, as for the layers').
  Tensor rows = Tensor::empty({batch.logits_rows.dim(0), args_.hidden}, DType::kF32, ctx.device);
  ops::embedding(ctx, x, batch.logits_rows, rows);
  return Linear::forward_group(ctx, rows, {&lm_head_}, &final_norm_)[0];
}

}  // namespace hearth
