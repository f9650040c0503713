// Times the ops of one decode step on a GPU, each alone, as the decode graph runs them: R calls
// of an op recorded as one device graph, replayed, the wall time per call taken between
// synchronizations; and the token draw (ops::sample) for a few sampling settings. Matrices rotate over copies that together exceed the GPU's L2, so each call
// reads its weights from memory, as decode does. Shapes of a Llama-3-8B layer by default.
// Usage: cuda_ops_bench [--rows T] [--context C] [--device N] [--prefill (the prefill GEMMs only)]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/device_memory.h"
#include "core/dtype.h"
#include "core/ggml_blocks.h"
#include "core/ops.h"
#include "core/quant.h"

namespace hearth {
namespace {

constexpr int kCalls = 64;  // per recorded graph
constexpr int kReplays = 7;

Tensor filled(const Shape& shape, DType dtype, Device device, float value) {
  Tensor host = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = value * static_cast<float>((i * 7919) % 97) / 97.0f;
  return host.to(dtype).to_device(device);
}

// Microseconds per call of op(i), i = 0..kCalls-1: the median over replays of one recorded graph.
double time_op(Context& ctx, const std::function<void(int)>& op) {
  auto graph = ops::record_graph(ctx, [&] {
    for (int i = 0; i < kCalls; ++i) op(i);
  });
  if (!graph) {
    std::fprintf(stderr, "cuda_ops_bench: the device records no graphs\n");
    std::exit(1);
  }
  std::vector<double> us;
  for (int r = 0; r < kReplays + 1; ++r) {
    ops::check_errors(ctx);  // waits for the device
    const auto start = std::chrono::steady_clock::now();
    graph->replay();
    ops::check_errors(ctx);
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    if (r > 0) us.push_back(took.count() / kCalls);  // the first replay uploads the graph
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// Microseconds per call of a host-synchronous op (a copy to the host cannot be recorded in a
// graph): the median over kReplays runs of kCalls calls.
double time_host(Context& ctx, const std::function<void()>& op) {
  std::vector<double> us;
  for (int r = 0; r < kReplays + 1; ++r) {
    ops::check_errors(ctx);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) op();
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    if (r > 0) us.push_back(took.count() / kCalls);  // the first run warms the pinned buffers
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// A host matrix of GGUF k-quant blocks (Q4_K or Q6_K): pseudo-random bytes with small f16
// block scales.
QuantizedMatrix k_quant_matrix(GgmlType type, int64_t N, int64_t K) {
  const int64_t bytes = static_cast<int64_t>(row_bytes(type, K));
  const int64_t block_bytes = type == GgmlType::kQ4_K ? 144 : 210, scales_at = type == GgmlType::kQ4_K ? 0 : 208;
  Tensor blocks = Tensor::empty({N, bytes}, DType::kU8);
  uint8_t* b = blocks.data<uint8_t>();
  for (int64_t i = 0; i < blocks.numel(); ++i) b[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  for (int64_t at = 0; at < blocks.numel(); at += block_bytes) {
    const uint16_t d = f32_to_f16(0.01f), dmin = f32_to_f16(0.02f);
    std::memcpy(b + at + scales_at, &d, 2);
    if (type == GgmlType::kQ4_K) std::memcpy(b + at + 2, &dmin, 2);
  }
  return ggml_quantized(type, N, K, blocks);
}

// Prefill's matmuls, Llama-3-8B's gate/up shape: cuBLAS bf16 GEMM (x rounded to bf16 first,
// as ops::matmul does for 2048 rows), the rate pp2048 is measured against; and the quantized
// ones (MLX affine, groups of 64, bf16 scales): on tensor cores with the weights dequantized in
// registers, or with HEARTH_CUDA_QUANT_GEMM=0 through a dequantized copy and cuBLAS. The
// smaller row counts are batched decode steps of more than 8 sequences.
void time_prefill_gemms(Context& ctx, Device gpu) {
  const int64_t D = 4096, F = 14336;
  {
    const int64_t P = 2048;
    const Tensor xp = filled({P, D}, DType::kF32, gpu, 1.0f), w = filled({F, D}, DType::kBF16, gpu, 0.02f);
    Tensor yp = Tensor::empty({P, F}, DType::kF32, gpu);
    const double us = time_op(ctx, [&](int) { ops::matmul(ctx, xp, w, {}, yp); });
    std::printf("%-34s %9.2f us  %7.1f TFLOP/s\n", "gemm bf16 [2048, 4096] x [14336, 4096]", us,
                2.0 * P * D * F / us / 1e6);
  }
  auto time_gemm = [&](const std::string& format, const QuantizedMatrix& w, int64_t P) {
    const Tensor xp = filled({P, D}, DType::kF32, gpu, 1.0f);
    Tensor yp = Tensor::empty({P, F}, DType::kF32, gpu);
    const double us = time_op(ctx, [&](int) { ops::quantized_matmul(ctx, xp, w, {}, yp); });
    const std::string name = "gemm " + format + " [" + std::to_string(P) + ", 4096] x [14336, 4096]";
    std::printf("%-34s %9.2f us  %7.1f TFLOP/s\n", name.c_str(), us, 2.0 * P * D * F / us / 1e6);
  };
  // GGUF Q4_K: the dequantized copy and cuBLAS.
  const QuantizedMatrix q4_k = backend_for(gpu).prepare(k_quant_matrix(GgmlType::kQ4_K, F, D), gpu);
  for (int64_t P : {16, 512}) time_gemm("q4_k", q4_k, P);
  for (int bits : {4, 8}) {
    const QuantizedMatrix w = backend_for(gpu).prepare(
        affine_quantize(filled({F, D}, DType::kBF16, kCpu, 0.02f), {bits, 64}, DType::kBF16), gpu);
    for (int64_t P : {16, 64, 128, 512, 2048}) time_gemm(bits == 4 ? "q4" : "q8", w, P);
  }
}

}  // namespace
}  // namespace hearth

int main(int argc, char** argv) {
  using namespace hearth;
  int64_t T = 1, context = 512;
  int device_index = 0;
  bool prefill_only = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--prefill") {
      prefill_only = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "cuda_ops_bench: %s needs a value\n", a.c_str());
      return 2;
    }
    if (a == "--rows") {
      T = std::atoll(argv[i + 1]);
    } else if (a == "--context") {
      context = std::atoll(argv[i + 1]);
    } else if (a == "--device") {
      device_index = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: cuda_ops_bench [--rows T] [--context C] [--device N] [--prefill]\n");
      return 2;
    }
  }
  if (device_count(DeviceType::kCuda) == 0) {
    std::fprintf(stderr, "cuda_ops_bench: no CUDA device\n");
    return 1;
  }
  const Device gpu{DeviceType::kCuda, device_index};
  Context ctx{nullptr, gpu};
  if (prefill_only) {
    time_prefill_gemms(ctx, gpu);
    return 0;
  }
  const int64_t D = 4096, F = 14336, Hq = 32, Hkv = 8, Dh = 128, V = 128256, block = 16;
  std::printf("Llama-3-8B layer ops on %s, T=%lld rows, context %lld; us per call (%d calls per graph)\n",
              gpu.str().c_str(), static_cast<long long>(T), static_cast<long long>(context), kCalls);

