#include "tokenizer/config.h"

#include "base/error.h"
#include "base/strings.h"
#include "tokenizer/json_util.h"

namespace hearth::tok {

namespace {
// Special tokens are written as "text" or as an AddedToken object {"content": "text", ...}.
std::string token_content(const JsonView& root, const char* key) {
  if (!root.has(key)) return "";
  const JsonView v = root.at(key);
  if (v.is_string()) return v.str();
  if (v.is_object()) return v.str("content");
  v.fail("expected a string or an object with \"content\"");
}
}  // namespace

TokenizerConfig parse_tokenizer_config(const std::string& text, const std::string& path) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw FileError(path, std::string("not valid JSON: ") + printable(e.what(), 400));
  }
  const JsonView root(doc, path, "");
  root.expect_object();
  TokenizerConfig config;
  config.bos_token = token_content(root, "bos_token");
  config.eos_token = token_content(root, "eos_token");
  config.pad_token = token_content(root, "pad_token");
  config.unk_token = token_content(root, "unk_token");
  if (root.has("add_bos_token")) config.add_bos_token = root.at("add_bos_token").boolean();
  if (root.has("add_eos_token")) config.add_eos_token = root.at("add_eos_token").boolean();
  if (root.has("chat_template")) {
    const JsonView t = root.at("chat_template");
    if (t.is_string()) {
      config.chat_template = t.str();
    } else if (t.is_array()) {
      for (size_t i = 0; i < t.size(); ++i) {
        const JsonView item = t.at(i);
        config.named_templates.emplace_back(item.str("name"), item.str("template"));
        if (config.named_templates.back().first == "default")
          config.chat_template = config.named_templates.back().second;
      }
    } else {
      t.fail("expected a string or a list of {\"name\", \"template\"}");
    }
  }
  return config;
}

}  // namespace hearth::tok
