/* The Markov head's CPU executor (the backend ops of backend/backend.h). */
#ifndef DSP_BACKEND_CPU_MARKOV_CPU_H
#define DSP_BACKEND_CPU_MARKOV_CPU_H
#include "backend/backend.h"

dsp_status dsp_cpu_markov_create(dsp_backend *be, int dev, const dsp_markov_plan *plan, const dsp_markov_weights *w,
                                 dsp_markov_exec **out);
dsp_status dsp_cpu_markov_propose(dsp_markov_exec *x, const dsp_markov_inputs *in, dsp_markov_outputs *out);
dsp_status dsp_cpu_markov_set_path(dsp_markov_exec *x, const dsp_markov_plan *plan);
const char *dsp_cpu_markov_detail(const dsp_markov_exec *x);
void dsp_cpu_markov_last_timing(const dsp_markov_exec *x, double *lm_ms, double *tail_ms);
void dsp_cpu_markov_free(dsp_markov_exec *x);

#endif
