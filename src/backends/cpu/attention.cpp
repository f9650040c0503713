// Varlen paged attention with GQA, causal and sliding-window masks.
// q: [T, Hq, Dh]; K/V cache: [n_blocks, block_size, Hkv, Dh]; out: [T, Hq, Dh].
// Query row t of sequence s sits at cache index c = context_lens[s] + t - seq_starts[s];
// it attends to cache indices j in [lo, c], lo = max(0, c - window + 1) with a window.
// Exact two-pass softmax per (row, head): scores, max, exp, normalize, weighted sum of V.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/dot.h"
#include "backends/cpu/kernels.h"

namespace hearth::cpu {
namespace {

// out += p * v over Dh
void axpy_scalar(float* out, float p, const float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += p * v[i];
}
HEARTH_AVX2 void axpy_avx2(float* out, float p, const float* v, int64_t n) {
  const __m256 vp = _mm256_set1_ps(p);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_fmadd_ps(vp, _mm256_loadu_ps(v + i), _mm256_loadu_ps(out + i)));
  axpy_scalar(out + i, p, v + i, n - i);
}
HEARTH_AVX512 void axpy_avx512(float* out, float p, const float* v, int64_t n) {
  const __m512 vp = _mm512_set1_ps(p);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = simd::tail_mask16(n - i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_fmadd_ps(vp, simd::load16_f32(v + i, m), simd::load16_f32(out + i, m)));
  }
}

// s[i] = exp(s[i] - mx) over n scores; returns their sum.
float exp_sum_scalar(float* s, int64_t n, float mx) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    s[i] = std::exp(s[i] - mx);
    sum += s[i];
  }
  return sum;
}
HEARTH_AVX512 float exp_sum_avx512(float* s, int64_t n, float mx) {
  const __m512 vmx = _mm512_set1_ps(mx);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = simd::tail_mask16(n - i);
    const __m512 e = simd::exp16(_mm512_sub_ps(simd::load16_f32(s + i, m), vmx));
    _mm512_mask_storeu_ps(s + i, m, e);
    sum = _mm512_mask_add_ps(sum, m, sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

struct RowHead {
  const AttentionArgs& a;
  Isa isa;
  std::vector<float>& scores;

  const float* kv_row(const float* cache, int64_t seq, int64_t j, int64_t kv_head) const {
    const int32_t block = a.block_tables[seq * a.max_blocks + j / a.block_size];
    const int64_t slot = static_cast<int64_t>(block) * a.block_size + j % a.block_size;
    return cache + (slot * a.Hkv + kv_head) * a.Dh;
  }

  // AVX-512 with Dh = 16 * kD: q and the output row stay in registers across the keys.
  template <int kD>
  HEARTH_AVX512 void run_in_registers(const float* q, float* out, int64_t seq, int64_t lo, int64_t c,
                                      int64_t kv_head) const {
    __m512 qv[kD], o[kD];
    for (int i = 0; i < kD; ++i) {
      qv[i] = _mm512_loadu_ps(q + 16 * i);
      o[i] = _mm512_setzero_ps();
    }
    const int64_t n = c - lo + 1;
    float mx = -INFINITY;
    for (int64_t j = lo; j <= c; ++j) {
      const float* k = kv_row(a.k_cache, seq, j, kv_head);
      __m512 acc = _mm512_mul_ps(qv[0], _mm512_loadu_ps(k));
      for (int i = 1; i < kD; ++i) acc = _mm512_fmadd_ps(qv[i], _mm512_loadu_ps(k + 16 * i), acc);
      const float s = _mm512_reduce_add_ps(acc) * a.scale;
      scores[static_cast<size_t>(j - lo)] = s;
      mx = std::max(mx, s);
    }
    const float inv = 1.0f / exp_sum_avx512(scores.data(), n, mx);
    for (int64_t j = lo; j <= c; ++j) {
      const __m512 p = _mm512_set1_ps(scores[static_cast<size_t>(j - lo)] * inv);
      const float* v = kv_row(a.v_cache, seq, j, kv_head);
      for (int i = 0; i < kD; ++i) o[i] = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 16 * i), o[i]);
    }
    for (int i = 0; i < kD; ++i) _mm512_storeu_ps(out + 16 * i, o[i]);
  }

  void run(int64_t t, int64_t seq, int64_t h) const {
    const int64_t c = a.context_lens[seq] + t - a.seq_starts[seq];
    const int64_t lo = a.window > 0 ? std::max<int64_t>(0, c - a.window + 1) : 0;
    const int64_t kv_head = h / (a.Hq / a.Hkv);
    const float* q = a.q + (t * a.Hq + h) * a.Dh;
    float* out = a.out + (t * a.Hq + h) * a.Dh;
    if (isa == Isa::kAvx512 && a.Dh == 128) return run_in_registers<8>(q, out, seq, lo, c, kv_head);
    if (isa == Isa::kAvx512 && a.Dh == 64) return run_in_registers<4>(q, out, seq, lo, c, kv_head);
    const int64_t n = c - lo + 1;
    float mx = -INFINITY;
    for (int64_t j = lo; j <= c; ++j) {
      const float* k = kv_row(a.k_cache, seq, j, kv_head);
      float s;
      switch (isa) {
        case Isa::kAvx512: s = dot_avx512<DType::kF32>(q, k, a.Dh); break;
        case Isa::kAvx2: s = dot_avx2<DType::kF32>(q, k, a.Dh); break;
        default: s = dot_scalar<DType::kF32>(q, k, a.Dh); break;
      }
      s *= a.scale;
      scores[static_cast<size_t>(j - lo)] = s;
      mx = std::max(mx, s);
    }
    const float sum = isa == Isa::kAvx512 ? exp_sum_avx512(scores.data(), n, mx) : exp_sum_scalar(scores.data(), n, mx);
    const float inv = 1.0f / sum;
    std::fill(out, out + a.Dh, 0.0f);
    for (int64_t j = lo; j <= c; ++j) {
      const float p = scores[static_cast<size_t>(j - lo)] * inv;
      const float* v = kv_row(a.v_cache, seq, j, kv_head);
      switch (isa) {
        case Isa::kAvx512: axpy_avx512(out, p, v, a.Dh); break;
        case Isa::kAvx2: axpy_avx2(out, p, v, a.Dh); break;
        default: axpy_scalar(out, p, v, a.Dh); break;
      }
    }
  }
};

}  // namespace

void attention(Isa isa, ThreadPool* pool, const AttentionArgs& a) {
  // Row -> sequence map and the longest context, computed once.
  std::vector<int32_t> row_seq(static_cast<size_t>(a.T));
  int64_t max_ctx = 1;
  for (int64_t s = 0; s < a.n_seqs; ++s) {
    for (int64_t t = a.seq_starts[s]; t < a.seq_starts[s + 1]; ++t)
      row_seq[static_cast<size_t>(t)] = static_cast<int32_t>(s);
    max_ctx = std::max<int64_t>(max_ctx, a.context_lens[s] + a.seq_starts[s + 1] - a.seq_starts[s]);
  }
  auto run = [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(max_ctx));
    const RowHead rh{a, isa, scores};
    for (int64_t i = begin; i < end; ++i) {
      const int64_t t = i / a.Hq, h = i % a.Hq;
      rh.run(t, row_seq[static_cast<size_t>(t)], h);
    }
  };
  const int64_t items = a.T * a.Hq;
  if (pool != nullptr) {
    pool->parallel_for(items, 1, run);
  } else {
    run(0, items);
  }
}

}  // namespace hearth::cpu
