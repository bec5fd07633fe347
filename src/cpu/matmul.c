/* The product driver: checks the views, widens A once per call, then splits the
 * weight panels over OpenMP threads. Panels are the outer loop (a panel is read
 * from memory once for all M rows), A tiles the inner one. The order of each
 * output's sum is fixed by the tile kernels (cpu/kernel.h), not by this split. */
#include <omp.h>

#include "core/status.h"
#include "core/tensor.h"
#include "cpu/kernel.h"
#include "cpu/matmul.h"

static dsp_status check_2d(const dsp_tensor *t, const char *what) {
  char sh[64];
  if (t->ndim != 2 || t->shape[0] < 0 || t->shape[1] < 0)
    return dsp_fail(DSP_ERR_SHAPE, "cpu matmul: %s is %s, expected 2-D", what, dsp_shape_str(t, sh, sizeof sh));
  if (t->shape[0] * t->shape[1] > 0 && !t->data) return dsp_fail(DSP_ERR_ARG, "cpu matmul: %s has no data", what);
  return DSP_OK;
}

dsp_status dsp_cpu_matmul_nt(const dsp_tensor *a, const dsp_cpu_packed *w, dsp_tensor *c, int nthreads) {
  if (!a || !w || !c) return dsp_fail(DSP_ERR_ARG, "cpu matmul: NULL argument");
  if (a->dtype != DSP_BF16)
    return dsp_fail(DSP_ERR_DTYPE, "cpu matmul: a is %s, expected BF16", dsp_dtype_name(a->dtype));
  if (c->dtype != DSP_BF16 && c->dtype != DSP_F32)
    return dsp_fail(DSP_ERR_DTYPE, "cpu matmul: c is %s, expected BF16 or F32", dsp_dtype_name(c->dtype));
  DSP_TRY(check_2d(a, "a"));
  DSP_TRY(check_2d(c, "c"));
  char sa[64], sc[64];
  if (a->shape[1] != w->k || c->shape[0] != a->shape[0] || c->shape[1] != w->n)
    return dsp_fail(DSP_ERR_SHAPE, "cpu matmul: a %s, weight [%lld, %lld], c %s: expected a [M, K], c [M, N]",
                    dsp_shape_str(a, sa, sizeof sa), (long long)w->n, (long long)w->k, dsp_shape_str(c, sc, sizeof sc));
  const int64_t m = a->shape[0], n = w->n, k = w->k;
  if (m == 0 || n == 0) return DSP_OK;

  const int64_t tiles = dsp_cpu_mtiles(m);
  float *ap = dsp_cpu_scratch((size_t)tiles * DSP_CPU_MR * (size_t)k * sizeof(float));
  if (!ap) return dsp_fail(DSP_ERR_NOMEM, "cpu matmul: cannot allocate the widened A (%lld x %lld)", (long long)m,
                           (long long)k);
  dsp_cpu_isa isa = dsp_cpu_isa_current();
  dsp_cpu_tile_fn tile_fn = isa == DSP_CPU_ISA_AVX512 ? dsp_cpu_tile_avx512
                            : isa == DSP_CPU_ISA_AVX2 ? dsp_cpu_tile_avx2
                                                      : dsp_cpu_tile_scalar;
  dsp_cpu_store_fn store_fn = isa == DSP_CPU_ISA_AVX512 ? dsp_cpu_store_avx512 : dsp_cpu_store_scalar;
  const size_t esz = dsp_dtype_size(c->dtype);
  const int64_t crs = c->stride[0], ccs = c->stride[1];

#pragma omp parallel num_threads(dsp_cpu_threads_resolve(nthreads))
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tiles; t++) dsp_cpu_widen_tile(a, t, ap + t * DSP_CPU_MR * k);

    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t j0 = w->npanels * id / nt, j1 = w->npanels * (id + 1) / nt;
    _Alignas(64) float tile[DSP_CPU_MR * DSP_CPU_NR];
    for (int64_t j = j0; j < j1; j++) {
      const uint16_t *bp = dsp_cpu_panel(w, j);
      const int64_t n0 = j * DSP_CPU_NR;
      const int ncols = (int)(n - n0 < DSP_CPU_NR ? n - n0 : DSP_CPU_NR);
      for (int64_t t = 0; t < tiles; t++) {
        const int64_t m0 = t * DSP_CPU_MR;
        const int mr = (int)(m - m0 < DSP_CPU_MR ? m - m0 : DSP_CPU_MR);
        tile_fn(ap + t * DSP_CPU_MR * k, mr, bp, k, tile);
        void *c0 = (char *)c->data + (ptrdiff_t)(m0 * crs + n0 * ccs) * (ptrdiff_t)esz;
        store_fn(tile, mr, ncols, c0, c->dtype, crs, ccs);
      }
    }
  }
  return DSP_OK;
}
