#include "nn/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "base/error.h"

namespace hearth {
namespace {

// inv_freq[i] = 1 / base^(2i / dim), rounded to f32 as HF computes it.
std::vector<double> base_inv_freq(double base, int64_t dim) {
  std::vector<double> f(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    f[static_cast<size_t>(i)] = static_cast<float>(1.0 / std::pow(base, static_cast<double>(exponent)));
  }
  return f;
}

// Llama 3.1: long wavelengths are divided by `factor`, short ones kept, the band between
// interpolated smoothly (transformers _compute_llama3_parameters).
void apply_llama3(std::vector<double>& f, const JsonConfig& p) {
  const double factor = p.get_float("factor");
  const double low = p.get_float("low_freq_factor");
  const double high = p.get_float("high_freq_factor");
  const double old_ctx = p.get_float("original_max_position_embeddings");
  const double low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
  for (double& x : f) {
    const double wavelen = 2 * std::numbers::pi / x;
    if (wavelen > low_wavelen) {
      x = x / factor;
    } else if (!(wavelen < high_wavelen)) {
      const double smooth = (old_ctx / wavelen - low) / (high - low);
      x = (1 - smooth) * x / factor + smooth * x;
    }
  }
}

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// YaRN (https://arxiv.org/abs/2309.00071), as transformers _compute_yarn_parameters.
float apply_yarn(std::vector<double>& f, const JsonConfig& p, double base, int64_t dim, const JsonConfig& config) {
  const double omp = p.has("original_max_position_embeddings") ? p.get_float("original_max_position_embeddings")
                                                               : config.get_float("max_position_embeddings");
  const double factor = p.has("factor") ? p.get_float("factor") : config.get_float("max_position_embeddings") / omp;
  double attention_factor;
  if (p.has("attention_factor")) {
    attention_factor = p.get_float("attention_factor");
  } else if (p.has("mscale") && p.has("mscale_all_dim") && p.get_float("mscale") != 0 &&
             p.get_float("mscale_all_dim") != 0) {
    attention_factor = yarn_mscale(factor, p.get_float("mscale")) / yarn_mscale(factor, p.get_float("mscale_all_dim"));
  } else {
    attention_factor = yarn_mscale(factor, 1.0);
  }
  const double beta_fast = p.get_float("beta_fast", 32.0) == 0 ? 32.0 : p.get_float("beta_fast", 32.0);
  const double beta_slow = p.get_float("beta_slow", 1.0) == 0 ? 1.0 : p.get_float("beta_slow", 1.0);
  const bool truncate = p.get_bool("truncate", true);
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(omp / (rotations * 2 * std::numbers::pi))) / (2 * std::log(base));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as transformers: avoid a zero-width ramp
  for (size_t i = 0; i < f.size(); ++i) {
    const float ramp = std::clamp(static_cast<float>((static_cast<double>(i) - low) / (high - low)), 0.0f, 1.0f);
    const double extrapolation = 1.0 - ramp;  // weight of the unscaled frequency
    const float pos_freq = static_cast<float>(1.0 / f[i]);
    const double interp = 1.0 / (factor * pos_freq);
    f[i] = interp * (1 - extrapolation) + f[i] * extrapolation;
  }
  return static_cast<float>(attention_factor);
}

}  // namespace

Rope Rope::from_config(const JsonConfig& config, int64_t head_dim) {
  // transformers v5 writes rope_parameters; older configs rope_theta + rope_scaling.
  std::optional<JsonConfig> params = config.object("rope_parameters");
  if (!params) params = config.object("rope_scaling");
  double base = config.get_float("rope_theta", 10000.0);
  std::string type = "default";
  double partial = config.get_float("partial_rotary_factor", 1.0);
  if (params) {
    if (params->has("full_attention") || params->has("sliding_attention")) {
      throw Unsupported(config.path() + ": per-layer-type rope_parameters are not supported for this model");
    }
    base = params->get_float("rope_theta", base);
    type = params->get_string("rope_type", params->get_string("type", "default"));
    partial = params->get_float("partial_rotary_factor", partial);
  }
  if (!(partial > 0 && partial <= 1)) throw FileError(config.path(), "partial_rotary_factor must be in (0, 1]");
  if (!(base > 0)) throw FileError(config.path(), "rope_theta must be positive");
  const int64_t dim = static_cast<int64_t>(static_cast<double>(head_dim) * partial);
  if (dim < 2 || dim % 2 != 0)
    throw FileError(config.path(), "rotary dimension " + std::to_string(dim) + " must be even and >= 2");
  std::vector<double> f = base_inv_freq(base, dim);
  float attention_factor = 1.0f;
  if (type == "default") {
  } else if (type == "linear") {
    const double factor = params->get_float("factor");
    for (double& x : f) x /= factor;
  } else if (type == "llama3") {
    apply_llama3(f, *params);
  } else if (type == "yarn") {
    attention_factor = apply_yarn(f, *params, base, dim, config);
  } else {
    throw Unsupported(config.path() + ": rope_type '" + type +
                      "' is not supported (default, linear, llama3, yarn are)");
  }
  // Scaling parameters out of their domain (a factor of 0 or below, say) give frequencies that are
  // infinite, negative or NaN, and a model that writes garbage rather than an error.
  for (const double x : f) {
    if (!(std::isfinite(x) && x > 0)) {
      throw FileError(config.path(), "rope_type '" + type + "': its parameters give a rotary frequency of " +
                                         std::to_string(x) + " (factors must be positive)");
    }
  }
  if (!(std::isfinite(attention_factor) && attention_factor > 0)) {
    throw FileError(config.path(), "rope_type '" + type + "': its parameters give an attention factor of " +
                                       std::to_string(attention_factor));
  }
  Rope r;
  r.type = type;
  r.attention_factor = attention_factor;
  r.inv_freq = Tensor::empty({dim / 2}, DType::kF32);
  for (size_t i = 0; i < f.size(); ++i) r.inv_freq.data<float>()[i] = static_cast<float>(f[i]);
  return r;
}

}  // namespace hearth
