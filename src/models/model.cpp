#include "models/model.h"

#include <filesystem>
#include <map>

#include "base/error.h"
#include "formats/gguf_model.h"

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

// One path for every source: the factory registered for the config's model_type builds the
// model from the weights.
std::unique_ptr<Model> build_model(const JsonConfig& config, const WeightSource& weights, const LoadOptions& options,
                                   QuantConfig quant) {
  const std::string type = config.get_string("model_type");
  auto it = registry().find(type);
  if (it == registry().end()) {
    std::string known;
    for (const auto& [name, f] : registry()) known += (known.empty() ? "" : ", ") + name;
    throw FileError(config.path(), "unknown model_type '" + type + "' (supported: " + known + ")");
  }
  const WeightLoader loader(weights, options, std::move(quant));
  std::unique_ptr<Model> model = it->second(config, loader);
  model->info_.model_type = type;
  model->info_.weight_bytes = weights.total_bytes();
  return model;
}

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options) {
  namespace fs = std::filesystem;
  if (is_gguf_path(path)) {
    // A GGUF file reads as the HF checkpoint it was converted from (formats/gguf_model.h).
    const GgufCheckpoint gguf = open_gguf_checkpoint(path);
    std::unique_ptr<Model> model = build_model(gguf.config, *gguf.weights, options, QuantConfig{});
    model->info_.dir = path;
    model->info_.generation = gguf.generation;
    return model;
  }
  if (!fs::is_directory(path)) throw FileError(path, "not a model directory or a GGUF file");
  const std::string config_path = (fs::path(path) / "config.json").string();
  if (!fs::exists(config_path)) throw FileError(path, "no config.json");
  const JsonConfig config = JsonConfig::load(config_path);
  const SafetensorsWeights weights(WeightStore::open_dir(path));
  std::unique_ptr<Model> model = build_model(config, weights, options, QuantConfig::from_config(config));
  model->info_.dir = path;
  model->info_.generation = load_generation_config(path);
  return model;
}

}  // namespace hearth
