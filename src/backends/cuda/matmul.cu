// Dense y = x w^T + b. x: [T, K] f32, w: [N, K] f32|bf16|f16, bias: [N] f32 or none,
// y: [T, N] f32.
//
// Decode (T <= kMatvecRows): one warp per output row n reads w's row once, coalesced, for all
// T rows of x, accumulating in f32 (w widened exactly, as on the CPU): memory-bound, so it
// reads at the bandwidth the weights allow. Several matrices of one x (q, k, v) share a launch,
// their rows one range: a launch of a small matrix alone spends much of its time ramping up
// and draining.
// Prefill: cuBLAS. f32 weights take SGEMM (f32 math, no TF32); bf16/f16 weights take the
// tensor cores with x rounded to the weights' type and f32 accumulation (docs/numerics.md).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <dlfcn.h>

#include <array>
#include <mutex>
#include <stdexcept>
#include <string>

#include "backends/cuda/convert.cuh"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/loads.cuh"
#include "backends/cuda/reduce.cuh"
#include "base/error.h"

namespace hearth::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

// The matrices of one launch: part p owns the launch's rows [first[p], first[p + 1]).
template <typename W>
struct Parts {
  const W* w[kMaxMatvecParts];
  const float* bias[kMaxMatvecParts];
  float* y[kMaxMatvecParts];
  int64_t N[kMaxMatvecParts];
  bool accumulate[kMaxMatvecParts];
  int64_t first[kMaxMatvecParts + 1];
  int n;
};

// The launch's row r as its part's matrix, bias, output, row count and row, chosen with
// constant indices (a computed index into the kernel's parameters would copy them all to local
// memory).
template <typename W>
struct Row {
  const W* w;
  const float* bias;
  float* y;
  int64_t N, n;
  bool accumulate;

  // Row t's output: the dot, plus the bias, plus y's old value where the part accumulates.
  __device__ void store(int64_t t, float dot) const {
    const float out = dot + (bias != nullptr ? bias[n] : 0.0f);
    float& at = y[t * N + n];
    at = accumulate ? at + out : out;
  }
};
template <typename W>
__device__ inline Row<W> row_of(const Parts<W>& p, int64_t r) {
  Row<W> row{p.w[0], p.bias[0], p.y[0], p.N[0], r, p.accumulate[0]};
#pragma unroll
  for (int j = 1; j < kMaxMatvecParts; ++j) {
    if (j < p.n && r >= p.first[j]) row = {p.w[j], p.bias[j], p.y[j], p.N[j], r - p.first[j], p.accumulate[j]};
  }
  return row;
}

template <typename W, int kT>
__global__ void matvec_kernel(const float* x, Parts<W> p, int64_t K) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const bool valid = r < p.first[p.n];
  const Row<W> m = row_of(p, valid ? r : 0);
  const W* row = m.w + m.n * K;
  if (valid) prefetch_row_head(row, K * static_cast<int64_t>(sizeof(W)), lane);
  wait_for_previous(__func__);
  if (!valid) return;
  float acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = 0.0f;
  for (int64_t k = lane; k < K; k += 32) {
    const float wk = widen(row[k]);
    for (int t = 0; t < kT; ++t) acc[t] += x[t * K + k] * wk;
  }
  for (int t = 0; t < kT; ++t) {
    const float sum = warp_sum(acc[t]);
    if (lane == 0) m.store(t, sum);
  }
}

// An RMSNorm that a launch applies to its one row of x (w null: none).
struct RowNorm {
  const float* w;
  float eps;
};

// x as a kernel of the launch reads it: as given, or (kNorm, one row) RMSNorm(x) * norm.w, which
// each block computes into its shared memory ([K] f32, dynamic) after the wait, with the norm
// kernel's threads, tree and arithmetic (rms_norm.cu), so the matvec sees the bits rms_norm
// writes. Costs every block a read of x and the norm's weights from L2, and saves the launch of
// the norm and its round trip through memory. Needs x and norm.w 16-byte aligned, K % 4 == 0.
template <bool kNorm>
__device__ __forceinline__ const float* row_source(const float* x, RowNorm norm, int64_t K) {
  if constexpr (!kNorm) {
    return x;
  } else {
    static_assert(kWarpsPerBlock * 32 == kRowThreads, "a block sums the row's squares as the norm kernel does");
    extern __shared__ float4 normed[];
    const float inv = inverse_rms(x, K, norm.eps, true);
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* g4 = reinterpret_cast<const float4*>(norm.w);
    for (int64_t i = threadIdx.x; i < K / 4; i += kRowThreads) {
      const float4 v = x4[i], g = g4[i];
      normed[i] = make_float4(g.x * (v.x * inv), g.y * (v.y * inv), g.z * (v.z * inv), g.w * (v.w * inv));
    }
    __syncthreads();
    return reinterpret_cast<const float*>(normed);
  }
}

