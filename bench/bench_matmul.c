/* bench_matmul: our CPU bf16 product (cpu/matmul.h) against oneDNN's bf16
 * matmul at the head's shapes, same inputs and thread count; then whether each
 * is shard-invariant (N in one call vs three pieces at odd boundaries) and
 * batch-invariant (row 0 of the batch vs row 0 alone), counting differing
 * output elements. Ours is invariant by construction (cpu/kernel.h); the
 * count shows what oneDNN does. Prints oneDNN's implementation names.
 *
 * usage: bench_matmul [--threads T] [--quick] */
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "support/synth.h"
#include "core/bf16.h"
#include "core/tensor.h"
#include "kernels/cpu/matmul.h"

#define DNNL_CHECK(call)                                                                                   \
  do {                                                                                                     \
    dnnl_status_t st_ = (call);                                                                            \
    if (st_ != dnnl_success) {                                                                             \
      fprintf(stderr, "bench_matmul: %s:%d: %s failed (dnnl status %d)\n", __FILE__, __LINE__, #call, (int)st_); \
      exit(1);                                                                                             \
    }                                                                                                      \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xmalloc(size_t n) {
  void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
  if (!p) {
    fprintf(stderr, "bench_matmul: out of memory (%zu bytes)\n", n);
    exit(1);
  }
  return p;
}

/* The project's synthetic values (src/model/synth.h): uniform in [-1, 1), bf16. */
static void fill_random(dsp_bf16 *p, size_t n, uint64_t seed) {
  size_t rows = n / 1024; /* rows of 1024 so the fill runs on every thread */
  dsp_synth_fill(p, (int64_t)rows, 1024, 0, seed, 1.0f);
  dsp_synth_fill(p + rows * 1024, 1, (int64_t)(n - rows * 1024), (int64_t)rows, seed, 1.0f);
}

static dnnl_engine_t g_eng;
static dnnl_stream_t g_stream;

/* One oneDNN matmul dst[M, n] = src[M, K] x W^T with W given as [n, K] rows
 * (logical weights [K, n] in layout "ba"); `reorder` lets oneDNN choose the
 * weight layout (reordered once, outside the timing), as our packing does. */
typedef struct {
  dnnl_primitive_t prim;
  dnnl_primitive_desc_t pd;
  dnnl_memory_t src, wei, dst;
  const char *impl; /* owned by pd */
  void *wei_own; /* reordered weights */
} dnnl_mm;

static dnnl_mm dnnl_mm_make(int64_t M, int64_t K, int64_t n, const dsp_bf16 *a, const dsp_bf16 *w, void *dst,
                            dnnl_data_type_t dst_dt, int reorder) {
  dnnl_mm r = {0};
  dnnl_memory_desc_t smd, wmd_plain, wmd, dmd;
  dnnl_dims_t sd = {M, K}, wd = {K, n}, dd = {M, n};
  DNNL_CHECK(dnnl_memory_desc_init_by_tag(&smd, 2, sd, dnnl_bf16, dnnl_ab));
  DNNL_CHECK(dnnl_memory_desc_init_by_tag(&wmd_plain, 2, wd, dnnl_bf16, dnnl_ba));
  DNNL_CHECK(dnnl_memory_desc_init_by_tag(&wmd, 2, wd, dnnl_bf16, reorder ? dnnl_format_tag_any : dnnl_ba));
  DNNL_CHECK(dnnl_memory_desc_init_by_tag(&dmd, 2, dd, dst_dt, dnnl_ab));
  dnnl_matmul_desc_t md;
  DNNL_CHECK(dnnl_matmul_desc_init(&md, &smd, &wmd, NULL, &dmd));
  dnnl_primitive_desc_t pd;
  DNNL_CHECK(dnnl_primitive_desc_create(&pd, &md, NULL, g_eng, NULL));
  r.pd = pd;
  DNNL_CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &r.impl));
  DNNL_CHECK(dnnl_primitive_create(&r.prim, pd));
  const dnnl_memory_desc_t *chosen = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  DNNL_CHECK(dnnl_memory_create(&r.src, &smd, g_eng, (void *)a));
  DNNL_CHECK(dnnl_memory_create(&r.dst, &dmd, g_eng, dst));
  if (reorder && !dnnl_memory_desc_equal(chosen, &wmd_plain)) {
    dnnl_memory_t plain;
    DNNL_CHECK(dnnl_memory_create(&plain, &wmd_plain, g_eng, (void *)w));
    r.wei_own = xmalloc(dnnl_memory_desc_get_size(chosen));
    DNNL_CHECK(dnnl_memory_create(&r.wei, chosen, g_eng, r.wei_own));
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t rp;
    DNNL_CHECK(dnnl_reorder_primitive_desc_create(&rpd, &wmd_plain, g_eng, chosen, g_eng, NULL));
    DNNL_CHECK(dnnl_primitive_create(&rp, rpd));
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, r.wei}};
    DNNL_CHECK(dnnl_primitive_execute(rp, g_stream, 2, args));
    DNNL_CHECK(dnnl_stream_wait(g_stream));
    dnnl_primitive_destroy(rp);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_memory_destroy(plain);
  } else {
    DNNL_CHECK(dnnl_memory_create(&r.wei, &wmd_plain, g_eng, (void *)w));
  }
  return r;
}

