// Evaluation: the interpreter over the AST (runtime.cpp), the built-in filters and tests
// (builtins.cpp) and Python's methods and item access on values (methods.cpp).
#pragma once

#include <ctime>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/ast.h"
#include "chat/value.h"

namespace hearth::chat {

// Bounds that turn hostile or runaway templates into errors instead of hangs or crashes.
struct Limits {
  size_t max_output_bytes = size_t(64) << 20;
  int max_call_depth = 200;                 // macro calls nested
  int max_eval_depth = 1000;                // expressions being evaluated, nested (across macros)
  int64_t max_loop_iterations = 1'000'000;  // all loops of one render together; range() length
};

// Renders `body` with `vars` as the context (a dict value); throws TemplateError.
std::string render_template(const std::vector<StmtPtr>& body, const Value& vars, const std::string& origin,
                            const std::function<std::tm()>& now, const Limits& limits = {});

bool has_filter(std::string_view name);
bool has_test(std::string_view name);
// Throw EvalError on bad arguments or types.
Value apply_filter(std::string_view name, const Value& input, const CallArgs& args);
bool apply_test(std::string_view name, const Value& value, const CallArgs& args);

// `obj.name` with Jinja's getattr-then-getitem rule (methods of str/dict/list first).
Value get_attr(const Value& obj, const std::string& name);
// `obj[key]` with Jinja's getitem-then-getattr rule.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step]; null pointers are omitted bounds.
Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step);
// The items a for loop or filter iterates: list elements, dict keys, string characters.
std::vector<Value> iterate(const Value& v);
// len(v); EvalError for types without one.
int64_t length(const Value& v);

// Python's binary operators (+ - * / // % ** ~) and `in` (operators.cpp).
Value binary_op(const std::string& op, const Value& a, const Value& b, size_t max_bytes);
bool contains(const Value& container, const Value& item);

// Python-style string helpers shared by filters and methods.
std::string py_strip(std::string_view s, const Value* chars, bool left, bool right);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);

}  // namespace hearth::chat
