#include "formats/gguf_export.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <numbers>
#include <optional>
#include <thread>

#include "base/error.h"
#include "base/mapped_file.h"
#include "base/strings.h"
#include "formats/ggml_quants.h"
#include "formats/gguf_model.h"
#include "formats/gguf_tokenizer.h"
#include "formats/gguf_writer.h"
#include "formats/weight_store.h"

namespace hearth {
namespace {

using nlohmann::json;

// llama.cpp's llama_ftype values for general.file_type.
uint32_t file_type_of(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kQ4_0: return 2;
    case GgmlType::kBF16: return 32;
    default: return 7;  // Q8_0
  }
}

void set(GgufKeyValues& kv, const std::string& key, GgufValue v) { kv.emplace_back(key, std::move(v)); }

json read_json(const std::string& path) {
  try {
    return json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    throw FileError(path, std::string("not valid JSON: ") + e.what());
  }
}

// config.json values, with the file and key in every error.
struct Config {
  std::string path;
  json j;
  const json& at(const std::string& key) const {
    if (!j.contains(key) || j[key].is_null()) throw FileError(path, "missing key '" + key + "'");
    return j[key];
  }
  int64_t positive(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_number_integer() || v.get<int64_t>() <= 0)
      throw FileError(path, "'" + key + "' must be a positive integer");
    return v.get<int64_t>();
  }
  double number(const json& obj, const std::string& key, const std::string& where) const {
    if (!obj.contains(key) || !obj[key].is_number()) throw FileError(path, "missing number '" + where + key + "'");
    return obj[key].get<double>();
  }
};

// "[token]" of tokenizer_config.json: a string, an AddedToken object, or null.
std::string token_content(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

// convert_hf_to_gguf's does_token_look_special for byte-level vocabularies.
bool looks_special(const std::string& t) {
  auto wrapped = [&](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.compare(0, open.size(), open) == 0 &&
           t.compare(t.size() - close.size(), close.size(), close) == 0;
  };
  return wrapped("<|", "|>") || wrapped("<\xef\xbd\x9c", "\xef\xbd\x9c>") || t == "<pad>" || t == "<mask>";
}

// llama.cpp names a pre-tokenizer; its convert script recognizes the HF tokenizer by hashing
// the ids of a probe text, we by the Split regex (the same tokenizers, docs/gguf.md).
std::string pre_tokenizer_name(const json& tok, const std::string& path) {
  const json& pre = tok.contains("pre_tokenizer") ? tok["pre_tokenizer"] : json();
  auto is_byte_level = [](const json& p, bool regex) {
    return p.is_object() && p.value("type", "") == "ByteLevel" && p.value("use_regex", true) == regex;
  };
  if (is_byte_level(pre, true)) return "gpt-2";
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") &&
      pre["pretokenizers"].size() == 2 && is_byte_level(pre["pretokenizers"][1], false)) {
    const json& split = pre["pretokenizers"][0];
    const std::string regex = split.value("type", "") == "Split" && split.contains("pattern")
                                  ? split["pattern"].value("Regex", std::string())
                                  : std::string();
    for (const char* name : {"llama-bpe", "qwen2"})
      if (regex == gguf_pre_tokenizer_regex(name)) return name;
    throw Unsupported(path + ": the pre-tokenizer's regex '" + printable(regex.substr(0, 80)) +
                      "' is not one llama.cpp knows here (Llama 3's: llama-bpe, Qwen2's: qwen2, GPT-2's)");
  }
  throw Unsupported(path + ": pre_tokenizer " + printable(pre.dump().substr(0, 80)) +
                    " has no llama.cpp name here (Llama 3's Split: llama-bpe, Qwen2's: qwen2, ByteLevel: gpt-2)");
}

// Rows of a tensor as the writer lays them out: dim(0) rows of the rest, or one row for 1-D.
struct RowGeometry {
  int64_t rows, cols;
};
RowGeometry geometry(const Shape& s) {
  if (s.rank() <= 1) return {1, s.numel()};
  return {s.dim(0), s.numel() / s.dim(0)};
}

// Output row r of a permuted q/k (head h, pair j, s in {0, 1}: r = h*hd + 2j + s) comes from
// HF row h*hd + s*hd/2 + j: convert_hf_to_gguf's w.reshape(heads, 2, hd/2, ...).swapaxes(1, 2).
int64_t source_row(int64_t r, int64_t rows, int64_t heads) {
  if (heads == 0) return r;
  const int64_t hd = rows / heads, h = r / hd, k = r % hd;
  return h * hd + (k % 2) * (hd / 2) + k / 2;
}

