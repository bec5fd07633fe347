/* Median microseconds of an operation on a stream, timed by CUDA events around each of reps calls after `warm`
 * untimed ones; pre() runs before each call, outside the timing. CUDA C++ only (the benchmarks' support). */
#ifndef DSP_BENCH_SUPPORT_MEDIAN_TIME_CUH
#define DSP_BENCH_SUPPORT_MEDIAN_TIME_CUH

#include <algorithm>
#include <vector>

#include "kernels/cuda/common/check.h"

template <class Pre, class Op>
dsp_status dsp_bench_median_us(cudaStream_t s, cudaEvent_t a, cudaEvent_t b, int warm, int reps, Pre pre, Op op,
                               double *us) {
  std::vector<float> t;
  for (int i = 0; i < reps + warm; i++) {
    DSP_TRY(pre());
    DSP_CUDA_TRY(cudaEventRecord(a, s));
    DSP_TRY(op());
    DSP_CUDA_TRY(cudaEventRecord(b, s));
    DSP_CUDA_TRY(cudaEventSynchronize(b));
    float ms = 0;
    DSP_CUDA_TRY(cudaEventElapsedTime(&ms, a, b));
    if (i >= warm) t.push_back(ms * 1e3f);
  }
  std::sort(t.begin(), t.end());
  *us = t[t.size() / 2];
  return DSP_OK;
}

#endif
