// The seam between ops (checks) and backends (math). A backend registers itself for a
// device type at static-initialization time; core never includes a backend header.
#pragma once

#include <string>

#include "core/ops.h"

namespace hearth {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual void embedding(Context&, const Tensor& table, const Tensor& ids, Tensor& out) = 0;
  virtual void matmul(Context&, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y) = 0;
  // ops::matmul_group. Default: one matmul (or quantized_matmul) per part, into a temporary
  // and then added where the part accumulates.
  virtual void matmul_group(Context& ctx, const Tensor& x, std::span<const ops::MatmulPart> parts);
  // ops::norm_matmul_group. Default: rms_norm into a temporary, then matmul_group.
  virtual void norm_matmul_group(Context& ctx, const Tensor& x, const Tensor& norm_w, float eps,
                                 std::span<const ops::MatmulPart> parts);
  // ops::silu_mul_matmul_group. Default: silu_mul into gate, then matmul_group.
  virtual void silu_mul_matmul_group(Context& ctx, Tensor& gate, const Tensor& up,
                                     std::span<const ops::MatmulPart> parts);
  // ops::gated_mlp. Default: norm_matmul_group, then silu_mul_matmul_group.
  virtual void gated_mlp(Context& ctx, const Tensor& x, const Tensor& norm_w, float eps,
                         std::span<const ops::MatmulPart, 2> gate_up, const ops::MatmulPart& down);
  virtual void quantized_matmul(Context&, const Tensor& x, const QuantizedMatrix& w, const Tensor& bias, Tensor& y) = 0;
  virtual void quantized_embedding(Context&, const QuantizedMatrix& table, const Tensor& ids, Tensor& out) = 0;
  // The matrix on `device` in the layout this backend's kernels read best (done once, at
  // load); the same values. Default: as it is.
  virtual QuantizedMatrix prepare(const QuantizedMatrix& w, Device device) { return w; }
  virtual void rms_norm(Context&, const Tensor& x, const Tensor& w, float eps, Tensor& y) = 0;
  virtual void rope(Context&, Tensor& x, const Tensor& positions, const Tensor& inv_freq, float attention_factor) = 0;
  virtual void kv_write(Context&, const Tensor& k, const Tensor& v, const Tensor& slots, ops::KvLayer& cache) = 0;
  // ops::rope_kv_write. Default: the three ops in turn.
  virtual void rope_kv_write(Context& ctx, Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions,
                             const Tensor& inv_freq, float attention_factor, const Tensor& slots, ops::KvLayer& cache) {
    rope(ctx, q, positions, inv_freq, attention_factor);
    rope(ctx, k, positions, inv_freq, attention_factor);
    kv_write(ctx, k, v, slots, cache);
  }
  virtual void attention(Context&, const Tensor& q, const ops::KvLayer& cache, const ops::AttentionBatch& batch,
                         float scale, int32_t window, Tensor& out) = 0;
  // ops::attention_project. Default: attention, then matmul_group of out as [T, Hq * Dh].
  virtual void attention_project(Context& ctx, const Tensor& q, const ops::KvLayer& cache,
                                 const ops::AttentionBatch& batch, float scale, int32_t window, Tensor& out,
                                 const ops::MatmulPart& project);
  virtual void silu_mul(Context&, const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  virtual void add(Context&, Tensor& a, const Tensor& b) = 0;
  virtual void argmax(Context&, const Tensor& x, Tensor& ids) = 0;
  virtual void softmax(Context&, Tensor& x) = 0;
  virtual void sample(Context&, const Tensor& logits, const Tensor& rows, Tensor& ids) = 0;
  virtual void edit_logits(Context&, Tensor& logits, const Tensor& edits) = 0;
  virtual void logprobs(Context&, const Tensor& logits, const Tensor& ids, Tensor& chosen, Tensor& top_ids,
                        Tensor& top) = 0;
  // Raises what the device's kernels reported since the last call (bad indices they skipped);
  // waits for the device's queued work where that is needed. Default: nothing to report.
  virtual void check_errors(Context&) {}
  // ops::record_graph. Default: no graphs (nullptr).
  virtual std::unique_ptr<DeviceGraph> record_graph(Context&, const std::function<void()>&) { return nullptr; }
};

// Registration (called by a backend's static registrar) and lookup.
void register_backend(DeviceType type, Backend* backend);
// Throws Unsupported("no backend for cuda ...") when none is registered.
Backend& backend_for(Device device);

}  // namespace hearth
