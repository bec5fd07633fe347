/* The GEMM kernel's measurement-only parts (bench/support/gemm_parts.cu). */
#ifndef DSP_BENCH_SUPPORT_GEMM_PARTS_H
#define DSP_BENCH_SUPPORT_GEMM_PARTS_H
#include <cuda_runtime.h>
#include <stdint.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

/* part: 1 tensor-core work alone, 2 data movement alone, 3 weight boxes alone, 4 activation boxes alone. */
dsp_status dsp_bench_gemm_wg_part(const void *a, const void *w, void *out, int64_t m, int64_t n, int64_t k, int64_t ldo,
                                  int part, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
