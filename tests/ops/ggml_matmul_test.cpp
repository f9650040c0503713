// ggml block-quantized matrices (GGUF's Q8_0, Q4_0, Q4_K, Q6_K): every CPU path of the matmul
// against the scalar reference over random shapes, the ops checks, and the kernels' decoding
// against the GGUF reader's (formats/) over a written file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backends/cpu/ggml_kernels.h"
#include "backends/cpu/kernels.h"
#include "core/dtype.h"
#include "core/ops.h"
#include "core/quant.h"
#include "formats/ggml_quants.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "test_util.h"

namespace hearth {
namespace {

using cpu::Isa;

constexpr GgmlType kTypes[] = {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K};

std::vector<float> random_floats(size_t n, std::mt19937_64& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// N rows of K elements of `type`: Q8_0/Q4_0 quantized from random weights with the reference
// quantizers; Q4_K/Q6_K random bytes with small finite f16 scales (every bit pattern of the
// codes and sub-block scales is a valid block).
std::vector<uint8_t> random_blocks(GgmlType type, int64_t N, int64_t K, std::mt19937_64& rng) {
  const size_t rb = row_bytes(type, K);
  std::vector<uint8_t> out(rb * static_cast<size_t>(N));
  if (type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0) {
    const std::vector<float> w = random_floats(static_cast<size_t>(N * K), rng, 0.05f);
    for (int64_t n = 0; n < N; ++n) {
      if (type == GgmlType::kQ8_0) {
        quantize_row_q8_0(w.data() + n * K, reinterpret_cast<BlockQ8_0*>(out.data() + n * rb), K);
      } else {
        quantize_row_q4_0(w.data() + n * K, reinterpret_cast<BlockQ4_0*>(out.data() + n * rb), K);
      }
    }
    return out;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(1e-4f, 2e-3f);
  for (uint8_t& b : out) b = static_cast<uint8_t>(byte(rng));
  const size_t block_bytes = ggml_type_info(type).block_bytes;
  for (size_t b = 0; b < out.size(); b += block_bytes) {
    const uint16_t d = f32_to_f16(scale(rng)), dmin = f32_to_f16(scale(rng));
    if (type == GgmlType::kQ4_K) {
      std::memcpy(&out[b], &d, 2);
      std::memcpy(&out[b + 2], &dmin, 2);
    } else {
      std::memcpy(&out[b + 208], &d, 2);
    }
  }
  return out;
}

std::vector<Isa> all_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (cpu::isa_supported(isa)) out.push_back(isa);
  return out;
}

// How far rounding x to int8 per block of `block` elements (step max|x| / 127) may move
// y[t, n] = sum_k x[t, k] w[n, k]: |w| * step / 2 per product.
double int8_rounding(const float* x, const float* w, int64_t t, int64_t n, int64_t K, int64_t block) {
  double e = 0;
  for (int64_t c = 0; c < K; c += block) {
    float amax = 0;
    for (int64_t k = c; k < c + block; ++k) amax = std::max(amax, std::abs(x[t * K + k]));
    for (int64_t k = c; k < c + block; ++k) e += std::abs(w[n * K + k]) * amax / 254;
  }
  return e;
}

// Every ISA, decode (T <= 4) and prefill (tiles), with and without threads and bias, against
// the scalar reference; the reference against a double-precision dot of the decoded rows.
TEST(GgmlMatmul, EveryIsaMatchesTheScalarReference) {
  std::mt19937_64 rng(42);
  ThreadPool pool(3);
  for (GgmlType type : kTypes) {
    const int64_t block = ggml_type_info(type).block_size;
    for (int round = 0; round < 6; ++round) {
      const int64_t N = std::uniform_int_distribution<int64_t>(1, 80)(rng);
      const int64_t K = block * std::uniform_int_distribution<int64_t>(1, block == 32 ? 24 : 4)(rng);
      const std::vector<uint8_t> blocks = random_blocks(type, N, K, rng);
      const cpu::GgmlMatrix m{blocks.data(), type, N, K, row_bytes(type, K)};
      // Q6_K and Q4_K also in lanes (the VBMI decode's layout): every path against the same
      // reference.
      std::vector<uint8_t> lanes(blocks.size());
      std::vector<cpu::GgmlMatrix> layouts = {m};
      const int64_t n_blocks = static_cast<int64_t>(blocks.size() / ggml_type_info(type).block_bytes);
      if (type == GgmlType::kQ6_K || type == GgmlType::kQ4_K) {
        (type == GgmlType::kQ6_K ? q6_k_blocks_to_lanes : q4_k_blocks_to_lanes)(blocks.data(), lanes.data(), n_blocks);
        layouts.push_back({lanes.data(), type, N, K, row_bytes(type, K), GgmlLayout::kLanes});
      }
      std::vector<float> dense(static_cast<size_t>(N * K));
      for (int64_t n = 0; n < N; ++n) dequantize_row(type, blocks.data() + n * m.row_bytes, &dense[n * K], K);
      const std::vector<float> bias = random_floats(static_cast<size_t>(N), rng);
      for (int64_t T : {1, 2, 3, 4, 5, 17}) {
        const std::vector<float> x = random_floats(static_cast<size_t>(T * K), rng);
        const float* b = round % 2 == 0 ? bias.data() : nullptr;
        std::vector<float> ref(static_cast<size_t>(T * N)), got(ref.size()), scale(ref.size());
        cpu::ggml_matmul(Isa::kScalar, nullptr, x.data(), T, m, b, ref.data());
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t n = 0; n < N; ++n) {
            double acc = b != nullptr ? b[n] : 0.0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
              acc += double(x[t * K + k]) * dense[n * K + k];
              mag += std::abs(double(x[t * K + k]) * dense[n * K + k]);
            }
            const size_t i = static_cast<size_t>(t * N + n);
            scale[i] = static_cast<float>(mag) + std::abs(ref[i]);
            ASSERT_NEAR(ref[i], acc, 1e-5 * scale[i] + 1e-6) << ggml_type_name(type) << " T=" << T;
          }
        }
        for (Isa isa : all_isas()) {
          for (int which = 0; which < static_cast<int>(layouts.size()) * 2; ++which) {
            const cpu::GgmlMatrix& w = layouts[static_cast<size_t>(which / 2)];
            ThreadPool* p = which % 2 == 0 ? nullptr : &pool;
            std::fill(got.begin(), got.end(), NAN);
            cpu::ggml_matmul(isa, p, x.data(), T, w, b, got.data());
            float worst = 0;
            size_t where = 0;
            // The Q4_K/Q6_K decode, VNNI or AVX2 (of blocks), rounds x to int8 per 256 elements
            // (step max|x| / 127): each product may move by |w| * step / 2.
            const bool k_quant = type == GgmlType::kQ6_K || type == GgmlType::kQ4_K;
            const bool int8_x = k_quant && ((T <= 4 && isa == Isa::kAvx512 && cpu::has_avx512_vnni()) ||
                                            (isa == Isa::kAvx2 && !w.in_lanes()));
            // Prefill tiles dequantized to bf16 (AVX512-BF16): x and each weight rounded to bf16,
            // each product within 2^-8 of its own size.
            const bool bf16_tiles = T > 4 && cpu::matmul_rounds_x_to_bf16(isa, DType::kBF16, T);
            for (size_t i = 0; i < got.size(); ++i) {
              const double rounding = int8_x ? int8_rounding(x.data(), dense.data(), static_cast<int64_t>(i) / N,
                                                             static_cast<int64_t>(i) % N, K, 256)
                                             : 0.0;
              const float bound = (bf16_tiles ? 0x1p-8f : 1e-5f) * scale[i] + 1e-6f + static_cast<float>(rounding);
              const float err = std::abs(got[i] - ref[i]) / bound;
              if (!(err <= worst)) worst = err, where = i;
            }
            EXPECT_LE(worst, 1.0f) << ggml_type_name(type) << " " << cpu::isa_name(isa) << " N=" << N << " K=" << K
                                   << " T=" << T << " threads=" << (p != nullptr) << " lanes=" << w.in_lanes()
                                   << ": worst element " << where << " got " << got[where] << " want " << ref[where];
          }
        }
      }
    }
  }
}

