// The BPE model of tokenizer.json (HF tokenizers/src/models/bpe): vocab + ranked merges,
// byte fallback, unk fusing, and a word cache.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_util.h"

namespace hearth::tok {

// Hash/equality that let unordered_map<std::string, ...> be probed with a string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class Bpe {
 public:
  explicit Bpe(const JsonView& model);  // the "model" object; throws FileError
  Bpe(const Bpe&) = delete;
  Bpe& operator=(const Bpe&) = delete;

  // Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;                       // nullptr for an unknown id
  int64_t size() const { return static_cast<int64_t>(vocab_r_.size()); }  // max id + 1

 private:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  StringIdMap vocab_;
  std::vector<std::string> vocab_r_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_, end_of_word_suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::array<int32_t, 256> byte_ids_{};  // <0xNN> token ids, -1 when absent

  // Words seen before -> ids. Only short words are cached (as HF does), and the cache stops
  // growing at a fixed size, so memory stays bounded on adversarial input.
  static constexpr size_t kCacheMaxWordBytes = 256;
  static constexpr size_t kCacheMaxEntries = 1 << 17;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace hearth::tok