void to_f32(const void* src, DType dtype, int64_t n, float* dst) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  }
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = dtype == DType::kBF16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
}

void encode_row(const float* x, GgmlType type, int64_t n, uint8_t* dst) {
  switch (type) {
    case GgmlType::kF32: std::memcpy(dst, x, static_cast<size_t>(n) * 4); break;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(x[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      break;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      break;
    case GgmlType::kQ8_0: quantize_row_q8_0(x, reinterpret_cast<BlockQ8_0*>(dst), n); break;
    case GgmlType::kQ4_0: quantize_row_q4_0(x, reinterpret_cast<BlockQ4_0*>(dst), n); break;
    case GgmlType::kQ6_K: quantize_row_q6_K(x, reinterpret_cast<BlockQ6_K*>(dst), n); break;
    default: throw Unsupported("GGUF export: no encoder for ggml type " + std::string(ggml_type_name(type)));
  }
}

// One output tensor's bytes. Rows are converted in parallel; each thread keeps one f32 row.
std::vector<uint8_t> encode_tensor(const WeightStore& store, const GgufExportTensor& t) {
  const RowGeometry g = geometry(t.shape);
  const int64_t rows = g.rows, cols = g.cols;  // plain variables: lambdas capture them (clang 14)
  const size_t out_row = row_bytes(t.type, cols);
  std::vector<uint8_t> out(out_row * static_cast<size_t>(rows));
  if (t.source.empty()) {
    encode_row(t.values.data(), t.type, cols, out.data());
    return out;
  }
  const Tensor src = store.get(t.source);
  if (t.shape.rank() == 1 && t.permute_heads > 0) {  // a q/k bias: its elements move as rows do
    std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(cols));
    to_f32(src.raw(), src.dtype(), cols, x.data());
    for (int64_t i = 0; i < cols; ++i)
      y[static_cast<size_t>(i)] = x[static_cast<size_t>(source_row(i, cols, t.permute_heads))];
    encode_row(y.data(), t.type, cols, out.data());
    return out;
  }
  const size_t in_row = static_cast<size_t>(cols) * dtype_size(src.dtype());
  const auto* in = static_cast<const uint8_t*>(src.raw());
  auto work = [&](int64_t begin, int64_t end) {
    std::vector<float> x(static_cast<size_t>(cols));
    for (int64_t r = begin; r < end; ++r) {
      to_f32(in + static_cast<size_t>(source_row(r, rows, t.permute_heads)) * in_row, src.dtype(), cols, x.data());
      encode_row(x.data(), t.type, cols, out.data() + static_cast<size_t>(r) * out_row);
    }
  };
  const int64_t n_threads =
      rows * cols < (int64_t{1} << 20) ? 1 : std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 16);
  std::vector<std::thread> threads;
  for (int64_t i = 1; i < n_threads; ++i) threads.emplace_back(work, rows * i / n_threads, rows * (i + 1) / n_threads);
  work(0, rows / n_threads);
  for (std::thread& th : threads) th.join();
  // The source is read once: its mapped pages leave the resident set, so a conversion's memory
  // stays near one tensor rather than growing to the whole checkpoint.
  if (src.is_view_of_external()) drop_resident_pages(src.raw(), src.nbytes());
  return out;
}

