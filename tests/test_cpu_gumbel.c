/* Contract 5's noise and selection on AVX-512 and AVX2
 * (src/kernels/cpu/gumbel_avx512.h, gumbel_avx2.h) against the scalar forms: dsp_gumbel (core/philox.h) over random seeds,
 * positions and ids (and ids whose 16 lanes would cross 2^32), the noise of
 * Philox's first word r over 2^22 random r and the r where the vector logs
 * alone round the other way (found by an exhaustive search over all 2^32:
 * 22 of them without the boundary check, 0 with it), and the selection key
 * against one written here from select.h's order (T 0 and T > 0, bf16 and
 * fp32 rows, NaN, ties, -inf; and wide rows where the selection skips the
 * noise of ids that cannot win), on every form this CPU runs. With neither it
 * exits 77 (ctest: skipped). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/philox.h"
#include "core/select.h"
#include "kernels/cpu/gumbel_avx2.h"
#include "kernels/cpu/gumbel_avx512.h"
#include "kernels/cpu/gumbel_bound.h"
#include "kernels/cpu/kernel.h"
#include "test_bits.h"

static uint64_t g_rng = 0x9FB21C651E98DF25ull;
static uint64_t rnd(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return g_rng;
}
static float gumbel_r(uint32_t r) { return (float)(-log(-log(((double)r + 0.5) * (1.0 / 4294967296.0)))); }

/* One vector form: its lane count and entry points. */
typedef struct {
  const char *name;
  dsp_cpu_isa isa;
  int w;
  int (*from_r)(const uint32_t *r, float *g);
  int (*noise)(uint64_t seed, int64_t position, int64_t id0, int n, float *g);
  uint64_t (*select)(const void *row, int f32, int64_t n, float T, uint64_t seed, int64_t position, int64_t id0);
} form;
static const form FORMS[] = {
    {"AVX-512", DSP_CPU_ISA_AVX512, 16, dsp_cpu_gumbel_from_r16_avx512, dsp_cpu_gumbel16_avx512, dsp_cpu_select_avx512},
    {"AVX2", DSP_CPU_ISA_AVX2, 8, dsp_cpu_gumbel_from_r8_avx2, dsp_cpu_gumbel8_avx2, dsp_cpu_select_avx2}};

static void noise_of_r(const form *f) {
  static const uint32_t edge[] = {0u, 1u, 2u, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFEu, 0xFFFFFFFFu,
                                  1577369013u, 1580021308u, 1580022522u, 1580025460u, 1580028313u,
                                  1580021307u, 1580021309u, 1580028312u, 1580028314u, 1579000000u};
  uint32_t r[16];
  float g[16];
  long differ = 0, redone = 0, n = 0;
  for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i += (size_t)f->w) {
    for (int j = 0; j < f->w; j++) r[j] = edge[(i + (size_t)j) % (sizeof edge / sizeof edge[0])];
    redone += f->from_r(r, g);
    for (int j = 0; j < f->w; j++) differ += u_of(g[j]) != u_of(gumbel_r(r[j])), n++;
  }
  for (long b = 0; b < (1 << 22); b += f->w) {
    for (int j = 0; j < f->w; j++) r[j] = (uint32_t)rnd();
    redone += f->from_r(r, g);
    for (int j = 0; j < f->w; j++) differ += u_of(g[j]) != u_of(gumbel_r(r[j])), n++;
  }
  print_message("  %s noise of r: %ld values, %ld differ, %ld recomputed by the scalar form\n", f->name, n, differ,
                redone);
  assert_int_equal(differ, 0);
}

static void noise_of_ids(const form *f) {
  long differ = 0;
  for (int t = 0; t < 20000; t++) {
    const uint64_t seed = rnd();
    const int64_t pos = t % 7 ? (int64_t)(rnd() % 100000) : (int64_t)(rnd() >> 1);
    int64_t id0 = (int64_t)(rnd() % 200000);
    if (t % 11 == 0) id0 = 0xFFFFFFFFll - (int64_t)(rnd() % 16); /* lanes across 2^32: the scalar form */
    if (t % 13 == 0) id0 = (int64_t)(rnd() >> 2);
    const int n = 1 + (int)(rnd() % (uint64_t)f->w);
    float g[16];
    f->noise(seed, pos, id0, n, g);
    for (int i = 0; i < n; i++) differ += u_of(g[i]) != u_of(dsp_gumbel(seed, pos, id0 + i));
  }
  assert_int_equal(differ, 0);
}

