/* Measurement-only variants of the GEMM kernel (bench_lm's energy split): the
 * M <= 224 kernel with its tensor-core work alone (part 1: operands land once
 * per stage, then are reused; out gets meaningless values) or its data
 * movement alone (part 2: every box lands, nothing multiplies it; out gets
 * zeros; parts 3 and 4: only the weight boxes, only the activation boxes).
 * Same grid, ring, barriers and stores as the product. */
#include "kernels/cuda/gemm_wgmma_kernel.cuh"
#include "support/gemm_parts.h"

extern "C" dsp_status dsp_bench_gemm_wg_part(const void *a, const void *w, void *out, int64_t m, int64_t n, int64_t k,
                                          int64_t ldo, int part, cudaStream_t s) {
  const lw_dev &dv = lw_dev_once();
  if (!dv.ok || k % LW_BK || ldo % 8 || ldo < n || m < 1 || m > 224)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda gemm (wgmma) part: not supported here (M %lld, K %lld)",
                    (long long)m, (long long)k);
  if (part == 1) return lw_launch<224, 1, 1>(a, k, w, out, m, n, k, ldo, dv, s);
  if (part == 2) return lw_launch<224, 1, 2>(a, k, w, out, m, n, k, ldo, dv, s);
  if (part == 3) return lw_launch<224, 1, 3>(a, k, w, out, m, n, k, ldo, dv, s);
  if (part == 4) return lw_launch<224, 1, 4>(a, k, w, out, m, n, k, ldo, dv, s);
  return dsp_fail(DSP_ERR_ARG, "cuda gemm (wgmma) part: %d (1 compute, 2 data movement, 3 weights, 4 activations)",
                  part);
}

