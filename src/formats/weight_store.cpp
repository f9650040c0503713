#include "formats/weight_store.h"

#include <algorithm>
#include <filesystem>

#include "base/error.h"
#include "base/strings.h"
#include "formats/json_config.h"

namespace hearth {
namespace fs = std::filesystem;

namespace {

void add_file(std::vector<std::shared_ptr<SafetensorsFile>>& files,
              std::map<std::string, std::pair<size_t, const SafetensorsEntry*>>& where, const std::string& path) {
  files.push_back(SafetensorsFile::open(path));
  const size_t idx = files.size() - 1;
  for (const SafetensorsEntry& e : files.back()->header().tensors) {
    if (!where.emplace(e.name, std::make_pair(idx, &e)).second) {
      throw FileError(path, "tensor '" + printable(e.name) + "' also appears in " + files[where[e.name].first]->path());
    }
  }
}

}  // namespace

WeightStore WeightStore::open_dir(const std::string& dir) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) throw FileError(dir, "not a directory");
  const fs::path index = root / "model.safetensors.index.json";
  const fs::path single = root / "model.safetensors";
  WeightStore store;
  store.source_ = dir;
  if (fs::exists(index)) {
    const JsonConfig cfg = JsonConfig::load(index.string());
    auto map = cfg.object("weight_map");
    if (!map) throw FileError(index.string(), "missing 'weight_map'");
    // The index's weight_map values name the shard files; open each once.
    std::set<std::string> shards;
    for (const auto& [tensor, shard] : map->string_items()) shards.insert(shard);
    for (const std::string& shard : shards) {
      const bool control =
          std::any_of(shard.begin(), shard.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; });
      if (shard.find('/') != std::string::npos || shard == ".." || shard.empty() || control) {
        throw FileError(index.string(), "shard name '" + printable(shard) + "' is not a plain file name");
      }
      add_file(store.files_, store.where_, (root / shard).string());
    }
    // Every tensor the index lists must exist in the shard it names.
    for (const auto& [tensor, shard] : map->string_items()) {
      auto it = store.where_.find(tensor);
      if (it == store.where_.end())
        throw FileError(index.string(), "lists tensor '" + printable(tensor) + "' that is in no shard");
      if (fs::path(store.files_[it->second.first]->path()).filename() != shard) {
        throw FileError(index.string(), "says tensor '" + printable(tensor) + "' is in " + printable(shard) +
                                            ", found in " + store.files_[it->second.first]->path());
      }
    }
  } else if (fs::exists(single)) {
    add_file(store.files_, store.where_, single.string());
  } else {
    throw FileError(dir, "no model.safetensors or model.safetensors.index.json");
  }
  return store;
}

WeightStore WeightStore::open_files(const std::vector<std::string>& paths) {
  WeightStore store;
  store.source_ = paths.empty() ? std::string("(no files)") : paths.front();
  for (const std::string& p : paths) add_file(store.files_, store.where_, p);
  return store;
}

Tensor WeightStore::get(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw FileError(source_, "missing tensor '" + name + "'");
  return files_[it->second.first]->tensor(*it->second.second);
}

Tensor WeightStore::get_optional(const std::string& name) const { return has(name) ? get(name) : Tensor(); }

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  for (const auto& [name, loc] : where_) out.push_back(name);
  return out;
}

uint64_t WeightStore::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, loc] : where_) n += loc.second->end - loc.second->begin;
  return n;
}

}  // namespace hearth
