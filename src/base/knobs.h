// Knobs: every run-time lever that is not a CLI flag, declared once (name, default, help).
// This is the only place in Hearth that reads the environment. Tests override a knob for a
// scope with KnobOverride.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hearth {

struct KnobInfo {
  std::string_view env;            // environment variable, e.g. HEARTH_ISA
  std::string_view default_value;  // as text
  std::string_view help;
};

// All declared knobs, in declaration order (for docs/knobs.md and `hearth knobs`).
const std::vector<KnobInfo>& all_knobs();

// Current value of a knob as text: override > environment > default. Throws InputError for
// an undeclared name (a typo in code, caught by tests).
std::string knob_text(std::string_view env);

namespace knobs {
// CPU instruction set for kernels: auto | scalar | avx2 | avx512.
std::string isa();
// Whether CPU prefill may use AMX tiles where the CPU has them (HEARTH_CPU_AMX, default on).
bool cpu_amx();
// Worker threads for the CPU backend; 0 = one per core.
int threads();
// Whether GPU decode steps replay recorded device graphs (HEARTH_DEVICE_GRAPHS, default on).
bool device_graphs();
// Whether CUDA kernels may start early, waiting for their inputs (HEARTH_CUDA_PDL, default on).
bool cuda_pdl();
// Where to write the in-graph timeline of one GPU decode step (HEARTH_CUDA_TIMELINE; "" = off;
// only builds with the CMake option HEARTH_CUDA_TIMELINE record one).
std::string cuda_timeline();
// Whether GPU matmuls of 9-32 rows over 4/8-bit affine matrices dequantize in registers
// (HEARTH_CUDA_QUANT_GEMM, default on) rather than into a dense copy for cuBLAS.
bool cuda_quant_gemm();
// Whether GPU decode matmuls (1-8 rows) over 4/8-bit affine matrices run on tensor cores
// (HEARTH_CUDA_MV_MMA, default on) rather than the one-row-per-warp integer dot kernels.
bool cuda_mv_mma();
// Hearth's cache directory: $XDG_CACHE_HOME/hearth, else $HOME/.cache/hearth; "" when neither is set.
std::string cache_dir();
}  // namespace knobs

// Sets a knob for the lifetime of this object (tests). Not thread-safe against readers.
class KnobOverride {
 public:
  KnobOverride(std::string_view env, std::string value);
  ~KnobOverride();
  KnobOverride(const KnobOverride&) = delete;
  KnobOverride& operator=(const KnobOverride&) = delete;

 private:
  std::string env_;
  bool had_previous_;
  std::string previous_;
};

// Markdown table of all knobs (docs/knobs.md is generated from this and checked by a test).
std::string knobs_markdown();

}  // namespace hearth
