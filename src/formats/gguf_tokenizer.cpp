#include "formats/gguf_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/error.h"
#include "base/strings.h"

namespace hearth {
namespace {

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum TokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// The pre-tokenizers llama.cpp knows by name, as the HF tokenizer.json files they stand for
// write them. The regexes are those files' (llama.cpp keeps them as comments beside its
// hand-rewritten versions in llama-vocab.cpp).
constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

struct PreTokenizer {
  nlohmann::json pre_tokenizer;
  nlohmann::json normalizer;  // null when none
  bool ignore_merges = false;
  bool add_bos = false;  // llama.cpp's default when tokenizer.ggml.add_bos_token is absent
  nlohmann::json decoder = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
};

// A SentencePiece vocabulary as transformers' GGUF loader (GGUFLlamaConverter, legacy Llama)
// builds it: spaces become U+2581, one is prepended unless tokenizer.ggml.add_space_prefix is
// false, no pre-tokenizer; decoding undoes both after byte fallback.
PreTokenizer sentencepiece(const GgufMetadata& m) {
  const bool prefix = m.get_bool_or("tokenizer.ggml.add_space_prefix", true);
  nlohmann::json normalizers = nlohmann::json::array();
  if (prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", "\u2581"}});
  normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}});
  nlohmann::json decoders = {{{"type", "ByteFallback"}},
                             {{"type", "Fuse"}},
                             {{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}}};
  if (prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  return {nullptr,
          {{"type", "Sequence"}, {"normalizers", normalizers}},
          false,
          true,
          {{"type", "Sequence"}, {"decoders", decoders}}};
}

// The merges of a SentencePiece BPE vocabulary, which GGUF files do not store: every split of a
// piece at a character boundary into two pieces of the vocabulary, ordered as transformers
// orders them (GGUFTokenizerSkeleton): by the merged piece's score, highest first; the splits of
// one piece by their parts' scores, highest first; ties in vocabulary order. Applying merges by
// that rank is SentencePiece's rule: the pair whose merged piece scores highest goes first.
nlohmann::json sentencepiece_merges(const std::string& path, const std::vector<std::string>& tokens,
                                    const std::vector<float>& scores) {
  std::unordered_map<std::string_view, float> score;  // the last score of a repeated token, as a dict keeps
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!std::isfinite(scores[i])) {
      throw FileError(path, "tokenizer.ggml.scores[" + std::to_string(i) + "] is not a finite number");
    }
    score[tokens[i]] = scores[i];
  }
  struct Merge {
    std::string_view left, right;
    float score;
  };
  std::vector<Merge> merges;
  std::unordered_map<std::string_view, bool> seen;
  auto char_len = [](unsigned char lead) -> size_t {
    return lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 1;
  };
  // Splitting a piece costs its length squared (each split hashes both halves); real pieces are
  // a few characters, so longer ones than this are taken as made by no merge, keeping a crafted
  // file from stalling the load.
  constexpr size_t kMaxSplitBytes = 1024;
  for (const std::string& piece : tokens) {
    if (!seen.emplace(piece, true).second || piece.size() > kMaxSplitBytes) continue;
    const float s = score.at(piece);
    const size_t first = merges.size();
    for (size_t k = char_len(static_cast<unsigned char>(piece[0])); k < piece.size();
         k += char_len(static_cast<unsigned char>(piece[k]))) {
      const std::string_view left(piece.data(), k), right(piece.data() + k, piece.size() - k);
      if (score.count(left) != 0 && score.count(right) != 0) merges.push_back({left, right, s});
    }
    std::stable_sort(merges.begin() + static_cast<std::ptrdiff_t>(first), merges.end(),
                     [&](const Merge& a, const Merge& b) {
                       const float la = score.at(a.left), lb = score.at(b.left);
                       return la != lb ? la > lb : score.at(a.right) > score.at(b.right);
                     });
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) { return a.score > b.score; });
  nlohmann::json out = nlohmann::json::array();
  for (const Merge& mg : merges) out.push_back({std::string(mg.left), std::string(mg.right)});
  return out;
}

