/* The bf16 NT GEMM for few token rows (M <= 32) on the warp-level tensor
 * cores (mma.sync m16n8k16): out[m][n] = bf16(sum_k a[m][k] w[n][k]), the
 * accumulation order of gemm_wgmma.h (onto +0, the K / 16 groups of 16 k in
 * ascending order, each group's 16 products in the tensor core's slots k
 * mod 16), so where the device gives mma.sync the bits of wgmma (measured by
 * dsp_cuda_gemm_small_check before gemm.cu uses it) an element is the same
 * whichever kernel computed it: batch- and shard-invariant.
 *
 * Why: at a few tokens each element's chain of K / 16 dependent tensor-core
 * instructions sets a floor (an mma.sync link alone takes about 24 cycles on
 * an H200: K 12288 is 9.5 us), and the bytes set another. Here one warp owns
 * 16 rows of w, so a product has 4x more independent chains than the wgmma
 * kernel's 64-row tiles. A block is C consumer warps (the strips of a group)
 * and one producer warp that lands each stage's weights and tokens with one
 * 3-D TMA copy each; the consumers' loop over a stage is unrolled, so that a
 * box costs its loads and products, not its bookkeeping (which, in a loop,
 * was 100 instructions a box and made each link cost about 120 cycles).
 * CUDA C++ only (sm_80+ instructions; built for sm_90a). */
#ifndef DSP_KERNELS_CUDA_GEMM_SMALL_H
#define DSP_KERNELS_CUDA_GEMM_SMALL_H
#include <cuda_runtime.h>
#include <stdint.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most token rows the kernel takes (gemm.cu gives it every product of up to that many rows): at 32 rows it took
 * 18-23% less than the wgmma kernel on the 4096-row products and the same on the wider ones (bench/RESULTS.md,
 * thirty-seventh session). */
#define DSP_GEMM_SMALL_MAX_M 32

/* A launch shape for measurement (bench/): c consumer warps (strips) a block, sb boxes of [64 k] a stage (2 or 4),
 * at most `stages` stages; a field of 0 keeps the kernel's pick. No shape changes a bit. */
typedef struct {
  int c, sb, stages;
} dsp_gemm_small_shape;

/* a: [m][lda] (lda % 8 == 0), w: [n][k] (row stride k, k % 64 == 0), out:
 * [m][ldo], bf16 or (f32) the unrounded fp32 sums; a and w 16-byte aligned;
 * 1 <= m <= DSP_GEMM_SMALL_MAX_M. slices: 1, or 2, 4 or 8 K slices of whole
 * 64-column boxes (a row-parallel weight, kernels/cpu/slices.h's order: each
 * slice's sum in the order above, the sums added by the halving tree, as
 * dsp_cuda_gemm_wg_split_run with split = slices adds its parts). Enqueued on
 * s, capturable; pdl as dsp_cuda_gemm_wg_run's; shape NULL: the kernel's pick. */
dsp_status dsp_cuda_gemm_small_run(const void *a, int64_t lda, const void *w, void *out, int64_t m, int64_t n,
                                   int64_t k, int64_t ldo, int slices, int pdl, const dsp_gemm_small_shape *shape,
                                   int f32, cudaStream_t s);
/* Random products with inexact sums (M = 32, 21, 16 and 5, 520 rows of w, this K)
 * through this kernel and through the wgmma kernel, compared bit for bit. */
dsp_status dsp_cuda_gemm_small_check(int64_t k, long long *compared, long long *differ);

#ifdef __cplusplus
}
#endif
#endif
