#include "backends/cpu/isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>

#include "base/error.h"
#include "base/knobs.h"

namespace hearth::cpu {

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

namespace {

// F16C (CPUID.1:ECX bit 29); clang's __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
}

}  // namespace

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
  return false;
}

Isa best_isa() {
  static const Isa best = isa_supported(Isa::kAvx512) ? Isa::kAvx512
                          : isa_supported(Isa::kAvx2) ? Isa::kAvx2
                                                      : Isa::kScalar;
  return best;
}

Isa active_isa() {
  const std::string want = knobs::isa();
  if (want == "auto") return best_isa();
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (want == isa_name(isa)) {
      if (!isa_supported(isa)) throw InputError("HEARTH_ISA=" + want + ": this CPU does not support it");
      return isa;
    }
  }
  throw InputError("HEARTH_ISA: expected auto, scalar, avx2 or avx512, got '" + want + "'");
}

bool has_avx512_vnni() {
  static const bool yes = isa_supported(Isa::kAvx512) && __builtin_cpu_supports("avx512vnni");
  return yes;
}

bool has_avx512_bf16() {
  static const bool yes = isa_supported(Isa::kAvx512) && __builtin_cpu_supports("avx512bf16");
  return yes;
}

bool has_avx512_vbmi() {
  static const bool yes = has_avx512_vnni() && __builtin_cpu_supports("avx512vbmi");
  return yes;
}

bool has_amx() {
  static const bool yes = [] {
    unsigned eax, ebx, ecx, edx;
    if (!isa_supported(Isa::kAvx512) || !__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool tile = (edx >> 24) & 1, int8 = (edx >> 25) & 1, bf16 = (edx >> 22) & 1;
    if (!tile || !int8 || !bf16) return false;
    // Linux hands out the tile data state (XFEATURE_XTILEDATA, 18) only to a process that asks
    // (ARCH_REQ_XCOMP_PERM, 0x1023); the grant covers all its threads, and without it the
    // first tile instruction is a SIGILL.
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return yes;
}

bool amx_active(Isa isa) { return isa == Isa::kAvx512 && has_amx() && knobs::cpu_amx(); }

}  // namespace hearth::cpu