nlohmann::json split_then_bytes(const char* regex, bool trim_offsets) {
  return {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", trim_offsets}, {"use_regex", false}}}}};
}

PreTokenizer pre_tokenizer_for(const GgufFile& file, const std::string& pre) {
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    return {split_then_bytes(kLlama3Regex, true), nullptr, true, true};
  }
  if (pre == "qwen2") return {split_then_bytes(kQwen2Regex, false), {{"type", "NFC"}}, false, false};
  if (pre == "gpt-2" || pre == "gpt2") {  // llama.cpp's name; "gpt2" as older Hearth files wrote it
    return {{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}},
            nullptr,
            false,
            false};
  }
  throw Unsupported(file.path() + ": tokenizer.ggml.pre '" + printable(pre) +
                    "' is not supported (llama-bpe, llama3, llama-v3, qwen2, gpt-2 are)");
}

// The token of metadata key `key` (an id), or "" when the key is absent.
std::string token_at(const GgufFile& file, const std::vector<std::string>& tokens, const std::string& key) {
  const GgufMetadata& m = file.metadata();
  if (!m.contains(key)) return "";
  const int64_t id = m.get_int(key);
  if (id < 0 || id >= static_cast<int64_t>(tokens.size())) {
    throw FileError(file.path(), "metadata key '" + key + "': token id " + std::to_string(id) +
                                     " outside the vocabulary of " + std::to_string(tokens.size()));
  }
  return tokens[static_cast<size_t>(id)];
}

// TemplateProcessing with BOS and/or EOS around the sequence (HF's layout for Llama 3).
nlohmann::json affix_template(const GgufFile& file, const std::vector<std::string>& tokens, bool bos, bool eos) {
  nlohmann::json single = nlohmann::json::array(), pair = nlohmann::json::array(), specials = nlohmann::json::object();
  auto special = [&](const char* key, int type_id, nlohmann::json& out) {
    const GgufMetadata& m = file.metadata();
    if (!m.contains(key)) throw FileError(file.path(), std::string("asks to add a token but has no '") + key + "'");
    const std::string content = token_at(file, tokens, key);
    out.push_back({{"SpecialToken", {{"id", content}, {"type_id", type_id}}}});
    specials[content] = {{"id", content}, {"ids", {m.get_int(key)}}, {"tokens", {content}}};
  };
  for (int seq = 0; seq < 2; ++seq) {
    nlohmann::json& out = seq == 0 ? single : pair;
    for (int part = 0; part < (seq == 0 ? 1 : 2); ++part) {
      if (bos) special("tokenizer.ggml.bos_token_id", part, out);
      out.push_back({{"Sequence", {{"id", part == 0 ? "A" : "B"}, {"type_id", part}}}});
      if (eos) special("tokenizer.ggml.eos_token_id", part, out);
    }
  }
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", specials}};
}

}  // namespace

const char* gguf_pre_tokenizer_regex(const std::string& pre) {
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return kLlama3Regex;
  if (pre == "qwen2") return kQwen2Regex;
  return nullptr;
}

