// Pre-tokenizers: split normalized text into the words the model sees
// (HF tokenizers/src/pre_tokenizers and NormalizedString::split).
#include <algorithm>
#include <functional>
#include <memory>

#include "base/error.h"
#include "base/strings.h"
#include "tokenizer/components.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace hearth::tok {

namespace {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const JsonView& json) {
  const std::string b = json.str();
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  json.fail("unknown split behavior '" + printable(b) + "'");
}

struct Span {
  size_t begin, end;
  bool is_match;
};
using Ranges = std::vector<std::pair<size_t, size_t>>;

// Splits `piece` given the [begin, end) ranges of pattern matches inside it.
void split_piece(const Piece& piece, const Ranges& matches, Behavior behavior, bool invert, std::vector<Piece>& out) {
  const std::string& s = piece.text;
  std::vector<Span> spans;
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (prev != b) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != s.size()) spans.push_back({prev, s.size(), invert});

  std::vector<Span> merged;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated: merged = spans; break;
    case Behavior::kRemoved:
      for (const Span& sp : spans) {
        if (!sp.is_match) merged.push_back(sp);
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (const Span& sp : spans) {
        if (sp.is_match && !previous_match && !merged.empty()) {
          merged.back().end = sp.end;
        } else {
          merged.push_back(sp);
        }
        previous_match = sp.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !merged.empty()) {
          merged.back().begin = it->begin;
        } else {
          merged.push_back(*it);
        }
        previous_match = it->is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    case Behavior::kContiguous:
      for (size_t i = 0; i < spans.size(); ++i) {
        if (i > 0 && spans[i].is_match == previous_match) {
          merged.back().end = spans[i].end;
        } else {
          merged.push_back(spans[i]);
        }
        previous_match = spans[i].is_match;
      }
      break;
  }
  for (const Span& sp : merged) {
    if (sp.end > sp.begin) out.push_back({s.substr(sp.begin, sp.end - sp.begin), piece.at_start && sp.begin == 0});
  }
}

// Each character for which `pred` holds is one match (HF's `impl Pattern for Fn(char) -> bool`).
Ranges char_matches(const std::string& s, const std::function<bool(char32_t)>& pred) {
  Ranges out;
  for (size_t i = 0; i < s.size();) {
    const size_t begin = i;
    if (pred(next_code_point(s, i))) out.emplace_back(begin, i);
  }
  return out;
}

void split_all(std::vector<Piece>& pieces, Behavior behavior, bool invert,
               const std::function<void(const std::string&, Ranges&)>& find) {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  Ranges ranges;
  for (const Piece& p : pieces) {
    ranges.clear();
    find(p.text, ranges);
    split_piece(p, ranges, behavior, invert, out);
  }
  pieces = std::move(out);
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(const std::string& regex, const std::string& origin, const std::string& where, Behavior behavior,
                    bool invert)
      : regex_(regex, origin, where), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_all(pieces, behavior_, invert_, [this](const std::string& s, Ranges& r) { regex_.find_all(s, r); });
  }

 private:
  Regex regex_;
  Behavior behavior_;
  bool invert_;
};

class CharSplitPreTokenizer : public PreTokenizer {
 public:
  CharSplitPreTokenizer(std::function<bool(char32_t)> pred, Behavior behavior)
      : pred_(std::move(pred)), behavior_(behavior) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_all(pieces, behavior_, false, [this](const std::string& s, Ranges& r) { r = char_matches(s, pred_); });
  }

 private:
  std::function<bool(char32_t)> pred_;
  Behavior behavior_;
};

constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const std::string& origin, const std::string& where)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Regex, origin, where);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_) {
      for (Piece& p : pieces) {
        if (p.text.empty() || p.text[0] != ' ') {
          std::string spaced(1, ' ');  // built piecewise: GCC 12 -Wrestrict misfires on insert(0, ...)
          spaced += p.text;
          p.text = std::move(spaced);
        }
      }
    }
    if (regex_) {
      split_all(pieces, Behavior::kIsolated, false,
                [this](const std::string& s, Ranges& r) { regex_->find_all(s, r); });
    }
    const ByteLevelTable& table = byte_level_table();
    for (Piece& p : pieces) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (char c : p.text) mapped += table.byte_to_utf8[static_cast<unsigned char>(c)];
      p.text = std::move(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {
    size_t i = 0;
    replacement_cp_ = next_code_point(replacement_, i);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (Piece& p : pieces) {
      std::string out;
      for (char c : p.text) {
        if (c == ' ') {
          out += replacement_;
        } else {
          out += c;
        }
      }
      const bool starts = out.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && p.at_start))) {
        out.insert(0, replacement_);
      }
      p.text = std::move(out);
    }
    if (split_) {
      const char32_t r = replacement_cp_;
      split_all(pieces, Behavior::kMergedWithNext, false,
                [r](const std::string& s, Ranges& out) { out = char_matches(s, [r](char32_t c) { return c == r; }); });
    }
  }

 private:
  std::string replacement_;
  char32_t replacement_cp_;
  Prepend prepend_;
  bool split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonView& json, int depth) {
  if (json.is_null()) return nullptr;
  if (depth > kMaxComponentDepth) json.fail("nests Sequences too deeply");
  const std::string type = json.type();
  if (type == "Split") {
    const JsonView pattern = json.at("pattern");
    return std::make_unique<SplitPreTokenizer>(pattern_regex(pattern), json.origin(), pattern.where(),
                                               parse_behavior(json.at("behavior")), json.bool_or("invert", false));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(json.bool_or("add_prefix_space", true),
                                                   json.bool_or("use_regex", true), json.origin(), json.where());
  }
  if (type == "Metaspace") {
    const std::string replacement = json.str_or("replacement", "\xE2\x96\x81");
    size_t i = 0;
    if (replacement.empty() || !is_valid_utf8(replacement) ||
        (next_code_point(replacement, i), i != replacement.size())) {
      json.at("replacement").fail("must be a single character");
    }
    auto prepend = MetaspacePreTokenizer::Prepend::kAlways;
    if (json.has("prepend_scheme")) {
      const std::string scheme = json.str("prepend_scheme");
      if (scheme == "first") {
        prepend = MetaspacePreTokenizer::Prepend::kFirst;
      } else if (scheme == "never") {
        prepend = MetaspacePreTokenizer::Prepend::kNever;
      } else if (scheme != "always") {
        json.at("prepend_scheme").fail("must be first, always or never");
      }
    } else if (!json.bool_or("add_prefix_space", true)) {  // older files
      prepend = MetaspacePreTokenizer::Prepend::kNever;
    }
    return std::make_unique<MetaspacePreTokenizer>(replacement, prepend, json.bool_or("split", true));
  }
  if (type == "Digits") {
    const bool individual = json.bool_or("individual_digits", false);
    return std::make_unique<CharSplitPreTokenizer>(is_numeric,
                                                   individual ? Behavior::kIsolated : Behavior::kContiguous);
  }
  if (type == "Punctuation") {
    const Behavior b = json.has("behavior") ? parse_behavior(json.at("behavior")) : Behavior::kIsolated;
    return std::make_unique<CharSplitPreTokenizer>(is_punctuation, b);
  }
  if (type == "WhitespaceSplit") return std::make_unique<CharSplitPreTokenizer>(is_whitespace, Behavior::kRemoved);
  if (type == "Whitespace") {
    return std::make_unique<SplitPreTokenizer>(R"(\w+|[^\w\s]+)", json.origin(), json.where(), Behavior::kRemoved,
                                               true);
  }
  if (type == "CharDelimiterSplit") {
    const std::string d = json.str("delimiter");
    size_t i = 0;
    if (d.empty() || !is_valid_utf8(d) || (next_code_point(d, i), i != d.size())) {
      json.at("delimiter").fail("must be a single character");
    }
    i = 0;
    const char32_t cp = next_code_point(d, i);
    return std::make_unique<CharSplitPreTokenizer>([cp](char32_t c) { return c == cp; }, Behavior::kRemoved);
  }
  if (type == "Sequence") {
    const JsonView list = json.at("pretokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto p = make_pre_tokenizer(list.at(i), depth + 1)) parts.push_back(std::move(p));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  json.at("type").fail("pre-tokenizer type '" + printable(type) + "' is not supported");
}

}  // namespace hearth::tok