  // One decode step's estimate per weight format: 32 layers of the per-layer ops + the head.
  const char* formats[] = {"bf16", "q4", "q8"};
  double matmul_us[3] = {0, 0, 0}, step_us = 0;
  // Adds the op's share of a step to *sum; ops timed only for comparison pass none.
  auto report = [&](const std::string& name, double us, double bytes, int per_step, double* sum = nullptr) {
    if (sum != nullptr) *sum += us * per_step;
    if (bytes > 0) {
      std::printf("%-34s %9.2f us  %7.0f GB/s\n", name.c_str(), us, bytes / us / 1e3);
    } else {
      std::printf("%-34s %9.2f us\n", name.c_str(), us);
    }
  };

  const Tensor x = filled({T, F}, DType::kF32, gpu, 1.0f);
  // Matrices: enough copies that the rotation exceeds 50 MB of L2 several times. A group is
  // several matrices of one x in one launch (ops::matmul_group), as q/k/v and gate/up run.
  // Formats: bf16; MLX affine 4 and 8 bits, groups of 64, bf16 scales and biases
  // (mlx-community's quantized models).
  struct Mat {
    const char* name;
    std::vector<int64_t> N;
    int64_t K;
    int per_step;
  };
  const std::vector<Mat> mats = {
      {"matvec q/o [4096, 4096]", {D}, D, 32},
      {"matvec k/v [1024, 4096]", {Hkv * Dh}, D, 0},
      {"matvec q+k+v group", {D, Hkv * Dh, Hkv * Dh}, D, 32},
      {"matvec gate/up [14336, 4096]", {F}, D, 0},
      {"matvec gate+up group", {F, F}, D, 32},
      {"matvec down [4096, 14336]", {D}, F, 32},
      {"matvec lm_head [128256, 4096]", {V}, D, 1},
  };
  for (int f = 0; f < 3; ++f) {
    for (const Mat& m : mats) {
      // The matrix of each size once on the host, then `copies` device copies of it.
      std::vector<Tensor> dense;
      std::vector<QuantizedMatrix> quant;
      double bytes = 0;
      for (int64_t N : m.N) {
        const Tensor host = filled({N, m.K}, DType::kBF16, kCpu, 0.02f);
        if (f == 0) {
          dense.push_back(host);
          bytes += static_cast<double>(host.nbytes());
        } else {
          quant.push_back(affine_quantize(host, {f == 1 ? 4 : 8, 64}, DType::kBF16));
          bytes += static_cast<double>(quant.back().nbytes());
        }
      }
      const int copies = std::max(1, std::min(kCalls, static_cast<int>(400e6 / bytes)));
      std::vector<std::vector<Tensor>> dw(static_cast<size_t>(copies));
      std::vector<std::vector<QuantizedMatrix>> qw(static_cast<size_t>(copies));
      for (int c = 0; c < copies; ++c) {
        for (const Tensor& t : dense) dw[static_cast<size_t>(c)].push_back(t.to_device(gpu));
        for (const QuantizedMatrix& q : quant) qw[static_cast<size_t>(c)].push_back(backend_for(gpu).prepare(q, gpu));
      }
      std::vector<Tensor> ys;
      for (int64_t N : m.N) ys.push_back(Tensor::empty({T, N}, DType::kF32, gpu));
      const Tensor xin = x.reshape({T * F}).slice_rows(0, T * m.K).reshape({T, m.K});
      const Tensor none;
      report(std::string(formats[f]) + " " + m.name, time_op(ctx, [&](int i) {
               const size_t c = static_cast<size_t>(i % copies);
               std::vector<ops::MatmulPart> parts;
               for (size_t j = 0; j < m.N.size(); ++j) {
                 if (f == 0) {
                   parts.push_back({&dw[c][j], &none, &ys[j]});
                 } else {
                   parts.push_back({nullptr, &none, &ys[j], &qw[c][j]});
                 }
               }
               ops::matmul_group(ctx, xin, parts);
             }),
             bytes, m.per_step, &matmul_us[f]);
    }
  }

