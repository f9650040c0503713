// Integer kernels for 4- and 8-bit affine matrices in 16-row panels (AffineLayout::kPanels16,
// core/quant.h) on AVX-512 VNNI: y = x w^T.
//
// Per group g of weight row n (scale s, bias b, codes q) and x row t,
//   sum_k x[k] (s q[k] + b) ~= s dx sum_k q[k] xq[k] + b sum_k x[k],
// where x is rounded to int8 per group (xq = round(x / dx), dx = max|x| / 127, as llama.cpp
// rounds x per block for its Q4_0/Q8_0 dots) and the group sums of x are exact.
//
// A panel step is 64 bytes: 4 bytes of codes for each of 16 rows, all at the same 4 (8-bit) or
// 2 x 4 (4-bit) elements. vpdpbusd multiplies them with those 4 x bytes broadcast to every
// lane, so lane r accumulates row r's int32 dot over the whole group before one float step per
// group: y[t, rows] += cvt(isum) * (s[rows] * dx[t, g]) + b[rows] * xsum[t, g]. The 16 rows'
// results come out as one vector: no horizontal sums, no per-lane scale shuffles.
//
// Decode (T <= kVnniDecodeRows): each panel is read once for all x rows, as one stream, left to
// the hardware prefetchers but for the first lines of each 4 KiB page (PagePrefetchCadence).
// Prefetching every line 4 KiB ahead (into L2; into L1 was worse) held the stream to ~40 GB/s
// when the host reads 55-60, against ~50 without it (bench/RESULTS.md, 2026-12-04, stop 26).
//
// Prefill: a register tile of kR panels x kTT x rows, so each unpacked weight vector meets
// kTT x rows; x is taken in chunks that stay in L2. On a CPU with AMX (amx_active), the same
// sums on tiles instead: one tdpbsud takes a group's int32 dots for 16 x rows and a panel's 16
// rows at once (16 x 16 x 64 products), then the same float step per group, so the results
// are the VNNI kernel's to the bit.
#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/amx.h"
#include "backends/cpu/page_prefetch.h"
#include "backends/cpu/parallel_rows.h"
#include "backends/cpu/quant_kernels.h"
#include "backends/cpu/simd.h"
#include "base/error.h"

#define HEARTH_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define HEARTH_AMX \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,amx-tile,amx-int8")))

namespace hearth::cpu {
namespace {

constexpr int64_t kTChunk = 64;      // x rows per prefill chunk
constexpr int64_t kAmxRows = 16;     // x rows per AMX tile
constexpr int64_t kAmxTChunk = 128;  // x rows per AMX prefill chunk (a 4-bit panel is unpacked once per chunk)

// x rounded to int8 per group, in natural order.
struct PreparedX {
  int64_t T = 0, K = 0, groups = 0;
  int group_size = 0;
  std::vector<int8_t> q;  // [T, K] (rows past T, where padded for the AMX tiles: zero)
  // [T, groups]: dx, and each group's exact sum of x times the matrix's bias factor: 1, or for
  // symmetric codes (no biases: w = s (q - 2^(bits-1))) the zero point -2^(bits-1), so that
  // the bias term is s * xsum either way and symmetric groups multiply nothing more. Exact:
  // the factor is a power of two, so (-8 s) * sum and s * (-8 sum) are the same product.
  std::vector<float> dx, xsum;
  float sum_factor = 1.0f;
};

HEARTH_VNNI void prepare_row(const float* x, PreparedX& p, int64_t t) {
  const int64_t gs = p.group_size;
  int8_t* q = p.q.data() + t * p.K;
  for (int64_t g = 0; g < p.groups; ++g) {
    const float* xg = x + g * gs;
    __m512 amax = _mm512_setzero_ps(), sum = _mm512_setzero_ps();
    for (int64_t k = 0; k < gs; k += 16) {
      const __m512 v = _mm512_loadu_ps(xg + k);
      amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
      sum = _mm512_add_ps(sum, v);
    }
    const float m = _mm512_reduce_max_ps(amax);
    p.dx[static_cast<size_t>(t * p.groups + g)] = m / 127.0f;
    p.xsum[static_cast<size_t>(t * p.groups + g)] = _mm512_reduce_add_ps(sum) * p.sum_factor;
    const __m512 inv = _mm512_set1_ps(m > 0 ? 127.0f / m : 0.0f);
    for (int64_t k = 0; k < gs; k += 16) {
      // Round to nearest (even), as lrint does under the default rounding mode.
      const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xg + k), inv));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + g * gs + k), _mm512_cvtepi32_epi8(v));
    }
  }
}

