// Typed, path-aware access to tokenizer.json: every type or shape problem becomes a one-line
// FileError "origin: 'model.merges[3]' expected ...". Internal to the tokenizer library.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace hearth::tok {

class JsonView {
 public:
  JsonView(const nlohmann::json& value, const std::string& origin, std::string where)
      : value_(&value), origin_(&origin), where_(std::move(where)) {}

  const nlohmann::json& raw() const { return *value_; }
  const std::string& origin() const { return *origin_; }
  const std::string& where() const { return where_; }
  [[noreturn]] void fail(const std::string& problem) const;

  bool is_null() const { return value_->is_null(); }
  bool is_object() const { return value_->is_object(); }
  bool is_array() const { return value_->is_array(); }
  bool is_string() const { return value_->is_string(); }
  void expect_object() const;
  void expect_array() const;

  // A key that is absent or null counts as missing.
  bool has(const char* key) const;
  JsonView at(const char* key) const;  // required
  JsonView at(size_t index) const;
  size_t size() const;  // array length (expects an array)

  std::string str() const;
  bool boolean() const;
  int64_t integer() const;
  std::string str(const char* key) const { return at(key).str(); }
  std::string str_or(const char* key, const std::string& fallback) const;
  bool bool_or(const char* key, bool fallback) const;
  int64_t int_or(const char* key, int64_t fallback) const;
  // The "type" tag of a component object.
  std::string type() const { return str("type"); }

 private:
  const nlohmann::json* value_;
  const std::string* origin_;
  std::string where_;
};

// Nesting limit for Sequence components (each level recurses while building).
inline constexpr int kMaxComponentDepth = 32;

}  // namespace hearth::tok
