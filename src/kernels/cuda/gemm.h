/* The bf16 NT GEMM on the GPU (contract 2), for every linear layer and the LM
 * head: out[m][n] = bf16(sum_k a[m][k] w[n][k]) with bf16 operands, fp32
 * accumulation and one rounding. One object per weight shape [N, K]; the
 * kernel is chosen once at creation, so every M (batch, bucket, prefill or
 * decode) runs the same per-element order.
 *
 * Default (DSP_GEMM_WGMMA): the project's wgmma kernel (gemm_wgmma.h) where
 * the device runs it (sm_90, K % 64 == 0) and its token-tile check passes.
 * Fallback: cuBLASLt with ONE pinned algorithm, the heuristic's first
 * candidate for a canonical shape that depends only on K (M = 256,
 * N = 65536), made single-pass (split-K = 1, no reduction scheme), so no
 * reduction across CTAs exists and an element's order depends neither on M nor
 * on the vocabulary split; checked against every M it will run. Where the
 * canonical choice does not run this N, the heuristic's choice for this N is
 * used and the description says it is not shard-invariant across TP sizes.
 * Against the CPU's sequential fmaf chain the tensor cores may differ in the
 * last bit where a sum is inexact (bit-identical where every partial sum is).
 *
 * Strict mode (DSPARK_CUDA_STRICT=1, and any shape neither kernel runs): a
 * CUDA-core kernel that runs the CPU's chain per element, acc = +0; for
 * k = 0..K-1: acc = fmaf(a[m][k], w[n][k], acc); out = bf16_rne(acc): bitwise
 * equal to the CPU on any input. NaN results are written as 0x7FC0. */
#ifndef DSP_KERNELS_CUDA_GEMM_H
#define DSP_KERNELS_CUDA_GEMM_H
#include <cuda_runtime.h>
#include <stdint.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dsp_cuda_gemm dsp_cuda_gemm;

/* DSP_GEMM_WGMMA: the default above; DSP_GEMM_WGMMA_SINGLE: the same kernel in
 * single blocks, never clusters; DSP_GEMM_PINNED: cuBLASLt's pinned algorithm;
 * DSP_GEMM_WGMMA_SPLIT: the own kernel with K split over a cluster where the
 * weight's shape leaves SMs idle (dsp_cuda_gemm_wg_split_choice: from N, K and
 * the device, never M, so still batch-invariant, but not shard-invariant:
 * linear layers ask for it, vocabulary shards do not). Only with DSPARK_GEMM_SPLIT=1, for measurement: since
 * the few-row kernel it is slower at every batch (bench/RESULTS.md). */
enum { DSP_GEMM_PINNED = 0, DSP_GEMM_WGMMA = 1, DSP_GEMM_WGMMA_SINGLE = 2, DSP_GEMM_WGMMA_SPLIT = 3 };
/* A product with n weight rows of k columns (n, k >= 1). */
dsp_status dsp_cuda_gemm_create(int64_t n, int64_t k, int strict, int choice, dsp_cuda_gemm **out);
/* Checks that the chosen kernel runs m rows (call once per m before capture). */
dsp_status dsp_cuda_gemm_prepare(dsp_cuda_gemm *g, int64_t m);
/* a: [m][lda] device (lda >= k); w: [n][k] device, row stride k; out: [m][ldo]
 * device (ldo >= n). The tensor-core kernels need lda, ldo % 8 == 0 and
 * 16-byte aligned pointers (DSP_ERR_UNSUPPORTED otherwise; strict runs any).
 * Enqueued on s (capturable). */
dsp_status dsp_cuda_gemm_run(dsp_cuda_gemm *g, const void *a, int64_t lda, const void *w, void *out, int64_t m,
                             int64_t ldo, cudaStream_t s);
/* The same product with out [m][ldo] fp32: each element's sum before its
 * rounding, in the order the bf16 form rounds (a row-parallel product's
 * partial, all-reduced then rounded once). The own kernels and strict run it;
 * a weight on cuBLASLt gets DSP_ERR_UNSUPPORTED. */
dsp_status dsp_cuda_gemm_run_f32(dsp_cuda_gemm *g, const void *a, int64_t lda, const void *w, float *out, int64_t m,
                                 int64_t ldo, cudaStream_t s);
/* A row-parallel weight in `slices` K slices (kernels/cpu/slices.h's order: each
 * slice's sum from +0 in this kernel's order, the sums added by the halving
 * tree), so that TP ranks holding whole subtrees give TP 1's bits. The strict
 * chain takes up to 16 slices of multiples of 32 columns (the CPU's rule); the
 * tensor-core kernels 2, 4 or 8 slices of multiples of 64 columns, on the
 * few-row kernel and the cluster split alike; cuBLASLt none. *taken: 0 where
 * this weight keeps one sum over K (said in its description). Before the first
 * product; once per weight. */
dsp_status dsp_cuda_gemm_slice(dsp_cuda_gemm *g, int slices, int *taken);
/* "own wgmma kernel, ...", "cublasLt algo 66 tile 24 ... (pinned, ...)" or "strict fmaf chain". */
const char *dsp_cuda_gemm_describe(const dsp_cuda_gemm *g);
void dsp_cuda_gemm_free(dsp_cuda_gemm *g);

#ifdef __cplusplus
}
#endif
#endif
