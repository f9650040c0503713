// Every op of the CUDA backend against the CPU backend's scalar reference kernels, over random
// shapes including odd sizes; device memory round trips; ops refuse tensors on the wrong
// device. Skips when no CUDA device is present (CI builds these and runs them there).
// Tolerances are in docs/numerics.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/ggml_kernels.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/quant_kernels.h"
#include "backends/cuda/timeline.cuh"
#include "base/error.h"
#include "core/device_memory.h"
#include "core/ggml_blocks.h"
#include "core/ops.h"
#include "core/quant.h"
#include "gpu/gpu_test_util.h"
#include "runtime/decode_graphs.h"

namespace hearth {
namespace {

using cpu::Isa;
using namespace gpu_test;

// The timeline's report (host code: runs without a GPU) splits records into launches where the
// kernel changes or a block repeats, takes back a late block of the launch before, and gives
// each launch the time to the next one's release.
TEST(CudaTimeline, ReportSplitsRecordsIntoLaunches) {
  static const char a = 0, b = 0;  // two kernels' name addresses (not device memory: named by address)
  auto record = [](const char* kernel, uint32_t block, uint32_t blocks, uint64_t arrived, uint64_t released) {
    cuda::TimelineRecord r{arrived, released, kernel, block, blocks, 0, 0};
    r.check = cuda::timeline_check(r);
    return r;
  };
  const std::vector<cuda::TimelineRecord> records = {
      record(&a, 0, 2, 1000, 2000), record(&a, 1, 2, 1100, 2100),  // launch 0: a, 2 blocks
      record(&b, 0, 3, 2500, 5000), record(&b, 2, 3, 2600, 5100),  // launch 1: b, 3 blocks
      record(&a, 0, 2, 2700, 9000),                                // launch 2: a again
      record(&b, 1, 3, 2800, 5200),                                // a late block of launch 1
      record(&a, 1, 2, 2900, 9500),
  };
  const std::string path = (std::filesystem::path(testing::TempDir()) / "timeline.txt").string();
  cuda::timeline_report(records, path);
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') {
      if (line.rfind("# path by kernel", 0) == 0) break;
      continue;
    }
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (!w.empty() && w[0] != "#") rows.push_back(w);
  }
  // # kernel blocks recorded arrive release last path, times in us from the first release.
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0][2], "2");
  EXPECT_EQ(rows[1][2], "3");
  EXPECT_EQ(rows[1][3], "3");  // the late block came back to it
  EXPECT_EQ(rows[2][3], "2");
  EXPECT_EQ(rows[0][5], "0.00");
  EXPECT_EQ(rows[0][7], "3.00");  // 5000 - 2000 ns
  EXPECT_EQ(rows[1][6], "3.20");  // its last release, 5200
  EXPECT_EQ(rows[1][7], "4.00");  // 9000 - 5000
  std::filesystem::remove(path);
}

TEST(CudaMemory, RoundTripsZeroesAndReusesBlocks) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(1);
  for (int64_t n : {1, 3, 1000, 1 << 20, (1 << 20) + 7}) {
    const std::vector<float> v = random_floats(rng, size_t(n));
    const Tensor g = on_gpu({n}, v);
    EXPECT_EQ(g.device(), kGpu);
    EXPECT_EQ(to_host<float>(g), v) << n;
    EXPECT_EQ(to_host<float>(g.to_device(kGpu)), v) << "the same device: the same tensor";
    EXPECT_EQ(to_host<float>(Tensor::zeros({n}, DType::kF32, kGpu)), std::vector<float>(size_t(n), 0.0f));
  }
  // The allocator's accounting: a live 256 MiB tensor is in use; freed, it stays held (cached).
  DeviceMemory& memory = device_memory(DeviceType::kCuda);
  const DeviceMemoryInfo before = memory.info(kGpu);
  {
    const Tensor big = Tensor::empty({256 << 20}, DType::kU8, kGpu);
    const DeviceMemoryInfo during = memory.info(kGpu);
    EXPECT_GE(during.in_use_bytes, before.in_use_bytes + (size_t{256} << 20));
    EXPECT_GE(during.held_bytes, during.in_use_bytes);
    EXPECT_GT(during.total_bytes, during.free_bytes);
  }
  const DeviceMemoryInfo after = memory.info(kGpu);
  EXPECT_EQ(after.in_use_bytes, before.in_use_bytes);
  EXPECT_GE(after.held_bytes, before.held_bytes + (size_t{256} << 20));
  // Freed blocks come back for the next allocation of their size class, and keep no stale view.
  for (int i = 0; i < 100; ++i) {
    const std::vector<float> v(size_t(1000 + i), float(i));
    EXPECT_EQ(to_host<float>(on_gpu({int64_t(v.size())}, v)), v);
  }
}

