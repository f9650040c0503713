// MLX affine quantization: the codec against the format's error bound and hand-packed rows,
// and every CPU path of the quantized matmul against the scalar reference.
#include "core/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backends/cpu/isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/quant_kernels.h"
#include "base/error.h"
#include "base/knobs.h"
#include "core/context.h"
#include "core/ops.h"

namespace hearth {
namespace {

std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

const QuantSpec kSpecs[] = {{2, 32}, {3, 32},  {4, 32}, {5, 64},  {6, 64},  {8, 64},
                            {4, 64}, {4, 128}, {8, 32}, {8, 128}, {3, 128}, {6, 128}};

// Each value comes back as the nearest point of its group's grid {bias + scale * q}: within
// half a step inside the grid's span. MLX anchors the grid on the extreme of larger magnitude
// (exactly representable) and rounds the step to fit it, so the other extreme can fall just
// outside the span and is clamped to the grid's end.
TEST(AffineQuant, RoundTripGivesTheNearestGridPoint) {
  const int64_t K = 384;
  for (const QuantSpec& spec : kSpecs) {
    const std::vector<float> w = random_floats(K, 7 + spec.bits);
    std::vector<uint32_t> packed(static_cast<size_t>(K * spec.bits / 32));
    std::vector<float> s(static_cast<size_t>(K / spec.group_size)), b(s.size()), back(static_cast<size_t>(K));
    affine_quantize_row(w.data(), K, spec, packed.data(), s.data(), b.data());
    affine_dequantize_row(packed.data(), s.data(), b.data(), K, spec, back.data());
    const int levels = 1 << spec.bits;
    for (int64_t k = 0; k < K; ++k) {
      const size_t g = static_cast<size_t>(k / spec.group_size);
      float nearest = INFINITY;
      for (int q = 0; q < levels; ++q)
        nearest = std::min(nearest, std::abs(b[g] + s[g] * q - w[static_cast<size_t>(k)]));
      const float err = std::abs(back[static_cast<size_t>(k)] - w[static_cast<size_t>(k)]);
      EXPECT_LE(err, nearest + 1e-6f) << spec.bits << "-bit g" << spec.group_size << " k=" << k;
      EXPECT_LE(nearest, std::abs(s[g])) << "the grid spans the group";
    }
  }
}

TEST(AffineQuant, PackingIsALittleEndianBitStream) {
  // 3-bit codes 0..7 repeated: element k sits at bits [3k, 3k + 3) across word boundaries.
  const QuantSpec spec{3, 32};
  std::vector<uint32_t> packed(3, 0);
  for (int k = 0; k < 32; ++k) {
    const uint64_t bit = 3ull * static_cast<uint64_t>(k);
    const uint64_t v = static_cast<uint64_t>(k % 8) << (bit & 31);
    packed[bit >> 5] |= static_cast<uint32_t>(v);
    if ((bit & 31) + 3 > 32) packed[(bit >> 5) + 1] |= static_cast<uint32_t>(v >> 32);
  }
  for (int k = 0; k < 32; ++k) EXPECT_EQ(affine_code(packed.data(), k, 3), static_cast<uint32_t>(k % 8));
  const float scale = 0.5f, bias = -1.0f;
  std::vector<float> out(32);
  affine_dequantize_row(packed.data(), &scale, &bias, 32, spec, out.data());
  EXPECT_FLOAT_EQ(out[10], 0.5f * 2 - 1.0f);
  // 4-bit: byte j holds element 2j in its low nibble, as MLX packs uint32 words low bits first.
  const uint32_t word = 0x76543210u;
  for (int k = 0; k < 8; ++k) EXPECT_EQ(affine_code(&word, k, 4), static_cast<uint32_t>(k));
}

TEST(AffineQuant, ExtremeOfLargerMagnitudeIsExact) {
  std::vector<float> w(32, 0.1f);
  w[3] = -2.0f;  // |min| > |max|: the minimum is the anchor
  w[9] = 0.75f;
  std::vector<uint32_t> packed(4);
  float s = 0, b = 0;
  affine_quantize_row(w.data(), 32, QuantSpec{4, 32}, packed.data(), &s, &b);
  std::vector<float> back(32);
  affine_dequantize_row(packed.data(), &s, &b, 32, QuantSpec{4, 32}, back.data());
  EXPECT_EQ(back[3], -2.0f);
  // A constant group survives exactly.
  std::vector<float> c(32, 0.25f);
  affine_quantize_row(c.data(), 32, QuantSpec{4, 32}, packed.data(), &s, &b);
  affine_dequantize_row(packed.data(), &s, &b, 32, QuantSpec{4, 32}, back.data());
  for (float v : back) EXPECT_FLOAT_EQ(v, 0.25f);
}

TEST(AffineQuant, BadSpecsAreRefused) {
  EXPECT_THROW(check_quant_spec({7, 64}), InputError);
  EXPECT_THROW(check_quant_spec({4, 16}), InputError);
  EXPECT_THROW(affine_quantize(Tensor::zeros({4, 48}, DType::kF32), {4, 32}, DType::kF32), InputError);
}

// Every ISA and both paths (decode T <= 4, prefill tiles) against the scalar reference.
// Panels hold the same values: dequantizing either layout gives the same matrix, for any N
// (the last panel is padded) and with or without biases.
// Each group's codes are followed by its parameters; 16-bit symmetric groups go in pairs, and
// K = 288 in groups of 32 (9 groups) leaves a last pair of one.
TEST(AffineQuant, PanelsHoldTheSameMatrix) {
  for (int64_t N : {1, 16, 45})
    for (const QuantSpec& spec : {QuantSpec{4, 32}, QuantSpec{4, 128}, QuantSpec{8, 64}, QuantSpec{8, 32}})
      for (int64_t K : {256, 288})
        for (DType st : {DType::kBF16, DType::kF16, DType::kF32}) {
          if (K % spec.group_size != 0) continue;
          const std::vector<float> wf = random_floats(static_cast<size_t>(N * K), 7, 0.05f);
          QuantizedMatrix q = affine_quantize(Tensor::from_f32({N, K}, wf.data()), spec, st);
          for (bool symmetric : {false, true}) {
            if (symmetric) q.biases = Tensor();
            const QuantizedMatrix p = affine_to_panels(q);
            EXPECT_EQ(p.layout, AffineLayout::kPanels16);
            EXPECT_EQ(p.symmetric(), symmetric);
            EXPECT_FALSE(p.scales.defined() || p.biases.defined());
            const PanelLayout l = panel_layout(p);
            EXPECT_EQ(p.packed.shape(), Shape({(N + 15) / 16, l.panel_bytes}));
            EXPECT_EQ(l.panel_bytes % 64, 0);
            // One panel's bytes: its codes and parameters, rounded up to whole lines.
            const int64_t params = (symmetric ? 1 : 2) * 16 * static_cast<int64_t>(dtype_size(st));
            EXPECT_EQ(l.panel_bytes, (K * spec.bits / 8 * 16 + K / spec.group_size * params + 63) / 64 * 64);
            const Tensor a = affine_dequantize(q), b = affine_dequantize(p);
            for (int64_t i = 0; i < N * K; ++i) ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]) << i;
          }
        }
  const std::vector<float> wf = random_floats(64 * 96, 3);
  const QuantizedMatrix three = affine_quantize(Tensor::from_f32({64, 96}, wf.data()), {3, 32}, DType::kF32);
  EXPECT_THROW(affine_to_panels(three), InputError);
}