/* select.h's order, written from contract 4: NaN above everything (the lowest
 * id among NaNs), then the larger value, then the lower id; -0 == +0. */
static int better(float a, int64_t ai, float b, int64_t bi) {
  if (isnan(a) || isnan(b)) return isnan(a) && (!isnan(b) || ai < bi);
  if (a != b) return a > b;
  return ai < bi;
}

static void select_keys(const form *fm) {
  enum { V = 1000 };
  static uint16_t b16[V];
  static float f32[V];
  for (int c = 0; c < 60; c++) {
    const int64_t n = c < 3 ? c + 1 : 1 + (int64_t)(rnd() % V), id0 = (int64_t)(rnd() % 100000);
    const float T = c % 3 == 0 ? 0.0f : c % 3 == 1 ? 0.8f : 1.7f;
    const uint64_t seed = rnd();
    const int64_t pos = (int64_t)(rnd() % 4096);
    for (int64_t v = 0; v < n; v++) { /* few distinct values: many ties */
      f32[v] = (float)((int)(rnd() % 9) - 4) * 0.5f;
      if (c % 5 == 1 && v == n / 2) f32[v] = NAN;
      if (c % 5 == 2) f32[v] = -INFINITY;
      if (c % 7 == 3 && v % 3 == 0) f32[v] = -0.0f;
      b16[v] = hi16(f32[v]);
    }
    for (int f = 0; f < 2; f++) {
      float bv = 0;
      int64_t bi = -1;
      for (int64_t v = 0; v < n; v++) {
        float x = f ? f32[v] : widen(b16[v]);
        if (T > 0.0f) {
          volatile float q = x / T;
          x = q + dsp_gumbel(seed, pos, id0 + v);
        }
        if (bi < 0 || better(x, id0 + v, bv, bi)) bv = x, bi = id0 + v;
      }
      const uint64_t key = fm->select(f ? (const void *)f32 : (const void *)b16, f, n, T, seed, pos, id0);
      if (dsp_select_key_id(key) != bi)
        fail_msg("%s case %d (%s, n %lld, T %g): id %lld, the order gives %lld", fm->name, c, f ? "fp32" : "bf16", (long long)n,
                 (double)T, (long long)dsp_select_key_id(key), (long long)bi);
    }
  }
}

/* The noise's bounds (philox.h): it rises with the word, so its ends bound it;
 * and the bound by word (gumbel_bound.h). */
static void noise_bounds(void **st) {
  (void)st;
  const float lo = dsp_gumbel_of_word(0u), hi = dsp_gumbel_of_word(0xFFFFFFFFu);
  assert_true(lo >= DSP_GUMBEL_LO && lo < -3.12f && lo > -3.14f);
  assert_true(hi <= DSP_GUMBEL_HI && hi > 22.86f && hi < 22.89f);
  long down = 0;
  for (int i = 0; i < 50000; i++) {
    uint32_t a = (uint32_t)rnd(), b = (uint32_t)rnd();
    if (a > b) { const uint32_t t = a; a = b; b = t; }
    down += dsp_gumbel_of_word(a) > dsp_gumbel_of_word(b);
  }
  assert_int_equal(down, 0);
  /* the bound by word: above the noise of that word and of any word below it, within 1/4 above it */
  long bad = 0;
  for (int i = 0; i < 50000; i++) {
    const uint32_t w = i < 4 ? (uint32_t[]){0u, 1u, 0xFFFFFFFEu, 0xFFFFFFFFu}[i] : (uint32_t)rnd();
    const uint32_t below = (uint32_t)(rnd() % ((uint64_t)w + 1));
    const float b = dsp_gumbel_bound(w), g = dsp_gumbel_of_word(w);
    bad += !(b >= g && b >= dsp_gumbel_of_word(below) && b <= g + 0.25f + 1e-5f && b <= DSP_GUMBEL_HI);
  }
  assert_int_equal(bad, 0);
}

/* Rows wide enough that the selections skip the noise of ids that cannot win
 * (x / T more than HI - LO below the top): the same id as the order over every
 * id, with ids just either side of that margin, NaN, inf, -inf and ties at the
 * top. A bound too tight for the noise fails this (checked by hand with HI 3). */
