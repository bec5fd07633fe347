/* The CPU kernels' expf (src/kernels/cpu/expf.h): against C's expf (libm) on
 * every bf16 value (silu reads bf16 gates), 2^22 random floats and the
 * special values, and the AVX2 and AVX-512 forms against the scalar one, bit
 * for bit (NaN payloads too); all within one ulp of exp in double everywhere
 * sampled. The row softmax of speculative sampling (softmax_row.h): its paths
 * bit for bit, and e and z against exp and sums in double. */
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
#include "kernels/cpu/expf_avx2.h"
#include "kernels/cpu/expf_avx512.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/softmax_row.h"
#include "test_bits.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd32(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 16);
}

DSP_AVX2 static void vec8(const float *x, float *y) { _mm256_storeu_ps(y, dsp_avx2_expf(_mm256_loadu_ps(x))); }
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

/* A vector form of W lanes (vec) against the scalar expf on every input, bit for bit. */
static void vec_vs_scalar(dsp_cpu_isa isa, const char *name, int w, void (*vec)(const float *, float *)) {
  if (!dsp_cpu_isa_supported(isa)) {
    print_message("  (no %s here: skipped)\n", name);
    skip();
  }
  const size_t n = inputs(g_x, CAP) / (size_t)w * (size_t)w;
  long differ = 0;
  float y[16];
  for (size_t i = 0; i < n; i += (size_t)w) {
    vec(g_x + i, y);
    for (int j = 0; j < w; j++) differ += u_of(y[j]) != u_of(dsp_cpu_expf(g_x[i + j]));
  }
  assert_int_equal(differ, 0);
}
static void test_avx512_vs_scalar(void **st) { (void)st, vec_vs_scalar(DSP_CPU_ISA_AVX512, "AVX-512", 16, vec16); }
static void test_avx2_vs_scalar(void **st) { (void)st, vec_vs_scalar(DSP_CPU_ISA_AVX2, "AVX2", 8, vec8); }

/* Rows of V = 1 .. 17 (every tail of the 8- and 16-wide forms), 2048 and Qwen3's 151936 + 5, logits spread over
 * [-40, 40), three temperatures: every CPU path gives the scalar path's e and z; e within one ulp of
 * exp(fp32(x - m)) in double, z within 1e-12 relative of their double sum in order. */
static void test_softmax_row(void **st) {
  (void)st;
  static const char *paths[] = {"scalar", "avx2", "avx512"};
  static const dsp_cpu_isa isas[] = {DSP_CPU_ISA_SCALAR, DSP_CPU_ISA_AVX2, DSP_CPU_ISA_AVX512};
  const int64_t Vs[] = {1, 2, 7, 8, 9, 15, 16, 17, 2048, 151941};
  const float Ts[] = {0.05f, 0.8f, 1.0f};
  static uint16_t l[151941];
  static float e0[151941], e1[151941];
  long differ = 0, far = 0, runs = 0;
  for (size_t vi = 0; vi < sizeof Vs / sizeof Vs[0]; vi++)
    for (size_t ti = 0; ti < 3; ti++) {
      const int64_t V = Vs[vi];
      for (int64_t v = 0; v < V; v++) l[v] = (uint16_t)(u_of((float)(rnd32() % 80000) / 1000.0f - 40.0f) >> 16);
      assert_int_equal(dsp_cpu_kernel_force("scalar"), DSP_OK);
      const double z0 = dsp_cpu_softmax_row(l, V, Ts[ti], e0);
      float m = -INFINITY;
      for (int64_t v = 0; v < V; v++) m = f_of((uint32_t)l[v] << 16) / Ts[ti] > m ? f_of((uint32_t)l[v] << 16) / Ts[ti] : m;
      double zr = 0.0;
      for (int64_t v = 0; v < V; v++) {
        const float x = f_of((uint32_t)l[v] << 16) / Ts[ti];
        const float dx = x - m; /* rounded to fp32 as the contract's x_v - m */
        const double r = exp((double)dx);
        zr += (double)e0[v];
        far += fabs((double)e0[v] - r) > ldexp(r, -23) + 0x1p-149;
      }
      far += fabs(z0 - zr) > 1e-12 * zr;
      double part[8] = {0, 0, 0, 0, 0, 0, 0, 0}, zc = 0.0; /* the header's order, from the scalar path's e */
      for (int64_t v = 0; v < V; v++) part[v % 8] += (double)e0[v];
      for (int j = 0; j < 8; j++) zc += part[j];
      differ += memcmp(&z0, &zc, sizeof z0) != 0;
      for (int p = 1; p < 3; p++) {
        if (!dsp_cpu_isa_supported(isas[p])) continue;
        assert_int_equal(dsp_cpu_kernel_force(paths[p]), DSP_OK);
        const double z1 = dsp_cpu_softmax_row(l, V, Ts[ti], e1);
        differ += memcmp(&z0, &z1, sizeof z0) != 0;
        for (int64_t v = 0; v < V; v++) differ += u_of(e0[v]) != u_of(e1[v]);
        runs++;
      }
    }
  assert_int_equal(dsp_cpu_kernel_force(NULL), DSP_OK);
  print_message("softmax rows: %ld vector-path runs against the scalar one, %ld values differ, %ld beyond the double "
                "reference\n", runs, differ, far);
  assert_int_equal(differ, 0);
  assert_int_equal(far, 0);
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
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_scalar_vs_libm), cmocka_unit_test(test_avx2_vs_scalar),
                                     cmocka_unit_test(test_avx512_vs_scalar), cmocka_unit_test(test_softmax_row),
                                     cmocka_unit_test(test_log1pf)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