// The prefill's row decode (the AVX-512 Q4_K lanes decode where it runs) gives the reference's
// values bit for bit.
TEST(GgmlMatmul, RowDecodeIsTheReferenceBitForBit) {
  std::mt19937_64 rng(5);
  for (GgmlType type : kTypes) {
    const int64_t N = 3, K = 4 * ggml_type_info(type).block_size;
    const std::vector<uint8_t> blocks = random_blocks(type, N, K, rng);
    std::vector<cpu::GgmlMatrix> layouts = {{blocks.data(), type, N, K, row_bytes(type, K)}};
    std::vector<uint8_t> lanes(blocks.size());
    if (type == GgmlType::kQ6_K || type == GgmlType::kQ4_K) {
      const int64_t n_blocks = static_cast<int64_t>(blocks.size() / ggml_type_info(type).block_bytes);
      (type == GgmlType::kQ6_K ? q6_k_blocks_to_lanes : q4_k_blocks_to_lanes)(blocks.data(), lanes.data(), n_blocks);
      layouts.push_back({lanes.data(), type, N, K, row_bytes(type, K), GgmlLayout::kLanes});
    }
    for (const cpu::GgmlMatrix& w : layouts) {
      for (int64_t n = 0; n < N; ++n) {
        std::vector<float> want(static_cast<size_t>(K)), got(static_cast<size_t>(K));
        dequantize_row(type, blocks.data() + n * w.row_bytes, want.data(), K);
        for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
          if (!isa_supported(isa)) continue;
          cpu::ggml_dequantize_row(isa, w, n, got.data());
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
              << ggml_type_name(type) << " lanes=" << w.in_lanes() << " row " << n << " isa " << isa_name(isa);
        }
      }
    }
  }
}

