// Prefill is matrix-matrix products: how fast do the CPU's prefill matmuls run, and what do AMX
// tiles give where the CPU has them? x [T, K] times one [N, K] matrix (default Qwen3-1.7B's gate
// or up projection against a 512-token prompt) as bf16 and as MLX affine 4- and 8-bit panels
// (groups of 64, bf16 scales: the CPU backend's layout on VNNI machines), each with
// HEARTH_CPU_AMX off and on, for 1 and 2 threads (or the counts given). Prints multiply-adds per
// second (T * N * K / the best of 5 calls).
// Usage: prefill_bench [T N K [THREADS...]]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/quant_kernels.h"
#include "base/knobs.h"
#include "core/affine_args.h"
#include "core/dtype.h"
#include "core/quant.h"
#include "best_seconds.h"

int main(int argc, char** argv) {
  using namespace hearth;
  const bool shaped = argc > 3;
  const int64_t T = shaped ? std::atoll(argv[1]) : 512, N = shaped ? std::atoll(argv[2]) : 6144,
                K = shaped ? std::atoll(argv[3]) : 2048;
  std::vector<int> thread_counts;
  for (int i = 4; i < argc; ++i) thread_counts.push_back(std::atoi(argv[i]));
  if (thread_counts.empty()) thread_counts = {1, 2};
  const cpu::Isa isa = cpu::best_isa();
  std::vector<float> x(static_cast<size_t>(T * K)), y(static_cast<size_t>(T * N));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i % 17) - 0.08f;
  std::vector<float> wf(static_cast<size_t>(N * K));
  for (size_t i = 0; i < wf.size(); ++i) wf[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
  std::vector<uint16_t> w16(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) w16[i] = f32_to_bf16(wf[i]);
  const Tensor wt = Tensor::from_f32({N, K}, wf.data());
  const bool panels = cpu::runs_panel_kernels(isa);
  auto quantize = [&](int bits) {
    QuantizedMatrix q = affine_quantize(wt, {bits, 64}, DType::kBF16);
    return panels ? affine_to_panels(q) : q;
  };
  const QuantizedMatrix q4 = quantize(4), q8 = quantize(8);
  std::printf("prefill x [%lld, %lld] w [%lld, %lld], %s kernels, AMX %s\n", static_cast<long long>(T),
              static_cast<long long>(K), static_cast<long long>(N), static_cast<long long>(K),
              std::string(cpu::isa_name(isa)).c_str(), cpu::has_amx() ? "present" : "absent");
  const double macs = static_cast<double>(T) * static_cast<double>(N) * static_cast<double>(K);
  for (int threads : thread_counts) {
    ThreadPool pool(threads);
    for (const char* amx : {"0", "1"}) {
      if (std::string(amx) == "1" && !cpu::has_amx()) continue;
      KnobOverride knob("HEARTH_CPU_AMX", amx);
      const double bf16 =
          hearth::bench::best_seconds([&] { cpu::matmul(isa, &pool, x.data(), T, K, w16.data(), DType::kBF16, N, nullptr, y.data()); });
      const double a4 =
          hearth::bench::best_seconds([&] { cpu::affine_matmul(isa, &pool, x.data(), T, affine_args(q4), nullptr, y.data()); });
      const double a8 =
          hearth::bench::best_seconds([&] { cpu::affine_matmul(isa, &pool, x.data(), T, affine_args(q8), nullptr, y.data()); });
      std::printf("threads %d AMX=%s: bf16 %7.1f GMAC/s  4-bit %7.1f  8-bit %7.1f\n", threads, amx, macs / bf16 / 1e9,
                  macs / a4 / 1e9, macs / a8 / 1e9);
    }
  }
  return 0;
}
