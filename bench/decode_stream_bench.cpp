// Decode reads a model's weights as a sequence of matvecs, a few MB each, one after another:
// does that sequence reach the read bandwidth that one big matrix does? Times the matvecs of
// a Qwen3-1.7B-shaped decode step (28 layers of q, k, v, o, gate, up, down, then the LM head)
// as MLX affine 4-bit panels with random codes, nothing else between them, against the read
// probe run between passes (medians of the passes). Passes alternate between one matvec per
// matrix and the grouped calls the CPU backend makes (q+k+v, gate+up, o, down; one parallel
// loop each), so both meet the same drift of the host's bandwidth; a third pass reads one matrix
// of as many bytes (the rate with no call boundaries), and a fourth a plain read of that matrix's
// own bytes with the probe's loop (the rate of the memory under it: where the kernel's stream
// stands against the memory's, apart from the probe's buffer and statistic). The grouped passes
// also time each kind of call (q+k+v, o, gate+up, down, LM head) against the pass's probe, and
// print each pass.
// Usage: decode_stream_bench [passes]   (HEARTH_THREADS=1: one thread's stream rate)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backends/cpu/isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/quant_kernels.h"
#include "base/thread_pool.h"
#include "core/bandwidth.h"
#include "core/context.h"
#include "core/tensor.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Matrix {
  hearth::Tensor panels;
  hearth::cpu::AffineMatrix args{};
  size_t bytes = 0;
};

