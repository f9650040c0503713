#include "tokenizer/bpe.h"

#include <queue>

#include "base/error.h"
#include "base/strings.h"
#include "tokenizer/unicode.h"

namespace hearth::tok {

Bpe::Bpe(const JsonView& model) {
  model.expect_object();
  const JsonView vocab = model.at("vocab");
  vocab.expect_object();
  int64_t max_id = -1;
  for (const auto& [token, id_json] : vocab.raw().items()) {
    const JsonView idv(id_json, model.origin(), vocab.where() + "[" + printable(token, 40) + "]");
    const int64_t id = idv.integer();
    if (id < 0 || id > INT32_MAX - 1) idv.fail("is not a valid token id");
    vocab_[token] = static_cast<int32_t>(id);
    max_id = std::max(max_id, id);
  }
  // The id table is dense (one string per id up to the largest), as real vocabs are: a few
  // entries with ids in the billions would ask for gigabytes of empty slots, so they are refused.
  constexpr int64_t kMaxUnassignedIds = int64_t{1} << 20;
  const auto n_entries = static_cast<int64_t>(vocab_.size());
  if (max_id + 1 - n_entries > kMaxUnassignedIds) {
    vocab.fail("has ids up to " + std::to_string(max_id) + " for only " + std::to_string(n_entries) +
               " entries (more than " + std::to_string(kMaxUnassignedIds) + " ids would be unassigned)");
  }
  vocab_r_.resize(static_cast<size_t>(max_id + 1));
  has_id_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [token, id] : vocab_) {
    vocab_r_[static_cast<size_t>(id)] = token;
    has_id_[static_cast<size_t>(id)] = true;
  }

  if (model.has("unk_token")) {
    const std::string unk = model.str("unk_token");
    auto it = vocab_.find(unk);
    // HF fails only when an unknown character is met; failing at load time is clearer.
    if (it == vocab_.end()) model.at("unk_token").fail("'" + printable(unk) + "' is not in the vocab");
    unk_id_ = it->second;
  }
  continuing_subword_prefix_ = model.str_or("continuing_subword_prefix", "");
  end_of_word_suffix_ = model.str_or("end_of_word_suffix", "");
  fuse_unk_ = model.bool_or("fuse_unk", false);
  byte_fallback_ = model.bool_or("byte_fallback", false);
  ignore_merges_ = model.bool_or("ignore_merges", false);
  if (model.has("dropout") && model.raw()["dropout"] != 0.0) {
    throw Unsupported(model.origin() + ": BPE dropout is not supported");
  }
  static const char* kHex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const std::string name = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
    auto it = vocab_.find(name);
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }

  const JsonView merges = model.at("merges");
  const size_t n_merges = merges.size();
  merges_.reserve(n_merges);
  std::string merged;
  for (size_t i = 0; i < n_merges; ++i) {
    const JsonView m = merges.at(i);
    std::string a, b;
    if (m.is_string()) {  // legacy "a b"
      const std::string line = m.str();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        m.fail("expected two tokens separated by one space");
      }
      a = line.substr(0, space);
      b = line.substr(space + 1);
    } else {
      if (!m.is_array() || m.size() != 2) m.fail("expected [\"a\", \"b\"] or \"a b\"");
      a = m.at(size_t{0}).str();
      b = m.at(size_t{1}).str();
    }
    auto ia = vocab_.find(a), ib = vocab_.find(b);
    if (ia == vocab_.end()) m.fail("merges unknown token '" + printable(a, 40) + "'");
    if (ib == vocab_.end()) m.fail("merges unknown token '" + printable(b, 40) + "'");
    if (b.size() < continuing_subword_prefix_.size()) m.fail("second token is shorter than the subword prefix");
    merged = a;
    merged.append(b, continuing_subword_prefix_.size(), std::string::npos);
    auto in = vocab_.find(merged);
    if (in == vocab_.end()) m.fail("merge result '" + printable(merged, 40) + "' is not in the vocab");
    // A repeated pair keeps its last rank, like HF's map built from the list.
    merges_[pair_key(ia->second, ib->second)] = Merge{static_cast<uint32_t>(i), in->second};
  }
}

std::optional<int32_t> Bpe::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* Bpe::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= vocab_r_.size() || !has_id_[static_cast<size_t>(id)]) return nullptr;
  return &vocab_r_[static_cast<size_t>(id)];
}

void Bpe::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() < kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (auto it = cache_.find(word); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheMaxEntries) cache_.emplace(word, std::vector<int32_t>(out.begin() + first, out.end()));
  }
}

// Symbols form a doubly linked list; a min-heap of (rank, position) picks the next merge, as
// in HF's Word::merge_all. Stale heap entries are detected by re-checking the pair.
void Bpe::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, true});
  };
  int32_t pending_unk = -1;  // an unk symbol not added yet (fuse_unk grows it)
  std::string piece;
  for (size_t i = 0; i < word.size();) {
    const size_t begin = i;
    i += utf8_len(static_cast<unsigned char>(word[i]));
    i = std::min(i, word.size());
    std::string_view ch = word.substr(begin, i - begin);
    const bool needs_affix =
        (begin > 0 && !continuing_subword_prefix_.empty()) || (i == word.size() && !end_of_word_suffix_.empty());
    if (needs_affix) {
      piece.clear();
      if (begin > 0) piece += continuing_subword_prefix_;
      piece += ch;
      if (i == word.size()) piece += end_of_word_suffix_;
      ch = piece;
    }
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      if (pending_unk >= 0) add(pending_unk), pending_unk = -1;
      add(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        // Like HF, a pending unk is not flushed here; it lands after these bytes.
        for (char c : ch) add(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
      pending_unk = *unk_id_;
    }
    // No unk token: HF drops the character.
  }
  if (pending_unk >= 0) add(pending_unk);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (const Symbol& s : symbols) {
    if (s.alive) out.push_back(s.id);
  }
}

}  // namespace hearth::tok
