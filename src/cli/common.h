// Flags and setup shared by the verbs that load a model.
#pragma once

#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include "base/thread_pool.h"
#include "cli/flags.h"
#include "core/device_memory.h"
#include "models/model.h"
#include "runtime/engine.h"

namespace hearth::cli {

// A non-negative decimal index ("0", "3").
inline bool parse_index(std::string_view s, int* out) {
  if (s.empty() || s.size() > 4) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

// The sampling flags generate and serve share, checked before the model loads (the Sampler
// would refuse the same values, but only once a request runs).
inline void check_sampling_flags(const std::optional<double>& temp, const std::optional<double>& top_p,
                                 const std::optional<int64_t>& top_k) {
  if (temp && !(*temp >= 0 && std::isfinite(*temp))) throw InputError("--temp must be a finite number >= 0");
  if (top_p && !(*top_p > 0 && *top_p <= 1)) throw InputError("--top-p must be in (0, 1]");
  if (top_k && *top_k < 0) throw InputError("--top-k must be >= 0");
}

struct ModelFlags {
  std::string model;
  std::string dtype;
  std::string kv_dtype = "auto";
  std::string device_name = "auto";
  int64_t threads = 0;

  void declare(
      Flags& f, bool model_required = true,
      const std::string& model_help = "Model: a directory (config.json + safetensors weights) or a GGUF file.") {
    f.model_dir(model_help, &model, model_required);
    f.add("dtype", "Convert weight matrices at load time: f32, bf16 or f16 (default: as stored).", &dtype);
    f.add("kv-dtype", "KV cache element type: auto, f32, f16 or bf16 (auto: f32 for f32 weights, else f16).",
          &kv_dtype);
    f.add("device", "Where the model runs: auto, cpu, cuda or cuda:N (auto: cuda:0 when a CUDA GPU is present).",
          &device_name);
    f.add("threads", "CPU threads (default: one per core, or HEARTH_THREADS).", &threads);
  }
  LoadOptions load_options() const {
    LoadOptions o;
    if (!dtype.empty()) {
      o.weight_dtype = dtype_from_name(dtype);
      if (!o.weight_dtype) throw InputError("--dtype: expected f32, bf16 or f16, got '" + dtype + "'");
    }
    engine_options();  // a bad --kv-dtype is refused before the model loads
    o.device = device();
    return o;
  }
  // --device, checked against the devices present.
  Device device() const {
    if (device_name == "auto") return device_count(DeviceType::kCuda) > 0 ? Device{DeviceType::kCuda, 0} : kCpu;
    if (device_name == "cpu") return kCpu;
    Device d{DeviceType::kCuda, 0};
    const std::string_view name = device_name;
    if (name != "cuda" && !(name.starts_with("cuda:") && parse_index(name.substr(5), &d.index))) {
      throw InputError("--device: expected auto, cpu, cuda or cuda:N, got '" + device_name + "'");
    }
    const int n = device_count(DeviceType::kCuda);
    if (d.index >= n) {
      throw InputError("--device " + device_name + ": this machine has " + std::to_string(n) + " CUDA device" +
                       (n == 1 ? "" : "s") + (n == 0 ? " (or this build has no CUDA backend)" : ""));
    }
    return d;
  }
  EngineOptions engine_options() const {
    EngineOptions o;
    if (kv_dtype != "auto") {
      o.kv_dtype = dtype_from_name(kv_dtype);
      if (!o.kv_dtype) throw InputError("--kv-dtype: expected auto, f32, f16 or bf16, got '" + kv_dtype + "'");
    }
    return o;
  }
  std::unique_ptr<ThreadPool> make_pool() const {
    if (threads < 0 || threads > kMaxThreads) {
      throw InputError("--threads: expected a count 0.." + std::to_string(kMaxThreads) + ", got " +
                       std::to_string(threads));
    }
    return std::make_unique<ThreadPool>(static_cast<int>(threads));
  }
};

}  // namespace hearth::cli
