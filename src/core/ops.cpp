#include "core/ops.h"

#include <algorithm>
#include <array>
#include <initializer_list>
#include <limits>

#include "core/backend.h"
#include "core/logprobs.h"

namespace hearth {
namespace {

std::array<Backend*, 2>& registry() {
  static std::array<Backend*, 2> backends{};
  return backends;
}

// The checks below build their message only when they fail: ops run hundreds of times a decode
// step, and formatting shapes for every call showed in its profile.
[[noreturn]] void fail(const char* op, const std::string& what) { throw InputError(std::string(op) + ": " + what); }

void expect_dtype(const Tensor& t, DType want, const char* op, const char* name) {
  if (!t.defined()) {
    fail(op, std::string(name) + " is undefined");
  }
  if (t.dtype() != want) {
    fail(op, std::string("expected ") + name + " to be " + std::string(dtype_name(want)) + ", got " + t.str());
  }
}

void expect_rank(const Tensor& t, int rank, const char* op, const char* name) {
  if (t.rank() != rank) {
    fail(op, std::string("expected ") + name + " of rank " + std::to_string(rank) + ", got " + t.str());
  }
}

// K and V caches of one float type, the same for both.
void expect_kv_cache(const ops::KvLayer& cache, const char* op) {
  if (!(cache.k.defined() && cache.v.defined() && is_float(cache.k.dtype()) && cache.v.dtype() == cache.k.dtype())) {
    fail(op, "expected K and V caches of one float type, got " + (cache.k.defined() ? cache.k.str() : "none") +
                 " and " + (cache.v.defined() ? cache.v.str() : "none"));
  }
}

}  // namespace

void Backend::matmul_group(Context& ctx, const Tensor& x, std::span<const ops::MatmulPart> parts) {
  for (const ops::MatmulPart& p : parts) {
    Tensor out = p.accumulate ? Tensor::empty(p.y->shape(), DType::kF32, ctx.device) : *p.y;
    if (p.qw != nullptr) {
      quantized_matmul(ctx, x, *p.qw, *p.bias, out);
    } else {
      matmul(ctx, x, *p.w, *p.bias, out);
    }
    if (p.accumulate) add(ctx, *p.y, out);
  }
}

void Backend::norm_matmul_group(Context& ctx, const Tensor& x, const Tensor& norm_w, float eps,
                                std::span<const ops::MatmulPart> parts) {
  Tensor normed = Tensor::empty(x.shape(), DType::kF32, ctx.device);
  rms_norm(ctx, x, norm_w, eps, normed);
  matmul_group(ctx, normed, parts);
}

void Backend::silu_mul_matmul_group(Context& ctx, Tensor& gate, const Tensor& up,
                                    std::span<const ops::MatmulPart> parts) {
  silu_mul(ctx, gate, up, gate);
  matmul_group(ctx, gate, parts);
}

void Backend::gated_mlp(Context& ctx, const Tensor& x, const Tensor& norm_w, float eps,
                        std::span<const ops::MatmulPart, 2> gate_up, const ops::MatmulPart& down) {
  norm_matmul_group(ctx, x, norm_w, eps, gate_up);
  silu_mul_matmul_group(ctx, *gate_up[0].y, *gate_up[1].y, std::span<const ops::MatmulPart>(&down, 1));
}

void Backend::attention_project(Context& ctx, const Tensor& q, const ops::KvLayer& cache,
                                const ops::AttentionBatch& batch, float scale, int32_t window, Tensor& out,
                                const ops::MatmulPart& project) {
  attention(ctx, q, cache, batch, scale, window, out);
  matmul_group(ctx, out.reshape({out.dim(0), out.dim(1) * out.dim(2)}), std::span<const ops::MatmulPart>(&project, 1));
}

void register_backend(DeviceType type, Backend* backend) { registry()[static_cast<size_t>(type)] = backend; }

Backend& backend_for(Device device) {
  Backend* b = registry()[static_cast<size_t>(device.type)];
  if (b == nullptr) throw Unsupported("no backend for device " + device.str() + " in this build");
  return *b;
}

namespace {

// The backend of ctx's device, once every defined tensor of the op is on that device (a kernel
// given another device's pointer would read garbage or crash).
Backend& backend_on(Context& ctx, const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined() && t->device() != ctx.device) {
      fail(op, t->str() + " is on " + t->device().str() + ", the op runs on " + ctx.device.str());
    }
  }
  return backend_for(ctx.device);
}

}  // namespace

