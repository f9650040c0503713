// The CUDA backend's quantized ops (MLX affine and GGUF k-quant matrices: decode matvecs,
// prefill GEMMs, embedding rows) against the CPU backend's scalar reference kernels. Skips when
// no CUDA device is present. Tolerances are in docs/numerics.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/ggml_kernels.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/quant_kernels.h"
#include "base/error.h"
#include "base/knobs.h"
#include "core/device_memory.h"
#include "core/ggml_blocks.h"
#include "core/ops.h"
#include "core/quant.h"
#include "gpu/gpu_test_util.h"

namespace hearth {
namespace {

using cpu::Isa;
using namespace gpu_test;

// Asserts, at every output of x [T, K] . q^T (q on the host), |got - want| <= rounding +
// (eps + 1e-6) sum_k |x_k w_k| + 1e-5 (1 + |want|): rounding = sum_k |w_k - b_g| dx_g / 2 where x
// is rounded to int8 per weight group (int8_x), eps = 2 * 2^-8 where x and the weights are
// rounded to bf16 (docs/numerics.md).
void expect_within_affine_bound(const QuantizedMatrix& q, const std::vector<float>& x, int64_t T,
                                const std::vector<float>& got, const std::vector<float>& want, bool int8_x, double eps,
                                const std::string& what) {
  const int64_t N = q.rows, K = q.cols, gs = q.spec.group_size, G = K / gs;
  const bool symmetric = !q.biases.defined();
  const Tensor dense = dequantize(q);
  const Tensor scales = q.scales.to(DType::kF32);
  const Tensor biases = symmetric ? Tensor() : q.biases.to(DType::kF32);
  auto group_bias = [&](int64_t n, int64_t g) {
    return symmetric ? -float(1 << (q.spec.bits - 1)) * scales.data<float>()[n * G + g]
                     : biases.data<float>()[n * G + g];
  };
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t n = 0; n < N; ++n) {
      double abs_dot = 0, rounding = 0;
      for (int64_t g = 0; g < G; ++g) {
        float amax = 0;
        for (int64_t k = g * gs; k < (g + 1) * gs; ++k) amax = std::max(amax, std::abs(x[size_t(t * K + k)]));
        for (int64_t k = g * gs; k < (g + 1) * gs; ++k) {
          const float w = dense.data<float>()[n * K + k];
          abs_dot += std::abs(x[size_t(t * K + k)] * w);
          if (int8_x) rounding += std::abs(w - group_bias(n, g)) * amax / 127 / 2;
        }
      }
      const size_t i = size_t(t * N + n);
      ASSERT_LE(std::abs(got[i] - want[i]), rounding + (eps + 1e-6) * abs_dot + 1e-5 * (1 + std::abs(want[i])))
          << what << " T=" << T << " N=" << N << " K=" << K << " at (" << t << ", " << n << ")";
    }
  }
}

std::string affine_name(int bits, int gs, DType scale_type, bool symmetric) {
  return std::to_string(bits) + "-bit/" + std::to_string(gs) + " " + std::string(dtype_name(scale_type)) +
         (symmetric ? " symmetric" : "");
}

// A random [N, K] matrix quantized to bits / gs with scale_type scales and biases, or without
// biases (symmetric codes, as GGUF Q4_0/Q8_0 load).
QuantizedMatrix random_affine(std::mt19937& rng, int64_t N, int64_t K, int bits, int gs, DType scale_type,
                              bool symmetric) {
  const std::vector<float> wf = random_floats(rng, size_t(N * K));
  QuantizedMatrix q = affine_quantize(Tensor::from_f32({N, K}, wf.data()), QuantSpec{bits, gs}, scale_type);
  if (symmetric) q.biases = Tensor();
  return q;
}

// x [T, K] . q^T + bias by the CPU's scalar kernel.
std::vector<float> scalar_affine(const std::vector<float>& x, int64_t T, const QuantizedMatrix& q,
                                 const std::vector<float>& bias) {
  std::vector<float> y(size_t(T * q.rows));
  cpu::affine_matmul(Isa::kScalar, nullptr, x.data(), T, affine_args(q), bias.data(), y.data());
  return y;
}