TEST(CudaOps, RmsNormMatchesTheScalarReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(2);
  Context ctx = gpu_ctx();
  for (int64_t rows : {1, 3, 17}) {
    for (int64_t d : {1, 7, 64, 1000, 4096}) {
      const std::vector<float> x = random_floats(rng, size_t(rows * d), -3.0f, 3.0f), w = random_floats(rng, size_t(d));
      std::vector<float> want(x.size());
      cpu::rms_norm(Isa::kScalar, x.data(), w.data(), rows, d, 1e-6f, want.data());
      const Tensor gx = on_gpu({rows, d}, x), gw = on_gpu({d}, w);
      Tensor gy = Tensor::empty({rows, d}, DType::kF32, kGpu);
      ops::rms_norm(ctx, gx, gw, 1e-6f, gy);
      expect_close(to_host<float>(gy), want, 1e-6, 2e-6,
                   "rms_norm rows=" + std::to_string(rows) + " d=" + std::to_string(d));
      ops::rms_norm(ctx, gx, gw, 1e-6f, const_cast<Tensor&>(gx));  // in place
      expect_close(to_host<float>(gx), want, 1e-6, 2e-6, "rms_norm in place d=" + std::to_string(d));
    }
  }
}

TEST(CudaOps, RopeMatchesTheScalarReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  Context ctx = gpu_ctx();
  struct Case {
    int64_t T, H, Dh, half;
    float af;
  };
  for (const Case& c :
       {Case{1, 1, 2, 1, 1.0f}, Case{5, 4, 64, 32, 1.0f}, Case{7, 3, 128, 32, 1.0f}, Case{33, 2, 128, 64, 1.2f}}) {
    std::vector<float> x = random_floats(rng, size_t(c.T * c.H * c.Dh), -2.0f, 2.0f);
    std::vector<int32_t> pos(size_t(c.T));
    for (auto& p : pos) p = int32_t(rng() % 200000);
    std::vector<float> inv_freq(size_t(c.half));
    for (int64_t i = 0; i < c.half; ++i) inv_freq[size_t(i)] = std::pow(1e6f, -2.0f * float(i) / float(2 * c.half));
    Tensor gx = on_gpu({c.T, c.H, c.Dh}, x);
    ops::rope(ctx, gx, on_gpu_i32({c.T}, pos), on_gpu({c.half}, inv_freq), c.af);
    cpu::rope(Isa::kScalar, x.data(), c.T, c.H, c.Dh, pos.data(), inv_freq.data(), c.half, c.af);
    expect_close(to_host<float>(gx), x, 1e-6, 1e-6, "rope T=" + std::to_string(c.T) + " Dh=" + std::to_string(c.Dh));
  }
}

TEST(CudaOps, SiluMulAndAddMatchTheScalarReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(4);
  Context ctx = gpu_ctx();
  for (int64_t n : {1, 7, 255, 256, 257, 100000}) {
    const std::vector<float> g = random_floats(rng, size_t(n), -20.0f, 20.0f), u = random_floats(rng, size_t(n));
    std::vector<float> want(static_cast<size_t>(n));
    cpu::silu_mul(Isa::kScalar, g.data(), u.data(), n, want.data());
    Tensor gg = on_gpu({n}, g);
    const Tensor gu = on_gpu({n}, u);
    Tensor out = Tensor::empty({n}, DType::kF32, kGpu);
    ops::silu_mul(ctx, gg, gu, out);
    expect_close(to_host<float>(out), want, 1e-6, 1e-6, "silu_mul n=" + std::to_string(n));
    std::vector<float> sum = g;
    cpu::add(Isa::kScalar, sum.data(), u.data(), n);
    ops::add(ctx, gg, gu);
    EXPECT_EQ(to_host<float>(gg), sum) << "add n=" << n;  // one rounding, the same on both
  }
}

TEST(CudaOps, EmbeddingWidensRowsExactly) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(5);
  Context ctx = gpu_ctx();
  const int64_t V = 1000, D = 65;
  const std::vector<float> table = random_floats(rng, size_t(V * D));
  const std::vector<int32_t> ids = {0, 999, 5, 5, 123};
  for (DType type : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Tensor host = Tensor::from_f32({V, D}, table.data()).to(type);
    std::vector<float> want(ids.size() * size_t(D));
    for (size_t t = 0; t < ids.size(); ++t)
      cpu::convert_row(Isa::kScalar, static_cast<const uint8_t*>(host.raw()) + size_t(ids[t] * D) * dtype_size(type),
                       type, D, want.data() + t * size_t(D));
    Tensor out = Tensor::empty({int64_t(ids.size()), D}, DType::kF32, kGpu);
    ops::embedding(ctx, host.to_device(kGpu), on_gpu_i32({int64_t(ids.size())}, ids), out);
    EXPECT_EQ(to_host<float>(out), want) << dtype_name(type);
  }
  Tensor out = Tensor::empty({2, D}, DType::kF32, kGpu);
  // The kernel reports a bad id; the error surfaces at the next check, once, and names it.
  ops::embedding(ctx, on_gpu({V, D}, table), on_gpu_i32({2}, {3, 1000}), out);
  try {
    ops::check_errors(ctx);
    ADD_FAILURE() << "an id past the vocabulary was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("embedding: token id 1000 outside vocabulary of 1000"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(ops::check_errors(ctx));
}