// x rounded into p, its arrays padded with zero rows up to a multiple of pad_rows.
void prepare_x(ThreadPool* pool, const float* x, int64_t T, const AffineMatrix& w, int64_t pad_rows, PreparedX& p) {
  p.T = T;
  p.K = w.K;
  p.group_size = w.group_size;
  p.groups = w.K / w.group_size;
  const int64_t padded = (T + pad_rows - 1) / pad_rows * pad_rows;
  p.q.resize(static_cast<size_t>(padded * w.K));
  p.dx.resize(static_cast<size_t>(padded * p.groups));
  p.xsum.resize(p.dx.size());
  std::fill(p.q.begin() + T * w.K, p.q.end(), int8_t{0});
  std::fill(p.dx.begin() + T * p.groups, p.dx.end(), 0.0f);
  std::fill(p.xsum.begin() + T * p.groups, p.xsum.end(), 0.0f);
  p.sum_factor = w.panel.biases ? 1.0f : -static_cast<float>(1 << (w.bits - 1));
  auto rows = [&](int64_t a, int64_t b) {
    for (int64_t t = a; t < b; ++t) prepare_row(x + t * w.K, p, t);
  };
  if (pool != nullptr && T > 1) {
    pool->parallel_for(T, 1, rows);
  } else {
    rows(0, T);
  }
}

// 16 f16 values as f32, the load folded into the conversion (a masked load is one more
// instruction).
HEARTH_VNNI inline __m512 load16_f16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// The 16 lanes' scales of a group, at `params` in its panel, as f32.
HEARTH_VNNI inline __m512 load_scales(const uint8_t* params, DType t) {
  if (t == DType::kF32) return _mm512_loadu_ps(params);
  if (t == DType::kF16) return load16_f16(params);
  return simd::load16_bf16(reinterpret_cast<const uint16_t*>(params), 0xffff);
}

