/* Synthetic head weights and inputs for benchmarks and large tests: every value
 * is a pure function of (tensor seed, global row, column), so each rank makes
 * only its own rows and all ranks agree on the replicated ones. */
#ifndef DSP_MODEL_SYNTH_H
#define DSP_MODEL_SYNTH_H
#include "dspark.h"

/* rows x cols bf16 values for global rows [row0, row0 + rows), uniform in
 * [-scale, scale), rounded to bf16. */
void dsp_synth_fill(dsp_bf16 *dst, int64_t rows, int64_t cols, int64_t row0, uint64_t seed, float scale);

typedef struct {
  dsp_markov_weights w;
  dsp_bf16 *lm, *w1, *w2; /* owned */
} dsp_synth_weights;

/* This rank's weights for cfg (vocab, vocab_padded, hidden, rank); full = also all of W2. */
dsp_status dsp_synth_weights_create(const dsp_markov_config *cfg, int size, int rank, int full, uint64_t seed,
                                    dsp_synth_weights *out);
void dsp_synth_weights_free(dsp_synth_weights *s);

#endif
