/* Warp-level tensor-core products and the copies that feed them (sm_80+):
 * mma.sync m16n8k16 with bf16 operands and fp32 accumulators, ldmatrix, and
 * 16-byte cp.async with zero fill. CUDA C++ only. */
#ifndef DSP_CUDA_COMMON_MMA_CUH
#define DSP_CUDA_COMMON_MMA_CUH

#include <stdint.h>

namespace {

/* d += a b, one m16n8k16 tile: bf16 operands, fp32 accumulators. */
__device__ __forceinline__ void dsp_mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Four 8 x 8 b16 matrices from shared memory (lanes 8 j .. 8 j + 7 address matrix j's rows). */
__device__ __forceinline__ void dsp_ldsm4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/* The same, transposed. */
__device__ __forceinline__ void dsp_ldsm4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/* Two 8 x 8 b16 matrices (lanes 0 .. 15 address their rows). */
__device__ __forceinline__ void dsp_ldsm2(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

/* The same, transposed. */
__device__ __forceinline__ void dsp_ldsm2_t(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

/* 16 bytes global -> shared through L2 only, or 16 zero bytes where !ok (nothing is read). */
__device__ __forceinline__ void dsp_cp16(uint32_t dst, const void *src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void dsp_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
/* Until at most N of this thread's committed groups are still in flight. */
template <int N>
__device__ __forceinline__ void dsp_cp_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace

#endif
