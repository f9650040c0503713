#include "runtime/model_tokenizer.h"

#include "formats/gguf_model.h"
#include "formats/gguf_tokenizer.h"

namespace hearth {

Tokenizer load_tokenizer(const std::string& model_path) {
  if (!is_gguf_path(model_path)) return Tokenizer::load(model_path);
  GgufTokenizer t = gguf_tokenizer(*GgufFile::open(model_path));
  TokenizerConfig config;
  config.bos_token = std::move(t.bos_token);
  config.eos_token = std::move(t.eos_token);
  config.pad_token = std::move(t.pad_token);
  config.unk_token = std::move(t.unk_token);
  config.add_bos_token = t.add_bos_token;
  config.add_eos_token = t.add_eos_token;
  config.chat_template = std::move(t.chat_template);
  config.named_templates = std::move(t.named_templates);
  // A file with only named templates uses "default", as tokenizer_config.json's list form does.
  if (config.chat_template.empty()) {
    for (const auto& [name, source] : config.named_templates)
      if (name == "default") config.chat_template = source;
  }
  return Tokenizer::from_json(t.tokenizer_json, model_path + " (tokenizer metadata)", std::move(config));
}

}  // namespace hearth
