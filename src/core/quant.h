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

#include <algorithm>
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

// Where an affine matrix's codes and parameters lie in memory.
enum class AffineLayout : uint8_t {
  kRows,  // as MLX stores them: packed [N, K * bits / 32] u32, scales and biases [N, groups]
  // Rows interleaved in panels of 16 (4 and 8 bits), the layout of the CPU's int8 dot-product
  // kernels, made at load (affine_to_panels). packed [P, panel_bytes] u8, P = ceil(N / 16), the
  // last panel's extra lanes zero; scales and biases live in it too (the tensors are undefined).
  // A panel is its groups in order, each group's codes followed by its parameters, so that a
  // decode thread reads one ascending stream (separate parameter arrays were two more streams
  // per thread, and cost up to a quarter of the read rate; bench/RESULTS.md, 2026-12-05).
  // A group's codes are 64-byte steps: step j gives lane r (row 16p + r) 4 bytes: 8 bits: the
  // codes of elements 4j .. 4j + 3; 4 bits: byte i holds element 8j + i in its low and
  // 8j + 4 + i in its high nibble. One step of a vector dot therefore meets 4 (or 2 x 4)
  // consecutive x values, broadcast to every lane. Its parameters are 16 scales, then 16 biases
  // (none for symmetric codes), of param_type: 32, 64 or 128 bytes. Where they are 32 (16-bit
  // symmetric), groups go in pairs, codes then parameters, so every run stays whole 64-byte
  // lines (PanelLayout).
  kPanels16,
};

struct QuantizedMatrix {
  QuantFormat format = QuantFormat::kAffine;
  AffineLayout layout = AffineLayout::kRows;     // kAffine
  QuantSpec spec;                                // kAffine
  GgmlType ggml_type = GgmlType::kQ8_0;          // kGgml
  GgmlLayout ggml_layout = GgmlLayout::kBlocks;  // kGgml
  int64_t rows = 0, cols = 0;                    // the logical [N, K]
  Tensor packed;                                 // kAffine: [N, K * bits / 32] u32; kGgml: [N, row_bytes] u8
  Tensor scales, biases;                         // kAffine: [N, K / group_size], one float dtype (kRows)
  DType param_type = DType::kF32;                // kPanels16: the dtype of the scales and biases in packed
  bool param_biases = true;                      // kPanels16: whether packed holds biases
  bool defined() const { return packed.defined(); }
  bool is_ggml() const { return format == QuantFormat::kGgml; }
  // kAffine without biases (ggml_type names the GGUF type it came from).
  bool symmetric() const {
    return format == QuantFormat::kAffine && packed.defined() &&
           (layout == AffineLayout::kPanels16 ? !param_biases : !biases.defined());
  }
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

// A Q6_K or Q4_K matrix in GgmlLayout::kLanes (a copy of the same size).
QuantizedMatrix ggml_to_lanes(const QuantizedMatrix& q);

// The same matrix in AffineLayout::kPanels16 (a copy; bits 4 or 8, kRows layout in).
QuantizedMatrix affine_to_panels(const QuantizedMatrix& q);

// Where the groups of a kPanels16 panel lie: byte offsets from the panel's start.
struct PanelLayout {
  int64_t groups = 0;       // per row
  int64_t code_bytes = 0;   // one group's codes: group_size * bits / 8 * 16
  int64_t param_bytes = 0;  // one group's scales and biases: 16 * param_size * (1 or 2)
  int64_t param_size = 0;   // bytes of one scale (2 or 4)
  int64_t unit = 1;         // groups whose codes go before their parameters: 2 where param_bytes is 32
  int64_t unit_bytes = 0;   // a whole unit
  int64_t panel_bytes = 0;  // a panel: its units, the last one possibly short, rounded up to 64 bytes
  bool biases = true;
  // bf16 scales with biases go in pairs, 32 bits per row (scale low, bias high), so that both
  // widen to f32 with one instruction each (a shift, a mask); other types: 16 scales, then 16
  // biases.
  bool paired = false;
  int64_t codes_at(int64_t g) const { return g / unit * unit_bytes + g % unit * code_bytes; }
  // Where a group's parameters start.
  int64_t params_at(int64_t g) const {
    const int64_t u = g / unit;
    return u * unit_bytes + std::min(unit, groups - u * unit) * code_bytes + g % unit * param_bytes;
  }
  // Where row r's (r < 16) scale (which = 0) or bias (which = 1) lies among its group's parameters.
  int64_t param_offset(int64_t r, int which) const { return (paired ? 2 * r + which : which * 16 + r) * param_size; }
};
// Groups per unit for a group's parameter bytes: pairs where they are 32, so that every run of
// codes or parameters stays whole 64-byte lines.
constexpr int64_t panel_unit(int64_t param_bytes) { return param_bytes < 64 ? 64 / param_bytes : 1; }
PanelLayout panel_layout(int64_t K, int bits, int group_size, DType param_type, bool biases);
inline PanelLayout panel_layout(const QuantizedMatrix& q) {
  return panel_layout(q.cols, q.spec.bits, q.spec.group_size, q.param_type, q.param_biases);
}
// kPanels16 addressing: the code of element (n, k), and the scale (bias: which = 1) of row n's
// group g as f32.
inline uint32_t panel_code(const uint8_t* panels, const PanelLayout& l, int bits, int group_size, int64_t n,
                           int64_t k) {
  const int64_t per_step = bits == 8 ? 4 : 8, g = k / group_size, e = k % group_size;
  const uint8_t byte = panels[n / 16 * l.panel_bytes + l.codes_at(g) + e / per_step * 64 + n % 16 * 4 + e % 4];
  return bits == 8 ? byte : (e % per_step < 4 ? byte & 0x0fu : byte >> 4);
}
float panel_param(const uint8_t* panels, const PanelLayout& l, DType param_type, int64_t n, int64_t g, int which);

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
