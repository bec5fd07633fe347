/* An fp32 sum over TP ranks by the halving tree (core/tree_sum.h) on the
 * device: what the host communicators compute, so the sum of a row's partials does not depend on
 * how many rows a call moves (NCCL's own reduction picks its association by
 * message size). */
#ifndef DSP_KERNELS_CUDA_RANK_SUM_H
#define DSP_KERNELS_CUDA_RANK_SUM_H
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[i] = the halving tree over the P parts parts[r ld + i] (P <= 32), i < n, each add rounded on its own;
 * enqueued on s. */
cudaError_t dsp_cuda_rank_sum(const float *parts, int P, int64_t ld, int64_t n, float *out, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
