// The CUDA backend: unpacks tensors and queues the kernels on the device's stream. Registers
// itself for DeviceType::kCuda at static-initialization time (no CUDA call happens then, so a
// build with this backend starts on machines with no GPU).
//
// Ops without a kernel (ggml block types other than Q4_K and Q6_K, which the loader does not
// turn into affine codes) throw Unsupported naming the op.
#include <array>
#include <mutex>
#include <optional>
#include <string>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/graph.h"
#include "backends/cuda/kernels.h"
#include "base/error.h"
#include "core/backend.h"
#include "core/device_memory.h"

namespace hearth::cuda {
namespace {

[[noreturn]] void no_kernel(const char* op) {
  throw Unsupported(std::string(op) + " has no CUDA implementation in this build");
}

class CudaBackend final : public Backend {
 public:
  std::string name() const override { return "cuda"; }

  // Waits for the device's queued work; throws InputError for the first bad index a kernel
  // reported since the last check (and clears it).
  void check_errors(Context& ctx) override {
    Tensor& word = error_word(ctx.device);
    const Tensor host = word.to_device(kCpu);
    const int32_t* e = host.data<int32_t>();
    if (e[0] == kNoError) return;
    // Cleared in place, in stream order after the copy above (the buffer kernels hold stays).
    device_memory(DeviceType::kCuda).zero(ctx.device, word.raw(), word.nbytes());
    const std::string value = std::to_string(e[1]), limit = std::to_string(e[2]);
    if (e[0] == kBadTokenId) throw InputError("embedding: token id " + value + " outside vocabulary of " + limit);
    if (e[0] == kBadEditRow) throw InputError("edit_logits: an edit names row " + value + " of " + limit);
    if (e[0] == kBadEditToken) throw InputError("edit_logits: an edit names token " + value + " of " + limit);
    if (e[0] == kBadChosenToken) throw InputError("logprobs: chosen token " + value + " of " + limit);
    throw InputError("kv_write: slot " + value + " outside the pool of " + limit + " slots");
  }

  std::unique_ptr<DeviceGraph> record_graph(Context& ctx, const std::function<void()>& work) override {
    error_word(ctx.device);  // allocated before, not by the recorded work
    return cuda::record_graph(ctx.device, work);
  }

  void embedding(Context& ctx, const Tensor& table, const Tensor& ids, Tensor& out) override {
    cuda::embedding(use_device(ctx.device), table.raw(), table.dtype(), table.dim(0), table.dim(1), ids.data<int32_t>(),
                    ids.dim(0), out.data<float>(), errors(ctx.device));
  }

  void matmul(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y) override {
    const int64_t T = x.dim(0), K = x.dim(1);
    Tensor scratch;
    if (matmul_needs_scratch(T, w.dtype())) scratch = Tensor::empty({T * K * 2}, DType::kU8, ctx.device);
    cuda::matmul(use_device(ctx.device), ctx.device.index, x.data<float>(), T, K, w.raw(), w.dtype(), w.dim(0),
                 bias.defined() ? bias.data<float>() : nullptr, y.data<float>(),
                 scratch.defined() ? scratch.raw() : nullptr);
  }

  // Decode rows through float matrices of one type, or through MLX affine matrices: one launch
  // for all parts (quantized ones of different shapes split in quantized_matvec_group).
  void matmul_group(Context& ctx, const Tensor& x, std::span<const ops::MatmulPart> parts) override {
    const int64_t T = x.dim(0);
    if (const auto launch = dense_decode(x, parts)) {
      return cuda::matvec_group(use_device(ctx.device), x.data<float>(), T, x.dim(1), parts[0].w->dtype(),
                                launch->data(), static_cast<int>(parts.size()));
    }
    if (takes_integer_decode(x, parts)) {
      AffineLaunch L(ctx, x, parts);
      return cuda::quantized_matvec_group(use_device(ctx.device), x.data<float>(), T, L.parts.data(), L.n,
                                          L.scratch.raw());
    }
    Backend::matmul_group(ctx, x, parts);
  }

  // Decode rows: the norm computed by the matvec, one launch fewer per layer: as 4/8-bit x is
  // rounded to int8 (prepared_x.cuh), or by each block of a dense matvec of one row (matmul.cu);
  // else the default (rms_norm, then matmul_group).
  void norm_matmul_group(Context& ctx, const Tensor& x, const Tensor& norm_w, float eps,
                         std::span<const ops::MatmulPart> parts) override {
    if (const auto launch = dense_decode(x, parts)) {
      if (cuda::norm_matvec_group(use_device(ctx.device), x.data<float>(), norm_w.data<float>(), eps, x.dim(0),
                                  x.dim(1), parts[0].w->dtype(), launch->data(), static_cast<int>(parts.size())))
        return;
    }
    const XSource src{x.data<float>(), nullptr, norm_w.data<float>(), eps};
    if (!integer_decode(ctx, x, src, parts)) Backend::norm_matmul_group(ctx, x, norm_w, eps, parts);
  }

