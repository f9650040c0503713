#include "models/model.h"

#include <filesystem>
#include <map>

#include "base/error.h"

namespace hearth {
namespace {

std::map<std::string, ModelFactory, std::less<>>& registry() {
  static std::map<std::string, ModelFactory, std::less<>> r;
  return r;
}

}  // namespace

ModelRegistration::ModelRegistration(std::initializer_list<std::string_view> model_types, ModelFactory factory) {
  for (std::string_view t : model_types) registry().emplace(std::string(t), factory);
}

std::vector<std::string> registered_model_types() {
  std::vector<std::string> out;
  for (const auto& [name, f] : registry()) out.push_back(name);
  return out;
}

std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& options) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw FileError(dir, "not a model directory");
  const std::string config_path = (fs::path(dir) / "config.json").string();
  if (!fs::exists(config_path)) throw FileError(dir, "no config.json");
  const JsonConfig config = JsonConfig::load(config_path);
  const std::string type = config.get_string("model_type");
  auto it = registry().find(type);
  if (it == registry().end()) {
    std::string known;
    for (const auto& [name, f] : registry()) known += (known.empty() ? "" : ", ") + name;
    throw FileError(config_path, "unknown model_type '" + type + "' (supported: " + known + ")");
  }
  const WeightStore store = WeightStore::open_dir(dir);
  const WeightLoader loader(store, options, QuantConfig::from_config(config));
  std::unique_ptr<Model> model = it->second(config, loader);
  model->info_.model_type = type;
  model->info_.dir = dir;
  model->info_.weight_bytes = store.total_bytes();
  model->info_.generation = load_generation_config(dir);
  return model;
}

}  // namespace hearth
