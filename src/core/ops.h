// The ops the models are made of. Each op checks shapes and dtypes here (no math) and
// dispatches to the backend of the tensors' device. Shapes use T = tokens in the flat
// batch, D = model width, H = heads, Dh = head dim.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "core/context.h"
#include "core/quant.h"
#include "core/sample_row.h"
#include "core/tensor.h"

namespace hearth {

// Work recorded on a device, replayed as one launch: the same kernels on the same buffers, so
// each replay reads what is in those buffers then (inputs are refreshed in place between
// replays). Destroying it waits for its last replay.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  virtual void replay() = 0;
};

}  // namespace hearth

namespace hearth::ops {

// table: [V, D] f32|bf16|f16, ids: [T] i32 -> out: [T, D] f32
void embedding(Context& ctx, const Tensor& table, const Tensor& ids, Tensor& out);

// x: [T, K] f32, w: [N, K] f32|bf16|f16, bias: [N] f32 or undefined -> y: [T, N] f32
void matmul(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y);

// One x times several matrices, parts[i].y = x . parts[i].w^T + parts[i].bias, each part as
// matmul above, or as quantized_matmul below where qw is set (q, k and v; gate and up). A
// backend may run them as one pass: the GPU's decode kernels read all their rows in one launch,
// so the small ones do not each pay a launch's ramp.
struct MatmulPart {
  const Tensor* w;     // null where qw is set
  const Tensor* bias;  // undefined tensor for none
  Tensor* y;
  const QuantizedMatrix* qw = nullptr;
  bool accumulate = false;  // y += x . w^T + bias (a residual connection), y's old values added last
};
void matmul_group(Context& ctx, const Tensor& x, std::span<const MatmulPart> parts);

// matmul_group of rms_norm(x, norm_w, eps): x [T, K] f32 (not written), norm_w [K] f32. The
// layers' norms go through it so that a backend may compute the norm inside its matvecs (the
// GPU's 4/8-bit decode does, as it rounds x to int8); the default runs rms_norm, then
// matmul_group.
void norm_matmul_group(Context& ctx, const Tensor& x, const Tensor& norm_w, float eps,
                       std::span<const MatmulPart> parts);

// matmul_group of silu(gate) * up: gate, up [T, K] f32. The MLP's down projection goes through
// it so that a backend may compute the activation inside its matvecs (as norm_matmul_group);
// the default runs silu_mul into gate, which is therefore scratch, then matmul_group.
void silu_mul_matmul_group(Context& ctx, Tensor& gate, const Tensor& up, std::span<const MatmulPart> parts);

// The SiLU-gated MLP: gate_up[0].y = gate(rms_norm(x)), gate_up[1].y = up(rms_norm(x)) (scratch
// [T, I] to the caller: a backend may leave other values in them), then down's part of
// silu(gate) * up (down.y may be x, accumulating the residual). One op so that a backend may fuse
// across the matmuls (e.g. compute silu(g) * u as it sums the gate and up rows); the default runs
// norm_matmul_group, then silu_mul_matmul_group.
void gated_mlp(Context& ctx, const Tensor& x, const Tensor& norm_w, float eps, std::span<const MatmulPart, 2> gate_up,
               const MatmulPart& down);

// x: [T, K] f32, w: quantized [N, K] (core/quant.h: MLX affine or ggml blocks), bias: [N] f32
// or undefined -> y: [T, N] f32
void quantized_matmul(Context& ctx, const Tensor& x, const QuantizedMatrix& w, const Tensor& bias, Tensor& y);

// table: quantized [V, D] (either format), ids: [T] i32 -> out: [T, D] f32 (the dequantized rows)
void quantized_embedding(Context& ctx, const QuantizedMatrix& table, const Tensor& ids, Tensor& out);

// x: [T, D] f32, w: [D] f32 -> y: [T, D] f32 (y may be x). y = x / rms(x) * w
void rms_norm(Context& ctx, const Tensor& x, const Tensor& w, float eps, Tensor& y);

// x: [T, H, Dh] f32, rotated in place. positions: [T] i32; inv_freq: [R/2] f32 rotates the
// first R dims of each head in the rotate-half convention of HF (pairs i and i + R/2);
// cos/sin are multiplied by attention_factor (YaRN), as HF does.
void rope(Context& ctx, Tensor& x, const Tensor& positions, const Tensor& inv_freq, float attention_factor);

// Paged KV storage of one layer: [n_blocks, block_size, Hkv, Dh] each, f32, f16 or bf16 (both alike).
struct KvLayer {
  Tensor k;
  Tensor v;
};

// k, v: [T, Hkv, Dh] f32 written to cache slots: slots [T] i32 (block * block_size + offset),
// rounded to nearest even when the cache is f16 or bf16.
void kv_write(Context& ctx, const Tensor& k, const Tensor& v, const Tensor& slots, KvLayer& cache);

// rope(q), rope(k), then kv_write(k, v): an attention layer's step before attention, which a
// backend may take in one pass (the GPU: one launch instead of three). Same checks and values.
void rope_kv_write(Context& ctx, Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions, const Tensor& inv_freq,
                   float attention_factor, const Tensor& slots, KvLayer& cache);

// Where each sequence of a flat batch lives in the paged KV cache.
struct AttentionBatch {
  Tensor seq_starts;    // [S + 1] i32: sequence s owns query rows [seq_starts[s], seq_starts[s+1])
  Tensor context_lens;  // [S] i32: tokens of s already cached before this step
  Tensor block_tables;  // [S, max_blocks] i32: physical block of each logical block
};

// Varlen paged attention with GQA. q: [T, Hq, Dh] f32 -> out: [T, Hq, Dh] f32.
// Query row i of sequence s sits at cache index c = context_lens[s] + i - seq_starts[s] and
// attends to cache indices j <= c with c - j < window (window <= 0: no window).
void attention(Context& ctx, const Tensor& q, const KvLayer& cache, const AttentionBatch& batch, float scale,
               int32_t window, Tensor& out);

// attention, then `project`'s matmul of out as x: [T, Hq * Dh] (the layer's o projection,
// usually accumulating into the residual); out holds the attention's output either way. One op
// so that a backend may hand the output to the matvec in the form the matvec reads (the GPU's
// 4/8-bit decode: rounded to int8 by the attention's last kernel, not by a launch of its own);
// the default runs attention, then matmul_group.
void attention_project(Context& ctx, const Tensor& q, const KvLayer& cache, const AttentionBatch& batch, float scale,
                       int32_t window, Tensor& out, const MatmulPart& project);

// gate, up: [T, F] f32 -> out: [T, F] f32 = silu(gate) * up (out may be gate).
void silu_mul(Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out);

// a += b, same shape, f32.
void add(Context& ctx, Tensor& a, const Tensor& b);

// x: [R, V] f32 -> ids: [R] i32 (first maximum wins, as torch.argmax).
void argmax(Context& ctx, const Tensor& x, Tensor& ids);

// x: [R, V] f32, softmax over each row in place.
void softmax(Context& ctx, Tensor& x);

// logits: [R, V] f32, rows: [R, 6] i32 (a SampleRow per row, its bytes) -> ids: [R] i32.
// Tokens are ordered best first by the tempered logit t = logit / temperature, ties by lower id,
// NaN last. Each has the weight floor(exp(t - t_best) * 2^40) (exact integers, so the order of
// the sums never matters). Kept: the shortest of the top_k prefix, the min-p survivors
// (t - t_best >= log_min_p) and the top-p prefix (the first whose cumulative weight reaches
// top_p times the top_k prefix's), at least the best token. The token is the first kept one
// whose cumulative weight exceeds floor(u * kept weight): the host Sampler's draw from the same
// uniform number, up to the rounding of the weights. A row whose kept weight is 0 (t_best
// infinite or NaN), or temperature <= 0, gives its best token: the argmax, lowest id on ties,
// NaN never winning over a number.
void sample(Context& ctx, const Tensor& logits, const Tensor& rows, Tensor& ids);

// logits: [R, V] f32, edited in place by edits: [E, 5] i32 (a LogitEdit per row, its bytes):
// logits[e.row, e.id] = edit_logit(that logit, e) (core/sample_row.h), the host Sampler's logit
// processors to the bit. At most one edit per (row, id). An edit outside [0, R) x [0, V) is a
// bad index (InputError; on a GPU reported by check_errors).
void edit_logits(Context& ctx, Tensor& logits, const Tensor& edits);

// logits: [R, V] f32, ids: [R] i32 (each row's chosen token) -> chosen: [R] f32, its logprob;
// top_ids: [R, n] i32 and top: [R, n] f32, the n best tokens and their logprobs (n <=
// min(V, kMaxTopLogprobs); n = 0 allowed). log_softmax and the order as core/logprobs.h; a GPU
// gives the same ids, and logprobs within the rounding of its exps and their sum.
void logprobs(Context& ctx, const Tensor& logits, const Tensor& ids, Tensor& chosen, Tensor& top_ids, Tensor& top);

// Throws InputError for a bad index (token id, KV slot) that a kernel of ctx's device met since
// the last call. On the CPU ops throw at once; a GPU's kernels record it and run on (the op
// returns before they do), so the engine calls this once per step, after the logits are back.
void check_errors(Context& ctx);

// Records the device work that `work` queues on ctx's device; nothing runs while recording.
// Memory allocated or freed while recording belongs to the graph for its life (its replays
// write it). nullptr where the device has no graphs (the CPU, whose ops run as they are called).
std::unique_ptr<DeviceGraph> record_graph(Context& ctx, const std::function<void()>& work);

}  // namespace hearth::ops