namespace ops {

void embedding(Context& ctx, const Tensor& table, const Tensor& ids, Tensor& out) {
  if (!(is_float(table.dtype()) && table.rank() == 2)) {
    fail("embedding", "expected table [V, D] float, got " + table.str());
  }
  expect_dtype(ids, DType::kI32, "embedding", "ids");
  expect_rank(ids, 1, "embedding", "ids");
  expect_dtype(out, DType::kF32, "embedding", "out");
  if (!(out.shape() == Shape({ids.dim(0), table.dim(1)}))) {
    fail("embedding",
         "expected out [" + std::to_string(ids.dim(0)) + ", " + std::to_string(table.dim(1)) + "], got " + out.str());
  }
  backend_on(ctx, "embedding", {&table, &ids, &out}).embedding(ctx, table, ids, out);
}

namespace {

void expect_matmul(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  expect_dtype(x, DType::kF32, "matmul", "x");
  if (!(w.defined() && is_float(w.dtype()))) {
    fail("matmul", "expected float weights, got " + (w.defined() ? w.str() : "none"));
  }
  if (!(x.rank() == 2 && w.rank() == 2 && x.dim(1) == w.dim(1))) {
    fail("matmul", "expected [T, K] x [N, K], got " + x.shape().str() + " x " + w.shape().str());
  }
  if (bias.defined()) {
    expect_dtype(bias, DType::kF32, "matmul", "bias");
    if (!(bias.shape() == Shape({w.dim(0)}))) {
      fail("matmul", "expected bias [" + std::to_string(w.dim(0)) + "], got " + bias.str());
    }
  }
  expect_dtype(y, DType::kF32, "matmul", "y");
  if (!(y.shape() == Shape({x.dim(0), w.dim(0)}))) {
    fail("matmul", "expected y [" + std::to_string(x.dim(0)) + ", " + std::to_string(w.dim(0)) + "], got " + y.str());
  }
}

}  // namespace

void matmul(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y) {
  expect_matmul(x, w, bias, y);
  backend_on(ctx, "matmul", {&x, &w, &bias, &y}).matmul(ctx, x, w, bias, y);
}

namespace {

void expect_ggml_blocks(const QuantizedMatrix& w, const char* op) {
  if (!(ggml_is_block_quantized(w.ggml_type))) {
    fail(op, "ggml type " + std::string(ggml_type_name(w.ggml_type)) + " has no kernels (Q8_0, Q4_0, Q4_K, Q6_K do)");
  }
  const int64_t block = ggml_type_info(w.ggml_type).block_size;
  if (!(w.rows >= 0 && w.cols >= 0 && w.cols % block == 0)) {
    fail(op, std::string(ggml_type_name(w.ggml_type)) + " rows need a multiple of " + std::to_string(block) +
                 " columns, got " + std::to_string(w.cols));
  }
  const Shape want({w.rows, static_cast<int64_t>(row_bytes(w.ggml_type, w.cols))});
  if (!(w.packed.dtype() == DType::kU8 && w.packed.shape() == want)) {
    fail(op, "expected " + w.str() + " blocks u8" + want.str() + ", got " + w.packed.str());
  }
  if (!(!w.scales.defined() && !w.biases.defined())) {
    fail(op, "ggml blocks carry their own scales");
  }
}

void expect_quantized(const QuantizedMatrix& w, const char* op) {
  if (!w.defined()) {
    fail(op, "the quantized matrix is undefined");
  }
  if (w.is_ggml()) return expect_ggml_blocks(w, op);
  check_quant_spec(w.spec);
  const int64_t words = w.cols * w.spec.bits / 32, groups = w.cols / w.spec.group_size;
  if (!(w.cols % w.spec.group_size == 0 && w.cols * w.spec.bits % 32 == 0)) {
    fail(op, "columns " + std::to_string(w.cols) + " do not fit groups of " + std::to_string(w.spec.group_size));
  }
  const bool panels = w.layout == AffineLayout::kPanels16;
  if (panels && !(is_float(w.param_type) && (w.spec.bits == 4 || w.spec.bits == 8))) {
    fail(op, "panels hold 4- or 8-bit codes with float parameters, not " + w.str());
  }
  const int64_t P = (w.rows + 15) / 16;
  const Shape packed = panels ? Shape({P, panel_layout(w).panel_bytes}) : Shape({w.rows, words});
  const DType code_type = panels ? DType::kU8 : DType::kU32;
  if (!(w.packed.dtype() == code_type && w.packed.shape() == packed)) {
    fail(op, "expected packed " + packed.str() + " " + std::string(dtype_name(code_type)) + ", got " + w.packed.str());
  }
  if (panels) {
    if (w.scales.defined() || w.biases.defined()) fail(op, "panels carry their scales and biases inside");
    return;
  }
  const Shape params({w.rows, groups});
  for (const Tensor* t : {&w.scales, &w.biases}) {
    if (t == &w.biases && w.symmetric()) continue;
    if (!(t->defined() && is_float(t->dtype()) && t->dtype() == w.scales.dtype() && t->shape() == params)) {
      fail(op, "expected scales and biases " + params.str() + " of one float dtype, got " +
                   (t->defined() ? t->str() : "none"));
    }
  }
}

void expect_quantized_matmul(const Tensor& x, const QuantizedMatrix& w, const Tensor& bias, const Tensor& y) {
  expect_dtype(x, DType::kF32, "quantized_matmul", "x");
  expect_quantized(w, "quantized_matmul");
  if (!(x.rank() == 2 && x.dim(1) == w.cols)) {
    fail("quantized_matmul", "expected x [T, " + std::to_string(w.cols) + "], got " + x.str());
  }
  if (bias.defined()) {
    expect_dtype(bias, DType::kF32, "quantized_matmul", "bias");
    if (!(bias.shape() == Shape({w.rows}))) {
      fail("quantized_matmul", "expected bias [" + std::to_string(w.rows) + "], got " + bias.str());
    }
  }
  expect_dtype(y, DType::kF32, "quantized_matmul", "y");
  if (!(y.shape() == Shape({x.dim(0), w.rows}))) {
    fail("quantized_matmul",
         "expected y [" + std::to_string(x.dim(0)) + ", " + std::to_string(w.rows) + "], got " + y.str());
  }
}

}  // namespace

void quantized_matmul(Context& ctx, const Tensor& x, const QuantizedMatrix& w, const Tensor& bias, Tensor& y) {
  expect_quantized_matmul(x, w, bias, y);
  backend_on(ctx, "quantized_matmul", {&x, &w.packed, &w.scales, &w.biases, &bias, &y})
      .quantized_matmul(ctx, x, w, bias, y);
}

namespace {

// Each part of a group of x's matmuls: its tensors present, its shapes and dtypes those of its
// matmul, on ctx's device.
void expect_parts(Context& ctx, const Tensor& x, std::span<const MatmulPart> parts, const char* op) {
  for (const MatmulPart& p : parts) {
    if (!((p.w != nullptr || p.qw != nullptr) && p.bias != nullptr && p.y != nullptr)) {
      fail(op, "a part lacks a tensor");
    }
    if (p.qw != nullptr) {
      expect_quantized_matmul(x, *p.qw, *p.bias, *p.y);
      backend_on(ctx, op, {&p.qw->packed, &p.qw->scales, &p.qw->biases, p.bias, p.y});
    } else {
      expect_matmul(x, *p.w, *p.bias, *p.y);
      backend_on(ctx, op, {p.w, p.bias, p.y});
    }
  }
}

}  // namespace

void matmul_group(Context& ctx, const Tensor& x, std::span<const MatmulPart> parts) {
  expect_parts(ctx, x, parts, "matmul_group");
  backend_on(ctx, "matmul_group", {&x}).matmul_group(ctx, x, parts);
}

namespace {

// norm_matmul_group's arguments (as `op`): x [T, K] and norm_w [K] f32, the parts of x's matmuls,
// none of them writing x.
Backend& expect_norm_group(Context& ctx, const Tensor& x, const Tensor& norm_w, std::span<const MatmulPart> parts,
                           const char* op) {
  expect_dtype(x, DType::kF32, op, "x");
  expect_dtype(norm_w, DType::kF32, op, "norm_w");
  if (!(x.rank() == 2 && norm_w.shape() == Shape({x.dim(1)}))) {
    fail(op, "expected x [T, K] and norm_w [K]; got " + x.str() + ", " + norm_w.str());
  }
  expect_parts(ctx, x, parts, op);
  for (const MatmulPart& p : parts)
    if (!(p.y->raw() != x.raw())) {
      fail(op, "a part's output is x");
    }
  return backend_on(ctx, op, {&x, &norm_w});
}

// silu_mul_matmul_group's: gate and up [T, K] f32, the parts of their product's matmuls, none of
// them writing gate or up.
Backend& expect_silu_group(Context& ctx, const Tensor& gate, const Tensor& up, std::span<const MatmulPart> parts,
                           const char* op) {
  expect_dtype(gate, DType::kF32, op, "gate");
  expect_dtype(up, DType::kF32, op, "up");
  if (!(gate.rank() == 2 && up.shape() == gate.shape())) {
    fail(op, "expected gate and up [T, K]; got " + gate.str() + ", " + up.str());
  }
  expect_parts(ctx, gate, parts, op);
  for (const MatmulPart& p : parts)
    if (!(p.y->raw() != gate.raw() && p.y->raw() != up.raw())) {
      fail(op, "a part's output is gate or up");
    }
  return backend_on(ctx, op, {&gate, &up});
}

}  // namespace

void norm_matmul_group(Context& ctx, const Tensor& x, const Tensor& norm_w, float eps,
                       std::span<const MatmulPart> parts) {
  expect_norm_group(ctx, x, norm_w, parts, "norm_matmul_group").norm_matmul_group(ctx, x, norm_w, eps, parts);
}

void silu_mul_matmul_group(Context& ctx, Tensor& gate, const Tensor& up, std::span<const MatmulPart> parts) {
  expect_silu_group(ctx, gate, up, parts, "silu_mul_matmul_group").silu_mul_matmul_group(ctx, gate, up, parts);
}

void gated_mlp(Context& ctx, const Tensor& x, const Tensor& norm_w, float eps, std::span<const MatmulPart, 2> gate_up,
               const MatmulPart& down) {
  Backend& b = expect_norm_group(ctx, x, norm_w, gate_up, "gated_mlp");
  if (gate_up[0].accumulate || gate_up[1].accumulate) fail("gated_mlp", "gate or up accumulates");
  expect_silu_group(ctx, *gate_up[0].y, *gate_up[1].y, std::span<const MatmulPart>(&down, 1), "gated_mlp");
  b.gated_mlp(ctx, x, norm_w, eps, gate_up, down);
}

void quantized_embedding(Context& ctx, const QuantizedMatrix& table, const Tensor& ids, Tensor& out) {
  expect_quantized(table, "quantized_embedding");
  expect_dtype(ids, DType::kI32, "quantized_embedding", "ids");
  expect_rank(ids, 1, "quantized_embedding", "ids");
  expect_dtype(out, DType::kF32, "quantized_embedding", "out");
  if (!(out.shape() == Shape({ids.dim(0), table.cols}))) {
    fail("quantized_embedding",
         "expected out [" + std::to_string(ids.dim(0)) + ", " + std::to_string(table.cols) + "], got " + out.str());
  }
  // Ids on another device are the backend's to check.
  for (int64_t i = 0; ids.device().type == DeviceType::kCpu && i < ids.dim(0); ++i) {
    const int32_t id = ids.data<int32_t>()[i];
    if (!(id >= 0 && id < table.rows)) {
      fail("quantized_embedding",
           "token id " + std::to_string(id) + " outside vocabulary of " + std::to_string(table.rows));
    }
  }
  backend_on(ctx, "quantized_embedding", {&table.packed, &table.scales, &table.biases, &ids, &out})
      .quantized_embedding(ctx, table, ids, out);
}

void rms_norm(Context& ctx, const Tensor& x, const Tensor& w, float eps, Tensor& y) {
  expect_dtype(x, DType::kF32, "rms_norm", "x");
  expect_dtype(w, DType::kF32, "rms_norm", "w");
  expect_dtype(y, DType::kF32, "rms_norm", "y");
  if (!(x.rank() >= 1 && w.shape() == Shape({x.dim(-1)}) && y.shape() == x.shape())) {
    fail("rms_norm", "expected x [*, D], w [D], y like x; got " + x.str() + ", " + w.str() + ", " + y.str());
  }
  backend_on(ctx, "rms_norm", {&x, &w, &y}).rms_norm(ctx, x, w, eps, y);
}

namespace {

void expect_rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq) {
  expect_dtype(x, DType::kF32, "rope", "x");
  expect_rank(x, 3, "rope", "x");
  expect_dtype(positions, DType::kI32, "rope", "positions");
  expect_dtype(inv_freq, DType::kF32, "rope", "inv_freq");
  if (!(positions.shape() == Shape({x.dim(0)}))) {
    fail("rope", "expected positions [T], got " + positions.str() + " for x " + x.str());
  }
  if (!(inv_freq.rank() == 1 && 2 * inv_freq.dim(0) <= x.dim(2))) {
    fail("rope", "rotary dims " + std::to_string(2 * inv_freq.dim(0)) + " exceed head dim of " + x.str());
  }
}

void expect_kv_write(const Tensor& k, const Tensor& v, const Tensor& slots, const KvLayer& cache) {
  expect_dtype(k, DType::kF32, "kv_write", "k");
  expect_dtype(v, DType::kF32, "kv_write", "v");
  expect_dtype(slots, DType::kI32, "kv_write", "slots");
  expect_kv_cache(cache, "kv_write");
  if (!(k.rank() == 3 && k.shape() == v.shape() && cache.k.rank() == 4 && cache.k.shape() == cache.v.shape() &&
        k.dim(1) == cache.k.dim(2) && k.dim(2) == cache.k.dim(3) && slots.shape() == Shape({k.dim(0)}))) {
    fail("kv_write", "expected k, v [T, Hkv, Dh], slots [T], cache [B, bs, Hkv, Dh]; got " + k.str() + ", " + v.str() +
                         ", " + slots.str() + ", " + cache.k.str());
  }
}

}  // namespace