// Through ops: the ggml format dispatches to the ggml kernels; embeddings decode rows exactly.
TEST(GgmlMatmul, OpsMatchTheDequantizedMatrix) {
  std::mt19937_64 rng(7);
  ThreadPool pool(2);
  Context ctx{&pool, kCpu};
  for (GgmlType type : kTypes) {
    const int64_t N = 40, K = 2 * ggml_type_info(type).block_size, T = 6;
    std::vector<uint8_t> bytes = random_blocks(type, N, K, rng);
    Tensor blocks = Tensor::empty({N, static_cast<int64_t>(row_bytes(type, K))}, DType::kU8);
    std::memcpy(blocks.raw(), bytes.data(), bytes.size());
    const QuantizedMatrix q = ggml_quantized(type, N, K, blocks);
    const Tensor dense = dequantize(q);
    const std::vector<float> xv = random_floats(static_cast<size_t>(T * K), rng);
    const Tensor x = Tensor::from_f32({T, K}, xv.data());
    for (int64_t rows : {int64_t{1}, T}) {
      const Tensor xs = x.slice_rows(0, rows);
      Tensor want = Tensor::empty({rows, N}, DType::kF32), got = Tensor::empty({rows, N}, DType::kF32);
      ops::matmul(ctx, xs, dense, Tensor(), want);
      ops::quantized_matmul(ctx, xs, q, Tensor(), got);
      const bool int8_x = (cpu::active_isa() == Isa::kAvx512 && cpu::has_avx512_vnni() &&
                           (type == GgmlType::kQ6_K || type == GgmlType::kQ4_K)) ||
                          (cpu::active_isa() == Isa::kAvx2 && (type == GgmlType::kQ6_K || type == GgmlType::kQ4_K));
      // Prefill tiles in bf16 (AVX512-BF16): each product within 2^-8 of its size.
      const bool bf16_tiles = rows > 4 && cpu::matmul_rounds_x_to_bf16(cpu::active_isa(), DType::kBF16, rows);
      for (int64_t t = 0; t < rows; ++t) {
        for (int64_t n = 0; n < N; ++n) {
          double rounding = int8_x ? int8_rounding(xv.data(), dense.data<float>(), t, n, K, 256) : 0.0;
          for (int64_t k = 0; bf16_tiles && k < K; ++k)
            rounding += 0x1p-8 * std::abs(double(xv[t * K + k]) * dense.data<float>()[n * K + k]);
          ASSERT_NEAR(got.data<float>()[t * N + n], want.data<float>()[t * N + n],
                      1e-4f * (1.0f + testing::max_abs(want)) + rounding)
              << ggml_type_name(type);
        }
      }
    }
    const int32_t ids_v[] = {3, 0, 39, 3};
    const Tensor ids = Tensor::from_i32({4}, ids_v);
    Tensor rows = Tensor::empty({4, K}, DType::kF32);
    ops::quantized_embedding(ctx, q, ids, rows);
    for (int i = 0; i < 4; ++i) {
      for (int64_t k = 0; k < K; ++k)
        ASSERT_EQ(rows.data<float>()[i * K + k], dense.data<float>()[ids_v[i] * K + k]) << ggml_type_name(type);
    }
  }
}

