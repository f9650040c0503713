// Jinja2's built-in filters and tests (the ones chat templates use), plus transformers'
// tojson. Semantics follow jinja2/filters.py and jinja2/tests.py of Jinja2 3.1.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/strings.h"
#include "chat/runtime.h"

namespace hearth::chat {
namespace {

using FilterFn = Value (*)(const Value&, const CallArgs&);

// By value: callers pass temporaries as the fallback (`Value::integer(4)`), and a reference to
// one would dangle once bound to a name (found by the template fuzzer).
Value arg(const CallArgs& a, const char* name, size_t index, const Value& fallback) {
  const Value* v = a.get(name, index);
  return v ? *v : fallback;
}
const Value kNone = Value::none();
const Value kFalse = Value::boolean(false);
const Value kEmpty = Value::string("");

std::string str_of(const Value& v) { return to_str(v); }

// environment.getitem over a dotted attribute path ("a.b.0"), as make_attrgetter does.
Value attr_path(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return get_item(item, attribute);
  Value cur = item;
  for (const std::string& part : split(attribute.s, '.')) {
    const auto idx = parse_int(part);
    cur = idx ? get_item(cur, Value::integer(*idx)) : get_item(cur, Value::string(part));
  }
  return cur;
}

// Sort key for sort/dictsort/unique: lowercase strings unless case-sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.s));
  return v;
}

Value f_tojson(const Value& v, const CallArgs& a) {
  const Value indent = arg(a, "indent", 0, kNone);
  int n = -1;
  if (indent.kind == Value::Kind::kInt) n = int(std::clamp<int64_t>(indent.i, 0, 64));
  if (indent.is_string()) throw EvalError("tojson: string indent is not supported");
  if (a.get("separators", 3) && !a.get("separators", 3)->is_none()) throw EvalError("tojson: separators not supported");
  return Value::string(
      to_json(v, n, truthy(arg(a, "sort_keys", 4, kFalse)), truthy(arg(a, "ensure_ascii", 99, kFalse))));
}
Value f_trim(const Value& v, const CallArgs& a) {
  return Value::string(py_strip(str_of(v), a.get("chars", 0), true, true));
}
Value f_length(const Value& v, const CallArgs&) { return Value::integer(length(v)); }
Value f_items(const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value::make_list({});
  if (!v.is_dict()) throw EvalError("items filter expected a mapping, got " + type_name(v));
  List out;
  for (const auto& [k, e] : v.dict->items) out.push_back(Value::make_list({k, e}, true));
  return Value::make_list(std::move(out));
}
Value f_list(const Value& v, const CallArgs&) { return Value::make_list(iterate(v)); }
Value f_string(const Value& v, const CallArgs&) { return Value::string(str_of(v)); }
Value f_safe(const Value& v, const CallArgs&) {
  Value r = Value::string(str_of(v));
  r.markup = true;
  return r;
}
// Jinja's select/map/unique/batch are generators (and reverse an iterator): iterable, always
// true, without len() and not JSON-serializable.
Value generator(List items) {
  Value v = Value::make_list(std::move(items));
  v.generator = true;
  return v;
}
Value f_upper(const Value& v, const CallArgs&) { return Value::string(py_upper(str_of(v))); }
Value f_lower(const Value& v, const CallArgs&) { return Value::string(py_lower(str_of(v))); }
Value f_capitalize(const Value& v, const CallArgs&) {
  std::string s = py_lower(str_of(v));
  if (!s.empty()) s[0] = char(std::toupper(static_cast<unsigned char>(s[0])));
  return Value::string(s);
}
Value f_title(const Value& v, const CallArgs&) {
  std::string s = str_of(v);
  bool start = true;
  for (char& c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (start && std::isalnum(u)) {
      c = char(std::toupper(u));
      start = false;
    } else if (!start) {
      c = char(std::tolower(u));
    }
    if (c == ' ' || c == '-' || c == '_' || c == '(' || c == '[' || c == '{' || c == '\t' || c == '\n') start = true;
  }
  return Value::string(s);
}
Value f_replace(const Value& v, const CallArgs& a) {
  const Value count = arg(a, "count", 2, kNone);
  return Value::string(py_replace(str_of(v), str_of(arg(a, "old", 0, kEmpty)), str_of(arg(a, "new", 1, kEmpty)),
                                  count.kind == Value::Kind::kInt ? count.i : -1));
}
Value f_default(const Value& v, const CallArgs& a) {
  const bool boolean = truthy(arg(a, "boolean", 1, kFalse));
  if (v.is_undefined() || (boolean && !truthy(v))) return arg(a, "default_value", 0, kEmpty);
  return v;
}
Value f_first(const Value& v, const CallArgs&) {
  auto items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}
Value f_last(const Value& v, const CallArgs&) {
  auto items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}
Value f_reverse(const Value& v, const CallArgs&) {
  if (v.is_string()) {
    auto cps = code_points(v.s);
    std::string out;
    for (size_t i = cps.size(); i-- > 0;) out += cps[i];
    return Value::string(out);
  }
  auto items = iterate(v);
  std::reverse(items.begin(), items.end());
  return generator(std::move(items));
}
Value f_join(const Value& v, const CallArgs& a) {
  const std::string sep = str_of(arg(a, "d", 0, kEmpty));
  const Value* attribute = a.get("attribute", 1);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += str_of(attribute ? attr_path(item, *attribute) : item);
  }
  return Value::string(out);
}
Value f_int(const Value& v, const CallArgs& a) {
  const Value dflt = arg(a, "default", 0, Value::integer(0));
  switch (v.kind) {
    case Value::Kind::kInt: return v;
    case Value::Kind::kBool: return Value::integer(v.b);
    case Value::Kind::kFloat: return std::isfinite(v.f) ? Value::integer(int64_t(v.f)) : dflt;
    case Value::Kind::kString: {
      const std::string s = py_strip(v.s, nullptr, true, true);
      if (auto i = parse_int(s)) return Value::integer(*i);
      if (auto d = parse_double(s); d && std::isfinite(*d)) return Value::integer(int64_t(*d));
      return dflt;
    }
    default: return dflt;
  }
}
Value f_float(const Value& v, const CallArgs& a) {
  const Value dflt = arg(a, "default", 0, Value::floating(0));
  if (v.is_number()) return Value::floating(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_double(py_strip(v.s, nullptr, true, true))) return Value::floating(*d);
  }
  return dflt;
}
Value f_abs(const Value& v, const CallArgs&) {
  if (v.kind == Value::Kind::kInt) return Value::integer(v.i < 0 ? -v.i : v.i);
  if (v.kind == Value::Kind::kFloat) return Value::floating(std::fabs(v.f));
  throw EvalError("bad operand type for abs(): '" + type_name(v) + "'");
}
Value f_round(const Value& v, const CallArgs& a) {
  if (!v.is_number()) throw EvalError("round filter expected a number, got " + type_name(v));
  const Value p = arg(a, "precision", 0, Value::integer(0));
  const std::string method = str_of(arg(a, "method", 1, Value::string("common")));
  const double scale = std::pow(10.0, double(p.kind == Value::Kind::kInt ? p.i : 0));
  const double x = v.as_double() * scale;
  double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
  return Value::floating(r / scale);
}
Value f_escape(const Value& v, const CallArgs&) {
  if (v.markup) return v;
  Value r = Value::string(html_escape(str_of(v)));
  r.markup = true;
  return r;
}
Value f_indent(const Value& v, const CallArgs& a) {
  const Value width = arg(a, "width", 0, Value::integer(4));
  const std::string pad = width.is_string() ? width.s : std::string(size_t(std::clamp<int64_t>(width.i, 0, 256)), ' ');
  const bool first = truthy(arg(a, "first", 1, kFalse)), blank = truthy(arg(a, "blank", 2, kFalse));
  std::string s = str_of(v) + "\n";
  std::vector<std::string> lines;  // str.splitlines() on \n, \r\n, \r, \v, \f, \x1c-\x1e
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= '\x1c' && c <= '\x1e')) {
      lines.push_back(s.substr(start, i - start));
      if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  std::string rv;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) rv += "\n";
    if (i > 0 && (blank || !lines[i].empty())) rv += pad;
    rv += lines[i];
  }
  return Value::string(first ? pad + rv : rv);
}
Value f_wordcount(const Value& v, const CallArgs&) {
  int64_t n = 0;
  bool in_word = false;
  for (char c : str_of(v)) {
    const bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (static_cast<unsigned char>(c) >= 0x80);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}
Value f_center(const Value& v, const CallArgs& a) {
  const std::string s = str_of(v);
  const int64_t width = arg(a, "width", 0, Value::integer(80)).i, len = int64_t(n_code_points(s));
  if (width <= len) return Value::string(s);
  const int64_t total = std::min<int64_t>(width - len, 1 << 20), left = total / 2 + (total & width & 1);
  return Value::string(std::string(size_t(left), ' ') + s + std::string(size_t(total - left), ' '));
}

Value sorted_list(std::vector<Value> items, const CallArgs& a, size_t reverse_at, size_t cs_at, size_t attr_at) {
  const bool reverse = truthy(arg(a, "reverse", reverse_at, kFalse));
  const bool cs = truthy(arg(a, "case_sensitive", cs_at, kFalse));
  const Value* attribute = a.get("attribute", attr_at);
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) keyed.emplace_back(sort_key(attribute ? attr_path(item, *attribute) : item, cs), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
  List out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::make_list(std::move(out));
}
Value f_sort(const Value& v, const CallArgs& a) { return sorted_list(iterate(v), a, 0, 1, 2); }
Value f_dictsort(const Value& v, const CallArgs& a) {
  if (!v.is_dict()) throw EvalError("dictsort filter expected a mapping, got " + type_name(v));
  const bool cs = truthy(arg(a, "case_sensitive", 0, kFalse));
  const bool by_value = str_of(arg(a, "by", 1, Value::string("key"))) == "value";
  const bool reverse = truthy(arg(a, "reverse", 2, kFalse));
  List items;
  for (const auto& [k, e] : v.dict->items) items.push_back(Value::make_list({k, e}, true));
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = sort_key((*x.list)[by_value], cs), ky = sort_key((*y.list)[by_value], cs);
    return reverse ? less(ky, kx) : less(kx, ky);
  });
  return Value::make_list(std::move(items));
}
Value f_unique(const Value& v, const CallArgs& a) {
  const bool cs = truthy(arg(a, "case_sensitive", 0, kFalse));
  const Value* attribute = a.get("attribute", 1);
  List out, seen;
  for (const Value& item : iterate(v)) {
    Value key = sort_key(attribute ? attr_path(item, *attribute) : item, cs);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return generator(std::move(out));
}
Value min_max(const Value& v, const CallArgs& a, bool want_max) {
  const bool cs = truthy(arg(a, "case_sensitive", 0, kFalse));
  const Value* attribute = a.get("attribute", 1);
  const auto items = iterate(v);
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    const Value ki = sort_key(attribute ? attr_path(items[i], *attribute) : items[i], cs);
    const Value kb = sort_key(attribute ? attr_path(items[best], *attribute) : items[best], cs);
    if (want_max ? less(kb, ki) : less(ki, kb)) best = i;
  }
  return items[best];
}
Value f_min(const Value& v, const CallArgs& a) { return min_max(v, a, false); }
Value f_max(const Value& v, const CallArgs& a) { return min_max(v, a, true); }
Value f_sum(const Value& v, const CallArgs& a) {
  const Value* attribute = a.get("attribute", 0);
  Value total = arg(a, "start", 1, Value::integer(0));
  for (const Value& item : iterate(v))
    total = binary_op("+", total, attribute ? attr_path(item, *attribute) : item, 1 << 30);
  return total;
}
Value f_batch(const Value& v, const CallArgs& a) {
  const int64_t n = arg(a, "linecount", 0, Value::integer(1)).i;
  if (n <= 0) throw EvalError("batch size must be positive");
  const Value* fill = a.get("fill_with", 1);
  List out, cur;
  for (const Value& item : iterate(v)) {
    cur.push_back(item);
    if (int64_t(cur.size()) == n) out.push_back(Value::make_list(std::exchange(cur, {})));
  }
  if (!cur.empty()) {
    while (fill && int64_t(cur.size()) < n) cur.push_back(*fill);
    out.push_back(Value::make_list(std::move(cur)));
  }
  return generator(std::move(out));
}
Value f_attr(const Value& v, const CallArgs& a) { return get_attr(v, str_of(arg(a, "name", 0, kEmpty))); }

