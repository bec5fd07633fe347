/* Ceilings through the backend's ops (rates.h). */
#include "support/rates.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/ops.h"
#include "core/status.h"
#include "support/ceilings.h"

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

/* The floors' bandwidth (rates.h): the device copy's bytes read + written per second, or the CPU's read stream. */
double dsp_bench_copy_rate(dsp_backend *be) {
  if (be->kind == DSP_BACKEND_CPU) {
    const double g = dsp_cpu_measure_read_gbps();
    if (g <= 0) {
      fprintf(stderr, "bench: %s\n", dsp_error_message());
      exit(1);
    }
    return g * 1e9;
  }
  const size_t n = (size_t)1 << 30;
  void *a, *b;
  TRY(dsp_op_alloc(be, 0, n, &a));
  TRY(dsp_op_alloc(be, 0, n, &b));
  /* both ways first, so every page of both is written: a CPU buffer never written reads the kernel's one zero
     page from cache (62-72 GB/s on a VM that streams 23) */
  TRY(dsp_op_copy(be, 0, b, a, n));
  TRY(dsp_op_copy(be, 0, a, b, n));
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

typedef struct {
  dsp_backend *be;
  int64_t n;
  int reps;
  void *buf[DSP_BACKEND_MAX_DEVICES];
} reduce_job;

static dsp_status reduce_dev(void *ctx, int dev) {
  reduce_job *j = ctx;
  dsp_tensor x = dsp_tensor_2d(j->buf[dev], DSP_F32, 1, j->n);
  for (int r = 0; r < j->reps; r++) DSP_TRY(dsp_op_allreduce(j->be, dev, j->be->tp[dev], &x));
  return dsp_op_sync(j->be, dev);
}

/* The slowest process's value of x. */
static double slowest(dsp_backend *be, double x) {
  float v = (float)x;
  TRY(dsp_comm_allreduce(be->comm, &v, &v, 1, DSP_F32, DSP_REDUCE_MAX));
  return (double)v;
}

double dsp_bench_allreduce_ms(dsp_backend *be, int64_t floats) {
  if (be->tp_size == 1) return 0.0;
  reduce_job j = {.be = be, .n = floats, .reps = 1};
  for (int d = 0; d < be->ndev; d++) {
    TRY(dsp_op_alloc(be, d, (size_t)floats * 4, &j.buf[d]));
    float *h = calloc((size_t)floats, 4);
    TRY(dsp_op_upload(be, d, j.buf[d], h, (size_t)floats * 4));
    free(h);
  }
  TRY(dsp_backend_each(be, reduce_dev, &j)); /* the first call sets up the communicator's buffers */
  j.reps = 20;
  double ms[7];
  for (int g = 0; g < 7; g++) {
    TRY(dsp_comm_barrier(be->comm));
    const double t0 = dsp_bench_now_ms();
    TRY(dsp_backend_each(be, reduce_dev, &j));
    ms[g] = slowest(be, (dsp_bench_now_ms() - t0) / j.reps);
  }
  for (int d = 0; d < be->ndev; d++) dsp_op_release(be, d, j.buf[d]);
  return dsp_bench_median(ms, 7);
}

double dsp_bench_exchange_ms(dsp_backend *be, int64_t rows) {
  const int procs = dsp_comm_size(be->comm);
  if (procs == 1) return 0.0;
  uint64_t *keys = calloc((size_t)rows, 8), *all = calloc((size_t)rows * (size_t)procs, 8);
  if (!keys || !all) {
    fprintf(stderr, "bench: out of memory for %lld keys\n", (long long)rows);
    exit(1);
  }
  TRY(dsp_comm_allgather(be->comm, keys, all, (size_t)rows * 8));
  double ms[7];
  for (int g = 0; g < 7; g++) {
    TRY(dsp_comm_barrier(be->comm));
    const double t0 = dsp_bench_now_ms();
    for (int r = 0; r < 20; r++) TRY(dsp_comm_allgather(be->comm, keys, all, (size_t)rows * 8));
    ms[g] = slowest(be, (dsp_bench_now_ms() - t0) / 20);
  }
  free(keys);
  free(all);
  return dsp_bench_median(ms, 7);
}

void dsp_bench_memory(dsp_backend *be, double *bytes) {
  const int procs = dsp_comm_size(be->comm);
  double mine[DSP_BACKEND_MAX_DEVICES];
  for (int d = 0; d < be->ndev; d++) {
    size_t b = 0;
    mine[d] = dsp_op_memory_used(be, d, &b) == DSP_OK ? (double)b : -1.0;
  }
  /* every process drives the same number of devices */
  double *all = malloc((size_t)procs * (size_t)be->ndev * sizeof *all);
  if (!all) exit(1);
  TRY(dsp_comm_allgather(be->comm, mine, all, (size_t)be->ndev * sizeof *all));
  for (int r = 0; r < be->tp_size; r++) bytes[r] = all[r];
  free(all);
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
