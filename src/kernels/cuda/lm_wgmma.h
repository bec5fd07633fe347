/* The LM-head product on Hopper's warpgroup tensor cores (sm_90a), the
 * project's own kernel (lm_wgmma.cu): out[m][n] = bf16(sum_k a[m][k] w[n][k])
 * with bf16 operands, fp32 accumulation and one rounding (contract 1's, NaN
 * written as 0x7FC0).
 *
 * Accumulation order of one element (contract 2): onto +0, the K / 16 groups
 * of 16 k in ascending order, one wgmma m64nNk16 each (the tensor core adds a
 * group's 16 products into the fp32 accumulator). The token tile N (112 for
 * M <= 112, else 224) changes the instruction's width, not an element's
 * sequence; whether the device gives the same bits at both widths is measured
 * by dsp_cuda_lm_wg_check before lm_head.c uses this kernel. The vocabulary
 * split only moves which block computes a row. So: batch- and shard-invariant.
 *
 * Layout: vocabulary rows are wgmma's M (128 per tile, two consumer
 * warpgroups of 64), token rows its N, so the 224 token rows of batch 32 x
 * gamma 7 are not padded to 256. A persistent grid; one producer thread per
 * block streams [64 k] boxes of both operands by TMA with the 128-byte swizzle
 * into a ring of stages. */
#ifndef DSP_CUDA_LM_WGMMA_H
#define DSP_CUDA_LM_WGMMA_H
#include <cuda_runtime.h>
#include <stdint.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this device and K can run the kernel (sm_90, K % 64 == 0, the ring
 * fits shared memory, a tensor-map encoder exists), else 0. */
int dsp_cuda_lm_wg_supported(int64_t k);
/* a: [m][k], w: [n][k] (row stride k, 16-byte aligned), out: [m][ldo]
 * (ldo % 8 == 0). nt: 0 picks the token tile by M; 112 or 224 forces one.
 * cluster: 0 the default (2 where pairs of blocks fill at least 15/16 of
 * the SMs, else 1), 1 single blocks, 2 pairs of blocks that share the
 * activation loads by multicast (bench/RESULTS.md v35, v37). Enqueued on s,
 * capturable. */
dsp_status dsp_cuda_lm_wg_run(const void *a, const void *w, void *out, int64_t m, int64_t n, int64_t k, int64_t ldo,
                              int nt, int cluster, cudaStream_t s);
/* Benchmark only (bench_lm's energy split): the M <= 224 kernel with its
 * tensor-core work alone (part 1: operands land once per stage, then are
 * reused; out gets meaningless values) or its data movement alone (part 2:
 * every box lands, nothing multiplies it; out gets zeros; parts 3 and 4: only
 * the weight boxes, only the activation boxes). Same grid, ring,
 * barriers and stores as the product. */
dsp_status dsp_cuda_lm_wg_part(const void *a, const void *w, void *out, int64_t m, int64_t n, int64_t k, int64_t ldo,
                               int part, cudaStream_t s);
/* Runs a random product (M = 224, 512 vocabulary rows, this K, values with
 * inexact sums) with every (token tile, cluster) pair and compares them bit
 * for bit. compared / differ: values. */
dsp_status dsp_cuda_lm_wg_check(int64_t k, long long *compared, long long *differ);

#ifdef __cplusplus
}
#endif
#endif