// Llama 3's rope_freqs.weight: per frequency, the divisor of the default inverse frequency
// (1 for short wavelengths, `factor` for long ones, the smooth interpolation's in between).
std::vector<float> llama3_rope_freqs(const Config& c, const json& rope, double base, int64_t dim) {
  const double factor = c.number(rope, "factor", "rope."), low = c.number(rope, "low_freq_factor", "rope.");
  const double high = c.number(rope, "high_freq_factor", "rope.");
  const double old_ctx = c.number(rope, "original_max_position_embeddings", "rope.");
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

// The model's hyperparameters under general.architecture's prefix; rope_freqs.weight for Llama 3.
void hyperparameters(const Config& c, const std::string& arch, GgufKeyValues& kv,
                     std::vector<GgufExportTensor>& extra) {
  const std::string a = arch + ".";
  const int64_t hidden = c.positive("hidden_size"), heads = c.positive("num_attention_heads");
  const int64_t kv_heads = c.j.contains("num_key_value_heads") && !c.j["num_key_value_heads"].is_null()
                               ? c.positive("num_key_value_heads")
                               : heads;
  const bool has_head_dim = c.j.contains("head_dim") && !c.j["head_dim"].is_null();
  const int64_t head_dim = has_head_dim ? c.positive("head_dim") : hidden / heads;
  set(kv, a + "context_length", static_cast<uint32_t>(c.positive("max_position_embeddings")));
  set(kv, a + "embedding_length", static_cast<uint32_t>(hidden));
  set(kv, a + "feed_forward_length", static_cast<uint32_t>(c.positive("intermediate_size")));
  set(kv, a + "block_count", static_cast<uint32_t>(c.positive("num_hidden_layers")));
  set(kv, a + "attention.head_count", static_cast<uint32_t>(heads));
  set(kv, a + "attention.head_count_kv", static_cast<uint32_t>(kv_heads));
  if (has_head_dim) {
    set(kv, a + "attention.key_length", static_cast<uint32_t>(head_dim));
    set(kv, a + "attention.value_length", static_cast<uint32_t>(head_dim));
  }
  set(kv, a + "attention.layer_norm_rms_epsilon", static_cast<float>(c.number(c.j, "rms_norm_eps", "")));
  // transformers v5 writes rope_parameters; older configs rope_theta + rope_scaling.
  json rope = c.j.contains("rope_parameters") && c.j["rope_parameters"].is_object() ? c.j["rope_parameters"]
              : c.j.contains("rope_scaling") && c.j["rope_scaling"].is_object()     ? c.j["rope_scaling"]
                                                                                    : json::object();
  const double base = rope.contains("rope_theta")
                          ? c.number(rope, "rope_theta", "rope.")
                          : (c.j.contains("rope_theta") ? c.number(c.j, "rope_theta", "") : 1e4);
  set(kv, a + "rope.freq_base", static_cast<float>(base));
  const double partial = c.j.value("partial_rotary_factor", rope.value("partial_rotary_factor", 1.0));
  if (partial != 1.0)
    throw Unsupported(c.path + ": partial_rotary_factor " + std::to_string(partial) + " is not exported");
  if (arch == "llama") {
    set(kv, a + "vocab_size", static_cast<uint32_t>(c.positive("vocab_size")));
    set(kv, a + "rope.dimension_count", static_cast<uint32_t>(head_dim));
  }
  const std::string type = rope.value("rope_type", rope.value("type", std::string("default")));
  if (type == "linear" || type == "yarn") {
    set(kv, a + "rope.scaling.type", type);
    set(kv, a + "rope.scaling.factor", static_cast<float>(c.number(rope, "factor", "rope.")));
    if (type == "yarn") {
      set(kv, a + "rope.scaling.original_context_length",
          static_cast<uint32_t>(c.number(rope, "original_max_position_embeddings", "rope.")));
      if (rope.contains("beta_fast")) set(kv, a + "rope.scaling.yarn_beta_fast", rope["beta_fast"].get<float>());
      if (rope.contains("beta_slow")) set(kv, a + "rope.scaling.yarn_beta_slow", rope["beta_slow"].get<float>());
    }
  } else if (type == "llama3") {
    const std::vector<float> f = llama3_rope_freqs(c, rope, base, head_dim);
    extra.push_back({"rope_freqs.weight", "", GgmlType::kF32, Shape{static_cast<int64_t>(f.size())}, 0, f});
  } else if (type != "default") {
    throw Unsupported(c.path + ": rope_type '" + type + "' has no GGUF form here (default, linear, yarn, llama3 do)");
  }
  // Mistral's window covers every layer; Qwen2's windows (use_sliding_window) are not in GGUF.
  if (arch == "llama" && c.j.contains("sliding_window") && c.j["sliding_window"].is_number_integer())
    set(kv, a + "attention.sliding_window", c.j["sliding_window"].get<uint32_t>());
  if (c.j.value("use_sliding_window", false)) throw Unsupported(c.path + ": use_sliding_window is not exported");
}

}  // namespace

