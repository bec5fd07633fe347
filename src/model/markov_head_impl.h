/* The Markov head's handle, for the library and for benchmarks that time its
 * executors directly (bench/). */
#ifndef DSP_MODEL_MARKOV_HEAD_IMPL_H
#define DSP_MODEL_MARKOV_HEAD_IMPL_H
#include "backend/backend.h"

struct dsp_markov_head {
  dsp_backend *be;
  int n;                                    /* executors: one per device */
  dsp_markov_plan plan[DSP_BACKEND_MAX_DEVICES];
  dsp_markov_exec *x[DSP_BACKEND_MAX_DEVICES];
  dsp_markov_weights w[DSP_BACKEND_MAX_DEVICES];
  /* a proposal on several devices: scratch for the other devices' outputs */
  const dsp_markov_inputs *in;
  dsp_markov_outputs out[DSP_BACKEND_MAX_DEVICES];
  dsp_tensor logit_view[DSP_BACKEND_MAX_DEVICES];
  int64_t *tok_scratch;
  char *logit_scratch;
  size_t logit_scratch_bytes;
  char report[1536];
};

#endif