// Paired bf16 parameters (PanelLayout::paired): 32 bits per row, scale in the low half, bias in
// the high half, each widened to f32 by one instruction with the load folded in.
HEARTH_VNNI inline void load_paired(const uint8_t* params, __m512& scale, __m512& bias) {
  const auto* v = reinterpret_cast<const __m512i*>(params);
  scale = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(v), 16));
  bias = _mm512_castsi512_ps(_mm512_and_si512(_mm512_loadu_si512(v), _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

// The 16 lanes' scales and biases of a group, the format read at run time. Symmetric codes
// take the scale as their bias: PreparedX::xsum carries the zero point.
HEARTH_VNNI inline void load_any_params(const AffineMatrix& w, const uint8_t* params, __m512& scale, __m512& bias) {
  if (w.panel.paired) return load_paired(params, scale, bias);
  scale = load_scales(params, w.scale_type);
  bias = w.panel.biases ? load_scales(params + 16 * w.panel.param_size, w.scale_type) : scale;
}

// visit(g, codes, params) for the groups of a panel in order, each group's codes and
// parameters found by running pointers: a division per group cost the decode ~10%, and a
// multiplication per group (unit + i * code_bytes) still ~10% of one thread's stream.
template <typename Visit>
__attribute__((always_inline)) inline void for_each_group(const uint8_t* panel, const PanelLayout& l,
                                                          const Visit& visit) {
  const int64_t groups = l.groups, unit = l.unit, code_bytes = l.code_bytes, param_bytes = l.param_bytes;
  const uint8_t* codes = panel;
  for (int64_t g0 = 0; g0 < groups; g0 += unit) {
    const int64_t n = std::min(unit, groups - g0);
    const uint8_t* params = codes + n * code_bytes;
    const uint8_t* next = params + n * param_bytes;  // the units lie back to back
    for (int64_t g = g0; g < g0 + n; ++g, codes += code_bytes, params += param_bytes) visit(g, codes, params);
    codes = next;
  }
}

// The same walk over a panel whose group sizes are known at compile time (kCodeBytes, kParamBytes):
// no run-time strides at all.
template <int64_t kCodeBytes, int64_t kParamBytes, typename Visit>
__attribute__((always_inline)) inline void for_each_group_fixed(const uint8_t* panel, int64_t groups,
                                                                const Visit& visit) {
  constexpr int64_t kUnit = panel_unit(kParamBytes);
  const uint8_t* unit = panel;
  int64_t g = 0;
  for (; g + kUnit <= groups; g += kUnit, unit += kUnit * (kCodeBytes + kParamBytes)) {
    for (int64_t i = 0; i < kUnit; ++i)
      visit(g + i, unit + i * kCodeBytes, unit + kUnit * kCodeBytes + i * kParamBytes);
  }
  for (int64_t i = 0, n = groups - g; i < n; ++i)
    visit(g + i, unit + i * kCodeBytes, unit + n * kCodeBytes + i * kParamBytes);
}

// The parameter formats that one-row decode knows at compile time (MLX bf16 or f16 scales and
// biases; GGUF Q4_0/Q8_0's f16 scales alone), so that its group loop has no branches on them:
// GGUF Q4_0's groups of 32 lost ~10% of their stream to those branches. Others: kRuntime.
enum class ParamKind { kRuntime, kBf16, kF16, kF16Symmetric };

ParamKind param_kind(const AffineMatrix& w) {
  if (w.scale_type == DType::kBF16 && w.panel.biases) return ParamKind::kBf16;
  if (w.scale_type == DType::kF16) return w.panel.biases ? ParamKind::kF16 : ParamKind::kF16Symmetric;
  return ParamKind::kRuntime;
}

constexpr int64_t param_bytes_of(ParamKind k) { return k == ParamKind::kF16Symmetric ? 32 : 64; }

// A group's 16 scales and biases as f32 (symmetric: the scale twice, as load_any_params).
template <ParamKind kKind>
HEARTH_VNNI inline void load_params(const AffineMatrix& w, const uint8_t* params, __m512& scale, __m512& bias) {
  if constexpr (kKind == ParamKind::kRuntime) {
    load_any_params(w, params, scale, bias);
  } else if constexpr (kKind == ParamKind::kBf16) {
    load_paired(params, scale, bias);
  } else if constexpr (kKind == ParamKind::kF16) {
    scale = load16_f16(params);
    bias = load16_f16(params + 32);
  } else {
    scale = load16_f16(params);
    bias = scale;
  }
}

// acc + the dots of a's unsigned bytes with x's four signed bytes in every lane, x read by the
// instruction's own broadcast: GCC emits a separate vpbroadcastd for _mm512_set1_epi32, one
// more instruction and register per step.
HEARTH_VNNI inline __m512i dpbusd_broadcast(__m512i acc, __m512i a, const int8_t* x) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*reinterpret_cast<const int32_t*>(x)));
  return acc;
}

// acc + a * x, x broadcast by the instruction itself, into acc's own register: left to itself
// GCC picks the form that overwrites a and copies the sum back, one more instruction per group
// in the one-row decode.
HEARTH_VNNI inline __m512 fmadd_broadcast(__m512 acc, __m512 a, const float* x) {
  __asm__("vfmadd231ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*x));
  return acc;
}

HEARTH_VNNI inline __m512i broadcast4(const int8_t* x) {
  int32_t v;
  std::memcpy(&v, x, 4);
  return _mm512_set1_epi32(v);
}

// Stores the 16 lanes of panel p for x row t (fewer in the last panel) plus the bias, or adds
// them to y's old values where the part accumulates (a residual add, the old values last).
HEARTH_VNNI inline void store_rows(__m512 acc, const PanelPart& part, int64_t p, int64_t t) {
  const int64_t N = part.w.N, n0 = p * 16;
  const __mmask16 m = simd::tail_mask16(N - n0);
  float* y = part.y + t * N + n0;
  if (part.bias != nullptr) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, part.bias + n0));
  if (part.accumulate) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, y));
  _mm512_mask_storeu_ps(y, m, acc);
}

