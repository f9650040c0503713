// Python's attribute/item access and the str, dict and list methods templates call. The
// environment is transformers' ImmutableSandboxedEnvironment, so mutating methods raise.
#include <algorithm>
#include <cctype>

#include "base/strings.h"
#include "chat/runtime.h"

namespace hearth::chat {
namespace {

bool is_py_space(std::string_view cp) {
  if (cp.size() == 1) {
    const char c = cp[0];
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
  }
  return cp == "\xc2\x85" || cp == "\xc2\xa0" || cp == "\xe2\x80\xa8" || cp == "\xe2\x80\xa9" || cp == "\xe3\x80\x80" ||
         (cp.size() == 3 && cp[0] == '\xe2' && cp[1] == '\x80' && (uint8_t(cp[2]) <= 0x8a || cp[2] == '\xaf')) ||
         cp == "\xe2\x81\x9f" || cp == "\xe1\x9a\x80";
}

std::string no_attr(const Value& obj, const std::string& name) {
  std::string out = "'";  // built by appends: GCC 12 warns falsely (-Wrestrict) on "'" + std::string
  out += type_name(obj);
  out += " object' has no attribute '";
  out += printable(name, 60);
  out += "'";
  return out;
}

const std::string& need_str(const Value* v, const char* what) {
  if (v == nullptr || !v->is_string()) {
    throw EvalError(std::string(what) + " expected a string argument, got " + (v ? type_name(*v) : "nothing"));
  }
  return v->s;
}

int64_t need_int(const Value* v, const char* what, int64_t fallback) {
  if (v == nullptr || v->is_none()) return fallback;
  if (v->kind == Value::Kind::kInt) return v->i;
  if (v->kind == Value::Kind::kBool) return v->b;
  throw EvalError(std::string(what) + " expected an integer argument, got " + type_name(*v));
}

std::vector<std::string> py_split(const std::string& s, const Value* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep == nullptr || sep->is_none()) {
    const auto cps = code_points(s);
    size_t i = 0;
    while (true) {
      while (i < cps.size() && is_py_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && int64_t(out.size()) >= maxsplit) {
        size_t end = cps.size();
        while (end > i && is_py_space(cps[end - 1])) --end;
        std::string rest;
        for (size_t k = i; k < end; ++k) rest += cps[k];
        out.push_back(rest);
        break;
      }
      std::string word;
      while (i < cps.size() && !is_py_space(cps[i])) word += cps[i++];
      out.push_back(word);
    }
    return out;
  }
  const std::string& d = need_str(sep, "split()");
  if (d.empty()) throw EvalError("empty separator");
  size_t start = 0;
  while (true) {
    const size_t at = (maxsplit >= 0 && int64_t(out.size()) >= maxsplit) ? std::string::npos : s.find(d, start);
    if (at == std::string::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, at - start));
    start = at + d.size();
  }
}

// str.format with automatic or explicit field numbering and keyword fields (no format specs
// beyond an empty one, which is all templates use).
std::string py_format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const size_t end = fmt.find('}', i);
      if (end == std::string::npos) throw EvalError("Single '{' encountered in format string");
      std::string field = fmt.substr(i + 1, end - i - 1);
      const size_t colon = field.find_first_of(":!");
      if (colon != std::string::npos) {
        if (colon + 1 != field.size()) throw EvalError("format specs are not supported: '" + printable(field) + "'");
        field.resize(colon);
      }
      const Value* v = nullptr;
      if (field.empty()) {
        v = auto_index < args.pos.size() ? &args.pos[auto_index] : nullptr;
        ++auto_index;
      } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
        const auto idx = parse_int(field);
        v = idx && *idx < int64_t(args.pos.size()) ? &args.pos[size_t(*idx)] : nullptr;
      } else {
        for (const auto& [k, kv] : args.kw) {
          if (k == field) v = &kv;
        }
      }
      if (v == nullptr) throw EvalError("format: no argument for field '{" + printable(field) + "}'");
      out += to_str(*v);
      i = end;
    } else if (c == '}') {
      throw EvalError("Single '}' encountered in format string");
    } else {
      out += c;
    }
  }
  return out;
}