TEST(CudaOps, SoftmaxAndArgmaxMatchTheScalarReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(6);
  Context ctx = gpu_ctx();
  for (int64_t V : {1, 5, 1000, 151936}) {
    const int64_t R = 3;
    std::vector<float> x = random_floats(rng, size_t(R * V), -10.0f, 10.0f);
    if (V > 5) x[size_t(V + 7)] = x[size_t(V + 3)] = 50.0f;  // a tie in row 1: the first wins
    std::vector<int32_t> want_ids(static_cast<size_t>(R));
    std::vector<float> want = x;
    for (int64_t r = 0; r < R; ++r) {
      want_ids[size_t(r)] = int32_t(cpu::argmax_row(Isa::kScalar, x.data() + r * V, V));
      cpu::softmax_row(Isa::kScalar, want.data() + r * V, V);
    }
    Tensor gx = on_gpu({R, V}, x);
    Tensor ids = Tensor::empty({R}, DType::kI32, kGpu);
    ops::argmax(ctx, gx, ids);
    EXPECT_EQ(to_host<int32_t>(ids), want_ids) << "V=" << V;
    ops::softmax(ctx, gx);
    expect_close(to_host<float>(gx), want, 1e-7, 1e-5, "softmax V=" + std::to_string(V));
  }
}

// The kernel's radix selections against the reference's full sort: the same ids exactly (the
// order and the integer weights are the same bits on both, core/sample_row.h).
TEST(CudaOps, SampleDrawsTheScalarReferencesTokens) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(16);
  Context ctx = gpu_ctx();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // 700000: the slices' keys outgrow shared memory and go through device memory.
  for (int64_t V : {1, 7, 1000, 128256, 151936, 700000}) {
    const std::vector<SampleRow> settings = {
        {},
        {.temperature = 0.7f, .top_p = 0.9f},
        {.temperature = 1.0f, .top_k = 40},
        {.temperature = 0.7f, .log_min_p = std::log(0.05f)},
        {.temperature = 1.3f, .top_k = 1},
        {.temperature = 1.0f, .top_p = 0.001f},
        {.temperature = 0.9f, .top_k = 50, .top_p = 0.8f, .log_min_p = std::log(0.01f)},
        {.temperature = 2.0f, .top_k = static_cast<int32_t>(std::max<int64_t>(1, V - 1)), .top_p = 0.99f},
        {.temperature = 1.0f},
    };
    const auto R = static_cast<int64_t>(settings.size());
    // Rows: N(0, 3^2); every third rounded to halves (ties); row 4 with NaN and -inf sprinkled.
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> logits(static_cast<size_t>(R * V));
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t i = 0; i < V; ++i) {
        float& l = logits[size_t(r * V + i)];
        l = normal(rng);
        if (r % 3 == 0) l = std::round(l * 2.0f) / 2.0f;
        if (r == 4 && i % 11 == 3) l = i % 2 ? nan : -inf;
      }
    }
    const Tensor gx = on_gpu({R, V}, logits);
    for (uint64_t u : {uint64_t{0}, uint64_t{0x5555555555555555}, uint64_t{0xc000000000000001}, ~uint64_t{0}}) {
      std::vector<SampleRow> rows = settings;
      std::vector<int32_t> want(static_cast<size_t>(R));
      for (int64_t r = 0; r < R; ++r) {
        rows[size_t(r)].u = u + static_cast<uint64_t>(r) * 0x0123456789abcdefull;
        want[size_t(r)] = cpu::sample_row(logits.data() + r * V, V, rows[size_t(r)]);
      }
      Tensor ids = Tensor::empty({R}, DType::kI32, kGpu);
      ops::sample(ctx, gx, sample_rows(rows).to_device(kGpu), ids);
      EXPECT_EQ(to_host<int32_t>(ids), want) << "V=" << V << " u=" << u;
    }
  }
}

// The logit processors' edits on the GPU: the CPU reference's bits exactly (explicit rounding, no
// fused multiply-subtract), NaN for NaN, on awkward values and edits in several rows; a bad
// edit is reported.
TEST(CudaOps, EditLogitsIsTheCpuReferenceBitForBit) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(17);
  Context ctx = gpu_ctx(), cpu_ctx{nullptr, kCpu};
  const int64_t R = 3, V = 151936;
  std::vector<float> logits = random_floats(rng, size_t(R * V), -20.0f, 20.0f);
  const float awkward[] = {-0.0f, 0.0f, NAN, -INFINITY, INFINITY, 1e-40f, -1e-40f, 3.0e38f, -3.0e38f};
  std::vector<LogitEdit> edits;
  for (int64_t r = 0; r < R; ++r) {
    for (int32_t j = 0; j < 400; ++j) {
      const int32_t id = j < 9 ? j : static_cast<int32_t>(rng() % static_cast<uint32_t>(V - 9)) + 9;
      if (j < 9) logits[size_t(r * V + id)] = awkward[j];
      if (std::any_of(edits.begin(), edits.end(), [&](const LogitEdit& e) { return e.row == r && e.id == id; }))
        continue;
      LogitEdit e{.row = static_cast<int32_t>(r), .id = id};
      if (j % 2) e.bias = static_cast<float>(int(rng() % 200) - 100) * 0.37f;
      if (j % 3) e.penalty = 1.0f + static_cast<float>(rng() % 100) * 0.013f;
      if (j % 5) e.sub = static_cast<float>(rng() % 1000) * 0.0071f - 2.0f;
      edits.push_back(e);
    }
  }
  Tensor host = Tensor::from_f32({R, V}, logits.data()), gx = on_gpu({R, V}, logits);
  ops::edit_logits(cpu_ctx, host, logit_edits(edits));
  ops::edit_logits(ctx, gx, logit_edits(edits).to_device(kGpu));
  const std::vector<float> got = to_host<float>(gx);
  for (size_t i = 0; i < got.size(); ++i) {
    const float want = host.data<float>()[i];
    if (std::isnan(want)) {  // the GPU's NaN is its canonical one, not the input's payload
      ASSERT_TRUE(std::isnan(got[i])) << "logit " << i;
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want)) << "logit " << i;
  }
  const LogitEdit bad{.row = 0, .id = static_cast<int32_t>(V)};
  ops::edit_logits(ctx, gx, logit_edits({&bad, 1}).to_device(kGpu));
  EXPECT_THROW(ops::check_errors(ctx), InputError);
  EXPECT_NO_THROW(ops::check_errors(ctx));
}