// select/reject/selectattr/rejectattr: `attr` says whether the first argument names an attribute.
Value select_impl(const Value& v, const CallArgs& a, bool attr, bool keep) {
  size_t next = 0;
  const Value* attribute = nullptr;
  if (attr) {
    if (a.pos.empty()) throw EvalError("selectattr/rejectattr expected an attribute name");
    attribute = &a.pos[next++];
  }
  std::string test;
  if (next < a.pos.size()) test = str_of(a.pos[next++]);
  if (!test.empty() && !has_test(test)) throw EvalError("no test named '" + printable(test, 40) + "'");
  CallArgs targs;
  targs.pos.assign(a.pos.begin() + long(next), a.pos.end());
  targs.kw = a.kw;
  List out;
  if (!truthy(v)) return generator({});  // `if value:` before iterating, as Jinja does
  for (const Value& item : iterate(v)) {
    const Value subject = attribute ? attr_path(item, *attribute) : item;
    const bool pass = test.empty() ? truthy(subject) : apply_test(test, subject, targs);
    if (pass == keep) out.push_back(item);
  }
  return generator(std::move(out));
}
Value f_select(const Value& v, const CallArgs& a) { return select_impl(v, a, false, true); }
Value f_reject(const Value& v, const CallArgs& a) { return select_impl(v, a, false, false); }
Value f_selectattr(const Value& v, const CallArgs& a) { return select_impl(v, a, true, true); }
Value f_rejectattr(const Value& v, const CallArgs& a) { return select_impl(v, a, true, false); }
Value f_map(const Value& v, const CallArgs& a) {
  List out;
  if (!truthy(v)) return generator({});
  if (const Value* attribute = a.get("attribute", 99)) {
    const Value* dflt = a.get("default", 99);
    for (const Value& item : iterate(v)) {
      Value r = attr_path(item, *attribute);
      out.push_back(r.is_undefined() && dflt ? *dflt : r);
    }
    return generator(std::move(out));
  }
  if (a.pos.empty()) throw EvalError("map expected a filter name or attribute=");
  const std::string name = str_of(a.pos[0]);
  if (!has_filter(name)) throw EvalError("no filter named '" + printable(name, 40) + "'");
  CallArgs fargs;
  fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
  fargs.kw = a.kw;
  for (const Value& item : iterate(v)) out.push_back(apply_filter(name, item, fargs));
  return generator(std::move(out));
}

