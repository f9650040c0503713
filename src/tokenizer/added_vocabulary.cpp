#include "tokenizer/added_vocabulary.h"

#include "tokenizer/unicode.h"

namespace hearth::tok {

void TokenTrie::insert(std::string_view pattern, int32_t value) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (char c : pattern) {
    const uint64_t key = (uint64_t(uint32_t(node)) << 8) | static_cast<unsigned char>(c);
    auto [it, inserted] = edges_.try_emplace(key, nodes_);
    if (inserted) {
      values_.push_back(-1);
      ++nodes_;
    }
    node = it->second;
  }
  first_byte_[static_cast<unsigned char>(pattern[0])] = true;
  // With duplicate patterns the first one wins (they normally share an id anyway).
  if (values_[static_cast<size_t>(node)] < 0) values_[static_cast<size_t>(node)] = value;
}

size_t TokenTrie::longest_at(std::string_view text, size_t pos, int32_t* value) const {
  if (!first_byte_[static_cast<unsigned char>(text[pos])]) return 0;
  int32_t node = 0;
  size_t best = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges_.find((uint64_t(uint32_t(node)) << 8) | static_cast<unsigned char>(text[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (values_[static_cast<size_t>(node)] >= 0) {
      best = i + 1 - pos;
      *value = values_[static_cast<size_t>(node)];
    }
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    by_id_[t.id] = i;
    by_content_[t.content] = i;
    max_id_ = std::max<int64_t>(max_id_, t.id);
    if (t.normalized) {
      normalized_trie_.insert(t.decode_form, static_cast<int32_t>(i));
    } else {
      raw_trie_.insert(t.content, static_cast<int32_t>(i));
    }
  }
}

const AddedToken* AddedVocabulary::find(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::find(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

bool AddedVocabulary::is_special_content(std::string_view content) const {
  const AddedToken* t = find(content);
  return t != nullptr && t->special;
}

namespace {
// The last / first character of s is a word character (regex \w: alphanumeric, marks,
// connector punctuation such as '_').
bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  size_t i = start;
  const char32_t c = next_code_point(s, i);
  return c == '_' || is_alphanumeric(c);
}
bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t i = 0;
  const char32_t c = next_code_point(s, i);
  return c == '_' || is_alphanumeric(c);
}
}  // namespace

void AddedVocabulary::split(std::string_view text, bool normalized_trie, std::vector<Split>& out) const {
  const TokenTrie& trie = normalized_trie ? normalized_trie_ : raw_trie_;
  if (text.empty()) return;
  if (trie.empty()) {
    out.push_back({0, text.size(), -1});
    return;
  }
  size_t start_offset = 0;
  for (size_t pos = 0; pos < text.size();) {
    int32_t index = -1;
    const size_t len = trie.longest_at(text, pos, &index);
    if (len == 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[static_cast<size_t>(index)];
    size_t start = pos, stop = pos + len;
    if (t.single_word) {
      const bool start_space = start == 0 || !ends_with_word(text.substr(0, start));
      const bool stop_space = stop == text.size() || !starts_with_word(text.substr(stop));
      if (!start_space || !stop_space) {
        // The scan continues after this match, as Aho-Corasick's non-overlapping iterator does.
        pos = stop;
        continue;
      }
    }
    if (t.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t b = s - 1;
        while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        size_t i = b;
        if (!is_whitespace(next_code_point(text, i))) break;
        s = b;
      }
      start = std::max(s, start_offset);
    }
    if (t.rstrip) {
      while (stop < text.size()) {
        size_t i = stop;
        if (!is_whitespace(next_code_point(text, i))) break;
        stop = i;
      }
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, t.id});
    start_offset = stop;
    pos = std::max(stop, pos + len);
  }
  if (start_offset != text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace hearth::tok
