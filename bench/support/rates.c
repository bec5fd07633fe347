/* Ceilings through the backend's ops (rates.h). */
#include "support/rates.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/ops.h"

#define TRY(x) DSP_BENCH_TRY(x)

double dsp_bench_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + 1e-6 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double dsp_bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return v[n / 2];
}

/* Copy bandwidth (bytes read + written per second) through the backend's own copy op. */
double dsp_bench_copy_rate(dsp_backend *be) {
  const size_t n = (size_t)1 << 30;
  void *a, *b;
  TRY(dsp_op_alloc(be, 0, n, &a));
  TRY(dsp_op_alloc(be, 0, n, &b));
  TRY(dsp_op_copy(be, 0, b, a, n));
  TRY(dsp_op_sync(be, 0));
  double best = 1e30;
  for (int g = 0; g < 5; g++) {
    const double t0 = dsp_bench_now_ms();
    for (int r = 0; r < 4; r++) TRY(dsp_op_copy(be, 0, b, a, n));
    TRY(dsp_op_sync(be, 0));
    const double ms = (dsp_bench_now_ms() - t0) / 4;
    best = ms < best ? ms : best;
  }
  dsp_op_release(be, 0, a);
  dsp_op_release(be, 0, b);
  return 2.0 * (double)n / (best * 1e-3);
}

/* bf16 product rate (flop/s) of the backend's GEMM on an m x n x k product. */
double dsp_bench_product_rate(dsp_backend *be, int64_t m, int64_t n, int64_t k) {
  dsp_bf16 *w = calloc((size_t)(n * k), 2);
  for (int64_t i = 0; i < n * k; i++) w[i] = (dsp_bf16)(0x3C00 + (i * 37 % 128));
  dsp_weight *wt;
  dsp_tensor wv = dsp_tensor_2d(w, DSP_BF16, n, k);
  TRY(dsp_op_weight_create(be, 0, &wv, 0, &wt));
  void *a, *c;
  TRY(dsp_op_alloc(be, 0, (size_t)(m * k) * 2, &a));
  TRY(dsp_op_alloc(be, 0, (size_t)(m * n) * 2, &c));
  TRY(dsp_op_upload(be, 0, a, w, (size_t)(m * k) * 2 < (size_t)(n * k) * 2 ? (size_t)(m * k) * 2 : (size_t)(n * k) * 2));
  dsp_tensor av = dsp_tensor_2d(a, DSP_BF16, m, k), cv = dsp_tensor_2d(c, DSP_BF16, m, n);
  TRY(dsp_op_gemm(be, 0, &av, wt, &cv));
  TRY(dsp_op_sync(be, 0));
  double best = 1e30;
  for (int g = 0; g < 5; g++) {
    const double t0 = dsp_bench_now_ms();
    for (int r = 0; r < 3; r++) TRY(dsp_op_gemm(be, 0, &av, wt, &cv));
    TRY(dsp_op_sync(be, 0));
    const double ms = (dsp_bench_now_ms() - t0) / 3;
    best = ms < best ? ms : best;
  }
  dsp_op_release(be, 0, a);
  dsp_op_release(be, 0, c);
  dsp_op_weight_free(be, wt);
  free(w);
  return 2.0 * (double)m * (double)n * (double)k / (best * 1e-3);
}


int dsp_bench_batches(const char *list, int32_t *bs, int cap, int *n, int32_t *max) {
  *n = 0, *max = 1;
  for (const char *p = list; *p;) {
    char *end;
    const long v = strtol(p, &end, 10);
    if (end == p || v < 1 || v > 1 << 20 || *n == cap || (*end && *end != ',')) return -1;
    bs[(*n)++] = (int32_t)v;
    *max = v > *max ? (int32_t)v : *max;
    p = *end ? end + 1 : end;
  }
  return *n ? 0 : -1;
}