// Every width (2-8 bits), group size and scale type, with and without biases (symmetric codes,
// as GGUF Q4_0/Q8_0 load). Decode sizes of 4 and 8 bits take the integer kernels, x rounded to
// int8 per group; other widths the per-element f32 kernel; T > 8 a bf16 GEMM.
TEST(CudaOps, QuantizedMatmulMatchesTheScalarReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(10);
  Context ctx = gpu_ctx();
  const int64_t K = 256;
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (int gs : {32, 64, 128}) {
      for (DType scale_type : {DType::kBF16, DType::kF16, DType::kF32}) {
        for (bool symmetric : {false, true}) {
          const int64_t N = std::array<int64_t, 3>{1, 17, 300}[size_t(bits % 3)];
          const QuantizedMatrix q = random_affine(rng, N, K, bits, gs, scale_type, symmetric);
          for (int64_t T : {1, 5, 6, 7, 8, 9, 33}) {
            const std::vector<float> x = random_floats(rng, size_t(T * K)), bias = random_floats(rng, size_t(N));
            const std::vector<float> want = scalar_affine(x, T, q, bias);
            Tensor y = Tensor::empty({T, N}, DType::kF32, kGpu);
            ops::quantized_matmul(ctx, on_gpu({T, K}, x), on_gpu(q), on_gpu({N}, bias), y);
            expect_within_affine_bound(q, x, T, to_host<float>(y), want, T <= 8 && (bits == 4 || bits == 8),
                                       T <= 8 ? 0.0 : 2.0 / 256, affine_name(bits, gs, scale_type, symmetric));
          }
        }
      }
    }
  }
}

// Decode shapes beyond the small ones above: rows of many rounds of loads per lane (K = 14336,
// 8192), thousands of rows, several rows of x, and x shorter than a warp's loads (K = 96, 64).
TEST(CudaOps, QuantizedMatvecTakesLongAndManyRows) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  Context ctx = gpu_ctx();
  struct Shape {
    int64_t N, K, T;
    int gs;
  };
  for (const Shape& shape : {Shape{5000, 1024, 1, 64}, Shape{40, 14336, 3, 64}, Shape{33, 8192, 8, 128},
                             Shape{130, 2048, 5, 32}, Shape{50, 96, 1, 32}, Shape{20, 64, 3, 64}}) {
    for (int bits : {4, 8}) {
      const QuantizedMatrix q = random_affine(rng, shape.N, shape.K, bits, shape.gs, DType::kBF16, false);
      const std::vector<float> x = random_floats(rng, size_t(shape.T * shape.K)),
                               bias = random_floats(rng, size_t(shape.N));
      const std::vector<float> want = scalar_affine(x, shape.T, q, bias);
      Tensor y = Tensor::empty({shape.T, shape.N}, DType::kF32, kGpu);
      ops::quantized_matmul(ctx, on_gpu({shape.T, shape.K}, x), on_gpu(q), on_gpu({shape.N}, bias), y);
      expect_within_affine_bound(q, x, shape.T, to_host<float>(y), want, true, 0.0,
                                 affine_name(bits, shape.gs, DType::kBF16, false));
    }
  }
}

