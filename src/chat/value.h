// Values of the chat-template language: Python's object model as Jinja2 templates see it
// (None, bool, int, float, str, list, insertion-ordered dict, callables, namespace).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hearth::chat {

// A runtime problem without a position; the evaluator adds the line and column of the node
// that was being evaluated when it turns this into a TemplateError.
class EvalError : public std::runtime_error {
 public:
  explicit EvalError(const std::string& message) : std::runtime_error(message) {}
};

struct Value;
struct Dict;
using List = std::vector<Value>;

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The keyword argument `name`, or positional `index`, or nullptr; marks it used.
  const Value* get(std::string_view name, size_t index) const;
};

struct Callable {
  std::string name;
  std::function<Value(const CallArgs&)> fn;
};

struct Value {
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable, kNamespace };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // kString: the text (UTF-8); kUndefined: what was undefined, for messages
  std::shared_ptr<const List> list;
  std::shared_ptr<const Dict> dict;
  std::shared_ptr<const Callable> fn;
  std::shared_ptr<Dict> ns;      // kNamespace: mutable through `set ns.attr = ...`
  bool tuple = false;            // kList made from a tuple: prints as (a, b)
  bool generator = false;        // kList standing for a Python generator (select, map, ...): no len, not JSON
  uint16_t depth = 0;            // kList/kDict: nesting depth, bounded so destruction cannot overflow the stack
  bool holds_namespace = false;  // is or contains a namespace (which may not go into a namespace: no
                                 // unbounded chains or cycles through mutation)
  bool markup = false;           // kString that is markupsafe.Markup (from |safe): `+` escapes plain strings

  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value floating(double v);
  static Value string(std::string v);
  static Value make_list(List items, bool is_tuple = false);
  static Value make_dict(Dict d);
  static Value callable(std::string name, std::function<Value(const CallArgs&)> fn);
  // From nlohmann::json (keys sorted) or nlohmann::ordered_json (keys in document order).
  // EvalError when nested deeper than kMaxDepth.
  template <typename Json>
  static Value from_json(const Json& j, int depth = 0);
  static constexpr int kMaxDepth = 512;

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  double as_double() const;
};

struct Dict {
  std::vector<std::pair<Value, Value>> items;  // keys are scalars (str, int, ...), in insertion order
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
};

// 'text' (built by appends: GCC 12 warns falsely (-Wrestrict) on "'" + std::string&&).
inline std::string squote(std::string_view s) {
  std::string out = "'";
  out += s;
  out += "'";
  return out;
}

bool truthy(const Value& v);
// Python's str(v) (Jinja's output of {{ v }}); undefined prints as "".
std::string to_str(const Value& v);
// Python's repr(v).
std::string repr(const Value& v);
// json.dumps(v, ensure_ascii=ensure_ascii, indent=indent (<0: None), sort_keys=sort_keys) with
// Python's default separators.
std::string to_json(const Value& v, int indent, bool sort_keys, bool ensure_ascii = false);
// "str", "int", "list", "dict", ... as Python names the type (for error messages).
std::string type_name(const Value& v);
// markupsafe.escape of a string.
std::string html_escape(std::string_view s);
bool equals(const Value& a, const Value& b);
// Python's a < b; EvalError for types Python cannot order.
bool less(const Value& a, const Value& b);
std::string format_float(double v);

// Iterative over arrays/objects would be safer for hostile nesting, but the context comes from
// our own server code (already parsed JSON of bounded depth).
template <typename Json>
inline Value Value::from_json(const Json& j, int depth) {
  if (depth > kMaxDepth) throw EvalError("context nested too deeply");
  switch (j.type()) {
    case Json::value_t::null: return none();
    case Json::value_t::boolean: return boolean(j.template get<bool>());
    case Json::value_t::number_integer: return integer(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      return u > uint64_t(INT64_MAX) ? floating(double(u)) : integer(int64_t(u));
    }
    case Json::value_t::number_float: return floating(j.template get<double>());
    case Json::value_t::string: return string(j.template get<std::string>());
    case Json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return make_list(std::move(items));
    }
    case Json::value_t::object: {
      Dict d;
      d.items.reserve(j.size());
      for (const auto& [k, e] : j.items()) d.items.emplace_back(string(k), from_json(e, depth + 1));
      return make_dict(std::move(d));
    }
    default: return none();
  }
}

// UTF-8 helpers: strings index, slice and count by code point as Python's str does.
std::vector<std::string_view> code_points(std::string_view s);
size_t n_code_points(std::string_view s);

}  // namespace hearth::chat