// Q6_K and Q4_K in lanes decode to the file's values bit for bit, row by row and as a matrix;
// through ops they multiply and look rows up as the blocks do; other types do not repack.
TEST(GgmlMatmul, LanesHoldTheBlocksValues) {
  std::mt19937_64 rng(11);
  ThreadPool pool(2);
  Context ctx{&pool, kCpu};
  for (GgmlType type : {GgmlType::kQ6_K, GgmlType::kQ4_K}) {
    const int64_t N = 37, K = 3 * 256, T = 3;
    const std::vector<uint8_t> bytes = random_blocks(type, N, K, rng);
    Tensor blocks = Tensor::empty({N, static_cast<int64_t>(row_bytes(type, K))}, DType::kU8);
    std::memcpy(blocks.raw(), bytes.data(), bytes.size());
    const QuantizedMatrix q = ggml_quantized(type, N, K, blocks);
    const QuantizedMatrix lanes = ggml_to_lanes(q);
    EXPECT_EQ(lanes.ggml_layout, GgmlLayout::kLanes);
    EXPECT_EQ(lanes.packed.shape(), q.packed.shape());
    const Tensor want = dequantize(q), got = dequantize(lanes);
    for (int64_t i = 0; i < N * K; ++i)
      ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << ggml_type_name(type) << " element " << i;
    std::vector<float> row(static_cast<size_t>(K));
    dequantize_lanes(type, lanes.packed.data<uint8_t>() + 5 * lanes.packed.dim(1), row.data(), K);
    for (int64_t k = 0; k < K; ++k) ASSERT_EQ(row[static_cast<size_t>(k)], want.data<float>()[5 * K + k]);

    const std::vector<float> xv = random_floats(static_cast<size_t>(T * K), rng);
    const Tensor x = Tensor::from_f32({T, K}, xv.data());
    for (int64_t rows : {int64_t{1}, T}) {
      Tensor a = Tensor::empty({rows, N}, DType::kF32), b = Tensor::empty({rows, N}, DType::kF32);
      ops::quantized_matmul(ctx, x.slice_rows(0, rows), q, Tensor(), a);
      ops::quantized_matmul(ctx, x.slice_rows(0, rows), lanes, Tensor(), b);
      // With VNNI both round x to int8 per block alike and sum the same integers in another
      // order. On AVX2 only the blocks take an integer kernel (lanes are never loaded there):
      // the blocks' x rounding is the whole difference.
      const bool one_rounds = cpu::active_isa() == Isa::kAvx2;
      const Tensor dense = dequantize(q);
      for (int64_t i = 0; i < rows * N; ++i) {
        const double rounding = one_rounds ? int8_rounding(xv.data(), dense.data<float>(), i / N, i % N, K, 256) : 0.0;
        ASSERT_NEAR(b.data<float>()[i], a.data<float>()[i], 1e-5f * (1.0f + testing::max_abs(a)) + rounding)
            << ggml_type_name(type) << " " << i;
      }
    }
    const int32_t ids_v[] = {36, 0, 5};
    Tensor e = Tensor::empty({3, K}, DType::kF32);
    ops::quantized_embedding(ctx, lanes, Tensor::from_i32({3}, ids_v), e);
    for (int i = 0; i < 3; ++i) {
      for (int64_t k = 0; k < K; ++k) ASSERT_EQ(e.data<float>()[i * K + k], want.data<float>()[ids_v[i] * K + k]);
    }
    EXPECT_THROW(ggml_to_lanes(lanes), InputError);
  }
  std::vector<uint8_t> q8 = random_blocks(GgmlType::kQ8_0, 2, 256, rng);
  Tensor q8_blocks = Tensor::empty({2, static_cast<int64_t>(q8.size() / 2)}, DType::kU8);
  std::memcpy(q8_blocks.raw(), q8.data(), q8.size());
  try {
    ggml_to_lanes(ggml_quantized(GgmlType::kQ8_0, 2, 256, q8_blocks));
    ADD_FAILURE() << "Q8_0 repacked into lanes";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("only Q6_K and Q4_K blocks repack into lanes, not Q8_0"), std::string::npos)
        << e.what();
  }
}