  // GGUF k-quants as llama.cpp's Q4_K_M stores them (Q4_K layers; Q6_K for some down projections
  // and the LM head), random blocks with small f16 scales.
  struct KQuantMat {
    GgmlType type;
    Mat m;
  };
  for (const KQuantMat& k : {KQuantMat{GgmlType::kQ4_K, {"q4_k matvec q/o [4096, 4096]", {D}, D, 0}},
                             KQuantMat{GgmlType::kQ4_K, {"q4_k matvec gate/up [14336, 4096]", {F}, D, 0}},
                             KQuantMat{GgmlType::kQ4_K, {"q4_k matvec down [4096, 14336]", {D}, F, 0}},
                             KQuantMat{GgmlType::kQ6_K, {"q6_k matvec down [4096, 14336]", {D}, F, 0}},
                             KQuantMat{GgmlType::kQ6_K, {"q6_k matvec lm_head [128256, 4096]", {V}, D, 0}}}) {
    const Mat& m = k.m;
    const int64_t N = m.N[0];
    const QuantizedMatrix host = k_quant_matrix(k.type, N, m.K);
    const int copies = std::max(1, std::min(kCalls, static_cast<int>(400e6 / static_cast<double>(host.nbytes()))));
    std::vector<QuantizedMatrix> w;
    for (int c = 0; c < copies; ++c) w.push_back(backend_for(gpu).prepare(host, gpu));
    const Tensor xin = x.reshape({T * F}).slice_rows(0, T * m.K).reshape({T, m.K});
    Tensor y = Tensor::empty({T, N}, DType::kF32, gpu);
    report(m.name, time_op(ctx, [&](int i) { ops::quantized_matmul(ctx, xin, w[static_cast<size_t>(i % copies)], {}, y); }),
           static_cast<double>(host.nbytes()), 0);
  }

