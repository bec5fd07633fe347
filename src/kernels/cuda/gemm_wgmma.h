/* The project's bf16 NT GEMM kernel on Hopper's warpgroup tensor cores
 * (sm_90a): out[m][n] = bf16(sum_k a[m][k] w[n][k]) with bf16 operands, fp32
 * accumulation and one rounding (contract 1's, NaN written as 0x7FC0).
 *
 * Accumulation order of one element (contract 2): onto +0, the K / 16 groups
 * of 16 k in ascending order, one wgmma m64nNk16 each (the tensor core adds a
 * group's 16 products into the fp32 accumulator). The token tile (32, 64,
 * 112, 128, 224 or 256 by M) changes the instruction's width, not an element's
 * sequence; whether the device gives the same bits at every width is measured
 * by dsp_cuda_gemm_wg_check before gemm.cu uses this kernel. Which block
 * computes a row of w changes nothing: batch- and shard-invariant. The split
 * form (dsp_cuda_gemm_wg_split_run) has its own fixed order, below.
 *
 * Layout: rows of w (output features, vocabulary rows) are wgmma's M (128 per
 * tile, two consumer warpgroups of 64; 64 per tile for token tiles 32 and 64
 * and the narrow 112 and 128, the two warpgroups taking half of the tokens
 * each), rows of a (tokens) its N. A persistent
 * grid; one producer thread per block streams [64 k] boxes of both operands by
 * TMA with the 128-byte swizzle into a ring of stages. */
#ifndef DSP_KERNELS_CUDA_GEMM_WGMMA_H
#define DSP_KERNELS_CUDA_GEMM_WGMMA_H
#include <cuda_runtime.h>
#include <stdint.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Or'd into a token tile of 112 or 128: over 64-row weight tiles (twice the tiles of the 128-row ones, for
 * products whose 128-row tiles leave SMs idle: 4096 outputs at 65-256 rows). */
#define DSP_WG_NARROW 0x1000

/* 1 when this device and K can run the kernel (sm_90, K % 64 == 0, the ring
 * fits shared memory, a tensor-map encoder exists), else 0. */
int dsp_cuda_gemm_wg_supported(int64_t k);
/* a: [m][lda] (lda % 8 == 0), w: [n][k] (row stride k), both 16-byte aligned;
 * out: [m][ldo] (ldo % 8 == 0), bf16, or with f32 the fp32 sums before their
 * rounding (a row-parallel product's partials). nt: 0 picks the token tile by M
 * (dsp_cuda_gemm_wg_tile); 32, 64, 112, 128, 224 or 256 (112 and 128 also with
 * DSP_WG_NARROW) forces one. cluster: 0 the default (2 where pairs of blocks fill at least
 * 15/16 of the SMs, else 1), 1 single blocks, 2 pairs of blocks that share the
 * activation loads by TMA multicast. Enqueued on s, capturable. pdl: launched
 * programmatically (PDL): the blocks may start while the kernel before them on
 * s runs and load the first stages of w then, the activations only after
 * griddepcontrol.wait; so w must not be written by that kernel. */
dsp_status dsp_cuda_gemm_wg_run(const void *a, int64_t lda, const void *w, void *out, int64_t m, int64_t n, int64_t k,
                                int64_t ldo, int nt, int cluster, int pdl, int f32, cudaStream_t s);
/* The token tile for M rows of a product with N outputs: 32 and 64 run
 * 64-row weight tiles, 112, 128, 224 and 256 128-row ones, 112 and 128 with
 * DSP_WG_NARROW 64-row ones (every tile gives the same bits; DSPARK_GEMM_TILE
 * forces one for every M, for measurement). */
int dsp_cuda_gemm_wg_tile(int64_t m, int64_t n);
/* The K split for a weight [n][k] on this device: 1 (none), 2, 4 or 8, the
 * fewest k blocks per SM with every cluster of the split resident, from n, k
 * and the device alone (never from M: batch invariance). Splitting changes an
 * element's order (partials added in fp32 by the halving tree), so a product whose
 * bits must not depend on n (a vocabulary shard) keeps 1. */
int dsp_cuda_gemm_wg_split_choice(int64_t n, int64_t k);
/* 1 when the split form runs `split` blocks a cluster on this device (some resident at once). */
int dsp_cuda_gemm_wg_split_runs(int split);
/* The product with K split over clusters of `split` blocks (2, 4 or 8, k / 64
 * at least split), token tile 112 for every M; otherwise as dsp_cuda_gemm_wg_run.
 * Where split divides k / 64, part r is K slice r of kernels/cpu/slices.h and
 * the parts are added by its tree: a weight in that many slices. */
dsp_status dsp_cuda_gemm_wg_split_run(const void *a, int64_t lda, const void *w, void *out, int64_t m, int64_t n,
                                      int64_t k, int64_t ldo, int split, int pdl, int f32, cudaStream_t s);
/* Runs a random product (M = 224, 512 rows of w, this K, values with inexact
 * sums) with every (token tile, cluster) pair and compares them bit for bit.
 * compared / differ: values. */
dsp_status dsp_cuda_gemm_wg_check(int64_t k, long long *compared, long long *differ);

#ifdef __cplusplus
}
#endif
#endif
