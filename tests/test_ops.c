/* The op-parity harness: every backend operation over a table of shapes,
 * strides and special values, against the contract (DESIGN §2) computed here
 * from its definition, and the CUDA backend against the CPU backend.
 *
 *   test_ops cpu            the CPU backend against the contract
 *   test_ops cuda           the CUDA backend against the contract and the CPU
 *                           (exit 77, skipped, where no GPU is visible)
 *   test_ops cpu|cuda perf [gemm|attention]  time per op against its floor (one table alone)
 *   a third argument: a cmocka test-name filter (t_kda: the KDA cases alone;
 *   the KDA op's timings are bench/bench_kda's)
 *
 * Tolerances. On grid inputs (small integers times powers of two) every
 * partial sum of a product is exact in fp32, so the contract fixes the result
 * bit for bit on every backend: compared exactly (NaN by NaN-ness). On random
 * inputs the reference sums in double and rounds once; a backend's fp32 chain
 * may differ from it by its accumulation error, bounded by K * 2^-24 * sum
 * |a w|, plus one bf16 rounding: |c - ref| <= 2^-8 |ref| + K * 2^-24 * sum|a w|.
 * The CPU and CUDA's strict mode run the same chain (bit-exact with each
 * other); CUDA's tensor cores may differ from the CPU in the last bf16 bit
 * where a sum is inexact: at most 1 ulp apart. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "backend/ops.h"
#include "dspark.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/matmul.h"
#include "support/rates.h"
#include "test_ops.h"

dsp_backend *g_be, *g_cpu; /* the backend under test, and the CPU backend to compare with (CUDA runs) */
int g_cuda, g_perf;
static const char *g_perf_only; /* perf: "gemm" or "attention" alone */
long long g_compared;