// 64 bytes loaded into a register that stays the only copy. Left alone, GCC folds the load into
// each instruction that uses it (two ands per x row here), and those repeated loads held one
// core's in-cache rate at ~73 GB/s against ~106 with one load (T = 1; more with more x rows).
HEARTH_VNNI inline __m512i load_once(const uint8_t* p) {
  __m512i v = _mm512_loadu_si512(p);
  __asm__("" : "+v"(v));  // opaque to the optimizer: v cannot be rematerialized from memory
  return v;
}

// The int32 dots of one group of a panel's 16 rows (lane r: row r) with kT rows of x, src at
// the group's first step and xq at its first element of x row 0; the loop over the group's
// kSteps steps unrolls whole. Two accumulators per x row keep two vpdpbusd chains in flight: the 4-bit low and
// high nibbles, or alternate 8-bit steps. A 4-bit high nibble stays in place (v & 0xf0, 16 times
// its code), so one shift per group (exact: the sum is a multiple of 16) replaces one per step.
template <int kBits, int kT, int kSteps>
HEARTH_VNNI inline void group_dots(const uint8_t* src, const int8_t* xq, int64_t K, __m512i (&dot)[kT]) {
  constexpr int64_t kPerStep = kBits == 4 ? 8 : 4;
  __m512i s0[kT], s1[kT];
  for (int t = 0; t < kT; ++t) s0[t] = s1[t] = _mm512_setzero_si512();
#pragma GCC unroll 32
  for (int j = 0; j < kSteps; ++j) {
    const __m512i v = load_once(src + j * 64);
    for (int t = 0; t < kT; ++t) {
      const int8_t* x = xq + t * K + j * kPerStep;
      if constexpr (kBits == 4) {
        s0[t] = dpbusd_broadcast(s0[t], _mm512_and_si512(v, _mm512_set1_epi8(0x0f)), x);
        s1[t] = dpbusd_broadcast(s1[t], _mm512_and_si512(v, _mm512_set1_epi8(static_cast<char>(0xf0))), x + 4);
      } else if (j % 2 == 0) {
        s0[t] = dpbusd_broadcast(s0[t], v, x);
      } else {
        s1[t] = dpbusd_broadcast(s1[t], v, x);
      }
    }
  }
  for (int t = 0; t < kT; ++t) dot[t] = _mm512_add_epi32(s0[t], kBits == 4 ? _mm512_srai_epi32(s1[t], 4) : s1[t]);
}

// Decode: panels p0 .. p1 against all kT rows of x, one group after another.
template <int kBits, int kT, int kSteps, ParamKind kKind>
HEARTH_VNNI void decode_panels(const PreparedX& x, const PanelPart& part, int64_t p0, int64_t p1) {
  const AffineMatrix& w = part.w;
  constexpr int64_t kPerStep = kBits == 4 ? 8 : 4;
  constexpr int64_t kGroupSize = kSteps * kPerStep;
  const int64_t K = x.K, groups = x.groups;
  const auto* codes = reinterpret_cast<const uint8_t*>(w.packed);
  // The longest step from one group's codes to the next's.
  PagePrefetchCadence cadence(w.panel.code_bytes + w.panel.unit * w.panel.param_bytes);
  for (int64_t p = p0; p < p1; ++p) {
    __m512 acc[kT];
    for (int t = 0; t < kT; ++t) acc[t] = _mm512_setzero_ps();
    const int8_t* xq = x.q.data();  // group g's first element of x row 0, by a running pointer
    auto group = [&](int64_t g, const uint8_t* src, const uint8_t* params) HEARTH_VNNI {
      __m512i dot[kT];
      cadence.step(src);
      group_dots<kBits, kT, kSteps>(src, xq, K, dot);
      xq += kGroupSize;
      __m512 scale, b;
      load_params<kKind>(w, params, scale, b);
      for (int t = 0; t < kT; ++t) {
        const size_t tg = static_cast<size_t>(t * groups + g);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[t]), _mm512_mul_ps(scale, _mm512_set1_ps(x.dx[tg])), acc[t]);
        acc[t] = fmadd_broadcast(acc[t], b, &x.xsum[tg]);
      }
    };
    const uint8_t* panel = codes + p * w.panel.panel_bytes;
    if constexpr (kKind == ParamKind::kRuntime) {
      for_each_group(panel, w.panel, group);
    } else {
      for_each_group_fixed<kSteps * 64, param_bytes_of(kKind)>(panel, groups, group);
    }
    for (int t = 0; t < kT; ++t) store_rows(acc[t], part, p, t);
  }
}

