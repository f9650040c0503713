// tokenizer_config.json -> TokenizerConfig. Internal to the tokenizer library.
#pragma once

#include <string>

#include "tokenizer/tokenizer.h"

namespace hearth::tok {

// Throws FileError naming `path` for malformed JSON or wrongly typed fields.
TokenizerConfig parse_tokenizer_config(const std::string& text, const std::string& path);

}  // namespace hearth::tok