// N x K, 4 bits, groups of 64, bf16 parameters, in the CPU's panels (core/quant.h): hashed
// bytes for the codes, constant scales and biases.
Matrix random_matrix(int64_t N, int64_t K) {
  Matrix m;
  const int64_t P = (N + 15) / 16;
  const hearth::PanelLayout l = hearth::panel_layout(K, 4, 64, hearth::DType::kBF16, true);
  m.panels = hearth::Tensor::zeros({P, l.panel_bytes}, hearth::DType::kU8);
  auto* c = m.panels.data<uint8_t>();
  for (int64_t i = 0; i < m.panels.numel(); ++i) c[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  for (int64_t p = 0; p < P; ++p) {
    for (int64_t g = 0; g < l.groups; ++g) {
      auto* params = reinterpret_cast<uint16_t*>(c + p * l.panel_bytes + l.params_at(g));
      for (int i = 0; i < 16; ++i) {
        params[i] = 0x3c00;  // bf16 0.0078
        params[16 + i] = 0xbc00;
      }
    }
  }
  m.args = {static_cast<const uint32_t*>(m.panels.raw()), nullptr, nullptr, hearth::DType::kBF16, 4, 64, N, K, true, l};
  m.bytes = static_cast<size_t>(m.panels.nbytes());
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const int passes = argc > 1 ? std::atoi(argv[1]) : 15;
  const int64_t hidden = 2048, inter = 6144, q_out = 16 * 128, kv_out = 8 * 128, layers = 28, vocab = 151936;
  std::vector<Matrix> ms;
  for (int64_t l = 0; l < layers; ++l) {
    ms.push_back(random_matrix(q_out, hidden));
    ms.push_back(random_matrix(kv_out, hidden));
    ms.push_back(random_matrix(kv_out, hidden));
    ms.push_back(random_matrix(hidden, q_out));
    ms.push_back(random_matrix(inter, hidden));
    ms.push_back(random_matrix(inter, hidden));
    ms.push_back(random_matrix(hidden, inter));
  }
  ms.push_back(random_matrix(vocab, hidden));
  size_t bytes = 0;
  for (const Matrix& m : ms) bytes += m.bytes;
  const int64_t big_rows = static_cast<int64_t>(bytes / static_cast<size_t>(hidden / 2 + hidden / 64 * 4)) / 16 * 16;
  const Matrix big = random_matrix(big_rows, hidden);
  std::vector<float> y_big(static_cast<size_t>(big_rows));
  hearth::ThreadPool pool(0);
  hearth::Context ctx;
  ctx.pool = &pool;
  std::vector<float> x(static_cast<size_t>(inter), 0.25f), y(static_cast<size_t>(vocab));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i % 17) - 0.08f;
  // Each layer's calls as the CPU backend groups them: {q, k, v}, {o}, {gate, up}, {down}.
  std::vector<std::vector<hearth::cpu::PanelPart>> groups;
  for (int64_t l = 0; l < layers; ++l) {
    auto part = [&](int64_t i) { return hearth::cpu::PanelPart{ms[l * 7 + i].args, nullptr, y.data(), false}; };
    groups.push_back({part(0), part(1), part(2)});
    groups.push_back({part(3)});
    groups.push_back({part(4), part(5)});
    groups.push_back({part(6)});
  }
  groups.push_back({{ms.back().args, nullptr, y.data(), false}});
  // Group i's kind: its place in the layer, the LM head last.
  constexpr int kKinds = 5;
  const char* kind_names[kKinds] = {"q+k+v", "o", "gate+up", "down", "LM head"};
  auto kind_of = [&](size_t i) { return i + 1 == groups.size() ? 4 : static_cast<int>(i % 4); };
  // Matrix l * 7 + i of a layer (q, k, v, o, gate, up, down) belongs to kind kKindOf[i].
  constexpr int kKindOf[7] = {0, 0, 0, 1, 2, 2, 3};
  double kind_bytes[kKinds] = {};
  for (size_t i = 0; i < ms.size(); ++i) {
    kind_bytes[i + 1 == ms.size() ? 4 : kKindOf[i % 7]] += static_cast<double>(ms[i].bytes);
  }
  const char* pass_names[4] = {"one call per matrix (197):", "grouped (113 calls):", "one matrix of as many bytes:",
                               "a plain read of its bytes:"};
  const hearth::cpu::Isa isa = hearth::cpu::best_isa();
  std::vector<double> step_gbs[4], read_gbs, ratios[4], kind_ratios[kKinds];
  for (int p = 0; p < 4 * passes; ++p) {
    const int kind = p % 4;
    double seconds_of[kKinds] = {};
    const auto t0 = Clock::now();
    if (kind == 3) {
      hearth::cpu::read_checksum(isa, &pool, big.panels.raw(), big.bytes);  // the probe's loop
    } else if (kind == 2) {
      hearth::cpu::panel_matmul(&pool, x.data(), 1, big.args, nullptr, y_big.data());
    } else if (kind == 1) {
      for (size_t i = 0; i < groups.size(); ++i) {
        const auto c0 = Clock::now();
        hearth::cpu::panel_matmul_group(&pool, x.data(), 1, groups[i]);
        seconds_of[kind_of(i)] += std::chrono::duration<double>(Clock::now() - c0).count();
      }
    } else {
      for (const Matrix& m : ms) hearth::cpu::panel_matmul(&pool, x.data(), 1, m.args, nullptr, y.data());
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const double read = hearth::measure_read_bandwidth(ctx).bytes_per_second / 1e9;
    const double moved = kind >= 2 ? static_cast<double>(big.bytes) : static_cast<double>(bytes);
    step_gbs[kind].push_back(moved / s / 1e9);
    read_gbs.push_back(read);
    ratios[kind].push_back(moved / s / 1e9 / read);
    if (kind == 1) {
      std::printf("pass: read %.1f GB/s, step %.1f; by kind:", read, moved / s / 1e9);
      for (int k = 0; k < kKinds; ++k) {
        const double gbs = kind_bytes[k] / seconds_of[k] / 1e9;
        kind_ratios[k].push_back(gbs / read);
        std::printf(" %s %.1f", kind_names[k], gbs);
      }
      std::printf("\n");
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("%zu matrices, %.0f MB per step, %d threads, read %.1f GB/s (median)\n", ms.size(), bytes / 1e6,
              pool.size(), median(read_gbs));
  for (int kind : {0, 1, 2, 3}) {
    std::printf("  %-29s step %.1f GB/s, step/read median %.0f%%\n", pass_names[kind], median(step_gbs[kind]),
                100 * median(ratios[kind]));
  }
  std::printf("  one matrix against a plain read of its bytes: %.0f%% (medians)\n",
              100 * median(step_gbs[2]) / median(step_gbs[3]));
  std::printf("  grouped calls by kind, rate/read median:");
  for (int k = 0; k < kKinds; ++k) std::printf(" %s %.0f%%", kind_names[k], 100 * median(kind_ratios[k]));
  std::printf("\n");
  return 0;
}