  // The matvec kernels' view of decode rows through dense matrices of one type; none otherwise.
  static std::optional<std::array<MatvecPart, kMaxMatvecParts>> dense_decode(const Tensor& x,
                                                                             std::span<const ops::MatmulPart> parts) {
    const int64_t T = x.dim(0);
    bool dense = T >= 1 && T <= kMatvecRows && !parts.empty() && parts.size() <= kMaxMatvecParts;
    for (const ops::MatmulPart& p : parts) dense = dense && p.qw == nullptr && p.w->dtype() == parts[0].w->dtype();
    if (!dense) return std::nullopt;
    std::array<MatvecPart, kMaxMatvecParts> launch{};
    for (size_t i = 0; i < parts.size(); ++i) {
      const ops::MatmulPart& p = parts[i];
      launch[i] = {p.w->raw(), p.bias->defined() ? p.bias->data<float>() : nullptr, p.y->data<float>(), p.w->dim(0),
                   p.accumulate};
    }
    return launch;
  }

  // The same for silu(gate) * up, the MLP's down projection.
  void silu_mul_matmul_group(Context& ctx, Tensor& gate, const Tensor& up,
                             std::span<const ops::MatmulPart> parts) override {
    if (!integer_decode(ctx, gate, XSource{gate.data<float>(), up.data<float>()}, parts))
      Backend::silu_mul_matmul_group(ctx, gate, up, parts);
  }

  // The parts of x (its shape; its values made from src) in one launch of the integer decode
  // kernels; false, launching nothing, where they do not take them.
  static bool integer_decode(Context& ctx, const Tensor& x, const XSource& src,
                             std::span<const ops::MatmulPart> parts) {
    if (!takes_integer_decode(x, parts)) return false;
    AffineLaunch L(ctx, x, parts);
    return cuda::quantized_matvec_group(use_device(ctx.device), src, x.dim(0), L.parts.data(), L.n, L.scratch.raw());
  }

  // Decode rows through MLX affine matrices only (quantized_matvec_group may still refuse them).
  static bool takes_integer_decode(const Tensor& x, std::span<const ops::MatmulPart> parts) {
    const int64_t T = x.dim(0);
    if (!(T >= 1 && T <= kMatvecRows && !parts.empty() && parts.size() <= kMaxMatvecParts)) return false;
    for (const ops::MatmulPart& p : parts)
      if (p.qw == nullptr || p.qw->is_ggml()) return false;
    return true;
  }

  // The kernels' view of affine parts of x, with the scratch their x preparation needs.
  struct AffineLaunch {
    std::array<QuantPart, kMaxMatvecParts> parts{};
    int n;
    Tensor scratch;
    AffineLaunch(Context& ctx, const Tensor& x, std::span<const ops::MatmulPart> ps) : n(static_cast<int>(ps.size())) {
      for (size_t i = 0; i < ps.size(); ++i) {
        const ops::MatmulPart& p = ps[i];
        parts[i] = {affine_args(*p.qw), p.bias->defined() ? p.bias->data<float>() : nullptr, p.y->data<float>(),
                    p.accumulate};
      }
      scratch = Tensor::empty({quantized_scratch_bytes(x.dim(0), ps[0].qw->rows, x.dim(1))}, DType::kU8, ctx.device);
    }
  };

  static GgmlArgs ggml(const QuantizedMatrix& w, const char* op) {
    if (!ggml_has_kernels(w.ggml_type))
      no_kernel((std::string(op) + " of " + std::string(ggml_type_name(w.ggml_type)) + " blocks").c_str());
    return {w.packed.data<uint8_t>(), w.ggml_type, w.rows, w.cols, w.packed.dim(1)};
  }

