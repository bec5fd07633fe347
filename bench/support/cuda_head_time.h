/* Timing the CUDA head's graph replays (bench only): CUDA-event medians of the
 * bucket's own proposal graph and of a graph of its Markov tail alone. */
#ifndef DSP_BENCH_SUPPORT_CUDA_HEAD_TIME_H
#define DSP_BENCH_SUPPORT_CUDA_HEAD_TIME_H
#include <stdint.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dsp_markov_exec dsp_cuda_head;

/* Replays the proposal of the bucket for `batch` (the variant given by
 * `sampling`) `replays` times with CUDA events around each, then a graph of
 * the Markov tail alone (the gamma steps after the LM head), and returns the
 * median milliseconds of each (either output may be NULL). The static inputs
 * keep whatever the last proposal of that bucket copied in. Collective. */
dsp_status dsp_bench_cuda_head_time(dsp_cuda_head *h, int32_t batch, int sampling, int replays, float *ms_full,
                                    float *ms_tail);

#ifdef __cplusplus
}
#endif
#endif