  time_prefill_gemms(ctx, gpu);

  Tensor h = filled({T, D}, DType::kF32, gpu, 1.0f);
  const Tensor norm_w = filled({D}, DType::kF32, gpu, 1.0f);
  Tensor normed = Tensor::empty({T, D}, DType::kF32, gpu);
  report("rms_norm [T, 4096]", time_op(ctx, [&](int) { ops::rms_norm(ctx, h, norm_w, 1e-5f, normed); }), 0, 65, &step_us);
  // Timed for comparison, not part of a step: the residual adds are in the matvecs' stores, rope
  // and kv_write one fused op.
  report("add [T, 4096]", time_op(ctx, [&](int) { ops::add(ctx, h, normed); }), 0, 0);

  std::vector<int32_t> pos_host(static_cast<size_t>(T), static_cast<int32_t>(context));
  const Tensor positions = Tensor::from_i32({T}, pos_host.data()).to_device(gpu);
  const Tensor inv_freq = filled({Dh / 2}, DType::kF32, gpu, 0.5f);
  Tensor q = filled({T, Hq, Dh}, DType::kF32, gpu, 1.0f), k = filled({T, Hkv, Dh}, DType::kF32, gpu, 1.0f);
  report("rope q+k (apart)", time_op(ctx, [&](int) {
           ops::rope(ctx, q, positions, inv_freq, 1.0f);
           ops::rope(ctx, k, positions, inv_freq, 1.0f);
         }),
         0, 0);

  // One sequence per row, each with `context` cached positions in its own blocks.
  const int64_t blocks_per_seq = (context + 1 + block - 1) / block, n_blocks = T * blocks_per_seq;
  ops::KvLayer cache{filled({n_blocks, block, Hkv, Dh}, DType::kF16, gpu, 1.0f),
                     filled({n_blocks, block, Hkv, Dh}, DType::kF16, gpu, 1.0f)};
  std::vector<int32_t> starts, lens, tables, slots;
  for (int64_t s = 0; s <= T; ++s) starts.push_back(static_cast<int32_t>(s));
  for (int64_t s = 0; s < T; ++s) {
    lens.push_back(static_cast<int32_t>(context));
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables.push_back(static_cast<int32_t>(s * blocks_per_seq + b));
    slots.push_back(static_cast<int32_t>(s * blocks_per_seq * block + context));
  }
  const Tensor slot_t = Tensor::from_i32({T}, slots.data()).to_device(gpu);
  const Tensor v = filled({T, Hkv, Dh}, DType::kF32, gpu, 1.0f);
  report("kv_write (apart)", time_op(ctx, [&](int) { ops::kv_write(ctx, k, v, slot_t, cache); }), 0, 0);
  report("rope_kv_write", time_op(ctx, [&](int) {
           ops::rope_kv_write(ctx, q, k, v, positions, inv_freq, 1.0f, slot_t, cache);
         }),
         0, 32, &step_us);
  const ops::AttentionBatch batch{Tensor::from_i32({T + 1}, starts.data()).to_device(gpu),
                                  Tensor::from_i32({T}, lens.data()).to_device(gpu),
                                  Tensor::from_i32({T, blocks_per_seq}, tables.data()).to_device(gpu)};
  Tensor attn = Tensor::empty({T, Hq, Dh}, DType::kF32, gpu);
  const double kv_bytes = 2.0 * 2.0 * static_cast<double>(T * (context + 1) * Hkv * Dh);
  report("attention", time_op(ctx, [&](int) { ops::attention(ctx, q, cache, batch, 0.088f, 0, attn); }), kv_bytes,
         32, &step_us);