// One row of x through rows of one round of 32 to 128 loads, at least as many rows as the GPU
// holds warps of the kernel at once (an H200 holds 4224): the kernel whose lanes share each
// round's scales and biases by shuffle. A full round (K = 1024 in 8 bits: 64 loads) and one partly
// past the end (K = 3072 in 4 bits: 96 loads; in 8 bits it is two rounds, the other kernel, not
// run); 1, 2 and 4 loads per group (8 bits in groups of 128 take the other kernel); bf16 and f16
// parameters, with and without biases.
TEST(CudaOps, QuantizedMatvecSharesEachRoundsParameters) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(12);
  Context ctx = gpu_ctx();
  const int64_t N = 9000;
  for (int64_t K : {1024, 3072}) {
    for (int bits : {4, 8}) {
      if (bits == 8 && K == 3072) continue;
      for (int gs : {32, 64, 128}) {
        for (DType scale_type : {DType::kBF16, DType::kF16}) {
          for (bool symmetric : {false, true}) {
            const QuantizedMatrix q = random_affine(rng, N, K, bits, gs, scale_type, symmetric);
            const std::vector<float> x = random_floats(rng, size_t(K)), bias = random_floats(rng, size_t(N));
            const std::vector<float> want = scalar_affine(x, 1, q, bias);
            Tensor y = Tensor::empty({1, N}, DType::kF32, kGpu);
            ops::quantized_matmul(ctx, on_gpu({1, K}, x), on_gpu(q), on_gpu({N}, bias), y);
            expect_within_affine_bound(q, x, 1, to_host<float>(y), want, true, 0.0,
                                       affine_name(bits, gs, scale_type, symmetric) + " K " + std::to_string(K));
          }
        }
      }
    }
  }
}

// 9 to 32 rows of 4 and 8 bits through the tensor-core kernel that dequantizes in registers
// (tiles of 32 x 32, K in steps of 64: several tiles and steps, partial tiles on both sides), and
// through the dequantized copy for cuBLAS (HEARTH_CUDA_QUANT_GEMM=0, and longer prompts): all
// within the bf16 bound of the scalar reference.
TEST(CudaOps, QuantizedTensorCoreGemmMatchesTheScalarReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(14);
  Context ctx = gpu_ctx();
  struct Shape3 {
    int64_t T, N, K;
  };
  for (int bits : {4, 8}) {
    for (int gs : {32, 64, 128}) {
      for (DType scale_type : {DType::kBF16, DType::kF16, DType::kF32}) {
        for (bool symmetric : {false, true}) {
          std::vector<Shape3> shapes = {{9, 200, 512}, {32, 70, 1024}};
          if (gs == 64 && scale_type == DType::kBF16 && !symmetric) shapes.push_back({130, 385, 1024});
          for (const Shape3& sh : shapes) {
            const QuantizedMatrix q = random_affine(rng, sh.N, sh.K, bits, gs, scale_type, symmetric);
            const std::vector<float> x = random_floats(rng, size_t(sh.T * sh.K)),
                                     bias = random_floats(rng, size_t(sh.N));
            const std::vector<float> want = scalar_affine(x, sh.T, q, bias);
            const QuantizedMatrix qg = on_gpu(q);
            for (const char* tiled : {"1", "0"}) {
              KnobOverride knob("HEARTH_CUDA_QUANT_GEMM", tiled);
              Tensor y = Tensor::empty({sh.T, sh.N}, DType::kF32, kGpu);
              ops::quantized_matmul(ctx, on_gpu({sh.T, sh.K}, x), qg, on_gpu({sh.N}, bias), y);
              expect_within_affine_bound(
                  q, x, sh.T, to_host<float>(y), want, false, 2.0 / 256,
                  affine_name(bits, gs, scale_type, symmetric) + (tiled[0] == '1' ? " tiled" : " dequantized copy"));
            }
          }
        }
      }
    }
  }
}

