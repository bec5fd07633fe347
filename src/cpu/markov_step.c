/* The fused Markov step driver: the product's tile kernels with a selecting
 * epilogue. Each thread owns a contiguous range of weight panels and a running
 * best per (row, lane); the lane winners are merged at the end. */
#include <math.h>
#include <omp.h>

#include "core/select.h"
#include "core/status.h"
#include "core/tensor.h"
#include "cpu/kernel.h"
#include "cpu/markov_step.h"

static dsp_status check_view(const dsp_tensor *t, const char *what, dsp_dtype dt, int64_t rows, int64_t cols,
                             int cols_at_least) {
  char sh[64];
  if (t->dtype != dt)
    return dsp_fail(DSP_ERR_DTYPE, "markov step: %s is %s, expected %s", what, dsp_dtype_name(t->dtype),
                    dsp_dtype_name(dt));
  if (t->ndim != 2 || t->shape[0] != rows || (cols_at_least ? t->shape[1] < cols : t->shape[1] != cols))
    return dsp_fail(DSP_ERR_SHAPE, "markov step: %s is %s, expected [%lld, %s%lld]", what,
                    dsp_shape_str(t, sh, sizeof sh), (long long)rows, cols_at_least ? ">= " : "", (long long)cols);
  if (rows * cols > 0 && !t->data) return dsp_fail(DSP_ERR_ARG, "markov step: %s has no data", what);
  return DSP_OK;
}

dsp_status dsp_cpu_markov_step(const dsp_cpu_markov_args *a, int nthreads) {
  if (!a || !a->e || !a->w2 || !a->base) return dsp_fail(DSP_ERR_ARG, "markov step: NULL argument");
  const dsp_cpu_packed *w = a->w2;
  if (a->e->ndim != 2) return check_view(a->e, "e", DSP_BF16, 0, w->k, 0);
  const int64_t m = a->e->shape[0], k = w->k;
  if (a->n_valid < 0 || a->n_valid > w->n)
    return dsp_fail(DSP_ERR_RANGE, "markov step: n_valid %lld outside [0, %lld] (the packed W2 rows)",
                    (long long)a->n_valid, (long long)w->n);
  if (a->id0 < 0 || a->id0 > INT64_MAX - w->n)
    return dsp_fail(DSP_ERR_RANGE, "markov step: id0 %lld out of range", (long long)a->id0);
  DSP_TRY(check_view(a->e, "e", DSP_BF16, m, k, 0));
  DSP_TRY(check_view(a->base, "base", DSP_BF16, m, a->n_valid, 1));
  if (a->logits) DSP_TRY(check_view(a->logits, "logits", a->fp32_add ? DSP_F32 : DSP_BF16, m, a->n_valid, 0));
  if (m == 0) return DSP_OK;

  const int threads = dsp_cpu_threads_resolve(nthreads);
  const int64_t tiles = dsp_cpu_mtiles(m), rows = tiles * DSP_CPU_MR;
  const size_t a_bytes = ((size_t)rows * (size_t)k * sizeof(float) + 63) & ~(size_t)63;
  const size_t best_n = (size_t)rows * DSP_CPU_NR; /* per thread, per array */
  char *scr = dsp_cpu_scratch(a_bytes + (size_t)threads * best_n * (sizeof(float) + sizeof(int32_t)));
  if (!scr) return dsp_fail(DSP_ERR_NOMEM, "markov step: cannot allocate scratch for %lld rows", (long long)m);
  float *ap = (float *)scr;
  float *best_v = (float *)(scr + a_bytes);
  int32_t *best_i = (int32_t *)(best_v + (size_t)threads * best_n);

  dsp_cpu_isa isa = dsp_cpu_isa_current();
  dsp_cpu_tile_fn tile_fn = isa == DSP_CPU_ISA_AVX512 ? dsp_cpu_tile_avx512
                            : isa == DSP_CPU_ISA_AVX2 ? dsp_cpu_tile_avx2
                                                      : dsp_cpu_tile_scalar;
  dsp_cpu_markov_fn epi_fn = isa == DSP_CPU_ISA_AVX512 ? dsp_cpu_markov_avx512 : dsp_cpu_markov_scalar;
  const dsp_tensor *base = a->base;
  const dsp_tensor *lg = a->logits;
  const size_t lsz = lg ? dsp_dtype_size(lg->dtype) : 0;
  const int64_t npv = (a->n_valid + DSP_CPU_NR - 1) / DSP_CPU_NR, nv = a->n_valid;
  int team = 1;

#pragma omp parallel num_threads(threads)
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tiles; t++) dsp_cpu_widen_tile(a->e, t, ap + t * DSP_CPU_MR * k);
#pragma omp single nowait
    team = omp_get_num_threads();

    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    float *bv = best_v + (size_t)id * best_n;
    int32_t *bi = best_i + (size_t)id * best_n;
    for (size_t i = 0; i < best_n; i++) {
      bv[i] = -INFINITY;
      bi[i] = -1;
    }
    const int64_t j0 = npv * id / nt, j1 = npv * (id + 1) / nt;
    _Alignas(64) float tile[DSP_CPU_MR * DSP_CPU_NR];
    for (int64_t j = j0; j < j1; j++) {
      const uint16_t *bp = dsp_cpu_panel(w, j);
      const int64_t n0 = j * DSP_CPU_NR;
      const int ncols = (int)(nv - n0 < DSP_CPU_NR ? nv - n0 : DSP_CPU_NR);
      for (int64_t t = 0; t < tiles; t++) {
        const int64_t m0 = t * DSP_CPU_MR;
        const int mr = (int)(m - m0 < DSP_CPU_MR ? m - m0 : DSP_CPU_MR);
        tile_fn(ap + t * DSP_CPU_MR * k, mr, bp, k, tile);
        dsp_cpu_markov_tile mt = {
            .base0 = (const dsp_bf16 *)base->data + m0 * base->stride[0] + n0 * base->stride[1],
            .base_rs = base->stride[0],
            .base_cs = base->stride[1],
            .logit0 = lg ? (char *)lg->data + (ptrdiff_t)(m0 * lg->stride[0] + n0 * lg->stride[1]) * (ptrdiff_t)lsz
                         : NULL,
            .logit_rs = lg ? lg->stride[0] : 0,
            .logit_cs = lg ? lg->stride[1] : 0,
            .fp32_add = a->fp32_add,
            .best_v = bv + m0 * DSP_CPU_NR,
            .best_i = bi + m0 * DSP_CPU_NR,
            .n0 = (int32_t)n0,
        };
        epi_fn(tile, mr, ncols, &mt);
      }
    }
  }

  /* Lane winners -> row winner; the order is total, so any merge order is exact. */
  for (int64_t r = 0; r < m; r++) {
    float v = -INFINITY;
    int64_t vid = DSP_PAIR_NONE_ID;
    for (int th = 0; th < team; th++) {
      const float *bv = best_v + (size_t)th * best_n + r * DSP_CPU_NR;
      const int32_t *bi = best_i + (size_t)th * best_n + r * DSP_CPU_NR;
      for (int l = 0; l < DSP_CPU_NR; l++) {
        if (bi[l] < 0) continue;
        int64_t g = a->id0 + bi[l];
        if (dsp_pair_better(bv[l], g, v, vid)) {
          v = bv[l];
          vid = g;
        }
      }
    }
    if (a->best_val) a->best_val[r] = v;
    if (a->best_id) a->best_id[r] = vid;
  }
  return DSP_OK;
}
