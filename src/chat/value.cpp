#include "chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace hearth::chat {

const Value* CallArgs::get(std::string_view name, size_t index) const {
  for (const auto& [k, v] : kw) {
    if (k == name) return &v;
  }
  return index < pos.size() ? &pos[index] : nullptr;
}

Value Value::undefined(std::string hint) {
  Value v;
  v.s = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind = Kind::kBool;
  v.b = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind = Kind::kInt;
  v.i = i;
  return v;
}
Value Value::floating(double f) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind = Kind::kString;
  v.s = std::move(s);
  return v;
}
namespace {
uint16_t child_depth(const Value& v) {
  return v.kind == Value::Kind::kList || v.kind == Value::Kind::kDict ? v.depth : 0;
}
uint16_t checked_depth(size_t d) {
  if (d > size_t(Value::kMaxDepth)) throw EvalError("value nested too deeply");
  return uint16_t(d);
}
}  // namespace

Value Value::make_list(List items, bool is_tuple) {
  Value v;
  size_t d = 0;
  for (const Value& e : items) {
    d = std::max<size_t>(d, child_depth(e));
    v.holds_namespace |= e.holds_namespace;
  }
  v.depth = checked_depth(d + 1);
  v.kind = Kind::kList;
  v.list = std::make_shared<const List>(std::move(items));
  v.tuple = is_tuple;
  return v;
}
Value Value::make_dict(Dict d) {
  Value v;
  size_t depth = 0;
  for (const auto& [k, e] : d.items) {
    depth = std::max<size_t>(depth, child_depth(e));
    v.holds_namespace |= e.holds_namespace;
  }
  v.depth = checked_depth(depth + 1);
  v.kind = Kind::kDict;
  v.dict = std::make_shared<const Dict>(std::move(d));
  return v;
}
Value Value::callable(std::string name, std::function<Value(const CallArgs&)> fn) {
  Value v;
  v.kind = Kind::kCallable;
  v.fn = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

double Value::as_double() const {
  switch (kind) {
    case Kind::kInt: return double(i);
    case Kind::kFloat: return f;
    case Kind::kBool: return b ? 1 : 0;
    default: return 0;
  }
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (equals(k, key)) return &v;
  }
  return nullptr;
}
const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.kind == Value::Kind::kString && k.s == key) return &v;
  }
  return nullptr;
}
void Dict::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

bool truthy(const Value& v) {
  if (v.generator) return true;
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.b;
    case Value::Kind::kInt: return v.i != 0;
    case Value::Kind::kFloat: return v.f != 0;
    case Value::Kind::kString: return !v.s.empty();
    case Value::Kind::kList: return !v.list->empty();
    case Value::Kind::kDict: return !v.dict->items.empty();
    default: return true;
  }
}

// Python's float repr: the shortest round-trip digits, fixed notation for 1e-4 <= |v| < 1e16.
std::string format_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exp >= -5 + 1 && exp < 16) {  // Python: repr uses fixed when -4 <= exp < 16
    if (exp >= 0) {
      if (int(digits.size()) <= exp + 1) {
        out = digits + std::string(size_t(exp + 1 - int(digits.size())), '0') + ".0";
      } else {
        out = digits.substr(0, size_t(exp + 1)) + "." + digits.substr(size_t(exp + 1));
      }
    } else {
      out = "0." + std::string(size_t(-exp - 1), '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return neg ? "-" + out : out;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == quote) {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += char(c);
    }
  }
  out += quote;
  return out;
}

uint32_t decode_utf8(std::string_view cp) {
  const auto b = [&](size_t i) { return uint32_t(static_cast<unsigned char>(cp[i])); };
  switch (cp.size()) {
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    case 4: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    default: return b(0);
  }
}

