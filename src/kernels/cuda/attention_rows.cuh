/* What the attention kernels (attention.cu, attention_tc.cu) share: a row's
 * slot and key count, clamped into the cache, and the shared-memory opt-in. */
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

/* Raises kernel k's dynamic shared memory limit to bytes. */
static inline cudaError_t dsp_att_optin(const void *k, size_t bytes) {
  return cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

#endif
