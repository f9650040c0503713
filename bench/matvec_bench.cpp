// Decode is a matrix-vector product per weight matrix: how close does the CPU matvec get to
// the memory bandwidth measured in the same run? Prints GB/s of weight bytes read for f32,
// bf16 and f16 weights (a 311 MB matrix, the Qwen3-0.6B LM head shape) against a plain
// AVX-512 read of the same size, for 1 and 2 threads; MLX affine 4/8-bit and GGUF Q4_K/Q6_K
// matrices of the same shape as GB/s of their own bytes (k-quants also through the AVX2 path, which
// dequantizes each row to f32, beside the best ISA's).
// Usage: matvec_bench [N K]   (default 151936 1024)
#include <immintrin.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cpu/ggml_kernels.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/quant_kernels.h"
#include "core/affine_args.h"
#include "core/dtype.h"
#include "core/quant.h"
#include "best_seconds.h"

namespace {

__attribute__((target("avx512f"))) float read_sum(const float* p, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}


}  // namespace

int main(int argc, char** argv) {
  const int64_t N = argc > 2 ? std::atoll(argv[1]) : 151936, K = argc > 2 ? std::atoll(argv[2]) : 1024;
  std::vector<float> x(static_cast<size_t>(K), 0.5f), y(static_cast<size_t>(N));
  std::vector<uint16_t> w16(static_cast<size_t>(N * K));
  for (size_t i = 0; i < w16.size(); ++i) w16[i] = hearth::f32_to_bf16(0.01f * static_cast<float>(i % 13));
  std::vector<uint16_t> wh(w16.size());
  for (size_t i = 0; i < wh.size(); ++i) wh[i] = hearth::f32_to_f16(0.01f * static_cast<float>(i % 13));
  std::vector<float> wf(static_cast<size_t>(N * K / 2), 0.01f);  // same bytes as the 16-bit matrices
  const hearth::cpu::Isa isa = hearth::cpu::best_isa();
  // MLX affine 4- and 8-bit copies of the f32 weights (groups of 64, bf16 scales).
  std::vector<float> wq_src(static_cast<size_t>(N * K));
  for (size_t i = 0; i < wq_src.size(); ++i) wq_src[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
  const hearth::Tensor wq_t = hearth::Tensor::from_f32({N, K}, wq_src.data());
  // In 16-row panels, as the CPU backend loads 4- and 8-bit matrices on VNNI machines.
  const bool panels = isa == hearth::cpu::Isa::kAvx512 && hearth::cpu::has_avx512_vnni();
  auto quantize = [&](int bits) {
    hearth::QuantizedMatrix q = hearth::affine_quantize(wq_t, {bits, 64}, hearth::DType::kBF16);
    return panels ? hearth::affine_to_panels(q) : q;
  };
  const hearth::QuantizedMatrix q4 = quantize(4), q8 = quantize(8);
  // Q4_K and Q6_K blocks: hashed bytes, small f16 block scales.
  auto k_quants = [&](hearth::GgmlType type) {
    const size_t row = hearth::row_bytes(type, K), block = type == hearth::GgmlType::kQ4_K ? 144 : 210;
    std::vector<uint8_t> b(static_cast<size_t>(N) * row);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
    const uint16_t d = hearth::f32_to_f16(0.01f);
    for (size_t at = 0; at < b.size(); at += block) {
      std::memcpy(&b[at + (type == hearth::GgmlType::kQ4_K ? 0 : 208)], &d, 2);
      if (type == hearth::GgmlType::kQ4_K) std::memcpy(&b[at + 2], &d, 2);
    }
    return b;
  };
  const std::vector<uint8_t> q4k = k_quants(hearth::GgmlType::kQ4_K), q6k = k_quants(hearth::GgmlType::kQ6_K);
  // Q6_K and Q4_K in lanes, as the CPU backend loads them where the VBMI decode runs.
  const bool lanes = hearth::cpu::ggml_lanes_pay(isa);
  std::vector<uint8_t> q6k_lanes(q6k.size()), q4k_lanes(q4k.size());
  hearth::q6_k_blocks_to_lanes(q6k.data(), q6k_lanes.data(), static_cast<int64_t>(q6k.size() / 210));
  hearth::q4_k_blocks_to_lanes(q4k.data(), q4k_lanes.data(), static_cast<int64_t>(q4k.size() / 144));
  wq_src.clear();
  wq_src.shrink_to_fit();
  std::printf("matvec [%lld x %lld], %s kernels, %.0f MB per matrix\n", static_cast<long long>(N),
              static_cast<long long>(K), std::string(hearth::cpu::isa_name(isa)).c_str(), N * K * 2 / 1e6);
  for (int threads : {1, 2}) {
    hearth::ThreadPool pool(threads);
    float sink = 0;
    const double read_s = hearth::bench::best_seconds([&] {
      pool.parallel_for(static_cast<int64_t>(wf.size()) / 64, 1024,
                        [&](int64_t b, int64_t e) { sink += read_sum(wf.data() + b * 64, (e - b) * 64); });
    });
    const double bytes = static_cast<double>(N * K * 2);
    const double bw = bytes / read_s / 1e9;
    auto rate = [&](const void* w, hearth::DType t, int64_t rows) {
      const double s =
          hearth::bench::best_seconds([&] { hearth::cpu::matmul(isa, &pool, x.data(), 1, K, w, t, rows, nullptr, y.data()); });
      return bytes / s / 1e9;
    };
    auto qrate = [&](const hearth::QuantizedMatrix& q) {
      const hearth::cpu::AffineMatrix m = hearth::affine_args(q);
      const double s = hearth::bench::best_seconds([&] { hearth::cpu::affine_matmul(isa, &pool, x.data(), 1, m, nullptr, y.data()); });
      return static_cast<double>(q.nbytes()) / s / 1e9;
    };
    auto krate = [&](const std::vector<uint8_t>& b, hearth::GgmlType type, hearth::cpu::Isa kisa, bool in_lanes) {
      const hearth::cpu::GgmlMatrix m{b.data(), type, N, K, hearth::row_bytes(type, K),
                                            in_lanes ? hearth::GgmlLayout::kLanes : hearth::GgmlLayout::kBlocks};
      const double s = hearth::bench::best_seconds([&] { hearth::cpu::ggml_matmul(kisa, &pool, x.data(), 1, m, nullptr, y.data()); });
      return static_cast<double>(b.size()) / s / 1e9;
    };
    const double k4 = krate(q4k, hearth::GgmlType::kQ4_K, isa, false), k6 = krate(q6k, hearth::GgmlType::kQ6_K, isa, false);
    const double k4f = krate(q4k, hearth::GgmlType::kQ4_K, hearth::cpu::Isa::kAvx2, false),
                 k6f = krate(q6k, hearth::GgmlType::kQ6_K, hearth::cpu::Isa::kAvx2, false);
    std::printf("threads %d: matvec Q4_K %.1f GB/s (%.0f%%; avx2 %.1f), Q6_K %.1f GB/s (%.0f%%; avx2 %.1f)", threads, k4,
                100 * k4 / bw, k4f, k6, 100 * k6 / bw, k6f);
    if (lanes) {
      const double k6l = krate(q6k_lanes, hearth::GgmlType::kQ6_K, isa, true);
      const double k4l = krate(q4k_lanes, hearth::GgmlType::kQ4_K, isa, true);
      std::printf(", lanes: Q4_K %.1f GB/s (%.0f%%), Q6_K %.1f GB/s (%.0f%%)", k4l, 100 * k4l / bw, k6l, 100 * k6l / bw);
    }
    std::printf("\n");
    const double r4 = qrate(q4), r8 = qrate(q8);
    std::printf("threads %d: matvec 4-bit %.1f GB/s (%.0f%%), 8-bit %.1f GB/s (%.0f%%) of quantized bytes\n", threads,
                r4, 100 * r4 / bw, r8, 100 * r8 / bw);
    const double f32 = rate(wf.data(), hearth::DType::kF32, N / 2);
    const double bf16 = rate(w16.data(), hearth::DType::kBF16, N);
    const double f16 = rate(wh.data(), hearth::DType::kF16, N);
    std::printf(
        "threads %d: read %.1f GB/s | matvec f32 %.1f GB/s (%.0f%%), bf16 %.1f GB/s (%.0f%%), f16 %.1f GB/s "
        "(%.0f%%)%s\n",
        threads, bw, f32, 100 * f32 / bw, bf16, 100 * bf16 / bw, f16, 100 * f16 / bw, sink == 1.0f ? " " : "");
  }
  return 0;
}