// Logprobs on the GPU: the CPU reference's ids exactly (the same keys), its logprobs within the
// rounding of the exps (CUDA's expf, 2 ulp) and of their sum's order.
TEST(CudaOps, LogprobsAreTheCpuReferences) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(18);
  Context ctx = gpu_ctx(), cpu_ctx{nullptr, kCpu};
  for (int64_t V : {1, 7, 1000, 151936, 300007}) {  // 300007: slices of several chunks of 1024
    const int64_t R = 4;
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> logits(size_t(R * V));
    for (int64_t i = 0; i < R * V; ++i) {
      float& l = logits[size_t(i)];
      l = normal(rng);
      if (i / V == 1) l = std::round(l * 2.0f) / 2.0f;  // ties
      if (i / V == 2 && i % 13 == 5) l = i % 2 ? NAN : -INFINITY;
    }
    std::vector<int32_t> chosen(static_cast<size_t>(R));
    for (int32_t& c : chosen) c = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
    for (int64_t n : {int64_t{0}, int64_t{1}, std::min<int64_t>(V, 20)}) {
      const Tensor x = Tensor::from_f32({R, V}, logits.data()), ids = Tensor::from_i32({R}, chosen.data());
      Tensor lp = Tensor::empty({R}, DType::kF32), ti = Tensor::empty({R, n}, DType::kI32),
             t = Tensor::empty({R, n}, DType::kF32);
      ops::logprobs(cpu_ctx, x, ids, lp, ti, t);
      Tensor glp = Tensor::empty({R}, DType::kF32, kGpu), gti = Tensor::empty({R, n}, DType::kI32, kGpu),
             gt = Tensor::empty({R, n}, DType::kF32, kGpu);
      ops::logprobs(ctx, x.to_device(kGpu), ids.to_device(kGpu), glp, gti, gt);
      const std::string where = "V=" + std::to_string(V) + " n=" + std::to_string(n);
      EXPECT_EQ(to_host<int32_t>(gti), std::vector<int32_t>(ti.data<int32_t>(), ti.data<int32_t>() + R * n)) << where;
      expect_close(to_host<float>(gt), std::vector<float>(t.data<float>(), t.data<float>() + R * n), 1e-5, 1e-6,
                   "top " + where);
      expect_close(to_host<float>(glp), std::vector<float>(lp.data<float>(), lp.data<float>() + R), 1e-5, 1e-6,
                   "chosen " + where);
    }
  }
}

TEST(CudaOps, KvWriteRoundsLikeTheCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  Context ctx = gpu_ctx();
  const int64_t blocks = 5, bs = 4, Hkv = 2, Dh = 24, T = 6, row = Hkv * Dh;
  std::vector<float> k = random_floats(rng, size_t(T * row), -70000.0f, 70000.0f),
                     v = random_floats(rng, size_t(T * row));
  k[0] = 1e-40f, k[1] = 65520.0f, k[2] = 1.0f + 1.0f / 2048;  // subnormal, overflow to inf, a tie
  const std::vector<int32_t> slots = {0, 19, 4, 5, 11, 2};
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    ops::KvLayer host{Tensor::zeros({blocks, bs, Hkv, Dh}, type), Tensor::zeros({blocks, bs, Hkv, Dh}, type)};
    const cpu::KvOrder order{bs, Hkv, Dh};
    cpu::KvWriteArgs a{k.data(), v.data(), T, slots.data(), blocks * bs, order, host.k.raw(), host.v.raw(), type};
    cpu::kv_write(Isa::kScalar, a);
    ops::KvLayer gpu{Tensor::zeros({blocks, bs, Hkv, Dh}, type, kGpu),
                     Tensor::zeros({blocks, bs, Hkv, Dh}, type, kGpu)};
    ops::kv_write(ctx, on_gpu({T, Hkv, Dh}, k), on_gpu({T, Hkv, Dh}, v), on_gpu_i32({T}, slots), gpu);
    // The GPU's cache is slot-major, the CPU's in its own order inside each block (KvOrder).
    for (auto [want, got, keys] : {std::tuple{&host.k, &gpu.k, true}, std::tuple{&host.v, &gpu.v, false}}) {
      const Tensor back = got->to_device(kCpu);
      Tensor reordered = Tensor::zeros(back.shape(), type);
      cpu::kv_to_cpu_order(back.raw(), reordered.raw(), dtype_size(type), blocks * bs, order, keys);
      EXPECT_EQ(std::memcmp(reordered.raw(), want->raw(), want->nbytes()), 0) << dtype_name(type);
    }
    ops::kv_write(ctx, on_gpu({1, Hkv, Dh}, std::vector<float>(size_t(row))),
                  on_gpu({1, Hkv, Dh}, std::vector<float>(size_t(row))), on_gpu_i32({1}, {20}), gpu);
    try {
      ops::check_errors(ctx);
      ADD_FAILURE() << "a slot past the pool was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("kv_write: slot 20 outside the pool of 20 slots"), std::string::npos)
          << e.what();
    }
    // Nothing was written: the cache still holds what the CPU wrote.
    const Tensor after = gpu.k.to_device(kCpu);
    Tensor after_reordered = Tensor::zeros(after.shape(), type);
    cpu::kv_to_cpu_order(after.raw(), after_reordered.raw(), dtype_size(type), blocks * bs, order, true);
    EXPECT_EQ(std::memcmp(after_reordered.raw(), host.k.raw(), host.k.nbytes()), 0);
  }
}

