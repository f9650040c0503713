// Template text -> tokens, applying Jinja's whitespace control exactly as HF configures it:
// trim_blocks (drop the newline after a block/comment tag), lstrip_blocks (drop the indentation
// before one), `-` markers (strip all whitespace on that side), `+` markers (disable both).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::chat {

enum class Tok : uint8_t { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  Tok type;
  std::string text;  // text, name, operator, or the decoded string literal
  int line = 1, col = 1;
  int64_t i = 0;
  double f = 0;
};

// Throws TemplateError ("origin:line:col: ...") on an unterminated tag, string or comment.
std::vector<Token> tokenize(std::string_view source, const std::string& origin);

}  // namespace hearth::chat