// Decode rows (1 to 8) of 4 and 8 bits in groups of 32, 64 and 128 on tensor cores, 16 weight rows per
// warp (HEARTH_CUDA_MV_MMA=1), and through the one-row-per-warp dp4a kernels (=0): both within the
// bound of the scalar reference and within 1e-5 of each other, bf16 and f16 parameters, with and without biases. K of a
// few chunks per tile (1536: 3 for 4 bits, 6 for 8; fewer than the block's 8 warps) and of many (14336), N in partial
// tiles (37, 24) and thousands of rows; rows of x for one and two passes of four tokens (4 bits: T <= 4, T > 4).
TEST(CudaOps, QuantizedMatvecOnTensorCoresMatchesTheScalarReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(15);
  Context ctx = gpu_ctx();
  struct Shape2 {
    int64_t N, K;
  };
  for (int bits : {4, 8}) {
    for (int gs : {32, 64, 128}) {
      for (DType scale_type : {DType::kBF16, DType::kF16}) {
        for (bool symmetric : {false, true}) {
          std::vector<Shape2> shapes = {{37, 1536}, {24, 14336}};
          if (scale_type == DType::kBF16 && !symmetric) shapes.push_back({4100, 4096});
          for (const Shape2& sh : shapes) {
            const QuantizedMatrix q = random_affine(rng, sh.N, sh.K, bits, gs, scale_type, symmetric);
            const QuantizedMatrix qg = on_gpu(q);
            for (int64_t T : {1, 2, 3, 4, 5, 8}) {
              const std::vector<float> x = random_floats(rng, size_t(T * sh.K)),
                                       bias = random_floats(rng, size_t(sh.N));
              const std::vector<float> want = scalar_affine(x, T, q, bias);
              std::vector<float> first;
              for (const char* mma : {"1", "0"}) {
                const KnobOverride knob("HEARTH_CUDA_MV_MMA", mma);
                Tensor y = Tensor::empty({T, sh.N}, DType::kF32, kGpu);
                ops::quantized_matmul(ctx, on_gpu({T, sh.K}, x), qg, on_gpu({sh.N}, bias), y);
                // The two kernels take the same integer sums: they agree to the last bits (5e-7
                // of the largest output measured), far inside the bound both meet.
                const std::vector<float> got = to_host<float>(y);
                if (first.empty()) first = got;
                double apart = 0, top = 0;
                for (size_t e = 0; e < got.size(); ++e) {
                  apart = std::max(apart, double(std::abs(first[e] - got[e])));
                  top = std::max(top, double(std::abs(want[e])));
                }
                EXPECT_LE(apart, 1e-5 * top) << affine_name(bits, gs, scale_type, symmetric) << " T=" << T;
                expect_within_affine_bound(q, x, T, got, want, true, 0.0,
                                           affine_name(bits, gs, scale_type, symmetric) + " " + mma);
              }
            }
          }
        }
      }
    }
  }
}

// The same with MLX affine matrices: one launch where the parts share a width and group size
// (q/k/v, gate/up), one per part where they do not (4, 8 and 3 bits); each part exactly as its
// own quantized_matmul, or added to y's old values where it accumulates.
TEST(CudaOps, QuantizedMatmulGroupGivesEachPartItsOwnMatmul) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(13);
  Context ctx = gpu_ctx();
  const int64_t K = 512;
  const std::vector<int64_t> sizes = {300, 7, 64};
  for (bool mixed : {false, true}) {
    std::vector<QuantizedMatrix> w;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::vector<float> values = random_floats(rng, size_t(sizes[i] * K));
      const int bits = mixed ? std::array<int, 3>{4, 8, 3}[i] : 4;
      w.push_back(
          on_gpu(affine_quantize(Tensor::from_f32({sizes[i], K}, values.data()), QuantSpec{bits, 64}, DType::kBF16)));
    }
    for (int64_t T : {1, 4, 8, 9}) {
      const Tensor x = on_gpu({T, K}, random_floats(rng, size_t(T * K)));
      std::vector<Tensor> bias, y, alone;
      for (size_t i = 0; i < sizes.size(); ++i) {
        bias.push_back(i == 1 ? Tensor() : on_gpu({sizes[i]}, random_floats(rng, size_t(sizes[i]))));
        y.push_back(Tensor::empty({T, sizes[i]}, DType::kF32, kGpu));
        alone.push_back(Tensor::empty({T, sizes[i]}, DType::kF32, kGpu));
        ops::quantized_matmul(ctx, x, w[i], bias[i], alone[i]);
      }
      // Part 2 accumulates: y = y0 + (x . w^T + bias).
      const std::vector<float> y0 = random_floats(rng, size_t(T * sizes[2]));
      y[2] = on_gpu({T, sizes[2]}, y0);
      std::vector<ops::MatmulPart> parts;
      for (size_t i = 0; i < sizes.size(); ++i) parts.push_back({nullptr, &bias[i], &y[i], &w[i], i == 2});
      ops::matmul_group(ctx, x, parts);
      for (size_t i = 0; i < sizes.size(); ++i) {
        std::vector<float> want = to_host<float>(alone[i]);
        if (i == 2)
          for (size_t e = 0; e < want.size(); ++e) want[e] = y0[e] + want[e];
        EXPECT_EQ(to_host<float>(y[i]), want) << (mixed ? "mixed widths" : "4-bit") << " T=" << T << " part " << i;
      }
    }
  }
}

