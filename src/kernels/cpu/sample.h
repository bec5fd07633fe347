/* Row selection over full corrected logits (contracts 4 and 5). */
#ifndef DSP_MODEL_SAMPLE_H
#define DSP_MODEL_SAMPLE_H
#include <stdint.h>

#include "dspark.h"

/* Row b of logits [B, V] (BF16 or F32 view). T == 0: argmax under the total
 * order of src/core/select.h. T > 0: Gumbel-max, argmax over v of
 * fp32(fp32(logit_v) / T) + g(seed, position, v) in the same order. */
/* The selection key (core/select.h) over row[v], v < n, ids id0 + v (T > 0: of fp32(fp32(x_v / T) + g)), by the
 * AVX-512 or AVX2 form, contiguous columns split over the threads (their keys merge by max: one total order).
 * 0 where this CPU has neither form (the caller's scalar loop runs). */
int dsp_cpu_select_row(const void *row, int f32, int64_t n, float T, uint64_t seed, int64_t position, int64_t id0,
                       uint64_t *key);
int64_t dsp_sample_row(const dsp_tensor *logits, int64_t b, float T, uint64_t seed, int64_t position);

#endif
