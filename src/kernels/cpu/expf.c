/* The scalar form of expf.h. fma() is C99's, exact on every machine. */
#include "kernels/cpu/expf.h"

#include <math.h>
#include <string.h>

const uint64_t dsp_cpu_exp2_tab[32] = DSP_CPU_EXP2_TAB;

__attribute__((target_clones("fma", "default"))) float dsp_cpu_expf(float x) {
  if (isnan(x)) return x + x;
  if (x > DSP_CPU_EXP_HI) return INFINITY;
  if (x < DSP_CPU_EXP_LO) return 0.0f;
  const double xd = (double)x;
  double kd = fma(DSP_CPU_EXP_INVLN2N, xd, DSP_CPU_EXP_SHIFT);
  uint64_t ki;
  memcpy(&ki, &kd, 8);
  kd -= DSP_CPU_EXP_SHIFT;
  const double r = fma(DSP_CPU_EXP_INVLN2N, xd, -kd);
  const uint64_t t = dsp_cpu_exp2_tab[ki & 31] + (ki << 47);
  double s;
  memcpy(&s, &t, 8);
  const double z = fma(DSP_CPU_EXP_C0, r, DSP_CPU_EXP_C1), r2 = r * r;
  double y = fma(DSP_CPU_EXP_C2, r, 1.0);
  y = fma(z, r2, y);
  return (float)(y * s);
}
