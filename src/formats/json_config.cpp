#include "formats/json_config.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mapped_file.h"
#include "base/strings.h"

namespace hearth {

// Nested objects share the parsed document rather than copying their subtree (a copy recurses
// once per nesting level, and a hostile file can nest deeply enough to overflow the stack).
struct JsonConfig::Impl {
  std::shared_ptr<const nlohmann::json> root;
  const nlohmann::json* value = nullptr;  // this object, inside *root
};

namespace {}  // namespace

JsonConfig::JsonConfig(std::shared_ptr<const Impl> impl, std::string path, std::string prefix)
    : impl_(std::move(impl)), path_(std::move(path)), prefix_(std::move(prefix)) {}
JsonConfig::JsonConfig(const JsonConfig&) = default;
JsonConfig& JsonConfig::operator=(const JsonConfig&) = default;
JsonConfig::~JsonConfig() = default;

JsonConfig JsonConfig::load(const std::string& path) { return parse(read_text_file(path), path); }

JsonConfig JsonConfig::parse(const std::string& text, const std::string& path) {
  auto root = std::make_shared<nlohmann::json>();
  try {
    *root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw FileError(path, std::string("not valid JSON: ") + printable(e.what(), 400));
  }
  if (!root->is_object()) throw FileError(path, "expected a JSON object at the top level");
  const nlohmann::json* value = root.get();
  return JsonConfig(std::make_shared<const Impl>(Impl{std::move(root), value}), path, "");
}

void JsonConfig::fail(const std::string& key, const std::string& problem) const {
  throw FileError(path_, "'" + printable(prefix_ + key) + "' " + problem);
}

namespace {
const nlohmann::json* lookup(const nlohmann::json& obj, const std::string& key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}
// A value for an error message: scalars as JSON, containers by type only (dumping a nested
// value recurses per level, and it may be huge).
std::string type_of(const nlohmann::json& v) {
  if (v.is_structured()) return v.type_name();
  return std::string(v.type_name()) + " " + printable(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}
// An integer JSON number as int64_t; nullopt when it is unsigned and past INT64_MAX.
std::optional<int64_t> as_int64(const nlohmann::json& v) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return std::nullopt;
  }
  return v.get<int64_t>();
}
}  // namespace

bool JsonConfig::has(const std::string& key) const { return lookup(*impl_->value, key) != nullptr; }

int64_t JsonConfig::get_int(const std::string& key) const {
  const nlohmann::json* v = lookup(*impl_->value, key);
  if (v == nullptr) fail(key, "is missing");
  if (v->is_number_integer()) {
    if (auto n = as_int64(*v)) return *n;
    fail(key, "is out of range: " + v->dump());
  }
  // Some configs write integral floats ("num_hidden_layers": 2.0). Range-check before the
  // cast: converting an out-of-range double to int64_t is undefined.
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (d >= -0x1p63 && d < 0x1p63 && d == std::trunc(d)) return static_cast<int64_t>(d);
  }
  fail(key, "expected an integer, got " + type_of(*v));
}

int64_t JsonConfig::get_int(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double JsonConfig::get_float(const std::string& key) const {
  const nlohmann::json* v = lookup(*impl_->value, key);
  if (v == nullptr) fail(key, "is missing");
  if (!v->is_number()) fail(key, "expected a number, got " + type_of(*v));
  return v->get<double>();
}

double JsonConfig::get_float(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

std::optional<double> JsonConfig::get_float_opt(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return get_float(key);
}

bool JsonConfig::get_bool(const std::string& key, bool fallback) const {
  const nlohmann::json* v = lookup(*impl_->value, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) fail(key, "expected true or false, got " + type_of(*v));
  return v->get<bool>();
}

std::string JsonConfig::get_string(const std::string& key) const {
  const nlohmann::json* v = lookup(*impl_->value, key);
  if (v == nullptr) fail(key, "is missing");
  if (!v->is_string()) fail(key, "expected a string, got " + type_of(*v));
  return v->get<std::string>();
}

std::string JsonConfig::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

std::vector<int64_t> JsonConfig::get_int_list(const std::string& key) const {
  const nlohmann::json* v = lookup(*impl_->value, key);
  std::vector<int64_t> out;
  if (v == nullptr) return out;
  if (v->is_number_integer()) {
    if (auto n = as_int64(*v)) return {*n};
    fail(key, "is out of range: " + v->dump());
  }
  if (!v->is_array()) fail(key, "expected an integer or a list of integers, got " + type_of(*v));
  for (const auto& e : *v) {
    if (!e.is_number_integer()) fail(key, "expected a list of integers, found " + type_of(e));
    const std::optional<int64_t> n = as_int64(e);
    if (!n) fail(key, "has an out-of-range element " + e.dump());
    out.push_back(*n);
  }
  return out;
}

std::vector<std::string> JsonConfig::get_string_list(const std::string& key) const {
  const nlohmann::json* v = lookup(*impl_->value, key);
  std::vector<std::string> out;
  if (v == nullptr) return out;
  if (!v->is_array()) fail(key, "expected a list of strings, got " + type_of(*v));
  for (const auto& e : *v) {
    if (!e.is_string()) fail(key, "expected a list of strings, found " + type_of(e));
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::optional<JsonConfig> JsonConfig::object(const std::string& key) const {
  const nlohmann::json* v = lookup(*impl_->value, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_object()) fail(key, "expected an object, got " + type_of(*v));
  return JsonConfig(std::make_shared<const Impl>(Impl{impl_->root, v}), path_, prefix_ + key + ".");
}

std::vector<std::pair<std::string, std::string>> JsonConfig::string_items() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto it = impl_->value->begin(); it != impl_->value->end(); ++it) {
    if (!it->is_string()) fail(it.key(), "expected a string, got " + type_of(*it));
    out.emplace_back(it.key(), it->get<std::string>());
  }
  return out;
}

std::string JsonConfig::dump() const { return impl_->value->dump(); }

}  // namespace hearth