bool starts_or_ends(const std::string& s, const Value* arg, bool start) {
  auto one = [&](const Value& p) {
    if (!p.is_string()) throw EvalError("startswith/endswith expected a string or tuple of strings");
    if (p.s.size() > s.size()) return false;
    return start ? s.compare(0, p.s.size(), p.s) == 0 : s.compare(s.size() - p.s.size(), p.s.size(), p.s) == 0;
  };
  if (arg && arg->is_list()) {
    for (const Value& p : *arg->list) {
      if (one(p)) return true;
    }
    return false;
  }
  if (arg == nullptr) throw EvalError("startswith/endswith expected an argument");
  return one(*arg);
}

std::string py_title(std::string_view s, bool capitalize_only) {
  std::string out(s);
  bool prev_cased = false;
  for (size_t i = 0; i < out.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(out[i]);
    const bool alpha = std::isalpha(c) != 0;
    if (capitalize_only) {
      out[i] = char(i == 0 ? std::toupper(c) : std::tolower(c));
    } else if (alpha) {
      out[i] = char(prev_cased ? std::tolower(c) : std::toupper(c));
    }
    prev_cased = alpha;
  }
  return out;
}

Value string_method(const Value& self, const std::string& name, const CallArgs& a) {
  const std::string& s = self.s;
  if (name == "startswith" || name == "endswith") {
    return Value::boolean(starts_or_ends(s, a.get("prefix", 0), name == "startswith"));
  }
  if (name == "strip") return Value::string(py_strip(s, a.get("chars", 0), true, true));
  if (name == "lstrip") return Value::string(py_strip(s, a.get("chars", 0), true, false));
  if (name == "rstrip") return Value::string(py_strip(s, a.get("chars", 0), false, true));
  if (name == "split" || name == "rsplit") {
    const int64_t maxsplit = need_int(a.get("maxsplit", 1), "split()", -1);
    if (name == "rsplit" && maxsplit >= 0) {
      // rsplit with a limit: split fully, then rejoin the leading pieces.
      const Value* sep = a.get("sep", 0);
      auto parts = py_split(s, sep, -1);
      if (int64_t(parts.size()) > maxsplit + 1 && sep && sep->is_string()) {
        std::string head;
        const size_t n_head = parts.size() - size_t(maxsplit);
        for (size_t k = 0; k < n_head; ++k) head += (k ? sep->s : "") + parts[k];
        parts.erase(parts.begin(), parts.begin() + long(n_head));
        parts.insert(parts.begin(), head);
      }
      List items;
      for (auto& p : parts) items.push_back(Value::string(std::move(p)));
      return Value::make_list(std::move(items));
    }
    List items;
    for (auto& p : py_split(s, a.get("sep", 0), maxsplit)) items.push_back(Value::string(std::move(p)));
    return Value::make_list(std::move(items));
  }
  if (name == "splitlines") {
    List items;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        items.push_back(Value::string(s.substr(start, i - start)));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) items.push_back(Value::string(s.substr(start)));
    return Value::make_list(std::move(items));
  }
  if (name == "replace") {
    return Value::string(py_replace(s, need_str(a.get("old", 0), "replace()"), need_str(a.get("new", 1), "replace()"),
                                    need_int(a.get("count", 2), "replace()", -1)));
  }
  if (name == "upper") return Value::string(py_upper(s));
  if (name == "lower") return Value::string(py_lower(s));
  if (name == "title") return Value::string(py_title(s, false));
  if (name == "capitalize") return Value::string(py_title(s, true));
  if (name == "find" || name == "rfind" || name == "index") {
    const std::string& sub = need_str(a.get("sub", 0), "find()");
    const size_t at = name == "rfind" ? s.rfind(sub) : s.find(sub);
    if (at == std::string::npos) {
      if (name == "index") throw EvalError("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(int64_t(n_code_points(std::string_view(s).substr(0, at))));
  }
  if (name == "count") {
    const std::string& sub = need_str(a.get("sub", 0), "count()");
    if (sub.empty()) return Value::integer(int64_t(n_code_points(s)) + 1);
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value::integer(n);
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const Value& v : iterate(a.pos.empty() ? Value() : a.pos[0])) {
      if (!v.is_string()) throw EvalError("sequence item: expected str instance, " + type_name(v) + " found");
      if (!first) out += s;
      first = false;
      out += v.s;
    }
    return Value::string(out);
  }
  if (name == "format") return Value::string(py_format(s, a));
  auto all_of = [&](auto pred) {
    if (s.empty()) return Value::boolean(false);
    return Value::boolean(std::all_of(s.begin(), s.end(), [&](char c) { return pred(static_cast<unsigned char>(c)); }));
  };
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") return all_of(::isdigit);
  if (name == "isalpha") return all_of(::isalpha);
  if (name == "isalnum") return all_of(::isalnum);
  if (name == "isspace") return all_of(::isspace);
  if (name == "islower") return Value::boolean(py_lower(s) == s && py_upper(s) != s);
  if (name == "isupper") return Value::boolean(py_upper(s) == s && py_lower(s) != s);
  throw EvalError(no_attr(self, name));
}

