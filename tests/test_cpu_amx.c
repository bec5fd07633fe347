/* The CPU product on AMX tiles (src/kernels/cpu/amx.h). Expected values come
 * from the contracts, computed here: exact sums in double on grid inputs, the
 * contract's bound on random ones, the fmaf chain written here for outputs the
 * guard hands to it (subnormal, inf, NaN, tiny values), and the invariances
 * (rows alone and in batches, shards at odd cuts, thread counts, strided and
 * K-tail views). Where the CPU or the OS lacks AMX the program exits 77, which
 * ctest reports as skipped. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/tensor.h"
#include "kernels/cpu/amx.h"
#include "test_bits.h"

static uint64_t g_rng = 0x5851F42D4C957F2Dull;
static uint64_t rnd(void) {
  uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/* Contract 1: nearest, ties to even; NaN canonical. */
static uint16_t round_bf16(double d) {
  float f = (float)d;
  if (isnan(f)) return 0x7FC0;
  const uint32_t u = u_of(f), lo = u & 0xFFFFu;
  uint32_t hi = u >> 16;
  if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u))) hi++;
  return (uint16_t)hi;
}
static uint16_t rnd_normal(int emin, int emax) {
  int e = emin + (int)(rnd() % (uint64_t)(emax - emin + 1));
  return (uint16_t)(((rnd() & 1) << 15) | (uint16_t)((e + 127) << 7) | (uint16_t)(rnd() & 0x7F));
}
static float chain(const uint16_t *a, const uint16_t *w, int64_t k) {
  float acc = 0.0f;
  for (int64_t i = 0; i < k; i++) acc = fmaf(widen(a[i]), widen(w[i]), acc);
  return acc;
}

static int skip_without_amx(void) {
  if (dsp_cpu_amx_usable()) return 0;
  print_message("  (this CPU or OS has no AMX tiles: skipped)\n");
  return 1;
}

static dsp_cpu_amx *pack(dsp_tensor w) {
  dsp_cpu_amx *p = NULL;
  assert_int_equal(dsp_cpu_amx_pack(&w, &p), DSP_OK);
  return p;
}
static void product(dsp_tensor a, const dsp_cpu_amx *w, void *c, dsp_dtype dt, int64_t ldc, int threads) {
  dsp_tensor ct = dsp_tensor_2d(c, dt, a.shape[0], w->n);
  ct.stride[0] = ldc;
  if (dsp_cpu_amx_matmul_nt(&a, w, &ct, threads) != DSP_OK) fail_msg("amx product failed");
}

/* Grid values: every partial sum exact, so the result is the double sum, on
 * K both whole blocks and with a tail, M across the 16-row chunks. */
static void test_exact_grid(void **st) {
  (void)st;
  if (skip_without_amx()) skip();
  const int64_t shapes[][3] = {{1, 33, 64}, {13, 77, 300}, {40, 130, 96}};
  for (size_t s = 0; s < 3; s++) {
    const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
    uint16_t *a = malloc((size_t)(M * K) * 2), *w = malloc((size_t)(N * K) * 2), *c = malloc((size_t)(M * N) * 2);
    float *c32 = malloc((size_t)(M * N) * 4);
    for (int64_t i = 0; i < M * K; i++) a[i] = hi16((float)((int)(rnd() % 17) - 8) * 0.25f);
    for (int64_t i = 0; i < N * K; i++) w[i] = hi16((float)((int)(rnd() % 17) - 8) * 0.25f);
    dsp_cpu_amx *p = pack(dsp_tensor_2d(w, DSP_BF16, N, K));
    product(dsp_tensor_2d(a, DSP_BF16, M, K), p, c, DSP_BF16, N, 2);
    product(dsp_tensor_2d(a, DSP_BF16, M, K), p, c32, DSP_F32, N, 2);
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        double e = 0;
        for (int64_t k = 0; k < K; k++) e += (double)widen(a[m * K + k]) * widen(w[n * K + k]);
        if ((double)c32[m * N + n] != e || c[m * N + n] != round_bf16(e))
          fail_msg("M %lld N %lld K %lld: (%lld, %lld) = %a / 0x%04x, exact %a", (long long)M, (long long)N,
                   (long long)K, (long long)m, (long long)n, (double)c32[m * N + n], c[m * N + n], e);
      }
    dsp_cpu_amx_free(p);
    free(a), free(w), free(c), free(c32);
  }
}

