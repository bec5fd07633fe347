/* The CPU kernels' expf (kernels/cpu/expf.h) on the device: the same double
 * operations (explicit fma, nothing left for nvcc to contract) and the same
 * table, so its bits are dsp_cpu_expf's for every input (a NaN's payload
 * aside: CUDA's arithmetic returns its canonical NaN). The KDA kernels use
 * it where the CPU's recurrent form must be matched bit for bit. CUDA C++ only. */
#ifndef DSP_KERNELS_CUDA_COMMON_EXPF_CUH
#define DSP_KERNELS_CUDA_COMMON_EXPF_CUH
#include <stdint.h>

#include "kernels/cpu/expf.h"

/* global memory, not __constant__: a warp's lanes read different entries, which constant memory serializes */
static __device__ const uint64_t dsp_dev_exp2_tab[32] = DSP_CPU_EXP2_TAB;

/* Branch-free: the main path runs for every input (its table index is masked, so any x is safe) and the special
 * values are selected after it. Branches would put each call in its own region, one long dependent chain
 * (conversions, double ops, the table load) at a time; selects let a loop's calls overlap. */
__device__ __forceinline__ float dsp_dev_expf(float x) {
  const double xd = (double)x;
  double kd = fma(DSP_CPU_EXP_INVLN2N, xd, DSP_CPU_EXP_SHIFT);
  const uint64_t ki = (uint64_t)__double_as_longlong(kd);
  kd = __dsub_rn(kd, DSP_CPU_EXP_SHIFT);
  const double r = fma(DSP_CPU_EXP_INVLN2N, xd, -kd);
  const double s = __longlong_as_double((long long)(dsp_dev_exp2_tab[ki & 31] + (ki << 47)));
  const double z = fma(DSP_CPU_EXP_C0, r, DSP_CPU_EXP_C1), r2 = __dmul_rn(r, r);
  double y = fma(DSP_CPU_EXP_C2, r, 1.0);
  y = fma(z, r2, y);
  float e = (float)__dmul_rn(y, s);
  e = x < DSP_CPU_EXP_LO ? 0.0f : e;
  e = x > DSP_CPU_EXP_HI ? INFINITY : e;
  return isnan(x) ? x + x : e;
}

#endif
