/* The fused Markov step driver: the product's tile kernels with a selecting
 * epilogue. Each thread owns a contiguous range of weight panels and a running
 * best per (row, lane); the lane winners are merged at the end. */
#include <math.h>
#include <omp.h>

#include "core/select.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/markov_step.h"

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

typedef struct {
  const dsp_cpu_markov_args *args;
  dsp_cpu_markov_fn epi;
  float *best_v;   /* this thread's [rows][32] */
  int32_t *best_i;
} step_ctx;

static void step_epi(void *p, const float *tile, int64_t m0, int mr, int64_t j) {
  const step_ctx *s = p;
  const dsp_tensor *base = s->args->base, *lg = s->args->logits;
  const int64_t n0 = j * DSP_CPU_NR, nv = s->args->n_valid;
  const size_t lsz = lg ? dsp_dtype_size(lg->dtype) : 0;
  dsp_cpu_markov_tile mt = {
      .base0 = (const dsp_bf16 *)base->data + m0 * base->stride[0] + n0 * base->stride[1],
      .base_rs = base->stride[0],
      .base_cs = base->stride[1],
      .logit0 = lg ? (char *)lg->data + (ptrdiff_t)(m0 * lg->stride[0] + n0 * lg->stride[1]) * (ptrdiff_t)lsz : NULL,
      .logit_rs = lg ? lg->stride[0] : 0,
      .logit_cs = lg ? lg->stride[1] : 0,
      .fp32_add = s->args->fp32_add,
      .best_v = s->best_v + m0 * DSP_CPU_NR,
      .best_i = s->best_i + m0 * DSP_CPU_NR,
      .n0 = (int32_t)n0,
  };
  s->epi(tile, mr, (int)(nv - n0 < DSP_CPU_NR ? nv - n0 : DSP_CPU_NR), &mt);
}

dsp_status dsp_cpu_markov_step(const dsp_cpu_markov_args *a, int nthreads) {
  if (!a || !a->e || !a->w2 || !a->base) return dsp_fail(DSP_ERR_ARG, "markov step: NULL argument");
  const dsp_cpu_packed *w = a->w2;
  if (a->e->ndim != 2) {
    char sh[64];
    return dsp_fail(DSP_ERR_SHAPE, "markov step: e is %s, expected [M, %lld]", dsp_shape_str(a->e, sh, sizeof sh),
                    (long long)w->k);
  }
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
  const size_t a_floats = dsp_cpu_a_floats(m, k);
  const size_t c_floats = dsp_cpu_sweep_floats(m);
  const size_t best_n = (size_t)rows * DSP_CPU_NR; /* per thread, per array */
  const int own = tiles == 1 && threads > 1; /* each thread prepares its own copy of a one-tile A (matmul.c) */
  const size_t na = own ? (size_t)threads : 1;
  float *ap = dsp_cpu_scratch((na * a_floats + (size_t)threads * c_floats) * sizeof(float) +
                              (size_t)threads * best_n * (sizeof(float) + sizeof(int32_t)));
  if (!ap) return dsp_fail(DSP_ERR_NOMEM, "markov step: cannot allocate scratch for %lld rows", (long long)m);
  float *cbuf = ap + na * a_floats;
  float *best_v = cbuf + (size_t)threads * c_floats;
  int32_t *best_i = (int32_t *)(best_v + (size_t)threads * best_n);

  const dsp_cpu_isa isa = dsp_cpu_isa_current();
  const dsp_cpu_kernels kn = dsp_cpu_kernels_for(ap, m, k);
  const int64_t npv = (a->n_valid + DSP_CPU_NR - 1) / DSP_CPU_NR;
  int team = 1;

#pragma omp parallel num_threads(threads)
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    const dsp_cpu_kernels mine = dsp_cpu_team_a(a->e, w, &kn, ap, a_floats, own);
#pragma omp single nowait
    team = omp_get_num_threads();

    step_ctx ctx = {.args = a, .epi = isa == DSP_CPU_ISA_AVX512 ? dsp_cpu_markov_avx512 : dsp_cpu_markov_scalar,
                    .best_v = best_v + (size_t)id * best_n, .best_i = best_i + (size_t)id * best_n};
    for (size_t i = 0; i < best_n; i++) {
      ctx.best_v[i] = -INFINITY;
      ctx.best_i[i] = -1;
    }
    dsp_cpu_sweep(&mine, m, w, npv * id / nt, npv * (id + 1) / nt, cbuf + (size_t)id * c_floats, step_epi, &ctx);
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
