// Text <-> token ids, compatible with Hugging Face `tokenizers` (tokenizer.json). The pipeline
// is HF's: split on added tokens, normalize, pre-tokenize, BPE, post-process; and for decoding
// the configured decoder chain.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hearth {

// From tokenizer_config.json; every field is optional there.
struct TokenizerConfig {
  std::string bos_token, eos_token, pad_token, unk_token;  // content strings, "" when absent
  std::optional<bool> add_bos_token, add_eos_token;
  // The template to use: chat_template.jinja beside the file wins, then the string form, then
  // the template named "default" of the list form.
  std::string chat_template;
  std::vector<std::pair<std::string, std::string>> named_templates;  // list form: name -> source
};

class Tokenizer {
 public:
  // DIR/tokenizer.json, plus DIR/tokenizer_config.json and DIR/chat_template.jinja if present.
  static Tokenizer load(const std::string& model_dir);
  // Parses tokenizer.json text; `origin` names it in error messages.
  static Tokenizer from_json(const std::string& tokenizer_json_text, const std::string& origin);
  // The same with the tokenizer_config.json fields given (e.g. from a GGUF file's metadata).
  static Tokenizer from_json(const std::string& tokenizer_json_text, const std::string& origin, TokenizerConfig config);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Throws InputError when `text` is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  // Unknown ids are skipped, as HF does.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // raw vocab string; "" for an unknown id
  bool is_special(int32_t id) const;
  int64_t vocab_size() const;  // max id + 1 over the vocab and the added tokens
  const TokenizerConfig& config() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Incremental detokenizer: push() returns only new, complete UTF-8 text; the concatenation of
// all push() results and flush() equals tok.decode(all ids). Keeps a reference to `tok`.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tok, bool skip_special_tokens = false);
  std::string push(int32_t id);
  std::string flush();  // the text still held back (e.g. an incomplete UTF-8 sequence); resets

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  // HF DecodeStream's scheme: ids_ holds the tokens of the last emitted chunk (context, so
  // decoders that look at the first token or strip a leading space act the same) followed by
  // the tokens not emitted yet, which start at ids_[read_].
  std::vector<int32_t> ids_;
  size_t read_ = 0;
  std::string prefix_;  // decode(ids_[0, read_))
};

}  // namespace hearth