void json_string(const std::string& s, std::string& out, bool ensure_ascii) {
  out += '"';
  if (ensure_ascii) {
    for (std::string_view cp : code_points(s)) {
      if (cp.size() == 1) {
        std::string tmp;
        json_string(std::string(cp), tmp, false);
        out.append(tmp, 1, tmp.size() - 2);
        continue;
      }
      const uint32_t c = decode_utf8(cp);
      char b[16];
      if (c >= 0x10000) {
        const uint32_t v = c - 0x10000;
        std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(b, sizeof b, "\\u%04x", c);
      }
      out += b;
    }
    out += '"';
    return;
  }
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

void json_value(const Value& v, int indent, bool sort_keys, bool ascii, int depth, std::string& out) {
  if (depth > 512) throw EvalError("tojson: value nested too deeply");
  auto newline = [&](int level) {
    out += '\n';
    out.append(size_t(indent) * size_t(level), ' ');
  };
  const char* item_sep = indent >= 0 ? "," : ", ";
  switch (v.kind) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.b ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.i); return;
    case Value::Kind::kFloat:
      if (std::isnan(v.f)) {
        out += "NaN";
      } else if (std::isinf(v.f)) {
        out += v.f < 0 ? "-Infinity" : "Infinity";
      } else {
        out += format_float(v.f);
      }
      return;
    case Value::Kind::kString: json_string(v.s, out, ascii); return;
    case Value::Kind::kList: {
      if (v.generator) throw EvalError("Object of type generator is not JSON serializable");
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      bool first = true;
      for (const Value& e : *v.list) {
        if (!first) out += item_sep;
        first = false;
        if (indent >= 0) newline(depth + 1);
        json_value(e, indent, sort_keys, ascii, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      const Dict& d = v.kind == Value::Kind::kDict ? *v.dict : *v.ns;
      if (v.kind == Value::Kind::kNamespace) throw EvalError("Object of type Namespace is not JSON serializable");
      if (d.items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : d.items) items.push_back(&kv);
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return less(a->first, b->first); });
      }
      out += '{';
      bool first = true;
      for (const auto* kv : items) {
        if (!first) out += item_sep;
        first = false;
        if (indent >= 0) newline(depth + 1);
        const Value& k = kv->first;
        if (k.is_string()) {
          json_string(k.s, out, ascii);
        } else if (k.kind == Value::Kind::kInt || k.kind == Value::Kind::kFloat || k.kind == Value::Kind::kBool ||
                   k.is_none()) {
          std::string ks;
          json_value(k, -1, false, ascii, depth + 1, ks);
          json_string(ks, out, ascii);
        } else {
          throw EvalError("keys must be str, int, float, bool or None, not " + type_name(k));
        }
        out += ": ";
        json_value(kv->second, indent, sort_keys, ascii, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return;
    }
    case Value::Kind::kUndefined: throw EvalError("Object of type Undefined is not JSON serializable");
    default: throw EvalError("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

void repr_into(const Value& v, int depth, std::string& out) {
  if (depth > 512) throw EvalError("value nested too deeply to print");
  switch (v.kind) {
    case Value::Kind::kString: out += repr_string(v.s); return;
    case Value::Kind::kList: {
      if (v.generator) {
        out += "<generator object>";
        return;
      }
      out += v.tuple ? '(' : '[';
      bool first = true;
      for (const Value& e : *v.list) {
        if (!first) out += ", ";
        first = false;
        repr_into(e, depth + 1, out);
      }
      if (v.tuple && v.list->size() == 1) out += ',';
      out += v.tuple ? ')' : ']';
      return;
    }
    case Value::Kind::kDict: {
      out += '{';
      bool first = true;
      for (const auto& [k, e] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        repr_into(k, depth + 1, out);
        out += ": ";
        repr_into(e, depth + 1, out);
      }
      out += '}';
      return;
    }
    default: out += to_str(v);
  }
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.b ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.i);
    case Value::Kind::kFloat: return format_float(v.f);
    case Value::Kind::kString: return v.s;
    case Value::Kind::kCallable: return "<function " + v.fn->name + ">";
    case Value::Kind::kNamespace: return "<Namespace>";
    default: {
      std::string out;
      repr_into(v, 0, out);
      return out;
    }
  }
}

std::string repr(const Value& v) {
  std::string out;
  repr_into(v, 0, out);
  return out;
}

std::string to_json(const Value& v, int indent, bool sort_keys, bool ensure_ascii) {
  std::string out;
  json_value(v, indent, sort_keys, ensure_ascii, 0, out);
  return out;
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList: return v.generator ? "generator" : v.tuple ? "tuple" : "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kCallable: return "function";
    case Value::Kind::kNamespace: return "Namespace";
  }
  return "object";
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::kFloat || b.kind == Value::Kind::kFloat) return a.as_double() == b.as_double();
    const int64_t x = a.kind == Value::Kind::kBool ? a.b : a.i, y = b.kind == Value::Kind::kBool ? b.b : b.i;
    return x == y;
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.s == b.s;
    case Value::Kind::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i) {
        if (!equals((*a.list)[i], (*b.list)[i])) return false;
      }
      return true;
    case Value::Kind::kDict:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* o = b.dict->find(k);
        if (o == nullptr || !equals(v, *o)) return false;
      }
      return true;
    case Value::Kind::kCallable: return a.fn == b.fn;
    case Value::Kind::kNamespace: return a.ns == b.ns;
    default: return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
  if (a.is_string() && b.is_string()) return a.s < b.s;  // UTF-8 byte order == code point order
  if (a.is_list() && b.is_list()) {
    const size_t n = std::min(a.list->size(), b.list->size());
    for (size_t i = 0; i < n; ++i) {
      if (less((*a.list)[i], (*b.list)[i])) return true;
      if (less((*b.list)[i], (*a.list)[i])) return false;
    }
    return a.list->size() < b.list->size();
  }
  throw EvalError("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t n_code_points(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace hearth::chat