// Q4_0 and Q8_0 load as symmetric affine codes (what the affine kernels read): the same values
// bit for bit, the same bytes per weight, and matmuls within the int8 rounding of x.
TEST(GgmlMatmul, Q4_0AndQ8_0RepackToSymmetricAffineCodes) {
  std::mt19937_64 rng(11);
  ThreadPool pool(2);
  Context ctx{&pool, kCpu};
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    // 11 groups of 32: in panels (the CPU backend's layout on VNNI machines) the f16 scales of
    // two groups follow their codes, and the last group has no partner.
    const int64_t N = 37, K = 352, T = 5;
    std::vector<uint8_t> bytes = random_blocks(type, N, K, rng);
    Tensor blocks = Tensor::empty({N, static_cast<int64_t>(row_bytes(type, K))}, DType::kU8);
    std::memcpy(blocks.raw(), bytes.data(), bytes.size());
    const QuantizedMatrix g = ggml_quantized(type, N, K, blocks);
    const QuantizedMatrix a = ggml_to_affine(g);
    ASSERT_TRUE(a.symmetric());
    EXPECT_EQ(a.ggml_type, type);
    EXPECT_EQ(a.nbytes(), g.nbytes());
    const Tensor dense = dequantize(g), back = dequantize(a);
    ASSERT_EQ(testing::max_abs_diff(back, dense), 0.0f) << ggml_type_name(type);
    const std::vector<float> xv = random_floats(static_cast<size_t>(T * K), rng);
    for (int64_t rows : {int64_t{1}, T}) {
      const Tensor xs = Tensor::from_f32({rows, K}, xv.data());
      Tensor want = Tensor::empty({rows, N}, DType::kF32), got = Tensor::empty({rows, N}, DType::kF32);
      Tensor got_panels = Tensor::empty({rows, N}, DType::kF32);
      ops::matmul(ctx, xs, dense, Tensor(), want);
      ops::quantized_matmul(ctx, xs, a, Tensor(), got);
      ops::quantized_matmul(ctx, xs, affine_to_panels(a), Tensor(), got_panels);
      // x rounds to int8 per group of 32 (step max|x| / 127): each product moves by at most
      // |w + 2^(bits-1) d| * step / 2 (the offset term uses the exact sum of x).
      for (int64_t t = 0; t < rows; ++t) {
        for (int64_t n = 0; n < N; ++n) {
          double bound = 1e-5;
          for (int64_t c = 0; c < K; c += 32) {
            float amax = 0;
            for (int64_t k = c; k < c + 32; ++k) amax = std::max(amax, std::abs(xv[t * K + k]));
            const float d = f16_to_f32(a.scales.data<uint16_t>()[n * (K / 32) + c / 32]);
            const float offset = type == GgmlType::kQ4_0 ? 8.0f : 128.0f;
            for (int64_t k = c; k < c + 32; ++k)
              bound += std::abs(dense.data<float>()[n * K + k] + offset * d) * amax / 254;
          }
          ASSERT_NEAR(got.data<float>()[t * N + n], want.data<float>()[t * N + n], bound) << ggml_type_name(type);
          ASSERT_NEAR(got_panels.data<float>()[t * N + n], want.data<float>()[t * N + n], bound)
              << ggml_type_name(type) << " in panels";
        }
      }
    }
  }
}

