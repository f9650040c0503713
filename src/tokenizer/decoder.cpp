// Decoders: token strings -> text (HF tokenizers/src/decoders).
#include <memory>

#include "base/error.h"
#include "base/strings.h"
#include "tokenizer/components.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace hearth::tok {

namespace {

constexpr const char* kReplacementChar = "\xEF\xBF\xBD";

// Joins all tokens, maps each character back to its byte, and decodes the bytes lossily. A
// token with a character outside the byte map (an added token) contributes its raw bytes.
class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    const ByteLevelTable& table = byte_level_table();
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t mark = bytes.size();
      bool ok = true;
      for (size_t i = 0; i < t.size() && ok;) {
        const char32_t c = next_code_point(t, i);
        if (c < table.char_to_byte.size() && table.char_to_byte[c] >= 0) {
          bytes += static_cast<char>(table.char_to_byte[c]);
        } else {
          ok = false;
        }
      }
      if (!ok) bytes.replace(mark, std::string::npos, t);
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

// <0xNN> tokens become bytes; a run of them that is not valid UTF-8 becomes one U+FFFD per byte.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    size_t n_pending = 0;
    auto flush = [&] {
      if (n_pending == 0) return;
      if (is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < n_pending; ++i) out.emplace_back(kReplacementChar);
      }
      pending.clear();
      n_pending = 0;
    };
    for (std::string& t : tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') byte = parse_hex_byte(t[3], t[4]);
      if (byte >= 0) {
        pending += static_cast<char>(byte);
        ++n_pending;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // Rust's u8::from_str_radix(.., 16): two hex digits, or '+' and one digit.
  static int parse_hex_byte(char a, char b) {
    const int lo = hex(b);
    if (lo < 0) return -1;
    if (a == '+') return lo;
    const int hi = hex(a);
    return hi < 0 ? -1 : hi * 16 + lo;
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Per token: drop up to `start` leading and `stop` trailing copies of `content`.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<size_t> offsets;  // start byte of each character, plus the end
      for (size_t i = 0; i < t.size();) {
        offsets.push_back(i);
        next_code_point(t, i);
      }
      const size_t n = offsets.size();
      offsets.push_back(t.size());
      auto char_at = [&](size_t k) {
        size_t i = offsets[k];
        return next_code_point(t, i);
      };
      size_t begin = 0, end = n;
      while (begin < std::min(start_, n) && char_at(begin) == content_) ++begin;
      for (size_t k = 0; k < stop_ && end > begin && char_at(end - 1) == content_; ++k) --end;
      t = t.substr(offsets[begin], offsets[end] - offsets[begin]);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(const std::string& pattern, std::string content, const std::string& origin, const std::string& where)
      : regex_(pattern, origin, where), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::pair<size_t, size_t>> matches;
    for (std::string& t : tokens) {
      matches.clear();
      regex_.find_all(t, matches);
      if (matches.empty()) continue;
      std::string out;
      size_t last = 0;
      for (auto [b, e] : matches) {
        out.append(t, last, b - last);
        out += content_;
        last = e;
      }
      out.append(t, last, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  Regex regex_;
  std::string content_;
};

// Replacement character -> space; the first token loses its leading one unless the
// pre-tokenizer never prepends.
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool prepends) : replacement_(replacement), prepends_(prepends) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      const std::string& t = tokens[k];
      std::string out;
      for (size_t i = 0; i < t.size();) {
        const size_t begin = i;
        if (next_code_point(t, i) == replacement_) {
          if (!(k == 0 && prepends_)) out += ' ';
        } else {
          out.append(t, begin, i - begin);
        }
      }
      tokens[k] = std::move(out);
    }
  }

 private:
  char32_t replacement_;
  bool prepends_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

char32_t single_char(const JsonView& json) {
  const std::string s = json.str();
  size_t i = 0;
  if (s.empty() || !is_valid_utf8(s)) json.fail("must be a single character");
  const char32_t c = next_code_point(s, i);
  if (i != s.size()) json.fail("must be a single character");
  return c;
}

size_t non_negative(const JsonView& json) {
  const int64_t v = json.integer();
  if (v < 0) json.fail("must not be negative");
  return static_cast<size_t>(v);
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const JsonView& json, int depth) {
  if (json.is_null()) return nullptr;
  if (depth > kMaxComponentDepth) json.fail("nests Sequences too deeply");
  const std::string type = json.type();
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(single_char(json.at("content")), non_negative(json.at("start")),
                                          non_negative(json.at("stop")));
  }
  if (type == "Replace") {
    const JsonView pattern = json.at("pattern");
    return std::make_unique<ReplaceDecoder>(pattern_regex(pattern), json.str("content"), json.origin(),
                                            pattern.where());
  }
  if (type == "Metaspace") {
    const char32_t replacement = json.has("replacement") ? single_char(json.at("replacement")) : U'\u2581';
    bool prepends = json.bool_or("add_prefix_space", true);
    if (json.has("prepend_scheme")) prepends = json.str("prepend_scheme") != "never";
    return std::make_unique<MetaspaceDecoder>(replacement, prepends);
  }
  if (type == "Sequence") {
    const JsonView list = json.at("decoders");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto d = make_decoder(list.at(i), depth + 1)) parts.push_back(std::move(d));
    }
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  json.at("type").fail("decoder type '" + printable(type) + "' is not supported");
}

}  // namespace hearth::tok