void rope(Context& ctx, Tensor& x, const Tensor& positions, const Tensor& inv_freq, float attention_factor) {
  expect_rope(x, positions, inv_freq);
  backend_on(ctx, "rope", {&x, &positions, &inv_freq}).rope(ctx, x, positions, inv_freq, attention_factor);
}

void kv_write(Context& ctx, const Tensor& k, const Tensor& v, const Tensor& slots, KvLayer& cache) {
  expect_kv_write(k, v, slots, cache);
  backend_on(ctx, "kv_write", {&k, &v, &slots, &cache.k, &cache.v}).kv_write(ctx, k, v, slots, cache);
}

void rope_kv_write(Context& ctx, Tensor& q, Tensor& k, const Tensor& v, const Tensor& positions, const Tensor& inv_freq,
                   float attention_factor, const Tensor& slots, KvLayer& cache) {
  expect_rope(q, positions, inv_freq);
  expect_rope(k, positions, inv_freq);
  expect_kv_write(k, v, slots, cache);
  if (!(q.dim(0) == k.dim(0) && q.dim(2) == k.dim(2))) {
    fail("rope_kv_write", "q " + q.str() + " and k " + k.str() + " differ in rows or head dim");
  }
  backend_on(ctx, "rope_kv_write", {&q, &k, &v, &positions, &inv_freq, &slots, &cache.k, &cache.v})
      .rope_kv_write(ctx, q, k, v, positions, inv_freq, attention_factor, slots, cache);
}