/* Random values within the contract's bound; rows alone and in batches,
 * shards at odd cuts, 1-3 threads, a strided A and a strided C: the same bits. */
static void test_invariance(void **st) {
  (void)st;
  if (skip_without_amx()) skip();
  enum { M = 37, N = 203, K = 100, LDA = 131, LDC = 211 };
  static uint16_t a[M * LDA], w[N * K], full[M * N], part[M * LDC], ad[M * K];
  for (int i = 0; i < M * LDA; i++) a[i] = rnd_normal(-6, 3);
  for (int i = 0; i < N * K; i++) w[i] = rnd_normal(-6, 3);
  for (int m = 0; m < M; m++) memcpy(ad + m * K, a + m * LDA, K * 2);
  dsp_tensor wt = dsp_tensor_2d(w, DSP_BF16, N, K);
  dsp_cpu_amx *p = pack(wt);
  product(dsp_tensor_2d(ad, DSP_BF16, M, K), p, full, DSP_BF16, N, 1);
  long checked = 0;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double e = 0, mag = 0;
      for (int k = 0; k < K; k++) {
        const double q = (double)widen(ad[m * K + k]) * widen(w[n * K + k]);
        e += q, mag += fabs(q);
      }
      const double got = widen(full[m * N + n]);
      if (fabs(got - e) > ldexp(fabs(e), -8) + K * ldexp(mag, -24))
        fail_msg("(%d, %d): %a, exact %a: beyond the contract's bound", m, n, got, e);
      checked++;
    }
  /* strided A (the copying path) and C, 2 and 3 threads */
  for (int th = 2; th <= 3; th++) {
    dsp_tensor at = {.data = a, .dtype = DSP_BF16, .ndim = 2, .shape = {M, K}, .stride = {LDA, 1}};
    memset(part, 0xAB, sizeof part);
    product(at, p, part, DSP_BF16, LDC, th);
    for (int m = 0; m < M; m++) {
      assert_memory_equal(part + m * LDC, full + m * N, N * 2);
      for (int j = N; j < LDC; j++) assert_int_equal(part[m * LDC + j], 0xABAB);
    }
  }
  /* every row alone, and a block of 5 rows from row 17 */
  for (int m = 0; m < M; m++) {
    product(dsp_tensor_2d(ad + m * K, DSP_BF16, 1, K), p, part, DSP_BF16, N, 2);
    assert_memory_equal(part, full + m * N, N * 2);
  }
  product(dsp_tensor_2d(ad + 17 * K, DSP_BF16, 5, K), p, part, DSP_BF16, N, 2);
  assert_memory_equal(part, full + 17 * N, 5 * N * 2);
  /* shards: weight rows cut at 1, 17, 50, 111, 202 */
  const int cut[] = {0, 1, 17, 50, 111, 202, N};
  for (int i = 0; i + 1 < (int)(sizeof cut / sizeof cut[0]); i++) {
    dsp_tensor ws = dsp_tensor_rows(&wt, cut[i], cut[i + 1]);
    dsp_cpu_amx *ps = pack(ws);
    product(dsp_tensor_2d(ad, DSP_BF16, M, K), ps, part, DSP_BF16, cut[i + 1] - cut[i], 2);
    for (int m = 0; m < M; m++)
      assert_memory_equal(part + m * (cut[i + 1] - cut[i]), full + m * N + cut[i], (size_t)(cut[i + 1] - cut[i]) * 2);
    dsp_cpu_amx_free(ps);
  }
  dsp_cpu_amx_free(p);
  print_message("  amx: %ld values within the bound, invariant over rows, shards, threads and strides\n", checked);
}

/* The guard: rows holding a subnormal, an inf or a NaN, and pairs of rows
 * whose products could be subnormal get the chain's bits; the rest keep
 * AMX's. A rows: 0 a subnormal, 1 +inf, 2 NaN, 3 all 2^-70, 4 all 2^-40;
 * weight rows: 3 a subnormal, 4 all 2^-60. A row 3 times weight row 4 has
 * products of 2^-130 (subnormal in fp32: tdpbf16ps would flush them);
 * 2^-40 times 2^-60 (2^-100) and 2^-70 times the ordinary rows stay normal,
 * so AMX keeps those. */
