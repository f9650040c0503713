// The CUDA backend: unpacks tensors and queues the kernels on the device's stream. Registers
// itself for DeviceType::kCuda at static-initialization time (no CUDA call happens then, so a
// build with this backend starts on machines with no GPU).
//
// Ops without a kernel yet (dense and quantized matmul, quantized embedding, attention) throw
// Unsupported naming the op.
#include <string>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "base/error.h"
#include "core/backend.h"

namespace hearth::cuda {
namespace {

[[noreturn]] void no_kernel(const char* op) {
  throw Unsupported(std::string(op) + " has no CUDA implementation in this build");
}

// A device pair [flag, value] for kernels to report a bad index in; read back after them.
class BadIndex {
 public:
  explicit BadIndex(Device device) : t_(Tensor::zeros({2}, DType::kI32, device)) {}
  int32_t* data() { return t_.data<int32_t>(); }
  // Waits for the kernels before it; throws InputError(what + value) when one reported.
  void check(const std::string& what) const {
    const Tensor host = t_.to_device(kCpu);
    if (host.data<int32_t>()[0] != 0) throw InputError(what + std::to_string(host.data<int32_t>()[1]));
  }

 private:
  Tensor t_;
};

class CudaBackend final : public Backend {
 public:
  std::string name() const override { return "cuda"; }

  void embedding(Context& ctx, const Tensor& table, const Tensor& ids, Tensor& out) override {
    BadIndex bad(ctx.device);
    cuda::embedding(use_device(ctx.device), table.raw(), table.dtype(), table.dim(0), table.dim(1), ids.data<int32_t>(),
                    ids.dim(0), out.data<float>(), bad.data());
    bad.check("embedding: token id outside vocabulary of " + std::to_string(table.dim(0)) + ": ");
  }

  void matmul(Context&, const Tensor&, const Tensor&, const Tensor&, Tensor&) override { no_kernel("matmul"); }
  void quantized_matmul(Context&, const Tensor&, const QuantizedMatrix&, const Tensor&, Tensor&) override {
    no_kernel("quantized_matmul");
  }
  void quantized_embedding(Context&, const QuantizedMatrix&, const Tensor&, Tensor&) override {
    no_kernel("quantized_embedding");
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
    BadIndex bad(ctx.device);
    const int64_t n_slots = cache.k.dim(0) * cache.k.dim(1);
    cuda::kv_write(use_device(ctx.device), k.data<float>(), v.data<float>(), k.dim(0), k.dim(1) * k.dim(2),
                   slots.data<int32_t>(), n_slots, cache.k.raw(), cache.v.raw(), cache.k.dtype(), bad.data());
    bad.check("kv_write: slot outside the pool of " + std::to_string(n_slots) + ": ");
  }

  void attention(Context&, const Tensor&, const ops::KvLayer&, const ops::AttentionBatch&, float, int32_t,
                 Tensor&) override {
    no_kernel("attention");
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
};

const bool registered = [] {
  static CudaBackend backend;
  register_backend(DeviceType::kCuda, &backend);
  return true;
}();

}  // namespace
}  // namespace hearth::cuda