// The fused op gives exactly what rope, rope and kv_write give one after the other (full and
// partial rotary dims, GQA), and reports a bad slot as kv_write does.
TEST(CudaOps, RopeKvWriteEqualsTheOpsItFuses) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(14);
  Context ctx = gpu_ctx();
  const int64_t blocks = 5, bs = 4, Hq = 6, Hkv = 2, Dh = 24, T = 6;
  const std::vector<int32_t> slots = {0, 19, 4, 5, 11, 2}, pos = {0, 7, 300, 4095, 12, 1};
  const std::vector<float> q = random_floats(rng, size_t(T * Hq * Dh), -4.0f, 4.0f),
                           k = random_floats(rng, size_t(T * Hkv * Dh), -4.0f, 4.0f),
                           v = random_floats(rng, size_t(T * Hkv * Dh));
  for (int64_t half : {Dh / 2, Dh / 4}) {
    std::vector<float> inv_freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) inv_freq[size_t(i)] = std::pow(10000.0f, -float(i) / float(half));
    for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
      Tensor q1 = on_gpu({T, Hq, Dh}, q), k1 = on_gpu({T, Hkv, Dh}, k), q2 = on_gpu({T, Hq, Dh}, q),
             k2 = on_gpu({T, Hkv, Dh}, k);
      const Tensor vg = on_gpu({T, Hkv, Dh}, v), pg = on_gpu_i32({T}, pos), sg = on_gpu_i32({T}, slots),
                   fg = on_gpu({half}, inv_freq);
      ops::KvLayer apart{Tensor::zeros({blocks, bs, Hkv, Dh}, type, kGpu),
                         Tensor::zeros({blocks, bs, Hkv, Dh}, type, kGpu)};
      ops::KvLayer fused{Tensor::zeros({blocks, bs, Hkv, Dh}, type, kGpu),
                         Tensor::zeros({blocks, bs, Hkv, Dh}, type, kGpu)};
      ops::rope(ctx, q1, pg, fg, 1.25f);
      ops::rope(ctx, k1, pg, fg, 1.25f);
      ops::kv_write(ctx, k1, vg, sg, apart);
      ops::rope_kv_write(ctx, q2, k2, vg, pg, fg, 1.25f, sg, fused);
      const std::string what = std::string(dtype_name(type)) + " half=" + std::to_string(half);
      EXPECT_EQ(to_host<float>(q2), to_host<float>(q1)) << what;
      EXPECT_EQ(to_host<float>(k2), to_host<float>(k1)) << what;
      for (auto [want, got] : {std::pair{&apart.k, &fused.k}, std::pair{&apart.v, &fused.v}}) {
        const Tensor a = want->to_device(kCpu), b = got->to_device(kCpu);
        EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << what;
      }
    }
  }
  ops::KvLayer cache{Tensor::zeros({blocks, bs, Hkv, Dh}, DType::kF16, kGpu),
                     Tensor::zeros({blocks, bs, Hkv, Dh}, DType::kF16, kGpu)};
  Tensor q1 = on_gpu({1, Hq, Dh}, std::vector<float>(size_t(Hq * Dh))),
         k1 = on_gpu({1, Hkv, Dh}, std::vector<float>(size_t(Hkv * Dh)));
  ops::rope_kv_write(ctx, q1, k1, on_gpu({1, Hkv, Dh}, std::vector<float>(size_t(Hkv * Dh))), on_gpu_i32({1}, {3}),
                     on_gpu({Dh / 2}, std::vector<float>(size_t(Dh / 2), 1.0f)), 1.0f, on_gpu_i32({1}, {-1}), cache);
  try {
    ops::check_errors(ctx);
    ADD_FAILURE() << "a negative slot was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kv_write: slot -1 outside the pool of 20 slots"), std::string::npos)
        << e.what();
  }
}

