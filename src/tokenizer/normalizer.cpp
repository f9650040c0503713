// Normalizers: rewrite the text before pre-tokenization (HF tokenizers/src/normalizers).
#include <memory>

#include "base/error.h"
#include "base/strings.h"
#include "tokenizer/components.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace hearth::tok {

std::string pattern_regex(const JsonView& pattern) {
  pattern.expect_object();
  if (pattern.has("String")) return Regex::escape(pattern.str("String"));
  if (pattern.has("Regex")) return pattern.str("Regex");
  pattern.fail("expected {\"String\": ...} or {\"Regex\": ...}");
}

namespace {

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  void normalize(std::string& text) const override { text = normalize_unicode(text, form_); }

 private:
  NormalForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = lowercase(text); }
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t i = begin;
        if (!is_whitespace(next_code_point(text, i))) break;
        begin = i;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t i = start;
        if (!is_whitespace(next_code_point(text, i))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(const std::string& pattern, std::string content, const std::string& origin,
                    const std::string& where)
      : regex_(pattern, origin, where), content_(std::move(content)) {}
  void normalize(std::string& text) const override {
    std::vector<std::pair<size_t, size_t>> matches;
    regex_.find_all(text, matches);
    if (matches.empty()) return;
    std::string out;
    size_t last = 0;
    for (auto [b, e] : matches) {
      out.append(text, last, b - last);
      out += content_;
      last = e;
    }
    out.append(text, last, std::string::npos);
    text = std::move(out);
  }

 private:
  Regex regex_;
  std::string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& p : parts_) p->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const JsonView& json, int depth) {
  if (json.is_null()) return nullptr;
  if (depth > kMaxComponentDepth) json.fail("nests Sequences too deeply");
  const std::string type = json.type();
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkd);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Strip")
    return std::make_unique<StripNormalizer>(json.bool_or("strip_left", true), json.bool_or("strip_right", true));
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(json.str("prepend"));
  if (type == "Replace") {
    const JsonView pattern = json.at("pattern");
    return std::make_unique<ReplaceNormalizer>(pattern_regex(pattern), json.str("content"), json.origin(),
                                               pattern.where());
  }
  if (type == "Sequence") {
    const JsonView list = json.at("normalizers");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto n = make_normalizer(list.at(i), depth + 1)) parts.push_back(std::move(n));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  json.at("type").fail("normalizer type '" + printable(type) + "' is not supported");
}

}  // namespace hearth::tok
