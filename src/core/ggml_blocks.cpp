#include "core/ggml_blocks.h"

#include <array>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "core/dtype.h"

namespace hearth {

namespace {

// Block geometry from ggml-common.h (sizeof each block_* struct).
constexpr GgmlTypeInfo kTypes[] = {
    {GgmlType::kF32, "F32", 1, 4, true},
    {GgmlType::kF16, "F16", 1, 2, true},
    {GgmlType::kQ4_0, "Q4_0", 32, 18, true},
    {GgmlType::kQ4_1, "Q4_1", 32, 20, false},
    {GgmlType::kQ5_0, "Q5_0", 32, 22, false},
    {GgmlType::kQ5_1, "Q5_1", 32, 24, false},
    {GgmlType::kQ8_0, "Q8_0", 32, 34, true},
    {GgmlType::kQ8_1, "Q8_1", 32, 36, false},
    {GgmlType::kQ2_K, "Q2_K", 256, 84, false},
    {GgmlType::kQ3_K, "Q3_K", 256, 110, false},
    {GgmlType::kQ4_K, "Q4_K", 256, 144, true},
    {GgmlType::kQ5_K, "Q5_K", 256, 176, false},
    {GgmlType::kQ6_K, "Q6_K", 256, 210, true},
    {GgmlType::kQ8_K, "Q8_K", 256, 292, false},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66, false},
    {GgmlType::kIQ2_XS, "IQ2_XS", 256, 74, false},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98, false},
    {GgmlType::kIQ1_S, "IQ1_S", 256, 50, false},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, 18, false},
    {GgmlType::kIQ3_S, "IQ3_S", 256, 110, false},
    {GgmlType::kIQ2_S, "IQ2_S", 256, 82, false},
    {GgmlType::kIQ4_XS, "IQ4_XS", 256, 136, false},
    {GgmlType::kI8, "I8", 1, 1, false},
    {GgmlType::kI16, "I16", 1, 2, false},
    {GgmlType::kI32, "I32", 1, 4, false},
    {GgmlType::kI64, "I64", 1, 8, false},
    {GgmlType::kF64, "F64", 1, 8, false},
    {GgmlType::kIQ1_M, "IQ1_M", 256, 56, false},
    {GgmlType::kBF16, "BF16", 1, 2, true},
    {GgmlType::kTQ1_0, "TQ1_0", 256, 54, false},
    {GgmlType::kTQ2_0, "TQ2_0", 256, 66, false},
    {GgmlType::kMXFP4, "MXFP4", 32, 17, false},
    {GgmlType::kNVFP4, "NVFP4", 64, 36, false},
    {GgmlType::kQ1_0, "Q1_0", 128, 18, false},
    {GgmlType::kQ2_0, "Q2_0", 64, 18, false},
};

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float load_f16(const uint8_t* p) { return f16_to_f32(load_u16(p)); }

// Q8_0 block: d (f16) | qs[32] (int8).
void dequantize_q8_0(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += sizeof(BlockQ8_0), y += 32) {
    const float d = load_f16(src);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(src[2 + j])) * d;
  }
}

// Q4_0 block: d (f16) | qs[16]; low nibbles are elements 0..15, high nibbles 16..31.
void dequantize_q4_0(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += sizeof(BlockQ4_0), y += 32) {
    const float d = load_f16(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((qs[j] & 0xF) - 8) * d;
      y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

// Q4_K block: d | dmin | scales[12] | qs[128]. Each 64 elements use 32 bytes of qs: low
// nibbles are sub-block 2c, high nibbles sub-block 2c + 1.
void dequantize_q4_k(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += sizeof(BlockQ4_K)) {
    const float d = load_f16(src);
    const float dmin = load_f16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* q = src + 16;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc, m;
      q4_k_scale_min(2 * c, scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      q4_k_scale_min(2 * c + 1, scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

// Q6_K block: ql[128] | qh[64] | scales[16] (int8) | d. Per half of 128 elements (ql += 64,
// qh += 32, scales += 8), element 32*g + l takes its low nibble from ql[l + 32*(g&1)] (low
// nibble for g < 2, high for g >= 2) and bits 2g..2g+1 of qh[l] as its top two bits.
void dequantize_q6_k(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += sizeof(BlockQ6_K)) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
    const float d = load_f16(src + 208);
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * static_cast<float>(q1);
        y[l + 32] = d * sc[is + 2] * static_cast<float>(q2);
        y[l + 64] = d * sc[is + 4] * static_cast<float>(q3);
        y[l + 96] = d * sc[is + 6] * static_cast<float>(q4);
      }
    }
  }
}

// 8 six-bit values (one a byte) -> 48 bits in 6 bytes at dst (8 bytes written: the top two are
// the next field's to overwrite).
void pack_six(const uint8_t* values, uint8_t* dst) {
  uint64_t v;
  std::memcpy(&v, values, 8);
  v = (v & 0x003f003f003f003fu) | ((v & 0x3f003f003f003f00u) >> 2);
  v = (v & 0x00000fff00000fffu) | ((v & 0x0fff00000fff0000u) >> 4);
  v = (v & 0x0000000000ffffffu) | ((v & 0x00ffffff00000000u) >> 8);
  std::memcpy(dst, &v, 8);
}

// The reverse: 6 bytes at src (8 read) -> 8 six-bit values, one a byte, in a word.
uint64_t unpack_six(const uint8_t* src) {
  uint64_t v;
  std::memcpy(&v, src, 8);
  v = (v & 0x0000000000ffffffu) | ((v & 0x0000ffffff000000u) << 8);
  v = (v & 0x00000fff00000fffu) | ((v & 0x00fff00000fff000u) << 4);
  return (v & 0x003f003f003f003fu) | ((v & 0x0fc00fc00fc00fc0u) << 2);
}

}  // namespace

