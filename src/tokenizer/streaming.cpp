#include "tokenizer/tokenizer.h"

namespace hearth {

namespace {
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// A ByteFallback token "<0xNN>". HF turns a whole run of them into one U+FFFD per byte when
// the run is not valid UTF-8, so a later byte can change text an earlier byte produced: a
// run is emitted only once a token that ends it arrives (or at flush).
bool is_byte_token(const std::string& t) { return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>'; }
}  // namespace

StreamingDecoder::StreamingDecoder(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(&tok), skip_special_(skip_special_tokens) {}

// Decoding the context tokens again with the new ones lets stateful decoders (byte runs,
// first-token space stripping) see the same neighbourhood they see in a full decode. Text
// ending in U+FFFD may be an incomplete UTF-8 sequence, so it waits for more tokens.
std::string StreamingDecoder::push(int32_t id) {
  ids_.push_back(id);
  if (is_byte_token(tok_->id_to_token(id))) return "";
  const std::string text = tok_->decode(ids_, skip_special_);
  if (text.size() <= prefix_.size() || text.compare(0, prefix_.size(), prefix_) != 0) return "";
  if (std::string_view(text).ends_with(kReplacementChar)) return "";
  std::string fresh = text.substr(prefix_.size());
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(read_));
  read_ = ids_.size();
  prefix_ = tok_->decode(ids_, skip_special_);
  return fresh;
}

std::string StreamingDecoder::flush() {
  const std::string text = tok_->decode(ids_, skip_special_);
  std::string rest;
  if (text.size() > prefix_.size() && text.compare(0, prefix_.size(), prefix_) == 0) rest = text.substr(prefix_.size());
  ids_.clear();
  read_ = 0;
  prefix_.clear();
  return rest;
}

}  // namespace hearth