/* ---- the contract, written here from DESIGN §2 (not from the library) ---- */
float bf(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* Contract 1: round to nearest, ties to even; NaN stays NaN (quiet); inf stays inf. */
static uint16_t to_bf(double d) {
  float f = (float)d; /* the reference's sums are exact in double for grid inputs; random ones round here */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  uint32_t lsb = (u >> 16) & 1u;
  return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}
uint16_t f32_to_bf(float f) { return to_bf((double)f); }
static int is_nan16(uint16_t h) { return (h & 0x7fff) > 0x7f80; }
/* Contract 4's order: NaN first (lowest id among NaNs), then larger value, then lower id; -0 == +0. */
static int better(float av, int64_t ai, float bv, int64_t bi) {
  int an = isnan(av), bn = isnan(bv);
  if (an || bn) return an && (!bn || ai < bi);
  if (av != bv) return av > bv;
  return ai < bi;
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
uint64_t rnd(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return g_rng;
}
/* Grid values: integers in [-8, 8] times 2^-3 (exact products and sums in fp32 for K <= 2^12). */
static uint16_t grid_val(void) { return f32_to_bf((float)((int)(rnd() % 17) - 8) * 0.125f); }
uint16_t rand_val(void) { return f32_to_bf((float)((double)(rnd() >> 11) / 9007199254740992.0 * 2 - 1)); }

/* ---- backend buffers ------------------------------------------------------ */
void *dev_put(dsp_backend *be, const void *h, size_t bytes) {
  void *d = NULL;
  assert_int_equal(dsp_op_alloc(be, 0, bytes, &d), DSP_OK);
  if (h) assert_int_equal(dsp_op_upload(be, 0, d, h, bytes), DSP_OK);
  else if (!g_perf && bytes) { /* NaN bytes: a kernel reading memory it never wrote shows at once */
    void *nan = malloc(bytes);
    assert_non_null(nan);
    memset(nan, 0xff, bytes);
    assert_int_equal(dsp_op_upload(be, 0, d, nan, bytes), DSP_OK);
    free(nan);
  }
  return d;
}
void dev_get(dsp_backend *be, void *h, const void *d, size_t bytes) {
  assert_int_equal(dsp_op_sync(be, 0), DSP_OK);
  assert_int_equal(dsp_op_download(be, 0, h, d, bytes), DSP_OK);
}

/* dsp_op_copy at offsets that break every alignment, below and above the size the CPU splits over its threads
 * (1 MiB), byte for byte as memcpy; on the CPU also an overlapping copy, as memmove. */
static void t_copy(void **st) {
  (void)st;
  const size_t sizes[] = {37, ((size_t)3 << 20) + 37};
  for (int i = 0; i < 2; i++) {
    const size_t n = sizes[i], all = n + 64;
    unsigned char *h = malloc(all), *got = malloc(all), *want = malloc(all);
    for (size_t j = 0; j < all; j++) h[j] = (unsigned char)(rnd() >> 24);
    void *ds = dev_put(g_be, h, all), *dd = dev_put(g_be, h, all);
    assert_int_equal(dsp_op_copy(g_be, 0, (char *)dd + 3, (const char *)ds + 5, n), DSP_OK);
    dev_get(g_be, got, dd, all);
    memcpy(want, h, all);
    memcpy(want + 3, h + 5, n);
    assert_memory_equal(got, want, all);
    if (!g_cuda) { /* overlapping: forward by 1000 bytes within one buffer */
      const size_t m = n > 2000 ? n - 1000 : n / 2;
      assert_int_equal(dsp_op_copy(g_be, 0, (char *)ds + 1000 * (n > 2000), ds, m), DSP_OK);
      dev_get(g_be, got, ds, all);
      memcpy(want, h, all);
      memmove(want + 1000 * (n > 2000), h, m);
      assert_memory_equal(got, want, all);
    }
    dsp_op_release(g_be, 0, ds), dsp_op_release(g_be, 0, dd);
    free(h), free(got), free(want);
  }
}

/* ---- GEMM ------------------------------------------------------------------ */
typedef struct {
  int64_t m, n, k, lda, ldc;
  int grid, specials, strict;
} gemm_case;

/* c = a w^T on backend be; out [m][ldc] host. *split: whether the weight's
 * product splits K (its sum then runs in another order than the CPU's chain). */
static void run_gemm(dsp_backend *be, const gemm_case *g, const uint16_t *a, const uint16_t *w, uint16_t *out,
                     int *split) {
  dsp_weight *wt;
  dsp_tensor wv = dsp_tensor_2d((void *)w, DSP_BF16, g->n, g->k);
  assert_int_equal(dsp_op_weight_create(be, 0, &wv, g->strict, &wt), DSP_OK);
  void *da = dev_put(be, a, (size_t)(g->m * g->lda) * 2), *dc = dev_put(be, NULL, (size_t)(g->m * g->ldc) * 2);
  assert_int_equal(dsp_op_upload(be, 0, dc, out, (size_t)(g->m * g->ldc) * 2), DSP_OK); /* the padding's pattern */
  dsp_tensor av = {.data = da, .dtype = DSP_BF16, .ndim = 2, .shape = {g->m, g->k}, .stride = {g->lda, 1}};
  dsp_tensor cv = {.data = dc, .dtype = DSP_BF16, .ndim = 2, .shape = {g->m, g->n}, .stride = {g->ldc, 1}};
  if (split) *split = strstr(dsp_op_weight_describe(be, wt), "K split") != NULL;
  dsp_status s = dsp_op_gemm(be, 0, &av, wt, &cv);
  if (s != DSP_OK) fail_msg("gemm M %lld N %lld K %lld lda %lld ldc %lld on %s: %s", (long long)g->m, (long long)g->n,
                            (long long)g->k, (long long)g->lda, (long long)g->ldc, dsp_backend_describe(be),
                            dsp_error_message());
  dev_get(be, out, dc, (size_t)(g->m * g->ldc) * 2);
  dsp_op_release(be, 0, da);
  dsp_op_release(be, 0, dc);
  dsp_op_weight_free(be, wt);
}

static void check_gemm(const gemm_case *g) {
  const int64_t M = g->m, N = g->n, K = g->k;
  uint16_t *a = malloc((size_t)(M * g->lda) * 2), *w = malloc((size_t)(N * K) * 2);
  uint16_t *c = malloc((size_t)(M * g->ldc) * 2), *c2 = malloc((size_t)(M * g->ldc) * 2);
  for (int64_t i = 0; i < M * g->lda; i++) a[i] = g->grid ? grid_val() : rand_val();
  for (int64_t i = 0; i < N * K; i++) w[i] = g->grid ? grid_val() : rand_val();
  if (g->specials && M >= 4 && K >= 2) { /* a NaN row, an inf row, a row of +-0, a row near overflow */
    a[0 * g->lda + K / 2] = 0x7fc1;
    a[1 * g->lda + 0] = 0x7f80;
    for (int64_t k = 0; k < K; k++) a[2 * g->lda + k] = k % 2 ? 0x8000 : 0x0000;
    for (int64_t k = 0; k < K; k++) a[3 * g->lda + k] = k < 2 ? 0x7f00 : 0; /* 2^127 (w0 + w1): inf where it overflows */
  }
  for (int64_t i = 0; i < M * g->ldc; i++) c[i] = c2[i] = 0xbeef; /* the padding must stay */
  int split = 0;
  run_gemm(g_be, g, a, w, c, &split);
  if (g_cpu) run_gemm(g_cpu, g, a, w, c2, NULL);
  long bad = 0, pad = 0, cross = 0;
  for (int64_t i = 0; i < M; i++) {
    for (int64_t j = g->n; j < g->ldc; j++) pad += c[i * g->ldc + j] != 0xbeef;
    for (int64_t j = 0; j < N; j++) {
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < K; k++) {
        const double p = (double)bf(a[i * g->lda + k]) * (double)bf(w[j * K + k]);
        ref += p;
        mag += fabs(p);
      }
      const uint16_t got = c[i * g->ldc + j], want = to_bf(ref);
      const float gv = bf(got), wv = bf(want);
      int ok;
      if (is_nan16(want) || isnan(ref)) ok = is_nan16(got);
      else if (g->grid || isinf(wv)) ok = got == want || (gv == 0 && wv == 0 && got == want);
      else ok = fabs((double)gv - ref) <= ldexp(fabs(ref), -8) + (double)K * ldexp(mag, -24);
      bad += !ok;
      if (!ok && bad <= 3)
        print_message("  gemm [%lld, %lld]: got %a (0x%04x), contract %a (0x%04x)\n", (long long)i, (long long)j,
                      (double)gv, got, ref, want);
      if (g_cpu) {
        const uint16_t o = c2[i * g->ldc + j];
        int same = got == o || (is_nan16(got) && is_nan16(o));
        /* the tensor cores may differ in the last bit of an inexact sum; a split K adds its parts in
           another order, so where a sum cancels it may differ more, within the contract's bound (ok) */
        if (!same && !g->strict && !g->grid && !is_nan16(o)) same = abs((int)got - (int)o) <= 1 || (split && ok);
        cross += !same;
      }
      g_compared++;
    }
  }
  if (bad || pad || cross)
    fail_msg("gemm M %lld N %lld K %lld lda %lld ldc %lld (%s%s%s): %ld differ from the contract, %ld padding "
             "touched, %ld differ from the CPU beyond the tolerance",
             (long long)M, (long long)N, (long long)K, (long long)g->lda, (long long)g->ldc,
             g->grid ? "grid" : "random", g->specials ? ", specials" : "", g->strict ? ", strict" : "", bad, pad,
             cross);
  free(a);
  free(w);
  free(c);
  free(c2);
}

static void t_gemm(void **st) {
  (void)st;
  /* odd and tile-crossing shapes; strided a and c; the tensor-core kernels need
   * 8-aligned strides on CUDA, so odd strides run strict weights there */
  const gemm_case cases[] = {
      {1, 1, 8, 8, 8, 1, 0, 0},          {7, 33, 64, 64, 40, 1, 1, 0},     {13, 64, 64, 72, 64, 1, 0, 0},
      {224, 512, 128, 128, 512, 1, 1, 0}, {100, 300, 72, 80, 304, 1, 0, 0}, {3, 129, 192, 200, 136, 0, 0, 0},
      {240, 136, 256, 256, 136, 0, 1, 0}, {1, 4096, 512, 512, 4096, 0, 0, 0}, {5, 37, 19, 23, 41, 1, 1, 1},
      {9, 11, 3, 3, 11, 0, 0, 1},         {17, 130, 100, 104, 130, 0, 1, 1}, {33, 256, 64, 64, 256, 0, 0, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_gemm(&cases[i]);
  /* odd shapes on the default weights: a kernel that cannot run them must fall back, never fail */
  const gemm_case odd[] = {{6, 10, 12, 12, 10, 1, 0, 0}, {4, 24, 40, 40, 24, 0, 1, 0}};
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) check_gemm(&odd[i]);
  /* shapes whose K the GPU splits over clusters of 2, 4 and 8 (few weight rows, long K): one and several token
     tiles per cluster, grid values (exact sums: the CPU's bits) and random ones */
  const gemm_case split[] = {{7, 5120, 2048, 2048, 5120, 1, 0, 0},
                             {5, 2560, 4096, 4096, 2560, 0, 0, 0},
                             {300, 640, 1024, 1024, 640, 1, 1, 0},
                             {113, 512, 2048, 2056, 520, 0, 0, 0},
                             {1, 512, 2048, 2048, 512, 0, 0, 0}};
  for (size_t i = 0; i < sizeof split / sizeof split[0]; i++) check_gemm(&split[i]);
  print_message("gemm: %lld values compared on %s%s\n", g_compared, dsp_backend_describe(g_be),
                g_cpu ? " (and against the CPU)" : "");
}

/* Batch invariance of the product (DESIGN.md 6): each row of a product over
 * 300 rows has the same bits computed in calls of 1, 7, 13, 16, 27, 32, 33, 100,
 * 113 and 240 rows (on the GPU: every token tile, 32, 64, 112 and 224),
 * for shapes the GPU runs split over clusters of 2, 4 and 8 (an H200's
 * choices) and unsplit. */
static void t_gemm_rows(void **st) {
  (void)st;
  /* 520: a last strip of 8 rows for the few-row kernel; sub-calls of 1, 7, 13, 16, 27 and 32 rows run it (on
     CUDA without the split) */
  const int64_t shapes[][2] = {{5120, 2048}, {2560, 4096}, {512, 2048}, {384, 256}, {520, 1024}};
  const int64_t M = 300, sub[] = {1, 7, 13, 16, 27, 32, 33, 100, 113, 240};
  long compared = 0;
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    const int64_t N = shapes[si][0], K = shapes[si][1];
    uint16_t *a = malloc((size_t)(M * K) * 2), *w = malloc((size_t)(N * K) * 2);
    uint16_t *all = malloc((size_t)(M * N) * 2), *part = malloc((size_t)(M * N) * 2);
    /* shapes past the first four draw from a copy of the stream, which is then put back: the later tests'
       inputs stay those they had */
    const uint64_t keep = g_rng;
    for (int64_t i = 0; i < M * K; i++) a[i] = rand_val();
    for (int64_t i = 0; i < N * K; i++) w[i] = rand_val();
    if (si >= 4) g_rng = keep;
    dsp_weight *wt;
    dsp_tensor wv = dsp_tensor_2d(w, DSP_BF16, N, K);
    assert_int_equal(dsp_op_weight_create(g_be, 0, &wv, 0, &wt), DSP_OK);
    void *da = dev_put(g_be, a, (size_t)(M * K) * 2), *dc = dev_put(g_be, NULL, (size_t)(M * N) * 2);
    dsp_tensor av = {.data = da, .dtype = DSP_BF16, .ndim = 2, .shape = {M, K}, .stride = {K, 1}};
    dsp_tensor cv = {.data = dc, .dtype = DSP_BF16, .ndim = 2, .shape = {M, N}, .stride = {N, 1}};
    assert_int_equal(dsp_op_gemm(g_be, 0, &av, wt, &cv), DSP_OK);
    dev_get(g_be, all, dc, (size_t)(M * N) * 2);
    for (size_t j = 0; j < sizeof sub / sizeof sub[0]; j++) {
      av.shape[0] = cv.shape[0] = sub[j];
      for (int64_t i = 0; i < M * N; i++) part[i] = (uint16_t)~all[i]; /* stale bits must not pass */
      assert_int_equal(dsp_op_upload(g_be, 0, dc, part, (size_t)(M * N) * 2), DSP_OK);
      assert_int_equal(dsp_op_gemm(g_be, 0, &av, wt, &cv), DSP_OK);
      dev_get(g_be, part, dc, (size_t)(sub[j] * N) * 2);
      long differ = 0;
      for (int64_t i = 0; i < sub[j] * N; i++) differ += part[i] != all[i];
      compared += (long)(sub[j] * N);
      if (differ)
        fail_msg("gemm N %lld K %lld (%s): %ld of %lld values of a %lld-row call differ from the 300-row call",
                 (long long)N, (long long)K, dsp_op_weight_describe(g_be, wt), differ, (long long)(sub[j] * N),
                 (long long)sub[j]);
    }
    const char *how = dsp_op_weight_describe(g_be, wt);
    print_message("  gemm rows N %lld K %lld: %s\n", (long long)N, (long long)K, how);
    /* with the split on (main sets it unless the caller chose), the own GPU kernel splits the first three (its
       choice on an H200): the split path must be the one tested */
    const char *on = getenv("DSPARK_GEMM_SPLIT");
    if (on && !strcmp(on, "1") && strstr(how, "own wgmma") && si < 3 && !strstr(how, "K split"))
      fail_msg("gemm N %lld K %lld: expected the split-K kernel, got %s", (long long)N, (long long)K, how);
    /* without the split, the few-row kernel must have run (an H200 gives it the warpgroup kernel's bits) */
    if (on && !strcmp(on, "0") && strstr(how, "own wgmma") && !strstr(how, "mma.sync"))
      fail_msg("gemm N %lld K %lld: the few-row mma.sync kernel is not in use: %s", (long long)N, (long long)K, how);
    dsp_op_release(g_be, 0, da);
    dsp_op_release(g_be, 0, dc);
    dsp_op_weight_free(g_be, wt);
    free(a);
    free(w);
    free(all);
    free(part);
  }
  print_message("gemm rows: %ld values compared, each row alone and in batches against the 300-row call\n", compared);
}

/* F32 outputs (the partials of a row-parallel product, contract 2 before its
 * rounding): for every row count the kernels take (the few-row kernel to 16,
 * the warpgroup tiles past it, the K split where the device picks it, strict
 * weights), rounding the F32 output once (contract 1) must give the BF16
 * output's bits; on grid values (exact sums) the F32 outputs equal the CPU's.
 * The shared random stream is put back, so later tests keep their inputs. */
/* A row-parallel weight in K slices (ops.h, dsp_op_weight_slice): every output must be the halving tree of the
 * slices' own sums ([lo, hi) is [lo, mid) + [mid, hi), mid = lo + (hi - lo) / 2, left first), each slice's sum
 * being what an unsliced weight of that slice's columns gives; and TP ranks holding halves or quarters of the
 * slices, added by the same tree, must give those bits. Random values of mixed magnitudes (so other orders round
 * otherwise: the test counts where one sum over K differs), with subnormal, inf and NaN weights in one slice of a
 * few rows (where AMX takes the chain for that slice alone). The CPU takes every slice count here; CUDA's strict
 * chain too, bit for bit as the CPU's; its tensor-core kernels 2, 4 or 8 slices (the few-row kernel to 32 rows,
 * the cluster split past them), and a weight that declines must say so and keep one sum over K. */
static float slice_tree(const float *p, int64_t ld, int lo, int hi) {
  if (hi - lo == 1) return p[(int64_t)lo * ld];
  const int mid = lo + (hi - lo) / 2;
  volatile float l = slice_tree(p, ld, lo, mid), r = slice_tree(p, ld, mid, hi);
  return l + r;
}

/* The F32 products of a's and w's columns [k0, k0 + kn) on be, the weight in `slices` K slices; returns whether
 * the weight took them (and then its description must name them). */
static int slice_products(dsp_backend *be, const uint16_t *a, const uint16_t *w, int64_t m, int64_t N, int64_t K,
                          int64_t k0, int64_t kn, int slices, int strict, float *out) {
  dsp_tensor wv = dsp_tensor_2d((void *)(w + k0), DSP_BF16, N, kn);
  wv.stride[0] = K;
  dsp_weight *wt;
  assert_int_equal(dsp_op_weight_create(be, 0, &wv, strict, &wt), DSP_OK);
  int32_t got = 0;
  assert_int_equal(dsp_op_weight_slice(be, wt, slices, &got), DSP_OK);
  const char *how = dsp_op_weight_describe(be, wt);
  const int taken = got == slices;
  if (got != slices && got != 1) fail_msg("gemm slices: %d slices asked, %d taken", slices, (int)got);
  if (slices > 1 && taken != (strstr(how, " K slices") && !strstr(how, "one sum over K")))
    fail_msg("gemm slices: %d of %d slices taken, yet the description says \"%s\"", (int)got, slices, how);
  uint16_t *ah = malloc((size_t)(m * kn) * 2);
  for (int64_t r = 0; r < m; r++) memcpy(ah + r * kn, a + r * K + k0, (size_t)kn * 2);
  void *da = dev_put(be, ah, (size_t)(m * kn) * 2), *df = dev_put(be, NULL, (size_t)(m * N) * 4);
  dsp_tensor av = dsp_tensor_2d(da, DSP_BF16, m, kn), fv = dsp_tensor_2d(df, DSP_F32, m, N);
  if (dsp_op_gemm(be, 0, &av, wt, &fv) != DSP_OK)
    fail_msg("gemm slices: N %lld K %lld in %d slices (%s): %s", (long long)N, (long long)kn, slices, how,
             dsp_error_message());
  dev_get(be, out, df, (size_t)(m * N) * 4);
  dsp_op_release(be, 0, da);
  dsp_op_release(be, 0, df);
  dsp_op_weight_free(be, wt);
  free(ah);
  return taken;
}

static long slice_differ(const float *got, const float *want, int64_t n) {
  long d = 0;
  for (int64_t i = 0; i < n; i++) d += memcmp(&got[i], &want[i], 4) != 0 && !(isnan(got[i]) && isnan(want[i]));
  return d;
}

static void t_gemm_slices(void **st) {
  (void)st;
  const uint64_t keep = g_rng;
  const int cuda = dsp_backend_kind_of(g_be) != DSP_BACKEND_CPU;
  /* on CUDA also slices of several 64-column boxes (the few-row kernel's full stages, and a full stage then a
     short one per slice) */
  const int64_t shapes[][3] = {{256, 256, 4}, {96, 192, 3}, {520, 1024, 8}, {300, 512, 2}, {64, 1536, 8},
                               {256, 3072, 8}, {128, 4096, 4}};
  const size_t nshapes = cuda ? 7 : 5;
  const int64_t ms[] = {1, 3, 5, 16, 33, 130}, M = 130;
  long compared = 0, other = 0, declined = 0, cpu_cross = 0;
  for (int strict = 0; strict <= cuda; strict++) {
    for (size_t si = 0; si < nshapes; si++) {
      const int64_t N = shapes[si][0], K = shapes[si][1], S = shapes[si][2], ks = K / S;
      uint16_t *a = malloc((size_t)(M * K) * 2), *w = malloc((size_t)(N * K) * 2);
      float *got = malloc((size_t)(M * N) * 4), *one = malloc((size_t)(M * N) * 4), *want = malloc((size_t)(M * N) * 4);
      float *part = malloc((size_t)(S * M * N) * 4), *rank = malloc((size_t)(S * M * N) * 4);
      for (int64_t i = 0; i < M * K; i++) a[i] = f32_to_bf(bf(rand_val()) * ldexpf(1.0f, (int)(rnd() % 24) - 12));
      for (int64_t i = 0; i < N * K; i++) w[i] = f32_to_bf(bf(rand_val()) * ldexpf(1.0f, (int)(rnd() % 24) - 12));
      w[3 * K + ks + 5] = 0x0001;          /* a subnormal in slice 1 of row 3 */
      w[7 * K + ks + 1] = 0x7f80;          /* +inf in slice 1 of row 7 */
      w[11 * K + (S - 1) * ks] = 0x7fc1;   /* a NaN in the last slice of row 11 */
      for (size_t j = 0; j < sizeof ms / sizeof ms[0]; j++) {
        const int64_t m = ms[j];
        const int taken = slice_products(g_be, a, w, m, N, K, 0, K, (int)S, strict, got);
        slice_products(g_be, a, w, m, N, K, 0, K, 1, strict, one);
        compared += (long)(m * N);
        if (!taken) { /* CUDA's tensor-core kernels may decline; then one sum over K */
          if (!cuda || strict)
            fail_msg("gemm slices N %lld K %lld S %lld: the %s weight declined its slices", (long long)N,
                     (long long)K, (long long)S, strict ? "strict" : "CPU");
          const long d = slice_differ(got, one, m * N);
          if (d) fail_msg("gemm slices N %lld K %lld S %lld M %lld: declined, yet %ld outputs differ from one sum",
                          (long long)N, (long long)K, (long long)S, (long long)m, d);
          declined++;
          continue;
        }
        for (int64_t s = 0; s < S; s++) slice_products(g_be, a, w, m, N, K, s * ks, ks, 1, strict, part + s * m * N);
        for (int64_t i = 0; i < m * N; i++) {
          want[i] = slice_tree(part + i, m * N, 0, (int)S);
          other += memcmp(&got[i], &one[i], 4) != 0;
        }
        long differ = slice_differ(got, want, m * N);
        if (differ)
          fail_msg("gemm slices N %lld K %lld S %lld M %lld%s: %ld outputs are not the tree of the slices' sums",
                   (long long)N, (long long)K, (long long)S, (long long)m, strict ? " strict" : "", differ);
        for (int64_t P = 2; P <= S && S % P == 0; P *= 2) { /* P TP ranks of S / P slices, added by the tree */
          for (int64_t r = 0; r < P; r++)
            slice_products(g_be, a, w, m, N, K, r * (K / P), K / P, (int)(S / P), strict, rank + r * m * N);
          for (int64_t i = 0; i < m * N; i++) want[i] = slice_tree(rank + i, m * N, 0, (int)P);
          const long tp = slice_differ(got, want, m * N);
          if (tp)
            fail_msg("gemm slices N %lld K %lld S %lld M %lld%s: %ld outputs differ at %lld ranks", (long long)N,
                     (long long)K, (long long)S, (long long)m, strict ? " strict" : "", tp, (long long)P);
        }
        if (g_cpu && strict) { /* the strict chain's slices are the CPU's bits */
          slice_products(g_cpu, a, w, m, N, K, 0, K, (int)S, 1, want);
          const long d = slice_differ(got, want, m * N);
          if (d) fail_msg("gemm slices N %lld K %lld S %lld M %lld strict: %ld outputs differ from the CPU's",
                          (long long)N, (long long)K, (long long)S, (long long)m, d);
          cpu_cross += (long)(m * N);
        }
      }
      free(a), free(w), free(got), free(one), free(want), free(part), free(rank);
    }
  }
  g_rng = keep;
  if (!other) fail_msg("gemm slices: no output differs from one sum over K (the test has no power)");
  if (cuda && declined >= (long)(nshapes * sizeof ms / sizeof ms[0]))
    fail_msg("gemm slices: CUDA's tensor-core kernels took no slices");
  print_message("gemm slices: %ld values compared with the tree of per-slice products and at 2-8 ranks (%ld differ "
                "from one sum over K; %ld products declined the slices; %ld strict values equal the CPU's)\n",
                compared, other, declined, cpu_cross);
}

static void t_gemm_f32(void **st) {
  (void)st;
  const uint64_t keep = g_rng;
  const int64_t shapes[][3] = {{5120, 2048, 0}, {512, 2048, 0}, {520, 1024, 0}, {384, 256, 0}, {136, 200, 1}};
  const int64_t ms[] = {1, 7, 16, 33, 300}, M = 300;
  long compared = 0;
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    const int64_t N = shapes[si][0], K = shapes[si][1];
    const int strict = (int)shapes[si][2];
    for (int grid = 0; grid < 2; grid++) {
      uint16_t *a = malloc((size_t)(M * K) * 2), *w = malloc((size_t)(N * K) * 2), *hb = malloc((size_t)(M * N) * 2);
      float *hf = malloc((size_t)(M * N) * 4), *cf = malloc((size_t)(M * N) * 4);
      for (int64_t i = 0; i < M * K; i++) a[i] = grid ? grid_val() : rand_val();
      for (int64_t i = 0; i < N * K; i++) w[i] = grid ? grid_val() : rand_val();
      dsp_weight *wt, *wc = NULL;
      dsp_tensor wv = dsp_tensor_2d(w, DSP_BF16, N, K);
      assert_int_equal(dsp_op_weight_create(g_be, 0, &wv, strict, &wt), DSP_OK);
      if (g_cpu && grid) assert_int_equal(dsp_op_weight_create(g_cpu, 0, &wv, 0, &wc), DSP_OK);
      void *da = dev_put(g_be, a, (size_t)(M * K) * 2), *db = dev_put(g_be, NULL, (size_t)(M * N) * 2);
      void *df = dev_put(g_be, NULL, (size_t)(M * N) * 4);
      for (size_t j = 0; j < sizeof ms / sizeof ms[0]; j++) {
        const int64_t m = ms[j];
        dsp_tensor av = {.data = da, .dtype = DSP_BF16, .ndim = 2, .shape = {m, K}, .stride = {K, 1}};
        dsp_tensor bv = {.data = db, .dtype = DSP_BF16, .ndim = 2, .shape = {m, N}, .stride = {N, 1}};
        dsp_tensor fv = {.data = df, .dtype = DSP_F32, .ndim = 2, .shape = {m, N}, .stride = {N, 1}};
        assert_int_equal(dsp_op_gemm(g_be, 0, &av, wt, &bv), DSP_OK);
        const dsp_status sf = dsp_op_gemm(g_be, 0, &av, wt, &fv);
        if (sf != DSP_OK) fail_msg("gemm N %lld K %lld M %lld (%s): F32 output refused: %s", (long long)N, (long long)K,
                                   (long long)m, dsp_op_weight_describe(g_be, wt), dsp_error_message());
        dev_get(g_be, hb, db, (size_t)(m * N) * 2);
        dev_get(g_be, hf, df, (size_t)(m * N) * 4);
        long differ = 0, cross = 0;
        for (int64_t i = 0; i < m * N; i++) {
          const uint16_t r = f32_to_bf(hf[i]);
          differ += r != hb[i] && !(is_nan16(r) && is_nan16(hb[i]));
        }
        if (wc) { /* the CPU's F32 outputs of the same rows */
          dsp_tensor cav = av, cfv = fv;
          cav.data = a, cfv.data = cf;
          assert_int_equal(dsp_op_gemm(g_cpu, 0, &cav, wc, &cfv), DSP_OK);
          for (int64_t i = 0; i < m * N; i++) cross += memcmp(&hf[i], &cf[i], 4) != 0;
        }
        compared += (long)(m * N);
        if (differ || cross)
          fail_msg("gemm N %lld K %lld M %lld (%s, %s): %ld F32 outputs round to other bits than the BF16 output, "
                   "%ld differ from the CPU's", (long long)N, (long long)K, (long long)m,
                   dsp_op_weight_describe(g_be, wt), grid ? "grid" : "random", differ, cross);
      }
      dsp_op_release(g_be, 0, da);
      dsp_op_release(g_be, 0, db);
      dsp_op_release(g_be, 0, df);
      dsp_op_weight_free(g_be, wt);
      if (wc) dsp_op_weight_free(g_cpu, wc);
      free(a), free(w), free(hb), free(hf), free(cf);
    }
  }
  g_rng = keep;
  print_message("gemm f32: %ld values compared (rounded against the BF16 output; grid values against the CPU)\n",
                compared);
}