void q6_k_blocks_to_lanes(const uint8_t* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += sizeof(BlockQ6_K), dst += sizeof(BlockQ6_K)) {
    // The block's 256 codes in element order, as dequantize_q6_k reads them.
    uint8_t codes[256];
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = src + 64 * half;
      const uint8_t* qh = src + 128 + 32 * half;
      uint8_t* c = codes + 128 * half;
      for (int l = 0; l < 32; ++l) {
        c[l] = static_cast<uint8_t>((ql[l] & 0xF) | ((qh[l] & 3) << 4));
        c[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
        c[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
        c[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
      }
    }
    // In lanes order, then each 8 codes' six-bit fields squeezed into 48 bits (pairs into 12
    // bits of 16, those into 24 of 32, those into 48 of 64) and stored as 8 bytes: the next
    // store (or the scales') overwrites the top two.
    static constexpr auto kOrder = [] {
      std::array<uint8_t, 256> t{};
      for (int k = 0; k < 256; ++k) t[static_cast<size_t>(k)] = static_cast<uint8_t>(lanes_element(GgmlType::kQ6_K, k));
      return t;
    }();
    uint8_t ordered[256];
    for (int k = 0; k < 256; ++k) ordered[k] = codes[kOrder[static_cast<size_t>(k)]];
    for (int q = 0; q < 32; ++q) pack_six(ordered + 8 * q, dst + 6 * q);
    std::memcpy(dst + 192, src + 192, 18);  // scales, d (after the codes' last store)
  }
}

namespace {

void dequantize_q6_k_lanes(const uint8_t* p, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, p += sizeof(BlockQ6_K), dst += 256) {
    const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
    const float d = load_f16(p + 208);
    // Each 8 codes' 48 bits spread to a byte apiece (24 bits into each half, 12 into each
    // quarter, 6 into each byte: the repack's steps backwards). The 8-byte loads end at byte
    // 193 at most, inside the block.
    for (int q8 = 0; q8 < 32; ++q8) {
      const uint64_t v = unpack_six(p + 6 * q8);
      for (int i = 0; i < 8; ++i) {
        const int chunk = q8 / 8, k = 8 * (q8 % 8) + i;
        const int q = static_cast<int>((v >> (8 * i)) & 63);
        dst[lanes_element(GgmlType::kQ6_K, 64 * chunk + k)] = d * sc[k / 4] * static_cast<float>(q - 32);
      }
    }
  }
}

void dequantize_q4_k_lanes(const uint8_t* p, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, p += sizeof(BlockQ4_K), dst += 256) {
    const float d = load_f16(p), dmin = load_f16(p + 2);
    const uint64_t scales = unpack_six(p + 4), mins = unpack_six(p + 10);
    float d1[8], m1[8];
    for (int s = 0; s < 8; ++s) {
      d1[s] = d * static_cast<float>((scales >> (8 * s)) & 63);  // as dequantize_q4_k
      m1[s] = dmin * static_cast<float>((mins >> (8 * s)) & 63);
    }
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 64; ++k) {
        const uint8_t byte = p[16 + 64 * h + k];
        for (int hi = 0; hi < 2; ++hi) {
          const int e = lanes_element(GgmlType::kQ4_K, 64 * (2 * h + hi) + k);
          dst[e] = d1[e / 32] * static_cast<float>(hi != 0 ? byte >> 4 : byte & 0xF) - m1[e / 32];
        }
      }
    }
  }
}

}  // namespace

