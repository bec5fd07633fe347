/* What the attention kernels (attention.cu, attention_tc.cu, attention_pf.cu)
 * share: a row's slot and key count, clamped into the cache, the tensor-core
 * kernels' q staging and the shared-memory opt-in. */
#ifndef DSP_KERNELS_CUDA_ATTENTION_ROWS_CUH
#define DSP_KERNELS_CUDA_ATTENTION_ROWS_CUH
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda/layers.h"

__device__ __forceinline__ int64_t dsp_att_slot(const dsp_cu_attention_args &a, int64_t t) {
  const int64_t rs = a.row_slot[t];
  return rs < 0 ? 0 : rs >= a.slots ? a.slots - 1 : rs;
}

__device__ __forceinline__ int64_t dsp_att_keys(const dsp_cu_attention_args &a, int64_t t) {
  const int64_t rk = a.row_keys[t];
  return rk < 1 ? 1 : rk > a.max_len ? a.max_len : rk;
}

/* The end of the run of rows from r0 (before tend) that read r0's slot. */
__device__ __forceinline__ int64_t dsp_att_run_end(const dsp_cu_attention_args &a, int64_t r0, int64_t tend) {
  const int64_t slot = dsp_att_slot(a, r0);
  int64_t re = r0 + 1;
  while (re < tend && dsp_att_slot(a, re) == slot) re++;
  return re;
}

__device__ __forceinline__ uint32_t dsp_att_saddr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
/* Stores to a shared-memory address (no generic-to-shared conversion per store). */
__device__ __forceinline__ void dsp_att_sts32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void dsp_att_sts16(uint32_t addr, uint16_t v) {
  asm volatile("st.shared.b16 [%0], %1;" ::"r"(addr), "h"(v) : "memory");
}

/* The tensor-core kernels' q staging: pair p < npad of a run from row r0 (row r0 + p / group, head h0 + p % group)
 * into qs row p of pitch QP, D dims; pairs from np on are zeros. 16-byte pieces where a.q_vec says they can be. */
template <int D, int QP>
__device__ __forceinline__ void dsp_att_stage_q(const dsp_cu_attention_args &a, uint16_t *qs, int64_t r0, int64_t h0,
                                                int np, int npad, int group, int tid, int nth) {
  const dsp_cu_view &v = a.q;
  const uint16_t *qb = (const uint16_t *)v.data + r0 * v.s_row + h0 * v.s_head;
  if (a.q_vec)
    for (int i = tid; i < npad * (D / 8); i += nth) {
      const int p = i / (D / 8), c8 = i % (D / 8);
      uint4 x = make_uint4(0, 0, 0, 0);
      if (p < np) x = *(const uint4 *)(qb + (p / group) * v.s_row + (p % group) * v.s_head + 8 * c8);
      *(uint4 *)(qs + p * QP + 8 * c8) = x;
    }
  else
    for (int i = tid; i < npad * D; i += nth) {
      const int p = i / D, d = i % D;
      qs[p * QP + d] = p < np ? qb[(p / group) * v.s_row + (p % group) * v.s_head + (int64_t)d * v.s_dim] : (uint16_t)0;
    }
}

/* Raises kernel k's dynamic shared memory limit to bytes. */
static inline cudaError_t dsp_att_optin(const void *k, size_t bytes) {
  return cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

#endif
