// PCRE2 (UTF + Unicode properties, JIT) standing in for the Oniguruma regexes of tokenizer.json.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hearth::tok {

class Regex {
 public:
  // Throws FileError(origin, "'where' bad regex ...") on a bad pattern.
  Regex(const std::string& pattern, const std::string& origin, const std::string& where);
  // Regex-quotes `literal` (HF compiles String patterns as escaped regexes).
  static std::string escape(std::string_view literal);

  // All non-overlapping matches as [begin, end) byte ranges, scanning like Rust's find_iter:
  // an empty match right after the previous match is skipped. `text` must be valid UTF-8.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
};

}  // namespace hearth::tok
