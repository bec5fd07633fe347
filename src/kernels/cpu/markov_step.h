/* The fused Markov step on the CPU (contracts 3 and 4): for every batch row,
 * bias = W2_local @ e (the product of cpu/matmul.h, same order, rounded to
 * bf16), logit = base + bias, and the local top-1, without writing the bias
 * to memory. */
#ifndef DSP_CPU_MARKOV_STEP_H
#define DSP_CPU_MARKOV_STEP_H
#include <stdint.h>

#include "kernels/cpu/matmul.h"
#include "dspark.h"

typedef struct {
  const dsp_tensor *e;      /* [M, R] BF16 view: W1[prev] rows, one per batch row */
  const dsp_cpu_packed *w2; /* packed local markov_w2 rows [N, R] */
  const dsp_tensor *base;   /* [M, N] BF16 view (any strides): this step's base logits;
                               columns >= n_valid are not read (so [M, n_valid] is enough) */
  int fp32_add;             /* 0 (generic): logit = bf16(f32(base) + f32(bias));
                               1: logit = f32(base) + f32(bias), unrounded */
  int64_t id0;              /* global vocabulary id of local row 0 */
  int64_t n_valid;          /* local rows [0, n_valid) are real vocabulary; rows >= n_valid
                               are padding: never selected, never written */
  float *best_val;          /* optional [M]: the local top-1 value under dsp_pair_better */
  int64_t *best_id;         /* optional [M]: its global id; n_valid == 0 gives
                               (-inf, DSP_PAIR_NONE_ID) */
  dsp_tensor *logits;       /* optional [M, n_valid] view, BF16 (generic) or F32 (fp32-add) */
} dsp_cpu_markov_args;

/* bias_v = bf16_rne(acc_v) with acc_v the chain of cpu/kernel.h over r = 0..R-1;
 * threads split the weight panels, keep their own per-row best and are merged
 * with dsp_pair_better (a total order, so the merge is exact). NaN logits are
 * written as the canonical quiet NaN. DSP_ERR_DTYPE / SHAPE / RANGE on misuse. */
dsp_status dsp_cpu_markov_step(const dsp_cpu_markov_args *a, int nthreads);

#endif
