// Added tokens (HF tokenizers/src/tokenizer/added_vocabulary.rs): tokens matched in the text
// before normalization (normalized = false) or after it (normalized = true), leftmost-longest,
// with the lstrip / rstrip / single_word rules.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hearth::tok {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  std::string decode_form;  // content, or its normalized form when normalized = true changes it
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

// One piece of a split: an added token (id >= 0) or text to tokenize further (id = -1).
struct Split {
  size_t begin, end;
  int32_t id;
};

// A byte trie answering "longest pattern starting here", which is what leftmost-longest
// Aho-Corasick yields when scanning left to right.
class TokenTrie {
 public:
  void insert(std::string_view pattern, int32_t value);
  bool empty() const { return nodes_ == 1; }
  // Longest match at text[pos..]: its length (0 if none) and value.
  size_t longest_at(std::string_view text, size_t pos, int32_t* value) const;

 private:
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child
  std::vector<int32_t> values_{-1};              // per node, -1 when no pattern ends there
  int32_t nodes_ = 1;
  bool first_byte_[256] = {};
};

class AddedVocabulary {
 public:
  // `tokens` must have their decode_form set. Which tokens go in which trie follows `normalized`.
  explicit AddedVocabulary(std::vector<AddedToken> tokens);
  AddedVocabulary() = default;

  // Splits `text` on the tokens of one trie (raw text: non-normalized ones; normalized text:
  // normalized ones). Splits cover `text` without gaps; empty text gives no splits.
  void split(std::string_view text, bool normalized_trie, std::vector<Split>& out) const;

  const AddedToken* find(int32_t id) const;
  const AddedToken* find(std::string_view content) const;
  bool is_special_content(std::string_view content) const;
  int64_t max_id() const { return max_id_; }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  TokenTrie raw_trie_, normalized_trie_;
  int64_t max_id_ = -1;
};

}  // namespace hearth::tok