// The group sizes (32, 64, 128: core/quant.cpp admits no other) as compile-time step counts.
template <int kBits, int kT, ParamKind kKind = ParamKind::kRuntime>
void decode_sized(const PreparedX& x, const PanelPart& part, int64_t p0, int64_t p1) {
  constexpr int kPerStep = kBits == 4 ? 8 : 4;
  switch (x.group_size) {
    case 32: decode_panels<kBits, kT, 32 / kPerStep, kKind>(x, part, p0, p1); break;
    case 64: decode_panels<kBits, kT, 64 / kPerStep, kKind>(x, part, p0, p1); break;
    case 128: decode_panels<kBits, kT, 128 / kPerStep, kKind>(x, part, p0, p1); break;
    default: HEARTH_CHECK_MSG(false, "panel decode: group size " + std::to_string(x.group_size));
  }
}

// One row of x (decode proper) by parameter format; 2-4 rows read the format at run time.
template <int kBits>
void decode_one_row(const PreparedX& x, const PanelPart& part, int64_t p0, int64_t p1) {
  const ParamKind kind = param_kind(part.w);
  HEARTH_CHECK(kind == ParamKind::kRuntime || part.w.panel.param_bytes == param_bytes_of(kind));
  switch (kind) {
    case ParamKind::kBf16: decode_sized<kBits, 1, ParamKind::kBf16>(x, part, p0, p1); break;
    case ParamKind::kF16: decode_sized<kBits, 1, ParamKind::kF16>(x, part, p0, p1); break;
    case ParamKind::kF16Symmetric: decode_sized<kBits, 1, ParamKind::kF16Symmetric>(x, part, p0, p1); break;
    case ParamKind::kRuntime: decode_sized<kBits, 1>(x, part, p0, p1); break;
  }
}

template <int kBits>
void decode_any(const PreparedX& x, const PanelPart& part, int64_t p0, int64_t p1) {
  switch (x.T) {
    case 1: decode_one_row<kBits>(x, part, p0, p1); break;
    case 2: decode_sized<kBits, 2>(x, part, p0, p1); break;
    case 3: decode_sized<kBits, 3>(x, part, p0, p1); break;
    default: decode_sized<kBits, 4>(x, part, p0, p1); break;
  }
}

// One step's codes as the vectors vpdpbusd takes: 8 bits as they are; 4 bits split into the
// low nibbles (elements +0..3 of each lane) and the high nibbles (+4..7).
template <int kBits>
HEARTH_VNNI inline void unpack(const uint8_t* src, __m512i& lo, __m512i& hi) {
  const __m512i v = load_once(src);
  if constexpr (kBits == 4) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    lo = _mm512_and_si512(v, low4);
    hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
  } else {
    lo = v;
    hi = v;
  }
}

