// Which model bare `hearth` (and `hearth serve` without a model) serves: the one named, else the
// largest model in the local Hugging Face cache that fits in memory, else the bundled demo model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hearth::cli {

// A servable model directory in the Hugging Face cache: models--ORG--NAME/snapshots/REV/ with a
// config.json of a supported model_type, tokenizer.json and complete safetensors weights.
struct CachedModel {
  std::string name;  // ORG/NAME
  std::string dir;   // the snapshot directory
  int64_t weight_bytes = 0;
};

struct ModelChoice {
  std::string dir;     // what load_model() gets
  std::string name;    // the id the server reports
  std::string reason;  // one line: why this one
};

// The hub directory: $HF_HOME/hub, else $HOME/.cache/huggingface/hub ("" when neither is set).
std::string hf_hub_dir();
// MemAvailable from /proc/meminfo in bytes (0 when unreadable).
int64_t available_memory_bytes();
// Memory a model needs to be served: its weights plus 10% plus 1 GiB for the KV cache, the
// activations and the process itself.
int64_t memory_needed_bytes(int64_t weight_bytes);

// Every servable model under HUB_DIR, one per repo (the snapshot refs/main names, else the
// newest), sorted by name. Repos that are incomplete or of other model types are skipped.
std::vector<CachedModel> scan_hf_cache(const std::string& hub_dir, const std::vector<std::string>& model_types);

// Where the bundled demo model may be, in order: $HEARTH_DEMO_MODEL, <exe dir>/../models/hearth-demo
// (a build tree), <exe dir>/../share/hearth/models/hearth-demo (an install).
std::vector<std::string> demo_model_dirs(const std::string& exe_dir);

struct ChoiceInputs {
  std::string hub_dir;
  std::vector<std::string> model_types;  // supported config.json model_type values
  int64_t available_bytes = 0;
  std::vector<std::string> demo_dirs;
};

// The largest cached model that fits, else the first demo directory with a config.json.
// Throws InputError naming the places it looked when there is neither.
ModelChoice choose_model(const ChoiceInputs& in);

}  // namespace hearth::cli