static void dnnl_mm_run(const dnnl_mm *r) {
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, r->src}, {DNNL_ARG_WEIGHTS, r->wei}, {DNNL_ARG_DST, r->dst}};
  DNNL_CHECK(dnnl_primitive_execute(r->prim, g_stream, 3, args));
  DNNL_CHECK(dnnl_stream_wait(g_stream));
}

static void dnnl_mm_free(dnnl_mm *r) {
  dnnl_primitive_destroy(r->prim);
  dnnl_primitive_desc_destroy(r->pd);
  dnnl_memory_destroy(r->src);
  dnnl_memory_destroy(r->wei);
  dnnl_memory_destroy(r->dst);
  free(r->wei_own);
}

typedef struct {
  int64_t M, K, N;
} shape;

typedef struct {
  int which; /* 0 ours, 1 oneDNN plain weights, 2 oneDNN reordered weights */
  const dsp_cpu_packed *packed;
  dnnl_mm mm;
  dsp_tensor a, c;
  int threads;
} runner;

static void run_once(runner *r) {
  if (r->which == 0) {
    if (dsp_cpu_matmul_nt(&r->a, r->packed, &r->c, r->threads) != DSP_OK) {
      fprintf(stderr, "bench_matmul: %s\n", dsp_error_message());
      exit(1);
    }
  } else {
    dnnl_mm_run(&r->mm);
  }
}

/* Median time of repeated runs after one warm-up; fewer repeats when slow. */
static double time_runs(runner *r, double budget) {
  double t0 = now_s();
  run_once(r);
  double first = now_s() - t0;
  int reps = first > 0 ? (int)(budget / first) : 20;
  reps = reps < 1 ? 1 : reps > 20 ? 20 : reps;
  double t[20];
  for (int i = 0; i < reps; i++) {
    t0 = now_s();
    run_once(r);
    t[i] = now_s() - t0;
  }
  for (int i = 1; i < reps; i++)
    for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
      double x = t[j];
      t[j] = t[j - 1];
      t[j - 1] = x;
    }
  return t[reps / 2];
}

static int64_t count_diff16(const uint16_t *x, const uint16_t *y, size_t n) {
  int64_t d = 0;
  for (size_t i = 0; i < n; i++) d += x[i] != y[i];
  return d;
}

static int64_t count_diff32(const float *x, const float *y, size_t n) {
  int64_t d = 0;
  for (size_t i = 0; i < n; i++) d += memcmp(x + i, y + i, 4) != 0;
  return d;
}

/* Shard and batch invariance of oneDNN (dst dt) and ours for one shape:
 * differing elements, full call vs three pieces of N; row 0 of M vs alone. */
