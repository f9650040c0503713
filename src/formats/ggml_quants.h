// ggml tensor types as GGUF stores them. The type ids, block geometry, block layouts and the
// scalar row decoders live in core/ggml_blocks.h (the kernels decode them too); this adds the
// reference quantizers. Layouts and rounding follow ggml's ggml-common.h / ggml-quants.c (the
// `_ref` quantizers); docs/gguf.md draws each block.
#pragma once

#include <cstdint>

#include "core/ggml_blocks.h"

namespace hearth {

// ggml's quantize_row_q8_0_ref / quantize_row_q4_0_ref, bit for bit on finite input
// (n a multiple of 32). Non-finite input gives defined (unspecified) codes, where ggml's
// float-to-int casts are undefined.
void quantize_row_q8_0(const float* src, BlockQ8_0* dst, int64_t n);
void quantize_row_q4_0(const float* src, BlockQ4_0* dst, int64_t n);
// ggml's quantize_row_q6_K_ref (n a multiple of 256): what llama.cpp's quantizer gives the
// output matrix of a Q4_0 model.
void quantize_row_q6_K(const float* src, BlockQ6_K* dst, int64_t n);

}  // namespace hearth