bool is_string_method(const std::string& n) {
  static const char* const kNames[] = {
      "startswith", "endswith", "strip",     "lstrip",     "rstrip",  "split",   "rsplit",  "splitlines", "replace",
      "upper",      "lower",    "title",     "capitalize", "find",    "rfind",   "index",   "count",      "join",
      "format",     "isdigit",  "isnumeric", "isdecimal",  "isalpha", "isalnum", "isspace", "islower",    "isupper"};
  return std::find(std::begin(kNames), std::end(kNames), n) != std::end(kNames);
}

Value dict_method(const Value& self, const std::string& name, const CallArgs& a) {
  const Dict& d = *self.dict;
  if (name == "items") {
    List items;
    for (const auto& [k, v] : d.items) items.push_back(Value::make_list({k, v}, true));
    return Value::make_list(std::move(items));
  }
  if (name == "keys" || name == "values") {
    List items;
    for (const auto& [k, v] : d.items) items.push_back(name == "keys" ? k : v);
    return Value::make_list(std::move(items));
  }
  if (name == "get") {
    if (a.pos.empty()) throw EvalError("get expected at least 1 argument, got 0");
    const Value* v = d.find(a.pos[0]);
    if (v) return *v;
    return a.pos.size() > 1 ? a.pos[1] : Value::none();
  }
  if (name == "copy") return self;
  throw EvalError("access to attribute '" + name + "' of 'dict' object is unsafe.");
}

bool is_dict_method(const std::string& n) {
  return n == "items" || n == "keys" || n == "values" || n == "get" || n == "copy" || n == "pop" || n == "update" ||
         n == "setdefault" || n == "clear" || n == "popitem";
}

Value list_method(const Value& self, const std::string& name, const CallArgs& a) {
  if (name == "index" || name == "count") {
    if (a.pos.empty()) throw EvalError(name + "() takes exactly one argument");
    int64_t n = 0;
    for (size_t i = 0; i < self.list->size(); ++i) {
      if (equals((*self.list)[i], a.pos[0])) {
        if (name == "index") return Value::integer(int64_t(i));
        ++n;
      }
    }
    if (name == "index") throw EvalError("value is not in list");
    return Value::integer(n);
  }
  throw EvalError("access to attribute '" + name + "' of '" + type_name(self) + "' object is unsafe.");
}

bool is_list_method(const std::string& n) {
  return n == "index" || n == "count" || n == "append" || n == "extend" || n == "pop" || n == "insert" ||
         n == "remove" || n == "sort" || n == "reverse" || n == "clear";
}

Value bind(const Value& self, const std::string& name,
           Value (*method)(const Value&, const std::string&, const CallArgs&)) {
  return Value::callable(name, [self, name, method](const CallArgs& a) { return method(self, name, a); });
}

int64_t normalize_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

}  // namespace