GgufTokenizer gguf_tokenizer(const GgufFile& file) {
  const GgufMetadata& m = file.metadata();
  const std::string model = m.get_string("tokenizer.ggml.model");
  if (model != "gpt2" && model != "llama") {
    throw Unsupported(file.path() + ": tokenizer.ggml.model '" + printable(model) +
                      "' is not supported (byte-level BPE 'gpt2' and SentencePiece BPE 'llama' are)");
  }
  const bool spm = model == "llama";
  const PreTokenizer pre =
      spm ? sentencepiece(m) : pre_tokenizer_for(file, m.get_string_or("tokenizer.ggml.pre", "gpt2"));
  const std::vector<std::string> tokens = m.get_string_array("tokenizer.ggml.tokens");
  std::vector<int64_t> types = m.contains("tokenizer.ggml.token_type") ? m.get_int_array("tokenizer.ggml.token_type")
                                                                       : std::vector<int64_t>(tokens.size(), kNormal);
  if (types.size() != tokens.size()) {
    throw FileError(file.path(), "tokenizer.ggml.token_type has " + std::to_string(types.size()) + " entries for " +
                                     std::to_string(tokens.size()) + " tokens");
  }
  nlohmann::json vocab = nlohmann::json::object(), added = nlohmann::json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    // A SentencePiece vocabulary keeps every piece in the model's vocabulary (control and
    // user-defined ones too), as transformers builds it; the added tokens come on top.
    if (spm && types[i] >= kNormal && types[i] <= kByte) vocab[tokens[i]] = i;
    switch (types[i]) {
      case kNormal:
      case kUnknown:
      case kByte: vocab[tokens[i]] = i; break;
      case kControl:
      case kUserDefined:
        added.push_back({{"id", i},
                         {"content", tokens[i]},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", types[i] == kControl}});
        break;
      case kUnused: break;  // the converter's [PADi] fillers: not part of the HF vocabulary
      default:
        throw FileError(file.path(), "tokenizer.ggml.token_type[" + std::to_string(i) + "] is " +
                                         std::to_string(types[i]) + ", not a llama.cpp token type (1-6)");
    }
  }
  GgufTokenizer out;
  out.bos_token = token_at(file, tokens, "tokenizer.ggml.bos_token_id");
  out.eos_token = token_at(file, tokens, "tokenizer.ggml.eos_token_id");
  out.pad_token = token_at(file, tokens, "tokenizer.ggml.padding_token_id");
  out.unk_token = token_at(file, tokens, "tokenizer.ggml.unknown_token_id");
  if (m.contains("tokenizer.ggml.add_bos_token")) out.add_bos_token = m.get_bool("tokenizer.ggml.add_bos_token");
  if (m.contains("tokenizer.ggml.add_eos_token")) out.add_eos_token = m.get_bool("tokenizer.ggml.add_eos_token");
  const bool add_bos = out.add_bos_token.value_or(pre.add_bos), add_eos = out.add_eos_token.value_or(false);
  out.chat_template = m.get_string_or("tokenizer.chat_template", "");
  const std::string named = "tokenizer.chat_template.";
  for (const auto& [key, value] : m.entries()) {
    if (key.size() > named.size() && key.compare(0, named.size(), named) == 0)
      out.named_templates.emplace_back(key.substr(named.size()), m.get_string(key));
  }

  nlohmann::json merges = nlohmann::json::array();
  if (m.contains("tokenizer.ggml.merges")) {
    merges = m.get_string_array("tokenizer.ggml.merges");
  } else if (spm) {
    const std::vector<float> scores = m.get_float_array("tokenizer.ggml.scores");
    if (scores.size() != tokens.size()) {
      throw FileError(file.path(), "tokenizer.ggml.scores has " + std::to_string(scores.size()) + " entries for " +
                                       std::to_string(tokens.size()) + " tokens");
    }
    merges = sentencepiece_merges(file.path(), tokens, scores);
  }
  nlohmann::json t;
  t["version"] = "1.0";
  t["truncation"] = nullptr;
  t["padding"] = nullptr;
  t["added_tokens"] = std::move(added);
  t["normalizer"] = pre.normalizer;
  t["pre_tokenizer"] = pre.pre_tokenizer;
  t["post_processor"] = add_bos || add_eos ? affix_template(file, tokens, add_bos, add_eos) : nlohmann::json(nullptr);
  t["decoder"] = pre.decoder;
  t["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", out.unk_token.empty() ? nlohmann::json(nullptr) : nlohmann::json(out.unk_token)},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", spm},
                {"byte_fallback", spm},
                {"ignore_merges", pre.ignore_merges},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}};
  try {
    out.tokenizer_json = t.dump();
  } catch (const nlohmann::json::exception&) {  // a token or merge that is not UTF-8
    throw FileError(file.path(), "the tokenizer metadata holds strings that are not valid UTF-8");
  }
  return out;
}

}  // namespace hearth