struct FilterEntry {
  const char* name;
  FilterFn fn;
};
const FilterEntry kFilters[] = {
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"length", f_length},
    {"count", f_length},
    {"items", f_items},
    {"list", f_list},
    {"string", f_string},
    {"safe", f_safe},
    {"upper", f_upper},
    {"lower", f_lower},
    {"capitalize", f_capitalize},
    {"title", f_title},
    {"replace", f_replace},
    {"default", f_default},
    {"d", f_default},
    {"first", f_first},
    {"last", f_last},
    {"reverse", f_reverse},
    {"join", f_join},
    {"int", f_int},
    {"float", f_float},
    {"abs", f_abs},
    {"round", f_round},
    {"escape", f_escape},
    {"e", f_escape},
    {"indent", f_indent},
    {"wordcount", f_wordcount},
    {"center", f_center},
    {"sort", f_sort},
    {"dictsort", f_dictsort},
    {"unique", f_unique},
    {"min", f_min},
    {"max", f_max},
    {"sum", f_sum},
    {"batch", f_batch},
    {"attr", f_attr},
    {"select", f_select},
    {"reject", f_reject},
    {"selectattr", f_selectattr},
    {"rejectattr", f_rejectattr},
    {"map", f_map},
};

const FilterEntry* find_filter(std::string_view name) {
  for (const auto& f : kFilters) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

const Value& test_arg(const CallArgs& a, const char* what) {
  if (a.pos.empty()) throw EvalError(std::string("test '") + what + "' expected an argument");
  return a.pos[0];
}

const char* const kTests[] = {
    "defined", "undefined",   "none",     "string",   "number",  "integer", "float",       "boolean",
    "mapping", "iterable",    "sequence", "callable", "odd",     "even",    "divisibleby", "eq",
    "equalto", "==",          "ne",       "!=",       "lt",      "<",       "lessthan",    "gt",
    ">",       "greaterthan", "le",       "<=",       "ge",      ">=",      "true",        "false",
    "sameas",  "in",          "lower",    "upper",    "escaped", "filter",  "test"};

}  // namespace

