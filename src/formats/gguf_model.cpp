#include "formats/gguf_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace hearth {
namespace {

// What differs between the architectures this reads.
struct Arch {
  const char* name;        // general.architecture
  const char* model_type;  // config.json's
  bool permuted_qk;        // the converter reorders q/k rows for ggml's interleaved RoPE
};
constexpr Arch kArchs[] = {{"llama", "llama", true}, {"qwen2", "qwen2", false}, {"qwen3", "qwen3", false}};

// Per-layer tensor names, llama.cpp -> HF (under blk.N / model.layers.N), then the global ones.
constexpr std::pair<const char*, const char*> kLayerNames[] = {
    {"attn_norm", "input_layernorm"},    {"ffn_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"},      {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},      {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"}, {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};
constexpr std::pair<const char*, const char*> kGlobalNames[] = {
    {"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}};

// Splits "base.weight" / "base.bias" into base and suffix (".weight"); false otherwise.
bool split_suffix(std::string_view name, std::string_view* base, std::string_view* suffix) {
  for (std::string_view s : {std::string_view(".weight"), std::string_view(".bias")}) {
    if (name.size() > s.size() && name.substr(name.size() - s.size()) == s) {
      *base = name.substr(0, name.size() - s.size());
      *suffix = s;
      return true;
    }
  }
  return false;
}

// "PREFIX<digits>.rest" -> digits and rest.
bool split_layer(std::string_view base, std::string_view prefix, std::string_view* layer, std::string_view* rest) {
  if (base.substr(0, prefix.size()) != prefix) return false;
  const size_t dot = base.find('.', prefix.size());
  if (dot == std::string_view::npos || dot == prefix.size()) return false;
  *layer = base.substr(prefix.size(), dot - prefix.size());
  for (char c : *layer)
    if (c < '0' || c > '9') return false;
  *rest = base.substr(dot + 1);
  return true;
}

// Maps a name through the tables in one direction (from = 0: llama.cpp -> HF, 1: HF -> llama.cpp).
std::string translate(std::string_view name, int from) {
  std::string_view base, suffix, layer, rest;
  if (!split_suffix(name, &base, &suffix)) return std::string(name);
  const std::string_view layer_prefix = from == 0 ? "blk." : "model.layers.";
  if (split_layer(base, layer_prefix, &layer, &rest)) {
    for (const auto& p : kLayerNames) {
      if (rest == (from == 0 ? p.first : p.second)) {
        return (from == 0 ? "model.layers." : "blk.") + std::string(layer) + "." + (from == 0 ? p.second : p.first) +
               std::string(suffix);
      }
    }
    return std::string(name);
  }
  for (const auto& p : kGlobalNames)
    if (base == (from == 0 ? p.first : p.second)) return (from == 0 ? p.second : p.first) + std::string(suffix);
  return std::string(name);
}

const Arch& find_arch(const GgufFile& file) {
  const std::string name = file.metadata().get_string("general.architecture");
  for (const Arch& a : kArchs)
    if (name == a.name) return a;
  throw FileError(file.path(), "general.architecture '" + name + "' is not supported (llama, qwen2, qwen3 are)");
}

int64_t positive(const GgufFile& file, const std::string& key, int64_t v) {
  if (v <= 0) throw FileError(file.path(), "metadata key '" + key + "' must be positive, got " + std::to_string(v));
  return v;
}

// The rows of q/k_proj back in HF's order. The converter made row h*hd + 2j + s (head h,
// pair j, s in {0, 1}) from HF row h*hd + s*hd/2 + j, i.e. w.reshape(heads, 2, hd/2, in)
// .swapaxes(1, 2); this inverts it. Rows of any type move whole (a block-quantized row too).
Tensor unpermute_rows(const GgufFile& file, const GgufTensorInfo& t, int64_t heads) {
  const Tensor src = file.view(t);
  const int64_t rows = src.dim(0);
  if (rows % (2 * heads) != 0) {
    throw FileError(file.path(), "tensor '" + t.name + "' has " + std::to_string(rows) +
                                     " rows, not a multiple of 2 x its " + std::to_string(heads) + " heads");
  }
  const int64_t hd = rows / heads;
  const size_t row_bytes = src.nbytes() / static_cast<size_t>(rows);
  Tensor out = Tensor::empty(src.shape(), src.dtype());
  const auto* in = static_cast<const uint8_t*>(src.raw());
  auto* o = static_cast<uint8_t*>(out.raw());
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < hd / 2; ++j) {
      for (int64_t s = 0; s < 2; ++s) {
        const int64_t hf_row = h * hd + s * (hd / 2) + j, gguf_row = h * hd + 2 * j + s;
        std::memcpy(o + static_cast<size_t>(hf_row) * row_bytes, in + static_cast<size_t>(gguf_row) * row_bytes,
                    row_bytes);
      }
    }
  }
  return out;
}

class GgufWeights final : public WeightSource {
 public:
  GgufWeights(std::shared_ptr<GgufFile> file, const Arch& arch, int64_t n_heads, int64_t n_kv_heads)
      : file_(std::move(file)) {
    for (const GgufTensorInfo& t : file_->tensors()) {
      if (!ggml_type_supported(t.type)) {
        throw FileError(file_->path(), "tensor '" + t.name + "' has ggml type " + std::string(ggml_type_name(t.type)) +
                                           ", which Hearth does not load (supported: F32, F16, BF16, Q8_0, Q4_0, " +
                                           "Q4_K, Q6_K)");
      }
      Entry e{&t, Tensor()};
      const std::string hf = gguf_to_hf_name(t.name);
      if (arch.permuted_qk && t.n_dims >= 1) {
        const bool q = hf.find(".self_attn.q_proj.") != std::string::npos;
        const bool k = hf.find(".self_attn.k_proj.") != std::string::npos;
        if (q || k) e.rewritten = unpermute_rows(*file_, t, q ? n_heads : n_kv_heads);
      }
      total_bytes_ += t.nbytes;
      entries_.emplace(hf, std::move(e));
    }
  }

  bool has(const std::string& name) const override { return entries_.count(name) != 0; }

  Tensor get(const std::string& name) const override {
    auto it = entries_.find(name);
    if (it == entries_.end()) throw FileError(file_->path(), "missing tensor '" + hf_to_gguf_name(name) + "'");
    return it->second.rewritten.defined() ? it->second.rewritten : file_->view(*it->second.info);
  }

  std::optional<GgmlType> block_type(const std::string& name) const override {
    auto it = entries_.find(name);
    if (it == entries_.end() || !ggml_is_block_quantized(it->second.info->type)) return std::nullopt;
    return it->second.info->type;
  }

  std::string stored_name(const std::string& name) const override {
    auto it = entries_.find(name);
    return it != entries_.end() ? it->second.info->name : hf_to_gguf_name(name);
  }

  uint64_t total_bytes() const override { return total_bytes_; }
  const std::string& source() const override { return file_->path(); }

 private:
  struct Entry {
    const GgufTensorInfo* info;
    Tensor rewritten;  // q/k rows in HF order (llama), else undefined: served from the file
  };
  std::shared_ptr<GgufFile> file_;
  std::map<std::string, Entry, std::less<>> entries_;
  uint64_t total_bytes_ = 0;
};

}  // namespace

std::string gguf_to_hf_name(std::string_view gguf_name) { return translate(gguf_name, 0); }
std::string hf_to_gguf_name(std::string_view hf_name) { return translate(hf_name, 1); }

bool is_gguf_path(const std::string& path) { return std::filesystem::is_regular_file(path); }

JsonConfig gguf_hf_config(const GgufFile& file) {
  const GgufMetadata& m = file.metadata();
  const Arch& arch = find_arch(file);
  const std::string a = std::string(arch.name) + ".";
  auto required = [&](const std::string& key) { return positive(file, a + key, m.get_int(a + key)); };
  nlohmann::json c;
  c["model_type"] = arch.model_type;
  c["hidden_act"] = "silu";
  c["hidden_size"] = required("embedding_length");
  c["num_hidden_layers"] = required("block_count");
  c["intermediate_size"] = required("feed_forward_length");
  const int64_t heads = required("attention.head_count");
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] =
      positive(file, a + "attention.head_count_kv", m.get_int_or(a + "attention.head_count_kv", heads));
  c["max_position_embeddings"] = required("context_length");
  c["rms_norm_eps"] = m.get_float(a + "attention.layer_norm_rms_epsilon");
  c["rope_theta"] = m.get_float_or(a + "rope.freq_base", 10000.0);
  int64_t head_dim = c["hidden_size"].get<int64_t>() / heads;
  if (m.contains(a + "attention.key_length")) {
    head_dim = positive(file, a + "attention.key_length", m.get_int(a + "attention.key_length"));
    c["head_dim"] = head_dim;
  }
  if (m.contains(a + "rope.dimension_count")) {
    const int64_t rotary = positive(file, a + "rope.dimension_count", m.get_int(a + "rope.dimension_count"));
    if (rotary != head_dim) c["partial_rotary_factor"] = static_cast<double>(rotary) / static_cast<double>(head_dim);
  }
  // Vocabulary: the token list, else the architecture's count, else the embedding's rows.
  if (const GgufValue* tokens = m.find("tokenizer.ggml.tokens"); tokens != nullptr && tokens->get_if<GgufArray>()) {
    c["vocab_size"] = static_cast<int64_t>(tokens->get_if<GgufArray>()->size());
  } else if (m.contains(a + "vocab_size")) {
    c["vocab_size"] = m.get_int(a + "vocab_size");
  } else if (const GgufTensorInfo* e = file.find("token_embd.weight")) {
    c["vocab_size"] = e->shape().dim(0);
  } else {
    throw FileError(file.path(),
                    "no tokenizer.ggml.tokens, " + a + "vocab_size or token_embd.weight to size the vocabulary");
  }
  c["tie_word_embeddings"] = file.find("output.weight") == nullptr;
  // RoPE scaling as the converter writes it (Llama 3's comes as rope_freqs.weight instead).
  std::string scaling = m.get_string_or(a + "rope.scaling.type", "none");
  double factor = m.get_float_or(a + "rope.scaling.factor", 0.0);
  if (scaling == "none" && m.contains(a + "rope.scale_linear")) {  // older files
    scaling = "linear";
    factor = m.get_float(a + "rope.scale_linear");
  }
  if (scaling != "none") {
    nlohmann::json r{{"rope_type", scaling}};
    if (factor != 0.0) r["factor"] = factor;
    if (m.contains(a + "rope.scaling.original_context_length"))
      r["original_max_position_embeddings"] = m.get_int(a + "rope.scaling.original_context_length");
    if (m.contains(a + "rope.scaling.yarn_beta_fast")) r["beta_fast"] = m.get_float(a + "rope.scaling.yarn_beta_fast");
    if (m.contains(a + "rope.scaling.yarn_beta_slow")) r["beta_slow"] = m.get_float(a + "rope.scaling.yarn_beta_slow");
    c["rope_scaling"] = r;
  }
  // Mistral's window covers every layer (the llama architecture); Qwen's windows are not in GGUF.
  if (std::string(arch.name) == "llama" && m.contains(a + "attention.sliding_window"))
    c["sliding_window"] = positive(file, a + "attention.sliding_window", m.get_int(a + "attention.sliding_window"));
  std::string text;
  try {
    text = c.dump();
  } catch (const nlohmann::json::exception&) {  // a metadata string (rope.scaling.type) that is not UTF-8
    throw FileError(file.path(),
                    "the " + std::string(arch.name) + ".* metadata holds strings that are not valid UTF-8");
  }
  return JsonConfig::parse(text, file.path());
}

GenerationConfig gguf_generation_config(const GgufMetadata& m) {
  GenerationConfig g;
  if (m.contains("tokenizer.ggml.bos_token_id")) g.bos_token_id = m.get_int("tokenizer.ggml.bos_token_id");
  for (const char* key :
       {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    if (!m.contains(key)) continue;
    const int64_t id = m.get_int(key);
    if (std::find(g.eos_token_ids.begin(), g.eos_token_ids.end(), id) == g.eos_token_ids.end())
      g.eos_token_ids.push_back(id);
  }
  // The converter copies generation_config.json's sampling values here; they are defaults to
  // sample with, as a generation_config.json with do_sample would be.
  if (m.contains("general.sampling.temp")) g.temperature = m.get_float("general.sampling.temp");
  if (m.contains("general.sampling.top_p")) g.top_p = m.get_float("general.sampling.top_p");
  if (m.contains("general.sampling.top_k")) g.top_k = std::max<int64_t>(0, m.get_int("general.sampling.top_k"));
  if (g.temperature || g.top_p || g.top_k) g.do_sample = true;
  return g;
}

GgufCheckpoint open_gguf_checkpoint(const std::string& path) {
  std::shared_ptr<GgufFile> file = GgufFile::open(path);
  JsonConfig config = gguf_hf_config(*file);
  const int64_t heads = config.get_int("num_attention_heads"), kv_heads = config.get_int("num_key_value_heads");
  auto weights = std::make_unique<GgufWeights>(file, find_arch(*file), heads, kv_heads);
  GenerationConfig generation = gguf_generation_config(file->metadata());
  return GgufCheckpoint{std::move(file), std::move(config), std::move(weights), std::move(generation)};
}

}  // namespace hearth