/* ---- attention ------------------------------------------------------------------
 * Rows over a cache of slots: a run of rows on one slot that see the same keys
 * (a draft block), causal rows on another, single rows. The reference follows
 * the contract's rounding points in double: s = bf16(bf16(q.k) / sqrt(D)),
 * p = bf16(exp(s - max) / z), out = bf16(sum p v). Tolerance: a backend's
 * fp32 sums and expf may move a p by one bf16 ulp (2^-8 relative) and a score
 * by one ulp (a factor exp(2^-8 |s|) on its e), so |got - ref| <= 2^-8 |ref| +
 * 2^-6 sum_j p_j |v_j|. Every launch choice (the row-group hint, the call's
 * rows) must give the same bits on one backend: rows alone equal rows batched. */
typedef struct {
  int64_t hq, hkv, d, stride_mul, max_len;
} att_case;

/* qpad > 0: q's rows lie qpad elements apart past their heads (a row stride CUDA cannot read in 16-byte pieces) */
static void run_att(dsp_backend *be, const att_case *c, int64_t T, const uint16_t *q, const uint16_t *kc,
                    const uint16_t *vc, int64_t slots, const int32_t *rs, const int32_t *rk, int hint, int64_t qpad,
                    uint16_t *out) {
  const int64_t D = c->d, W = c->hkv * D * c->stride_mul, cache = slots * c->max_len * W * 2, qs = c->hq * D + qpad;
  uint16_t *qh = calloc((size_t)(T * qs), 2);
  for (int64_t t = 0; t < T; t++) memcpy(qh + t * qs, q + t * c->hq * D, (size_t)(c->hq * D) * 2);
  void *dq = dev_put(be, qh, (size_t)(T * qs) * 2), *dk = dev_put(be, kc, (size_t)cache);
  free(qh);
  void *dv = dev_put(be, vc, (size_t)cache), *ds = dev_put(be, rs, (size_t)T * 4), *dr = dev_put(be, rk, (size_t)T * 4);
  void *dout = dev_put(be, NULL, (size_t)(T * c->hq * D) * 2);
  dsp_tensor qv = {.data = dq, .dtype = DSP_BF16, .ndim = 3, .shape = {T, c->hq, D}, .stride = {qs, D, 1}};
  dsp_tensor ov = {.data = dout, .dtype = DSP_BF16, .ndim = 2, .shape = {T, c->hq * D}, .stride = {c->hq * D, 1}};
  dsp_op_attention_args a = {.q = &qv, .k = dk, .v = dv, .slots = slots, .max_len = c->max_len, .kv_heads = c->hkv,
                             .kv_stride = W, .row_slot = ds, .row_keys = dr,
                             .scale = (float)(1.0 / sqrt((double)D)), .out = &ov, .row_group = hint};
  if (dsp_op_attention(be, 0, &a) != DSP_OK)
    fail_msg("attention Hq %lld Hkv %lld D %lld on %s: %s", (long long)c->hq, (long long)c->hkv, (long long)D,
             dsp_backend_describe(be), dsp_error_message());
  dev_get(be, out, dout, (size_t)(T * c->hq * D) * 2);
  void *all[] = {dq, dk, dv, ds, dr, dout};
  for (int i = 0; i < 6; i++) dsp_op_release(be, 0, all[i]);
}

/* q [qn], and K, V caches [cn]: grid values (exact sums) or random ones for q and K, random V. */
static void att_inputs(size_t qn, size_t cn, int grid, uint16_t **q, uint16_t **kc, uint16_t **vc) {
  *q = malloc(qn * 2), *kc = malloc(cn * 2), *vc = malloc(cn * 2);
  for (size_t i = 0; i < qn; i++) (*q)[i] = grid ? grid_val() : rand_val();
  for (size_t i = 0; i < cn; i++) (*kc)[i] = grid ? grid_val() : rand_val(), (*vc)[i] = rand_val();
}

/* Row t, head h in double from the contract's rounding points: ref[d] and its tolerance tol[d] (sc: P scratch). */
static void att_reference(const att_case *c, const uint16_t *q, const uint16_t *kc, const uint16_t *vc,
                          const int32_t *rs, const int32_t *rk, int64_t t, int64_t h, double *sc, double *ref,
                          double *tol) {
  const int64_t D = c->d, Hq = c->hq, Hkv = c->hkv, W = Hkv * D * c->stride_mul, P = c->max_len;
  const int64_t kvh = h / (Hq / Hkv), n = rk[t];
  const uint16_t *kb = kc + (size_t)(rs[t] * P * W + kvh * D), *vb = vc + (size_t)(rs[t] * P * W + kvh * D);
  const uint16_t *qr = q + (size_t)((t * Hq + h) * D);
  double m = -INFINITY, z = 0;
  for (int64_t j = 0; j < n; j++) {
    double dot = 0;
    for (int64_t d = 0; d < D; d++) dot += (double)bf(qr[d]) * (double)bf(kb[j * W + d]);
    sc[j] = bf(to_bf((double)bf(to_bf(dot)) * (double)(float)(1.0 / sqrt((double)D))));
    m = sc[j] > m ? sc[j] : m;
  }
  for (int64_t j = 0; j < n; j++) z += exp(sc[j] - m);
  for (int64_t j = 0; j < n; j++) sc[j] = bf(to_bf(exp(sc[j] - m) / z));
  for (int64_t d = 0; d < D; d++) {
    double r = 0, mag = 0;
    for (int64_t j = 0; j < n; j++) {
      r += sc[j] * (double)bf(vb[j * W + d]);
      mag += sc[j] * fabs((double)bf(vb[j * W + d]));
    }
    ref[d] = r, tol[d] = ldexp(fabs(r), -8) + ldexp(mag, -6);
  }
}

