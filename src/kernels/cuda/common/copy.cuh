/* Bulk and tensor copies (TMA) into shared memory completing on mbarriers,
 * their L2 cache policies, and the host's tensor-map encoder. CUDA C++ only. */
#ifndef DSP_KERNELS_CUDA_COMMON_COPY_CUH
#define DSP_KERNELS_CUDA_COMMON_COPY_CUH

#include <cuda.h> /* CUtensorMap (the type only; the encoder comes through the runtime) */
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

/* The driver's tensor-map encoder, through the runtime (NULL where absent). */
inline PFN_cuTensorMapEncodeTiled_v12000 dsp_tma_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 enc = []() -> PFN_cuTensorMapEncodeTiled_v12000 {
    void *p = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return NULL;
    }
    return (PFN_cuTensorMapEncodeTiled_v12000)p;
  }();
  return enc;
}

/* Global -> shared bulk copy completing `bytes` of transaction on `bar`. */
__device__ __forceinline__ void dsp_bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

/* 2-D tensor copy of box (c0 = k, c1 = row) completing on `bar`, with an L2 policy. */
__device__ __forceinline__ void dsp_tcopy2(uint32_t dst, const CUtensorMap *tm, int c0, int c1, uint32_t bar,
                                         uint64_t pol) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
      "l"(tm), "r"(c0), "r"(c1), "r"(bar), "l"(pol)
      : "memory");
}

/* Tensor copy into the same shared offset of both cluster blocks, each one's
 * mbarrier at `bar` receiving the bytes. */
__device__ __forceinline__ void dsp_tcopy2_mc(uint32_t dst, const CUtensorMap *tm, int c0, int c1, uint32_t bar,
                                            uint64_t pol) {
  const uint16_t mask = 3;
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster.L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5, %6;" ::"r"(dst),
      "l"(tm), "r"(c0), "r"(c1), "r"(bar), "h"(mask), "l"(pol)
      : "memory");
}

/* 3-D tensor copy completing on `bar`: box (c0, c1, c2) of the map. */
__device__ __forceinline__ void dsp_tcopy3(uint32_t dst, const CUtensorMap *tm, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
      "l"(tm), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

/* The same with an L2 policy. */
__device__ __forceinline__ void dsp_tcopy3_hint(uint32_t dst, const CUtensorMap *tm, int c0, int c1, int c2, uint32_t bar,
                                              uint64_t pol) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, %4}], [%5], %6;" ::"r"(dst),
      "l"(tm), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "l"(pol)
      : "memory");
}


/* L2 policies for copies' cache hints. */
__device__ __forceinline__ uint64_t dsp_l2_evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

__device__ __forceinline__ uint64_t dsp_l2_evict_last() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}

}  // namespace

#endif