// The 4/8-bit decode computes the layers' norm (norm_matmul_group) and the MLP's activation
// (silu_mul_matmul_group) as it rounds x to int8: the same bits as the op alone and then the
// group, for rows whose groups do and do not fill the preparation's blocks of 8 (K = 4096 and
// 4160 at groups of 64), with a part that accumulates; and 4 with 3 bits, which the integer
// kernels do not take in one launch (the ops run in turn).
TEST(CudaOps, QuantizedMatvecTakesTheNormAndTheActivation) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(17);
  Context ctx = gpu_ctx();
  const std::array<int64_t, 2> rows = {96, 40};
  for (int64_t K : {4096, 4160}) {
    for (const auto [bits0, bits1] : std::vector<std::array<int, 2>>{{4, 4}, {8, 8}, {4, 3}}) {
      std::vector<QuantizedMatrix> w;
      std::vector<Tensor> bias;
      for (size_t i = 0; i < rows.size(); ++i) {
        const std::vector<float> values = random_floats(rng, size_t(rows[i] * K));
        w.push_back(on_gpu(affine_quantize(Tensor::from_f32({rows[i], K}, values.data()),
                                           QuantSpec{i == 0 ? bits0 : bits1, 64}, DType::kBF16)));
        bias.push_back(on_gpu({rows[i]}, random_floats(rng, size_t(rows[i]))));
      }
      for (int64_t T : {1, 3}) {
        const std::vector<float> y0 = random_floats(rng, size_t(T * rows[1]));
        // Part 1 accumulates into y0.
        auto outputs = [&] {
          return std::vector<Tensor>{Tensor::empty({T, rows[0]}, DType::kF32, kGpu), on_gpu({T, rows[1]}, y0)};
        };
        auto parts_of = [&](std::vector<Tensor>& y) {
          return std::vector<ops::MatmulPart>{{nullptr, &bias[0], &y[0], &w[0]},
                                              {nullptr, &bias[1], &y[1], &w[1], true}};
        };
        const std::string what = std::to_string(bits0) + "+" + std::to_string(bits1) + "-bit K=" + std::to_string(K) +
                                 " T=" + std::to_string(T);
        // The norm.
        const Tensor x = on_gpu({T, K}, random_floats(rng, size_t(T * K), -3.0f, 3.0f));
        const Tensor norm_w = on_gpu({K}, random_floats(rng, size_t(K)));
        std::vector<Tensor> fused = outputs(), apart = outputs();
        ops::norm_matmul_group(ctx, x, norm_w, 1e-5f, parts_of(fused));
        Tensor normed = Tensor::empty({T, K}, DType::kF32, kGpu);
        ops::rms_norm(ctx, x, norm_w, 1e-5f, normed);
        ops::matmul_group(ctx, normed, parts_of(apart));
        for (size_t i = 0; i < rows.size(); ++i)
          EXPECT_EQ(to_host<float>(fused[i]), to_host<float>(apart[i])) << "norm, " << what << ", part " << i;
        // The activation (gate is scratch to both).
        const std::vector<float> gate = random_floats(rng, size_t(T * K), -4.0f, 4.0f);
        const Tensor up = on_gpu({T, K}, random_floats(rng, size_t(T * K)));
        fused = outputs(), apart = outputs();
        Tensor g_fused = on_gpu({T, K}, gate), g_apart = on_gpu({T, K}, gate);
        ops::silu_mul_matmul_group(ctx, g_fused, up, parts_of(fused));
        ops::silu_mul(ctx, g_apart, up, g_apart);
        ops::matmul_group(ctx, g_apart, parts_of(apart));
        for (size_t i = 0; i < rows.size(); ++i)
          EXPECT_EQ(to_host<float>(fused[i]), to_host<float>(apart[i])) << "silu, " << what << ", part " << i;
      }
    }
  }
}