// Decode sizes (T <= 8) take the matvec kernel, larger ones cuBLAS; 16-bit weights with T > 8
// round x to their type: |dy| <= (eps_x + 1e-6) sum_k |x_k w_k| + 1e-5 (1 + |y|), eps_x = 2^-8
// (bf16), 2^-11 (f16), 0 otherwise; 1e-6 covers f32 sums taken in another order.
TEST(CudaOps, MatmulMatchesTheScalarReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(8);
  Context ctx = gpu_ctx();
  for (DType type : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t T : {1, 3, 5, 6, 7, 8, 9, 33}) {
      // K = 2056: rows of several 16-byte rounds and a partial last one (bf16: 128 + 128 + 1 loads).
      for (auto [K, N] : {std::pair<int64_t, int64_t>{64, 1}, {100, 17}, {1000, 300}, {2056, 40}}) {
        const std::vector<float> x = random_floats(rng, size_t(T * K)), wf = random_floats(rng, size_t(N * K)),
                                 bias = random_floats(rng, size_t(N));
        const Tensor w = Tensor::from_f32({N, K}, wf.data()).to(type);
        std::vector<float> want(size_t(T * N)), abs_dot(size_t(T * N));
        cpu::matmul(Isa::kScalar, nullptr, x.data(), T, K, w.raw(), type, N, bias.data(), want.data());
        for (int64_t t = 0; t < T; ++t)
          for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < K; ++k)
              abs_dot[size_t(t * N + n)] += std::abs(x[size_t(t * K + k)] * element_as_f32(w, n * K + k));
        Tensor y = Tensor::empty({T, N}, DType::kF32, kGpu);
        ops::matmul(ctx, on_gpu({T, K}, x), w.to_device(kGpu), on_gpu({N}, bias), y);
        const std::vector<float> got = to_host<float>(y);
        const double eps_x = T <= 8 || type == DType::kF32 ? 0.0 : type == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048;
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_LE(std::abs(got[i] - want[i]), (eps_x + 1e-6) * abs_dot[i] + 1e-5 * (1 + std::abs(want[i])))
              << dtype_name(type) << " T=" << T << " K=" << K << " N=" << N << " element " << i;
        }
      }
    }
  }
}

// Several matrices of one x in one launch (decode rows) or one by one (more rows): each part
// exactly as its own matmul, with and without a bias, sizes that split the launch's warps
// unevenly; a part that accumulates adds it to y's old values.
TEST(CudaOps, MatmulGroupGivesEachPartItsOwnMatmul) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(12);
  Context ctx = gpu_ctx();
  const int64_t K = 512;
  const std::vector<int64_t> sizes = {300, 7, 64};
  for (DType type : {DType::kF32, DType::kBF16}) {
    for (int64_t T : {1, 4, 8, 9}) {
      const Tensor x = on_gpu({T, K}, random_floats(rng, size_t(T * K)));
      std::vector<Tensor> w, bias, y, alone;
      for (size_t i = 0; i < sizes.size(); ++i) {
        const std::vector<float> values = random_floats(rng, size_t(sizes[i] * K));
        w.push_back(Tensor::from_f32({sizes[i], K}, values.data()).to(type).to_device(kGpu));
        bias.push_back(i == 1 ? Tensor() : on_gpu({sizes[i]}, random_floats(rng, size_t(sizes[i]))));
        y.push_back(Tensor::empty({T, sizes[i]}, DType::kF32, kGpu));
        alone.push_back(Tensor::empty({T, sizes[i]}, DType::kF32, kGpu));
        ops::matmul(ctx, x, w[i], bias[i], alone[i]);
      }
      // Part 2 accumulates: y = y0 + (x . w^T + bias).
      const std::vector<float> y0 = random_floats(rng, size_t(T * sizes[2]));
      y[2] = on_gpu({T, sizes[2]}, y0);
      const std::vector<ops::MatmulPart> parts = {
          {&w[0], &bias[0], &y[0]}, {&w[1], &bias[1], &y[1]}, {&w[2], &bias[2], &y[2], nullptr, true}};
      ops::matmul_group(ctx, x, parts);
      for (size_t i = 0; i < sizes.size(); ++i) {
        std::vector<float> want = to_host<float>(alone[i]);
        if (i == 2)
          for (size_t e = 0; e < want.size(); ++e) want[e] = y0[e] + want[e];
        EXPECT_EQ(to_host<float>(y[i]), want) << dtype_name(type) << " T=" << T << " part " << i;
      }
    }
  }
}