static void invariance(shape s, const dsp_bf16 *a, const dsp_bf16 *w, dnnl_data_type_t dt, int reorder, int threads,
                       int64_t *shard_diff, int64_t *batch_diff) {
  const size_t esz = dt == dnnl_f32 ? 4 : 2, cnt = (size_t)(s.M * s.N);
  char *full = xmalloc(cnt * esz), *parts = xmalloc(cnt * esz), *one = xmalloc((size_t)s.N * esz);
  const int64_t cut[4] = {0, s.N / 3 + 5, 2 * s.N / 3 + 11, s.N};
  if (reorder < 0) { /* ours */
    dsp_tensor at = dsp_tensor_2d((void *)a, DSP_BF16, s.M, s.K), wt = dsp_tensor_2d((void *)w, DSP_BF16, s.N, s.K);
    dsp_tensor ct = dsp_tensor_2d(full, dt == dnnl_f32 ? DSP_F32 : DSP_BF16, s.M, s.N);
    dsp_tensor pt = ct;
    pt.data = parts;
    dsp_cpu_packed *p;
    if (dsp_cpu_pack(&wt, &p) != DSP_OK || dsp_cpu_matmul_nt(&at, p, &ct, threads) != DSP_OK) exit(1);
    dsp_tensor a1 = dsp_tensor_rows(&at, 0, 1), o1 = dsp_tensor_rows(&ct, 0, 1);
    o1.data = one;
    if (dsp_cpu_matmul_nt(&a1, p, &o1, threads) != DSP_OK) exit(1);
    dsp_cpu_packed_free(p);
    for (int i = 0; i < 3; i++) {
      dsp_tensor ws = dsp_tensor_rows(&wt, cut[i], cut[i + 1]), cs = dsp_tensor_cols(&pt, cut[i], cut[i + 1]);
      if (dsp_cpu_pack(&ws, &p) != DSP_OK || dsp_cpu_matmul_nt(&at, p, &cs, threads) != DSP_OK) exit(1);
      dsp_cpu_packed_free(p);
    }
  } else {
    dnnl_mm m = dnnl_mm_make(s.M, s.K, s.N, a, w, full, dt, reorder);
    dnnl_mm_run(&m);
    dnnl_mm_free(&m);
    m = dnnl_mm_make(1, s.K, s.N, a, w, one, dt, reorder);
    dnnl_mm_run(&m);
    dnnl_mm_free(&m);
    for (int i = 0; i < 3; i++) {
      int64_t n = cut[i + 1] - cut[i];
      char *piece = xmalloc((size_t)(s.M * n) * esz);
      m = dnnl_mm_make(s.M, s.K, n, a, w + cut[i] * s.K, piece, dt, reorder);
      dnnl_mm_run(&m);
      dnnl_mm_free(&m);
      for (int64_t r = 0; r < s.M; r++)
        memcpy(parts + (size_t)(r * s.N + cut[i]) * esz, piece + (size_t)(r * n) * esz, (size_t)n * esz);
      free(piece);
    }
  }
  if (esz == 2) {
    *shard_diff = count_diff16((uint16_t *)full, (uint16_t *)parts, cnt);
    *batch_diff = count_diff16((uint16_t *)full, (uint16_t *)one, (size_t)s.N);
  } else {
    *shard_diff = count_diff32((float *)full, (float *)parts, cnt);
    *batch_diff = count_diff32((float *)full, (float *)one, (size_t)s.N);
  }
  free(full);
  free(parts);
  free(one);
}

