/* Greedy selection of a contiguous bf16 row on AVX2 (core/select.h's order). */
#ifndef DSP_KERNELS_CPU_SELECT_AVX2_H
#define DSP_KERNELS_CPU_SELECT_AVX2_H
#include <stdint.h>

/* dsp_select_key's maximum over ids id0 .. id0 + n - 1 of row[0 .. n - 1] (0 for n = 0). */
uint64_t dsp_cpu_select_greedy_avx2(const uint16_t *row, int64_t n, int64_t id0);

#endif
