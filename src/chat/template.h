// Hugging Face chat templates: a Jinja2 (3.1) subset interpreter configured as transformers
// configures Jinja (trim_blocks, lstrip_blocks, loop controls, raise_exception, strftime_now,
// a tojson that keeps key order and non-ASCII text).
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"

namespace hearth {

namespace chat {
struct Stmt;
}

// A template that cannot be parsed or rendered: "ORIGIN:LINE:COL: problem" (one line).
class TemplateError : public InputError {
 public:
  TemplateError(const std::string& origin, int line, int col, const std::string& problem);
  int line() const { return line_; }
  int col() const { return col_; }

 private:
  int line_, col_;
};

class ChatTemplate {
 public:
  // Parses once; throws TemplateError with line/column on syntax errors.
  static ChatTemplate parse(std::string source, std::string origin = "chat_template");

  // Renders with `context` as the variables, e.g. {"messages": [...], "tools": [...] or null,
  // "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", ...}.
  // Errors (syntax, undefined calls, type errors, raise_exception, limits) are TemplateError.
  // nlohmann::json keeps object keys sorted, so `{{ tools | tojson }}` then differs from
  // Python's insertion order; pass nlohmann::ordered_json to keep the request's key order.
  std::string render(const nlohmann::json& context) const;
  std::string render(const nlohmann::ordered_json& context) const;

  // The moment strftime_now() formats (broken-down local time); the default reads the clock.
  // Tests fix it so renders are reproducible.
  void set_clock(std::function<std::tm()> now) { now_ = std::move(now); }

  const std::string& origin() const { return origin_; }

 private:
  ChatTemplate() = default;
  std::string origin_;
  std::shared_ptr<const std::vector<std::unique_ptr<chat::Stmt>>> body_;
  std::function<std::tm()> now_;
};

}  // namespace hearth
