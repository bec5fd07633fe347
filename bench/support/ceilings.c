/* Ceilings measured on the spot (see cpu/ceilings.h). Inputs are filled from
 * a counter hash in parallel, so setting up a large weight stays quick. */
#include "support/ceilings.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "support/synth.h"
#include "core/bf16.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/markov_step.h"
#include "kernels/cpu/matmul.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The project's synthetic values (src/model/synth.h): uniform in [-1, 1), bf16. */
static void fill_random(dsp_bf16 *p, size_t n, uint64_t seed) {
  size_t rows = n / 1024; /* rows of 1024 so the fill runs on every thread */
  dsp_synth_fill(p, (int64_t)rows, 1024, 0, seed, 1.0f);
  dsp_synth_fill(p + rows * 1024, 1, (int64_t)(n - rows * 1024), (int64_t)rows, seed, 1.0f);
}

double dsp_cpu_measure_copy_gbps(void) {
  const size_t bytes = (size_t)256 << 20;
  char *src = aligned_alloc(64, bytes), *dst = aligned_alloc(64, bytes);
  if (!src || !dst) {
    free(src);
    free(dst);
    dsp_fail(DSP_ERR_NOMEM, "copy bandwidth: cannot allocate 2 x 256 MiB");
    return -1.0;
  }
  const int threads = dsp_cpu_threads_resolve(0);
  /* First touch in the same split as the copies, so pages sit near their thread. */
#pragma omp parallel num_threads(threads)
  {
    size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
    size_t b0 = bytes * id / nt, b1 = bytes * (id + 1) / nt;
    memset(src + b0, 1, b1 - b0);
    memset(dst + b0, 0, b1 - b0);
  }
  enum { REPS = 5 };
  double t[REPS];
  for (int r = 0; r < REPS; r++) {
    double t0 = now_s();
#pragma omp parallel num_threads(threads)
    {
      size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
      size_t b0 = bytes * id / nt, b1 = bytes * (id + 1) / nt;
      memcpy(dst + b0, src + b0, b1 - b0);
    }
    t[r] = now_s() - t0;
  }
  /* Keep the copies observable. */
  volatile char sink = dst[bytes - 1];
  (void)sink;
  free(src);
  free(dst);
  return 2.0 * (double)bytes / median(t, REPS) / 1e9;
}

double dsp_cpu_measure_read_gbps(void) {
  const size_t bytes = (size_t)512 << 20, words = bytes / 8;
  uint64_t *buf = aligned_alloc(64, bytes);
  if (!buf) {
    dsp_fail(DSP_ERR_NOMEM, "read bandwidth: cannot allocate 512 MiB");
    return -1.0;
  }
  const int threads = dsp_cpu_threads_resolve(0);
#pragma omp parallel num_threads(threads)
  {
    const size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
    memset(buf + words * id / nt, 1, (words * (id + 1) / nt - words * id / nt) * 8);
  }
  enum { REPS = 5 };
  double t[REPS];
  uint64_t sum = 0;
  for (int r = 0; r < REPS; r++) {
    const double t0 = now_s();
#pragma omp parallel num_threads(threads) reduction(+ : sum)
    {
      const size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
      const size_t lo = words * id / nt, hi = words * (id + 1) / nt;
      /* eight independent sums in registers: the loads, not an add chain, set the pace */
      uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
      for (size_t i = lo; i + 8 <= hi; i += 8) {
        a0 += buf[i], a1 += buf[i + 1], a2 += buf[i + 2], a3 += buf[i + 3];
        a4 += buf[i + 4], a5 += buf[i + 5], a6 += buf[i + 6], a7 += buf[i + 7];
      }
      sum += a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    }
    t[r] = now_s() - t0;
  }
  volatile uint64_t sink = sum; /* keeps the reads */
  (void)sink;
  free(buf);
  return (double)bytes / median(t, REPS) / 1e9;
}

/* Repeats fn(ctx) for about `budget` seconds after one warm-up; median seconds. */
static double time_median(dsp_status (*fn)(void *), void *ctx, double budget) {
  double t0 = now_s();
  if (fn(ctx) != DSP_OK) return -1.0;
  double first = now_s() - t0;
  int reps = first > 0 ? (int)(budget / first) : 50;
  reps = reps < 3 ? 3 : reps > 50 ? 50 : reps;
  double t[50];
  for (int r = 0; r < reps; r++) {
    t0 = now_s();
    if (fn(ctx) != DSP_OK) return -1.0;
    t[r] = now_s() - t0;
  }
  return median(t, reps);
}

