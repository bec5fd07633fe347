/* The AVX2+FMA row kernels behind layers.c (bit for bit its scalar loops),
 * the same calls as layers_avx512.h. */
#ifndef DSP_KERNELS_CPU_LAYERS_AVX2_H
#define DSP_KERNELS_CPU_LAYERS_AVX2_H
#include <stdint.h>

#include "dspark.h"

void dsp_cpu_rmsnorm_avx2(dsp_bf16 *const *xr, dsp_bf16 *const *orow, int n, int64_t D, const dsp_bf16 *w, float eps);
void dsp_cpu_silu_mul_avx2(const dsp_bf16 *g, const dsp_bf16 *u, dsp_bf16 *o, int64_t n);
void dsp_cpu_rope_avx2(dsp_bf16 *row, const dsp_bf16 *c, const dsp_bf16 *sn, int64_t half);
void dsp_cpu_add_avx2(const dsp_bf16 *a, const dsp_bf16 *b, dsp_bf16 *o, int64_t n);
#endif