// ops::attention_project through an MLX affine o projection (4 and 8 bits, groups of 32 to 128):
// decode rows take the merge kernel's rounding of the attention's output (the KV-head kernel on
// a bf16 cache, the per-head one on an f32 cache), bit-identical to attention then matmul_group,
// output included; a prefill of 12 rows takes the default.
TEST(CudaOps, AttentionProjectRoundsTheOutputForTheProjection) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(29);
  Context ctx = gpu_ctx();
  const int64_t Hq = 8, Hkv = 2, Dh = 128, block_size = 16, N = 96;
  struct Batch {
    std::vector<int32_t> q_lens, ctx_lens;
  };
  for (const Batch& b : {Batch{{1, 1, 1}, {5, 300, 130}}, Batch{{12}, {40}}}) {
    const int64_t S = int64_t(b.q_lens.size());
    std::vector<int32_t> starts = {0};
    int64_t max_blocks = 0;
    for (int64_t i = 0; i < S; ++i) {
      starts.push_back(starts.back() + b.q_lens[size_t(i)]);
      max_blocks = std::max(max_blocks, (b.ctx_lens[size_t(i)] + b.q_lens[size_t(i)] + block_size - 1) / block_size);
    }
    std::vector<int32_t> tables(size_t(S * max_blocks));
    for (size_t i = 0; i < tables.size(); ++i) tables[i] = int32_t(i);
    const int64_t T = starts.back(), n_blocks = S * max_blocks;
    const ops::AttentionBatch batch{on_gpu_i32({S + 1}, starts), on_gpu_i32({S}, b.ctx_lens),
                                    on_gpu_i32({S, max_blocks}, tables)};
    const std::vector<float> k = random_floats(rng, size_t(n_blocks * block_size * Hkv * Dh)),
                             v = random_floats(rng, k.size());
    for (DType kv_type : {DType::kBF16, DType::kF32}) {
      const ops::KvLayer cache{Tensor::from_f32({n_blocks, block_size, Hkv, Dh}, k.data()).to(kv_type).to_device(kGpu),
                               Tensor::from_f32({n_blocks, block_size, Hkv, Dh}, v.data()).to(kv_type).to_device(kGpu)};
      const Tensor q = on_gpu({T, Hq, Dh}, random_floats(rng, size_t(T * Hq * Dh), -2.0f, 2.0f));
      for (const auto [bits, gs] : std::vector<std::array<int, 2>>{{4, 64}, {8, 32}, {4, 128}, {8, 64}}) {
        const QuantizedMatrix w = on_gpu(random_affine(rng, N, Hq * Dh, bits, gs, DType::kBF16, false));
        const Tensor bias = on_gpu({N}, random_floats(rng, size_t(N)));
        const std::vector<float> y0 = random_floats(rng, size_t(T * N));
        Tensor out = Tensor::empty({T, Hq, Dh}, DType::kF32, kGpu), y = on_gpu({T, N}, y0);
        ops::attention_project(ctx, q, cache, batch, 0.09f, 0, out, ops::MatmulPart{nullptr, &bias, &y, &w, true});
        Tensor out2 = Tensor::empty({T, Hq, Dh}, DType::kF32, kGpu), y2 = on_gpu({T, N}, y0);
        ops::attention(ctx, q, cache, batch, 0.09f, 0, out2);
        const ops::MatmulPart project{nullptr, &bias, &y2, &w, true};
        ops::matmul_group(ctx, out2.reshape({T, Hq * Dh}), {&project, 1});
        const std::string what = affine_name(bits, gs, DType::kBF16, false) + " cache " +
                                 std::string(dtype_name(kv_type)) + " T=" + std::to_string(T);
        EXPECT_EQ(to_host<float>(out), to_host<float>(out2)) << what;
        EXPECT_EQ(to_host<float>(y), to_host<float>(y2)) << what;
      }
    }
  }
}

