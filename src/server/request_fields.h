// Typed access to request JSON fields, shared by the OpenAI and Anthropic parsers. A field
// counts as given when present and not null (clients send null for "default"); a wrong type
// is a 400 naming the field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"

namespace hearth::server {

using ojson = nlohmann::ordered_json;

inline const ojson* field(const ojson& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

inline std::optional<double> number_field(const ojson& body, const char* name) {
  const ojson* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) bad_field(name, "must be a number");
  return v->get<double>();
}

// A number within [lo, hi].
inline std::optional<double> number_field(const ojson& body, const char* name, double lo, double hi) {
  std::optional<double> v = number_field(body, name);
  if (v && !(*v >= lo && *v <= hi)) {
    bad_field(name, "must be between " + ojson(lo).dump() + " and " + ojson(hi).dump() + ", got " + ojson(*v).dump());
  }
  return v;
}

inline std::optional<int64_t> integer_field(const ojson& body, const char* name) {
  const ojson* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) bad_field(name, "must be an integer");
  // A JSON integer past int64's range parses as unsigned; read as int64 it would wrap negative.
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX}) {
    bad_field(name, "must be at most " + std::to_string(INT64_MAX) + ", got " + v->dump());
  }
  return v->get<int64_t>();
}

inline std::optional<bool> bool_field(const ojson& body, const char* name) {
  const ojson* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) bad_field(name, "must be true or false");
  return v->get<bool>();
}

inline std::optional<std::string> string_field(const ojson& body, const char* name) {
  const ojson* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) bad_field(name, "must be a string");
  return v->get<std::string>();
}

// A key of a nested object that must be a string, named `where.key` when it is not.
inline const std::string& required_string(const ojson& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) bad_field(where + "." + key, "must be a string");
  return it->get_ref<const std::string&>();
}

// A string or a list of strings (OpenAI `stop`; Anthropic `stop_sequences` is a list).
inline std::vector<std::string> string_list_field(const ojson& body, const char* name) {
  const ojson* v = field(body, name);
  if (v == nullptr) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array()) bad_field(name, "must be a string or a list of strings");
  std::vector<std::string> out;
  for (const ojson& s : *v) {
    if (!s.is_string()) bad_field(name, "must be a string or a list of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

}  // namespace hearth::server
