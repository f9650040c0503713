// ops::sample's per-row parameters, in the layout the CUDA kernel reads from device memory, and
// the token order and weights every backend's sampling shares. The functions are plain IEEE
// float arithmetic with every multiply-add an explicit fmaf, so the host and a GPU compute the
// same bits and their samplers choose the same ids.
#pragma once

#include <math.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define HEARTH_SAMPLE_FN __host__ __device__ inline
#else
#define HEARTH_SAMPLE_FN inline
#endif

namespace hearth {

// One row's draw for ops::sample: the Sampler's temperature, top-k, top-p and min-p (after its
// logit processors, ops::edit_logits) and the row's uniform number.
struct SampleRow {
  float temperature = 0.0f;     // <= 0: the argmax
  int32_t top_k = 0;            // 0 = off
  float top_p = 1.0f;           // (0, 1]; 1 = off
  float log_min_p = -INFINITY;  // log(min_p) as the host computes it; -inf = off
  uint64_t u = 0;               // the uniform draw in [0, 1) as floor(u * 2^64)
};
static_assert(sizeof(SampleRow) == 24);

// One token's logit processors (runtime/sampler.h) for ops::edit_logits, in the layout the CUDA
// kernel reads: logit + bias, then the repetition penalty (> 0 ? / penalty : * penalty), then
// - sub. The defaults leave a logit's bits as they are, -0 and NaN included: x + -0 == x,
// x / 1 == x * 1 == x, x - +0 == x.
struct LogitEdit {
  int32_t row = 0;       // the logits row
  int32_t id = 0;        // the token
  float bias = -0.0f;    // logit_bias (a repeated id's biases summed first, in request order)
  float penalty = 1.0f;  // repetition_penalty, where the token is in its window
  float sub = 0.0f;      // presence + frequency * count, where the token was generated
};
static_assert(sizeof(LogitEdit) == 20);

namespace sampling {

// The processed logit: three roundings, each as IEEE single precision rounds it (the GPU's
// explicit round-to-nearest intrinsics: no fused multiply-subtract), so the host Sampler and
// a device edit the same bits.
HEARTH_SAMPLE_FN float edit_logit(float l, const LogitEdit& e) {
#if defined(__CUDA_ARCH__)
  l = __fadd_rn(l, e.bias);
  l = l > 0 ? __fdiv_rn(l, e.penalty) : __fmul_rn(l, e.penalty);
  return __fsub_rn(l, e.sub);
#else
  l = l + e.bias;
  l = l > 0 ? l / e.penalty : l * e.penalty;
  return l - e.sub;
#endif
}

// A token's place in the order: smaller is better. Descending value, -0 as +0, NaN last.
HEARTH_SAMPLE_FN uint32_t order_key(float t) {
  if (t != t) return 0xffffffffu;
  const float z = t + 0.0f;
  uint32_t u;
  memcpy(&u, &z, sizeof u);
  return (u & 0x80000000u) ? u : ~(u | 0x80000000u);
}

// Its inverse (NaN's key is no number's).
HEARTH_SAMPLE_FN float key_value(uint32_t key) {
  const uint32_t u = key == 0xffffffffu ? 0x7fc00000u : (key & 0x80000000u) ? key : (~key & 0x7fffffffu);
  float t;
  memcpy(&t, &u, sizeof t);
  return t;
}

// The token's weight: exp(t - best) in units of 2^-40, truncated (0 below e^-27.7, and where
// t - best is NaN). exp by range reduction to r in [-ln2/2, ln2/2] and a degree-7 Taylor
// polynomial (relative error < 2e-7), all in explicit fmaf.
HEARTH_SAMPLE_FN uint64_t weight(float t, float best) {
  const float x = t - best;
  if (!(x >= -28.0f)) return 0;  // also NaN
  if (x >= 0.0f) return uint64_t{1} << 40;
  const float n = rintf(x * 1.44269504f);
  float r = fmaf(n, -0.693145752f, x);  // ln 2 in two parts: n * the first is exact
  r = fmaf(n, -1.42860677e-06f, r);
  float p = 1.0f / 5040.0f;
  p = fmaf(p, r, 1.0f / 720.0f);
  p = fmaf(p, r, 1.0f / 120.0f);
  p = fmaf(p, r, 1.0f / 24.0f);
  p = fmaf(p, r, 1.0f / 6.0f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  return static_cast<uint64_t>(ldexpf(p, static_cast<int>(n) + 40));
}

// The row's key of token `id`: order_key << 32 | id, unique, ascending = best first.
HEARTH_SAMPLE_FN uint64_t full_key(uint32_t key, int64_t id) {
  return static_cast<uint64_t>(key) << 32 | static_cast<uint64_t>(id);
}

}  // namespace sampling
}  // namespace hearth