TEST(AffineMatmul, EveryIsaMatchesTheScalarReference) {
  const int64_t N = 45;
  // K = 2304: 36 groups of 64 (or 18 of 128), more than a 16-lane vector of group parameters.
  // K = 288: 9 groups of 32, an odd count (the AVX2 8-bit kernel takes groups in pairs).
  for (int64_t K : {256, 2304, 288})
    for (const QuantSpec& spec : kSpecs) {
      if (K % spec.group_size != 0) continue;
      for (DType st : {DType::kBF16, DType::kF32, DType::kF16}) {
        const std::vector<float> wf = random_floats(static_cast<size_t>(N * K), 100 + spec.bits, 0.05f);
        const QuantizedMatrix q = affine_quantize(Tensor::from_f32({N, K}, wf.data()), spec, st);
        const cpu::AffineMatrix m{
            q.packed.data<uint32_t>(), q.scales.raw(), q.biases.raw(), st, spec.bits, spec.group_size, N, K};
        // 4 and 8 bits also run from 16-row panels (the layout the CPU backend loads them in
        // on VNNI machines), through the scalar reference and the integer kernels.
        const bool has_panels = spec.bits == 4 || spec.bits == 8;
        const QuantizedMatrix qp = has_panels ? affine_to_panels(q) : QuantizedMatrix{};
        const cpu::AffineMatrix mp = has_panels ? affine_args(qp) : cpu::AffineMatrix{};
        const std::vector<float> bias = random_floats(static_cast<size_t>(N), 5);
        const Tensor biases_f32 = q.biases.to(DType::kF32);
        const std::vector<float> biases(biases_f32.data<float>(), biases_f32.data<float>() + biases_f32.numel());
        for (int64_t T : {1, 3, 4, 9, 70}) {
          const std::vector<float> x = random_floats(static_cast<size_t>(T * K), 11 + T);
          std::vector<float> ref(static_cast<size_t>(T * N)), got(ref.size());
          cpu::affine_matmul(cpu::Isa::kScalar, nullptr, x.data(), T, m, bias.data(), ref.data());
          // The reference is the dequantized matrix times x.
          const Tensor dense = affine_dequantize(q);
          for (int64_t t = 0; t < T; ++t) {
            for (int64_t n = 0; n < N; ++n) {
              double acc = bias[static_cast<size_t>(n)];
              for (int64_t k = 0; k < K; ++k) acc += double(x[t * K + k]) * dense.data<float>()[n * K + k];
              ASSERT_NEAR(ref[static_cast<size_t>(t * N + n)], acc, 1e-4);
            }
          }
          // The VNNI paths (4/8 bits) round x to int8 per weight group (step dx = max|x| / 127):
          // each product may move by |w - bias| * dx / 2 (the bias term uses the exact sum of x).
          std::vector<float> int8_bound(static_cast<size_t>(T * N), 0.0f);
          const int64_t gs = spec.group_size;
          for (int64_t t = 0; t < T; ++t) {
            for (int64_t n = 0; n < N; ++n) {
              double e = 0;
              for (int64_t c = 0; c < K; c += gs) {
                float amax = 0;
                for (int64_t k = c; k < c + gs; ++k) amax = std::max(amax, std::abs(x[t * K + k]));
                const float b = biases[static_cast<size_t>(n * (K / gs) + c / gs)];
                for (int64_t k = c; k < c + gs; ++k) e += std::abs(dense.data<float>()[n * K + k] - b) * amax / 127 / 2;
              }
              int8_bound[static_cast<size_t>(t * N + n)] = static_cast<float>(e);
            }
          }
          // Prefill tiles dequantized to bf16 (AVX512-BF16, the row layout): each product
          // within 2^-8 of its size.
          std::vector<float> bf16_bound(static_cast<size_t>(T * N), 0.0f);
          for (int64_t t = 0; t < T; ++t) {
            for (int64_t n = 0; n < N; ++n) {
              double e = 0;
              for (int64_t k = 0; k < K; ++k)
                e += 0x1p-8 * std::abs(double(x[t * K + k]) * dense.data<float>()[n * K + k]);
              bf16_bound[static_cast<size_t>(t * N + n)] = static_cast<float>(e);
            }
          }
          ThreadPool pool(2);
          for (const cpu::AffineMatrix* w : {&m, &mp}) {
            if (w == &mp && !has_panels) continue;
            for (cpu::Isa isa : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
              if (!cpu::isa_supported(isa)) continue;
              cpu::affine_matmul(isa, &pool, x.data(), T, *w, bias.data(), got.data());
              const float slack = isa == cpu::Isa::kScalar ? 0.0f : 1.0f;
              const bool bf16_tiles =
                  isa == cpu::Isa::kAvx512 && !w->panels && T > 4 && cpu::matmul_rounds_x_to_bf16(isa, DType::kBF16, T);
              for (size_t i = 0; i < got.size(); ++i) {
                ASSERT_NEAR(
                    got[i], ref[i],
                    slack * int8_bound[i] + (bf16_tiles ? bf16_bound[i] : 0.0f) + 2e-5f * (1.0f + std::abs(ref[i])))
                    << spec.bits << "-bit g" << spec.group_size << " T=" << T << " i=" << i
                    << (w->panels ? " panels " : " rows ") << cpu::isa_name(isa);
              }
            }
          }
        }
      }
    }
}