static void check_att(const att_case *c) {
  enum { T = 14, SLOTS = 3 };
  const int64_t D = c->d, Hq = c->hq, Hkv = c->hkv, W = Hkv * D * c->stride_mul, P = c->max_len;
  /* rows 0..6 a block on slot 1 seeing 7 keys past a context of 180; 7..10 causal on slot 0; 11..13 alone */
  int32_t rs[T], rk[T];
  for (int t = 0; t < 7; t++) rs[t] = 1, rk[t] = 187;
  for (int t = 7; t < 11; t++) rs[t] = 0, rk[t] = 40 + t;
  rs[11] = 2, rk[11] = 1;
  rs[12] = 1, rk[12] = (int32_t)P;
  rs[13] = 0, rk[13] = 9;
  const size_t cn = (size_t)(SLOTS * P * W), qn = (size_t)(T * Hq * D);
  uint16_t *q, *kc, *vc;
  att_inputs(qn, cn, 1, &q, &kc, &vc);
  uint16_t *o[7]; /* hints 0, 7, 4, rows alone, the CPU, hint 16 (32 pairs: CUDA's two-tile tensor-core form),
                     q rows padded */
  for (int i = 0; i < 7; i++) o[i] = malloc(qn * 2);
  run_att(g_be, c, T, q, kc, vc, SLOTS, rs, rk, 0, 0, o[0]);
  run_att(g_be, c, T, q, kc, vc, SLOTS, rs, rk, 7, 0, o[1]);
  run_att(g_be, c, T, q, kc, vc, SLOTS, rs, rk, 4, 0, o[2]);
  run_att(g_be, c, T, q, kc, vc, SLOTS, rs, rk, 16, 0, o[5]);
  run_att(g_be, c, T, q, kc, vc, SLOTS, rs, rk, 0, 3, o[6]);
  for (int t = 0; t < T; t++) /* each row alone */
    run_att(g_be, c, 1, q + (size_t)t * (size_t)(Hq * D), kc, vc, SLOTS, rs + t, rk + t, 7, 0,
            o[3] + (size_t)t * (size_t)(Hq * D));
  if (g_cpu) run_att(g_cpu, c, T, q, kc, vc, SLOTS, rs, rk, 0, 0, o[4]);
  long bad = 0, launch = 0, cross = 0, isa = 0;
  /* the scalar and AVX2 paths: the default (AVX-512, else AVX2) path's bits, on these inputs and on random q and
     keys (p.v's order shows in the bits; q.k's only where a sum lies near a bf16 rounding boundary, as the
     scores are rounded to bf16 at once) */
  if (!g_cuda && dsp_cpu_isa_current() > DSP_CPU_ISA_SCALAR) {
    uint16_t *qr = malloc(qn * 2), *kr = malloc(cn * 2), *od = malloc(qn * 2), *os = malloc(qn * 2);
    uint16_t *qnan = malloc(qn * 2), *onan = malloc(qn * 2);
    for (size_t i = 0; i < qn; i++) qr[i] = rand_val();
    for (size_t i = 0; i < cn; i++) kr[i] = rand_val();
    /* a NaN in one q vector of a decode row (11) and of a run (2): those vectors' outputs NaN on every path,
       the others the scalar path's bits */
    memcpy(qnan, q, qn * 2);
    qnan[(size_t)((11 * Hq + 1) * D + 3)] = 0x7fc1;
    qnan[(size_t)((2 * Hq + 0) * D)] = 0xffc0;
    run_att(g_be, c, T, qr, kr, vc, SLOTS, rs, rk, 0, 0, od);
    run_att(g_be, c, T, qnan, kc, vc, SLOTS, rs, rk, 0, 0, onan);
    for (int p = 0; p < 2; p++)
      if (dsp_cpu_isa_current() > (p ? DSP_CPU_ISA_AVX2 : DSP_CPU_ISA_SCALAR))
        for (int r = 0; r < 3; r++) {
          assert_int_equal(dsp_cpu_kernel_force(p ? "avx2" : "scalar"), DSP_OK);
          run_att(g_be, c, T, r == 2 ? qnan : r ? qr : q, r == 1 ? kr : kc, vc, SLOTS, rs, rk, 0, 0, os);
          assert_int_equal(dsp_cpu_kernel_force(NULL), DSP_OK);
          for (size_t i = 0; i < qn; i++) { /* a NaN is a NaN: its payload is not part of the contract */
            const uint16_t want = (r == 2 ? onan : r ? od : o[0])[i];
            isa += os[i] != want && !(is_nan16(os[i]) && is_nan16(want));
          }
        }
    for (int64_t d = 0; d < D; d++) /* the NaN reached its vector's outputs */
      isa += !is_nan16(onan[(size_t)((11 * Hq + 1) * D + d)]) + !is_nan16(onan[(size_t)((2 * Hq + 0) * D + d)]);
    free(qr), free(kr), free(od), free(os), free(qnan), free(onan);
  }
  double *sc = malloc((size_t)(P + 2 * D) * sizeof *sc), *rv = sc + P, *tl = rv + D;
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < Hq; h++) {
      att_reference(c, q, kc, vc, rs, rk, t, h, sc, rv, tl);
      for (int64_t d = 0; d < D; d++) {
        const double ref = rv[d], tol = tl[d];
        const size_t i = (size_t)((t * Hq + h) * D + d);
        const int ok = fabs((double)bf(o[0][i]) - ref) <= tol;
        bad += !ok;
        if (!ok && bad <= 3)
          print_message("  attention row %lld head %lld dim %lld: got %a, reference %a (tolerance %a)\n", (long long)t,
                        (long long)h, (long long)d, (double)bf(o[0][i]), ref, tol);
        for (int v = 1; v < 4; v++) launch += o[v][i] != o[0][i];
        launch += (o[5][i] != o[0][i]) + (o[6][i] != o[0][i]);
        if (g_cpu) cross += fabs((double)bf(o[4][i]) - ref) > tol;
        g_compared++;
      }
    }
  if (bad || launch || cross || isa)
    fail_msg("attention Hq %lld Hkv %lld D %lld stride x%lld: %ld beyond the tolerance, %ld differ between launches "
             "(hints, rows alone, q rows padded), %ld CPU values beyond it, %ld differ between the CPU's default path and its scalar or AVX2 one",
             (long long)Hq, (long long)Hkv, (long long)D, (long long)c->stride_mul, bad, launch, cross, isa);
  free(sc), free(q), free(kc), free(vc);
  for (int i = 0; i < 7; i++) free(o[i]);
}

static void t_attention(void **st) {
  (void)st;
  const long long before = g_compared;
  /* GQA groups of 4, 2, 3 and 1; head dims 128, 64, 72, 256, 40; a stacked cache (stride x2); a cache of nine
     128-key chunks, which CUDA's tensor-core form splits over 4 or 8 blocks as the launch's rows leave SMs free;
     16 KV heads of 64, enough rows times heads that the tensor-core form keeps hint 16's rows in two m-tiles (it
     runs few rows one per block); the shipped pair's 8 / 4 heads of 32; a cache of 2000 at 32 / 8 heads, where CUDA
     runs hint 16's rows in blocks of one m-tile (two of them fit an SM, two m-tiles would not); Qwen3-14B's 40 / 8
     heads of 128 (GQA 5, a public DSpark target: an m-tile holds 3 rows' 15 pairs, hint 7's rows straddle tiles) */
  const att_case cases[] = {{32, 8, 128, 1, 200}, {8, 4, 64, 2, 300},    {6, 2, 72, 1, 190},
                            {4, 4, 256, 1, 200},  {6, 3, 40, 3, 260},    {8, 2, 128, 1, 1100},
                            {32, 16, 64, 1, 300}, {8, 4, 32, 1, 300},    {32, 8, 128, 1, 2000},
                            {40, 8, 128, 1, 300}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_att(&cases[i]);
  print_message("attention: %lld values compared on %s%s\n", g_compared - before, dsp_backend_describe(g_be),
                g_cpu ? " (and the CPU against the reference)" : "");
}

/* Every value of o[0] (T rows) against the reference within t_attention's tolerance (*bad counts misses, the first
 * three printed under `what`), and o[1] .. o[n - 1], the same call under other launch choices, against o[0] bit for
 * bit (*launch counts differences). */
static void att_compare(const att_case *c, const uint16_t *q, const uint16_t *kc, const uint16_t *vc,
                        const int32_t *rs, const int32_t *rk, int64_t T, uint16_t *const *o, int n, const char *what,
                        long *bad, long *launch) {
  const int64_t D = c->d, Hq = c->hq;
  double *sc = malloc((size_t)(c->max_len + 2 * D) * sizeof *sc), *rv = sc + c->max_len, *tl = rv + D;
  *bad = *launch = 0;
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < Hq; h++) {
      att_reference(c, q, kc, vc, rs, rk, t, h, sc, rv, tl);
      for (int64_t d = 0; d < D; d++) {
        const size_t i = (size_t)((t * Hq + h) * D + d);
        const int ok = fabs((double)bf(o[0][i]) - rv[d]) <= tl[d];
        *bad += !ok;
        if (!ok && *bad <= 3)
          print_message("  %s: row %lld head %lld dim %lld: got %a, reference %a (tolerance %a)\n", what,
                        (long long)t, (long long)h, (long long)d, (double)bf(o[0][i]), rv[d], tl[d]);
        for (int v = 1; v < n; v++) *launch += o[v][i] != o[0][i];
        g_compared++;
      }
    }
  free(sc);
}

/* Long runs of causal rows on one slot (prefill). CUDA's many-row tensor-core kernel takes them when the hint
 * says the runs fill its blocks, and with tc-long the caches past one block of the other kernel (split over a
 * cluster) and past a cluster (every call); by default the fp32 form takes those caches: the same bits
 * as one row per block (hint 1) and as the last run's rows alone, each value within t_attention's tolerance of
 * the reference. Runs: 300 rows past a 100-key prefix on slot 1, 200 rows from the start on slot 0, the
 * rest ending at the cache's last key on slot 2, so tiles and chunks are cut mid-way. */
static void check_att_runs(const att_case *c, int64_t T) {
  enum { SLOTS = 3 };
  const int64_t D = c->d, Hq = c->hq, W = c->hkv * D * c->stride_mul, P = c->max_len, rest = T - 500;
  int32_t *rs = malloc((size_t)T * 4), *rk = malloc((size_t)T * 4);
  for (int64_t t = 0; t < T; t++) {
    rs[t] = t < 300 ? 1 : t < 500 ? 0 : 2;
    rk[t] = (int32_t)(t < 300 ? 101 + t : t < 500 ? t - 299 : P - (T - 1 - t));
  }
  const size_t cn = (size_t)(SLOTS * P * W), qn = (size_t)(T * Hq * D);
  uint16_t *q, *kc, *vc, *o[4];
  att_inputs(qn, cn, 0, &q, &kc, &vc);
  for (int i = 0; i < 4; i++) o[i] = malloc(qn * 2);
  run_att(g_be, c, T, q, kc, vc, SLOTS, rs, rk, 300, 0, o[0]);
  run_att(g_be, c, T, q, kc, vc, SLOTS, rs, rk, 1, 0, o[1]);
  run_att(g_be, c, T, q, kc, vc, SLOTS, rs, rk, 300, 3, o[2]);
  memcpy(o[3], o[0], qn * 2);
  for (int64_t t = 500; t < T; t++)
    run_att(g_be, c, 1, q + (size_t)(t * Hq * D), kc, vc, SLOTS, rs + t, rk + t, 1, 0, o[3] + (size_t)(t * Hq * D));
  long bad, launch;
  att_compare(c, q, kc, vc, rs, rk, T, o, 4, "attention runs", &bad, &launch);
  if (bad || launch)
    fail_msg("attention runs Hq %lld Hkv %lld D %lld cache %lld (%lld rows): %ld beyond the tolerance, %ld differ "
             "between launches (hint 300, hint 1, q rows padded, the last %lld rows alone)",
             (long long)Hq, (long long)c->hkv, (long long)D, (long long)P, (long long)T, bad, launch, (long long)rest);
  free(q), free(kc), free(vc), free(rs), free(rk);
  for (int i = 0; i < 4; i++) free(o[i]);
}

static void t_attention_runs(void **st) {
  (void)st;
  const long long before = g_compared;
  /* Qwen3-8B's heads; GQA 3 on a stacked cache (a pair's rows straddle m-tiles); head dim 32; on CUDA, a cache of
     6200 keys at Qwen3-8B's heads (one block of the one-row kernel holds a decode row's 4 pairs' scores); at GQA
     16 (a row's 16 pairs) the same cache, past one block's scores at head dim 128 (the fp32 form, or with
     tc-long the one-row kernel split over a cluster), and one of 15500, past a cluster's (the fp32 form, or with
     tc-long the many-row kernel) */
  const att_case cases[] = {{32, 8, 128, 1, 700},  {24, 8, 64, 2, 500},   {32, 16, 32, 1, 420},
                            {32, 8, 128, 1, 6200}, {32, 2, 128, 1, 6200}, {32, 2, 128, 1, 15500}};
  const int64_t rows[] = {540, 540, 540, 516, 516, 508};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0] - 3 * !g_cuda; i++) /* the long caches: CUDA's forms */
    check_att_runs(&cases[i], rows[i]);
  print_message("attention runs: %lld values compared on %s\n", g_compared - before, dsp_backend_describe(g_be));
}

/* A batch's verify (runs of causal rows) or draft block (runs that see the same keys): one run of `run` rows on
 * each of `slots` slots past contexts of different lengths, enough runs that CUDA's blocks, a run each, fill the
 * SMs (the batch-32 shapes of a speculative round): the same bits with the hint as one row a block (hint 1), each
 * value within t_attention's tolerance of the reference. */
static void check_att_batch(const att_case *c, int64_t slots, int64_t run, int causal) {
  const int64_t D = c->d, Hq = c->hq, W = c->hkv * D * c->stride_mul, P = c->max_len, T = slots * run;
  int32_t *rs = malloc((size_t)T * 4), *rk = malloc((size_t)T * 4);
  for (int64_t t = 0; t < T; t++) {
    const int64_t span = P < 300 ? P : 300; /* keys within the first 300 positions, whatever the capacity */
    const int64_t s = t / run, i = t % run, ctx = 60 + (s * 37) % (span - run - 60);
    rs[t] = (int32_t)s, rk[t] = (int32_t)(ctx + (causal ? i + 1 : run));
  }
  const size_t cn = (size_t)(slots * P * W), qn = (size_t)(T * Hq * D);
  uint16_t *q, *kc, *vc, *o[2];
  att_inputs(qn, cn, 0, &q, &kc, &vc);
  for (int i = 0; i < 2; i++) o[i] = malloc(qn * 2);
  run_att(g_be, c, T, q, kc, vc, slots, rs, rk, (int)run, 0, o[0]);
  run_att(g_be, c, T, q, kc, vc, slots, rs, rk, 1, 0, o[1]);
  long bad, launch;
  att_compare(c, q, kc, vc, rs, rk, T, o, 2, "attention batch", &bad, &launch);
  if (bad || launch)
    fail_msg("attention batch Hq %lld Hkv %lld D %lld, %lld runs of %lld %s rows: %ld beyond the tolerance, %ld "
             "differ between hint %lld and hint 1", (long long)Hq, (long long)c->hkv, (long long)D, (long long)slots,
             (long long)run, causal ? "causal" : "block", bad, launch, (long long)run);
  free(q), free(kc), free(vc), free(rs), free(rk), free(o[0]), free(o[1]);
}