TEST(GgmlMatmul, ChecksNameTheProblem) {
  ThreadPool pool(1);
  Context ctx{&pool, kCpu};
  auto expect_error = [](auto&& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error; expected '" << needle << "'";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([] { ggml_quantized(GgmlType::kQ5_K, 2, 256, Tensor::zeros({2, 176}, DType::kU8)); }, "Q5_K");
  expect_error([] { ggml_quantized(GgmlType::kQ8_0, 2, 64, Tensor::zeros({2, 64}, DType::kU8)); }, "u8[2, 68]");
  expect_error([] { ggml_quantized(GgmlType::kQ4_K, 2, 64, Tensor::zeros({2, 36}, DType::kU8)); }, "block size");
  const QuantizedMatrix q = ggml_quantized(GgmlType::kQ8_0, 2, 64, Tensor::zeros({2, 68}, DType::kU8));
  Tensor y = Tensor::empty({1, 2}, DType::kF32);
  expect_error(
      [&] {
        ops::quantized_matmul(ctx, Tensor::zeros({1, 32}, DType::kF32), q, Tensor(), y);
      },
      "expected x [T, 64]");
  QuantizedMatrix bad = q;
  bad.cols = 96;
  expect_error(
      [&] {
        ops::quantized_matmul(ctx, Tensor::zeros({1, 96}, DType::kF32), bad, Tensor(), y);
      },
      "expected Q8_0 [2, 96] blocks u8[2, 102]");
  const int32_t id = 2;
  Tensor out = Tensor::empty({1, 64}, DType::kF32);
  expect_error([&] { ops::quantized_embedding(ctx, q, Tensor::from_i32({1}, &id), out); }, "outside vocabulary");
}

// The kernels read GGUF tensors in place: a zero-copy view of each block type, decoded by the
// embedding kernel, equals the GGUF reader's own dequantization, and Q8_0 / Q4_0 rows made by
// the reference quantizers come back within the quantizers' error bound.
TEST(GgmlMatmul, DecodesGgufTensorsAsTheReaderDoes) {
  std::mt19937_64 rng(3);
  testing::TempDir tmp;
  const std::string path = tmp.file("blocks.gguf");
  const int64_t N = 5;
  std::vector<std::vector<uint8_t>> data;
  {
    GgufWriter w(path);
    for (GgmlType type : kTypes) {
      const int64_t K = 2 * ggml_type_info(type).block_size;
      data.push_back(random_blocks(type, N, K, rng));
      w.add_tensor(std::string(ggml_type_name(type)), type, Shape({N, K}));
    }
    for (size_t i = 0; i < data.size(); ++i)
      w.write_tensor_data(std::string(ggml_type_name(kTypes[i])), data[i].data(), data[i].size());
    w.finish();
  }
  auto file = GgufFile::open(path);
  ThreadPool pool(1);
  Context ctx{&pool, kCpu};
  std::vector<int32_t> all(N);
  for (int32_t i = 0; i < N; ++i) all[static_cast<size_t>(i)] = i;
  for (const GgufTensorInfo& t : file->tensors()) {
    const int64_t K = t.shape().dim(1);
    const QuantizedMatrix q = ggml_quantized(t.type, N, K, file->view(t));
    EXPECT_TRUE(q.packed.is_view_of_external()) << "zero-copy";
    Tensor rows = Tensor::empty({N, K}, DType::kF32);
    ops::quantized_embedding(ctx, q, Tensor::from_i32({N}, all.data()), rows);
    EXPECT_EQ(testing::max_abs_diff(rows, file->dequantize(t)), 0.0f) << t.name;
  }
  const int64_t K = 256;
  const std::vector<float> w = random_floats(static_cast<size_t>(K), rng);
  std::vector<BlockQ8_0> q8(K / 32);
  std::vector<BlockQ4_0> q4(K / 32);
  quantize_row_q8_0(w.data(), q8.data(), K);
  quantize_row_q4_0(w.data(), q4.data(), K);
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    const void* src = type == GgmlType::kQ8_0 ? static_cast<const void*>(q8.data()) : q4.data();
    Tensor blocks = Tensor::empty({1, static_cast<int64_t>(row_bytes(type, K))}, DType::kU8);
    std::memcpy(blocks.raw(), src, blocks.nbytes());
    Tensor row = Tensor::empty({1, K}, DType::kF32);
    const int32_t zero = 0;
    ops::quantized_embedding(ctx, ggml_quantized(type, 1, K, blocks), Tensor::from_i32({1}, &zero), row);
    for (int64_t b = 0; b < K / 32; ++b) {
      float amax = 0;
      for (int64_t j = 0; j < 32; ++j) amax = std::max(amax, std::abs(w[b * 32 + j]));
      // Half a step (Q4_0: a full step at the clamped end) plus the f16 rounding of d.
      const float step = type == GgmlType::kQ8_0 ? amax / 127 : amax / 8;
      const float bound = (type == GgmlType::kQ8_0 ? 0.5f : 1.0f) * step + 128 * step * 1e-3f;
      for (int64_t j = 0; j < 32; ++j)
        ASSERT_LE(std::abs(row.data<float>()[b * 32 + j] - w[b * 32 + j]), bound) << ggml_type_name(type);
    }
  }
}

}  // namespace
}  // namespace hearth
