#include "chat/template.h"

#include "base/strings.h"
#include "chat/ast.h"
#include "chat/runtime.h"

namespace hearth {

TemplateError::TemplateError(const std::string& origin, int line, int col, const std::string& problem)
    : InputError(origin + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " + printable(problem, 400)),
      line_(line),
      col_(col) {}

ChatTemplate ChatTemplate::parse(std::string source, std::string origin) {
  ChatTemplate t;
  t.origin_ = std::move(origin);
  t.body_ = std::make_shared<const std::vector<chat::StmtPtr>>(chat::parse_template(source, t.origin_));
  return t;
}

namespace {
template <typename Json>
std::string render_json(const ChatTemplate& t, const std::vector<chat::StmtPtr>& body, const Json& context,
                        const std::function<std::tm()>& now) {
  if (!context.is_object()) throw TemplateError(t.origin(), 1, 1, "render context must be a JSON object");
  chat::Value vars;
  try {
    vars = chat::Value::from_json(context);
  } catch (const chat::EvalError& e) {
    throw TemplateError(t.origin(), 1, 1, e.what());
  }
  return chat::render_template(body, vars, t.origin(), now);
}
}  // namespace

std::string ChatTemplate::render(const nlohmann::json& context) const {
  return render_json(*this, *body_, context, now_);
}
std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return render_json(*this, *body_, context, now_);
}

}  // namespace hearth
