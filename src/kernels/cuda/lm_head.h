/* The LM-head product on the GPU (contract 2): out[m][n] = bf16(sum_k a[m][k] *
 * w[n][k]) with bf16 operands, fp32 accumulation and one rounding.
 *
 * Default (DSP_LM_WGMMA, what the head asks for): the project's own wgmma
 * kernel (lm_wgmma.h: 128 vocabulary rows x 224 token rows per tile, so batch
 * 32 x gamma 7 is not padded to 256; k groups of 16 in order onto +0). Why:
 * on an H200 (2026-11-30) it gave the same bits as the cuBLASLt algorithm
 * below on every value compared (36.7 M at the default shape, the edge
 * shapes of test_cuda_head) and ran faster (0.854 against 0.901 ms after idle,
 * 0.910 against 0.966 ms in rounds, bench_lm); it is shard-invariant across
 * TP sizes by construction and needs no workspace. Where the device cannot run
 * it (not sm_90, K % 64 != 0) or its token-tile check fails, cuBLASLt below.
 * Since 2026-11-30 (session 8) it runs in clusters of two that share the
 * activation loads: 1-3% faster after idle, equal in rounds; the energy
 * difference is within the calls' spread (bench_lm, bench/RESULTS.md v37).
 *
 * Fast mode otherwise: cuBLASLt on the tensor cores with ONE pinned algorithm: the
 * heuristic's first candidate for a canonical shape that depends only on K
 * (M = 256, N = 65536), made single-pass (split-K = 1, no reduction scheme),
 * so no reduction across CTAs exists; workspace-free candidates first, else a
 * bounded workspace (H = 7168 on an H200 gets one of 4 bytes); then it is
 * checked against every shape it will run. When the canonical choice does not
 * run this N the heuristic's choice for this N is used and the description
 * says it is not shard-invariant across TP sizes.
 * Because every (M, N) uses the same kernel, an element's accumulation order
 * (the kernel's fixed K loop) depends neither on the batch bucket (M) nor on
 * the vocabulary split (N): batch- and shard-invariant. Against the CPU's
 * sequential fmaf chain the tensor cores may differ in the last bit where a
 * sum is inexact (bit-identical where every partial sum is exact).
 *
 * Strict mode (DSPARK_CUDA_STRICT=1): a CUDA-core kernel that runs the CPU's
 * chain per element, acc = +0; for k = 0..K-1: acc = fmaf(a[m][k], w[n][k],
 * acc); out = bf16_rne(acc): bitwise equal to the CPU on any input.
 * NaN results are written as the canonical 0x7FC0 in strict mode (cuBLASLt
 * writes its own NaN; the head never outputs base values directly). */
#ifndef DSP_CUDA_LM_HEAD_H
#define DSP_CUDA_LM_HEAD_H
#include <cuda_runtime.h>
#include <stdint.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dsp_cuda_lm dsp_cuda_lm;

enum { DSP_LM_HEURISTIC = 0, DSP_LM_PREFERRED = 1, DSP_LM_WGMMA = 2, DSP_LM_WGMMA_SINGLE = 3 };
/* A product with N weight rows of K columns (K % 8 == 0, N % 8 == 0); choice:
 * DSP_LM_HEURISTIC (the default, see above), DSP_LM_PREFERRED (the fixed
 * sm_90 configuration where cuBLASLt runs it: benchmarks) or DSP_LM_WGMMA (the
 * project's own warpgroup kernel, lm_wgmma.h, where the device supports it and
 * its token-tile check passes, in clusters of two where they fill the device;
 * else the default); DSP_LM_WGMMA_SINGLE the same kernel in single blocks
 * (benchmarks). */
dsp_status dsp_cuda_lm_create(int64_t n, int64_t k, int strict, int choice, dsp_cuda_lm **out);
/* Checks that the pinned algorithm runs M rows (call once per M before capture). */
dsp_status dsp_cuda_lm_prepare(dsp_cuda_lm *lm, int64_t m);
/* a: [m][k] device, row stride k; w: [n][k] device, row stride k; out: [m][ldo]
 * device (ldo >= n, ldo % 8 == 0). Enqueued on s (capturable). */
dsp_status dsp_cuda_lm_run(dsp_cuda_lm *lm, const void *a, const void *w, void *out, int64_t m, int64_t ldo,
                           cudaStream_t s);
/* Benchmarks: time every candidate algorithm on this problem and keep the
 * fastest (a timed choice may differ between runs, so heads that must agree
 * on shard invariance keep the default, the heuristic's first candidate). */
dsp_status dsp_cuda_lm_autotune(dsp_cuda_lm *lm, const void *a, const void *w, void *out, int64_t m, int64_t ldo,
                                cudaStream_t s);
/* "cublasLt algo 66 tile 24 stages 35 cluster 5, ... (pinned, ...)" or "strict fmaf chain". */
const char *dsp_cuda_lm_describe(const dsp_cuda_lm *lm);
void dsp_cuda_lm_free(dsp_cuda_lm *lm);

#ifdef __cplusplus
}
#endif
#endif
