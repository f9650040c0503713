#include "formats/quant_config.h"

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace hearth {

namespace {

QuantSpec parse_spec(const nlohmann::json& j, const std::string& path, const std::string& where,
                     const std::optional<QuantSpec>& fallback) {
  QuantSpec spec = fallback.value_or(QuantSpec{});
  for (const auto& [key, field] : {std::pair{"bits", &spec.bits}, std::pair{"group_size", &spec.group_size}}) {
    auto it = j.find(key);
    if (it == j.end()) {
      if (!fallback) throw FileError(path, where + key + " is required");
      continue;
    }
    if (!it->is_number_integer()) throw FileError(path, where + key + " must be an integer");
    *field = it->get<int>();
  }
  if (auto mode = j.find("mode"); mode != j.end() && !(mode->is_string() && *mode == "affine")) {
    throw FileError(path, where + "mode " + mode->dump() + " is not supported (only \"affine\")");
  }
  try {
    check_quant_spec(spec);
  } catch (const InputError& e) {
    throw FileError(path, where + e.what());
  }
  return spec;
}

}  // namespace

QuantConfig QuantConfig::from_config(const JsonConfig& config) {
  std::optional<JsonConfig> section = config.object("quantization");
  std::string name = "quantization";
  if (!section) {
    section = config.object("quantization_config");
    name = "quantization_config";
  }
  QuantConfig out;
  if (!section) return out;
  const nlohmann::json j = nlohmann::json::parse(section->dump());
  if (!j.is_object()) throw FileError(config.path(), name + " must be an object");
  if (auto method = j.find("quant_method"); method != j.end()) {
    const std::string m = method->is_string() ? method->get<std::string>() : method->dump();
    if (m != "mlx" && m != "affine") {
      throw FileError(config.path(), name + ".quant_method '" + m +
                                         "' is not supported (Hearth loads MLX affine quantization and GGUF files)");
    }
  }
  out.default_ = parse_spec(j, config.path(), name + ".", std::nullopt);
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.value().is_object()) {
      out.modules_[it.key()] = parse_spec(it.value(), config.path(), name + "." + it.key() + ".", out.default_);
    } else if (it.value().is_boolean() && !it.value().get<bool>()) {
      out.modules_[it.key()] = std::nullopt;
    }
  }
  return out;
}

std::optional<QuantSpec> QuantConfig::spec_for(const std::string& module) const {
  if (auto it = modules_.find(module); it != modules_.end()) return it->second;
  return default_;
}

}  // namespace hearth
