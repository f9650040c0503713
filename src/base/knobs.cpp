#include "base/knobs.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

#include "base/error.h"
#include "base/strings.h"
#include "base/thread_pool.h"

namespace hearth {

const std::vector<KnobInfo>& all_knobs() {
  static const std::vector<KnobInfo> knobs = {
      {"HEARTH_ISA", "auto",
       "CPU kernel instruction set: auto (best the CPU has), scalar (reference kernels), avx2, "
       "avx512. Asking for one the CPU lacks is an error."},
      {"HEARTH_CPU_AMX", "1",
       "CPU prefill matmuls run on AMX tiles where the CPU has them (Intel Sapphire Rapids and "
       "later): 4- and 8-bit panel matrices (the same results to the bit as the AVX-512 VNNI "
       "kernels), bf16 weights and dequantized tiles where K is a multiple of 32 (the AVX512-BF16 "
       "products, summed in the tile unit's order): 1, or 0 for the AVX-512 kernels (for comparison)."},
      {"HEARTH_THREADS", "0", "CPU worker threads; 0 means one per online core."},
      {"HEARTH_DEVICE_GRAPHS", "1",
       "GPU decode steps (up to 8 sequences) replay a recorded CUDA graph: 1, or 0 to launch "
       "kernel by kernel (for comparison and debugging)."},
      {"HEARTH_CUDA_PDL", "1",
       "On GPUs of compute capability 9.0 and later a kernel may start before the previous one "
       "ends (programmatic dependent launch; it waits for its inputs): 1, or 0 for strictly "
       "serial kernels (for comparison). Read when a device is first used."},
      {"HEARTH_CUDA_TIMELINE", "",
       "A file to write the in-graph timeline of one GPU decode step to (the 64th replay of a "
       "recorded graph): when each kernel launch's blocks reached their wait and were released. "
       "Needs a build configured with -DHEARTH_CUDA_TIMELINE=ON; empty: off."},
      {"HEARTH_CUDA_QUANT_GEMM", "1",
       "GPU matmuls of 9 to 32 rows (batched decode, short prompts) over 4- and 8-bit MLX affine "
       "matrices run on tensor cores with each weight dequantized in registers: 1, or 0 to "
       "dequantize the whole matrix to bf16 and call cuBLAS, as longer prompts do (for comparison)."},
      {"HEARTH_CUDA_MV_MMA", "1",
       "GPU matmuls of 1 to 8 rows (decode) over 4- and 8-bit MLX affine matrices (GGUF Q4_0 and Q8_0 "
       "as loaded) and GGUF Q4_K and Q6_K run on tensor cores, 16 weight rows per warp: 1, or 0 for the integer "
       "dot-product kernels, one weight row per warp (for comparison)."},
      {"XDG_CACHE_HOME", "", "Cache directory; `hearth bench` records runs in `$XDG_CACHE_HOME/hearth/evals.sqlite`."},
      {"HOME", "", "Home directory; the cache directory is `$HOME/.cache` when XDG_CACHE_HOME is unset."},
      {"HF_HOME", "",
       "Hugging Face home; bare `hearth` looks for models in `$HF_HOME/hub`, else in "
       "`$HOME/.cache/huggingface/hub`."},
      {"HEARTH_DEMO_MODEL", "",
       "Directory of the demo model bare `hearth` serves when no cached model fits (default: "
       "`<exe dir>/../models/hearth-demo`, then `<exe dir>/../share/hearth/models/hearth-demo`)."},
  };
  return knobs;
}

namespace {

std::mutex& override_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, std::string, std::less<>>& overrides() {
  static std::map<std::string, std::string, std::less<>> m;
  return m;
}
// Bumped by every KnobOverride, so that cached knob values are read again.
std::atomic<uint64_t> override_generation{1};

const KnobInfo& find_knob(std::string_view env) {
  for (const KnobInfo& k : all_knobs()) {
    if (k.env == env) return k;
  }
  throw InputError("unknown knob " + std::string(env));
}

}  // namespace

std::string knob_text(std::string_view env) {
  const KnobInfo& info = find_knob(env);
  {
    std::lock_guard<std::mutex> lock(override_mutex());
    auto it = overrides().find(env);
    if (it != overrides().end()) return it->second;
  }
  const std::string name(info.env);
  if (const char* v = std::getenv(name.c_str()); v != nullptr && *v != '\0') return v;
  return std::string(info.default_value);
}

namespace knobs {

std::string isa() {
  // Asked per op by the CPU backend (each kernel's ISA): a read takes a lock and getenv, so each
  // thread keeps the text it last read until an override changes the knobs.
  thread_local uint64_t seen = 0;
  thread_local std::string text;
  const uint64_t generation = override_generation.load(std::memory_order_acquire);
  if (seen != generation) {
    text = knob_text("HEARTH_ISA");
    seen = generation;
  }
  return text;
}

namespace {
// A knob that is 0 or 1.
bool flag(std::string_view env) {
  const std::string text = knob_text(env);
  if (text != "0" && text != "1") throw InputError(std::string(env) + ": expected 0 or 1, got '" + text + "'");
  return text == "1";
}

// A flag read once per override generation: hot paths ask per call (a quantized matmul, a
// decode step), and a read takes a lock and getenv. A bad value is not cached: it throws again.
class CachedFlag {
 public:
  explicit CachedFlag(std::string_view env) : env_(env) {}
  bool get() {
    const uint64_t generation = override_generation.load(std::memory_order_acquire);
    const uint64_t seen = state_.load(std::memory_order_acquire);
    if (seen >> 1 == generation) return (seen & 1) != 0;
    const bool value = flag(env_);
    state_.store(generation << 1 | (value ? 1 : 0), std::memory_order_release);
    return value;
  }

