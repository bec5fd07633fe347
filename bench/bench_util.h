/* Shared by the CUDA benchmark programs (bench_cuda_head, bench_tail, bench_lm):
 * checked CUDA, cuBLASLt and dspark calls that end the program with file and
 * line, the median, and the uniform bf16 fill of synthetic weights. */
#ifndef DSP_BENCH_UTIL_H
#define DSP_BENCH_UTIL_H
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

#define CK(call)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));  \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)
#define CKB(call)                                                                                   \
  do {                                                                                              \
    cublasStatus_t b_ = (call);                                                                     \
    if (b_ != CUBLAS_STATUS_SUCCESS) {                                                              \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cublasLtGetStatusString(b_));   \
      exit(1);                                                                                      \
    }                                                                                               \
  } while (0)
#define CKD(call)                                                                             \
  do {                                                                                        \
    dsp_status s_ = (call);                                                                   \
    if (s_ != DSP_OK) {                                                                       \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, dsp_error_message());     \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

static inline int bench_cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v). */
static inline float median(float *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmpf);
  return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* Uniform bf16 values in [-scale, scale), a pure function of (seed, index). */
static inline void fill(uint16_t *p, size_t n, uint64_t seed, float scale) {
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < (n + 65535) / 65536; c++) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + c * 0xBF58476D1CE4E5B9ull + 1;
    size_t end = (c + 1) * 65536 < n ? (c + 1) * 65536 : n;
    for (size_t i = c * 65536; i < end; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      float f = ((float)(x >> 40) / 16777216.0f * 2.0f - 1.0f) * scale;
      uint32_t u;
      memcpy(&u, &f, 4);
      u += 0x7FFFu + ((u >> 16) & 1u);
      p[i] = (uint16_t)(u >> 16);
    }
  }
}

#endif