// ops::norm_matmul_group over dense matrices: a decode row takes the norm inside the matvec,
// bit-identical to rms_norm then matmul_group; other row counts run those two. The q+k+v shape
// (6144 rows of 4096) is the launch that runs on the register-capped kernel on an H200 (more warps
// than the plain kernel holds at once, no more than the capped one does): it is also checked
// against the scalar reference.
TEST(CudaOps, MatmulGroupTakesTheNormAsRmsNormThenTheMatmul) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(21);
  Context ctx = gpu_ctx();
  struct Case {
    int64_t K;
    std::vector<int64_t> sizes;
  };
  for (const Case& c : {Case{512, {300, 7, 64}}, Case{1000, {33}}, Case{4096, {4096, 1024, 1024}}}) {
    for (DType type : {DType::kF32, DType::kBF16, DType::kF16}) {
      if (c.K == 4096 && type != DType::kBF16) continue;
      for (int64_t T : {1, 2}) {
        const std::vector<float> xf = random_floats(rng, size_t(T * c.K), -3.0f, 3.0f),
                                 norm_f = random_floats(rng, size_t(c.K));
        const Tensor x = on_gpu({T, c.K}, xf), norm_w = on_gpu({c.K}, norm_f);
        std::vector<Tensor> w, bias;
        for (size_t i = 0; i < c.sizes.size(); ++i) {
          const std::vector<float> values = random_floats(rng, size_t(c.sizes[i] * c.K));
          w.push_back(Tensor::from_f32({c.sizes[i], c.K}, values.data()).to(type).to_device(kGpu));
          bias.push_back(i == 1 ? Tensor() : on_gpu({c.sizes[i]}, random_floats(rng, size_t(c.sizes[i]))));
        }
        // The last part accumulates into y0.
        const size_t last = c.sizes.size() - 1;
        const std::vector<float> y0 = random_floats(rng, size_t(T * c.sizes[last]));
        auto outputs = [&] {
          std::vector<Tensor> y;
          for (size_t i = 0; i < last; ++i) y.push_back(Tensor::empty({T, c.sizes[i]}, DType::kF32, kGpu));
          y.push_back(on_gpu({T, c.sizes[last]}, y0));
          return y;
        };
        auto parts_of = [&](std::vector<Tensor>& y) {
          std::vector<ops::MatmulPart> parts;
          for (size_t i = 0; i < c.sizes.size(); ++i) parts.push_back({&w[i], &bias[i], &y[i], nullptr, i == last});
          return parts;
        };
        std::vector<Tensor> fused = outputs(), apart = outputs();
        ops::norm_matmul_group(ctx, x, norm_w, 1e-5f, parts_of(fused));
        Tensor normed = Tensor::empty({T, c.K}, DType::kF32, kGpu);
        ops::rms_norm(ctx, x, norm_w, 1e-5f, normed);
        ops::matmul_group(ctx, normed, parts_of(apart));
        const std::string what =
            std::string(dtype_name(type)) + " K=" + std::to_string(c.K) + " T=" + std::to_string(T);
        for (size_t i = 0; i < c.sizes.size(); ++i)
          EXPECT_EQ(to_host<float>(fused[i]), to_host<float>(apart[i])) << what << ", part " << i;
        if (c.K != 4096) continue;
        const std::vector<float> xn = to_host<float>(normed);
        for (size_t i = 0; i < c.sizes.size(); ++i) {
          const int64_t N = c.sizes[i];
          const Tensor wh = w[i].to_device(kCpu);
          const std::vector<float> b =
              bias[i].defined() ? to_host<float>(bias[i]) : std::vector<float>(size_t(N), 0.0f);
          std::vector<float> want(size_t(T * N));
          cpu::matmul(Isa::kScalar, nullptr, xn.data(), T, c.K, wh.raw(), type, N, b.data(), want.data());
          const std::vector<float> got = to_host<float>(fused[i]);
          for (size_t e = 0; e < got.size(); ++e) {
            const float ref = i == last ? y0[e] + want[e] : want[e];
            ASSERT_NEAR(got[e], ref, 1e-4f * (1.0f + std::abs(ref))) << what << ", part " << i << " element " << e;
          }
        }
      }
    }
  }
}

