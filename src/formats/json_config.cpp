#include "formats/json_config.h"

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mapped_file.h"

namespace hearth {

struct JsonConfig::Impl {
  nlohmann::json value;
};

JsonConfig::JsonConfig(std::shared_ptr<const Impl> impl, std::string path, std::string prefix)
    : impl_(std::move(impl)), path_(std::move(path)), prefix_(std::move(prefix)) {}
JsonConfig::JsonConfig(const JsonConfig&) = default;
JsonConfig& JsonConfig::operator=(const JsonConfig&) = default;
JsonConfig::~JsonConfig() = default;

JsonConfig JsonConfig::load(const std::string& path) { return parse(read_text_file(path), path); }

JsonConfig JsonConfig::parse(const std::string& text, const std::string& path) {
  auto impl = std::make_shared<Impl>();
  try {
    impl->value = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw FileError(path, std::string("not valid JSON: ") + e.what());
  }
  if (!impl->value.is_object()) throw FileError(path, "expected a JSON object at the top level");
  return JsonConfig(std::move(impl), path, "");
}

void JsonConfig::fail(const std::string& key, const std::string& problem) const {
  throw FileError(path_, "'" + prefix_ + key + "' " + problem);
}

namespace {
const nlohmann::json* lookup(const nlohmann::json& obj, const std::string& key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}
std::string type_of(const nlohmann::json& v) { return std::string(v.type_name()) + " " + v.dump(); }
}  // namespace

bool JsonConfig::has(const std::string& key) const { return lookup(impl_->value, key) != nullptr; }

int64_t JsonConfig::get_int(const std::string& key) const {
  const nlohmann::json* v = lookup(impl_->value, key);
  if (v == nullptr) fail(key, "is missing");
  if (v->is_number_integer()) return v->get<int64_t>();
  // Some configs write integral floats ("num_hidden_layers": 2.0).
  if (v->is_number_float() && v->get<double>() == static_cast<double>(static_cast<int64_t>(v->get<double>()))) {
    return static_cast<int64_t>(v->get<double>());
  }
  fail(key, "expected an integer, got " + type_of(*v));
}

int64_t JsonConfig::get_int(const std::string& key, int64_t fallback) const { return has(key) ? get_int(key) : fallback; }

double JsonConfig::get_float(const std::string& key) const {
  const nlohmann::json* v = lookup(impl_->value, key);
  if (v == nullptr) fail(key, "is missing");
  if (!v->is_number()) fail(key, "expected a number, got " + type_of(*v));
  return v->get<double>();
}

double JsonConfig::get_float(const std::string& key, double fallback) const { return has(key) ? get_float(key) : fallback; }

std::optional<double> JsonConfig::get_float_opt(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return get_float(key);
}

bool JsonConfig::get_bool(const std::string& key, bool fallback) const {
  const nlohmann::json* v = lookup(impl_->value, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) fail(key, "expected true or false, got " + type_of(*v));
  return v->get<bool>();
}

std::string JsonConfig::get_string(const std::string& key) const {
  const nlohmann::json* v = lookup(impl_->value, key);
  if (v == nullptr) fail(key, "is missing");
  if (!v->is_string()) fail(key, "expected a string, got " + type_of(*v));
  return v->get<std::string>();
}

std::string JsonConfig::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

std::vector<int64_t> JsonConfig::get_int_list(const std::string& key) const {
  const nlohmann::json* v = lookup(impl_->value, key);
  std::vector<int64_t> out;
  if (v == nullptr) return out;
  if (v->is_number_integer()) return {v->get<int64_t>()};
  if (!v->is_array()) fail(key, "expected an integer or a list of integers, got " + type_of(*v));
  for (const auto& e : *v) {
    if (!e.is_number_integer()) fail(key, "expected a list of integers, found " + type_of(e));
    out.push_back(e.get<int64_t>());
  }
  return out;
}

std::vector<std::string> JsonConfig::get_string_list(const std::string& key) const {
  const nlohmann::json* v = lookup(impl_->value, key);
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
  const nlohmann::json* v = lookup(impl_->value, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_object()) fail(key, "expected an object, got " + type_of(*v));
  auto impl = std::make_shared<Impl>();
  impl->value = *v;
  return JsonConfig(std::move(impl), path_, prefix_ + key + ".");
}

std::vector<std::pair<std::string, std::string>> JsonConfig::string_items() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto it = impl_->value.begin(); it != impl_->value.end(); ++it) {
    if (!it->is_string()) fail(it.key(), "expected a string, got " + type_of(*it));
    out.emplace_back(it.key(), it->get<std::string>());
  }
  return out;
}

std::string JsonConfig::dump() const { return impl_->value.dump(); }

}  // namespace hearth
