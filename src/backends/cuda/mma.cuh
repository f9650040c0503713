// Tensor-core building blocks the mma kernels share (attention_mma.cu, quant_gemm.cu, the decode
// matvecs): staging into shared memory with cp.async, ldmatrix, mma.sync m16n8k16 on 16-bit inputs
// with f32 accumulation, and m16n8k32 on 8-bit inputs with s32 accumulation (sm_80 and later).
//
// Fragments (PTX ISA, mma.m16n8k16 with 16-bit inputs; g = lane / 4, c = lane % 4):
//   A 16x16: a0 = A[g][2c, 2c+1], a1 = A[g+8][2c, 2c+1], a2 = A[g][2c+8, +9], a3 = A[g+8][2c+8, +9]
//   B 16x8:  b0 = B[2c, 2c+1][g], b1 = B[2c+8, 2c+9][g]
//   C 16x8:  c0, c1 = C[g][2c, 2c+1], c2, c3 = C[g+8][2c, 2c+1]
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace hearth::cuda {

// 16 bytes from global to shared memory without passing through registers; complete after
// cp.async.commit_group and a wait.
__device__ inline void copy16_async(void* shared, const void* global) {
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to), "l"(global));
}
// The same, or 16 zero bytes when !valid (global is not read then, but must be a valid address).
__device__ inline void copy16_async_or_zero(void* shared, const void* global, bool valid) {
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(to), "l"(global), "r"(valid ? 16 : 0));
}
__device__ inline void commit_copies() { asm volatile("cp.async.commit_group;"); }
// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
__device__ inline void wait_copies() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// Two floats as one register of two 16-bit values (the first in the low half), rounded to
// nearest even.
template <typename T>
__device__ inline uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// c += a b (16x16 by 16x8, f32 accumulation).
template <typename T>
__device__ inline void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Four 8x8 matrices of 16-bit values from shared memory; lane l gives the address of row l % 8
// of matrix l / 8 and receives, of each matrix, row g's columns 2c and 2c + 1 (or with trans,
// rows 2c and 2c + 1 of column g).
__device__ inline void load_matrices(uint32_t (&r)[4], const void* row) {
  const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}
__device__ inline void load_matrices_trans(uint32_t (&r)[4], const void* row) {
  const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

// Warps of a block of the decode matvecs on tensor cores (quant_matvec_mma.cu, ggml_matmul.cu's
// k-quants): the block takes a tile of 16 weight rows and its warps split K.
constexpr int kMmaWarps = 8;

// C += A . B with A 16x32 u8 (a0..a3 as for 16-bit inputs, four bytes per register: a0 = A[g][4c..4c+3],
// a1 = A[g+8][4c..], a2 = A[g][4c+16..], a3 = A[g+8][4c+16..]), B 32x8 s8 (b0 = B[4c..4c+3][g],
// b1 = B[4c+16..][g]) and C 16x8 s32 as above: the decode matvecs' integer dots.
__device__ inline void mma_u8s8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, int b0, int b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The same with A as s8 (codes already centred, as Q6_K's q - 32).
__device__ inline void mma_s8s8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, int b0, int b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace hearth::cuda
