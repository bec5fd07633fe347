/* The AVX-512 row kernels behind layers.c (bit for bit its scalar loops). */
#ifndef DSP_KERNELS_CPU_LAYERS_AVX512_H
#define DSP_KERNELS_CPU_LAYERS_AVX512_H
#include <stdint.h>

#include "dspark.h"

/* RMSNorm of n <= 16 rows of D >= 2 contiguous values: xr[i] in, orow[i] out
 * (may be xr[i]). */
void dsp_cpu_rmsnorm_avx512(dsp_bf16 *const *xr, dsp_bf16 *const *orow, int n, int64_t D, const dsp_bf16 *w,
                            float eps);
/* o[j] = bf16(bf16(silu(g[j])) * u[j]), j < n, contiguous. */
void dsp_cpu_silu_mul_avx512(const dsp_bf16 *g, const dsp_bf16 *u, dsp_bf16 *o, int64_t n);
/* RoPE of one head row in place (contiguous), the tables' row c, sn. */
void dsp_cpu_rope_avx512(dsp_bf16 *row, const dsp_bf16 *c, const dsp_bf16 *sn, int64_t half);
/* o[j] = bf16(a[j] + b[j]), j < n, contiguous (o may alias a or b). */
void dsp_cpu_add_avx512(const dsp_bf16 *a, const dsp_bf16 *b, dsp_bf16 *o, int64_t n);
#endif
