/* What the benchmark programs share: the wall clock, medians, and the uniform
 * bf16 fill of synthetic inputs (the project's one rounding, core/bf16.h). */
#ifndef DSP_BENCH_UTIL_H
#define DSP_BENCH_UTIL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/clock.h"
#include "core/status.h"

static inline double dsp_bench_now_ms(void) { return dsp_now_ms(); }

static inline int bench_cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static inline int bench_cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v). */
static inline float median(float *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmpf);
  return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

static inline double dsp_bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmpd);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Uniform bf16 values in [-scale, scale), a pure function of (seed, index). */
static inline void fill(uint16_t *p, size_t n, uint64_t seed, float scale) {
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < (n + 65535) / 65536; c++) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + c * 0xBF58476D1CE4E5B9ull + 1;
    size_t end = (c + 1) * 65536 < n ? (c + 1) * 65536 : n;
    for (size_t i = c * 65536; i < end; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      p[i] = dsp_f32_to_bf16(((float)(x >> 40) / 16777216.0f * 2.0f - 1.0f) * scale);
    }
  }
}

#endif
