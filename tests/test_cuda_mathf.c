/* The device's expf and log1pf against the CPU's, bit for bit (a NaN input:
 * NaN on both, payloads aside): dsp_dev_expf against dsp_cpu_expf (kernels/cpu/expf.h) and the shared
 * dsp_log1pf (core/log1pf.h) on the device against the host. The KDA recurrent
 * form's CUDA-equals-CPU contract rests on these. Inputs: every bf16 value,
 * 2^20 random floats, the range edges. Exits 77 without a CUDA device. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/log1pf.h"
#include "kernels/cpu/expf.h"
#include "kernels/cuda/common/device.h"
#include "kernels/cuda/mathf_eval.h"
#include "test_bits.h"

static uint64_t g_rng = 0x5DEECE66Dull;
static uint32_t rnd32(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 16);
}

static void t_device_mathf(void **st) {
  (void)st;
  const size_t cap = 65536 + 64 + ((size_t)1 << 20);
  float *x = malloc(cap * 4), *e = malloc(cap * 4), *l = malloc(cap * 4);
  assert_non_null(x), assert_non_null(e), assert_non_null(l);
  size_t n = 0;
  for (uint32_t h = 0; h < 65536; h++) x[n++] = f_of(h << 16);
  const float edge[] = {DSP_CPU_EXP_HI, nextafterf(DSP_CPU_EXP_HI, INFINITY), DSP_CPU_EXP_LO,
                        nextafterf(DSP_CPU_EXP_LO, -INFINITY), 0x1p-149f, -0x1p-149f, 0x1p-10f, -0x1p-10f,
                        nextafterf(0x1p-10f, 0.0f), -1.0f, nextafterf(-1.0f, 0.0f), 20.0f, 0x1p30f, 0x1p31f,
                        0.0f, -0.0f, INFINITY, -INFINITY, f_of(0x7FC00001u), f_of(0xFFA00000u)};
  for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) x[n++] = edge[i];
  while (n < cap) x[n++] = f_of(rnd32());
  assert_int_equal(dsp_cuda_mathf_eval(x, (int64_t)n, e, l), DSP_OK);
  long de = 0, dl = 0;
  for (size_t i = 0; i < n; i++) {
    /* a NaN in gives a NaN out on both, its payload CUDA's canonical one on the device */
    const float he = dsp_cpu_expf(x[i]), hl = dsp_log1pf(x[i]);
    const int be = isnan(x[i]) ? !(isnan(e[i]) && isnan(he)) : u_of(e[i]) != u_of(he);
    const int bl = isnan(x[i]) ? !(isnan(l[i]) && isnan(hl)) : u_of(l[i]) != u_of(hl);
    if ((be || bl) && de + dl < 5)
      print_message("  x %a: device expf %a / host %a, device log1pf %a / host %a\n", (double)x[i], (double)e[i],
                    (double)dsp_cpu_expf(x[i]), (double)l[i], (double)dsp_log1pf(x[i]));
    de += be, dl += bl;
  }
  print_message("mathf: %zu inputs, expf %ld and log1pf %ld differ between the device and the host\n", n, de, dl);
  free(x), free(e), free(l);
  if (de || dl) fail_msg("the device's expf or log1pf is not the host's");
}

/* The hardware's bf16 rounding (the many-row attention kernel's scores and p) against the integer rounding of
   the contract, over all 2^32 inputs but NaNs. */
static void t_device_bf16_cvt(void **st) {
  (void)st;
  unsigned long long bad = ~0ull;
  assert_int_equal(dsp_cuda_bf16_cvt_check(&bad), DSP_OK);
  print_message("bf16 rounding: %llu of 2^32 non-NaN inputs differ between cvt.rn and the integer form\n", bad);
  assert_true(bad == 0);
}

/* The attention's division by z (dsp_dev_div_fast, one reciprocal a row) against __fdiv_rn: every a of its fast
   range (zero and both signs of each normal |a| in [2^-90, 2^10]) over 256 divisors: the range's ends, 1 and its
   neighbours, all-ones significands, powers of two, and the rest drawn from [2^-10, 2^31]. Bit for bit. */
static void t_device_div(void **st) {
  (void)st;
  enum { NB = 256 };
  float b[NB];
  const uint32_t fixed[] = {0x3f800000u, 0x3f800001u, 0x3fffffffu, 0x3f7fffffu, 0x40000000u, 0x3fc00000u,
                            0x40400000u, 0x41200000u, 0x42c80000u, 0x3a800000u, 0x4f000000u, 0x4effffffu,
                            0x3a800001u, 0x407fffffu, 0x4b7fffffu, 0x3effffffu};
  int n = 0;
  for (; n < (int)(sizeof fixed / sizeof fixed[0]); n++) memcpy(&b[n], &fixed[n], 4);
  for (int e = -10; e <= 30 && n < 64; e++) b[n++] = ldexpf(1.0f, e);
  uint64_t s = 0x9E3779B97F4A7C15ull;
  while (n < NB) { /* exponents uniform over the range, significands uniform */
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const uint32_t r = (uint32_t)(s >> 32);
    const int e = -10 + (int)(r % 41u);
    const uint32_t u = ((uint32_t)(e + 127) << 23) | ((uint32_t)(s >> 9) & 0x7FFFFFu);
    memcpy(&b[n++], &u, 4);
  }
  unsigned long long fast = 0, bad = ~0ull;
  assert_int_equal(dsp_cuda_div_check(b, NB, &fast, &bad), DSP_OK);
  const float lo = 0x1p-90f, hi = 0x1p10f;
  uint32_t ul, uh;
  memcpy(&ul, &lo, 4), memcpy(&uh, &hi, 4);
  const unsigned long long want = ((unsigned long long)(uh - ul + 1) * 2 + 1) * NB;
  print_message("division: %llu quotients on the fast path (%llu expected), %llu differ from __fdiv_rn\n", fast, want,
                bad);
  assert_true(fast == want);
  assert_true(bad == 0);
}

int main(void) {
  if (dsp_cuda_device_count() == 0) {
    printf("test_cuda_mathf: no CUDA device: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(t_device_mathf), cmocka_unit_test(t_device_bf16_cvt),
                                     cmocka_unit_test(t_device_div)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