static void t_attention_batch(void **st) {
  (void)st;
  const long long before = g_compared;
  /* Qwen3-8B's heads: 36 runs x 8 KV heads = 288 blocks, past an H100's or H200's 132 SMs; a verify of 8 rows
     (32 pairs a run: two m-tiles) and a draft block of 7 (28); a verify of 4 at GQA 4 and head dim 64 (16 pairs);
     Qwen3-14B's at 20 runs (160 blocks and more) */
  const att_case big = {32, 8, 128, 1, 300}, small = {16, 4, 64, 1, 260};
  check_att_batch(&big, 36, 8, 1);
  check_att_batch(&big, 36, 7, 0);
  check_att_batch(&small, 40, 4, 1);
  /* Qwen3-14B's heads (GQA 5): a verify's 8 rows are 40 pairs, more than a block's 32, so a run spans blocks */
  const att_case g5 = {40, 8, 128, 1, 300};
  check_att_batch(&g5, 20, 8, 1);
  check_att_batch(&g5, 20, 7, 0);
  /* the same runs in a cache of capacity 3072, where CUDA's launch choice (DSPARK_CUDA_ATTENTION_SHORT auto) moves
     them to the many-row kernel: the same bits as one row a block */
  const att_case roomy = {32, 8, 128, 1, 3072};
  if (g_cuda) check_att_batch(&roomy, 36, 8, 1), check_att_batch(&roomy, 36, 7, 0);
  print_message("attention batch: %lld values compared on %s\n", g_compared - before, dsp_backend_describe(g_be));
}

/* ---- the models' layer ops (docs/CONTRACTS.md, "The models") ---------------------
 * Each op on the backend under test (and on the CPU in CUDA runs) against a
 * reference written here from the contract's rounding points. Exact ops
 * (embed, gather, scatter, add, round_add, RoPE: fp32 operations on bf16 values
 * rounded as the contract says) must match bit for bit everywhere. RMSNorm and
 * silu_mul sum or take expf in fp32 where the reference uses double: within one
 * bf16 ulp of it (RMSNorm: or w times a neighbour of the reference's xn, rounded
 * once), so the backends within two of each other. Selection:
 * the id the contract's order and Philox noise pick, exactly. */
int ulps16(uint16_t a, uint16_t b) { /* distance in bf16 steps (same sign region) */
  const int ia = a & 0x8000 ? -(int)(a & 0x7fff) : (int)a, ib = b & 0x8000 ? -(int)(b & 0x7fff) : (int)b;
  return abs(ia - ib);
}

typedef struct {
  long exact, near, bad, cross;
} op_tally;

static void op_cmp(op_tally *t, uint16_t got, uint16_t cpu, uint16_t want, int exact_op, const char *what, int64_t i) {
  int ok;
  if (is_nan16(want)) ok = is_nan16(got);
  else ok = exact_op ? got == want : ulps16(got, want) <= 1;
  t->exact += got == want;
  t->near += ok && got != want;
  t->bad += !ok;
  if (!ok && t->bad <= 3)
    print_message("  %s [%lld]: got 0x%04x (%a), contract 0x%04x (%a)\n", what, (long long)i, got, (double)bf(got), want,
                  (double)bf(want));
  if (g_cpu && !(is_nan16(got) && is_nan16(cpu))) t->cross += exact_op ? got != cpu : ulps16(got, cpu) > 2;
  g_compared++;
}

static void op_done(const op_tally *t, const char *what) {
  if (t->bad || t->cross)
    fail_msg("%s: %ld values beyond the contract's tolerance, %ld CPU values beyond the tolerance of this backend's",
             what, t->bad, t->cross);
}

/* A [R, C] BF16 view of backend memory with row stride ld. */
static dsp_tensor view2(void *d, int64_t r, int64_t c, int64_t ld) {
  dsp_tensor v = dsp_tensor_2d(d, DSP_BF16, r, c);
  v.stride[0] = ld;
  return v;
}

static void run_rmsnorm(dsp_backend *be, const uint16_t *x, const uint16_t *w, int64_t R, int64_t N, int64_t D,
                        int64_t ld, int in_place, uint16_t *out) {
  void *dx = dev_put(be, x, (size_t)(R * ld) * 2), *dw = dev_put(be, w, (size_t)D * 2);
  void *dout = in_place ? dx : dev_put(be, x, (size_t)(R * ld) * 2);
  dsp_tensor xv = {.data = dx, .dtype = DSP_BF16, .ndim = 3, .shape = {R, N, D}, .stride = {ld, D, 1}};
  dsp_tensor ov = xv;
  ov.data = dout;
  int64_t wsh[1] = {D};
  dsp_tensor wv = dsp_tensor_view(dw, DSP_BF16, 1, wsh);
  if (dsp_op_rmsnorm(be, 0, &xv, &wv, 1e-6f, &ov) != DSP_OK) fail_msg("rmsnorm: %s", dsp_error_message());
  dev_get(be, out, dout, (size_t)(R * ld) * 2);
  dsp_op_release(be, 0, dx);
  dsp_op_release(be, 0, dw);
  if (!in_place) dsp_op_release(be, 0, dout);
}

/* On a CPU with AVX-512, the scalar path's result of the same call (bits, NaN equal to NaN) must be the vector
   path's: *isa counts the values that differ. */
/* The CPU's paths below its default (scalar, then AVX2 where AVX-512 is the default): from p, the next one is
   forced and its index + 1 returned, 0 when none is left; isa_cmp returns to the default. */
static int other_path(int p) {
  static const char *names[] = {"scalar", "avx2"};
  for (; !g_cuda && p < 2; p++)
    if (dsp_cpu_isa_current() > (dsp_cpu_isa)p) {
      assert_int_equal(dsp_cpu_kernel_force(names[p]), DSP_OK);
      return p + 1;
    }
  return 0;
}
static void isa_cmp(long *isa, const uint16_t *vec, const uint16_t *sc, size_t n) {
  assert_int_equal(dsp_cpu_kernel_force(NULL), DSP_OK);
  for (size_t i = 0; i < n; i++) *isa += vec[i] != sc[i] && !(is_nan16(vec[i]) && is_nan16(sc[i]));
}

static void t_rmsnorm(void) {
  /* rows of 4096 (one block per row on CUDA), 256, 1000, 72 and 83 (past the AVX2 form's groups of 8 rows and
     dims, and the AVX-512 form's blocks of 32 dims); per-head views in wider rows; in place; one row alone and
     a group of 16 then one (the AVX-512 form's single-row chain), heads of 32 */
  const struct { int64_t r, n, d, ld; int grid, in_place; } cs[] = {
      {5, 1, 4096, 4096, 0, 0}, {7, 1, 256, 264, 1, 0}, {3, 1, 1000, 1000, 0, 1}, {6, 8, 128, 1536, 0, 1},
      {4, 3, 72, 240, 1, 0},    {2, 1, 4096, 4104, 1, 1}, {9, 1, 83, 90, 0, 0},     {1, 1, 256, 256, 1, 0},
      {17, 1, 64, 70, 0, 0},    {3, 5, 32, 170, 1, 1}};
  op_tally t = {0};
  long isa = 0;
  for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
    const int64_t R = cs[c].r, N = cs[c].n, D = cs[c].d, ld = cs[c].ld;
    uint16_t *x = malloc((size_t)(R * ld) * 2), *w = malloc((size_t)D * 2);
    uint16_t *o = malloc((size_t)(R * ld) * 2), *oc = malloc((size_t)(R * ld) * 2);
    for (int64_t i = 0; i < R * ld; i++) x[i] = cs[c].grid ? grid_val() : rand_val();
    for (int64_t i = 0; i < D; i++) w[i] = rand_val();
    run_rmsnorm(g_be, x, w, R, N, D, ld, cs[c].in_place, o);
    if (g_cpu) run_rmsnorm(g_cpu, x, w, R, N, D, ld, cs[c].in_place, oc);
    for (int p = 0; (p = other_path(p)) != 0;) {
      run_rmsnorm(g_be, x, w, R, N, D, ld, cs[c].in_place, oc);
      isa_cmp(&isa, o, oc, (size_t)(R * ld));
    }
    for (int64_t r = 0; r < R; r++)
      for (int64_t h = 0; h < N; h++) {
        const uint16_t *xr = x + r * ld + h * D;
        double ss = 0;
        for (int64_t d = 0; d < D; d++) ss += (double)bf(xr[d]) * (double)bf(xr[d]);
        const double inv = 1.0 / sqrt(ss / (double)D + (double)1e-6f);
        for (int64_t d = 0; d < D; d++) {
          const uint16_t xn = to_bf((double)bf(xr[d]) * inv);
          uint16_t want = f32_to_bf(bf(w[d]) * bf(xn));
          const int64_t i = r * ld + h * D + d;
          /* the backend's fp32 1/sqrt may round xn to a neighbour of the reference's; out is then that xn
             times w, rounded once (which can be two ulps from the reference's out) */
          for (int nb = -1; nb <= 1; nb += 2) {
            const uint16_t xn2 = (uint16_t)(xn + nb), alt = f32_to_bf(bf(w[d]) * bf(xn2));
            if (!is_nan16(xn2) && (xn2 & 0x7fff) != 0x7f80 && (xn2 ^ xn) < 0x8000 && o[i] == alt && ulps16(o[i], want) > 1)
              want = alt;
          }
          op_cmp(&t, o[i], g_cpu ? oc[i] : o[i], want, 0, "rmsnorm", i);
        }
      }
    free(x), free(w), free(o), free(oc);
  }
  op_done(&t, "rmsnorm");
  if (isa) fail_msg("rmsnorm: %ld values differ between the CPU's default path and its scalar or AVX2 one", isa);
  print_message("rmsnorm: %ld equal to the contract, %ld one ulp from it\n", t.exact, t.near);
}

static void run_rope(dsp_backend *be, const uint16_t *x, const int32_t *pos, const uint16_t *cs, const uint16_t *sn,
                     int64_t T, int64_t N, int64_t D, int64_t ld, int64_t P, uint16_t *out) {
  void *dx = dev_put(be, x, (size_t)(T * ld) * 2), *dp = dev_put(be, pos, (size_t)T * 4);
  void *dc = dev_put(be, cs, (size_t)(P * D / 2) * 2), *ds = dev_put(be, sn, (size_t)(P * D / 2) * 2);
  dsp_tensor xv = {.data = dx, .dtype = DSP_BF16, .ndim = 3, .shape = {T, N, D}, .stride = {ld, D, 1}};
  dsp_tensor cv = dsp_tensor_2d(dc, DSP_BF16, P, D / 2), sv = dsp_tensor_2d(ds, DSP_BF16, P, D / 2);
  if (dsp_op_rope(be, 0, &xv, dp, &cv, &sv) != DSP_OK) fail_msg("rope: %s", dsp_error_message());
  dev_get(be, out, dx, (size_t)(T * ld) * 2);
  void *all[] = {dx, dp, dc, ds};
  for (int i = 0; i < 4; i++) dsp_op_release(be, 0, all[i]);
}

static void t_rope(void) {
  /* the draft's stacked form: heads of every layer in one call, rows strided inside a wider projection */
  const struct { int64_t t, n, d, ld; } cs[] = {{9, 8, 128, 2048}, {5, 15, 64, 960}, {3, 3, 80, 256}, {2, 3, 36, 120}};
  op_tally t = {0};
  const int64_t P = 64;
  for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
    const int64_t T = cs[c].t, N = cs[c].n, D = cs[c].d, ld = cs[c].ld, hf = D / 2;
    uint16_t *x = malloc((size_t)(T * ld) * 2), *o = malloc((size_t)(T * ld) * 2), *oc = malloc((size_t)(T * ld) * 2);
    uint16_t *co = malloc((size_t)(P * hf) * 2), *si = malloc((size_t)(P * hf) * 2);
    int32_t *pos = malloc((size_t)T * 4);
    for (int64_t i = 0; i < T * ld; i++) x[i] = rand_val();
    for (int64_t i = 0; i < P * hf; i++) co[i] = rand_val(), si[i] = rand_val();
    for (int64_t i = 0; i < T; i++) pos[i] = (int32_t)((i * 37 + 5) % P);
    run_rope(g_be, x, pos, co, si, T, N, D, ld, P, o);
    if (g_cpu) run_rope(g_cpu, x, pos, co, si, T, N, D, ld, P, oc);
    for (int p = 0; (p = other_path(p)) != 0;) { /* the other CPU paths' bits (oc is not the CPU's here) */
      run_rope(g_be, x, pos, co, si, T, N, D, ld, P, oc);
      long isa = 0;
      isa_cmp(&isa, o, oc, (size_t)(T * ld));
      if (isa) fail_msg("rope: %ld values differ between the CPU's default path and its %s one", isa, p == 1 ? "scalar" : "AVX2");
    }
    for (int64_t r = 0; r < T; r++)
      for (int64_t i = 0; i < ld; i++) {
        const int64_t h = i / D, d = i % D;
        uint16_t want = x[r * ld + i]; /* columns past the heads stay */
        if (h < N) {
          const uint16_t *xr = x + r * ld + h * D;
          const int64_t j = d % hf;
          const float c0 = bf(co[pos[r] * hf + j]), s0 = bf(si[pos[r] * hf + j]);
          const float a = bf(f32_to_bf(bf(xr[d]) * c0));
          const float b = bf(f32_to_bf(bf(xr[d < hf ? d + hf : d - hf]) * s0));
          want = f32_to_bf(d < hf ? a - b : a + b);
        }
        op_cmp(&t, o[r * ld + i], g_cpu ? oc[r * ld + i] : o[r * ld + i], want, 1, "rope", r * ld + i);
      }
    free(x), free(o), free(oc), free(co), free(si), free(pos);
  }
  op_done(&t, "rope");
}