  void quantized_matmul(Context& ctx, const Tensor& x, const QuantizedMatrix& w, const Tensor& bias,
                        Tensor& y) override {
    const int64_t T = x.dim(0);
    Tensor scratch;
    const int64_t bytes = w.is_ggml() ? ggml_matmul_scratch_bytes(T, ggml(w, "quantized_matmul"))
                                      : quantized_matmul_scratch_bytes(T, affine_args(w));
    if (bytes > 0) scratch = Tensor::empty({bytes}, DType::kU8, ctx.device);
    void* scratch_p = scratch.defined() ? scratch.raw() : nullptr;
    const float* b = bias.defined() ? bias.data<float>() : nullptr;
    if (w.is_ggml()) {
      cuda::ggml_matmul(use_device(ctx.device), ctx.device.index, x.data<float>(), T, ggml(w, "quantized_matmul"), b,
                        y.data<float>(), scratch_p);
    } else {
      cuda::quantized_matmul(use_device(ctx.device), ctx.device.index, x.data<float>(), T, affine_args(w), b,
                             y.data<float>(), scratch_p);
    }
  }

  void quantized_embedding(Context& ctx, const QuantizedMatrix& table, const Tensor& ids, Tensor& out) override {
    if (table.is_ggml()) {
      cuda::ggml_rows(use_device(ctx.device), ggml(table, "quantized_embedding"), ids.data<int32_t>(), ids.dim(0),
                      out.data<float>(), errors(ctx.device));
    } else {
      cuda::quantized_rows(use_device(ctx.device), affine_args(table), ids.data<int32_t>(), ids.dim(0),
                           out.data<float>(), errors(ctx.device));
    }
  }

  // The matrix's tensors on the device, in the layout they came in (MLX affine rows, ggml blocks).
  QuantizedMatrix prepare(const QuantizedMatrix& w, Device device) override {
    QuantizedMatrix q = w;
    for (Tensor* t : {&q.packed, &q.scales, &q.biases}) {
      if (t->defined()) *t = t->to_device(device);
    }
    return q;
  }

  void rms_norm(Context& ctx, const Tensor& x, const Tensor& w, float eps, Tensor& y) override {
    const int64_t d = x.dim(-1);
    cuda::rms_norm(use_device(ctx.device), x.data<float>(), w.data<float>(), d == 0 ? 0 : x.numel() / d, d, eps,
                   y.data<float>());
  }

  void rope(Context& ctx, Tensor& x, const Tensor& positions, const Tensor& inv_freq, float attention_factor) override {
    cuda::rope(use_device(ctx.device), x.data<float>(), x.dim(0), x.dim(1), x.dim(2), positions.data<int32_t>(),
               inv_freq.data<float>(), inv_freq.dim(0), attention_factor);
  }

  void kv_write(Context& ctx, const Tensor& k, const Tensor& v, const Tensor& slots, ops::KvLayer& cache) override {
    const int64_t n_slots = cache.k.dim(0) * cache.k.dim(1);
    cuda::kv_write(use_device(ctx.device), k.data<float>(), v.data<float>(), k.dim(0), k.dim(1) * k.dim(2),
                   slots.data<int32_t>(), n_slots, cache.k.raw(), cache.v.raw(), cache.k.dtype(), errors(ctx.device));
  }

  void rope_kv_write(Context& ctx, Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions,
                     const Tensor& inv_freq, float attention_factor, const Tensor& slots,
                     ops::KvLayer& cache) override {
    const RopeKvArgs a{q.data<float>(),
                       k.data<float>(),
                       v.data<float>(),
                       q.dim(0),
                       q.dim(1),
                       k.dim(1),
                       q.dim(2),
                       positions.data<int32_t>(),
                       inv_freq.data<float>(),
                       inv_freq.dim(0),
                       attention_factor,
                       slots.data<int32_t>(),
                       cache.k.dim(0) * cache.k.dim(1)};
    cuda::rope_kv_write(use_device(ctx.device), a, cache.k.raw(), cache.v.raw(), cache.k.dtype(), errors(ctx.device));
  }

  void attention(Context& ctx, const Tensor& q, const ops::KvLayer& cache, const ops::AttentionBatch& batch,
                 float scale, int32_t window, Tensor& out) override {
    attend(ctx, q, cache, batch, scale, window, out, nullptr);
  }

