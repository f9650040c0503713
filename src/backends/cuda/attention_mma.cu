// Prefill attention on tensor cores (FlashAttention-2's loop) for 16-bit KV caches and head dims
// 64 and 128: a block of 4 warps takes 64 query rows of one head, 16 per warp, and walks their
// keys in chunks of 64 staged in shared memory (cp.async, rows padded by 16 bytes so that
// ldmatrix reads them without bank conflicts). Per chunk a warp computes its 16 x 64 scores with
// mma.sync m16n8k16 (q rounded to the cache's type, f32 accumulation), keeps an online softmax
// per row in f32, and adds P V with P rounded to the cache's type (its row sums stay f32). The
// rows of a tile may belong to several sequences (a flat batch): the tile is taken one
// sequence's run of rows at a time, as the CUDA-core tile kernel does.
// With the fragment layouts of mma.cuh, a score tile's C registers, rounded in pairs, are the A
// registers of P for the next mma.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/attention.cuh"
#include "backends/cuda/convert.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/mma.cuh"

namespace hearth::cuda {
namespace {

constexpr int kWarps = 4, kRows = 16 * kWarps, kKeys = 64;

template <typename T, int kDh>
__global__ void attention_mma_kernel(AttentionArgs a) {
  wait_for_previous(__func__);
  constexpr int kStride = kDh + 8;  // elements per staged row: 16 bytes of padding
  constexpr int kPieces = kDh / 8;  // 16-byte pieces per row
  __shared__ __align__(16) T ks[kKeys][kStride];
  __shared__ __align__(16) T vs[kKeys][kStride];
  const int64_t h = blockIdx.y, t0 = blockIdx.x * static_cast<int64_t>(kRows);
  const int64_t t_end = min(a.T, t0 + kRows);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
  const int64_t kv_head = h / (a.Hq / a.Hkv);
  const T* k_cache = static_cast<const T*>(a.k_cache);
  const T* v_cache = static_cast<const T*>(a.v_cache);
  const int64_t rows[2] = {t0 + warp * 16 + g, t0 + warp * 16 + g + 8};  // this thread's two rows

  for (int64_t seg = t0; seg < t_end;) {
    const RowPlace first = place_of(a, seg);
    const int64_t seg_end = min(t_end, static_cast<int64_t>(a.seq_starts[first.seq + 1]));
    bool live[2];
    int64_t last[2], lo[2];  // row i sees keys [lo[i], last[i]]
    for (int i = 0; i < 2; ++i) {
      live[i] = rows[i] >= seg && rows[i] < seg_end;
      last[i] = first.c + (rows[i] - seg);
      lo[i] = a.window > 0 ? max(int64_t{0}, last[i] - a.window + 1) : 0;
    }
    // q (scaled) as A fragments, zero for rows outside this run.
    uint32_t qa[kDh / 16][4];
#pragma unroll
    for (int kt = 0; kt < kDh / 16; ++kt) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = r % 2, d = kt * 16 + 2 * c + 8 * (r / 2);
        const float* q = a.q + (rows[i] * a.Hq + h) * kDh + d;
        qa[kt][r] = live[i] ? pack2<T>(q[0] * a.scale, q[1] * a.scale) : 0u;
      }
    }
    float o[kDh / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int dt = 0; dt < kDh / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
    // The run's keys: from the first row's lowest visible one to the last row's own.
    const int64_t key_lo = a.window > 0 ? max(int64_t{0}, first.c - a.window + 1) : 0;
    const int64_t key_hi = first.c + (seg_end - 1 - seg);
    for (int64_t j0 = key_lo; j0 <= key_hi; j0 += kKeys) {
      __syncthreads();  // the previous chunk is read
      for (int e = threadIdx.x; e < kKeys * kPieces; e += kWarps * 32) {
        const int key = e / kPieces, piece = e % kPieces;
        const int64_t j = j0 + key;
        T* kd = &ks[key][piece * 8];
        T* vd = &vs[key][piece * 8];
        if (j <= key_hi) {
          const int64_t at = cache_row(a, first.seq, j, kv_head, kDh) + piece * 8;
          copy16_async(kd, k_cache + at);
          copy16_async(vd, v_cache + at);
        } else {  // past the run's keys: zeros, never a stale value (0 * NaN is NaN)
          *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
          *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
        }
      }
      commit_copies();
      wait_copies<0>();
      __syncthreads();

      // Scores: s[nt] is the 16 x 8 tile of keys j0 + 8 nt.
      float s[kKeys / 8][4];
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
      for (int kt = 0; kt < kDh / 16; ++kt) {
#pragma unroll
        for (int np = 0; np < kKeys / 16; ++np) {
          uint32_t b[4];
          load_matrices(b, &ks[np * 16 + lane % 8 + 8 * (lane / 16)][kt * 16 + 8 * ((lane / 8) % 2)]);
          mma<T>(s[2 * np], qa[kt], b[0], b[1]);
          mma<T>(s[2 * np + 1], qa[kt], b[2], b[3]);
        }
      }
      // Mask, then the online softmax of each of the thread's two rows (a row's 64 scores sit
      // in the 4 lanes of its quad).
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int64_t j = j0 + nt * 8 + 2 * c + e;
            float& v = s[nt][2 * i + e];
            if (!live[i] || j < lo[i] || j > last[i]) v = -INFINITY;
            mx = fmaxf(mx, v);
          }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[i], mx);
        const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet stays empty
        const float keep = expf(m[i] - base);
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& v = s[nt][2 * i + e];
            v = expf(v - base);
            sum += v;
          }
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        l[i] = l[i] * keep + sum;
        m[i] = m_new;
#pragma unroll
        for (int dt = 0; dt < kDh / 8; ++dt) {
          o[dt][2 * i] *= keep;
          o[dt][2 * i + 1] *= keep;
        }
      }
      // o += P V, 16 keys at a time.
