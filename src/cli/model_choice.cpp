#include "cli/model_choice.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/error.h"
#include "base/knobs.h"

namespace hearth::cli {

namespace fs = std::filesystem;

namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

std::string read_small_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Bytes of the snapshot's safetensors weights, or -1 when they are missing or incomplete
// (a download in progress leaves shards out). Snapshot files are symlinks into blobs/;
// fs::exists and fs::file_size follow them.
int64_t weight_bytes(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / "model.safetensors", ec)) {
    const auto n = fs::file_size(dir / "model.safetensors", ec);
    return ec ? -1 : static_cast<int64_t>(n);
  }
  if (!fs::exists(dir / "model.safetensors.index.json", ec)) return -1;
  const auto index = nlohmann::json::parse(read_small_file(dir / "model.safetensors.index.json"), nullptr, false);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) return -1;
  std::set<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) return -1;
    shards.insert(file.get<std::string>());
  }
  int64_t total = 0;
  for (const std::string& shard : shards) {
    if (shard.find('/') != std::string::npos) return -1;
    const auto n = fs::file_size(dir / shard, ec);
    if (ec) return -1;
    total += static_cast<int64_t>(n);
  }
  return shards.empty() ? -1 : total;
}

bool supported(const fs::path& dir, const std::vector<std::string>& model_types) {
  std::error_code ec;
  if (!fs::exists(dir / "config.json", ec) || !fs::exists(dir / "tokenizer.json", ec)) return false;
  const auto config = nlohmann::json::parse(read_small_file(dir / "config.json"), nullptr, false);
  if (!config.is_object() || !config.contains("model_type") || !config["model_type"].is_string()) return false;
  const std::string type = config["model_type"].get<std::string>();
  return std::find(model_types.begin(), model_types.end(), type) != model_types.end();
}

// The snapshot refs/main points at, else the most recently written one.
fs::path pick_snapshot(const fs::path& repo) {
  std::error_code ec;
  std::string rev = read_small_file(repo / "refs" / "main");
  while (!rev.empty() && (rev.back() == '\n' || rev.back() == ' ')) rev.pop_back();
  if (!rev.empty() && rev.find('/') == std::string::npos && fs::is_directory(repo / "snapshots" / rev, ec))
    return repo / "snapshots" / rev;
  fs::path best;
  fs::file_time_type best_time{};
  for (const auto& e : fs::directory_iterator(repo / "snapshots", ec)) {
    if (!e.is_directory(ec)) continue;
    const auto t = e.last_write_time(ec);
    if (best.empty() || t > best_time) {
      best = e.path();
      best_time = t;
    }
  }
  return best;
}

}  // namespace

std::string hf_hub_dir() {
  if (std::string hf = knob_text("HF_HOME"); !hf.empty()) return hf + "/hub";
  if (std::string home = knob_text("HOME"); !home.empty()) return home + "/.cache/huggingface/hub";
  return "";
}

int64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

int64_t memory_needed_bytes(int64_t weight_bytes) { return weight_bytes + weight_bytes / 10 + (int64_t{1} << 30); }

std::vector<CachedModel> scan_hf_cache(const std::string& hub_dir, const std::vector<std::string>& model_types) {
  std::vector<CachedModel> out;
  std::error_code ec;
  if (hub_dir.empty() || !fs::is_directory(hub_dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(hub_dir, ec)) {
    const std::string base = e.path().filename().string();
    if (base.rfind("models--", 0) != 0 || !e.is_directory(ec)) continue;
    // models--ORG--NAME; HF replaces the repo id's '/' by "--".
    std::string name = base.substr(8);
    if (const auto sep = name.find("--"); sep != std::string::npos) name.replace(sep, 2, "/");
    const fs::path snap = pick_snapshot(e.path());
    if (snap.empty() || !supported(snap, model_types)) continue;
    const int64_t bytes = weight_bytes(snap);
    if (bytes < 0) continue;
    out.push_back({name, snap.string(), bytes});
  }
  std::sort(out.begin(), out.end(), [](const CachedModel& a, const CachedModel& b) { return a.name < b.name; });
  return out;
}

std::vector<std::string> demo_model_dirs(const std::string& exe_dir) {
  std::vector<std::string> dirs;
  if (std::string env = knob_text("HEARTH_DEMO_MODEL"); !env.empty()) dirs.push_back(env);
  if (!exe_dir.empty()) {
    dirs.push_back((fs::path(exe_dir) / ".." / "models" / "hearth-demo").lexically_normal().string());
    dirs.push_back(
        (fs::path(exe_dir) / ".." / "share" / "hearth" / "models" / "hearth-demo").lexically_normal().string());
  }
  return dirs;
}

ModelChoice choose_model(const ChoiceInputs& in) {
  const std::vector<CachedModel> cached = scan_hf_cache(in.hub_dir, in.model_types);
  const CachedModel* best = nullptr;
  for (const CachedModel& m : cached) {
    if (memory_needed_bytes(m.weight_bytes) > in.available_bytes) continue;
    if (best == nullptr || m.weight_bytes > best->weight_bytes) best = &m;
  }
  if (best != nullptr) {
    return {best->dir, best->name,
            "the largest of " + std::to_string(cached.size()) + " model(s) in the Hugging Face cache " + in.hub_dir +
                " that fits in memory (" + gib(best->weight_bytes) + " of weights, " + gib(in.available_bytes) +
                " available)"};
  }
  std::string why =
      cached.empty()
          ? "no servable model in the Hugging Face cache" + (in.hub_dir.empty() ? std::string() : " " + in.hub_dir)
          : "none of the " + std::to_string(cached.size()) + " model(s) in the Hugging Face cache fits in memory (" +
                gib(in.available_bytes) + " available)";
  std::error_code ec;
  for (const std::string& dir : in.demo_dirs) {
    if (fs::exists(fs::path(dir) / "config.json", ec))
      return {dir, "hearth-demo", "the bundled demo model (" + why + ")"};
  }
  std::string looked;
  for (const std::string& dir : in.demo_dirs) looked += (looked.empty() ? "" : ", ") + dir;
  throw InputError("no model to serve: " + why + ", and no demo model at " + (looked.empty() ? "(nowhere)" : looked) +
                   "; name one: hearth serve MODEL_DIR");
}

}  // namespace hearth::cli
