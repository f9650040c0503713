// Rotary embedding parameters from config.json, for every rope_type Hearth supports:
// default, linear, llama3, yarn; with partial rotary. Reads both the transformers v5
// `rope_parameters` object and the older `rope_theta` + `rope_scaling` pair.
#pragma once

#include <string>

#include "core/tensor.h"
#include "formats/json_config.h"

namespace hearth {

struct Rope {
  Tensor inv_freq;                // [rotary_dim / 2] f32
  float attention_factor = 1.0f;  // multiplies cos and sin (YaRN)
  std::string type = "default";
  int64_t rotary_dim() const { return 2 * inv_freq.dim(0); }

  // Throws Unsupported for rope types Hearth does not implement, FileError for bad fields.
  static Rope from_config(const JsonConfig& config, int64_t head_dim);
};

}  // namespace hearth
