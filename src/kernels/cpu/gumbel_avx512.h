/* Contract 5's Gumbel noise (core/philox.h) for 16 consecutive token ids at
 * once, and the selections built on it: bit for bit dsp_gumbel. Philox is
 * integer arithmetic, the same in every lane. The two logs run in double with
 * this file's own polynomial, which is within about 2^-50 of the true log;
 * where the result lies so close to a float rounding boundary that libm's log
 * could round it the other way, that lane is recomputed with dsp_gumbel
 * (test_cpu_gumbel counts how often). Call only where dsp_cpu_isa_current() is
 * AVX-512. */
#ifndef DSP_KERNELS_CPU_GUMBEL_AVX512_H
#define DSP_KERNELS_CPU_GUMBEL_AVX512_H
#include <stdint.h>

/* g[i] = dsp_gumbel(seed, position, id0 + i) for i < n <= 16. Returns the
 * number of lanes recomputed by the scalar form. */
int dsp_cpu_gumbel16_avx512(uint64_t seed, int64_t position, int64_t id0, int n, float *g);

/* The noise from Philox's first word r (g = (float)(-log(-log((r + 0.5) / 2^32)))),
 * 16 lanes: for the exhaustive check over r. Returns the lanes recomputed. */
int dsp_cpu_gumbel_from_r16_avx512(const uint32_t *r, float *g);

/* The selection key (core/select.h) that wins over row[v], v < n, ids id0 + v:
 * T > 0: of fp32(fp32(x_v / T) + g(seed, position, id0 + v)); else of x_v.
 * row: bf16 (f32 == 0) or fp32 values, contiguous. 0 when n == 0. */
uint64_t dsp_cpu_select_avx512(const void *row, int f32, int64_t n, float T, uint64_t seed, int64_t position,
                               int64_t id0);

#endif