// Prefill: panels p .. p + kR against x rows t0 .. t0 + kTT.
template <int kBits, int kR, int kTT>
HEARTH_VNNI void gemm_tile(const PreparedX& x, const PanelPart& part, int64_t p, int64_t t0) {
  const AffineMatrix& w = part.w;
  constexpr int64_t kPerStep = kBits == 4 ? 8 : 4;
  const int64_t K = x.K, groups = x.groups, gs = x.group_size, steps = gs / kPerStep;
  const int64_t panel_bytes = w.panel.panel_bytes;
  const uint8_t* panel = reinterpret_cast<const uint8_t*>(w.packed) + p * panel_bytes;
  const int8_t* xrow = x.q.data() + t0 * K;
  __m512 acc[kR][kTT];
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kTT; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  // The kR panels' groups lie at the same offsets in each.
  for_each_group(panel, w.panel, [&](int64_t g, const uint8_t* src, const uint8_t* params) HEARTH_VNNI {
    __m512i isum[kR][kTT];
    for (int r = 0; r < kR; ++r) {
      for (int t = 0; t < kTT; ++t) isum[r][t] = _mm512_setzero_si512();
    }
    for (int64_t j = 0; j < steps; ++j, src += 64) {
      __m512i lo[kR], hi[kR];
      for (int r = 0; r < kR; ++r) unpack<kBits>(src + r * panel_bytes, lo[r], hi[r]);
      const int64_t k = g * gs + j * kPerStep;
      for (int t = 0; t < kTT; ++t) {
        const __m512i xl = broadcast4(xrow + t * K + k);
        for (int r = 0; r < kR; ++r) isum[r][t] = _mm512_dpbusd_epi32(isum[r][t], lo[r], xl);
        if constexpr (kBits == 4) {
          const __m512i xh = broadcast4(xrow + t * K + k + 4);
          for (int r = 0; r < kR; ++r) isum[r][t] = _mm512_dpbusd_epi32(isum[r][t], hi[r], xh);
        }
      }
    }
    for (int r = 0; r < kR; ++r) {
      __m512 scale, b;
      load_any_params(w, params + r * panel_bytes, scale, b);
      for (int t = 0; t < kTT; ++t) {
        const size_t tg = static_cast<size_t>((t0 + t) * groups + g);
        const __m512 d = _mm512_cvtepi32_ps(isum[r][t]);
        acc[r][t] = _mm512_fmadd_ps(d, _mm512_mul_ps(scale, _mm512_set1_ps(x.dx[tg])), acc[r][t]);
        acc[r][t] = _mm512_fmadd_ps(b, _mm512_set1_ps(x.xsum[tg]), acc[r][t]);
      }
    }
  });
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kTT; ++t) store_rows(acc[r][t], part, p + r, t0 + t);
  }
}

template <int kBits, int kR>
void gemm_panels(const PreparedX& x, const PanelPart& part, int64_t p, int64_t t0, int64_t t1) {
  constexpr int kTT = 4;
  int64_t t = t0;
  for (; t + kTT <= t1; t += kTT) gemm_tile<kBits, kR, kTT>(x, part, p, t);
  for (; t < t1; ++t) gemm_tile<kBits, kR, 1>(x, part, p, t);
}

template <int kBits>
void gemm_range(const PreparedX& x, const PanelPart& part, int64_t p0, int64_t p1) {
  constexpr int kR = 2;
  for (int64_t t0 = 0; t0 < x.T; t0 += kTChunk) {
    const int64_t t1 = std::min(x.T, t0 + kTChunk);
    int64_t p = p0;
    for (; p + kR <= p1; p += kR) gemm_panels<kBits, kR>(x, part, p, t0, t1);
    for (; p < p1; ++p) gemm_panels<kBits, 1>(x, part, p, t0, t1);
  }
}

// ---- Prefill on AMX tiles. C holds a group's int32 dots [16 x rows][16 panel rows]; A x's int8
// [16 x rows][piece bytes of k]; B the codes [piece / 4][16 rows x 4 bytes], B[i][r][j] being row
// r's code of element 4i + j: a run of 8-bit panel steps as they lie.

// A 4-bit panel's codes as the B tiles take them, one byte each: step j of group g (elements
// 8j .. 8j + 7 of each row) gives its low nibbles (+0..3) as 64-byte row 2j of the group and its
// high nibbles (+4..7) as row 2j + 1, so element k of the row lies in row k / 4 as 8-bit codes do.
HEARTH_AMX void unpack_panel4(const uint8_t* panel, const PanelLayout& l, int64_t group_size, uint8_t* out) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  for_each_group(panel, l, [&](int64_t g, const uint8_t* src, const uint8_t*) HEARTH_AMX {
    uint8_t* dst = out + g * group_size / 4 * 64;
    for (int64_t j = 0; j < group_size / 8; ++j) {
      const __m512i v = _mm512_loadu_si512(src + j * 64);
      _mm512_storeu_si512(dst + 2 * j * 64, _mm512_and_si512(v, low4));
      _mm512_storeu_si512(dst + (2 * j + 1) * 64, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
    }
  });
}