static void select_wide(const form *fm) {
  enum { V = 3000 };
  static uint16_t b16[V];
  static float f32[V];
  long skipped_rows = 0;
  for (int c = 0; c < 80; c++) {
    const int64_t n = 1 + (int64_t)(rnd() % V), id0 = (int64_t)(rnd() % 100000);
    const float T = c % 4 == 0 ? 0.3f : c % 4 == 1 ? 0.8f : c % 4 == 2 ? 1.0f : 2.5f;
    const uint64_t seed = rnd();
    const int64_t pos = (int64_t)(rnd() % 4096);
    const float top = (float)((int)(rnd() % 41) - 20);
    const float margin = (DSP_GUMBEL_HI - DSP_GUMBEL_LO) * T;
    for (int64_t v = 0; v < n; v++) {
      const int kind = (int)(rnd() % 8);
      float x = top - (float)(rnd() % 4096) / 4096.0f * 3.0f * margin; /* most below the margin */
      if (kind == 0) x = top - margin + ((float)(rnd() % 256) - 128.0f) / 512.0f; /* at its edge */
      if (kind == 1) x = top - (float)(rnd() % 64) / 64.0f * margin;               /* inside it */
      f32[v] = x;
    }
    f32[rnd() % (uint64_t)n] = top;
    if (c % 9 == 4) f32[rnd() % (uint64_t)n] = top; /* a tie at the top */
    if (c % 10 == 5) f32[rnd() % (uint64_t)n] = NAN;
    if (c % 10 == 6) f32[rnd() % (uint64_t)n] = INFINITY;
    if (c % 10 == 7)
      for (int64_t v = 0; v < n; v++) f32[v] = v % 2 ? -INFINITY : f32[v];
    for (int64_t v = 0; v < n; v++) b16[v] = hi16(f32[v]);
    for (int f = 0; f < 2; f++) {
      float bv = 0, qtop = -INFINITY;
      int64_t bi = -1;
      for (int64_t v = 0; v < n; v++) {
        volatile float q = (f ? f32[v] : widen(b16[v])) / T;
        if (q > qtop) qtop = q;
        const float x = q + dsp_gumbel(seed, pos, id0 + v);
        if (bi < 0 || better(x, id0 + v, bv, bi)) bv = x, bi = id0 + v;
      }
      int64_t below = 0; /* ids the selection may skip */
      for (int64_t v = 0; v < n; v++) {
        const float q = (f ? f32[v] : widen(b16[v])) / T;
        below += q + DSP_GUMBEL_HI < qtop + DSP_GUMBEL_LO;
      }
      skipped_rows += below > n / 2;
      const uint64_t key = fm->select(f ? (const void *)f32 : (const void *)b16, f, n, T, seed, pos, id0);
      if (dsp_select_key_id(key) != bi)
        fail_msg("%s wide case %d (%s, n %lld, T %g): id %lld, the order gives %lld", fm->name, c, f ? "fp32" : "bf16",
                 (long long)n, (double)T, (long long)dsp_select_key_id(key), (long long)bi);
    }
  }
  print_message("  %s wide rows: %ld of 160 with most ids below the margin\n", fm->name, skipped_rows);
  assert_true(skipped_rows > 70);
}

/* Each test on every form this CPU runs. */
#define EACH_FORM(test, fn)                                                           \
  static void test(void **st) {                                                       \
    (void)st;                                                                         \
    for (size_t i = 0; i < sizeof FORMS / sizeof FORMS[0]; i++)                       \
      if (dsp_cpu_isa_supported(FORMS[i].isa)) fn(&FORMS[i]);                         \
      else print_message("  (no %s here: that form not run)\n", FORMS[i].name);        \
  }
EACH_FORM(test_noise_of_r, noise_of_r)
EACH_FORM(test_noise_of_ids, noise_of_ids)
EACH_FORM(test_select, select_keys)
EACH_FORM(test_select_wide, select_wide)

int main(void) {
  if (!dsp_cpu_isa_supported(DSP_CPU_ISA_AVX2)) { /* ctest reports 77 as skipped */
    printf("test_cpu_gumbel: neither AVX-512 nor AVX2 here: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_noise_of_r), cmocka_unit_test(test_noise_of_ids),
                                     cmocka_unit_test(test_select), cmocka_unit_test(noise_bounds),
                                     cmocka_unit_test(test_select_wide)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