// The same with 16-byte loads: lane i reads 16 bytes of the row at a time (8 bf16/f16 or 4 f32),
// four loads in flight, so a warp moves 2 KiB per round trip to memory. (Eight in flight read
// slower on the H200: 2.5-2.7 TB/s instead of 3.0-3.1 for the 4096-row matrices.) Needs K * sizeof(W)
// and the rows' start a multiple of 16 bytes, and x 16-byte aligned.
template <typename W, int kT, bool kNorm>
__device__ __forceinline__ void matvec16(const float* x, const Parts<W>& p, int64_t K, RowNorm norm) {
  static_assert(!kNorm || kT == 1, "a norm in the matvec takes one row");
  constexpr int kPer = 16 / sizeof(W);  // elements per 16-byte load
  constexpr int kUnroll = 4;
  const int64_t r = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const bool valid = r < p.first[p.n];
  const Row<W> m = row_of(p, valid ? r : 0);
  const uint4* row = reinterpret_cast<const uint4*>(m.w + m.n * K);
  // The row's head asked of L2 while the previous kernel finishes, unless this launch takes the
  // norm: a decode step fuses the norm into the matvec right after a matvec that adds to the
  // residual (down or o), which is still streaming its own weights when this kernel's blocks
  // start, and the early heads take its bandwidth. After the small kernels (the attention's
  // merge, SiLU, a separate norm) memory is idle and the heads pay. H100, Llama-3-8B bf16: tg128
  // +1.0% against every launch prefetching, +0.2% against none (bench/RESULTS.md, stop 53).
  if (valid && !kNorm) prefetch_row_head(row, K * static_cast<int64_t>(sizeof(W)), lane);
  wait_for_previous(__func__);
  x = row_source<kNorm>(x, norm, K);
  if (!valid) return;
  const int64_t vecs = K / kPer;
  float acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = 0.0f;
  for (int64_t v0 = lane; v0 < vecs; v0 += 32 * kUnroll) {
    uint4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = v0 + 32 * u;
      raw[u] = v < vecs ? load_stream(row + v) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = v0 + 32 * u;
      if (v >= vecs) break;
      const W* e = reinterpret_cast<const W*>(&raw[u]);
      for (int t = 0; t < kT; ++t) {
        const float4* xv = reinterpret_cast<const float4*>(x + t * K + v * kPer);
#pragma unroll
        for (int j = 0; j < kPer / 4; ++j) {
          const float4 xj = xv[j];
          acc[t] += xj.x * widen(e[4 * j]) + xj.y * widen(e[4 * j + 1]) + xj.z * widen(e[4 * j + 2]) +
                    xj.w * widen(e[4 * j + 3]);
        }
      }
    }
  }
  for (int t = 0; t < kT; ++t) {
    const float sum = warp_sum(acc[t]);
    if (lane == 0) m.store(t, sum);
  }
}

template <typename W, int kT, bool kNorm>
__global__ void matvec16_kernel(const float* x, Parts<W> p, int64_t K, RowNorm norm) {
  matvec16<W, kT, kNorm>(x, p, K, norm);
}

// The same with its registers capped so that an SM holds kCappedBlocksPerSm blocks (H200: 40
// registers, 6 blocks, where the kernel above takes 42 and 5). Slower per warp (o 12.0 -> 13.3 us,
// down 34.3 -> 38.2), it wins where the rows fill one wave of it but more than one of the kernel
// above, whose last partial wave would read with few warps: q+k+v's 6144 rows (768 blocks against
// 660 resident) ran 19.4 -> 14.4 us (bench/RESULTS.md, 2026-12-04, stop 27).
constexpr int kCappedBlocksPerSm = 6;
template <typename W, int kT, bool kNorm>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, kCappedBlocksPerSm)
    matvec16_capped_kernel(const float* x, Parts<W> p, int64_t K, RowNorm norm) {
  matvec16<W, kT, kNorm>(x, p, K, norm);
}

template <typename W>
bool takes_16_byte_loads(const float* x, const Parts<W>& p, int64_t K) {
  bool aligned = (K * sizeof(W)) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  for (int i = 0; i < p.n; ++i) aligned = aligned && reinterpret_cast<uintptr_t>(p.w[i]) % 16 == 0;
  return aligned;
}

