/* Row selection over full corrected logits (contracts 4 and 5). */
#ifndef DSP_MODEL_SAMPLE_H
#define DSP_MODEL_SAMPLE_H
#include <stdint.h>

#include "dspark.h"

/* Row b of logits [B, V] (BF16 or F32 view). T == 0: argmax under the total
 * order of src/core/select.h. T > 0: Gumbel-max, argmax over v of
 * fp32(fp32(logit_v) / T) + g(seed, position, v) in the same order. */
int64_t dsp_sample_row(const dsp_tensor *logits, int64_t b, float T, uint64_t seed, int64_t position);

#endif
