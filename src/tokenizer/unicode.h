// UTF-8 and Unicode helpers with the semantics of Rust's char methods, which HF tokenizers uses.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace hearth::tok {

// Length of the UTF-8 sequence that starts with `lead` (1 for a stray continuation byte).
inline size_t utf8_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

// Decodes the code point at s[i] (s must be valid UTF-8) and advances i past it.
char32_t next_code_point(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t cp);
bool is_valid_utf8(std::string_view s);
// Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

bool is_whitespace(char32_t c);   // Rust char::is_whitespace (White_Space property)
bool is_numeric(char32_t c);      // Rust char::is_numeric (Nd, Nl, No)
bool is_punctuation(char32_t c);  // ASCII punctuation or a P* category
bool is_alphanumeric(char32_t c);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
std::string normalize_unicode(std::string_view s, NormalForm form);
// Per-character lowercase mapping, as HF's NormalizedString::lowercase (no final-sigma rule).
std::string lowercase(std::string_view s);

// GPT-2's reversible byte <-> printable character map (ByteLevel pre-tokenizer and decoder).
struct ByteLevelTable {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 324> char_to_byte;  // -1 where the code point is no byte's image
};
const ByteLevelTable& byte_level_table();

}  // namespace hearth::tok