std::string py_strip(std::string_view s, const Value* chars, bool left, bool right) {
  const auto cps = code_points(s);
  std::vector<std::string_view> set;
  const bool whitespace = chars == nullptr || chars->is_none();
  if (!whitespace) set = code_points(need_str(chars, "strip()"));
  auto strip_me = [&](std::string_view cp) {
    return whitespace ? is_py_space(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_me(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_me(cps[e - 1])) --e;
  }
  if (b == e) return {};
  const char* begin = cps[b].data();
  const char* end = cps[e - 1].data() + cps[e - 1].size();
  return std::string(begin, end);
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  if (old.empty()) {
    std::string out;
    int64_t n = 0;
    for (std::string_view cp : code_points(s)) {
      if (count < 0 || n < count) out += repl, ++n;
      out += cp;
    }
    if (count < 0 || n < count) out += repl;
    return out;
  }
  std::string out;
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t at = s.find(old, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += repl;
    start = at + old.size();
    ++n;
  }
  out.append(s, start, std::string::npos);
  return out;
}

std::string py_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::toupper(static_cast<unsigned char>(c)));
  return out;
}
std::string py_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Value::Kind::kUndefined: throw EvalError(obj.s.empty() ? "value is undefined" : obj.s);
    case Value::Kind::kString:
      if (is_string_method(name)) return bind(obj, name, string_method);
      break;
    case Value::Kind::kDict:
      if (is_dict_method(name)) return bind(obj, name, dict_method);
      if (const Value* v = obj.dict->find(std::string_view(name))) return *v;
      break;
    case Value::Kind::kList:
      if (is_list_method(name)) return bind(obj, name, list_method);
      break;
    case Value::Kind::kNamespace:
      if (const Value* v = obj.ns->find(std::string_view(name))) return *v;
      break;
    default: break;
  }
  return Value::undefined(no_attr(obj, name));
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.generator) throw EvalError("'generator' object is not subscriptable");
  switch (obj.kind) {
    case Value::Kind::kUndefined: throw EvalError(obj.s.empty() ? "value is undefined" : obj.s);
    case Value::Kind::kDict:
      if (const Value* v = obj.dict->find(key)) return *v;
      break;
    case Value::Kind::kNamespace:
      if (const Value* v = obj.ns->find(key)) return *v;
      break;
    case Value::Kind::kList:
    case Value::Kind::kString:
      if (key.kind == Value::Kind::kInt || key.kind == Value::Kind::kBool) {
        const int64_t raw = key.kind == Value::Kind::kBool ? key.b : key.i;
        if (obj.is_list()) {
          const int64_t i = normalize_index(raw, int64_t(obj.list->size()));
          if (i >= 0 && i < int64_t(obj.list->size())) return (*obj.list)[size_t(i)];
        } else {
          const auto cps = code_points(obj.s);
          const int64_t i = normalize_index(raw, int64_t(cps.size()));
          if (i >= 0 && i < int64_t(cps.size())) return Value::string(std::string(cps[size_t(i)]));
        }
        return Value::undefined(type_name(obj) + " object has no element " + std::to_string(raw));
      }
      break;
    default: break;
  }
  if (key.is_string()) return get_attr(obj, key.s);
  return Value::undefined(no_attr(obj, to_str(key)));
}

Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  if (obj.is_undefined()) throw EvalError(obj.s.empty() ? "value is undefined" : obj.s);
  std::vector<std::string_view> cps;
  int64_t n;
  if (obj.is_string()) {
    cps = code_points(obj.s);
    n = int64_t(cps.size());
  } else if (obj.is_list() && !obj.generator) {
    n = int64_t(obj.list->size());
  } else {
    throw EvalError(squote(type_name(obj)) + " object is not subscriptable");
  }
  const int64_t st = need_int(step, "slice", 1);
  if (st == 0) throw EvalError("slice step cannot be zero");
  auto clamp = [&](const Value* v, int64_t dflt) {
    if (v == nullptr || v->is_none()) return dflt;
    int64_t i = need_int(v, "slice", 0);
    if (i < 0) i += n;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = clamp(start, st > 0 ? 0 : n - 1), e = clamp(stop, st > 0 ? n : -1);
  List items;
  std::string text;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (obj.is_string()) {
      text += cps[size_t(i)];
    } else {
      items.push_back((*obj.list)[size_t(i)]);
    }
  }
  return obj.is_string() ? Value::string(std::move(text)) : Value::make_list(std::move(items), obj.tuple);
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return *v.list;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, e] : v.dict->items) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (std::string_view cp : code_points(v.s)) chars.push_back(Value::string(std::string(cp)));
      return chars;
    }
    default: throw EvalError(squote(type_name(v)) + " object is not iterable");
  }
}

int64_t length(const Value& v) {
  if (v.generator) throw EvalError("object of type 'generator' has no len()");
  switch (v.kind) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return int64_t(n_code_points(v.s));
    case Value::Kind::kList: return int64_t(v.list->size());
    case Value::Kind::kDict: return int64_t(v.dict->items.size());
    default: throw EvalError("object of type '" + type_name(v) + "' has no len()");
  }
}

}  // namespace hearth::chat