std::optional<GgmlType> gguf_export_type(const std::string& name) {
  if (name == "f32") return GgmlType::kF32;
  if (name == "f16") return GgmlType::kF16;
  if (name == "bf16") return GgmlType::kBF16;
  if (name == "q8_0") return GgmlType::kQ8_0;
  if (name == "q4_0") return GgmlType::kQ4_0;
  return std::nullopt;
}

namespace {

// Whether a SentencePiece-style tokenizer.json prepends U+2581 to the text (the legacy Llama
// normalizer Sequence[Prepend, Replace], or a Metaspace pre-tokenizer that prepends); nullopt
// when its normalizer and pre-tokenizer are not of those forms.
std::optional<bool> sentencepiece_space_prefix(const json& tok) {
  const std::string space = "\u2581";
  const json none;
  const json& norm = tok.contains("normalizer") ? tok["normalizer"] : none;
  const json& pre = tok.contains("pre_tokenizer") ? tok["pre_tokenizer"] : none;
  if (pre.is_object() && pre.value("type", "") == "Metaspace" && norm.is_null()) {
    if (pre.value("replacement", space) != space || pre.value("split", false)) return std::nullopt;
    return pre.value("prepend_scheme", std::string("always")) != "never";
  }
  if (!pre.is_null() || !norm.is_object()) return std::nullopt;
  const json parts =
      norm.value("type", "") == "Sequence" ? norm.value("normalizers", json::array()) : json::array({norm});
  bool prefix = false, replace = false;
  for (const json& n : parts) {
    const std::string type = n.value("type", "");
    if (type == "Prepend" && n.value("prepend", "") == space && !replace) {
      prefix = true;
    } else if (type == "Replace" && n.contains("pattern") && n["pattern"].value("String", "") == " " &&
               n.value("content", "") == space) {
      replace = true;
    } else {
      return std::nullopt;
    }
  }
  if (!replace) return std::nullopt;
  return prefix;
}

// "<0x0A>": a byte-fallback piece.
bool is_byte_piece(const std::string& t) {
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
         std::isxdigit(static_cast<unsigned char>(t[3])) && std::isxdigit(static_cast<unsigned char>(t[4]));
}

// Scores that rank pieces as the merges do: the piece the merge of rank r makes first scores
// -r; pieces no merge makes (single characters) score below every merged one, in vocabulary
// order; control, byte and unused pieces 0, as SentencePiece gives them.
std::vector<float> sentencepiece_scores(const std::vector<std::string>& tokens, const std::vector<int32_t>& types,
                                        const std::vector<std::string>& merges) {
  std::map<std::string, size_t> first_rank;
  for (size_t r = 0; r < merges.size(); ++r) {
    std::string piece = merges[r];
    piece.erase(piece.find(' '), 1);
    first_rank.emplace(piece, r);
  }
  std::vector<float> scores(tokens.size(), 0.0f);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] != 1) continue;
    auto it = first_rank.find(tokens[i]);
    scores[i] = -static_cast<float>(it != first_rank.end() ? it->second : merges.size() + i);
  }
  return scores;
}