// One group's int32 dots for a tile of 16 x rows: C = x [16][gs] (int8, rows K apart) times the
// codes (B rows of 64 bytes, gs / 4 of them), `piece` k per instruction, through tiles A and B.
// Tile numbers are literal in the instructions, so there is one function per triple.
#define HEARTH_GROUP_DOTS(NAME, C, A, B)                                                                     \
  HEARTH_AMX inline void NAME(const int8_t* x, int64_t K, const uint8_t* codes, int64_t gs, int64_t piece) { \
    _tile_zero(C);                                                                                           \
    for (int64_t k = 0; k < gs; k += piece) {                                                                \
      _tile_loadd(A, x + k, K);                                                                              \
      _tile_loadd(B, codes + k / 4 * 64, 64);                                                                \
      _tile_dpbsud(C, A, B);                                                                                 \
    }                                                                                                        \
  }
HEARTH_GROUP_DOTS(group_dots_in_0, 0, 4, 5)
HEARTH_GROUP_DOTS(group_dots_in_1, 1, 6, 7)
HEARTH_GROUP_DOTS(group_dots_in_2, 2, 4, 5)
HEARTH_GROUP_DOTS(group_dots_in_3, 3, 6, 7)
#undef HEARTH_GROUP_DOTS

// Panel p against x rows t0 .. t0 + 16 (rows past x.T are zero padding, not stored). codes: the
// panel's unpacked codes (4 bits) or null (8 bits: the tiles load the panel itself). Group g's
// dots go to tile g % 4, three groups ahead of the one the vector units scale, so that the tile
// unit is never waited for (two in flight, tiles 0 and 3: 4-bit 1.2x and 8-bit 1.4x slower on
// one core of the device's Xeon; bench/RESULTS.md, stop 53).
template <int kBits>
HEARTH_AMX void amx_tile(const PreparedX& x, const PanelPart& part, int64_t p, int64_t t0, const uint8_t* codes,
                         int64_t piece) {
  const AffineMatrix& w = part.w;
  const PanelLayout& l = w.panel;
  const int64_t K = x.K, groups = x.groups, gs = x.group_size;
  const uint8_t* panel = reinterpret_cast<const uint8_t*>(w.packed) + p * l.panel_bytes;
  const int8_t* xrow = x.q.data() + t0 * K;
  auto start_group = [&](int64_t g) HEARTH_AMX {
    const int8_t* xg = xrow + g * gs;
    const uint8_t* cg = kBits == 8 ? panel + l.codes_at(g) : codes + g * gs / 4 * 64;
    switch (g % 4) {
      case 0: group_dots_in_0(xg, K, cg, gs, piece); break;
      case 1: group_dots_in_1(xg, K, cg, gs, piece); break;
      case 2: group_dots_in_2(xg, K, cg, gs, piece); break;
      default: group_dots_in_3(xg, K, cg, gs, piece); break;
    }
  };
  alignas(64) int32_t dots[kAmxRows][16];
  auto store_group = [&](int64_t g) HEARTH_AMX {
    switch (g % 4) {
      case 0: _tile_stored(0, dots, 64); break;
      case 1: _tile_stored(1, dots, 64); break;
      case 2: _tile_stored(2, dots, 64); break;
      default: _tile_stored(3, dots, 64); break;
    }
  };
  __m512 acc[kAmxRows];
#pragma GCC unroll 16
  for (int t = 0; t < kAmxRows; ++t) acc[t] = _mm512_setzero_ps();
  constexpr int64_t kAhead = 3;
  for (int64_t g = 0; g < std::min(kAhead, groups); ++g) start_group(g);
  for (int64_t g = 0; g < groups; ++g) {
    if (g + kAhead < groups) start_group(g + kAhead);
    store_group(g);
    __m512 scale, b;
    load_any_params(w, panel + l.params_at(g), scale, b);
    const float* dx = x.dx.data() + t0 * groups + g;
    const float* xsum = x.xsum.data() + t0 * groups + g;
#pragma GCC unroll 16
    for (int t = 0; t < kAmxRows; ++t) {
      const __m512 d = _mm512_cvtepi32_ps(_mm512_load_si512(dots[t]));
      acc[t] = _mm512_fmadd_ps(d, _mm512_mul_ps(scale, _mm512_set1_ps(dx[t * groups])), acc[t]);
      acc[t] = _mm512_fmadd_ps(b, _mm512_set1_ps(xsum[t * groups]), acc[t]);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < kAmxRows; ++t) {
    if (t0 + t < x.T) store_rows(acc[t], part, p, t0 + t);
  }
}

// Panels p0 .. p1 against every row of x, x in chunks of kAmxTChunk rows (in L2), each 4-bit
// panel unpacked once per chunk. The tiles are configured for this thread and released after.
template <int kBits>
HEARTH_AMX void amx_gemm_range(const PreparedX& x, const PanelPart& part, int64_t p0, int64_t p1) {
  const int64_t piece = std::min<int64_t>(x.group_size, 64);  // k per tdpbsud: a group or a 64-element part of one
  TileConfig cfg;
  for (int c = 0; c < 4; ++c) cfg.shape(c, kAmxRows, 64);  // C (amx_tile)
  for (int a : {4, 6}) {                                   // A and B, twice
    cfg.shape(a, kAmxRows, static_cast<int>(piece));
    cfg.shape(a + 1, static_cast<int>(piece / 4), 64);
  }
  cfg.load();
  thread_local std::vector<uint8_t> unpacked;
  if (kBits == 4) unpacked.resize(static_cast<size_t>(x.K / 4 * 64));
  for (int64_t c0 = 0; c0 < x.T; c0 += kAmxTChunk) {
    const int64_t c1 = std::min(x.T, c0 + kAmxTChunk);
    for (int64_t p = p0; p < p1; ++p) {
      if constexpr (kBits == 4) {
        unpack_panel4(reinterpret_cast<const uint8_t*>(part.w.packed) + p * part.w.panel.panel_bytes, part.w.panel,
                      x.group_size, unpacked.data());
        // GCC's tileloadd asm does not say it reads memory: the unpacked codes must be stored first.
        __asm__ volatile("" ::: "memory");
      }
      for (int64_t t0 = c0; t0 < c1; t0 += kAmxRows) amx_tile<kBits>(x, part, p, t0, unpacked.data(), piece);
    }
  }
  _tile_release();
}

}  // namespace