// On a CPU with AMX, panel prefill takes a group's int32 dots on tiles and then the VNNI
// kernel's float steps: its results must be the VNNI kernel's (HEARTH_CPU_AMX=0) to the bit, for
// each width and group size, even and odd counts of groups, parameter types with and without
// pairing, a short last panel
// (N = 45), and x rows that fill part of one tile (5, 9), several with a tail (70), and more than
// one chunk (150).
TEST(AffineMatmul, AmxTilesGiveTheVnniResultsToTheBit) {
  if (!cpu::has_amx()) GTEST_SKIP() << "no AMX";
  const int64_t N = 45;
  ThreadPool pool(2);
  for (int64_t K : {256, 2304, 288})  // 288: an odd count of groups of 32 (the last group alone)
    for (const QuantSpec spec :
         {QuantSpec{4, 32}, QuantSpec{4, 64}, QuantSpec{4, 128}, QuantSpec{8, 32}, QuantSpec{8, 64}, QuantSpec{8, 128}})
      for (DType st : {DType::kBF16, DType::kF16}) {
        if (K % spec.group_size != 0) continue;
        const std::vector<float> wf = random_floats(static_cast<size_t>(N * K), 300 + spec.bits, 0.05f);
        const QuantizedMatrix qp = affine_to_panels(affine_quantize(Tensor::from_f32({N, K}, wf.data()), spec, st));
        const cpu::AffineMatrix w = affine_args(qp);
        const std::vector<float> bias = random_floats(static_cast<size_t>(N), 7);
        for (int64_t T : {5, 9, 70, 150}) {
          const std::vector<float> x = random_floats(static_cast<size_t>(T * K), 21 + T);
          std::vector<float> vnni(static_cast<size_t>(T * N)), amx(vnni.size(), -1.0f);
          {
            KnobOverride off("HEARTH_CPU_AMX", "0");
            EXPECT_FALSE(cpu::amx_active(cpu::Isa::kAvx512));
            cpu::panel_matmul(&pool, x.data(), T, w, bias.data(), vnni.data());
          }
          EXPECT_TRUE(cpu::amx_active(cpu::Isa::kAvx512));
          cpu::panel_matmul(&pool, x.data(), T, w, bias.data(), amx.data());
          ASSERT_EQ(0, std::memcmp(vnni.data(), amx.data(), vnni.size() * sizeof(float)))
              << spec.bits << "-bit g" << spec.group_size << " K=" << K << " T=" << T << " " << dtype_name(st);
        }
      }
}