/* add, silu_mul, round_add, embed, gather and scatter on [M, N] views with padded rows. */
typedef enum { EW_ADD, EW_SILU, EW_ROUND_ADD, EW_EMBED, EW_GATHER, EW_SCATTER } ew_kind;

static void run_ew(dsp_backend *be, ew_kind k, const uint16_t *a, const uint16_t *b, const float *p,
                   const int32_t *ids, const int64_t *idx, int64_t M, int64_t N, int64_t ld, int64_t V, uint16_t *out) {
  const size_t bytes = (size_t)(M * ld) * 2, tb = (size_t)(V * ld) * 2;
  void *da = dev_put(be, a, k == EW_EMBED || k == EW_GATHER ? tb : bytes), *db = dev_put(be, b, bytes);
  void *dout = dev_put(be, out, k == EW_SCATTER ? tb : bytes);
  void *dp = p ? dev_put(be, p, (size_t)(M * ld) * 4) : NULL;
  void *di = ids ? dev_put(be, ids, (size_t)M * 4) : NULL, *dx = idx ? dev_put(be, idx, (size_t)M * 8) : NULL;
  dsp_tensor av = view2(da, k == EW_EMBED || k == EW_GATHER ? V : M, N, ld), bv = view2(db, M, N, ld);
  dsp_tensor ov = view2(dout, k == EW_SCATTER ? V : M, N, ld);
  dsp_tensor pv = {.data = dp, .dtype = DSP_F32, .ndim = 2, .shape = {M, N}, .stride = {ld, 1}};
  dsp_status s = DSP_OK;
  switch (k) {
  case EW_ADD: s = dsp_op_add(be, 0, &av, &bv, &ov); break;
  case EW_SILU: s = dsp_op_silu_mul(be, 0, &av, &bv, &ov); break;
  case EW_ROUND_ADD: s = dsp_op_round_add(be, 0, &av, &pv, &ov); break;
  case EW_EMBED: s = dsp_op_embed(be, 0, &av, di, M, &ov); break;
  case EW_GATHER: s = dsp_op_gather_rows(be, 0, &av, dx, &ov); break;
  case EW_SCATTER: {
    dsp_tensor sv = view2(db, M, N, ld);
    s = dsp_op_scatter_rows(be, 0, &sv, dx, &ov);
  } break;
  }
  if (s != DSP_OK) fail_msg("element-wise op %d: %s", (int)k, dsp_error_message());
  dev_get(be, out, dout, k == EW_SCATTER ? tb : bytes);
  void *all[] = {da, db, dout, dp, di, dx};
  for (int i = 0; i < 6; i++)
    if (all[i]) dsp_op_release(be, 0, all[i]);
}

/* N 300: the CUDA kernels' generic form; N 304 (whole 16-byte pieces): their vector form */
static void t_elementwise_n(int64_t N) {
  static const char *names[] = {"add", "silu_mul", "round_add", "embed", "gather_rows", "scatter_rows"};
  const int64_t M = 13, ld = 312, V = 40;
  uint16_t *a = malloc((size_t)(V * ld) * 2), *b = malloc((size_t)(M * ld) * 2);
  uint16_t *o = malloc((size_t)(V * ld) * 2), *oc = malloc((size_t)(V * ld) * 2);
  float *p = malloc((size_t)(M * ld) * 4);
  int32_t ids[13];
  int64_t idx[13];
  for (int64_t i = 0; i < V * ld; i++) a[i] = rand_val();
  for (int64_t i = 0; i < M * ld; i++) b[i] = rand_val(), p[i] = (float)((double)(rnd() >> 11) / 9007199254740992.0 - 0.5);
  a[3] = 0x7fc0, a[4] = 0x7f80, a[5] = 0xff80, b[6] = 0x8000, a[7] = 0x42f0; /* NaN, +-inf, -0, a large gate */
  for (int64_t i = 0; i < M; i++) ids[i] = (int32_t)((i * 7 + 3) % V), idx[i] = (i * 11 + 2) % V; /* distinct rows */
  for (int k = EW_ADD; k <= EW_SCATTER; k++) {
    op_tally t = {0};
    const int64_t rows = k == EW_SCATTER ? V : M;
    for (int64_t i = 0; i < rows * ld; i++) o[i] = oc[i] = 0xbeef; /* untouched padding and rows must stay */
    run_ew(g_be, (ew_kind)k, a, b, p, ids, idx, M, N, ld, V, o);
    if (g_cpu) run_ew(g_cpu, (ew_kind)k, a, b, p, ids, idx, M, N, ld, V, oc);
    for (int q = 0; (q = other_path(q)) != 0;) {
      long isa = 0;
      for (int64_t i = 0; i < rows * ld; i++) oc[i] = 0xbeef;
      run_ew(g_be, (ew_kind)k, a, b, p, ids, idx, M, N, ld, V, oc);
      isa_cmp(&isa, o, oc, (size_t)(rows * ld));
      if (isa) fail_msg("%s: %ld values differ between the CPU's default path and its %s one", names[k], isa,
                        q == 1 ? "scalar" : "AVX2");
    }
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < ld; c++) {
        const int64_t i = r * ld + c;
        uint16_t want = 0xbeef;
        int exact = 1;
        int64_t src = -1;
        if (k == EW_SCATTER)
          for (int64_t q = 0; q < M; q++) src = idx[q] == r ? q : src;
        if (c < N && (k != EW_SCATTER || src >= 0)) {
          const float x = bf(a[i < V * ld ? i : 0]), y = bf(b[r < M ? i : 0]);
          switch (k) {
          case EW_ADD: want = f32_to_bf(x + y); break;
          case EW_SILU:
            want = to_bf((double)bf(to_bf((double)x / (1.0 + exp(-(double)x)))) * (double)y);
            exact = 0;
            break;
          case EW_ROUND_ADD: want = f32_to_bf(x + bf(f32_to_bf(p[i]))); break;
          case EW_EMBED: want = a[ids[r] * ld + c]; break;
          case EW_GATHER: want = a[idx[r] * ld + c]; break;
          case EW_SCATTER: want = b[src * ld + c]; break;
          }
        }
        op_cmp(&t, o[i], g_cpu ? oc[i] : o[i], want, exact, names[k], i);
      }
    op_done(&t, names[k]);
  }
  free(a), free(b), free(o), free(oc), free(p);
}
static void t_elementwise(void) {
  t_elementwise_n(300);
  t_elementwise_n(304);
}

/* Philox4x32-10 (Random123) and the contract's Gumbel noise, written here. */
uint32_t ref_philox0(uint64_t seed, uint64_t id, uint64_t pos) {
  uint32_t c[4] = {(uint32_t)id, (uint32_t)(id >> 32), (uint32_t)pos, (uint32_t)(pos >> 32)};
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    const uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
    const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
    c[0] = n0, c[1] = (uint32_t)p1, c[2] = n2, c[3] = (uint32_t)p0;
    k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
  }
  return c[0];
}

static void run_select(dsp_backend *be, const uint16_t *lg, int64_t R, int64_t N, int64_t ls, int64_t nv, int64_t id0,
                       const float *tr, const uint64_t *sd, const int64_t *pos, uint64_t *keys) {
  void *dl = dev_put(be, lg, (size_t)(R * ls) * 2), *dk = dev_put(be, NULL, (size_t)R * 8);
  void *dt = tr ? dev_put(be, tr, (size_t)R * 4) : NULL, *ds = dev_put(be, sd, (size_t)R * 8);
  void *dp = dev_put(be, pos, (size_t)R * 8);
  dsp_tensor lv = view2(dl, R, N, ls);
  dsp_op_select_args a = {.logits = &lv, .id0 = id0, .n_valid = nv, .t_row = dt, .seed_row = ds, .pos = dp, .keys = dk};
  if (dsp_op_select(be, 0, &a) != DSP_OK) fail_msg("select: %s", dsp_error_message());
  dev_get(be, keys, dk, (size_t)R * 8);
  void *all[] = {dl, dk, dt, ds, dp};
  for (int i = 0; i < 5; i++)
    if (all[i]) dsp_op_release(be, 0, all[i]);
}

static void t_select(void) {
  const int64_t R = 9, N = 5000, ls = 5008, id0 = 70000;
  uint16_t *lg = malloc((size_t)(R * ls) * 2);
  for (int64_t i = 0; i < R * ls; i++) lg[i] = grid_val(); /* many ties */
  lg[1 * ls + 4000] = 0x7fc1, lg[1 * ls + 17] = 0x7fc0;  /* NaNs: the lowest id wins */
  for (int64_t c = 0; c < N; c++) lg[2 * ls + c] = 0xff80; /* all -inf */
  lg[3 * ls + 4999] = 0x7f80;                               /* +inf in the last valid column */
  for (int64_t c = 0; c < N; c++) lg[4 * ls + c] = c % 2 ? 0x0000 : 0x8000; /* -0 first, then +0: equal */
  float tr[9] = {0, 0, 0, 0, 0, 0.7f, 1.0f, 2.5f, 1e-3f};
  uint64_t sd[9] = {1, 2, 3, 4, 5, 6, 7ull << 33, 8, 9};
  int64_t pos[9] = {0, 1, 2, 3, 4, 5, 1ll << 35, 77, 12};
  uint64_t k[9], kc[9];
  const int64_t nvs[] = {N, 4321, 3}; /* CUDA splits a row over blocks of 2048 columns: 3, 3 and 1 here */
  long bad = 0, cross = 0;
  for (int v = 0; v < 3; v++) {
    const int64_t nv = nvs[v];
    run_select(g_be, lg, R, N, ls, nv, id0, tr, sd, pos, k);
    if (g_cpu) run_select(g_cpu, lg, R, N, ls, nv, id0, tr, sd, pos, kc);
    for (int p = 0; (p = other_path(p)) != 0;) { /* the CPU's lower paths: the same keys */
      uint64_t ko[9];
      run_select(g_be, lg, R, N, ls, nv, id0, tr, sd, pos, ko);
      assert_int_equal(dsp_cpu_kernel_force(NULL), DSP_OK);
      for (int64_t r = 0; r < R; r++) bad += ko[r] != k[r];
    }
    for (int64_t r = 0; r < R; r++) {
      float best = 0;
      int64_t bi = -1;
      for (int64_t c = 0; c < nv; c++) {
        float sc = bf(lg[r * ls + c]);
        if (tr[r] > 0) {
          const double u = ((double)ref_philox0(sd[r], (uint64_t)(id0 + c), (uint64_t)pos[r]) + 0.5) / 4294967296.0;
          volatile float q = sc / tr[r];
          sc = q + (float)(-log(-log(u)));
        }
        if (bi < 0 || better(sc, id0 + c, best, bi)) best = sc, bi = id0 + c;
      }
      const int64_t got = (int64_t)(uint32_t)~(uint32_t)k[r]; /* core/select.h's key: id in the low word, inverted */
      if (got != bi) {
        bad++;
        print_message("  select row %lld (T %g, %lld valid): id %lld, contract %lld\n", (long long)r, (double)tr[r],
                      (long long)nv, (long long)got, (long long)bi);
      }
      if (g_cpu) cross += kc[r] != k[r];
      g_compared++;
    }
  }
  if (bad || cross) fail_msg("select: %ld ids differ from the contract's, %ld keys from the CPU's", bad, cross);
  free(lg);
}

static void t_layers(void **st) {
  (void)st;
  const long long before = g_compared;
  t_rmsnorm();
  t_rope();
  t_elementwise();
  t_select();
  t_fused_layers();
  print_message("layer ops: %lld values compared on %s%s\n", g_compared - before, dsp_backend_describe(g_be),
                g_cpu ? " (and against the CPU)" : "");
}

/* ---- the Markov step ---------------------------------------------------------- */
typedef struct {
  int64_t b, n, r, n_valid, id0;
  int fp32_add, grid, specials, strict, logits;
} mk_case;