GgufKeyValues tokenizer_metadata(const std::string& dir, int64_t vocab_size, const std::string& config_json) {
  const std::string tok_path = dir + "/tokenizer.json", cfg_path = dir + "/tokenizer_config.json";
  if (!std::filesystem::exists(tok_path)) throw FileError(dir, "no tokenizer.json (GGUF files carry the tokenizer)");
  const json tok = read_json(tok_path);
  const json cfg = std::filesystem::exists(cfg_path) ? read_json(cfg_path) : json::object();
  const json& model = tok.contains("model") ? tok["model"] : json();
  if (!model.is_object() || model.value("type", "") != "BPE") {
    throw Unsupported(tok_path + ": only BPE tokenizers are exported (byte-level: tokenizer.ggml.model gpt2; " +
                      "SentencePiece with byte fallback: llama); this is " +
                      (model.is_object() ? printable(model.value("type", std::string("?"))) : std::string("?")));
  }
  // SentencePiece BPE (Llama 2, Mistral v0.1): byte fallback, spaces as U+2581.
  const bool spm = model.value("byte_fallback", false);
  const std::optional<bool> space_prefix = spm ? sentencepiece_space_prefix(tok) : std::nullopt;
  if (spm && !space_prefix) {
    throw Unsupported(tok_path +
                      ": a byte-fallback BPE tokenizer whose normalizer and pre-tokenizer are not "
                      "SentencePiece's (Prepend/Replace of U+2581, or Metaspace) is not exported");
  }
  const std::string pre = spm ? "" : pre_tokenizer_name(tok, tok_path);
  // Typed reads that name the entry at fault (the catch below only knows the JSON type error).
  auto integer = [&](const json& v, const std::string& where) {
    if (!v.is_number_integer()) throw FileError(tok_path, where + " is " + v.type_name() + ", not an integer id");
    return v.get<int64_t>();
  };
  auto text = [&](const json& v, const std::string& where) {
    if (!v.is_string()) throw FileError(tok_path, where + " is " + v.type_name() + ", not a string");
    return v.get<std::string>();
  };
  auto check_id = [&](int64_t id, const std::string& what) {
    if (id < 0 || id >= vocab_size) {
      throw FileError(tok_path, what + " has id " + std::to_string(id) + ", outside the model's vocab_size " +
                                    std::to_string(vocab_size));
    }
    return static_cast<size_t>(id);
  };
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int32_t> types(static_cast<size_t>(vocab_size), 0);
  const std::string unk = model.contains("unk_token") && model["unk_token"].is_string() ? model["unk_token"] : "";
  if (!model.contains("vocab") || !model["vocab"].is_object())
    throw FileError(tok_path, "model.vocab is not an object");
  for (const auto& [piece, id] : model["vocab"].items()) {
    const std::string what = "token '" + printable(piece) + "'";
    const size_t i = check_id(integer(id, "model.vocab: " + what), what);
    tokens[i] = piece;
    types[i] = 1;                                   // NORMAL
    if (spm && piece == unk) types[i] = 2;          // UNKNOWN
    if (spm && is_byte_piece(piece)) types[i] = 6;  // BYTE
  }
  std::map<std::string, int64_t> added;
  const json added_tokens = tok.value("added_tokens", json::array());
  for (size_t n = 0; n < added_tokens.size(); ++n) {
    const json& t = added_tokens[n];
    const std::string where = "added_tokens[" + std::to_string(n) + "]";
    if (!t.is_object()) throw FileError(tok_path, where + " is " + t.type_name() + ", not an object");
    const std::string content = text(t.value("content", json()), where + ".content");
    const size_t i =
        check_id(integer(t.value("id", json()), where + ".id"), "added token '" + printable(content) + "'");
    tokens[i] = content;
    types[i] = t.value("special", false) || looks_special(content) ? 3 : 4;  // CONTROL : USER_DEFINED
    added[content] = static_cast<int64_t>(i);
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] == 0) {
      tokens[i] = "[PAD" + std::to_string(i) + "]";
      types[i] = 5;  // UNUSED
    }
  }
  std::vector<std::string> merges;
  for (const json& m : model.value("merges", json::array())) {
    const std::string where = "model.merges[" + std::to_string(merges.size()) + "]";
    if (m.is_array() && m.size() == 2) {
      merges.push_back(text(m[0], where + "[0]") + " " + text(m[1], where + "[1]"));
    } else {
      merges.push_back(text(m, where));
    }
  }

  GgufKeyValues kv;
  if (spm) {
    // As llama.cpp's files of SentencePiece models: no merges, a score per piece (the order in
    // which pieces merge; formats/gguf_tokenizer.cpp derives the merges back from them).
    set(kv, "tokenizer.ggml.model", "llama");
    set(kv, "tokenizer.ggml.tokens", tokens);
    set(kv, "tokenizer.ggml.scores", sentencepiece_scores(tokens, types, merges));
    set(kv, "tokenizer.ggml.token_type", types);
    set(kv, "tokenizer.ggml.add_space_prefix", *space_prefix);
  } else {
    set(kv, "tokenizer.ggml.model", "gpt2");
    set(kv, "tokenizer.ggml.pre", pre);
    set(kv, "tokenizer.ggml.tokens", tokens);
    set(kv, "tokenizer.ggml.token_type", types);
    set(kv, "tokenizer.ggml.merges", merges);
  }
  // Special ids as gguf-py's SpecialVocab finds them: tokenizer_config.json's token strings,
  // then config.json's *_token_id for the ones still missing.
  std::map<std::string, int64_t> ids;
  const json config = config_json.empty() ? json::object() : read_json(config_json);
  for (const char* which : {"bos", "eos", "unk", "pad"}) {
    const std::string content =
        cfg.contains(std::string(which) + "_token") ? token_content(cfg[std::string(which) + "_token"]) : "";
    if (auto it = added.find(content); !content.empty() && it != added.end()) {
      ids[which] = it->second;
    } else if (const std::string key = std::string(which) + "_token_id";
               config.contains(key) && config[key].is_number_integer() && config[key].get<int64_t>() >= 0 &&
               config[key].get<int64_t>() < vocab_size) {
      ids[which] = config[key].get<int64_t>();
    }
  }
  for (const auto& [which, id] : ids) {
    const std::string key = which == "pad" ? "padding" : which == "unk" ? "unknown" : which;
    set(kv, "tokenizer.ggml." + key + "_token_id", static_cast<uint32_t>(id));
  }
  // add_bos_token: tokenizer_config.json's, else whether tokenizer.json's post-processor
  // prepends a special token (Llama 3), else false.
  bool add_bos = false, add_eos = false;
  const json post = tok.contains("post_processor") ? tok["post_processor"] : json();
  for (const json& p : post.is_object() && post.value("type", "") == "Sequence"
                           ? post.value("processors", json::array())
                           : json::array({post})) {
    if (p.is_object() && p.value("type", "") == "TemplateProcessing" && p.contains("single") && !p["single"].empty()) {
      add_bos = p["single"].front().contains("SpecialToken");
      add_eos = p["single"].back().contains("SpecialToken");
    }
  }
  if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) add_bos = cfg["add_bos_token"].get<bool>();
  if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean()) add_eos = cfg["add_eos_token"].get<bool>();
  if (add_bos && !ids.count("bos")) throw FileError(dir, "the tokenizer adds a BOS token but names none");
  set(kv, "tokenizer.ggml.add_bos_token", add_bos);
  if (add_eos) set(kv, "tokenizer.ggml.add_eos_token", true);
  if (cfg.contains("chat_template")) {
    const json& t = cfg["chat_template"];
    if (t.is_string()) {
      set(kv, "tokenizer.chat_template", t.get<std::string>());
    } else if (t.is_array()) {  // [{"name", "template"}]: "default" is the template, others are named
      for (const json& e : t) {
        const std::string name = e.value("name", ""), text = e.value("template", "");
        set(kv, name == "default" ? "tokenizer.chat_template" : "tokenizer.chat_template." + name, text);
      }
    }
  }
  return kv;
}

}  // namespace

