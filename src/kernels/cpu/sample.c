#include "kernels/cpu/sample.h"

#include <math.h>
#include <omp.h>

#include "core/bf16.h"
#include "core/philox.h"
#include "core/select.h"
#include "core/tensor.h"
#include "kernels/cpu/gumbel_avx2.h"
#include "kernels/cpu/gumbel_avx512.h"
#include "kernels/cpu/kernel.h"

static inline float logit_at(const dsp_tensor *l, const char *row, int64_t v) {
  int64_t off = v * l->stride[1];
  return l->dtype == DSP_BF16 ? dsp_bf16_to_f32(((const dsp_bf16 *)row)[off]) : ((const float *)row)[off];
}

int dsp_cpu_select_row(const void *row, int f32, int64_t n, float T, uint64_t seed, int64_t position, int64_t id0,
                       uint64_t *key) {
  const dsp_cpu_isa isa = dsp_cpu_isa_current();
  if (isa < DSP_CPU_ISA_AVX2) return 0;
  const size_t es = f32 ? 4 : 2;
  uint64_t best = 0;
#pragma omp parallel if (n >= 16384) reduction(max : best)
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t v0 = (n * id / nt) & ~(int64_t)15, v1 = id == nt - 1 ? n : (n * (id + 1) / nt) & ~(int64_t)15;
    const void *p = (const char *)row + (size_t)v0 * es;
    if (v1 > v0)
      best = isa == DSP_CPU_ISA_AVX512 ? dsp_cpu_select_avx512(p, f32, v1 - v0, T, seed, position, id0 + v0)
                                       : dsp_cpu_select_avx2(p, f32, v1 - v0, T, seed, position, id0 + v0);
  }
  *key = best;
  return 1;
}

int64_t dsp_sample_row(const dsp_tensor *logits, int64_t b, float T, uint64_t seed, int64_t position) {
  const int64_t V = logits->shape[1];
  const char *row = dsp_tensor_row(logits, b);
  uint64_t key;
  if (V > 0 && logits->stride[1] == 1 &&
      dsp_cpu_select_row(row, logits->dtype == DSP_F32, V, T, seed, position, 0, &key))
    return dsp_select_key_id(key);
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
