// From a chat request to prompt token ids: the model's chat template rendered with the
// tokenizer's special tokens, then encoded. The glue between chat/ and tokenizer/.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/template.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

class PromptRenderer {
 public:
  // Parses the tokenizer's chat template; without one, render() throws InputError.
  explicit PromptRenderer(const Tokenizer& tokenizer);

  bool has_template() const { return tmpl_.has_value(); }
  // request: {"messages": [...], "tools": [...]?, "add_generation_prompt": bool?, ...kwargs}.
  // The template sees what transformers' apply_chat_template passes: messages, tools (None when
  // absent), documents (None), add_generation_prompt, the special tokens tokenizer_config.json
  // sets, then every other request key (chat_template_kwargs such as enable_thinking).
  // An ordered_json keeps the request's key order, which tojson reproduces.
  std::string render(const nlohmann::ordered_json& request) const;
  // Rendered prompt -> ids. Templates write their own BOS, so no special tokens are added.
  std::vector<int32_t> encode_chat(const nlohmann::ordered_json& request) const;

 private:
  const Tokenizer& tokenizer_;
  std::optional<ChatTemplate> tmpl_;
};

// A request's JSON text (an HTTP body, a CLI's stdin) parsed, refusing while it parses a
// document nested deeper than kMaxRequestDepth: copying one of ~100000 levels recurses past a
// thread's stack, and no template value may nest deeper anyway (chat/value.h). InputError
// "WHAT is not valid JSON: ..." or "WHAT nests deeper than N levels" otherwise.
inline constexpr int kMaxRequestDepth = 512;
nlohmann::ordered_json parse_request_json(std::string_view text, const std::string& what);

// End-of-generation ids: generation_config.json's, else the tokenizer's eos_token.
std::vector<int32_t> stop_token_ids(const std::vector<int64_t>& generation_eos, const Tokenizer* tokenizer);

}  // namespace hearth
