// The CPU backend: unpacks tensors and calls the kernels with the active ISA.
// Registers itself for DeviceType::kCpu at static-initialization time.
#include <cstring>
#include <span>
#include <vector>

#include "backends/cpu/ggml_kernels.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/quant_kernels.h"
#include "core/backend.h"
#include "core/logprobs.h"

namespace hearth::cpu {
namespace {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  void embedding(Context& ctx, const Tensor& table, const Tensor& ids, Tensor& out) override {
    const Isa isa = active_isa();
    const int64_t V = table.dim(0), D = table.dim(1), T = ids.dim(0);
    const auto* base = static_cast<const uint8_t*>(table.raw());
    const size_t row_bytes = static_cast<size_t>(D) * dtype_size(table.dtype());
    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = ids.data<int32_t>()[t];
      if (id < 0 || id >= V)
        throw InputError("embedding: token id " + std::to_string(id) + " outside vocabulary of " + std::to_string(V));
      convert_row(isa, base + static_cast<size_t>(id) * row_bytes, table.dtype(), D, out.data<float>() + t * D);
    }
    (void)ctx;
  }

  void matmul(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y) override {
    cpu::matmul(active_isa(), ctx.pool, x.data<float>(), x.dim(0), x.dim(1), w.raw(), w.dtype(), w.dim(0),
                bias.defined() ? bias.data<float>() : nullptr, y.data<float>());
  }

  // 4- and 8-bit affine matrices become 16-row panels where the int8 dot-product kernels run,
  // Q6_K and Q4_K blocks lanes where the VBMI decode runs.
  QuantizedMatrix prepare(const QuantizedMatrix& w, Device) override {
    if (w.is_ggml() && (w.ggml_type == GgmlType::kQ6_K || w.ggml_type == GgmlType::kQ4_K) &&
        w.ggml_layout == GgmlLayout::kBlocks && cpu::ggml_lanes_pay(active_isa()))
      return ggml_to_lanes(w);
    const bool panels_pay = !w.is_ggml() && w.layout == AffineLayout::kRows && (w.spec.bits == 4 || w.spec.bits == 8) &&
                            runs_panel_kernels(active_isa());
    return panels_pay ? affine_to_panels(w) : w;
  }

  static cpu::GgmlMatrix ggml(const QuantizedMatrix& w) {
    return {w.packed.data<uint8_t>(), w.ggml_type, w.rows, w.cols, static_cast<size_t>(w.packed.dim(1)), w.ggml_layout};
  }

  void quantized_matmul(Context& ctx, const Tensor& x, const QuantizedMatrix& w, const Tensor& bias,
                        Tensor& y) override {
    const float* b = bias.defined() ? bias.data<float>() : nullptr;
    if (w.is_ggml()) {
      cpu::ggml_matmul(active_isa(), ctx.pool, x.data<float>(), x.dim(0), ggml(w), b, y.data<float>());
    } else {
      cpu::affine_matmul(active_isa(), ctx.pool, x.data<float>(), x.dim(0), affine_args(w), b, y.data<float>());
    }
  }

  // Groups of 4- and 8-bit panel matrices (q, k, v; gate, up; o or down adding the residual)
  // run as one pass over x rounded once; anything else goes part by part.
  void matmul_group(Context& ctx, const Tensor& x, std::span<const ops::MatmulPart> parts) override {
    std::vector<cpu::PanelPart> panel_parts;
    const bool panels = runs_panel_kernels(active_isa());
    for (const ops::MatmulPart& p : parts) {
      if (!panels || p.qw == nullptr || p.qw->layout != AffineLayout::kPanels16 ||
          p.qw->spec.group_size != parts[0].qw->spec.group_size) {
        Backend::matmul_group(ctx, x, parts);
        return;
      }
      panel_parts.push_back(
          {affine_args(*p.qw), p.bias->defined() ? p.bias->data<float>() : nullptr, p.y->data<float>(), p.accumulate});
    }
    cpu::panel_matmul_group(ctx.pool, x.data<float>(), x.dim(0), panel_parts);
  }

  void quantized_embedding(Context&, const QuantizedMatrix& table, const Tensor& ids, Tensor& out) override {
    if (table.is_ggml()) {
      cpu::ggml_rows(active_isa(), ggml(table), ids.data<int32_t>(), ids.dim(0), out.data<float>());
    } else {
      cpu::affine_rows(affine_args(table), ids.data<int32_t>(), ids.dim(0), out.data<float>());
    }
  }

  void rms_norm(Context&, const Tensor& x, const Tensor& w, float eps, Tensor& y) override {
    const int64_t d = x.dim(-1);
    cpu::rms_norm(active_isa(), x.data<float>(), w.data<float>(), x.numel() / d, d, eps, y.data<float>());
  }

