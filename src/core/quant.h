// Quantized matrices, in one of two formats (QuantFormat):
// MLX affine (the mlx-community format): a [N, K] matrix is stored as
//   packed  [N, K * bits / 32] u32: each row a little-endian bit stream, element k in bits
//           [k * bits, (k + 1) * bits) (low bits first; 3-, 5- and 6-bit values cross words),
//   scales, biases [N, K / group_size] f32|bf16|f16: w[n, k] = scale * q + bias for the group
//           of k.
//   bits 2, 3, 4, 5, 6, 8; group sizes 32, 64, 128. See docs/quantization.md.
//   Without biases the codes are symmetric: w = scale * (q - 2^(bits-1)). GGUF Q4_0 and Q8_0
//   load in this form (ggml_to_affine), so one set of kernels serves both formats.
// ggml blocks (GGUF files): packed [N, row_bytes(type, K)] u8, each row the file's blocks of
//   a Q8_0, Q4_0, Q4_K or Q6_K type (core/ggml_blocks.h); no scales or biases (each block
//   carries its own). See docs/gguf.md.
#pragma once

#include <cstdint>
#include <string>

#include "core/ggml_blocks.h"
#include "core/tensor.h"

namespace hearth {

struct QuantSpec {
  int bits = 4;
  int group_size = 64;
  bool operator==(const QuantSpec&) const = default;
};

// Throws InputError naming the problem unless bits is in {2,3,4,5,6,8} and group_size in {32,64,128}.
void check_quant_spec(const QuantSpec& spec);

enum class QuantFormat : uint8_t {
  kAffine,  // MLX affine: spec, packed u32 codes, scales, biases
  kGgml,    // ggml blocks: ggml_type, packed u8 blocks
};

struct QuantizedMatrix {
  QuantFormat format = QuantFormat::kAffine;
  QuantSpec spec;                        // kAffine
  GgmlType ggml_type = GgmlType::kQ8_0;  // kGgml
  int64_t rows = 0, cols = 0;            // the logical [N, K]
  Tensor packed;                         // kAffine: [N, K * bits / 32] u32; kGgml: [N, row_bytes] u8
  Tensor scales, biases;                 // kAffine: [N, K / group_size], one float dtype
  bool defined() const { return packed.defined(); }
  bool is_ggml() const { return format == QuantFormat::kGgml; }
  // kAffine without biases (ggml_type names the GGUF type it came from).
  bool symmetric() const { return format == QuantFormat::kAffine && packed.defined() && !biases.defined(); }
  size_t nbytes() const {
    return (packed.defined() ? packed.nbytes() : 0) + (scales.defined() ? scales.nbytes() : 0) +
           (biases.defined() ? biases.nbytes() : 0);
  }
  // "affine 4-bit/64 [N, K]", "Q4_K [N, K]"
  std::string str() const;
};

// A ggml block-quantized [rows, cols] matrix over `blocks`: [rows, row_bytes(type, cols)] u8,
// usually a zero-copy view of a mapped GGUF file. InputError unless ggml_is_block_quantized(type),
// cols is a multiple of the block size and the shape fits.
QuantizedMatrix ggml_quantized(GgmlType type, int64_t rows, int64_t cols, Tensor blocks);

// Q4_0 / Q8_0 blocks as symmetric affine codes with f16 scales, groups of 32: the same values
// and the same bytes per weight (18 / 34 per 32), in the layout the affine kernels read. A copy.
QuantizedMatrix ggml_to_affine(const QuantizedMatrix& q);

// The reference codec, one row at a time (K a multiple of group_size).
// MLX's quantizer: per group, the scale spans [min, max] over 2^bits - 1 steps, anchored so
// that the extreme with the larger magnitude is represented exactly.
void affine_quantize_row(const float* w, int64_t K, const QuantSpec& spec, uint32_t* packed, float* scales,
                         float* biases);
// out[k] = scale * q + bias, with scale and bias as the matrix stores them (rounded to its dtype).
void affine_dequantize_row(const uint32_t* packed, const float* scales, const float* biases, int64_t K,
                           const QuantSpec& spec, float* out);
// The unsigned value of element k of a packed row.
inline uint32_t affine_code(const uint32_t* packed, int64_t k, int bits) {
  const uint64_t bit = static_cast<uint64_t>(k) * static_cast<uint64_t>(bits);
  const uint64_t word = bit >> 5, shift = bit & 31;
  uint64_t v = packed[word] >> shift;
  if (shift + static_cast<uint64_t>(bits) > 32) v |= static_cast<uint64_t>(packed[word + 1]) << (32 - shift);
  return static_cast<uint32_t>(v & ((1u << bits) - 1u));
}

// Quantizes a float matrix [N, K] (any float dtype); scales and biases get `scale_dtype`.
QuantizedMatrix affine_quantize(const Tensor& w, const QuantSpec& spec, DType scale_dtype);
// The dense f32 matrix the quantized one stands for (MLX affine).
Tensor affine_dequantize(const QuantizedMatrix& q);
// The same for either format (tests, tools).
Tensor dequantize(const QuantizedMatrix& q);

}  // namespace hearth