namespace {

// attention's arguments (as `op`).
Backend& expect_attention(Context& ctx, const Tensor& q, const KvLayer& cache, const AttentionBatch& batch,
                          const Tensor& out, const char* op) {
  expect_dtype(q, DType::kF32, op, "q");
  expect_dtype(out, DType::kF32, op, "out");
  expect_rank(q, 3, op, "q");
  expect_kv_cache(cache, op);
  if (!(out.shape() == q.shape())) {
    fail(op, "expected out like q " + q.str() + ", got " + out.str());
  }
  if (!(cache.k.rank() == 4 && cache.k.shape() == cache.v.shape() && cache.k.dim(3) == q.dim(2) &&
        q.dim(1) % cache.k.dim(2) == 0)) {
    fail(op, "q " + q.str() + " does not fit cache " + cache.k.str() + " (GQA needs Hq % Hkv == 0)");
  }
  expect_dtype(batch.seq_starts, DType::kI32, op, "seq_starts");
  expect_dtype(batch.context_lens, DType::kI32, op, "context_lens");
  expect_dtype(batch.block_tables, DType::kI32, op, "block_tables");
  const int64_t n_seqs = batch.context_lens.dim(0);
  if (!(batch.seq_starts.shape() == Shape({n_seqs + 1}) && batch.block_tables.rank() == 2 &&
        batch.block_tables.dim(0) == n_seqs)) {
    fail(op, "batch metadata shapes disagree");
  }
  return backend_on(ctx, op,
                    {&q, &cache.k, &cache.v, &batch.seq_starts, &batch.context_lens, &batch.block_tables, &out});
}

}  // namespace

