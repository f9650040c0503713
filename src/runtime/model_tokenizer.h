// The tokenizer of a model argument, whatever its format: a directory's tokenizer.json (with
// tokenizer_config.json and chat_template.jinja), or the vocabulary and chat template in a GGUF
// file's metadata (formats/gguf_tokenizer.h). Lives in runtime because it needs both formats/
// and tokenizer/, which do not include each other.
#pragma once

#include <string>

#include "tokenizer/tokenizer.h"

namespace hearth {

// Throws FileError / Unsupported as Tokenizer::load and gguf_tokenizer do.
Tokenizer load_tokenizer(const std::string& model_path);

}  // namespace hearth
