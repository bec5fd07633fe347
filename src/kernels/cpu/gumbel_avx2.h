/* gumbel_avx512.h's noise and selections on AVX2, 8 token ids at a time, bit
 * for bit dsp_gumbel and core/select.h's order (the same method: Philox in
 * integer lanes, the two logs in double with the AVX-512 form's polynomial,
 * lanes too close to a float rounding boundary recomputed by dsp_gumbel).
 * Call only where dsp_cpu_isa_current() is AVX2. */
#ifndef DSP_KERNELS_CPU_GUMBEL_AVX2_H
#define DSP_KERNELS_CPU_GUMBEL_AVX2_H
#include <stdint.h>

/* g[i] = dsp_gumbel(seed, position, id0 + i) for i < n <= 8; returns the lanes recomputed by the scalar form. */
int dsp_cpu_gumbel8_avx2(uint64_t seed, int64_t position, int64_t id0, int n, float *g);
/* The noise of Philox's first words r[0 .. 7]; returns the lanes recomputed. */
int dsp_cpu_gumbel_from_r8_avx2(const uint32_t *r, float *g);
/* dsp_cpu_select_avx512's key (T > 0: of fp32(fp32(x_v / T) + g); else of x_v), bf16 (f32 == 0) or fp32 rows. */
uint64_t dsp_cpu_select_avx2(const void *row, int f32, int64_t n, float T, uint64_t seed, int64_t position,
                             int64_t id0);

#endif