void attention(Context& ctx, const Tensor& q, const KvLayer& cache, const AttentionBatch& batch, float scale,
               int32_t window, Tensor& out) {
  expect_attention(ctx, q, cache, batch, out, "attention").attention(ctx, q, cache, batch, scale, window, out);
}

void attention_project(Context& ctx, const Tensor& q, const KvLayer& cache, const AttentionBatch& batch, float scale,
                       int32_t window, Tensor& out, const MatmulPart& project) {
  Backend& b = expect_attention(ctx, q, cache, batch, out, "attention_project");
  const Tensor x = out.reshape({out.dim(0), out.dim(1) * out.dim(2)});
  expect_parts(ctx, x, std::span<const MatmulPart>(&project, 1), "attention_project");
  if (project.y->raw() == out.raw()) fail("attention_project", "the projection writes the attention's output");
  b.attention_project(ctx, q, cache, batch, scale, window, out, project);
}

void silu_mul(Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out) {
  expect_dtype(gate, DType::kF32, "silu_mul", "gate");
  expect_dtype(up, DType::kF32, "silu_mul", "up");
  expect_dtype(out, DType::kF32, "silu_mul", "out");
  if (!(gate.shape() == up.shape() && out.shape() == gate.shape())) {
    fail("silu_mul", "expected equal shapes, got " + gate.str() + ", " + up.str() + ", " + out.str());
  }
  backend_on(ctx, "silu_mul", {&gate, &up, &out}).silu_mul(ctx, gate, up, out);
}

