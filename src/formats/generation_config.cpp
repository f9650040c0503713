#include "formats/generation_config.h"

#include <filesystem>

#include "formats/json_config.h"

namespace hearth {

GenerationConfig load_generation_config(const std::string& model_dir) {
  namespace fs = std::filesystem;
  GenerationConfig g;
  const fs::path path = fs::path(model_dir) / "generation_config.json";
  if (fs::exists(path)) {
    const JsonConfig c = JsonConfig::load(path.string());
    g.temperature = c.get_float_opt("temperature");
    g.top_p = c.get_float_opt("top_p");
    if (c.has("top_k")) g.top_k = c.get_int("top_k");
    if (c.has("max_new_tokens")) g.max_new_tokens = c.get_int("max_new_tokens");
    if (c.has("do_sample")) g.do_sample = c.get_bool("do_sample", false);
    g.eos_token_ids = c.get_int_list("eos_token_id");
    if (c.has("bos_token_id")) g.bos_token_id = c.get_int("bos_token_id");
  }
  const fs::path config = fs::path(model_dir) / "config.json";
  if (g.eos_token_ids.empty() && fs::exists(config)) {
    g.eos_token_ids = JsonConfig::load(config.string()).get_int_list("eos_token_id");
  }
  return g;
}

}  // namespace hearth
