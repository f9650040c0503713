// CPU kernels on raw pointers, one entry point per op, each taking the ISA to run with so
// tests can compare every variant against the scalar reference. Shapes as in core/ops.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "backends/cpu/isa.h"
#include "base/thread_pool.h"
#include "core/attention_args.h"
#include "core/dtype.h"
#include "core/ops.h"

namespace hearth::cpu {

// sum_k a[k] * b[k]; b is f32, bf16 or f16.
float dot(Isa isa, const float* a, const void* b, DType b_type, int64_t n);

// dst[i] = float(src[i]) for a float dtype src (embedding rows, dequantizing copies).
void convert_row(Isa isa, const void* src, DType src_type, int64_t n, float* dst);

// x: [T, K] f32, w: [N, K] (w_type), bias: [N] f32 or null -> y: [T, N] f32.
void matmul(Isa isa, ThreadPool* pool, const float* x, int64_t T, int64_t K, const void* w, DType w_type, int64_t N,
            const float* bias, float* y);
// Whether matmul rounds x to bf16 for these arguments: bf16 weights, more than 4 rows of x, on
// AVX-512 with AVX512-BF16 (matmul_bf16_dots). Everything else keeps x in f32.
bool matmul_rounds_x_to_bf16(Isa isa, DType w_type, int64_t T);
// matmul's prefill paths (matmul_tiles.cpp), register tiles over weight panels: bf16 weights
// with x rounded to bf16 (nearest even) and vdpbf16ps, f32 sums (needs has_avx512_bf16()); any
// float weights with x in f32 and FMAs (isa: kAvx512 or kAvx2).
void matmul_bf16_dots(ThreadPool* pool, const float* x, int64_t T, int64_t K, const uint16_t* w, int64_t N,
                      const float* bias, float* y);
void matmul_fma_tiles(Isa isa, ThreadPool* pool, const float* x, int64_t T, int64_t K, const void* w, DType w_type,
                      int64_t N, const float* bias, float* y);
// Prefill of a quantized matrix [N, K] (rows n0..n1 of y: [T, N]) on AVX-512 or AVX2:
// kDequantTileRows rows at a time are dequantized (dequantize_row(n, out[K])) and go through the
// dense tiles, single-threaded (the caller splits rows, best in multiples of kDequantTileRows). x comes prepared once
// per call: rounded to bf16 where matmul_rounds_x_to_bf16(isa, kBF16, T), and then the tiles are bf16 too; else f32.
constexpr int64_t kDequantTileRows = 32;
// bf16 prefill on AMX tiles (matmul_amx.cpp, where amx_active and K % 32 == 0): x's bf16 rows
// packed as the tiles take them, and weight panels of kAmxPanelRows rows against it.
constexpr int64_t kAmxPanelRows = 32;
struct AmxX {
  std::vector<uint32_t> pack;  // per pair of 16-row x tiles and 32-k chunk, 1 KiB a tile; empty: no AMX
  int64_t T = 0, chunks = 0, tiles = 0;
};
AmxX amx_pack_x(const uint16_t* xb, int64_t T, int64_t Kp);
// y[t, n] (row stride ldy; n < rows) = dot(x row t, weight row n) + bias[n] for panels of
// kAmxPanelRows bf16 rows back to back in w (rows past `rows` in the last one finite: their sums
// are dropped), row n's chunk k (32 values) at w + (n / kAmxPanelRows * K / 32 + k) *
// kAmxPanelRows * 32 + n % kAmxPanelRows * 32. Needs this thread's tiles configured by
// amx_configure_bf16_tiles (amx_release_tiles after the last panel).
void amx_bf16_rows(const AmxX& x, const uint16_t* w, int64_t rows, float* y, int64_t ldy, const float* bias);
// Rows of weights that amx_bf16_rows best takes at once for K and `threads` sharing N rows: as
// many panels as fit ~1 MiB (they stay in L2 with an x tile pair), at most 8, and (threads > 1)
// few enough that each thread gets two groups.
int64_t amx_group_rows(int64_t K, int64_t N, int64_t threads);
void amx_configure_bf16_tiles();
void amx_release_tiles();
// y = x w^T + bias over all of w [N, K] (the HF layout), split across the pool by panels.
void amx_bf16_matmul(ThreadPool* pool, const AmxX& x, int64_t K, const uint16_t* w, int64_t N, const float* bias,
                     float* y);
struct TileX {
  const float* x;              // [T, K]
  std::vector<uint16_t> bf16;  // [T, Kp] or empty
  int64_t Kp;                  // K rounded up to 32
  AmxX amx;                    // bf16 packed for AMX tiles, where they run
};
TileX prepare_tile_x(Isa isa, const float* x, int64_t T, int64_t K);
void dequantized_tiles_matmul(Isa isa, const TileX& x, int64_t T, int64_t K, int64_t N,
                              const std::function<void(int64_t, float*)>& dequantize_row, const float* bias, float* y,
                              int64_t n0, int64_t n1);

// x: [rows, d] -> y: [rows, d]; y = x * rsqrt(mean(x^2) + eps) * w. y may equal x.
void rms_norm(Isa isa, const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y);

// x: [T, H, Dh] in place; rotates dims [0, 2*half) of each head in the rotate-half layout.
void rope(Isa isa, float* x, int64_t T, int64_t H, int64_t Dh, const int32_t* positions, const float* inv_freq,
          int64_t half, float attention_factor);

// out[i] = silu(gate[i]) * up[i]; out may equal gate.
void silu_mul(Isa isa, const float* gate, const float* up, int64_t n, float* out);

// a[i] += b[i]
void add(Isa isa, float* a, const float* b, int64_t n);

// In-place softmax of one row; returns nothing. Max-subtracted, as torch.
void softmax_row(Isa isa, float* x, int64_t n);

// Index of the first maximum.
int64_t argmax_row(Isa isa, const float* x, int64_t n);

// ops::sample of one row of logits [V] (the scalar reference: the whole row sorted).
int32_t sample_row(const float* logits, int64_t V, const SampleRow& row);

// Sum of the buffer's little-endian 64-bit words mod 2^64 (a partial last word zero-padded):
// a checksum every ISA agrees on, so the bandwidth probe's loads cannot be dropped. With
// page_prefetch, the vector loops ask for each page's first lines two pages ahead.
uint64_t read_checksum(Isa isa, const void* data, size_t n_bytes, bool page_prefetch = true);
// The same sum, each of the pool's threads reading one contiguous slice (null pool: one thread).
uint64_t read_checksum(Isa isa, ThreadPool* pool, const void* data, size_t n_bytes, bool page_prefetch = true);

// Memory read bandwidth: a buffer of n_bytes (0: max(1 GiB, 4x the last-level cache)),
// written once by the threads that later read it, read by all of the pool's threads with
// `isa`'s loads; the best of `passes`. Checks every pass's checksum.
struct ReadBandwidth {
  double bytes_per_second = 0;
  size_t bytes = 0;
  int passes = 0;
  int threads = 0;
  uint64_t checksum = 0;
};
ReadBandwidth read_bandwidth(Isa isa, ThreadPool* pool, size_t n_bytes, int passes);

using AttentionArgs = hearth::AttentionArgs;  // core/attention_args.h
void attention(Isa isa, ThreadPool* pool, const AttentionArgs& args);

// src: [n] f32 -> dst: [n] of `to` (f32, f16 or bf16), rounded to nearest even.
void store_f32_as(Isa isa, const float* src, DType to, void* dst, int64_t n);

// Where the CPU keeps element (slot, KV head h, dim d) of a paged cache layer, in elements from
// the cache's start; slot = block * block_size + position in the block. The tensor's shape says
// [n_blocks, block_size, Hkv, Dh] (the sizes); inside a block the CPU orders the elements by
// head: K as [Hkv, Dh, block_size], each dim's positions side by side, so that one vector load
// gives 16 positions' elements of one dim and a decode's scores come out 16 positions at a time
// with no horizontal sums; V as [Hkv, block_size, Dh]. A head's K and V in a block are each one
// contiguous run that the decode reads in order (bench/RESULTS.md, stop 42).
struct KvOrder {
  int64_t block_size, Hkv, Dh;
  int64_t k_at(int64_t slot, int64_t h, int64_t d) const {
    return ((slot / block_size * Hkv + h) * Dh + d) * block_size + slot % block_size;
  }
  int64_t v_at(int64_t slot, int64_t h, int64_t d) const {
    return ((slot / block_size * Hkv + h) * block_size + slot % block_size) * Dh + d;
  }
};

// A cache layer's K or V given slot-major ([n_slots, Hkv, Dh], elements of elem_bytes) in the
// CPU's order (KvOrder); for tests and tools that build a cache by hand.
void kv_to_cpu_order(const void* slot_major, void* dst, size_t elem_bytes, int64_t n_slots, const KvOrder& order,
                     bool keys);

struct KvWriteArgs {
  const float* k;  // [T, Hkv * Dh] f32
  const float* v;
  int64_t T;
  const int32_t* slots;  // [T], each in [0, n_slots)
  int64_t n_slots;
  KvOrder order;
  void* k_cache;  // in KvOrder, of cache_dtype
  void* v_cache;
  DType cache_dtype;
};
void kv_write(Isa isa, const KvWriteArgs& args);

}  // namespace hearth::cpu