int main(int argc, char **argv) {
  int threads = 0, quick = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quick")) quick = 1;
    else {
      fprintf(stderr, "usage: bench_matmul [--threads T] [--quick]\n");
      return 2;
    }
  }
  if (threads <= 0) threads = omp_get_max_threads();
  omp_set_num_threads(threads);
  DNNL_CHECK(dnnl_engine_create(&g_eng, dnnl_cpu, 0));
  DNNL_CHECK(dnnl_stream_create(&g_stream, g_eng, dnnl_stream_default_flags));
  const dnnl_version_t *v = dnnl_version();

  char host[256] = "", date[64];
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f))
      if (!strncmp(line, "model name", 10)) {
        char *c = strchr(line, ':');
        c = c ? c + 2 : line;
        c[strcspn(c, "\n")] = 0;
        size_t n = strlen(c) < sizeof host - 1 ? strlen(c) : sizeof host - 1;
        memcpy(host, c, n);
        host[n] = 0;
        break;
      }
    fclose(f);
  }
  time_t t = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&t));
  printf("bench_matmul: %s, %d threads, %s\n", host, threads, date);
  printf("ours: kernel %s; oneDNN %d.%d.%d (cpu runtime %s)\n", dsp_cpu_kernel_name(), v->major, v->minor, v->patch,
         v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential" : "other");

  shape shapes[3] = {{32, 256, 163840}, {224, 7168, 16384}, {1, 7168, 16384}};
  if (quick)
    for (int i = 0; i < 3; i++) shapes[i].N = 2048;
  const char *names[3] = {"ours (packed, bf16 out)", "oneDNN (weights as given, bf16 out)",
                          "oneDNN (weights reordered, bf16 out)"};
  printf("\n%-22s %-38s %10s %10s  %s\n", "shape (M, K, N)", "implementation", "ms", "GFLOP/s", "oneDNN impl");
  for (int si = 0; si < 3; si++) {
    shape s = shapes[si];
    dsp_bf16 *a = xmalloc((size_t)(s.M * s.K) * 2), *w = xmalloc((size_t)(s.N * s.K) * 2);
    void *c = xmalloc((size_t)(s.M * s.N) * 2);
    fill_random(a, (size_t)(s.M * s.K), 11);
    fill_random(w, (size_t)(s.N * s.K), 12);
    char sh[48];
    snprintf(sh, sizeof sh, "%lld, %lld, %lld", (long long)s.M, (long long)s.K, (long long)s.N);
    dsp_tensor wt = dsp_tensor_2d(w, DSP_BF16, s.N, s.K);
    dsp_cpu_packed *p;
    if (dsp_cpu_pack(&wt, &p) != DSP_OK) return 1;
    for (int which = 0; which < 3; which++) {
      runner r = {.which = which, .packed = p, .threads = threads};
      r.a = dsp_tensor_2d(a, DSP_BF16, s.M, s.K);
      r.c = dsp_tensor_2d(c, DSP_BF16, s.M, s.N);
      if (which) r.mm = dnnl_mm_make(s.M, s.K, s.N, a, w, c, dnnl_bf16, which == 2);
      double sec = time_runs(&r, 1.0);
      printf("%-22s %-38s %10.3f %10.1f  %s\n", sh, names[which], 1e3 * sec,
             2.0 * (double)s.M * (double)s.K * (double)s.N / sec / 1e9, which ? r.mm.impl : "");
      if (which) dnnl_mm_free(&r.mm);
    }
    dsp_cpu_packed_free(p);
    free(c);
    if (si == 1 || quick) {
      /* Invariance at the LM shape (and every shape with --quick). */
      printf("\ninvariance at (%s): differing elements, full N vs 3 pieces at [%lld, %lld) | row 0 of M vs M = 1\n",
             sh, (long long)(s.N / 3 + 5), (long long)(2 * s.N / 3 + 11));
      const struct { const char *name; int reorder; dnnl_data_type_t dt; } cases[] = {
          {"ours, bf16 out", -1, dnnl_bf16},          {"ours, f32 out", -1, dnnl_f32},
          {"oneDNN as given, bf16 out", 0, dnnl_bf16}, {"oneDNN as given, f32 out", 0, dnnl_f32},
          {"oneDNN reordered, bf16 out", 1, dnnl_bf16}, {"oneDNN reordered, f32 out", 1, dnnl_f32}};
      for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int64_t sd, bd;
        invariance(s, a, w, cases[ci].dt, cases[ci].reorder, threads, &sd, &bd);
        printf("  %-30s shard: %10lld of %lld   batch: %6lld of %lld\n", cases[ci].name, (long long)sd,
               (long long)(s.M * s.N), (long long)bd, (long long)s.N);
      }
      printf("\n");
    }
    free(a);
    free(w);
  }
  dnnl_stream_destroy(g_stream);
  dnnl_engine_destroy(g_eng);
  return 0;
}