#pragma unroll
      for (int kt = 0; kt < kKeys / 16; ++kt) {
        const uint32_t pa[4] = {pack2<T>(s[2 * kt][0], s[2 * kt][1]), pack2<T>(s[2 * kt][2], s[2 * kt][3]),
                                pack2<T>(s[2 * kt + 1][0], s[2 * kt + 1][1]),
                                pack2<T>(s[2 * kt + 1][2], s[2 * kt + 1][3])};
#pragma unroll
        for (int dp = 0; dp < kDh / 16; ++dp) {
          uint32_t b[4];
          load_matrices_trans(b, &vs[kt * 16 + lane % 8 + 8 * ((lane / 8) % 2)][dp * 16 + 8 * (lane / 16)]);
          mma<T>(o[2 * dp], pa, b[0], b[1]);
          mma<T>(o[2 * dp + 1], pa, b[2], b[3]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (!live[i]) continue;
      const float inv = 1.0f / l[i];
      float* out = a.out + (rows[i] * a.Hq + h) * kDh + 2 * c;
#pragma unroll
      for (int dt = 0; dt < kDh / 8; ++dt)
        *reinterpret_cast<float2*>(out + dt * 8) = make_float2(o[dt][2 * i] * inv, o[dt][2 * i + 1] * inv);
    }
    seg = seg_end;
  }
}

template <typename T>
bool launch(cudaStream_t s, const AttentionArgs& a) {
  const dim3 grid(static_cast<unsigned>((a.T + kRows - 1) / kRows), static_cast<unsigned>(a.Hq));
  if (a.Dh == 128) {
    launch_kernel(attention_mma_kernel<T, 128>, grid, kWarps * 32, 0, s, a);
  } else if (a.Dh == 64) {
    launch_kernel(attention_mma_kernel<T, 64>, grid, kWarps * 32, 0, s, a);
  } else {
    return false;
  }
  return true;
}

}  // namespace

bool attention_prefill_mma(cudaStream_t s, const AttentionArgs& a) {
  if (a.T <= kMatvecRows) return false;
  if (a.kv_dtype == DType::kBF16) return launch<__nv_bfloat16>(s, a);
  if (a.kv_dtype == DType::kF16) return launch<__half>(s, a);
  return false;
}

}  // namespace hearth::cuda
