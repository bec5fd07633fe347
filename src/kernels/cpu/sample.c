#include "kernels/cpu/sample.h"

#include <math.h>
#include <omp.h>

#include "core/bf16.h"
#include "core/philox.h"
#include "core/select.h"
#include "core/tensor.h"
#include "kernels/cpu/gumbel_avx512.h"
#include "kernels/cpu/kernel.h"

static inline float logit_at(const dsp_tensor *l, const char *row, int64_t v) {
  int64_t off = v * l->stride[1];
  return l->dtype == DSP_BF16 ? dsp_bf16_to_f32(((const dsp_bf16 *)row)[off]) : ((const float *)row)[off];
}

int64_t dsp_sample_row(const dsp_tensor *logits, int64_t b, float T, uint64_t seed, int64_t position) {
  const int64_t V = logits->shape[1];
  const char *row = dsp_tensor_row(logits, b);
  if (V > 0 && logits->stride[1] == 1 && dsp_cpu_isa_current() == DSP_CPU_ISA_AVX512) {
    /* the loop below, 16 ids at a time; the threads' best keys merge by max (one total order) */
    const int f32 = logits->dtype == DSP_F32;
    const size_t es = f32 ? 4 : 2;
    uint64_t best = 0;
#pragma omp parallel if (V >= 16384) reduction(max : best)
    {
      const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
      const int64_t v0 = (V * id / nt) & ~(int64_t)15, v1 = id == nt - 1 ? V : (V * (id + 1) / nt) & ~(int64_t)15;
      if (v1 > v0) best = dsp_cpu_select_avx512(row + (size_t)v0 * es, f32, v1 - v0, T, seed, position, v0);
    }
    return dsp_select_key_id(best);
  }
  float best_v = -INFINITY;
  int64_t best_i = DSP_PAIR_NONE_ID;
  /* Threads take contiguous column ranges; merging their winners under the total
   * order gives the single-thread answer. The Gumbel noise dominates the cost. */
#pragma omp parallel if (T > 0.0f && V >= 4096)
  {
    float tv = -INFINITY;
    int64_t ti = DSP_PAIR_NONE_ID;
#pragma omp for schedule(static) nowait
    for (int64_t v = 0; v < V; v++) {
      float x = logit_at(logits, row, v);
      if (T > 0.0f) {
        volatile float q = x / T; /* one rounding, never fused with the add */
        x = q + dsp_gumbel(seed, position, v);
      }
      if (dsp_pair_better(x, v, tv, ti)) { tv = x; ti = v; }
    }
#pragma omp critical
    if (dsp_pair_better(tv, ti, best_v, best_i)) { best_v = tv; best_i = ti; }
  }
  return best_i;
}