static void run_mk(dsp_backend *be, const mk_case *t, const uint16_t *e, const uint16_t *w2, const uint16_t *base,
                   float *bv, int64_t *bi, void *lg) {
  dsp_weight *wt;
  dsp_tensor wv = dsp_tensor_2d((void *)w2, DSP_BF16, t->n, t->r);
  assert_int_equal(dsp_op_weight_create(be, 0, &wv, t->strict, &wt), DSP_OK);
  const size_t ls = t->fp32_add ? 4 : 2;
  void *de = dev_put(be, e, (size_t)(t->b * t->r) * 2), *db = dev_put(be, base, (size_t)(t->b * t->n) * 2);
  void *dl = t->logits ? dev_put(be, NULL, (size_t)(t->b * t->n) * ls) : NULL;
  dsp_tensor ev = dsp_tensor_2d(de, DSP_BF16, t->b, t->r), bsv = dsp_tensor_2d(db, DSP_BF16, t->b, t->n);
  dsp_tensor lv = {.data = dl, .dtype = t->fp32_add ? DSP_F32 : DSP_BF16, .ndim = 2, .shape = {t->b, t->n_valid},
                   .stride = {t->n, 1}};
  dsp_op_markov_args a = {.e = &ev, .w2 = wt, .base = &bsv, .fp32_add = t->fp32_add, .id0 = t->id0,
                          .n_valid = t->n_valid, .best_val = bv, .best_id = bi, .logits = dl ? &lv : NULL};
  dsp_status s = dsp_op_markov_step(be, 0, &a);
  if (s != DSP_OK) fail_msg("markov step on %s: %s", dsp_backend_describe(be), dsp_error_message());
  if (dl) dev_get(be, lg, dl, (size_t)(t->b * t->n) * ls);
  dsp_op_release(be, 0, de);
  dsp_op_release(be, 0, db);
  dsp_op_release(be, 0, dl);
  dsp_op_weight_free(be, wt);
}

static void check_mk(const mk_case *t) {
  const int64_t B = t->b, N = t->n, R = t->r;
  uint16_t *e = malloc((size_t)(B * R) * 2), *w2 = malloc((size_t)(N * R) * 2), *base = malloc((size_t)(B * N) * 2);
  const size_t ls = t->fp32_add ? 4 : 2;
  char *lg = calloc((size_t)(B * N), ls), *lg2 = calloc((size_t)(B * N), ls);
  float *bv = malloc((size_t)B * 4), *bv2 = malloc((size_t)B * 4);
  int64_t *bi = malloc((size_t)B * 8), *bi2 = malloc((size_t)B * 8);
  for (int64_t i = 0; i < B * R; i++) e[i] = t->grid ? grid_val() : rand_val();
  for (int64_t i = 0; i < N * R; i++) w2[i] = t->grid ? grid_val() : rand_val();
  for (int64_t i = 0; i < B * N; i++) base[i] = t->grid ? grid_val() : rand_val();
  if (t->specials && B >= 5 && t->n_valid >= 8) {
    /* row 0: two NaNs (the first wins); row 1: +inf at two ids (the lower wins); row 2: all -inf (id0 wins);
     * row 3: ties of -0 / +0 only (the lowest id wins); row 4: padding rows hold +inf (never win) and the
     * last real row 2^127 */
    base[0 * N + 5] = 0x7fc0, base[0 * N + 2] = 0x7fc0;
    base[1 * N + 6] = 0x7f80, base[1 * N + 3] = 0x7f80;
    for (int64_t v = 0; v < N; v++) base[2 * N + v] = 0xff80;
    for (int64_t r = 0; r < R; r++) e[3 * R + r] = 0;
    for (int64_t v = 0; v < N; v++) base[3 * N + v] = v % 2 ? 0x8000 : 0x0000;
    for (int64_t v = t->n_valid; v < N; v++) base[4 * N + v] = 0x7f80;
    base[4 * N + t->n_valid - 1] = 0x7f00; /* ... and the last real row, 2^127, does */
  }
  run_mk(g_be, t, e, w2, base, bv, bi, lg);
  if (g_cpu) run_mk(g_cpu, t, e, w2, base, bv2, bi2, lg2);
  long bad = 0, badl = 0, cross = 0;
  for (int64_t b = 0; b < B; b++) {
    float best = -INFINITY;
    int64_t besti = INT64_MAX;
    for (int64_t v = 0; v < t->n_valid; v++) {
      double acc = 0;
      for (int64_t r = 0; r < R; r++) acc += (double)bf(w2[v * R + r]) * (double)bf(e[b * R + r]);
      const float bias = bf(to_bf(acc));                     /* contract 3: bias rounded once */
      const float sum = bf(base[b * N + v]) + bias;           /* fp32 add */
      const float logit = t->fp32_add ? sum : bf(f32_to_bf(sum));
      if (better(logit, t->id0 + v, best, besti)) best = logit, besti = t->id0 + v;
      if (t->logits) {
        /* random inputs: an fp32 dot product may round the bias to a bf16 neighbour of the exact one; the
         * logit is then the contract's add on that neighbour (many ulps of a cancelling sum) */
        const uint16_t bb = to_bf(acc), nb0 = (bb & 0x7fff) ? bb - 1 : 0x8001, nb1 = (bb & 0x7fff) ? bb + 1 : 0x0001;
        const float s0 = bf(base[b * N + v]) + bf(nb0), s1 = bf(base[b * N + v]) + bf(nb1);
        int ok;
        if (t->fp32_add) {
          const float got = ((const float *)lg)[b * N + v];
          ok = (isnan(got) && isnan(logit)) || got == logit || !t->grid;
          if (!t->grid)
            ok = ok && (isnan(logit) ? isnan(got)
                                     : fabsf(got - logit) <= ldexpf(fabsf(logit), -7) + 1e-6f || got == s0 || got == s1);
        } else {
          const uint16_t got = ((const uint16_t *)lg)[b * N + v], want = f32_to_bf(logit);
          ok = got == want || (is_nan16(got) && is_nan16(want)) ||
               (!t->grid && (abs((int)got - (int)want) <= 1 || got == f32_to_bf(s0) || got == f32_to_bf(s1)));
        }
        if (!ok && ++badl <= 3)
          print_message("  markov row %lld id %lld: logit %g, contract %g (bias %g)\n", (long long)b, (long long)v,
                        t->fp32_add ? (double)((const float *)lg)[b * N + v] : (double)bf(((const uint16_t *)lg)[b * N + v]),
                        (double)logit, (double)bias);
      }
    }
    const int same = bi[b] == besti && ((isnan(bv[b]) && isnan(best)) || bv[b] == best);
    /* random inputs: a near-tie may flip under the last-bit freedom of inexact sums */
    bad += !same && t->grid;
    if (!same && t->grid && bad <= 3)
      print_message("  markov row %lld: got (%g, %lld), contract (%g, %lld)\n", (long long)b, (double)bv[b],
                    (long long)bi[b], (double)best, (long long)besti);
    if (g_cpu) cross += (bi[b] != bi2[b]) && (t->grid || t->strict);
    g_compared++;
  }
  if (bad || badl || cross)
    fail_msg("markov step B %lld N %lld R %lld valid %lld id0 %lld (%s%s%s%s): %ld selections and %ld logits differ "
             "from the contract, %ld selections differ from the CPU",
             (long long)B, (long long)N, (long long)R, (long long)t->n_valid, (long long)t->id0,
             t->grid ? "grid" : "random", t->fp32_add ? ", fp32-add" : "", t->specials ? ", specials" : "",
             t->strict ? ", strict" : "", bad, badl, cross);
  free(e), free(w2), free(base), free(lg), free(lg2), free(bv), free(bv2), free(bi), free(bi2);
}

