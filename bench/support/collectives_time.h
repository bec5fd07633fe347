/* Timing one small collective alone on the GPU (the all-gather of the sharded
 * path's (value, id) keys, the per-step token broadcast), for the benchmark's
 * comparison of per-step communication against compute. */
#ifndef DSP_CUDA_COLLECTIVES_TIME_H
#define DSP_CUDA_COLLECTIVES_TIME_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "comm/comm.h"

/* Median microseconds (CUDA events, `iters` calls after a warm-up) of an
 * all-gather of gather_bytes per rank and a broadcast of bcast_bytes from rank 0
 * on an NCCL communicator. Collective: every rank calls it. */
dsp_status dsp_cuda_time_collectives(dsp_comm *nccl, size_t gather_bytes, size_t bcast_bytes, int iters,
                                     float *allgather_us, float *bcast_us);
#ifdef __cplusplus
}
#endif
#endif