void panel_matmul_group(ThreadPool* pool, const float* x, int64_t T, std::span<const PanelPart> parts) {
  // The calling thread's buffers, reused across calls; named through a plain reference so that
  // the pool's threads read these and not their own thread_local copies.
  thread_local PreparedX buffers;
  PreparedX& p = buffers;
  const bool decode = T <= kVnniDecodeRows;
  const bool amx = !decode && amx_active(Isa::kAvx512);
  prepare_x(pool, x, T, parts[0].w, amx ? kAmxRows : 1, p);
  // The parts' panels as one range, so that each thread streams one run of rows through the
  // group instead of a share of every matrix, and the group pays for one fork and join.
  std::vector<int64_t> starts(parts.size() + 1, 0);
  for (size_t i = 0; i < parts.size(); ++i) {
    HEARTH_CHECK(parts[i].w.K == p.K && parts[i].w.group_size == p.group_size && parts[i].w.panels);
    starts[i + 1] = starts[i] + (parts[i].w.N + 15) / 16;
  }
  auto run = [&](int64_t a, int64_t b) {
    if (decode) {  // x, once per chunk for all the parts: see prefetch_buffer
      prefetch_buffer(p.q.data(), p.q.size());
      prefetch_buffer(p.dx.data(), p.dx.size());
      prefetch_buffer(p.xsum.data(), p.xsum.size());
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      const int64_t lo = std::max(a, starts[i]) - starts[i], hi = std::min(b, starts[i + 1]) - starts[i];
      if (lo >= hi) continue;
      const PanelPart& part = parts[i];
      if (decode) {
        part.w.bits == 4 ? decode_any<4>(p, part, lo, hi) : decode_any<8>(p, part, lo, hi);
      } else if (amx) {
        part.w.bits == 4 ? amx_gemm_range<4>(p, part, lo, hi) : amx_gemm_range<8>(p, part, lo, hi);
      } else {
        part.w.bits == 4 ? gemm_range<4>(p, part, lo, hi) : gemm_range<8>(p, part, lo, hi);
      }
    }
  };
  parallel_rows(pool, starts.back(), 1, run);
}

void panel_matmul(ThreadPool* pool, const float* x, int64_t T, const AffineMatrix& w, const float* bias, float* y) {
  const PanelPart part{w, bias, y, false};
  panel_matmul_group(pool, x, T, std::span<const PanelPart>(&part, 1));
}

}  // namespace hearth::cpu
