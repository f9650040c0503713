// Python semantics of the arithmetic operators on template values.
#include <cmath>

#include "chat/runtime.h"

namespace hearth::chat {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) throw EvalError(a.s.empty() ? "value is undefined" : a.s);
  if (b.is_undefined()) throw EvalError(b.s.empty() ? "value is undefined" : b.s);
  if (op == "+" && (a.is_string() || a.is_list())) {
    throw EvalError("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
  }
  throw EvalError("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

int64_t as_int(const Value& v) { return v.kind == Value::Kind::kBool ? v.b : v.i; }
bool is_integral(const Value& v) { return v.kind == Value::Kind::kInt || v.kind == Value::Kind::kBool; }

Value repeat(const Value& seq, int64_t n, size_t max_bytes) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    if (!seq.s.empty() && uint64_t(n) > max_bytes / seq.s.size()) throw EvalError("string repetition too large");
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.s;
    return Value::string(std::move(out));
  }
  if (!seq.list->empty() && uint64_t(n) > max_bytes / seq.list->size()) throw EvalError("list repetition too large");
  List out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::make_list(std::move(out), seq.tuple);
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b, size_t max_bytes) {
  if (op == "~") {
    std::string s = to_str(a) + to_str(b);
    if (s.size() > max_bytes) throw EvalError("string too large");
    return Value::string(std::move(s));
  }
  const bool ints = is_integral(a) && is_integral(b);
  const bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(as_int(a), as_int(b), &r)) throw EvalError("integer overflow");
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      if (a.s.size() + b.s.size() > max_bytes) throw EvalError("string too large");
      if (a.markup == b.markup) {
        Value r = Value::string(a.s + b.s);
        r.markup = a.markup;
        return r;
      }
      // Markup + str escapes the plain side (str + Markup too: Python tries Markup.__radd__ first).
      Value r = Value::string(a.markup ? a.s + html_escape(b.s) : html_escape(a.s) + b.s);
      r.markup = true;
      return r;
    }
    if (a.is_list() && b.is_list() && !a.generator && !b.generator) {
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::make_list(std::move(out), a.tuple);
    }
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(as_int(a), as_int(b), &r)) throw EvalError("integer overflow");
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() - b.as_double());
    unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(as_int(a), as_int(b), &r)) throw EvalError("integer overflow");
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_list()) && is_integral(b)) return repeat(a, as_int(b), max_bytes);
    if ((b.is_string() || b.is_list()) && is_integral(a)) return repeat(b, as_int(a), max_bytes);
    unsupported(op, a, b);
  }
  if (op == "/") {
    if (!nums) unsupported(op, a, b);
    if (b.as_double() == 0) throw EvalError("division by zero");
    return Value::floating(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (!nums) {
      if (op == "%" && a.is_string()) throw EvalError("printf-style string formatting is not supported");
      unsupported(op, a, b);
    }
    if (ints) {
      const int64_t x = as_int(a), y = as_int(b);
      if (y == 0) throw EvalError("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) throw EvalError("integer overflow");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) --q, r += y;
      return Value::integer(op == "//" ? q : r);
    }
    const double x = a.as_double(), y = b.as_double();
    if (y == 0) throw EvalError("float division by zero");
    if (op == "//") return Value::floating(std::floor(x / y));
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value::floating(r);
  }
  if (op == "**") {
    if (ints && as_int(b) >= 0) {
      const int64_t base = as_int(a), e = as_int(b);
      if (base == 0 || base == 1) return Value::integer(e == 0 ? 1 : base);
      if (base == -1) return Value::integer(e % 2 ? -1 : 1);
      int64_t r = 1;
      for (int64_t k = 0; k < e; ++k) {  // |base| >= 2: overflows within 64 steps
        if (__builtin_mul_overflow(r, base, &r)) throw EvalError("integer overflow");
      }
      return Value::integer(r);
    }
    if (nums) return Value::floating(std::pow(a.as_double(), b.as_double()));
    unsupported(op, a, b);
  }
  throw EvalError("unknown operator " + op);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Value::Kind::kString:
      if (!item.is_string()) {
        throw EvalError("'in <string>' requires string as left operand, not " + type_name(item));
      }
      return container.s.find(item.s) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : *container.list) {
        if (equals(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict: return container.dict->find(item) != nullptr;
    case Value::Kind::kUndefined: return false;
    default: throw EvalError("argument of type '" + type_name(container) + "' is not iterable");
  }
}

}  // namespace hearth::chat
