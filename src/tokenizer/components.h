// The pipeline stages of tokenizer.json, each built from its JSON object. Internal to the
// tokenizer library; the stage names and semantics follow HF tokenizers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_util.h"

namespace hearth::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};
// Null JSON gives nullptr (no normalizer).
std::unique_ptr<Normalizer> make_normalizer(const JsonView& json, int depth = 0);

// A piece of normalized text on its way to the model. `at_start`: the piece begins at offset 0
// of the original text (Metaspace's prepend_scheme "first" looks at that).
struct Piece {
  std::string text;
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their splits; empty pieces are dropped.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonView& json, int depth = 0);

class Decoder {
 public:
  virtual ~Decoder() = default;
  // HF's decode_chain: token strings in, token strings out; the final text is their concatenation.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};
std::unique_ptr<Decoder> make_decoder(const JsonView& json, int depth = 0);

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens around a single sequence (only called with add_special_tokens).
  virtual void process(std::vector<int32_t>& ids) const = 0;
};
std::unique_ptr<PostProcessor> make_post_processor(const JsonView& json, int depth = 0);

// A "pattern" field: {"String": "..."} or {"Regex": "..."}; returns regex source.
std::string pattern_regex(const JsonView& pattern);

}  // namespace hearth::tok
