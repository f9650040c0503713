// GGUF files made in the test from the parity fixtures (HF safetensors + config.json) and HF
// tokenizer files, written the way llama.cpp's convert_hf_to_gguf.py writes them: its metadata
// keys, its tensor names, the Q/K row permutation for the llama architecture, rope_freqs.weight
// for Llama 3 RoPE scaling, and the byte-level BPE vocabulary as tokens / token_type / merges.
// The name table and the permutation here are written out independently of src/formats, so
// the loader is checked against them rather than against itself.
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "formats/ggml_quants.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors.h"
#include "test_util.h"

namespace hearth::testing {

using GgufKv = std::vector<std::pair<std::string, GgufValue>>;

inline void set_kv(GgufKv& kv, const std::string& key, GgufValue v) {
  for (auto& [k, old] : kv) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  kv.emplace_back(key, std::move(v));
}
inline void erase_kv(GgufKv& kv, const std::string& key) {
  std::erase_if(kv, [&](const auto& e) { return e.first == key; });
}

// convert_hf_to_gguf's does_token_look_special for the byte-level vocabularies used here.
inline bool looks_special(const std::string& t) {
  auto wrapped = [&](const std::string& open, const std::string& close) {
    return t.size() >= open.size() + close.size() && t.compare(0, open.size(), open) == 0 &&
           t.compare(t.size() - close.size(), close.size(), close) == 0;
  };
  return wrapped("<|", "|>") || wrapped("<\xef\xbd\x9c", "\xef\xbd\x9c>") || t == "<pad>" || t == "<mask>";
}

// The tokenizer metadata the converter writes for a byte-level BPE tokenizer.json in DIR (with
// tokenizer_config.json): every id below vocab_size gets a token ("[PADi]" of type UNUSED for
// holes), added tokens are CONTROL when special or special-looking, else USER_DEFINED.
inline GgufKv gpt2_vocab_metadata(const std::string& dir, const std::string& pre, int64_t vocab_size) {
  const auto tok = nlohmann::json::parse(read_text_file(dir + "/tokenizer.json"));
  const auto cfg = nlohmann::json::parse(read_text_file(dir + "/tokenizer_config.json"));
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int32_t> types(static_cast<size_t>(vocab_size), 0);
  for (const auto& [text, id] : tok.at("model").at("vocab").items()) {
    if (id.get<int64_t>() < vocab_size) {
      tokens[id.get<size_t>()] = text;
      types[id.get<size_t>()] = 1;
    }
  }
  std::map<std::string, int32_t> added;
  for (const auto& a : tok.at("added_tokens")) {
    const size_t id = a.at("id").get<size_t>();
    if (id >= tokens.size()) continue;
    tokens[id] = a.at("content").get<std::string>();
    types[id] = a.at("special").get<bool>() || looks_special(tokens[id]) ? 3 : 4;
    added[tokens[id]] = static_cast<int32_t>(id);
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] == 0) {
      tokens[i] = "[PAD" + std::to_string(i) + "]";
      types[i] = 5;
    }
  }
  std::vector<std::string> merges;
  for (const auto& m : tok.at("model").at("merges"))
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  GgufKv kv;
  set_kv(kv, "tokenizer.ggml.model", "gpt2");
  set_kv(kv, "tokenizer.ggml.pre", pre);
  set_kv(kv, "tokenizer.ggml.tokens", tokens);
  set_kv(kv, "tokenizer.ggml.token_type", types);
  set_kv(kv, "tokenizer.ggml.merges", merges);
  for (const char* which : {"bos", "eos", "pad", "unk"}) {
    const std::string key = std::string(which) + "_token";
    if (!cfg.contains(key) || !cfg[key].is_string()) continue;
    auto it = added.find(cfg[key].get<std::string>());
    if (it == added.end()) continue;
    const std::string gguf_key =
        std::string(which) == "pad" ? "padding" : (std::string(which) == "unk" ? "unknown" : which);
    set_kv(kv, "tokenizer.ggml." + gguf_key + "_token_id", static_cast<uint32_t>(it->second));
  }
  if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
    set_kv(kv, "tokenizer.ggml.add_bos_token", cfg["add_bos_token"].get<bool>());
  if (cfg.contains("chat_template") && cfg["chat_template"].is_string())
    set_kv(kv, "tokenizer.chat_template", cfg["chat_template"].get<std::string>());
  return kv;
}

struct GgufFixtureOptions {
  GgmlType matrix_type = GgmlType::kF32;  // 2-D weights; norms, biases and rope_freqs stay F32
  std::function<void(GgufKv&)> edit_metadata = {};
  // The type of a tensor (by GGUF name) instead of the default; a type the writer cannot encode
  // gets zero bytes.
  std::function<std::optional<GgmlType>(const std::string&)> type_for = {};
  std::string drop = {};  // a tensor (GGUF name) to leave out
};

