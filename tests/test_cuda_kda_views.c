/* The CUDA KDA kernels that read views into a merged projection, with head
 * strides the backend's op never passes (it lays heads out contiguously): the
 * beta conversion (sigmoid of a strided bf16 view into contiguous fp32) and the
 * gated output RMSNorm (x, z and y at token and head strides of their own).
 * Issue contract: strided and contiguous views give the same bits. Also: beta
 * is the CPU's bits (kernels/cuda/kda.h: the CPU's expf), the norm within one
 * bf16 ulp of the CPU's (its own x^2 order), the gaps between strided rows
 * never written, and y may be x. Exits 77 without a CUDA device. */
#include <cuda_runtime.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/bf16.h"
#include "kernels/cpu/kda.h"
#include "kernels/cuda/common/device.h"
#include "kernels/cuda/kda.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double uni(void) { /* [0, 1) */
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) / 9007199254740992.0;
}
static dsp_bf16 rbf(double scale) { return dsp_f32_to_bf16((float)((2.0 * uni() - 1.0) * scale)); }

#define CK(x) assert_int_equal((int)(x), 0)

static void *dput(const void *h, size_t bytes) {
  void *d = NULL;
  CK(cudaMalloc(&d, bytes));
  if (h) CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
  return d;
}
static void dget(void *h, const void *d, size_t bytes) {
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

static void t_beta_views(void **st) {
  (void)st;
  enum { T = 77, HV = 5, P = 61 };
  dsp_bf16 m[T * P], c[T * HV];
  float g1[T * HV], g2[T * HV], g3[T * HV], ref[T * HV];
  for (int i = 0; i < T * P; i++) m[i] = rbf(6.0);
  for (int t = 0; t < T; t++)
    for (int h = 0; h < HV; h++) c[t * HV + h] = m[t * P + 40 + h]; /* a column block of a merged row */
  dsp_bf16 mi[T * P]; /* the same values with the heads interleaved at stride 3 */
  memcpy(mi, m, sizeof m);
  for (int t = 0; t < T; t++)
    for (int h = 0; h < HV; h++) mi[t * P + 3 * h] = c[t * HV + h];
  uint16_t *dm = dput(m, sizeof m), *dc = dput(c, sizeof c), *dmi = dput(mi, sizeof mi);
  float *db = dput(NULL, sizeof g1);
  assert_int_equal(dsp_cu_kda_beta(T, HV, dm + 40, P, 1, db, 0), DSP_OK);
  dget(g1, db, sizeof g1);
  assert_int_equal(dsp_cu_kda_beta(T, HV, dc, HV, 1, db, 0), DSP_OK);
  dget(g2, db, sizeof g2);
  assert_int_equal(dsp_cu_kda_beta(T, HV, dmi, P, 3, db, 0), DSP_OK);
  dget(g3, db, sizeof g3);
  assert_int_equal(dsp_kda_beta(T, HV, c, HV, 1, ref), DSP_OK);
  assert_memory_equal(g1, g2, sizeof g1); /* column block == contiguous */
  assert_memory_equal(g3, g2, sizeof g1); /* heads at stride 3 == contiguous */
  assert_memory_equal(g2, ref, sizeof g1); /* the CPU's bits */
  print_message("beta: %d values, strided (column block, head stride 3) == contiguous == CPU, bit for bit\n", T * HV);
  cudaFree(dm), cudaFree(dc), cudaFree(dmi), cudaFree(db);
}

static void t_norm_views(void **st) {
  (void)st;
  enum { T = 29, HV = 3, V = 64, HS = V + 5, TS = HV * HS + 11, P = 3 * HV * V + 9, ZOFF = 2 * HV * V + 4 };
  const float eps = 1e-5f;
  float w[V];
  for (int j = 0; j < V; j++) w[j] = (float)(0.6 + 0.8 * uni());
  static dsp_bf16 xs[T * TS], zm[T * P], xc[T * HV * V], zc[T * HV * V], ys[T * TS], yc[T * HV * V], yr[T * HV * V];
  static dsp_bf16 yi[T * HV * V];
  for (int i = 0; i < T * TS; i++) xs[i] = rbf(0.7);
  for (int i = 0; i < T * P; i++) zm[i] = rbf(3.0);
  for (int t = 0; t < T; t++)
    for (int h = 0; h < HV; h++)
      for (int j = 0; j < V; j++) {
        xc[(t * HV + h) * V + j] = xs[t * TS + h * HS + j];
        zc[(t * HV + h) * V + j] = zm[t * P + ZOFF + h * V + j]; /* the gate: a column block of a merged row */
      }
  memset(ys, 0xAB, sizeof ys);
  uint16_t *dxs = dput(xs, sizeof xs), *dzm = dput(zm, sizeof zm), *dxc = dput(xc, sizeof xc);
  uint16_t *dzc = dput(zc, sizeof zc), *dys = dput(ys, sizeof ys), *dyc = dput(NULL, sizeof yc);
  float *dw = dput(w, sizeof w);
  const dsp_cu_kda_in xsv = {dxs, TS, HS}, zsv = {dzm + ZOFF, P, V}, xcv = {dxc, HV * V, V}, zcv = {dzc, HV * V, V};
  assert_int_equal(dsp_cu_kda_norm(T, HV, V, xsv, zsv, dw, eps, dys, TS, HS, 0), DSP_OK);
  assert_int_equal(dsp_cu_kda_norm(T, HV, V, xcv, zcv, dw, eps, dyc, HV * V, V, 0), DSP_OK);
  dget(ys, dys, sizeof ys);
  dget(yc, dyc, sizeof yc);
  /* in place: y is x */
  assert_int_equal(dsp_cu_kda_norm(T, HV, V, xcv, zcv, dw, eps, dxc, HV * V, V, 0), DSP_OK);
  dget(yi, dxc, sizeof yi);
  assert_int_equal(dsp_kda_gated_rmsnorm(T, HV, V, (dsp_kda_in_bf16){xc, HV * V, V}, (dsp_kda_in_bf16){zc, HV * V, V},
                                         w, eps, (dsp_kda_out_bf16){yr, HV * V, V}),
                   DSP_OK);
  int far = 0, off = 0;
  for (int t = 0; t < T; t++)
    for (int h = 0; h < HV; h++) {
      for (int j = 0; j < V; j++) {
        const int i = (t * HV + h) * V + j;
        assert_int_equal(ys[t * TS + h * HS + j], yc[i]); /* strided == contiguous, bit for bit */
        assert_int_equal(yi[i], yc[i]);                    /* in place == out of place */
        const int d = abs((int)(int16_t)yc[i] - (int)(int16_t)yr[i]);
        off += d != 0, far += d > 1;
      }
      for (int j = V; j < HS; j++) assert_int_equal(ys[t * TS + h * HS + j], 0xABAB); /* the gaps stay */
    }
  print_message("gated norm: %d values, strided (token %d, head %d, z a column block) == contiguous == in place; "
                "against the CPU %d differ by one bf16 ulp, %d by more\n",
                T * HV * V, TS, HS, off, far);
  assert_int_equal(far, 0);
  cudaFree(dxs), cudaFree(dzm), cudaFree(dxc), cudaFree(dzc), cudaFree(dys), cudaFree(dyc), cudaFree(dw);
}

int main(void) {
  if (dsp_cuda_device_count() == 0) {
    printf("test_cuda_kda_views: no CUDA device: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(t_beta_views), cmocka_unit_test(t_norm_views)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