  void rope(Context&, Tensor& x, const Tensor& positions, const Tensor& inv_freq, float attention_factor) override {
    cpu::rope(active_isa(), x.data<float>(), x.dim(0), x.dim(1), x.dim(2), positions.data<int32_t>(),
              inv_freq.data<float>(), inv_freq.dim(0), attention_factor);
  }

  void kv_write(Context&, const Tensor& k, const Tensor& v, const Tensor& slots, ops::KvLayer& cache) override {
    cpu::KvWriteArgs a{};
    a.k = k.data<float>();
    a.v = v.data<float>();
    a.T = k.dim(0);
    a.slots = slots.data<int32_t>();
    a.n_slots = cache.k.dim(0) * cache.k.dim(1);
    a.order = {cache.k.dim(1), cache.k.dim(2), cache.k.dim(3)};
    a.k_cache = cache.k.raw();
    a.v_cache = cache.v.raw();
    a.cache_dtype = cache.k.dtype();
    cpu::kv_write(active_isa(), a);
  }

  void attention(Context& ctx, const Tensor& q, const ops::KvLayer& cache, const ops::AttentionBatch& batch,
                 float scale, int32_t window, Tensor& out) override {
    const AttentionArgs a = attention_args(q, cache, batch, scale, window, out);
    HEARTH_CHECK(a.seq_starts[a.n_seqs] == a.T);
    cpu::attention(active_isa(), ctx.pool, a);
  }

  void silu_mul(Context&, const Tensor& gate, const Tensor& up, Tensor& out) override {
    cpu::silu_mul(active_isa(), gate.data<float>(), up.data<float>(), gate.numel(), out.data<float>());
  }

  void add(Context&, Tensor& a, const Tensor& b) override {
    cpu::add(active_isa(), a.data<float>(), b.data<float>(), a.numel());
  }

  void argmax(Context&, const Tensor& x, Tensor& ids) override {
    const Isa isa = active_isa();
    const int64_t R = x.dim(0), V = x.dim(1);
    for (int64_t r = 0; r < R; ++r)
      ids.data<int32_t>()[r] = static_cast<int32_t>(argmax_row(isa, x.data<float>() + r * V, V));
  }

  void softmax(Context&, Tensor& x) override {
    const Isa isa = active_isa();
    const int64_t R = x.dim(0), V = x.dim(1);
    for (int64_t r = 0; r < R; ++r) softmax_row(isa, x.data<float>() + r * V, V);
  }

  void sample(Context&, const Tensor& logits, const Tensor& rows, Tensor& ids) override {
    const int64_t R = logits.dim(0), V = logits.dim(1);
    for (int64_t r = 0; r < R; ++r) {
      SampleRow row;
      std::memcpy(static_cast<void*>(&row), rows.data<int32_t>() + r * 6, sizeof row);
      ids.data<int32_t>()[r] = sample_row(logits.data<float>() + r * V, V, row);
    }
  }

  void edit_logits(Context&, Tensor& logits, const Tensor& edits) override {
    const int64_t R = logits.dim(0), V = logits.dim(1);
    for (int64_t i = 0; i < edits.dim(0); ++i) {
      LogitEdit e;
      std::memcpy(static_cast<void*>(&e), edits.data<int32_t>() + i * 5, sizeof e);
      if (e.row < 0 || e.row >= R || e.id < 0 || e.id >= V) {
        throw InputError("edit_logits: edit " + std::to_string(i) + " names row " + std::to_string(e.row) + ", token " +
                         std::to_string(e.id) + " of logits " + logits.str());
      }
      float& l = logits.data<float>()[e.row * V + e.id];
      l = sampling::edit_logit(l, e);
    }
  }

  void logprobs(Context&, const Tensor& logits, const Tensor& ids, Tensor& chosen, Tensor& top_ids,
                Tensor& top) override {
    const int64_t R = logits.dim(0), V = logits.dim(1), n = top.dim(1);
    for (int64_t r = 0; r < R; ++r) {
      const int32_t id = ids.data<int32_t>()[r];
      if (id < 0 || id >= V) {
        throw InputError("logprobs: row " + std::to_string(r) + " chose token " + std::to_string(id) +
                         ", outside the vocabulary of " + std::to_string(V));
      }
      row_logprobs(logits.data<float>() + r * V, V, id, static_cast<int>(n), chosen.data<float>() + r,
                   top_ids.data<int32_t>() + r * n, top.data<float>() + r * n);
    }
  }
};

struct Registrar {
  Registrar() {
    static CpuBackend backend;
    register_backend(DeviceType::kCpu, &backend);
  }
} registrar;

}  // namespace
}  // namespace hearth::cpu