void add(Context& ctx, Tensor& a, const Tensor& b) {
  expect_dtype(a, DType::kF32, "add", "a");
  expect_dtype(b, DType::kF32, "add", "b");
  if (!(a.shape() == b.shape())) {
    fail("add", "expected equal shapes, got " + a.str() + " and " + b.str());
  }
  backend_on(ctx, "add", {&a, &b}).add(ctx, a, b);
}

void argmax(Context& ctx, const Tensor& x, Tensor& ids) {
  expect_dtype(x, DType::kF32, "argmax", "x");
  expect_rank(x, 2, "argmax", "x");
  expect_dtype(ids, DType::kI32, "argmax", "ids");
  if (!(ids.shape() == Shape({x.dim(0)}) && x.dim(1) > 0)) {
    fail("argmax", "expected ids [R] for x " + x.str());
  }
  backend_on(ctx, "argmax", {&x, &ids}).argmax(ctx, x, ids);
}

void softmax(Context& ctx, Tensor& x) {
  expect_dtype(x, DType::kF32, "softmax", "x");
  expect_rank(x, 2, "softmax", "x");
  backend_on(ctx, "softmax", {&x}).softmax(ctx, x);
}

void sample(Context& ctx, const Tensor& logits, const Tensor& rows, Tensor& ids) {
  expect_dtype(logits, DType::kF32, "sample", "logits");
  expect_rank(logits, 2, "sample", "logits");
  expect_dtype(rows, DType::kI32, "sample", "rows");
  expect_dtype(ids, DType::kI32, "sample", "ids");
  const int64_t R = logits.dim(0);
  if (!(logits.dim(1) > 0 && logits.dim(1) <= std::numeric_limits<int32_t>::max())) {
    fail("sample", "expected a vocabulary of 1..2^31-1, got " + logits.str());
  }
  if (!(rows.shape() == Shape({R, int64_t{sizeof(SampleRow) / 4}}))) {
    fail("sample", "expected rows [R, 6] for logits " + logits.str() + ", got " + rows.str());
  }
  if (!(ids.shape() == Shape({R}))) {
    fail("sample", "expected ids [R] for logits " + logits.str());
  }
  backend_on(ctx, "sample", {&logits, &rows, &ids}).sample(ctx, logits, rows, ids);
}