static void t_markov_step(void **st) {
  (void)st;
  const mk_case cases[] = {
      {5, 64, 16, 64, 0, 0, 1, 1, 0, 1},      {8, 100, 32, 97, 1000, 0, 1, 1, 0, 1}, {16, 256, 256, 250, 7, 1, 1, 1, 0, 1},
      {3, 40, 8, 40, 0, 1, 1, 0, 1, 1},       {32, 1000, 64, 1000, 5, 0, 1, 0, 0, 0}, {7, 48, 24, 48, 0, 0, 0, 0, 1, 1},
      {12, 512, 128, 500, 3, 0, 0, 0, 0, 1},  {6, 64, 16, 0, 0, 0, 1, 0, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_mk(&cases[i]);
  print_message("markov step: %lld values and rows compared on %s\n", g_compared, dsp_backend_describe(g_be));
}

/* ---- perf: time per op against its floor --------------------------------------- */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds per call of call(ctx): one warm-up, then the median of 5 timed groups of reps. */
double median_time(dsp_status (*call)(void *), void *ctx, int reps) {
  double t[5];
  assert_int_equal(call(ctx), DSP_OK);
  for (int g = 0; g < 5; g++) {
    assert_int_equal(dsp_op_sync(g_be, 0), DSP_OK);
    const double t0 = now_s();
    for (int r = 0; r < reps; r++) assert_int_equal(call(ctx), DSP_OK);
    assert_int_equal(dsp_op_sync(g_be, 0), DSP_OK);
    t[g] = (now_s() - t0) / reps;
  }
  for (int i = 1; i < 5; i++)
    for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
      const double x = t[j];
      t[j] = t[j - 1], t[j - 1] = x;
    }
  return t[2];
}

typedef struct {
  dsp_tensor *a;
  dsp_weight *w;
  dsp_tensor *c;
} gemm_call;
static dsp_status run_gemm_call(void *p) {
  gemm_call *g = p;
  return dsp_op_gemm(g_be, 0, g->a, g->w, g->c);
}
static dsp_status run_att_call(void *p) { return dsp_op_attention(g_be, 0, p); }

/* Seconds per call of gemm (m, n, k), median of 5 timed groups. */
static double time_gemm(int64_t m, int64_t n, int64_t k, int reps) {
  uint16_t *w = malloc((size_t)(n * k) * 2), *a = malloc((size_t)(m * k) * 2);
  for (int64_t i = 0; i < n * k; i++) w[i] = rand_val();
  for (int64_t i = 0; i < m * k; i++) a[i] = rand_val();
  dsp_weight *wt;
  dsp_tensor wv = dsp_tensor_2d(w, DSP_BF16, n, k);
  assert_int_equal(dsp_op_weight_create(g_be, 0, &wv, 0, &wt), DSP_OK);
  void *da = dev_put(g_be, a, (size_t)(m * k) * 2), *dc = dev_put(g_be, NULL, (size_t)(m * n) * 2);
  dsp_tensor av = dsp_tensor_2d(da, DSP_BF16, m, k), cv = dsp_tensor_2d(dc, DSP_BF16, m, n);
  gemm_call gc = {&av, wt, &cv};
  const double med = median_time(run_gemm_call, &gc, reps);
  dsp_op_release(g_be, 0, da);
  dsp_op_release(g_be, 0, dc);
  dsp_op_weight_free(g_be, wt);
  free(w);
  free(a);
  return med;
}

/* The bandwidth the perf tables' floors divide bytes by: the benchmarks' own (support/rates.h). */
double copy_rate(void) { return dsp_bench_copy_rate(g_be); }

/* Seconds per attention call: T rows in runs of `run` rows per slot (a run
 * sees keys nk .. nk + run - 1 causally, or all nk + run - 1 when block),
 * Hq / Hkv heads of D; median of 5 timed groups. *bytes: the cache rows read. */
static double time_att(int64_t Hq, int64_t Hkv, int64_t D, int64_t T, int64_t run, int block, int64_t nk, int hint,
                       int64_t cap, double *bytes) {
  /* cap: the cache's capacity (max_len), which the launch choices read; 0: just past the keys */
  const int64_t W = Hkv * D, P = cap > nk + run ? cap : nk + run + 16, slots = (T + run - 1) / run;
  const size_t cn = (size_t)(slots * P * W), qn = (size_t)(T * Hq * D);
  uint16_t *h = malloc((cn > qn ? cn : qn) * 2);
  for (size_t i = 0; i < (cn > qn ? cn : qn); i++) h[i] = rand_val();
  int32_t *rs = malloc((size_t)T * 4), *rk = malloc((size_t)T * 4);
  for (int64_t t = 0; t < T; t++) rs[t] = (int32_t)(t / run), rk[t] = (int32_t)(block ? nk + run - 1 : nk + t % run);
  void *dq = dev_put(g_be, h, qn * 2), *dk = dev_put(g_be, h, cn * 2), *dv = dev_put(g_be, h, cn * 2);
  void *ds = dev_put(g_be, rs, (size_t)T * 4), *dr = dev_put(g_be, rk, (size_t)T * 4);
  void *dout = dev_put(g_be, NULL, qn * 2);
  dsp_tensor qv = {.data = dq, .dtype = DSP_BF16, .ndim = 3, .shape = {T, Hq, D}, .stride = {Hq * D, D, 1}};
  dsp_tensor ov = {.data = dout, .dtype = DSP_BF16, .ndim = 2, .shape = {T, Hq * D}, .stride = {Hq * D, 1}};
  dsp_op_attention_args a = {.q = &qv, .k = dk, .v = dv, .slots = slots, .max_len = P, .kv_heads = Hkv,
                             .kv_stride = W, .row_slot = ds, .row_keys = dr, .scale = 0.0884f, .out = &ov,
                             .row_group = hint};
  const int reps = g_cuda ? 50 : Hq * D * nk < (1 << 20) ? 50 : 2;
  const double med = median_time(run_att_call, &a, reps);
  *bytes = (double)slots * (double)(nk + run) * (double)W * 4.0;
  void *all[] = {dq, dk, dv, ds, dr, dout};
  for (int i = 0; i < 6; i++) dsp_op_release(g_be, 0, all[i]);
  free(h), free(rs), free(rk);
  return med;
}

/* One table row: ms per product against its floor (bytes over bw, flops over peak, the larger). */
static void perf_gemm_row(int64_t m, int64_t n, int64_t k, int reps, double bw, double peak) {
  const double t = time_gemm(m, n, k, reps);
  const double fb = (double)(n * k + m * k + m * n) * 2 / bw, ff = 2.0 * (double)(m * n * k) / peak;
  const double fl = fb > ff ? fb : ff;
  char name[64];
  snprintf(name, sizeof name, "%lld x %lld x %lld", (long long)m, (long long)n, (long long)k);
  printf("%-28s %10.4f %10.4f %8.2f\n", name, t * 1e3, fl * 1e3, t / fl);
}

static void t_perf(void **st) {
  (void)st;
  const double bw = copy_rate();
  const int64_t big = g_cuda ? 8192 : 1024;
  const double peak = 2.0 * (double)big * big * big / time_gemm(big, big, big, g_cuda ? 10 : 1);
  printf("perf on %s: %s %.1f GB/s, bf16 product %.1f GFLOP/s (square %lld, measured now)\n",
         dsp_backend_describe(g_be), g_cuda ? "copy" : "read", bw * 1e-9, peak * 1e-9, (long long)big);
  const int products = !g_perf_only || !strcmp(g_perf_only, "gemm");
  const int attention = !g_perf_only || !strcmp(g_perf_only, "attention");
  if (products) printf("%-28s %10s %10s %8s\n", "gemm M x N x K", "ms", "floor ms", "x floor");
  const int64_t shapes[][3] = {{1, 4096, 4096}, {32, 4096, 4096}, {8, 12288, 4096}, {224, 16384, 7168},
                               {512, 4096, 4096}};
  for (size_t i = 0; products && i < sizeof shapes / sizeof shapes[0]; i++) {
    const int64_t m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
    if (!g_cuda && m * n * k > (int64_t)1 << 33) continue;
    perf_gemm_row(m, n, k, g_cuda ? 50 : 2, bw, peak);
  }
  /* Qwen3-8B's products at the batch shapes of decoding (B 1, 32), verify-8 (B 1, 12, 32), a draft block (B 1, 16,
     32) and a 2048-token prefill */
  if (products) printf("%-28s %10s %10s %8s\n", "gemm (Qwen3-8B) M x N x K", "ms", "floor ms", "x floor");
  const int64_t ns[][2] = {{6144, 4096}, {4096, 4096}, {24576, 4096}, {4096, 12288}, {151936, 4096}};
  const int64_t ms[] = {1, 7, 8, 32, 96, 112, 224, 256, 2048};
  for (size_t i = 0; products && g_cuda && i < sizeof ns / sizeof ns[0]; i++)
    for (size_t j = 0; j < sizeof ms / sizeof ms[0]; j++) perf_gemm_row(ms[j], ns[i][0], ns[i][1], 20, bw, peak);
  /* attention at context 1024, Qwen3-8B's 32 / 8 heads of 128 */
  if (attention) printf("%-44s %10s %10s %8s\n", "attention (32/8 heads of 128, context 1024)", "ms", "floor ms", "x floor");
  const struct { int64_t t, run; int block, hint; const char *what; } at[] = {
      {1, 1, 0, 0, "decode, batch 1"},          {32, 1, 0, 0, "decode, batch 32"},
      {8, 8, 0, 0, "verify-8, batch 1"},        {256, 8, 0, 0, "verify-8, batch 32"},
      {7, 7, 1, 7, "draft block, batch 1"},     {224, 7, 1, 7, "draft block, batch 32"},
      {8, 8, 0, 8, "verify-8, batch 1, hint 8"}, {256, 8, 0, 8, "verify-8, batch 32, hint 8"}};
  for (size_t i = 0; attention && i < sizeof at / sizeof at[0]; i++) {
    if (!g_cuda && at[i].t > 32) continue;
    double bytes;
    const double t = time_att(32, 8, 128, at[i].t, at[i].run, at[i].block, 1024, at[i].hint, 0, &bytes);
    printf("%-44s %10.4f %10.4f %8.2f\n", at[i].what, t * 1e3, bytes / bw * 1e3, t / (bytes / bw));
  }
  /* prefill: causal runs from the first key (the many-row kernel takes the hinted runs unless
     DSPARK_CUDA_ATTENTION=tc-one-row; 8192 keys: the fp32 form unless tc-long); the floor is q.k and p.v
     once at the matrix rate */
  if (attention && g_cuda)
    printf("%-44s %10s %10s %8s\n", "attention prefill (32/8 heads of 128)", "ms", "floor ms", "x floor");
  const struct { int64_t t, run; int hint; const char *what; } pfl[] = {
      {1024, 1024, 1024, "prefill 1024"}, {1024, 1024, 1, "prefill 1024, hint 1 (one-row kernel)"},
      {2048, 2048, 2048, "prefill 2048"}, {2048, 512, 512, "prefill 4 x 512"},
      {8192, 8192, 8192, "prefill 8192"}};
  for (size_t i = 0; attention && g_cuda && i < sizeof pfl / sizeof pfl[0]; i++) {
    double bytes;
    const double t = time_att(32, 8, 128, pfl[i].t, pfl[i].run, 0, 1, pfl[i].hint, 0, &bytes);
    const double keys = (double)(pfl[i].t / pfl[i].run) * (double)pfl[i].run * (double)(pfl[i].run + 1) / 2.0;
    const double fl = 4.0 * 32 * 128 * keys / peak;
    printf("%-44s %10.4f %10.4f %8.2f\n", pfl[i].what, t * 1e3, fl * 1e3, t / fl);
  }
  /* a cache past one block's scores at head dim 128: the fp32 form, or with tc-long the one-row kernel split
     over a cluster (the many-row kernel for a prefill's runs) */
  if (attention && g_cuda) {
    printf("%-44s %10s %10s %8s\n", "attention (32/8 heads of 128, context 8192)", "ms", "floor ms", "x floor");
    /* the verify hinted as the target hints it (its rows per sequence) and not */
    const int64_t lt[][3] = {{1, 1, 0}, {32, 1, 0}, {8, 8, 0}, {256, 8, 0}, {8, 8, 8}, {256, 8, 8}};
    const char *what[] = {"decode, batch 1",           "decode, batch 32",          "verify-8, batch 1",
                          "verify-8, batch 32",        "verify-8, batch 1, hint 8", "verify-8, batch 32, hint 8"};
    for (int i = 0; i < 6; i++) {
      double bytes;
      const double t = time_att(32, 8, 128, lt[i][0], lt[i][1], 0, 8192, (int)lt[i][2], 0, &bytes);
      printf("%-44s %10.4f %10.4f %8.2f\n", what[i], t * 1e3, bytes / bw * 1e3, t / (bytes / bw));
    }
  }
  /* a batch's verify and draft block as the keys and the cache's capacity grow (the launch choices read the
     capacity: the stored-scores kernel's shared memory grows with it, the many-row kernel's does not) */
  if (attention && g_cuda) {
    printf("%-44s %10s %10s %8s\n", "attention, batch 32 (32/8 heads of 128)", "ms", "floor ms", "x floor");
    const int64_t kc[][2] = {{1024, 0}, {1536, 0}, {2048, 0}, {2560, 0}, {3072, 0}, {4096, 0}, {1024, 4096}, {1024, 8192}};
    for (size_t i = 0; i < sizeof kc / sizeof kc[0]; i++)
      for (int b = 0; b < 2; b++) {
        char what[64];
        snprintf(what, sizeof what, "%s, keys %lld, cap %lld", b ? "draft block" : "verify-8, hint 8",
                 (long long)kc[i][0], (long long)(kc[i][1] ? kc[i][1] : kc[i][0] + (b ? 7 : 8) + 16));
        double bytes;
        const double t = time_att(32, 8, 128, b ? 224 : 256, b ? 7 : 8, b, kc[i][0], b ? 7 : 8, kc[i][1], &bytes);
        printf("%-44s %10.4f %10.4f %8.2f\n", what, t * 1e3, bytes / bw * 1e3, t / (bytes / bw));
      }
  }
  /* the shipped pair's shape (8 / 4 heads of 32), where a call's fixed costs and short chains show */
  if (attention)
    printf("%-44s %10s %10s %8s\n", "attention (8/4 heads of 32, context 256)", "ms", "floor ms", "x floor");
  const struct { int64_t t, run; int block; const char *what; } sm[] = {
      {1, 1, 0, "decode, batch 1"},   {16, 1, 0, "decode, batch 16"}, {4, 4, 0, "verify-4, batch 1"},
      {64, 4, 0, "verify-4, batch 16"}, {3, 3, 1, "draft block 3, batch 1"}};
  for (size_t i = 0; attention && i < sizeof sm / sizeof sm[0]; i++) {
    double bytes;
    const double t = time_att(8, 4, 32, sm[i].t, sm[i].run, sm[i].block, 256, sm[i].block ? sm[i].run : 0, 0, &bytes);
    printf("%-44s %10.4f %10.4f %8.2f\n", sm[i].what, t * 1e3, bytes / bw * 1e3, t / (bytes / bw));
  }
  if (!g_perf_only) perf_accept(bw);
}

int main(int argc, char **argv) {
  const char *kind = argc > 1 ? argv[1] : "cpu";
  g_perf = argc > 2 && !strcmp(argv[2], "perf");
  g_perf_only = g_perf && argc > 3 ? argv[3] : NULL;
  if (g_perf_only && strcmp(g_perf_only, "gemm") && strcmp(g_perf_only, "attention")) {
    fprintf(stderr, "test_ops: perf %s: the tables are gemm and attention\n", g_perf_only);
    return 2;
  }
  g_cuda = !strcmp(kind, "cuda");
  if (!g_cuda && strcmp(kind, "cpu")) {
    fprintf(stderr, "usage: test_ops cpu|cuda [perf [gemm|attention]]\n");
    return 2;
  }
  /* DSPARK_TEST_SEED: another start for the inputs' random stream (a parity sweep over inputs; unset: the fixed one) */
  const char *seed = getenv("DSPARK_TEST_SEED");
  if (seed && *seed) {
    char *end;
    const unsigned long long v = strtoull(seed, &end, 10);
    if (*end || !v) {
      fprintf(stderr, "test_ops: DSPARK_TEST_SEED=%s: a positive integer\n", seed);
      return 2;
    }
    g_rng ^= v * 0xD1B54A32D192ED03ull;
    if (!g_rng) g_rng = 1;
  }
  /* the split-K product is opt-in; the tests run it unless the caller chose otherwise (perf measures the default) */
  if (!g_perf) setenv("DSPARK_GEMM_SPLIT", "1", 0);
  dsp_backend_config cpu = {.kind = DSP_BACKEND_CPU};
  if (g_cuda && !dsp_backend_available(DSP_BACKEND_CUDA)) {
    printf("test_ops cuda: no CUDA backend here (%s): skipped\n", dsp_build_info());
    return 77;
  }
  dsp_backend_config cfg = {.kind = g_cuda ? DSP_BACKEND_CUDA : DSP_BACKEND_CPU};
  if (dsp_backend_create(&cfg, &g_be) != DSP_OK ||
      (g_cuda && dsp_backend_create(&cpu, &g_cpu) != DSP_OK)) {
    fprintf(stderr, "test_ops: %s\n", dsp_error_message());
    return 1;
  }
  /* DSPARK_CPU_KERNEL=amx runs the CPU's products on AMX tiles: where the CPU lacks them the run would test
     the chain again, so it is skipped */
  const char *ck = getenv("DSPARK_CPU_KERNEL");
  if (!g_cuda && ck && !strcmp(ck, "amx")) {
    uint16_t one[32 * 32] = {0};
    dsp_tensor wv = dsp_tensor_2d(one, DSP_BF16, 32, 32);
    dsp_weight *wt;
    if (dsp_op_weight_create(g_be, 0, &wv, 0, &wt) != DSP_OK) return 1;
    const int amx = strstr(dsp_op_weight_describe(g_be, wt), "amx") != NULL;
    dsp_op_weight_free(g_be, wt);
    if (!amx) {
      printf("test_ops cpu: DSPARK_CPU_KERNEL=amx, but this CPU has no AMX tiles: skipped\n");
      dsp_backend_free(g_be);
      return 77;
    }
  }
  int rc;
  if (argc > 3 && !g_perf) cmocka_set_test_filter(argv[3]);
  if (g_perf) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(t_perf)};
    rc = cmocka_run_group_tests(tests, NULL, NULL);
  } else {
    const struct CMUnitTest tests[] = {cmocka_unit_test(t_gemm), cmocka_unit_test(t_gemm_rows), cmocka_unit_test(t_gemm_f32), cmocka_unit_test(t_gemm_slices), cmocka_unit_test(t_markov_step),
                                       cmocka_unit_test(t_copy), cmocka_unit_test(t_attention), cmocka_unit_test(t_attention_runs), cmocka_unit_test(t_attention_batch), cmocka_unit_test(t_layers),
                                       cmocka_unit_test(t_kda), cmocka_unit_test(t_accept)};
    rc = cmocka_run_group_tests(tests, NULL, NULL);
  }
  dsp_backend_free(g_cpu);
  dsp_backend_free(g_be);
  return rc;
}