typedef struct {
  dsp_tensor a, c;
  dsp_cpu_packed *w;
  int nthreads;
  dsp_cpu_markov_args args;
} bench_ctx;

static dsp_status run_product(void *p) {
  bench_ctx *b = p;
  return dsp_cpu_matmul_nt(&b->a, b->w, &b->c, b->nthreads);
}

static dsp_status run_markov(void *p) {
  bench_ctx *b = p;
  return dsp_cpu_markov_step(&b->args, b->nthreads);
}

/* Random a [M, K] and packed w [N, K]; NULL w on failure (message set). */
static dsp_status setup(bench_ctx *b, int64_t M, int64_t K, int64_t N) {
  memset(b, 0, sizeof *b);
  if (M <= 0 || K <= 0 || N <= 0) return dsp_fail(DSP_ERR_ARG, "measure: sizes must be positive");
  dsp_bf16 *w = malloc((size_t)N * (size_t)K * sizeof *w);
  dsp_bf16 *a = malloc((size_t)M * (size_t)K * sizeof *a);
  if (!w || !a) {
    free(w);
    free(a);
    return dsp_fail(DSP_ERR_NOMEM, "measure: cannot allocate inputs");
  }
  fill_random(w, (size_t)N * (size_t)K, 1);
  fill_random(a, (size_t)M * (size_t)K, 2);
  dsp_tensor wt = dsp_tensor_2d(w, DSP_BF16, N, K);
  dsp_status s = dsp_cpu_pack(&wt, &b->w);
  free(w);
  if (s != DSP_OK) {
    free(a);
    return s;
  }
  b->a = dsp_tensor_2d(a, DSP_BF16, M, K);
  return DSP_OK;
}

static void teardown(bench_ctx *b) {
  free(b->a.data);
  free(b->c.data);
  dsp_cpu_packed_free(b->w);
}

double dsp_cpu_measure_product_gflops(int64_t M, int64_t K, int64_t N, int nthreads) {
  bench_ctx b;
  if (setup(&b, M, K, N) != DSP_OK) return -1.0;
  b.nthreads = nthreads;
  b.c = dsp_tensor_2d(malloc((size_t)M * (size_t)N * sizeof(dsp_bf16)), DSP_BF16, M, N);
  double t = -1.0;
  if (!b.c.data) dsp_fail(DSP_ERR_NOMEM, "measure: cannot allocate the output");
  else t = time_median(run_product, &b, 0.5);
  teardown(&b);
  return t > 0 ? 2.0 * (double)M * (double)K * (double)N / t / 1e9 : -1.0;
}

double dsp_cpu_measure_markov_gflops(int64_t M, int64_t R, int64_t N, int nthreads, double *ms_per_step) {
  bench_ctx b;
  if (setup(&b, M, R, N) != DSP_OK) return -1.0;
  b.nthreads = nthreads;
  dsp_bf16 *base = malloc((size_t)M * (size_t)N * sizeof *base);
  float *bv = malloc((size_t)M * sizeof *bv);
  int64_t *bi = malloc((size_t)M * sizeof *bi);
  double t = -1.0;
  if (!base || !bv || !bi) {
    dsp_fail(DSP_ERR_NOMEM, "measure: cannot allocate the base logits");
  } else {
    fill_random(base, (size_t)M * (size_t)N, 3);
    dsp_tensor bt = dsp_tensor_2d(base, DSP_BF16, M, N);
    b.args = (dsp_cpu_markov_args){.e = &b.a, .w2 = b.w, .base = &bt, .n_valid = N, .best_val = bv, .best_id = bi};
    t = time_median(run_markov, &b, 0.5);
  }
  free(base);
  free(bv);
  free(bi);
  teardown(&b);
  if (ms_per_step) *ms_per_step = t > 0 ? 1e3 * t : -1.0;
  return t > 0 ? 2.0 * (double)M * (double)R * (double)N / t / 1e9 : -1.0;
}