void q4_k_blocks_to_lanes(const uint8_t* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += sizeof(BlockQ4_K), dst += sizeof(BlockQ4_K)) {
    uint8_t codes[256], scales[8], mins[8];
    for (int c = 0; c < 4; ++c) {  // as dequantize_q4_k: 32 bytes, sub-blocks 2c (low), 2c + 1
      for (int l = 0; l < 32; ++l) {
        codes[64 * c + l] = src[16 + 32 * c + l] & 0xF;
        codes[64 * c + 32 + l] = src[16 + 32 * c + l] >> 4;
      }
    }
    for (int s = 0; s < 8; ++s) q4_k_scale_min(s, src + 4, &scales[s], &mins[s]);
    uint8_t head[16 + 8];
    std::memcpy(head, src, 4);
    pack_six(scales, head + 4);
    pack_six(mins, head + 10);
    std::memcpy(dst, head, 16);
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 64; ++k) {
        dst[16 + 64 * h + k] = static_cast<uint8_t>(codes[lanes_element(GgmlType::kQ4_K, 128 * h + k)] |
                                                    (codes[lanes_element(GgmlType::kQ4_K, 128 * h + 64 + k)] << 4));
      }
    }
  }
}

void dequantize_lanes(GgmlType type, const void* src, float* dst, int64_t n) {
  row_bytes(type, n);  // validates n
  const auto* p = static_cast<const uint8_t*>(src);
  if (type == GgmlType::kQ6_K) {
    dequantize_q6_k_lanes(p, dst, n);
  } else if (type == GgmlType::kQ4_K) {
    dequantize_q4_k_lanes(p, dst, n);
  } else {
    throw Unsupported("ggml type " + std::string(ggml_type_name(type)) + " has no lanes layout (Q6_K and Q4_K do)");
  }
}

void dequantize_row(GgmlType type, GgmlLayout layout, const void* src, float* dst, int64_t n) {
  if (layout == GgmlLayout::kLanes) {
    dequantize_lanes(type, src, dst, n);
  } else {
    dequantize_row(type, src, dst, n);
  }
}

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const GgmlTypeInfo& t : kTypes)
    if (static_cast<uint32_t>(t.type) == id) return &t;
  return nullptr;
}

const GgmlTypeInfo& ggml_type_info(GgmlType type) {
  const GgmlTypeInfo* t = ggml_type_info(static_cast<uint32_t>(type));
  HEARTH_CHECK_MSG(t != nullptr, "GgmlType " + std::to_string(static_cast<uint32_t>(type)));
  return *t;
}

uint64_t row_bytes(GgmlType type, int64_t n) {
  const GgmlTypeInfo& t = ggml_type_info(type);
  if (n < 0) throw InputError(std::string(t.name) + " row of " + std::to_string(n) + " elements");
  if (n % t.block_size != 0) {
    throw InputError(std::string(t.name) + " row of " + std::to_string(n) +
                     " elements is not a multiple of the block size " + std::to_string(t.block_size));
  }
  const uint64_t blocks = static_cast<uint64_t>(n / t.block_size);
  if (blocks > std::numeric_limits<uint64_t>::max() / t.block_bytes)
    throw InputError(std::string(t.name) + " row of " + std::to_string(n) + " elements: byte size overflows");
  return blocks * t.block_bytes;
}

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  const GgmlTypeInfo& t = ggml_type_info(type);
  row_bytes(type, n);  // validates n
  const auto* p = static_cast<const uint8_t*>(src);
  const int64_t n_blocks = n / t.block_size;
  switch (type) {
    case GgmlType::kF32: std::memcpy(dst, p, static_cast<size_t>(n) * 4); return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = load_f16(p + 2 * i);
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(p + 2 * i));
      return;
    case GgmlType::kQ8_0: dequantize_q8_0(p, dst, n_blocks); return;
    case GgmlType::kQ4_0: dequantize_q4_0(p, dst, n_blocks); return;
    case GgmlType::kQ4_K: dequantize_q4_k(p, dst, n_blocks); return;
    case GgmlType::kQ6_K: dequantize_q6_k(p, dst, n_blocks); return;
    default: break;
  }
  throw Unsupported(std::string("ggml type ") + t.name + " cannot be dequantized (supported: F32, F16, BF16, Q8_0, " +
                    "Q4_0, Q4_K, Q6_K)");
}

bool ggml_is_block_quantized(GgmlType type) {
  return type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0 || type == GgmlType::kQ4_K || type == GgmlType::kQ6_K;
}

}  // namespace hearth
