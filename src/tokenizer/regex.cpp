#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "base/error.h"
#include "base/strings.h"
#include "tokenizer/unicode.h"

namespace hearth::tok {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

namespace {
std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}
struct MatchData {
  pcre2_match_data* data;
  MatchData() : data(pcre2_match_data_create(1, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(data); }
};
}  // namespace

Regex::Regex(const std::string& pattern, const std::string& origin, const std::string& where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto code = std::make_shared<Code>();
  std::string what(1, '\'');  // built piecewise: GCC 12 -Wrestrict misfires on "lit" + string
  what += printable(where);
  what += "' ";
  if (!is_valid_utf8(pattern)) throw FileError(origin, what + "regex is not valid UTF-8");
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (code->code == nullptr) {
    throw FileError(origin, what + "bad regex '" + printable(pattern, 80) + "' at offset " + std::to_string(offset) +
                                ": " + pcre2_message(error));
  }
  // JIT is an optimization; the interpreter gives the same answers if it is unavailable.
  code->jit = pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE) == 0;
  code_ = std::move(code);
}

std::string Regex::escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) {
      if (u < 0x20 || u == 0x7F) {  // keep control characters literal without a backslash letter
        static const char* kHex = "0123456789abcdef";
        out += "\\x{";
        out += kHex[u >> 4];
        out += kHex[u & 15];
        out += '}';
        continue;
      }
      out += '\\';
    }
    out += c;
  }
  return out;
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  thread_local MatchData md;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  bool have_prev = false;
  size_t prev_end = 0;
  while (pos <= text.size()) {
    int rc = code_->jit ? pcre2_jit_match(code_->code, subject, text.size(), pos, 0, md.data, nullptr)
                        : PCRE2_ERROR_JIT_BADOPTION;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_JIT_BADOPTION) {
      rc = pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.data, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw InputError("tokenizer: regex match failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.data);
    const size_t begin = ov[0], end = ov[1];
    if (begin == end) {
      // Rust's iterators never report an empty match adjacent to the previous match, and step
      // one character past an empty match.
      if (!(have_prev && begin == prev_end)) out.emplace_back(begin, end);
      have_prev = true;
      prev_end = end;
      if (end >= text.size()) break;
      pos = end + utf8_len(static_cast<unsigned char>(text[end]));
      continue;
    }
    out.emplace_back(begin, end);
    have_prev = true;
    prev_end = end;
    pos = end;
  }
}

}  // namespace hearth::tok
