// Read-only typed access to a JSON config file (config.json, generation_config.json, ...).
// Every wrong or missing field is a FileError naming the file and the key.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hearth {

class JsonConfig {
 public:
  static JsonConfig load(const std::string& path);
  static JsonConfig parse(const std::string& text, const std::string& path);
  JsonConfig(const JsonConfig&);
  JsonConfig& operator=(const JsonConfig&);
  ~JsonConfig();

  const std::string& path() const { return path_; }
  // `key` present and not null.
  bool has(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key) const;
  double get_float(const std::string& key, double fallback) const;
  std::optional<double> get_float_opt(const std::string& key) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  // An integer or a list of integers (e.g. eos_token_id); empty when absent.
  std::vector<int64_t> get_int_list(const std::string& key) const;
  std::vector<std::string> get_string_list(const std::string& key) const;
  // A nested object, or nullopt when absent/null.
  std::optional<JsonConfig> object(const std::string& key) const;
  // All members of an object whose values are strings ({"tensor": "file"} maps); a non-string
  // value is an error.
  std::vector<std::pair<std::string, std::string>> string_items() const;
  std::string dump() const;

 private:
  struct Impl;
  JsonConfig(std::shared_ptr<const Impl> impl, std::string path, std::string prefix);
  [[noreturn]] void fail(const std::string& key, const std::string& problem) const;
  std::shared_ptr<const Impl> impl_;
  std::string path_;
  std::string prefix_;  // "rope_scaling." for nested objects, for error messages
};

}  // namespace hearth