TEST(CudaOps, QuantizedEmbeddingDequantizesRowsExactly) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  Context ctx = gpu_ctx();
  const int64_t V = 100, D = 128;
  const std::vector<int32_t> ids = {0, 99, 7, 7, 42};
  for (int bits : {3, 4, 8}) {
    for (bool symmetric : {false, true}) {
      const std::vector<float> wf = random_floats(rng, size_t(V * D));
      QuantizedMatrix q = affine_quantize(Tensor::from_f32({V, D}, wf.data()), QuantSpec{bits, 64}, DType::kBF16);
      if (symmetric) q.biases = Tensor();
      std::vector<float> want(ids.size() * size_t(D));
      cpu::affine_rows(affine_args(q), ids.data(), int64_t(ids.size()), want.data());
      Tensor out = Tensor::empty({int64_t(ids.size()), D}, DType::kF32, kGpu);
      ops::quantized_embedding(ctx, on_gpu(q), on_gpu_i32({int64_t(ids.size())}, ids), out);
      EXPECT_EQ(to_host<float>(out), want) << bits << "-bit" << (symmetric ? " symmetric" : "");
    }
  }
  Tensor out = Tensor::empty({1, D}, DType::kF32, kGpu);
  const std::vector<float> wf = random_floats(rng, size_t(V * D));
  ops::quantized_embedding(ctx,
                           on_gpu(affine_quantize(Tensor::from_f32({V, D}, wf.data()), QuantSpec{4, 64}, DType::kBF16)),
                           on_gpu_i32({1}, {-3}), out);
  EXPECT_THROW(ops::check_errors(ctx), InputError);
}

// Random Q4_K / Q6_K blocks (every byte random, the f16 block scales finite and small).
QuantizedMatrix random_k_quants(std::mt19937& rng, GgmlType type, int64_t N, int64_t K) {
  const auto bytes = int64_t(row_bytes(type, K));
  Tensor blocks = Tensor::empty({N, bytes}, DType::kU8);
  for (int64_t i = 0; i < blocks.numel(); ++i) blocks.data<uint8_t>()[i] = uint8_t(rng());
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  const int64_t block_bytes = type == GgmlType::kQ4_K ? 144 : 210;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t b = 0; b < K / 256; ++b) {
      uint8_t* block = blocks.data<uint8_t>() + n * bytes + b * block_bytes;
      for (int64_t at : type == GgmlType::kQ4_K ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{208}) {
        const uint16_t h = f32_to_f16(scale(rng));
        std::memcpy(block + at, &h, 2);
      }
    }
  }
  return ggml_quantized(type, N, K, blocks);
}

cpu::GgmlMatrix cpu_blocks(const QuantizedMatrix& q) {
  return {q.packed.data<uint8_t>(), q.ggml_type, q.rows, q.cols, size_t(q.packed.dim(1)), q.ggml_layout};
}

