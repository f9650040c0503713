// Kernels on MLX affine-quantized matrices (core/quant.h has the layout). Shapes as core/ops.h.
#pragma once

#include <cstdint>
#include <span>

#include "backends/cpu/isa.h"
#include "base/thread_pool.h"
#include "core/affine_args.h"
#include "core/dtype.h"

namespace hearth::cpu {

// One quantized matrix as raw pointers: packed [N, K * bits / 32] u32, scales and biases
// [N, K / group_size] of scale_type. Null biases: symmetric codes, w = scale * (q - 2^(bits-1))
// (GGUF Q4_0/Q8_0 as loaded).
// panels: AffineLayout::kPanels16 (core/quant.h): packed is then the panels' bytes, codes and
// parameters interleaved group by group as `panel` places them; scales and biases are null.
using AffineMatrix = hearth::AffineArgs;  // core/affine_args.h

// x: [T, K] f32, bias: [N] f32 or null -> y: [T, N] f32 = x w^T + bias. 4- and 8-bit rows
// have AVX-512 paths (decode: unpack in registers; prefill: dequantized tiles through the f32
// matmul) and an AVX2 integer path; other widths, and the scalar ISA, dequantize each row and
// take a plain dot.
void affine_matmul(Isa isa, ThreadPool* pool, const float* x, int64_t T, const AffineMatrix& w, const float* bias,
                   float* y);

// The integer kernels on 16-row panels (quant_panels.cpp), for a CPU with AVX-512 VNNI
// (has_avx512_vnni()). x is rounded to int8 per group (step max|x| / 127); up to
// kVnniDecodeRows rows of x take the decode kernel, more the register-tiled prefill kernel.
constexpr int64_t kVnniDecodeRows = 4;
// Whether kernels of `isa` take 4/8-bit matrices as panels (the CPU backend then loads them so).
inline bool runs_panel_kernels(Isa isa) { return isa == Isa::kAvx512 && has_avx512_vnni(); }
void panel_matmul(ThreadPool* pool, const float* x, int64_t T, const AffineMatrix& w, const float* bias, float* y);

// Several panel matrices of the same K and group size times one x (q, k and v; gate and up; o
// or down with the residual): x is rounded once, and one parallel loop streams all their
// panels. Each part: y [T, N] = x w^T + bias, or y += that where accumulate is set.
struct PanelPart {
  AffineMatrix w;
  const float* bias;  // [N] or null
  float* y;
  bool accumulate;
};
void panel_matmul_group(ThreadPool* pool, const float* x, int64_t T, std::span<const PanelPart> parts);

// AVX2 without VNNI (quant_avx2.cpp): 4/8-bit matrices in the row layout, K a whole number of
// 32-byte steps, groups of 32, 64 or 128, as integer dots with x rounded to int8 per group as the
// VNNI panels round it; tiles of 16 weight rows against kAvx2DecodeRows rows of x at a time, so
// that prefill reads the matrix once. Returns false, having done nothing, for any other matrix.
constexpr int64_t kAvx2DecodeRows = 4;
bool affine_matmul_avx2(ThreadPool* pool, const float* x, int64_t T, const AffineMatrix& w, const float* bias,
                        float* y);

// Rows `ids` of the dequantized matrix: out [n_ids, K] f32.
void affine_rows(const AffineMatrix& w, const int32_t* ids, int64_t n_ids, float* out);

}  // namespace hearth::cpu