 private:
  std::string_view env_;
  std::atomic<uint64_t> state_{0};  // generation << 1 | value; generation 0: never read
};
}  // namespace

bool device_graphs() {
  static CachedFlag f("HEARTH_DEVICE_GRAPHS");
  return f.get();
}

bool cpu_amx() {
  static CachedFlag f("HEARTH_CPU_AMX");
  return f.get();
}

bool cuda_pdl() { return flag("HEARTH_CUDA_PDL"); }

std::string cuda_timeline() { return knob_text("HEARTH_CUDA_TIMELINE"); }

bool cuda_mv_mma() {
  static CachedFlag f("HEARTH_CUDA_MV_MMA");
  return f.get();
}

bool cuda_quant_gemm() {
  static CachedFlag f("HEARTH_CUDA_QUANT_GEMM");
  return f.get();
}

int threads() {
  const std::string text = knob_text("HEARTH_THREADS");
  const auto v = parse_int(text);
  if (!v || *v < 0 || *v > kMaxThreads) {
    throw InputError("HEARTH_THREADS: expected a count 0.." + std::to_string(kMaxThreads) + ", got '" + text + "'");
  }
  return static_cast<int>(*v);
}

std::string cache_dir() {
  if (std::string xdg = knob_text("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/hearth";
  if (std::string home = knob_text("HOME"); !home.empty()) return home + "/.cache/hearth";
  return "";
}

}  // namespace knobs

KnobOverride::KnobOverride(std::string_view env, std::string value) : env_(env) {
  find_knob(env);
  std::lock_guard<std::mutex> lock(override_mutex());
  auto it = overrides().find(env_);
  had_previous_ = it != overrides().end();
  if (had_previous_) previous_ = it->second;
  overrides()[env_] = std::move(value);
  override_generation.fetch_add(1, std::memory_order_acq_rel);
}

KnobOverride::~KnobOverride() {
  std::lock_guard<std::mutex> lock(override_mutex());
  if (had_previous_) {
    overrides()[env_] = previous_;
  } else {
    overrides().erase(env_);
  }
  override_generation.fetch_add(1, std::memory_order_acq_rel);
}

std::string knobs_markdown() {
  std::string out =
      "# Knobs\n\n"
      "Environment variables that tune Hearth at run time. They are declared once in\n"
      "`src/base/knobs.cpp`; this file is generated from that declaration by\n"
      "`hearth knobs --markdown` and a test keeps it in sync. Command-line flags are listed by\n"
      "`hearth <verb> --help`.\n\n"
      "| variable | default | meaning |\n|---|---|---|\n";
  for (const KnobInfo& k : all_knobs()) {
    out += "| `" + std::string(k.env) + "` | ";
    if (k.default_value.empty()) {
      out += "(unset)";
    } else {
      out.append("`").append(k.default_value).append("`");
    }
    out += " | " + std::string(k.help) + " |\n";
  }
  return out;
}

}  // namespace hearth
