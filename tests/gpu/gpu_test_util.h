// What the GPU op tests share: the device, skipping without one, random inputs, and copies
// between host vectors and device tensors.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/device_memory.h"
#include "core/ops.h"
#include "core/quant.h"

namespace hearth::gpu_test {

constexpr Device kGpu{DeviceType::kCuda, 0};

#define SKIP_WITHOUT_GPU() \
  if (device_count(DeviceType::kCuda) == 0) GTEST_SKIP() << "no CUDA device"

inline std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline Tensor on_gpu(const Shape& shape, const std::vector<float>& values) {
  return Tensor::from_f32(shape, values.data()).to_device(kGpu);
}
inline Tensor on_gpu_i32(const Shape& shape, const std::vector<int32_t>& values) {
  return Tensor::from_i32(shape, values.data()).to_device(kGpu);
}
template <typename T>
std::vector<T> to_host(const Tensor& t) {
  const Tensor h = t.to_device(kCpu);
  return std::vector<T>(h.data<T>(), h.data<T>() + h.numel());
}

// |got - want| <= atol + rtol * |want| everywhere; reports the worst element.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t worst = 0;
  double worst_excess = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double excess = std::isnan(got[i]) != std::isnan(want[i])
                              ? INFINITY
                              : std::abs(double(got[i]) - want[i]) - (atol + rtol * std::abs(double(want[i])));
    if (excess > worst_excess) worst_excess = excess, worst = i;
  }
  EXPECT_LE(worst_excess, 0.0) << what << ": element " << worst << " got " << got[worst] << " want " << want[worst];
}

inline Context gpu_ctx() { return Context{nullptr, kGpu}; }

inline QuantizedMatrix on_gpu(QuantizedMatrix q) {
  for (Tensor* t : {&q.packed, &q.scales, &q.biases}) {
    if (t->defined()) *t = t->to_device(kGpu);
  }
  return q;
}

}  // namespace hearth::gpu_test