GgufKeyValues gguf_tokenizer_metadata(const std::string& dir, int64_t vocab_size, const std::string& config_json) {
  try {
    return tokenizer_metadata(dir, vocab_size, config_json);
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    throw FileError(dir + "/tokenizer.json", std::string("unexpected structure: ") + e.what());
  }
}

GgufExportPlan plan_gguf_export(const std::string& model_dir, const GgufExportOptions& options) {
  if (options.type != GgmlType::kF32 && options.type != GgmlType::kF16 && options.type != GgmlType::kBF16 &&
      options.type != GgmlType::kQ8_0 && options.type != GgmlType::kQ4_0) {
    throw Unsupported("GGUF export: type " + std::string(ggml_type_name(options.type)) +
                      " is not implemented (f32, f16, bf16, q8_0, q4_0 are)");
  }
  const std::string config_path = model_dir + "/config.json";
  if (!std::filesystem::exists(config_path)) throw FileError(model_dir, "not a model directory (no config.json)");
  const Config c{config_path, read_json(config_path)};
  if (c.j.contains("quantization") || c.j.contains("quantization_config"))
    throw Unsupported(config_path + ": the checkpoint is quantized; GGUF export reads f32, bf16 or f16 weights");
  const std::string model_type = c.at("model_type").get<std::string>();
  std::string arch;
  if (model_type == "llama" || model_type == "mistral") arch = "llama";
  if (model_type == "qwen2" || model_type == "qwen3") arch = model_type;
  if (arch.empty())
    throw Unsupported(config_path + ": model_type '" + printable(model_type) +
                      "' is not exported (llama, mistral, qwen2, qwen3 are)");

  GgufExportPlan plan;
  plan.model_dir = model_dir;
  set(plan.metadata, "general.architecture", arch);
  set(plan.metadata, "general.name", std::filesystem::path(model_dir).lexically_normal().filename().string());
  set(plan.metadata, "general.file_type", file_type_of(options.type));
  if (options.type == GgmlType::kQ8_0 || options.type == GgmlType::kQ4_0)
    set(plan.metadata, "general.quantization_version", uint32_t{2});
  std::vector<GgufExportTensor> extra;
  try {
    hyperparameters(c, arch, plan.metadata, extra);
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    throw FileError(config_path, std::string("unexpected value: ") + e.what());
  }
  const int64_t vocab = c.positive("vocab_size");
  for (auto& e :
       gguf_tokenizer_metadata(options.tokenizer_dir.empty() ? model_dir : options.tokenizer_dir, vocab, config_path))
    plan.metadata.push_back(std::move(e));

  const WeightStore store = WeightStore::open_dir(model_dir);
  const bool tied = c.j.value("tie_word_embeddings", false) || !store.has("lm_head.weight");
  const int64_t heads = c.positive("num_attention_heads");
  const int64_t kv_heads = c.j.contains("num_key_value_heads") && !c.j["num_key_value_heads"].is_null()
                               ? c.positive("num_key_value_heads")
                               : heads;
  for (const std::string& hf : store.names()) {
    if (hf.find("rotary_emb.inv_freq") != std::string::npos) continue;  // recomputed from the config
    if (hf == "lm_head.weight" && tied) continue;
    const std::string name = hf_to_gguf_name(hf);
    if (name == hf) throw InputError(model_dir + ": tensor '" + printable(hf) + "' has no llama.cpp name");
    const Tensor t = store.get(hf);
    if (!is_float(t.dtype())) {
      throw Unsupported(model_dir + ": tensor '" + hf + "' is " + std::string(dtype_name(t.dtype())) +
                        "; GGUF export reads f32, bf16 or f16 weights");
    }
    GgufExportTensor e{name, hf, GgmlType::kF32, t.shape(), 0, {}};
    const int64_t cols = t.dim(-1);
    if (t.rank() == 2 && options.type != GgmlType::kF32) {
      // convert_hf_to_gguf: matrices in the file type, F16 where rows do not fit its blocks.
      // llama-quantize: the output matrix (the embedding when tied) Q6_K under Q4_0, Q8_0
      // where rows are not a multiple of 256.
      e.type = cols % 32 == 0 || options.type == GgmlType::kBF16 ? options.type : GgmlType::kF16;
      const bool output = name == "output.weight" || (tied && name == "token_embd.weight");
      if (output && options.type == GgmlType::kQ4_0) e.type = cols % 256 == 0 ? GgmlType::kQ6_K : GgmlType::kQ8_0;
    }
    if (arch == "llama" && (name.find(".attn_q.") != std::string::npos || name.find(".attn_k.") != std::string::npos)) {
      e.permute_heads = name.find(".attn_q.") != std::string::npos ? heads : kv_heads;
      if (t.dim(0) % (2 * e.permute_heads) != 0)
        throw InputError(model_dir + ": tensor '" + hf + "' has " + std::to_string(t.dim(0)) +
                         " rows, not a multiple of 2 x its heads");
    }
    plan.tensors.push_back(std::move(e));
  }
  if (store.has("model.embed_tokens.weight") && store.get("model.embed_tokens.weight").dim(0) != vocab) {
    throw FileError(model_dir, "model.embed_tokens.weight has " +
                                   std::to_string(store.get("model.embed_tokens.weight").dim(0)) +
                                   " rows, config.json's vocab_size is " + std::to_string(vocab));
  }
  for (auto& e : extra) plan.tensors.push_back(std::move(e));
  return plan;
}

void write_gguf_export(const GgufExportPlan& plan, const std::string& path, const GgufWriteOptions& options) {
  GgufWriter writer(path, {.overwrite = options.overwrite});
  for (const auto& [key, value] : plan.metadata) writer.set_metadata(key, value);
  for (const GgufExportTensor& t : plan.tensors) writer.add_tensor(t.name, t.type, t.shape);
  const WeightStore store = WeightStore::open_dir(plan.model_dir);
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    if (options.progress) options.progress(i, plan.tensors.size(), plan.tensors[i].name);
    const std::vector<uint8_t> bytes = encode_tensor(store, plan.tensors[i]);
    writer.write_tensor_data(plan.tensors[i].name, bytes.data(), bytes.size());
  }
  if (options.progress) options.progress(plan.tensors.size(), plan.tensors.size(), "");
  writer.finish();
}

}  // namespace hearth