// The 16-byte kernel, or its capped copy where that one holds all of the launch's warps at once
// and the other does not.
template <typename W, int kT, bool kNorm>
void matvec16_launch(cudaStream_t s, const float* x, const Parts<W>& p, int64_t K, RowNorm norm) {
  constexpr unsigned threads = kWarpsPerBlock * 32;
  const unsigned blocks = blocks_for(p.first[p.n], kWarpsPerBlock);
  const size_t shared = kNorm ? static_cast<size_t>(K) * sizeof(float) : 0;
  if constexpr (kT == 1) {
    // Once per instantiation (and process: the first GPU's counts, and the first launch's K,
    // stand for all).
    static const int64_t resident = resident_warps(matvec16_kernel<W, kT, kNorm>, threads, shared),
                         capped = resident_warps(matvec16_capped_kernel<W, kT, kNorm>, threads, shared);
    const int64_t warps = int64_t{blocks} * kWarpsPerBlock;
    if (warps > resident && warps <= capped) {
      return launch_kernel(matvec16_capped_kernel<W, kT, kNorm>, blocks, threads, shared, s, x, p, K, norm);
    }
  }
  launch_kernel(matvec16_kernel<W, kT, kNorm>, blocks, threads, shared, s, x, p, K, norm);
}

template <typename W, int kT>
void matvec(cudaStream_t s, const float* x, const Parts<W>& p, int64_t K) {
  if (takes_16_byte_loads(x, p, K)) {
    matvec16_launch<W, kT, false>(s, x, p, K, RowNorm{nullptr, 0.0f});
  } else {
    launch_kernel(matvec_kernel<W, kT>, blocks_for(p.first[p.n], kWarpsPerBlock), kWarpsPerBlock * 32, 0, s, x, p, K);
  }
}

template <typename W>
Parts<W> parts_of(const MatvecPart* parts, int n) {
  Parts<W> p{};
  p.n = n;
  for (int i = 0; i < n; ++i) {
    p.w[i] = static_cast<const W*>(parts[i].w);
    p.bias[i] = parts[i].bias;
    p.y[i] = parts[i].y;
    p.N[i] = parts[i].N;
    p.accumulate[i] = parts[i].accumulate;
    p.first[i + 1] = p.first[i] + parts[i].N;
  }
  return p;
}

template <typename W>
void matvec_rows(cudaStream_t s, const float* x, int64_t T, const MatvecPart* parts, int n, int64_t K) {
  const Parts<W> p = parts_of<W>(parts, n);
  if (p.first[n] == 0) return;
  switch (T) {
    case 1: return matvec<W, 1>(s, x, p, K);
    case 2: return matvec<W, 2>(s, x, p, K);
    case 3: return matvec<W, 3>(s, x, p, K);
    case 4: return matvec<W, 4>(s, x, p, K);
    case 5: return matvec<W, 5>(s, x, p, K);
    case 6: return matvec<W, 6>(s, x, p, K);
    case 7: return matvec<W, 7>(s, x, p, K);
    default: return matvec<W, kMatvecRows>(s, x, p, K);
  }
}

// One row through a norm: false where the 16-byte kernel does not take the launch, or the row
// does not fit the shared memory a block has without asking (48 KiB).
template <typename W>
bool norm_matvec_row(cudaStream_t s, const float* x, RowNorm norm, const MatvecPart* parts, int n, int64_t K) {
  const Parts<W> p = parts_of<W>(parts, n);
  if (!takes_16_byte_loads(x, p, K) || K % 4 != 0 || reinterpret_cast<uintptr_t>(norm.w) % 16 != 0 ||
      K * static_cast<int64_t>(sizeof(float)) > 48 * 1024)
    return false;
  if (p.first[n] > 0) matvec16_launch<W, 1, true>(s, x, p, K, norm);
  return true;
}

template <typename W>
__global__ void narrow_kernel(const float* x, int64_t n, W* out) {
  wait_for_previous(__func__);
  const int64_t i = blockIdx.x * 256LL + threadIdx.x;
  if (i < n) out[i] = narrow<W>(x[i]);
}

__global__ void add_bias_kernel(float* y, const float* bias, int64_t T, int64_t N) {
  wait_for_previous(__func__);
  const int64_t i = blockIdx.x * 256LL + threadIdx.x;
  if (i < T * N) y[i] += bias[i % N];
}

// The cuBLAS entry points used here, from libcublas opened on first use (CMakeLists.txt says
// why it is not linked): by its soname (LD_LIBRARY_PATH, the loader's cache), else from the
// toolkit the build found.
struct CublasApi {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasSgemm_v2) sgemm;
  // The C symbol's signature (the header adds a C++ overload).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&cublasGetStatusString) status_string;
};