bool has_filter(std::string_view name) { return find_filter(name) != nullptr; }

bool has_test(std::string_view name) {
  return std::any_of(std::begin(kTests), std::end(kTests), [&](const char* t) { return name == t; });
}

Value apply_filter(std::string_view name, const Value& input, const CallArgs& args) {
  const FilterEntry* f = find_filter(name);
  if (f == nullptr) throw EvalError("no filter named '" + printable(name, 40) + "'");
  return f->fn(input, args);
}

bool apply_test(std::string_view t, const Value& v, const CallArgs& a) {
  using K = Value::Kind;
  if (t == "defined") return !v.is_undefined();
  if (t == "undefined") return v.is_undefined();
  if (t == "none") return v.is_none();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (t == "integer") return v.kind == K::kInt;
  if (t == "float") return v.kind == K::kFloat;
  if (t == "boolean") return v.kind == K::kBool;
  if (t == "mapping") return v.is_dict();
  if (t == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (t == "sequence") return v.is_string() || (v.is_list() && !v.generator) || v.is_dict() || v.is_undefined();
  if (t == "callable") return v.kind == K::kCallable;
  if (t == "true") return v.kind == K::kBool && v.b;
  if (t == "false") return v.kind == K::kBool && !v.b;
  if (t == "lower") return v.is_string() && py_lower(v.s) == v.s;
  if (t == "upper") return v.is_string() && py_upper(v.s) == v.s;
  if (t == "escaped") return false;
  if (t == "filter") return v.is_string() && has_filter(v.s);
  if (t == "test") return v.is_string() && has_test(v.s);
  if (t == "odd" || t == "even") {
    if (v.kind != K::kInt && v.kind != K::kBool) throw EvalError("test '" + std::string(t) + "' expected an integer");
    const int64_t i = v.kind == K::kBool ? v.b : v.i;
    return (i % 2 != 0) == (t == "odd");
  }
  if (t == "divisibleby") {
    const Value& n = test_arg(a, "divisibleby");
    const Value r = binary_op("%", v, n, 1);
    return !truthy(r);
  }
  if (t == "eq" || t == "equalto" || t == "==") return equals(v, test_arg(a, "eq"));
  if (t == "ne" || t == "!=") return !equals(v, test_arg(a, "ne"));
  if (t == "lt" || t == "<" || t == "lessthan") return less(v, test_arg(a, "lt"));
  if (t == "gt" || t == ">" || t == "greaterthan") return less(test_arg(a, "gt"), v);
  if (t == "le" || t == "<=") return !less(test_arg(a, "le"), v);
  if (t == "ge" || t == ">=") return !less(v, test_arg(a, "ge"));
  if (t == "in") return contains(test_arg(a, "in"), v);
  if (t == "sameas") {
    const Value& o = test_arg(a, "sameas");
    if (v.kind != o.kind) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.kind == K::kBool) return v.b == o.b;
    if (v.is_list()) return v.list == o.list;
    if (v.is_dict()) return v.dict == o.dict;
    return equals(v, o) && v.kind != K::kFloat;
  }
  throw EvalError("no test named '" + printable(t, 40) + "'");
}

}  // namespace hearth::chat