// GGUF k-quants: up to 32 rows as integer dots (x rounded to int8 per 32 values, 8 rows per
// pass), prefill through a bf16 dequantized matrix (as the affine prefill); embedding rows bit-identical. K = 256 gives
// Q6_K rows that start 2 bytes off a word (210-byte rows).
TEST(CudaOps, KQuantMatmulAndRowsMatchTheScalarReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(12);
  Context ctx = gpu_ctx();
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    for (auto [N, K] : {std::pair<int64_t, int64_t>{1, 256}, {37, 512}, {300, 1024}, {20, 14336}}) {
      const QuantizedMatrix q = random_k_quants(rng, type, N, K);
      const Tensor dense = dequantize(q);
      // Decode rows round x to int8 per 32 values: the bound gains sum_k |d sc q_k| dx / 2, d sc q_k
      // being each weight without its min term (Q4_K blocks with dmin = 0; Q6_K has none).
      QuantizedMatrix no_min = q;
      no_min.packed = Tensor::empty(q.packed.shape(), DType::kU8);
      std::memcpy(no_min.packed.raw(), q.packed.raw(), q.packed.nbytes());
      uint8_t* bytes = no_min.packed.data<uint8_t>();
      for (int64_t at = 0; type == GgmlType::kQ4_K && at < no_min.packed.numel(); at += 144)
        bytes[at + 2] = bytes[at + 3] = 0;
      const Tensor scaled = dequantize(no_min);
      for (int64_t T : {1, 2, 3, 4, 5, 6, 7, 8, 9, 20, 32, 33}) {
        const std::vector<float> x = random_floats(rng, size_t(T * K)), bias = random_floats(rng, size_t(N));
        std::vector<float> want(size_t(T * N));
        cpu::ggml_matmul(Isa::kScalar, nullptr, x.data(), T, cpu_blocks(q), bias.data(), want.data());
        // Decode rows on tensor cores (Q4_K where K is in pairs of blocks, at one row where N <= K;
        // Q6_K from two rows) and through the dp4a kernels.
        for (const char* mma : {"1", "0"}) {
          const KnobOverride knob("HEARTH_CUDA_MV_MMA", mma);
          Tensor y = Tensor::empty({T, N}, DType::kF32, kGpu);
          ops::quantized_matmul(ctx, on_gpu({T, K}, x), on_gpu(q), on_gpu({N}, bias), y);
          const std::vector<float> got = to_host<float>(y);
          const bool int8_x = T <= 32;  // 9-32 rows: the integer kernels, 8 rows at a time
          const double eps = int8_x ? 0.0 : 2.0 / 256;
          for (int64_t t = 0; t < T; ++t) {
            for (int64_t n = 0; n < N; ++n) {
              double abs_dot = 0, rounding = 0;
              for (int64_t j = 0; j < K / 32; ++j) {
                float amax = 0;
                for (int64_t k = 32 * j; k < 32 * j + 32; ++k) amax = std::max(amax, std::abs(x[size_t(t * K + k)]));
                for (int64_t k = 32 * j; k < 32 * j + 32; ++k) {
                  abs_dot += std::abs(x[size_t(t * K + k)] * dense.data<float>()[n * K + k]);
                  if (int8_x) rounding += std::abs(scaled.data<float>()[n * K + k]) * amax / 127 / 2;
                }
              }
              const size_t i = size_t(t * N + n);
              ASSERT_LE(std::abs(got[i] - want[i]), rounding + (eps + 1e-6) * abs_dot + 1e-5 * (1 + std::abs(want[i])))
                  << ggml_type_name(type) << " T=" << T << " N=" << N << " K=" << K << " at (" << t << ", " << n
                  << ") HEARTH_CUDA_MV_MMA=" << mma;
            }
          }
        }
      }
      std::vector<int32_t> ids = {0, int32_t(N - 1), int32_t(N / 2)};
      std::vector<float> want(ids.size() * size_t(K));
      cpu::ggml_rows(Isa::kScalar, cpu_blocks(q), ids.data(), int64_t(ids.size()), want.data());
      Tensor out = Tensor::empty({int64_t(ids.size()), K}, DType::kF32, kGpu);
      ops::quantized_embedding(ctx, on_gpu(q), on_gpu_i32({int64_t(ids.size())}, ids), out);
      EXPECT_EQ(to_host<float>(out), want) << ggml_type_name(type) << " rows";
    }
  }
}

}  // namespace
}  // namespace hearth
