/* The CPU kernels' expf (src/kernels/cpu/expf.h): against C's expf (libm) on
 * every bf16 value (silu reads bf16 gates), 2^22 random floats and the
 * special values, and the AVX-512 form against the scalar one, bit for bit
 * (NaN payloads too); both within one ulp of exp in double everywhere
 * sampled. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/log1pf.h"
#include "kernels/cpu/expf.h"
#include "kernels/cpu/expf_avx512.h"
#include "kernels/cpu/kernel.h"
#include "test_bits.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd32(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 16);
}

DSP_AVX512 static void vec16(const float *x, float *y) { _mm512_storeu_ps(y, dsp_avx512_expf(_mm512_loadu_ps(x))); }

/* Inputs: every bf16 value, random floats, and the edges of the range. */
static size_t inputs(float *x, size_t cap) {
  size_t n = 0;
  for (uint32_t h = 0; h < 65536; h++) x[n++] = f_of(h << 16);
  const float edge[] = {DSP_CPU_EXP_HI, nextafterf(DSP_CPU_EXP_HI, INFINITY), DSP_CPU_EXP_LO,
                        nextafterf(DSP_CPU_EXP_LO, -INFINITY), -87.5f, -100.0f, 88.5f, 0x1p-149f, -0x1p-149f,
                        0.0f, -0.0f, INFINITY, -INFINITY, f_of(0x7FC00001u), f_of(0xFFA00000u)};
  for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) x[n++] = edge[i];
  while (n < cap) x[n++] = f_of(rnd32());
  return n;
}

enum { CAP = 65536 + 16 + (1 << 22) };
static float g_x[CAP], g_s[CAP];

static void test_scalar_vs_libm(void **st) {
  (void)st;
  const size_t n = inputs(g_x, CAP);
  long differ = 0, far = 0;
  for (size_t i = 0; i < n; i++) {
    const float s = dsp_cpu_expf(g_x[i]), l = expf(g_x[i]);
    g_s[i] = s;
    if (!(isnan(s) && isnan(l)) && u_of(s) != u_of(l)) differ++;
    const double e = exp((double)g_x[i]);
    if (e >= 0x1p-126 && e <= 0x1.fffffep127 && fabs((double)s - e) > ldexp(1.0, ilogb(e) - 23)) far++;
  }
  print_message("  expf: %zu inputs, %ld differ from libm's, %ld more than one ulp from exp\n", n, differ, far);
  assert_int_equal(far, 0);
  /* the scalar kernels took libm's expf before; on glibc's FMA expf they are the same bits */
  assert_int_equal(differ, 0);
}

static void test_avx512_vs_scalar(void **st) {
  (void)st;
  if (!dsp_cpu_isa_supported(DSP_CPU_ISA_AVX512)) {
    print_message("  (no AVX-512 here: skipped)\n");
    skip();
  }
  const size_t n = inputs(g_x, CAP) / 16 * 16;
  long differ = 0;
  float y[16];
  for (size_t i = 0; i < n; i += 16) {
    vec16(g_x + i, y);
    for (int j = 0; j < 16; j++) differ += u_of(y[j]) != u_of(dsp_cpu_expf(g_x[i + j]));
  }
  assert_int_equal(differ, 0);
}

/* dsp_log1pf (core/log1pf.h, the KDA gate's softplus): within one ulp of log1p in double everywhere sampled
 * and correctly rounded on all but a handful (it was on every one of 3e7 inputs when written); special values
 * as C's. */
static void test_log1pf(void **state) {
  (void)state;
  static float x[(1 << 21) + 65536 + 64];
  const size_t n = inputs(x, sizeof x / sizeof x[0]);
  long exact = 0, near = 0, far = 0, total = 0;
  for (size_t i = 0; i < n; i++) {
    const float y = dsp_log1pf(x[i]);
    if (isnan(x[i]) || x[i] < -1.0f) {
      assert_true(isnan(y));
      continue;
    }
    if (x[i] == -1.0f || isinf(x[i])) {
      assert_true(isinf(y) && (y > 0) == (x[i] > 0));
      continue;
    }
    const float r = (float)log1p((double)x[i]);
    total++;
    if (u_of(y) == u_of(r)) exact++;
    else if (nextafterf(r, INFINITY) == y || nextafterf(r, -INFINITY) == y) near++;
    else if (far++ < 3) print_message("  log1pf(%a) = %a, log1p in double %a\n", (double)x[i], (double)y, log1p((double)x[i]));
  }
  print_message("log1pf: %ld inputs, %ld correctly rounded, %ld one ulp off, %ld farther\n", total, exact, near, far);
  assert_int_equal(far, 0);
  assert_true(near * 100000 <= total);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_scalar_vs_libm), cmocka_unit_test(test_avx512_vs_scalar),
                                     cmocka_unit_test(test_log1pf)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