  Tensor gate = filled({T, F}, DType::kF32, gpu, 1.0f);
  const Tensor up = filled({T, F}, DType::kF32, gpu, 1.0f);
  Tensor act = Tensor::empty({T, F}, DType::kF32, gpu);
  report("silu_mul [T, 14336]", time_op(ctx, [&](int) { ops::silu_mul(ctx, gate, up, act); }), 0, 32, &step_us);

  // The step's last op draws each row's token (a greedy row: the argmax). Logits ~ N(0, 2.5^2).
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::vector<float> logit_values(static_cast<size_t>(T * V));
  for (float& l : logit_values) l = normal(rng);
  const Tensor logits = Tensor::from_f32({T, V}, logit_values.data()).to_device(gpu);
  Tensor ids = Tensor::empty({T}, DType::kI32, gpu);
  report("argmax [T, 128256]", time_op(ctx, [&](int) { ops::argmax(ctx, logits, ids); }), 0, 0);
  const struct {
    const char* name;
    SampleRow row;
    bool in_step;
  } draws[] = {{"sample greedy", {}, true},
               {"sample t=0.7 top_p=0.9", {.temperature = 0.7f, .top_p = 0.9f, .u = 1ull << 62}, false},
               {"sample t=1 top_k=40", {.temperature = 1.0f, .top_k = 40, .u = 3ull << 62}, false},
               {"sample t=0.7 min_p=0.05", {.temperature = 0.7f, .log_min_p = std::log(0.05f), .u = 1ull << 63}, false},
               {"sample t=1 top_k=40 top_p=0.95", {.temperature = 1.0f, .top_k = 40, .top_p = 0.95f, .u = 5}, false}};
  for (const auto& d : draws) {
    std::vector<int32_t> words(static_cast<size_t>(T * 6));
    for (int64_t r = 0; r < T; ++r) std::memcpy(words.data() + r * 6, &d.row, sizeof d.row);
    const Tensor rows = Tensor::from_i32({T, 6}, words.data()).to_device(gpu);
    report(std::string(d.name) + " [T, 128256]", time_op(ctx, [&](int) { ops::sample(ctx, logits, rows, ids); }), 0,
           d.in_step ? 1 : 0, d.in_step ? &step_us : nullptr);
  }
  // A request with logit processors or logprobs: its edits (a window of 64 tokens; identity
  // edits, so the logits stay the same) and its logprobs on the device, against the row of
  // logits that the host would read instead.
  std::vector<LogitEdit> edit_list;
  for (int64_t r = 0; r < T; ++r)
    for (int32_t i = 0; i < 64; ++i) edit_list.push_back({.row = static_cast<int32_t>(r), .id = i * 1999});
  const Tensor edits = Tensor::from_i32({static_cast<int64_t>(edit_list.size()), 5},
                                        reinterpret_cast<const int32_t*>(edit_list.data()))
                           .to_device(gpu);
  Tensor edited = logits.to_device(gpu);
  report("edit_logits 64 a row [T, 128256]", time_op(ctx, [&](int) { ops::edit_logits(ctx, edited, edits); }), 0, 0);
  Tensor chosen = Tensor::empty({T}, DType::kF32, gpu), top_ids = Tensor::empty({T, 20}, DType::kI32, gpu),
         top = Tensor::empty({T, 20}, DType::kF32, gpu);
  report("logprobs top 20 [T, 128256]",
         time_op(ctx, [&](int) { ops::logprobs(ctx, logits, ids, chosen, top_ids, top); }), 0, 0);
  report("the logits to the host [T, 128256]", time_host(ctx, [&] { (void)logits.to_device(kCpu); }), 0, 0);

  const double params = 32.0 * (2 * D * D + 2 * Hkv * Dh * D + 3 * D * F) + static_cast<double>(V) * D;
  for (int f = 0; f < 3; ++f) {
    // Bytes per weight: 2; or bits/8 plus a bf16 scale and bias per 64.
    const double weight_bytes = params * (f == 0 ? 2.0 : (f == 1 ? 0.5 : 1.0) + 4.0 / 64);
    const double us = matmul_us[f] + step_us;
    std::printf("%s decode step estimate (32 layers, head, draw): %.0f us = %.1f tok/s; weights %.2f GB -> %.0f GB/s\n",
                formats[f], us, 1e6 / us, weight_bytes / 1e9, weight_bytes / us / 1e3);
  }
  return 0;
}
