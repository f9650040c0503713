// ggml's tensor types and block layouts (ggml-common.h), and the scalar row decoders for the
// types Hearth reads: what GGUF files store and what the CPU kernels decode. Core holds them so
// that backends can use them; formats/ggml_quants.h adds the quantizers. docs/gguf.md draws
// each block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hearth {

// ggml_type ids (GGUF's tensor type field). Gaps are ids ggml removed.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
  kQ2_0 = 42,
};

// Geometry of one ggml type: `block_size` elements are stored in `block_bytes` bytes.
struct GgmlTypeInfo {
  GgmlType type;
  const char* name;  // ggml's enum spelling: "Q4_K", "BF16", ...
  int64_t block_size;
  uint64_t block_bytes;
  bool supported;  // dequantize_row implements it
};

// nullptr for an id ggml does not define (or has removed).
const GgmlTypeInfo* ggml_type_info(uint32_t id);
const GgmlTypeInfo& ggml_type_info(GgmlType type);
inline std::string_view ggml_type_name(GgmlType type) { return ggml_type_info(type).name; }
inline bool ggml_type_supported(GgmlType type) { return ggml_type_info(type).supported; }

// Bytes of a row of n elements. InputError when n is negative or not a multiple of the
// type's block size, or the size overflows.
uint64_t row_bytes(GgmlType type, int64_t n);

// Block layouts. `d`/`dmin` are IEEE half floats (bits); all fields are little-endian.
// Q8_0: x[i] = d * qs[i].
struct BlockQ8_0 {
  static constexpr int kSize = 32;
  uint16_t d;
  int8_t qs[kSize];
};
// Q4_0: element j < 16 is the low nibble of qs[j], element j + 16 its high nibble;
// x = d * (nibble - 8).
struct BlockQ4_0 {
  static constexpr int kSize = 32;
  uint16_t d;
  uint8_t qs[kSize / 2];
};
// Q4_K: 256 elements in 8 sub-blocks of 32, each with a 6-bit scale and 6-bit min packed
// into `scales`; x = d * scale[s] * nibble - dmin * min[s].
struct BlockQ4_K {
  static constexpr int kSize = 256;
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kSize / 2];
};
// Q6_K: 256 elements in 16 sub-blocks of 16 with int8 scales; 6-bit quants split into
// low nibbles (ql) and 2-bit highs (qh); x = d * scales[s] * (q - 32).
struct BlockQ6_K {
  static constexpr int kSize = 256;
  uint8_t ql[kSize / 2];
  uint8_t qh[kSize / 4];
  int8_t scales[kSize / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18, "ggml block sizes");
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ6_K) == 210, "ggml block sizes");

// Q6_K in lanes: the layout of the CPU's AVX-512 VBMI decode (ggml_vnni.cpp), made at load
// (ggml_to_lanes, core/quant.h) and never stored in a file. The same 210 bytes per block:
//   bytes 0..191   four chunks of 48: chunk v holds 64 codes q (0..63), the k-th (k = 0..63)
//                  that of element 16 (k / 4) + 4 v + k % 4; each 6 bytes hold 8 codes, the i-th
//                  in bits 6i .. 6i + 5 (little-endian)
//   bytes 192..209 scales and d, as in BlockQ6_K; x = d * scales[s] * (q - 32).
// So the 4-byte lane l of every unpacked chunk holds codes of sub-block l: a dot product's int32
// lanes sum one sub-block each over all four chunks, and the scales apply once per block.
void q6_k_blocks_to_lanes(const uint8_t* src, uint8_t* dst, int64_t n_blocks);
// Q4_K in lanes, the same 144 bytes per block:
//   bytes 0..3     d, dmin, as in BlockQ4_K
//   bytes 4..15    the 8 scales, then the 8 mins, each 8 packed six bits apiece as Q6_K's lanes
//                  pack codes (value j in bits 6j .. 6j + 5 of 6 bytes)
//   bytes 16..143  two runs of 64: byte k of run h holds in its low nibble the code of element
//                  32 (k / 8) + 16h + k % 8 and in its high nibble that of the element 8 on.
// So each of the four nibble vectors has sub-block l / 2 in its 4-byte lane l.
void q4_k_blocks_to_lanes(const uint8_t* src, uint8_t* dst, int64_t n_blocks);
// The element (0..255) whose code lies at position k (0..255) of an unpacked lanes block: byte
// k % 64 of chunk k / 64 (Q6_K), of nibble vector k / 64 (Q4_K: run k / 128, its low nibbles
// then its high ones). The decode rounds x into the same order.
constexpr int lanes_element(GgmlType type, int k) {
  const int v = k / 64, b = k % 64;
  return type == GgmlType::kQ6_K ? 16 * (b / 4) + 4 * v + b % 4 : 32 * (b / 8) + 8 * v + b % 8;
}
// src: a row of n elements (n a multiple of 256) of `type` (Q6_K or Q4_K) in lanes -> dst: n
// floats, bit for bit dequantize_row's values of the blocks it came from. Scalar reference.
void dequantize_lanes(GgmlType type, const void* src, float* dst, int64_t n);

// Where a ggml matrix's blocks lie in memory.
enum class GgmlLayout : uint8_t {
  kBlocks,  // as the file stores them
  kLanes,   // Q6_K or Q4_K in the CPU decode's lanes (above), made at load
};

// src: row_bytes(type, n) bytes (any alignment) -> dst: n floats. Scalar reference for
// F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K; InputError for other types or a bad n.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);
// The same for a row in either layout: dequantize_row or dequantize_lanes.
void dequantize_row(GgmlType type, GgmlLayout layout, const void* src, float* dst, int64_t n);

// The 6-bit scale and min of Q4_K sub-block j (0..7) from a block's 12 packed `scales` bytes:
// bytes 0-3 hold scales 0-3, bytes 4-7 mins 0-3 (low 6 bits each); scales/mins 4-7 keep their
// low nibbles in bytes 8-11 and their top 2 bits in the spare top bits of bytes 0-3 / 4-7.
// Inline: the kernels decode it per sub-block.
inline void q4_k_scale_min(int j, const uint8_t* s, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// The block-quantized types the kernels multiply with directly (Q8_0, Q4_0, Q4_K, Q6_K).
bool ggml_is_block_quantized(GgmlType type);

}  // namespace hearth
