// The CUDA backend's kernel launchers: host functions that queue one kernel each on `s`.
// Pointers are device pointers; shapes as in core/ops.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/affine_args.h"
#include "core/attention_args.h"
#include "core/dtype.h"
#include "core/ggml_blocks.h"
#include "core/sample_row.h"

namespace hearth::cuda {

// x: [rows, d] -> y: [rows, d] (y may be x); y = x / rms(x) * w.
void rms_norm(cudaStream_t s, const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y);

// x: [T, H, Dh] in place; the first 2 * half dims of each head rotate (HF rotate-half).
void rope(cudaStream_t s, float* x, int64_t T, int64_t H, int64_t Dh, const int32_t* positions, const float* inv_freq,
          int64_t half, float attention_factor);

// ops::rope_kv_write in one launch: q [T, Hq, Dh] and k [T, Hkv, Dh] rotated in place as rope
// does, then k and v [T, Hkv, Dh] into cache slots as kv_write does (caches [n_slots, Hkv * Dh]
// of `type`; a bad slot is skipped and reported in `errors`).
struct RopeKvArgs {
  float* q;
  float* k;
  const float* v;
  int64_t T, Hq, Hkv, Dh;
  const int32_t* positions;
  const float* inv_freq;
  int64_t half;
  float factor;
  const int32_t* slots;
  int64_t n_slots;
};
void rope_kv_write(cudaStream_t s, const RopeKvArgs& a, void* k_cache, void* v_cache, DType type, int32_t* errors);

// out[i] = silu(g[i]) * u[i] over n (out may be g); a[i] += b[i] over n.
void silu_mul(cudaStream_t s, const float* g, const float* u, int64_t n, float* out);
void add(cudaStream_t s, float* a, const float* b, int64_t n);

// The device's error word [code, value, limit]: the first bad index a kernel met (the kernel
// skips it and goes on), kept until the backend's check_errors reads and clears it.
enum DeviceError : int32_t {
  kNoError = 0,
  kBadTokenId = 1,
  kBadSlot = 2,
  kBadEditRow = 3,
  kBadEditToken = 4,
  kBadChosenToken = 5,
};
__device__ inline void report_error(int32_t* errors, DeviceError code, int32_t value, int32_t limit) {
  if (atomicCAS(errors, 0, static_cast<int32_t>(code)) == 0) {
    errors[1] = value;
    errors[2] = limit;
  }
}

// Rows ids[t] of table [V, D] (f32, bf16 or f16) as f32 into out: [T, D]. An id outside
// [0, V) writes a zero row and is reported in `errors`.
void embedding(cudaStream_t s, const void* table, DType type, int64_t V, int64_t D, const int32_t* ids, int64_t T,
               float* out, int32_t* errors);

// x: [R, V]: softmax of each row in place; ids[r] = the first index of row r's maximum.
void softmax(cudaStream_t s, float* x, int64_t R, int64_t V);
void argmax(cudaStream_t s, const float* x, int64_t R, int64_t V, int32_t* ids);

// ops::sample: logits [R, V], rows [R] -> ids [R]; keys: [R, V] scratch.
void sample(cudaStream_t s, const float* logits, int64_t R, int64_t V, const SampleRow* rows, uint32_t* keys,
            int32_t* ids);

// ops::edit_logits: logits [R, V] edited in place by edits [E]; an edit outside the logits is
// skipped and reported in `errors`.
void edit_logits(cudaStream_t s, float* logits, int64_t R, int64_t V, const LogitEdit* edits, int64_t E,
                 int32_t* errors);

// ops::logprobs: logits [R, V], ids [R] -> chosen [R], top_ids and top [R, n] (n <= 20). A
// chosen id outside [0, V) gives NaN and is reported in `errors`. scratch: device memory of
// logprobs_scratch_bytes(R, V, n).
int64_t logprobs_scratch_bytes(int64_t R, int64_t V, int n);
void logprobs(cudaStream_t s, const float* logits, int64_t R, int64_t V, const int32_t* ids, int n, float* chosen,
              int32_t* top_ids, float* top, int32_t* errors, void* scratch);

// k, v: [T, row] f32 into cache slots (slots [T]) of caches [n_slots, row] of `type` (f32, f16
// or bf16, rounded to nearest even). A slot outside [0, n_slots) is skipped and reported in
// `errors`.
void kv_write(cudaStream_t s, const float* k, const float* v, int64_t T, int64_t row, const int32_t* slots,
              int64_t n_slots, void* k_cache, void* v_cache, DType type, int32_t* errors);

// x rows up to which the matmuls take their matrix-vector kernels (each weight row read once for
// all of them); more rows go through a GEMM.
constexpr int kMatvecRows = 8;

// y: [T, N] f32 = x: [T, K] f32 . w: [N, K] (f32, bf16 or f16)^T + bias ([N] or null). scratch:
// T * K 16-bit values (used for 16-bit weights when T > 8; may be null otherwise).
void matmul(cudaStream_t s, int device, const float* x, int64_t T, int64_t K, const void* w, DType w_type, int64_t N,
            const float* bias, float* y, void* scratch);
// Decode rows (1 <= T <= kMatvecRows) of one x through up to kMaxMatvecParts matrices of one
// type in one launch: parts[i].y: [T, parts[i].N] = x . parts[i].w^T + parts[i].bias, or
// y += that where the part accumulates (y's old value added last).
constexpr int kMaxMatvecParts = 4;
struct MatvecPart {
  const void* w;  // [N, K]
  const float* bias;
  float* y;
  int64_t N;
  bool accumulate = false;
};
void matvec_group(cudaStream_t s, const float* x, int64_t T, int64_t K, DType w_type, const MatvecPart* parts, int n);
// matvec_group of RMSNorm(x) * norm_w ([K] f32, eps), bit-identical to rms_norm then
// matvec_group, the norm computed by each block of the launch; false, launching nothing, where the
// kernel does not take it (more than one row of x, unaligned data, K past 12288).
bool norm_matvec_group(cudaStream_t s, const float* x, const float* norm_w, float eps, int64_t T, int64_t K,
                       DType w_type, const MatvecPart* parts, int n);
// x: [n] f32 rounded to nearest even into out: [n] of `type` (bf16 or f16).
void round_to_16bit(cudaStream_t s, const float* x, int64_t n, DType type, void* out);
// True when matmul needs `scratch` for these sizes.
inline bool matmul_needs_scratch(int64_t T, DType w_type) { return T > kMatvecRows && w_type != DType::kF32; }

// An MLX affine quantized [N, K] matrix in rows layout (core/quant.h); biases null for
// symmetric codes.
using QuantArgs = hearth::AffineArgs;  // core/affine_args.h (rows layout on the GPU)
// y: [T, N] f32 = x: [T, K] f32 . w^T + bias. scratch: quantized_matmul_scratch_bytes(T, w).
void quantized_matmul(cudaStream_t s, int device, const float* x, int64_t T, const QuantArgs& w, const float* bias,
                      float* y, void* scratch);
// quantized_matmul of kMatvecRows < T <= kQuantGemmRows on tensor cores, each weight dequantized
// in registers (quant_gemm.cu): 4 and 8 bits, power-of-two group sizes of at least 32, K a
// multiple of 64, codes 16-byte aligned. scratch: 2 T K bytes (x in bf16).
constexpr int64_t kQuantGemmRows = 32;
bool quant_gemm_fits(const QuantArgs& w);
void quant_gemm(cudaStream_t s, const float* x, int64_t T, const QuantArgs& w, const float* bias, float* y,
                void* scratch);
// Decode rows (1 <= T <= kMatvecRows) of one x through up to kMaxMatvecParts matrices: one
// launch when they share K, width, group size and scale type. scratch: quantized_scratch_bytes.
struct QuantPart {
  QuantArgs w;
  const float* bias;  // [N] or null
  float* y;           // [T, N]
  bool accumulate = false;
};
void quantized_matvec_group(cudaStream_t s, const float* x, int64_t T, const QuantPart* parts, int n, void* scratch);
// What the matvec's x is made from: x itself, or the op before the matvec computed on the way
// (saving that op's launch): silu(x) * up (the MLP's down projection), or rms_norm(x) with
// norm_w and eps (the layers' input norms). Both exactly as their own kernels compute them
// (activation.cu, rms_norm.cu), so the matvec sees the same bits either way.
struct XSource {
  const float* x;
  const float* up = nullptr;
  const float* norm_w = nullptr;
  float eps = 0.0f;
  bool rounded = false;  // x is also in the scratch already, rounded (attention with an XRounding)
};
// quantized_matvec_group of x made from src, where all parts go through the integer kernels in
// one launch; false, launching nothing, where they do not.
bool quantized_matvec_group(cudaStream_t s, const XSource& src, int64_t T, const QuantPart* parts, int n,
                            void* scratch);
// Decode: x rounded to int8 ([T, K]) with a scale and a sum per group of at least 32 values;
// prefill: the dense bf16 matrix and x in bf16.
inline int64_t quantized_scratch_bytes(int64_t T, int64_t N, int64_t K) {
  return T <= kMatvecRows ? T * K + 2 * 4 * T * (K / 32) + 16 : 2 * (N + T) * K;
}
// quantized_matmul's: quantized_scratch_bytes, or x in bf16 alone where quant_gemm takes the rows.
int64_t quantized_matmul_scratch_bytes(int64_t T, const QuantArgs& w);
// out: [T, K] f32 = the dequantized rows ids[t] of w; bad ids are reported in `errors`.
void quantized_rows(cudaStream_t s, const QuantArgs& w, const int32_t* ids, int64_t T, float* out, int32_t* errors);

// A matrix in ggml k-quant blocks (Q4_K or Q6_K): blocks [N, row_bytes] u8.
struct GgmlArgs {
  const uint8_t* blocks;
  GgmlType type;
  int64_t N, K, row_bytes;
};
bool ggml_has_kernels(GgmlType type);
// As quantized_matmul / quantized_rows, for GgmlArgs (scratch: quantized_scratch_bytes).
void ggml_matmul(cudaStream_t s, int device, const float* x, int64_t T, const GgmlArgs& w, const float* bias, float* y,
                 void* scratch);
void ggml_rows(cudaStream_t s, const GgmlArgs& w, const int32_t* ids, int64_t T, float* out, int32_t* errors);
// ggml_matmul's scratch bytes for T rows of x.
int64_t ggml_matmul_scratch_bytes(int64_t T, const GgmlArgs& w);

using AttentionArgs = hearth::AttentionArgs;  // core/attention_args.h
// Where attention leaves its output also rounded to int8 for a 4/8-bit integer matvec of it:
// `scratch` as that matvec's (quantized_scratch_bytes), groups of group_size (32 to 128,
// dividing Dh), codes of `bits` (4 or 8); then XSource::rounded.
struct XRounding {
  void* scratch;
  int group_size, bits;
};
// Varlen paged attention with GQA (core/ops.h), Dh <= 256. scratch: attention_scratch_bytes.
// With `rounding`, decode rows (T <= kMatvecRows) also write it, and true is returned; other
// rows do not (false).
bool attention(cudaStream_t s, const AttentionArgs& args, void* scratch, const XRounding* rounding = nullptr);
int64_t attention_scratch_bytes(int64_t T, int64_t Hq, int64_t Dh);

}  // namespace hearth::cuda
