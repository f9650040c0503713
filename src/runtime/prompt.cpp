#include "runtime/prompt.h"

#include "base/error.h"
#include "chat/value.h"

namespace hearth {

PromptRenderer::PromptRenderer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {
  const std::string& source = tokenizer.config().chat_template;
  if (!source.empty()) tmpl_ = ChatTemplate::parse(source, "chat_template");
}

// A request the parser accepts is one the template's values can hold.
static_assert(kMaxRequestDepth == chat::Value::kMaxDepth);

nlohmann::ordered_json parse_request_json(std::string_view text, const std::string& what) {
  struct TooDeep {};
  const nlohmann::ordered_json::parser_callback_t bounded = [](int depth, nlohmann::ordered_json::parse_event_t,
                                                               nlohmann::ordered_json&) {
    if (depth >= kMaxRequestDepth) throw TooDeep{};  // depth counts from 0 at the outermost value
    return true;
  };
  try {
    return nlohmann::ordered_json::parse(text, bounded);
  } catch (const TooDeep&) {
    throw InputError(what + " nests deeper than " + std::to_string(kMaxRequestDepth) + " levels");
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for a number past a double's range (1e309).
    throw InputError(what + " is not valid JSON: " + e.what());
  }
}

std::string PromptRenderer::render(const nlohmann::ordered_json& request) const {
  if (!tmpl_) throw InputError("this model has no chat template (tokenizer_config.json); use a raw prompt");
  if (!request.is_object()) throw InputError("chat request must be a JSON object");
  if (!request.contains("messages") || !request["messages"].is_array()) {
    throw InputError("chat request needs 'messages' (a list)");
  }
  nlohmann::ordered_json ctx = {{"messages", request["messages"]},
                                {"tools", request.value("tools", nlohmann::ordered_json())},
                                {"documents", request.value("documents", nlohmann::ordered_json())},
                                {"add_generation_prompt", false}};
  if (const auto at = request.find("add_generation_prompt"); at != request.end()) {
    if (!at->is_boolean()) throw InputError("chat request: 'add_generation_prompt' must be true or false");
    ctx["add_generation_prompt"] = *at;
  }
  const TokenizerConfig& cfg = tokenizer_.config();
  const std::pair<const char*, const std::string*> special[] = {{"bos_token", &cfg.bos_token},
                                                                {"eos_token", &cfg.eos_token},
                                                                {"unk_token", &cfg.unk_token},
                                                                {"pad_token", &cfg.pad_token}};
  for (const auto& [name, text] : special) {
    if (!text->empty()) ctx[name] = *text;
  }
  for (const auto& [key, value] : request.items()) {
    if (key != "messages" && key != "tools" && key != "documents" && key != "add_generation_prompt") ctx[key] = value;
  }
  return tmpl_->render(ctx);
}

std::vector<int32_t> PromptRenderer::encode_chat(const nlohmann::ordered_json& request) const {
  return tokenizer_.encode(render(request), /*add_special_tokens=*/false);
}

std::vector<int32_t> stop_token_ids(const std::vector<int64_t>& generation_eos, const Tokenizer* tokenizer) {
  std::vector<int32_t> out;
  for (int64_t id : generation_eos) out.push_back(static_cast<int32_t>(id));
  if (out.empty() && tokenizer != nullptr && !tokenizer->config().eos_token.empty()) {
    if (auto id = tokenizer->token_to_id(tokenizer->config().eos_token)) out.push_back(*id);
  }
  return out;
}

}  // namespace hearth
