// generation_config.json: the model's own sampling defaults and stop tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hearth {

struct GenerationConfig {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<int64_t> max_new_tokens;
  std::optional<bool> do_sample;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;
};

// Reads DIR/generation_config.json when present (an empty config otherwise); eos ids fall
// back to config.json's eos_token_id. Malformed files are FileErrors.
GenerationConfig load_generation_config(const std::string& model_dir);

}  // namespace hearth
