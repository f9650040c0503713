// Kernels on ggml block-quantized matrices (GGUF's Q8_0, Q4_0, Q4_K, Q6_K; core/ggml_blocks.h
// has the layouts). Shapes as core/ops.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/isa.h"
#include "base/thread_pool.h"
#include "core/ggml_blocks.h"

namespace hearth::cpu {

// One quantized matrix as raw pointers: blocks [N, row_bytes] u8, each row the blocks of K
// elements of `type`, in `layout` (Q6_K and Q4_K may be in lanes: core/ggml_blocks.h).
struct GgmlMatrix {
  const uint8_t* blocks;
  GgmlType type;
  int64_t N, K;
  size_t row_bytes;
  GgmlLayout layout = GgmlLayout::kBlocks;
  bool in_lanes() const { return layout == GgmlLayout::kLanes; }
};

// Whether Q6_K and Q4_K matrices pay to be loaded in lanes: the CPU has the AVX-512 VBMI byte
// shuffles (vpermb, vpmultishiftqb) that ggml_vnni.cpp's decode unpacks them with.
bool ggml_lanes_pay(Isa isa);

// Row n of w dequantized -> out: K floats, the same bits on every ISA (AVX-512 decodes Q4_K and,
// with VBMI, Q6_K lanes in vectors).
void ggml_dequantize_row(Isa isa, const GgmlMatrix& w, int64_t n, float* out);

// x: [T, K] f32, bias: [N] f32 or null -> y: [T, N] f32 = x w^T + bias.
// Scalar ISA: the reference (dequantize each row, plain dot). AVX2/AVX-512: decode (T <= 4)
// dequantizes a row and takes a vector dot, except Q8_0 and Q4_0 on AVX-512, which unpack each
// block in registers, and the integer kernels below; prefill (T > 4) dequantizes tiles of rows
// through the f32 matmul.
void ggml_matmul(Isa isa, ThreadPool* pool, const float* x, int64_t T, const GgmlMatrix& w, const float* bias,
                 float* y);

// Q4_K and Q6_K decode on AVX-512 VNNI (ggml_vnni.cpp; lanes also need VBMI): x rounded to
// int8 per 256 elements, T <= 4.
bool ggml_vnni_supports(const GgmlMatrix& w, int64_t T);
void ggml_vnni_matmul(ThreadPool* pool, const float* x, int64_t T, const GgmlMatrix& w, const float* bias, float* y);

// Q6_K and Q4_K matmuls on AVX2 without VNNI (ggml_avx2.cpp): the file's blocks, any T (tiles of
// 16 weight rows against every 4 rows of x), x rounded to int8 per 256 elements as above.
// Returns false, having done nothing, for any other case.
bool ggml_matmul_avx2(ThreadPool* pool, const float* x, int64_t T, const GgmlMatrix& w, const float* bias, float* y);

// Rows `ids` of the dequantized matrix: out [n_ids, K] f32.
void ggml_rows(Isa isa, const GgmlMatrix& w, const int32_t* ids, int64_t n_ids, float* out);

}  // namespace hearth::cpu