// Paged attention over a shuffled block table with NaN in every unused slot, prefill and
// decode rows of several sequences, GQA groups of 4, 1, 3 and 12 query heads per KV head,
// windows, and each cache type; then batches of decode rows only (the split kernels, contexts
// from 1 to 1001 positions; then 9001, all 64 splits, and 130, two splits of which one has a
// single key). The first batch has 44 rows: prefill kernels (tensor cores for 16-bit caches and
// head dims 64 and 128, tiles on CUDA cores otherwise); the third 131, so that sequences span
// the tensor-core kernel's tiles of 64 rows.
TEST(CudaOps, AttentionMatchesTheScalarReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(9);
  Context ctx = gpu_ctx();
  const int64_t block_size = 16;
  const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> cases = {
      {{1, 37, 1, 5}, {300, 0, 17, 64}},
      {{1, 1, 1, 1, 1}, {300, 0, 17, 1000, 63}},
      {{1, 1}, {9000, 129}},
      {{70, 1, 60}, {0, 100, 30}}};
  for (const auto& [q_lens, ctx_lens] : cases)
    for (const auto [Hq, Hkv, Dh] : std::vector<std::array<int64_t, 3>>{
             {8, 2, 64}, {8, 2, 128}, {8, 2, 80}, {4, 4, 128}, {6, 2, 64}, {12, 1, 128}}) {
      for (int32_t window : {0, 100}) {
        for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
          const int64_t S = int64_t(q_lens.size());
          std::vector<int32_t> starts = {0};
          int64_t max_blocks = 0, total_blocks = 2;
          for (int64_t s = 0; s < S; ++s) {
            starts.push_back(starts.back() + q_lens[size_t(s)]);
            max_blocks = std::max(max_blocks, (ctx_lens[size_t(s)] + q_lens[size_t(s)] + block_size - 1) / block_size);
          }
          total_blocks += S * max_blocks;
          std::vector<int32_t> perm(static_cast<size_t>(total_blocks));
          for (size_t i = 0; i < perm.size(); ++i) perm[i] = int32_t(i);
          std::shuffle(perm.begin(), perm.end(), rng);
          std::vector<int32_t> tables(size_t(S * max_blocks));
          for (size_t i = 0; i < tables.size(); ++i) tables[i] = perm[i];
          const int64_t T = starts.back(), n_slots = total_blocks * block_size;
          // Every slot random, then the slots no sequence owns set to NaN.
          std::vector<float> k = random_floats(rng, size_t(n_slots * Hkv * Dh)), v = random_floats(rng, k.size());
          std::vector<bool> owned(size_t(n_slots), false);
          for (int64_t s = 0; s < S; ++s)
            for (int64_t j = 0; j < ctx_lens[size_t(s)] + q_lens[size_t(s)]; ++j)
              owned[size_t(tables[size_t(s * max_blocks + j / block_size)] * block_size + j % block_size)] = true;
          for (int64_t slot = 0; slot < n_slots; ++slot)
            if (!owned[size_t(slot)])
              for (int64_t e = 0; e < Hkv * Dh; ++e)
                k[size_t(slot * Hkv * Dh + e)] = v[size_t(slot * Hkv * Dh + e)] =
                    std::numeric_limits<float>::quiet_NaN();
          const Tensor kc = Tensor::from_f32({total_blocks, block_size, Hkv, Dh}, k.data()).to(type);
          const Tensor vc = Tensor::from_f32({total_blocks, block_size, Hkv, Dh}, v.data()).to(type);
          // q rounded to the cache's type: the tensor-core kernel rounds it so (both sides see it).
          std::vector<float> q = random_floats(rng, size_t(T * Hq * Dh), -2.0f, 2.0f);
          q = to_host<float>(Tensor::from_f32({T * Hq * Dh}, q.data()).to(type).to(DType::kF32));
          const float scale = 1.0f / std::sqrt(float(Dh));
          std::vector<float> want(q.size());
          cpu::AttentionArgs a{};
          a.q = q.data();
          a.out = want.data();
          a.T = T, a.Hq = Hq, a.Hkv = Hkv, a.Dh = Dh;
          // The CPU reads its own order inside each block (KvOrder); the GPU the slot-major one.
          Tensor kc_cpu = Tensor::zeros(kc.shape(), type), vc_cpu = Tensor::zeros(vc.shape(), type);
          const cpu::KvOrder order{block_size, Hkv, Dh};
          cpu::kv_to_cpu_order(kc.raw(), kc_cpu.raw(), dtype_size(type), total_blocks * block_size, order, true);
          cpu::kv_to_cpu_order(vc.raw(), vc_cpu.raw(), dtype_size(type), total_blocks * block_size, order, false);
          a.k_cache = kc_cpu.raw(), a.v_cache = vc_cpu.raw(), a.kv_dtype = type;
          a.block_size = block_size;
          a.seq_starts = starts.data(), a.context_lens = ctx_lens.data(), a.block_tables = tables.data();
          a.n_seqs = S, a.max_blocks = max_blocks, a.scale = scale, a.window = window;
          cpu::attention(Isa::kScalar, nullptr, a);
          const ops::KvLayer cache{kc.to_device(kGpu), vc.to_device(kGpu)};
          const ops::AttentionBatch batch{on_gpu_i32({S + 1}, starts), on_gpu_i32({S}, ctx_lens),
                                          on_gpu_i32({S, max_blocks}, tables)};
          Tensor out = Tensor::empty({T, Hq, Dh}, DType::kF32, kGpu);
          ops::attention(ctx, on_gpu({T, Hq, Dh}, q), cache, batch, scale, window, out);
          // Prefill rows on tensor cores (16-bit cache, head dim 64 or 128): P rounded to the
          // cache's type, |dy| <= 2 eps max|v| more (v in [-1, 1]).
          const bool mma = T > 8 && type != DType::kF32 && (Dh == 64 || Dh == 128);
          const double eps = type == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048;
          expect_close(to_host<float>(out), want, 1e-5 + (mma ? 2 * eps : 0.0), 1e-4,
                       std::string("attention ") + std::string(dtype_name(type)) + " T=" + std::to_string(T) +
                           " Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) + " Dh=" + std::to_string(Dh) +
                           " window=" + std::to_string(window));
        }
      }
    }
}

TEST(CudaOps, RefuseTensorsOfAnotherDevice) {
  SKIP_WITHOUT_GPU();
  Context ctx = gpu_ctx();
  Tensor a = Tensor::zeros({4}, DType::kF32, kGpu);
  const Tensor b = Tensor::zeros({4}, DType::kF32);  // on the CPU
  try {
    ops::add(ctx, a, b);
    ADD_FAILURE() << "a CPU tensor reached a CUDA kernel";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("add: f32[4] is on cpu, the op runs on cuda:0"), std::string::npos)
        << e.what();
  }
  Context cpu_ctx{nullptr, kCpu};
  EXPECT_THROW(ops::add(cpu_ctx, a, a), InputError);
  // Ops with no CUDA kernel yet say so by name.
  const int64_t cols = 256;
  QuantizedMatrix q = ggml_quantized(GgmlType::kQ8_0, 4, cols,
                                     Tensor::zeros({4, int64_t(row_bytes(GgmlType::kQ8_0, cols))}, DType::kU8));
  q.packed = q.packed.to_device(kGpu);
  Tensor y = Tensor::zeros({1, 4}, DType::kF32, kGpu);
  try {
    ops::quantized_matmul(ctx, Tensor::zeros({1, cols}, DType::kF32, kGpu), q, Tensor(), y);
    ADD_FAILURE() << "quantized_matmul ran";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("quantized_matmul of Q8_0 blocks has no CUDA implementation"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Tensor::zeros({4}, DType::kF32, Device{DeviceType::kCuda, 99}), Unsupported);
}

}  // namespace
}  // namespace hearth
