/* The product driver: checks the views, widens A once per call, then splits the
 * weight panels over OpenMP threads, each walking its panels with
 * dsp_cpu_sweep. The order of each output's sum is fixed by the tile kernels
 * (cpu/kernel.h), not by this split or the blocking. */
#include <omp.h>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/matmul.h"

static dsp_status check_2d(const dsp_tensor *t, const char *what) {
  char sh[64];
  if (t->ndim != 2 || t->shape[0] < 0 || t->shape[1] < 0)
    return dsp_fail(DSP_ERR_SHAPE, "cpu matmul: %s is %s, expected 2-D", what, dsp_shape_str(t, sh, sizeof sh));
  if (t->shape[0] * t->shape[1] > 0 && !t->data) return dsp_fail(DSP_ERR_ARG, "cpu matmul: %s has no data", what);
  return DSP_OK;
}

typedef struct {
  dsp_cpu_store_fn store;
  char *c;
  dsp_dtype dt;
  int64_t rs, cs, n;
  size_t esz;
} store_ctx;

static void store_epi(void *p, const float *tile, int64_t m0, int mr, int64_t j) {
  const store_ctx *s = p;
  const int64_t n0 = j * DSP_CPU_NR;
  const int ncols = (int)(s->n - n0 < DSP_CPU_NR ? s->n - n0 : DSP_CPU_NR);
  s->store(tile, mr, ncols, s->c + (ptrdiff_t)(m0 * s->rs + n0 * s->cs) * (ptrdiff_t)s->esz, s->dt, s->rs, s->cs);
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
  const int64_t m = a->shape[0], k = w->k;
  if (m == 0 || w->n == 0) return DSP_OK;

  const int threads = dsp_cpu_threads_resolve(nthreads);
  /* one tile of A rows (a decode or verify call): each thread prepares its own copy, with no barrier between */
  const int own = dsp_cpu_mtiles(m) == 1 && threads > 1;
  const size_t a_floats = dsp_cpu_a_floats(m, k), c_floats = dsp_cpu_sweep_floats(m) * (size_t)(w->slices > 1 ? w->slices : 1), na = own ? (size_t)threads : 1;
  float *ap = dsp_cpu_scratch((na * a_floats + (size_t)threads * c_floats) * sizeof(float));
  if (!ap) return dsp_fail(DSP_ERR_NOMEM, "cpu matmul: cannot allocate scratch for %lld x %lld", (long long)m,
                           (long long)k);
  const dsp_cpu_isa isa = dsp_cpu_isa_current();
  const dsp_cpu_kernels kn = dsp_cpu_kernels_for(ap, m, k);
  store_ctx sc_ = {.store = isa == DSP_CPU_ISA_AVX512 ? dsp_cpu_store_avx512
                            : isa == DSP_CPU_ISA_AVX2 ? dsp_cpu_store_avx2 : dsp_cpu_store_scalar,
                   .c = c->data, .dt = c->dtype, .rs = c->stride[0], .cs = c->stride[1], .n = w->n,
                   .esz = dsp_dtype_size(c->dtype)};

  float *cb = ap + na * a_floats;
#pragma omp parallel num_threads(threads)
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    const dsp_cpu_kernels mine = dsp_cpu_team_a(a, w, &kn, ap, a_floats, own);
    const int64_t j0 = w->npanels * id / nt, j1 = w->npanels * (id + 1) / nt;
    dsp_cpu_sweep(&mine, m, w, j0, j1, cb + (size_t)id * c_floats, store_epi, &sc_);
  }
  return DSP_OK;
}
