// Instruction sets the CPU kernels are compiled for, chosen at run time from CPUID.
#pragma once

#include <string_view>

namespace hearth::cpu {

enum class Isa { kScalar, kAvx2, kAvx512 };

std::string_view isa_name(Isa isa);
bool isa_supported(Isa isa);
// The widest ISA this CPU (and OS) supports.
Isa best_isa();
// What kernels use now: the HEARTH_ISA knob, else best_isa(). Asking for an ISA the CPU
// lacks is an InputError.
Isa active_isa();
// AVX-512 VNNI (vpdpbusd: u8 x s8 dot products), used by the quantized decode kernels when
// the active ISA is AVX-512.
bool has_avx512_vnni();
// AVX512-BF16 (vdpbf16ps: bf16 pair dot products), for dense bf16 prefill.
bool has_avx512_bf16();
// AVX-512 VNNI and AVX-512 VBMI (vpermb, vpmultishiftqb byte shuffles), for the Q6_K lanes decode.
bool has_avx512_vbmi();

// AMX (Intel Sapphire Rapids and later): the tile registers with int8 and bf16 dot products,
// present (CPUID) and granted to this process by the kernel (Linux arch_prctl, asked once).
bool has_amx();
// Whether kernels of `isa` run prefill on AMX tiles: AVX-512 active, has_amx(), and the
// HEARTH_CPU_AMX knob on.
bool amx_active(Isa isa);

}  // namespace hearth::cpu
