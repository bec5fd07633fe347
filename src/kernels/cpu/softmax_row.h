/* The softmax of one row of bf16 logits over a temperature, as speculative
 * sampling's acceptance needs it (host code on every backend):
 *   x_v = fp32(logit_v) / T (one fp32 division), m = the max of x,
 *   e_v = dsp_cpu_expf(x_v - m), z = the double sum of e in a fixed order:
 *   eight partial sums, partial l over v = l, l + 8, ... in order, then
 *   partial 0 + 1 + ... + 7; p_v = e_v / z.
 * Every path (scalar, AVX2, AVX-512) gives the same e and z bit for bit. */
#ifndef DSP_KERNELS_CPU_SOFTMAX_ROW_H
#define DSP_KERNELS_CPU_SOFTMAX_ROW_H
#include <stdint.h>

#include "dspark.h"

/* e[0 .. V-1] and z of row l (V >= 1); NaN logits propagate into z. */
double dsp_cpu_softmax_row(const dsp_bf16 *l, int64_t V, float T, float *e);

#endif
