// The tokenizer a GGUF file carries in its metadata, as the Hugging Face files it was converted
// from: tokenizer.json text (for Tokenizer::from_json) and the tokenizer_config.json fields.
// Byte-level BPE vocabularies (tokenizer.ggml.model "gpt2": GPT-2, Llama 3, Qwen2/3) and
// SentencePiece BPE ("llama": Llama 2, Mistral v0.1; merges derived from the scores). docs/gguf.md
// lists the mapping.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "formats/gguf.h"

namespace hearth {

struct GgufTokenizer {
  std::string tokenizer_json;
  // tokenizer_config.json's fields (content strings, "" when absent).
  std::string bos_token, eos_token, pad_token, unk_token;
  std::optional<bool> add_bos_token, add_eos_token;
  std::string chat_template;
  std::vector<std::pair<std::string, std::string>> named_templates;  // tokenizer.chat_template.NAME
};

// The vocabulary (tokens, token_type, merges), added and special tokens (token types CONTROL
// and USER_DEFINED; UNUSED padding entries are dropped), the pre-tokenizer that
// tokenizer.ggml.pre names (llama-bpe / llama3 / llama-v3, qwen2, gpt-2 / gpt2), BOS/EOS as
// TemplateProcessing when the file asks to add them, and the chat template. FileError naming the
// file and key for malformed metadata; Unsupported for other tokenizer models and pre-tokenizers.
GgufTokenizer gguf_tokenizer(const GgufFile& file);

// The Split regex of the HF tokenizer.json that tokenizer.ggml.pre PRE stands for ("llama-bpe",
// "qwen2"), or nullptr for a pre-tokenizer without one (gpt-2: ByteLevel's own) or unknown.
const char* gguf_pre_tokenizer_regex(const std::string& pre);

}  // namespace hearth
