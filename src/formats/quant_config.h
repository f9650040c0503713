// The quantization section of config.json as mlx_lm writes it ("quantization", mirrored in
// "quantization_config"): {"group_size": 64, "bits": 4, "mode": "affine"?, MODULE: {...} | false}.
// Per-module entries (keyed by module path, e.g. "model.layers.0.mlp.down_proj") override the
// default or mark a module unquantized. Which modules ARE quantized is decided by the weights
// (a module with PREFIX.scales), as mlx_lm loads them.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "core/quant.h"
#include "formats/json_config.h"

namespace hearth {

class QuantConfig {
 public:
  QuantConfig() = default;
  // FileError (naming config.json and the key) for a malformed section, bits or group size
  // outside the supported sets, or another quantization method (GPTQ, AWQ, ...).
  static QuantConfig from_config(const JsonConfig& config);

  bool quantized() const { return default_.has_value(); }
  // The spec for a module path; nullopt when the model is not quantized or the module is
  // marked false.
  std::optional<QuantSpec> spec_for(const std::string& module) const;
  const std::optional<QuantSpec>& default_spec() const { return default_; }

 private:
  std::optional<QuantSpec> default_;
  std::map<std::string, std::optional<QuantSpec>> modules_;
};

}  // namespace hearth