  // Decode rows through one MLX affine matrix that the integer kernels take (the o projection of
  // a 4/8-bit model): the attention's merge kernel also rounds its output to int8 as that matvec
  // reads it (cuda::XRounding), one launch fewer per layer; else the default.
  void attention_project(Context& ctx, const Tensor& q, const ops::KvLayer& cache, const ops::AttentionBatch& batch,
                         float scale, int32_t window, Tensor& out, const ops::MatmulPart& project) override {
    const Tensor x = out.reshape({out.dim(0), out.dim(1) * out.dim(2)});
    const std::span<const ops::MatmulPart> parts(&project, 1);
    if (takes_integer_decode(x, parts)) {
      const QuantSpec& w = project.qw->spec;
      if ((w.bits == 4 || w.bits == 8) && w.group_size % 32 == 0 && w.group_size <= 128 &&
          q.dim(2) % w.group_size == 0) {
        AffineLaunch L(ctx, x, parts);
        const XRounding rounding{L.scratch.raw(), w.group_size, w.bits};
        XSource src{x.data<float>()};
        src.rounded = attend(ctx, q, cache, batch, scale, window, out, &rounding);
        if (!cuda::quantized_matvec_group(use_device(ctx.device), src, x.dim(0), L.parts.data(), L.n, L.scratch.raw()))
          matmul_group(ctx, x, parts);
        return;
      }
    }
    Backend::attention_project(ctx, q, cache, batch, scale, window, out, project);
  }

  void silu_mul(Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out) override {
    cuda::silu_mul(use_device(ctx.device), gate.data<float>(), up.data<float>(), gate.numel(), out.data<float>());
  }

  void add(Context& ctx, Tensor& a, const Tensor& b) override {
    cuda::add(use_device(ctx.device), a.data<float>(), b.data<float>(), a.numel());
  }

  void argmax(Context& ctx, const Tensor& x, Tensor& ids) override {
    cuda::argmax(use_device(ctx.device), x.data<float>(), x.dim(0), x.dim(1), ids.data<int32_t>());
  }

  void softmax(Context& ctx, Tensor& x) override {
    cuda::softmax(use_device(ctx.device), x.data<float>(), x.dim(0), x.dim(1));
  }

  void sample(Context& ctx, const Tensor& logits, const Tensor& rows, Tensor& ids) override {
    const int64_t R = logits.dim(0), V = logits.dim(1);
    Tensor keys = Tensor::empty({R * V}, DType::kI32, ctx.device);
    cuda::sample(use_device(ctx.device), logits.data<float>(), R, V, static_cast<const SampleRow*>(rows.raw()),
                 static_cast<uint32_t*>(keys.raw()), ids.data<int32_t>());
  }

  void edit_logits(Context& ctx, Tensor& logits, const Tensor& edits) override {
    cuda::edit_logits(use_device(ctx.device), logits.data<float>(), logits.dim(0), logits.dim(1),
                      static_cast<const LogitEdit*>(edits.raw()), edits.dim(0), errors(ctx.device));
  }

  void logprobs(Context& ctx, const Tensor& logits, const Tensor& ids, Tensor& chosen, Tensor& top_ids,
                Tensor& top) override {
    const int n = static_cast<int>(top.dim(1));
    Tensor scratch =
        Tensor::empty({cuda::logprobs_scratch_bytes(logits.dim(0), logits.dim(1), n)}, DType::kU8, ctx.device);
    cuda::logprobs(use_device(ctx.device), logits.data<float>(), logits.dim(0), logits.dim(1), ids.data<int32_t>(), n,
                   chosen.data<float>(), top_ids.data<int32_t>(), top.data<float>(), errors(ctx.device), scratch.raw());
  }

 private:
  // cuda::attention (with `rounding`: whether it wrote it).
  bool attend(Context& ctx, const Tensor& q, const ops::KvLayer& cache, const ops::AttentionBatch& batch, float scale,
              int32_t window, Tensor& out, const XRounding* rounding) {
    const AttentionArgs a = attention_args(q, cache, batch, scale, window, out);
    if (a.Dh > 256) throw Unsupported("attention: head dim " + std::to_string(a.Dh) + " over 256 on CUDA");
    Tensor scratch;
    if (const int64_t bytes = attention_scratch_bytes(a.T, a.Hq, a.Dh); bytes > 0)
      scratch = Tensor::empty({bytes}, DType::kU8, ctx.device);
    return cuda::attention(use_device(ctx.device), a, scratch.defined() ? scratch.raw() : nullptr, rounding);
  }

  // The device's error word (kernels.h), zeroed when first used.
  Tensor& error_word(Device device) {
    std::lock_guard<std::mutex> lock(mutex_);
    Tensor& t = errors_.at(static_cast<size_t>(device.index));
    if (!t.defined()) t = Tensor::zeros({3}, DType::kI32, device);
    return t;
  }
  int32_t* errors(Device device) { return error_word(device).data<int32_t>(); }

  std::mutex mutex_;
  std::array<Tensor, 16> errors_;
};

const bool registered = [] {
  static CudaBackend backend;
  register_backend(DeviceType::kCuda, &backend);
  return true;
}();

}  // namespace
}  // namespace hearth::cuda