static void test_guard(void **st) {
  (void)st;
  if (skip_without_amx()) skip();
  enum { M = 6, N = 40, K = 70 };
  static uint16_t a[M * K], w[N * K], c[M * N];
  for (int i = 0; i < M * K; i++) a[i] = rnd_normal(-4, 2);
  for (int i = 0; i < N * K; i++) w[i] = rnd_normal(-4, 2);
  a[0 * K + 5] = 0x0003;                      /* subnormal */
  a[1 * K + 9] = 0x7F80;                      /* +inf */
  a[2 * K + 60] = 0x7FC1;                     /* NaN */
  for (int k = 0; k < K; k++) a[3 * K + k] = rnd_normal(-70, -70);
  for (int k = 0; k < K; k++) a[4 * K + k] = rnd_normal(-40, -40);
  w[3 * K + 11] = 0x8001;                     /* subnormal */
  for (int k = 0; k < K; k++) w[4 * K + k] = rnd_normal(-60, -60);
  dsp_cpu_amx *p = pack(dsp_tensor_2d(w, DSP_BF16, N, K));
  product(dsp_tensor_2d(a, DSP_BF16, M, K), p, c, DSP_BF16, N, 2);
  long chained = 0;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      const int guarded = m <= 2 || n == 3 || (m == 3 && n == 4);
      const uint16_t want = round_bf16(chain(a + m * K, w + n * K, K)), got = c[m * N + n];
      if (guarded) {
        if (!(got == want || (isnan(widen(got)) && isnan(widen(want)) && got == 0x7FC0)))
          fail_msg("guarded (%d, %d): 0x%04x, the chain gives 0x%04x", m, n, got, want);
        chained++;
      } else if (isnan(widen(got))) {
        fail_msg("(%d, %d): NaN from ordinary inputs", m, n);
      }
    }
  assert_true(widen(c[3 * N + 4]) != 0.0f); /* the chain keeps the subnormal products' sum */
  dsp_cpu_amx_free(p);
  print_message("  amx guard: %ld outputs equal to the chain\n", chained);
}

static void test_errors(void **st) {
  (void)st;
  if (skip_without_amx()) skip();
  static uint16_t w[4 * 8], a[2 * 8], c[2 * 4];
  dsp_cpu_amx *p = pack(dsp_tensor_2d(w, DSP_BF16, 4, 8));
  dsp_tensor at = dsp_tensor_2d(a, DSP_BF16, 2, 7), ct = dsp_tensor_2d(c, DSP_BF16, 2, 4);
  assert_int_equal(dsp_cpu_amx_matmul_nt(&at, p, &ct, 1), DSP_ERR_SHAPE);
  at = dsp_tensor_2d(a, DSP_F32, 2, 8);
  assert_int_equal(dsp_cpu_amx_matmul_nt(&at, p, &ct, 1), DSP_ERR_DTYPE);
  dsp_tensor empty = dsp_tensor_2d(w, DSP_BF16, 0, 8);
  dsp_cpu_amx *q = NULL;
  assert_int_equal(dsp_cpu_amx_pack(&empty, &q), DSP_ERR_SHAPE);
  assert_null(q);
  dsp_cpu_amx_free(p);
}

/* Which weights take AMX: auto (the default) and amx where it can run, never
 * chain or a named ISA. ctest runs this program with DSPARK_CPU_KERNEL unset and
 * set to chain. */
static void test_choice(void **state) {
  (void)state;
  const char *k = getenv("DSPARK_CPU_KERNEL");
  const int want = (!k || !*k || !strcmp(k, "auto") || !strcmp(k, "amx")) && dsp_cpu_amx_usable();
  print_message("  DSPARK_CPU_KERNEL=%s: AMX %s\n", k ? k : "(unset)", want ? "chosen" : "not chosen");
  assert_int_equal(dsp_cpu_amx_chosen(), want);
}

int main(void) {
  if (!dsp_cpu_amx_usable()) { /* ctest reports 77 as skipped */
    printf("test_cpu_amx: this CPU or OS has no AMX tiles: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exact_grid),
      cmocka_unit_test(test_invariance),
      cmocka_unit_test(test_guard),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_choice),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
