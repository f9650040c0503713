#include "chat/lexer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "base/strings.h"
#include "chat/template.h"

namespace hearth::chat {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  Lexer(std::string src, const std::string& origin) : src_(std::move(src)), origin_(origin) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t pos = 0;
    const size_t n = src_.size();
    while (pos < n) {
      size_t start = pos;
      while (true) {
        start = src_.find('{', start);
        if (start == std::string::npos || start + 1 >= n) {
          start = std::string::npos;
          break;
        }
        const char c = src_[start + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++start;
      }
      if (start == std::string::npos) {
        emit_text(pos, n);
        break;
      }
      const char kind = src_[start + 1];
      const char marker = start + 2 < n ? src_[start + 2] : '\0';
      size_t text_end = start;
      if (marker == '-') {
        while (text_end > pos && is_space(src_[text_end - 1])) --text_end;
      } else if (marker != '+' && kind != '{') {
        // lstrip_blocks: only spaces/tabs between the line start and the tag.
        size_t l = text_end;
        while (l > pos && src_[l - 1] != '\n' && is_space(src_[l - 1])) --l;
        const bool at_line_start = l == 0 || src_[l - 1] == '\n';
        if (at_line_start && (l > pos || pos == 0 || src_[pos - 1] == '\n')) text_end = l;
      }
      emit_text(pos, text_end);
      size_t body = start + 2 + ((marker == '-' || marker == '+') ? 1 : 0);
      if (kind == '#') {
        const size_t end = src_.find("#}", body);
        if (end == std::string::npos) fail(start, "unterminated comment");
        pos = after_tag(end, end + 2, true);
        continue;
      }
      if (kind == '%' && try_raw(start, body, pos)) continue;
      push(kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, "", start);
      pos = lex_tag(body, kind == '{', start);
    }
    push(Tok::kEof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  // Position after a tag whose end marker spans [marker_at, end): `-` strips following
  // whitespace; otherwise trim_blocks drops one newline after block and comment tags.
  size_t after_tag(size_t marker_at, size_t end, bool block) {
    const char before = marker_at > 0 ? src_[marker_at - 1] : '\0';
    if (before == '-') {
      while (end < src_.size() && is_space(src_[end])) ++end;
    } else if (block && before != '+' && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    return end;
  }

  // {% raw %}...{% endraw %}: the body is text.
  bool try_raw(size_t start, size_t body, size_t& pos) {
    size_t p = body;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    if (src_.compare(p, 2, "%}") != 0) return false;
    const size_t text_begin = after_tag(p, p + 2, true);
    size_t search = text_begin;
    while (true) {
      const size_t tag = src_.find("{%", search);
      if (tag == std::string::npos) fail(start, "missing endraw for raw block");
      size_t q = tag + 2;
      const bool strip_before = q < src_.size() && src_[q] == '-';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") == 0) {
        q += 6;
        while (q < src_.size() && is_space(src_[q])) ++q;
        if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
        if (src_.compare(q, 2, "%}") == 0) {
          size_t text_end = tag;
          if (strip_before) {
            while (text_end > text_begin && is_space(src_[text_end - 1])) --text_end;
          }
          emit_text(text_begin, text_end);
          pos = after_tag(q, q + 2, true);
          return true;
        }
      }
      search = tag + 2;
    }
  }

  size_t lex_tag(size_t p, bool variable, size_t start) {
    int depth = 0;
    const size_t n = src_.size();
    while (true) {
      while (p < n && is_space(src_[p])) ++p;
      if (p >= n)
        fail(start,
             variable ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
      if (depth == 0) {
        const char* close = variable ? "}}" : "%}";
        size_t at = p;
        if ((src_[p] == '-' || (!variable && src_[p] == '+')) && src_.compare(p + 1, 2, close) == 0) at = p + 1;
        if (src_.compare(at, 2, close) == 0) {
          push(variable ? Tok::kVarEnd : Tok::kBlockEnd, "", p);
          return after_tag(at, at + 2, !variable);
        }
      }
      const char c = src_[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = p;
        while (e < n && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        push(Tok::kName, src_.substr(p, e - p), p);
        p = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        p = lex_number(p);
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "(",
                                           ")",  "[",  "]",  "{",  "}",  ",",  ".", ":", "|", "=", "<", ">", ";"};
        const char* op = nullptr;
        for (const char* o : kOps) {
          if (src_.compare(p, std::strlen(o), o) == 0) {
            op = o;
            break;
          }
        }
        if (op == nullptr) fail(p, "unexpected character '" + printable(src_.substr(p, 1)) + "'");
        if (c == '(' || c == '[' || c == '{') ++depth;
        if (c == ')' || c == ']' || c == '}') {
          if (depth == 0) fail(p, std::string("unexpected '") + c + "'");
          --depth;
        }
        push(Tok::kOp, op, p);
        p += std::strlen(op);
      }
    }
  }

  size_t lex_number(size_t p) {
    const size_t n = src_.size();
    const bool after_dot = p > 0 && src_[p - 1] == '.';  // `x.0` is an attribute, not a float
    size_t e = p;
    auto digits = [&] {
      while (e < n && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
    };
    digits();
    bool is_float = false;
    if (!after_dot && e + 1 < n && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      ++e;
      digits();
      is_float = true;
    }
    if (!after_dot && e < n && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t q = e + 1;
      if (q < n && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < n && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        e = q;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = p; k < e; ++k) {
      if (src_[k] != '_') text += src_[k];
    }
    Token t{is_float ? Tok::kFloat : Tok::kInt, text, 0, 0, 0, 0};
    if (is_float) {
      t.f = std::strtod(text.c_str(), nullptr);
    } else {
      const auto v = parse_int(text);
      if (!v) fail(p, "integer literal out of range");
      t.i = *v;
    }
    locate(p, t);
    tokens_.push_back(std::move(t));
    return e;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  // Python's unicode-escape decoding, as Jinja applies it to string literals.
  size_t lex_string(size_t p) {
    const char quote = src_[p];
    const size_t n = src_.size();
    std::string out;
    size_t e = p + 1;
    while (true) {
      if (e >= n) fail(p, "unterminated string literal");
      const char c = src_[e];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++e;
        continue;
      }
      if (e + 1 >= n) fail(p, "unterminated string literal");
      const char x = src_[e + 1];
      e += 2;
      auto hex = [&](int count) {
        uint32_t cp = 0;
        for (int k = 0; k < count; ++k) {
          if (e >= n || !std::isxdigit(static_cast<unsigned char>(src_[e]))) fail(p, "truncated \\x/\\u escape");
          const char h = src_[e++];
          cp = cp * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        if (cp > 0x10FFFF) fail(p, "illegal Unicode character in escape");
        append_utf8(out, cp);
      };
      switch (x) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': break;
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        default:
          if (x >= '0' && x <= '7') {
            uint32_t cp = uint32_t(x - '0');
            for (int k = 0; k < 2 && e < n && src_[e] >= '0' && src_[e] <= '7'; ++k)
              cp = cp * 8 + uint32_t(src_[e++] - '0');
            append_utf8(out, cp);
          } else {
            out += '\\';
            out += x;
          }
      }
    }
    push(Tok::kString, out, p);
    return e + 1;
  }

  void emit_text(size_t from, size_t to) {
    if (to > from) push(Tok::kText, src_.substr(from, to - from), from);
  }

  void locate(size_t offset, Token& t) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = size_t(it - line_starts_.begin());
    t.line = int(line);
    t.col = int(offset - line_starts_[line - 1]) + 1;
  }

  void push(Tok type, std::string text, size_t offset) {
    Token t{type, std::move(text), 0, 0, 0, 0};
    locate(offset, t);
    tokens_.push_back(std::move(t));
  }

  [[noreturn]] void fail(size_t offset, const std::string& problem) const {
    Token t;
    locate(offset, t);
    throw TemplateError(origin_, t.line, t.col, problem);
  }

  std::string src_;
  const std::string& origin_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const std::string& origin) {
  // Jinja normalises newlines to \n and drops a single trailing newline (keep_trailing_newline=False).
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src), origin).run();
}

}  // namespace hearth::chat