CublasApi load_cublas() {
  const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const std::string by_name = ::dlerror();
    const std::string path = std::string(HEARTH_CUDA_LIBRARY_DIR) + "/" + name;
    lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr)
      throw std::runtime_error("cuBLAS: cannot load " + name + " (" + by_name + "; " + ::dlerror() + ")");
  }
  auto symbol = [&]<class Fn>(Fn* out, const char* symbol_name) {
    *out = reinterpret_cast<Fn>(::dlsym(lib, symbol_name));
    if (*out == nullptr) throw std::runtime_error("cuBLAS: " + name + " has no " + symbol_name);
  };
  CublasApi api{};
  symbol(&api.create, "cublasCreate_v2");
  symbol(&api.set_stream, "cublasSetStream_v2");
  symbol(&api.set_math_mode, "cublasSetMathMode");
  symbol(&api.sgemm, "cublasSgemm_v2");
  symbol(&api.gemm_ex, "cublasGemmEx");
  symbol(&api.status_string, "cublasGetStatusString");
  return api;
}

const CublasApi& cublas() {
  static const CublasApi api = load_cublas();
  return api;
}

void check_cublas(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLAS: ") + what + ": " + cublas().status_string(st));
  }
}

// Held across a handle's mode switch and its GEMM: the handles are shared by every thread.
std::mutex& cublas_mutex() {
  static std::mutex m;
  return m;
}

// One handle per device, created on first use, bound to the device's stream (caller holds
// cublas_mutex()).
cublasHandle_t handle_for(int device, cudaStream_t s) {
  static std::array<cublasHandle_t, 16> handles{};
  cublasHandle_t& h = handles.at(static_cast<size_t>(device));
  if (h == nullptr) check_cublas(cublas().create(&h), "cublasCreate");
  check_cublas(cublas().set_stream(h, s), "cublasSetStream");
  return h;
}

}  // namespace

void matvec_group(cudaStream_t s, const float* x, int64_t T, int64_t K, DType w_type, const MatvecPart* parts, int n) {
  HEARTH_CHECK(T >= 1 && T <= kMatvecRows && n >= 1 && n <= kMaxMatvecParts);
  switch (w_type) {
    case DType::kBF16: matvec_rows<__nv_bfloat16>(s, x, T, parts, n, K); break;
    case DType::kF16: matvec_rows<__half>(s, x, T, parts, n, K); break;
    default: matvec_rows<float>(s, x, T, parts, n, K); break;
  }
}

bool norm_matvec_group(cudaStream_t s, const float* x, const float* norm_w, float eps, int64_t T, int64_t K,
                       DType w_type, const MatvecPart* parts, int n) {
  HEARTH_CHECK(n >= 1 && n <= kMaxMatvecParts);
  if (T != 1) return false;
  const RowNorm norm{norm_w, eps};
  switch (w_type) {
    case DType::kBF16: return norm_matvec_row<__nv_bfloat16>(s, x, norm, parts, n, K);
    case DType::kF16: return norm_matvec_row<__half>(s, x, norm, parts, n, K);
    default: return norm_matvec_row<float>(s, x, norm, parts, n, K);
  }
}

void round_to_16bit(cudaStream_t s, const float* x, int64_t n, DType type, void* out) {
  if (type == DType::kBF16) {
    launch_kernel(narrow_kernel<__nv_bfloat16>, blocks_for(n, 256), 256, 0, s, x, n, static_cast<__nv_bfloat16*>(out));
  } else {
    launch_kernel(narrow_kernel<__half>, blocks_for(n, 256), 256, 0, s, x, n, static_cast<__half*>(out));
  }
}

void matmul(cudaStream_t s, int device, const float* x, int64_t T, int64_t K, const void* w, DType w_type, int64_t N,
            const float* bias, float* y, void* scratch) {
  if (T == 0 || N == 0) return;
  if (T <= kMatvecRows) {
    const MatvecPart part{w, bias, y, N};
    return matvec_group(s, x, T, K, w_type, &part, 1);
  }
  // Column-major view: y^T [N, T] = (w as K x N)^T . (x as K x T).
  std::lock_guard<std::mutex> lock(cublas_mutex());
  cublasHandle_t h = handle_for(device, s);
  const float one = 1.0f, zero = 0.0f;
  const int m = static_cast<int>(N), n = static_cast<int>(T), k = static_cast<int>(K);
  if (w_type == DType::kF32) {
    check_cublas(cublas().set_math_mode(h, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
    check_cublas(
        cublas().sgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, static_cast<const float*>(w), k, x, k, &zero, y, m),
        "cublasSgemm");
  } else {
    // x rounded to the weights' type in `scratch` ([T, K] 16-bit).
    const cudaDataType type = w_type == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
    round_to_16bit(s, x, T * K, w_type, scratch);
    check_cublas(cublas().set_math_mode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    check_cublas(cublas().gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, w, type, k, scratch, type, k, &zero, y,
                                  CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  }
  if (bias != nullptr) {
    launch_kernel(add_bias_kernel, blocks_for(T * N, 256), 256, 0, s, y, bias, T, N);
  }
}

}  // namespace hearth::cuda