void edit_logits(Context& ctx, Tensor& logits, const Tensor& edits) {
  expect_dtype(logits, DType::kF32, "edit_logits", "logits");
  expect_rank(logits, 2, "edit_logits", "logits");
  expect_dtype(edits, DType::kI32, "edit_logits", "edits");
  if (!(edits.rank() == 2 && edits.dim(1) == int64_t{sizeof(LogitEdit) / 4})) {
    fail("edit_logits", "expected edits [E, 5], got " + edits.str());
  }
  if (edits.numel() == 0) return;
  backend_on(ctx, "edit_logits", {&logits, &edits}).edit_logits(ctx, logits, edits);
}

void logprobs(Context& ctx, const Tensor& logits, const Tensor& ids, Tensor& chosen, Tensor& top_ids, Tensor& top) {
  expect_dtype(logits, DType::kF32, "logprobs", "logits");
  expect_rank(logits, 2, "logprobs", "logits");
  expect_dtype(ids, DType::kI32, "logprobs", "ids");
  expect_dtype(chosen, DType::kF32, "logprobs", "chosen");
  expect_dtype(top_ids, DType::kI32, "logprobs", "top_ids");
  expect_dtype(top, DType::kF32, "logprobs", "top");
  const int64_t R = logits.dim(0), V = logits.dim(1);
  if (!(V > 0 && V <= std::numeric_limits<int32_t>::max())) {
    fail("logprobs", "expected a vocabulary of 1..2^31-1, got " + logits.str());
  }
  if (!(ids.shape() == Shape({R}) && chosen.shape() == Shape({R}))) {
    fail("logprobs", "expected ids and chosen [R] for logits " + logits.str());
  }
  const int64_t n = top.rank() == 2 ? top.dim(1) : -1;
  if (!(top.rank() == 2 && top.dim(0) == R && n <= std::min<int64_t>(V, kMaxTopLogprobs) &&
        top_ids.shape() == top.shape())) {
    fail("logprobs", "expected top_ids and top [R, n <= min(V, 20)] for logits " + logits.str() + ", got " + top.str());
  }
  if (R == 0) return;
  backend_on(ctx, "logprobs", {&logits, &ids, &chosen, &top_ids, &top})
      .logprobs(ctx, logits, ids, chosen, top_ids, top);
}

void check_errors(Context& ctx) { backend_for(ctx.device).check_errors(ctx); }

std::unique_ptr<DeviceGraph> record_graph(Context& ctx, const std::function<void()>& work) {
  return backend_for(ctx.device).record_graph(ctx, work);
}

}  // namespace ops
}  // namespace hearth