// llama.cpp's names for the HF tensors of the parity fixtures.
inline std::string gguf_name(const std::string& hf) {
  static const std::pair<const char*, const char*> kLayer[] = {
      {"input_layernorm.weight", "attn_norm.weight"},    {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.weight", "attn_k.weight"},      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.weight", "attn_v.weight"},      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"}, {"self_attn.o_proj.bias", "attn_output.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"}, {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},       {"mlp.gate_proj.bias", "ffn_gate.bias"},
      {"mlp.up_proj.weight", "ffn_up.weight"},           {"mlp.up_proj.bias", "ffn_up.bias"},
      {"mlp.down_proj.weight", "ffn_down.weight"},       {"mlp.down_proj.bias", "ffn_down.bias"},
  };
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  const size_t dot = hf.find('.', prefix.size());
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size()), rest = hf.substr(dot + 1);
  for (const auto& [from, to] : kLayer)
    if (rest == from) return "blk." + layer + "." + to;
  throw std::runtime_error("no GGUF name for " + hf);
}

// convert_hf_to_gguf's LlamaModel.permute: w.reshape(heads, 2, rows / heads / 2, ...)
// .swapaxes(1, 2): row h*hd + 2j + s takes HF row h*hd + s*hd/2 + j.
inline Tensor permute_for_ggml(const Tensor& w, int64_t heads) {
  const int64_t rows = w.dim(0), hd = rows / heads, cols = w.numel() / rows;
  Tensor out = Tensor::empty(w.shape(), DType::kF32);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < hd / 2; ++j)
      for (int64_t s = 0; s < 2; ++s)
        std::memcpy(out.data<float>() + (h * hd + 2 * j + s) * cols,
                    w.data<float>() + (h * hd + s * (hd / 2) + j) * cols, static_cast<size_t>(cols) * 4);
  return out;
}

inline std::vector<uint8_t> encode_tensor(const Tensor& t, GgmlType type) {
  const int64_t cols = t.dim(-1), rows = t.numel() / cols;
  const float* x = t.data<float>();
  std::vector<uint8_t> out(static_cast<size_t>(rows) * row_bytes(type, cols), 0);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* dst = out.data() + static_cast<size_t>(r) * row_bytes(type, cols);
    const float* src = x + r * cols;
    switch (type) {
      case GgmlType::kF32: std::memcpy(dst, src, static_cast<size_t>(cols) * 4); break;
      case GgmlType::kF16:
        for (int64_t i = 0; i < cols; ++i) {
          const uint16_t h = f32_to_f16(src[i]);
          std::memcpy(dst + 2 * i, &h, 2);
        }
        break;
      case GgmlType::kQ8_0: quantize_row_q8_0(src, reinterpret_cast<BlockQ8_0*>(dst), cols); break;
      case GgmlType::kQ4_0: quantize_row_q4_0(src, reinterpret_cast<BlockQ4_0*>(dst), cols); break;
      default: break;  // zero bytes: for tests of types Hearth refuses
    }
  }
  return out;
}

// Llama 3 rope_freqs.weight as the converter computes it: per frequency, 1 (short
// wavelengths), factor (long) or the smooth interpolation's divisor.
inline std::vector<float> llama3_rope_freqs(const nlohmann::json& rope, double base, int64_t dim) {
  const double factor = rope.at("factor"), low = rope.at("low_freq_factor"), high = rope.at("high_freq_factor");
  const double old_ctx = rope.at("original_max_position_embeddings");
  std::vector<float> out;
  for (int64_t i = 0; i < dim; i += 2) {
    const float freq = static_cast<float>(1.0 / std::pow(base, static_cast<double>(static_cast<float>(i) / dim)));
    const double wavelen = 2 * std::numbers::pi / freq;
    if (wavelen < old_ctx / high) {
      out.push_back(1.0f);
    } else if (wavelen > old_ctx / low) {
      out.push_back(static_cast<float>(factor));
    } else {
      const double smooth = (old_ctx / wavelen - low) / (high - low);
      out.push_back(static_cast<float>(1 / ((1 - smooth) / factor + smooth)));
    }
  }
  return out;
}