// On the CPU, ops::matmul_group over 4/8-bit panel matrices runs as one pass (x rounded once,
// one parallel loop over every part's rows): each part must come out bit for bit as its own
// quantized_matmul, and an accumulating part as that added to y's old values. A part of
// another group size sends the whole group part by part, with the same results.
TEST(AffineMatmul, PanelGroupIsEachPartAlone) {
  if (!cpu::isa_supported(cpu::Isa::kAvx512) || !cpu::has_avx512_vnni()) GTEST_SKIP() << "no AVX-512 VNNI";
  struct PartSpec {
    int64_t N;
    QuantSpec spec;
    bool bias, accumulate;
  };
  const int64_t K = 384;
  const std::vector<PartSpec> one_pass = {
      {45, {4, 64}, true, false}, {16, {8, 64}, false, false}, {100, {4, 64}, false, true}, {7, {8, 64}, true, true}};
  const std::vector<PartSpec> mixed = [&] {
    std::vector<PartSpec> m = one_pass;
    m.push_back({20, {4, 32}, false, true});
    return m;
  }();
  ThreadPool pool(2);
  Context ctx;
  ctx.pool = &pool;
  for (const std::vector<PartSpec>* specs : {&one_pass, &mixed}) {
    for (int64_t T : {1, 3, 9}) {
      const std::vector<float> xv = random_floats(static_cast<size_t>(T * K), 40 + T);
      const Tensor x = Tensor::from_f32({T, K}, xv.data());
      const size_t n = specs->size();
      std::vector<QuantizedMatrix> ws(n);
      std::vector<Tensor> biases(n), ys(n), before(n);
      std::vector<ops::MatmulPart> parts;
      for (size_t i = 0; i < n; ++i) {
        const PartSpec& ps = (*specs)[i];
        const std::vector<float> wf = random_floats(static_cast<size_t>(ps.N * K), 60 + i, 0.05f);
        ws[i] = affine_to_panels(affine_quantize(Tensor::from_f32({ps.N, K}, wf.data()), ps.spec, DType::kBF16));
        const std::vector<float> bv = random_floats(static_cast<size_t>(ps.N), 80 + i);
        if (ps.bias) biases[i] = Tensor::from_f32({ps.N}, bv.data());
        const std::vector<float> yv = random_floats(static_cast<size_t>(T * ps.N), 90 + i);
        before[i] = Tensor::from_f32({T, ps.N}, yv.data());
        ys[i] = Tensor::from_f32({T, ps.N}, yv.data());
        parts.push_back({nullptr, &biases[i], &ys[i], &ws[i], ps.accumulate});
      }
      ops::matmul_group(ctx, x, parts);
      for (size_t i = 0; i < n; ++i) {
        Tensor alone = Tensor::zeros(ys[i].shape(), DType::kF32);
        ops::quantized_matmul(ctx, x, ws[i], biases[i], alone);
        for (int64_t j = 0; j < alone.numel(); ++j) {
          const float want =
              (*specs)[i].accumulate ? before[i].data<float>()[j] + alone.data<float>()[j] : alone.data<float>()[j];
          ASSERT_EQ(ys[i].data<float>()[j], want) << "part " << i << " of " << n << ", T=" << T << ", j=" << j;
        }
      }
    }
  }
}

}  // namespace
}  // namespace hearth
