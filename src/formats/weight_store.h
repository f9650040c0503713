// All tensors of a model directory: model.safetensors, or shards listed by
// model.safetensors.index.json. Files are mapped once; tensors are views into them.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "formats/safetensors.h"

namespace hearth {

class WeightStore {
 public:
  // Throws FileError when the directory holds no safetensors weights or a file is malformed.
  static WeightStore open_dir(const std::string& dir);
  // From explicit files (tests, tools).
  static WeightStore open_files(const std::vector<std::string>& paths);

  bool has(const std::string& name) const { return where_.count(name) != 0; }
  // The tensor; FileError "DIR: missing tensor 'NAME'" when absent.
  Tensor get(const std::string& name) const;
  // The tensor or an undefined Tensor when absent (optional weights such as biases).
  Tensor get_optional(const std::string& name) const;
  std::vector<std::string> names() const;
  // Total bytes of all tensors.
  uint64_t total_bytes() const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;  // directory or first file, for error messages
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<size_t, const SafetensorsEntry*>> where_;
};

}  // namespace hearth