// Writes tests/data/parity/FIXTURE as a GGUF file at OUT (with the tiny tokenizer's vocabulary,
// which fits the fixtures' 1000 ids) and returns OUT.
inline std::string write_gguf_fixture(const std::string& fixture, const std::string& out,
                                      const GgufFixtureOptions& options = {}) {
  const std::string dir = data_path("parity/" + fixture);
  const auto c = nlohmann::json::parse(read_text_file(dir + "/config.json"));
  const std::string type = c.at("model_type");
  const std::string arch = type == "mistral" ? "llama" : type;
  const std::string a = arch + ".";
  const int64_t heads = c.at("num_attention_heads"), kv_heads = c.at("num_key_value_heads");
  const int64_t hidden = c.at("hidden_size");
  const int64_t head_dim = c.contains("head_dim") ? c.at("head_dim").get<int64_t>() : hidden / heads;
  const nlohmann::json rope = c.at("rope_parameters");
  GgufKv kv;
  set_kv(kv, "general.architecture", arch);
  set_kv(kv, "general.name", fixture);
  set_kv(kv, a + "context_length", c.at("max_position_embeddings").get<uint32_t>());
  set_kv(kv, a + "embedding_length", static_cast<uint32_t>(hidden));
  set_kv(kv, a + "feed_forward_length", c.at("intermediate_size").get<uint32_t>());
  set_kv(kv, a + "block_count", c.at("num_hidden_layers").get<uint32_t>());
  set_kv(kv, a + "attention.head_count", static_cast<uint32_t>(heads));
  set_kv(kv, a + "attention.head_count_kv", static_cast<uint32_t>(kv_heads));
  set_kv(kv, a + "rope.freq_base", rope.at("rope_theta").get<float>());
  set_kv(kv, a + "attention.layer_norm_rms_epsilon", c.at("rms_norm_eps").get<float>());
  if (c.contains("head_dim")) {
    set_kv(kv, a + "attention.key_length", static_cast<uint32_t>(head_dim));
    set_kv(kv, a + "attention.value_length", static_cast<uint32_t>(head_dim));
  }
  if (arch == "llama") {
    set_kv(kv, a + "vocab_size", c.at("vocab_size").get<uint32_t>());
    set_kv(kv, a + "rope.dimension_count", static_cast<uint32_t>(head_dim));
  }
  const std::string rope_type = rope.value("rope_type", "default");
  if (rope_type == "linear" || rope_type == "yarn") {
    set_kv(kv, a + "rope.scaling.type", rope_type);
    set_kv(kv, a + "rope.scaling.factor", rope.at("factor").get<float>());
    if (rope_type == "yarn")
      set_kv(kv, a + "rope.scaling.original_context_length",
             rope.at("original_max_position_embeddings").get<uint32_t>());
  }
  if (c.contains("sliding_window") && c["sliding_window"].is_number())
    set_kv(kv, a + "attention.sliding_window", c["sliding_window"].get<uint32_t>());
  set_kv(kv, "general.file_type", uint32_t{0});
  for (auto& [k, v] : gpt2_vocab_metadata(data_path("tiny_tokenizer"), "gpt2", c.at("vocab_size")))
    set_kv(kv, k, std::move(v));
  if (options.edit_metadata) options.edit_metadata(kv);

  // Tensors in the converter's order: as stored, then rope_freqs.
  std::vector<std::pair<std::string, Tensor>> tensors;
  auto file = SafetensorsFile::open(dir + "/model.safetensors");
  for (const SafetensorsEntry& e : file->header().tensors) {
    Tensor t = file->tensor(e).to(DType::kF32);
    const std::string name = gguf_name(e.name);
    if (name == options.drop) continue;
    if (arch == "llama" && name.find(".attn_q.") != std::string::npos) t = permute_for_ggml(t, heads);
    if (arch == "llama" && name.find(".attn_k.") != std::string::npos) t = permute_for_ggml(t, kv_heads);
    tensors.emplace_back(name, t);
  }
  if (rope_type == "llama3") {
    const std::vector<float> f = llama3_rope_freqs(rope, rope.at("rope_theta").get<double>(), head_dim);
    tensors.emplace_back("rope_freqs.weight", Tensor::from_f32({static_cast<int64_t>(f.size())}, f.data()));
  }
  GgufWriter w(out, {.overwrite = true});
  for (auto& [k, v] : kv) w.set_metadata(k, v);
  std::vector<GgmlType> types;
  for (const auto& [name, t] : tensors) {
    GgmlType type_of = t.rank() == 2 ? options.matrix_type : GgmlType::kF32;
    if (options.type_for) type_of = options.type_for(name).value_or(type_of);
    types.push_back(type_of);
    w.add_tensor(name, type_of, t.shape());
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::vector<uint8_t> bytes = encode_tensor(tensors[i].second, types[i]);
    w.write_tensor_data(tensors[i].first, bytes.data(), bytes.size());
  }
  w.finish();
  return out;
}

}  // namespace hearth::testing
