/* The communicator's internal entry points beyond the public ones (dspark.h):
 * the device stream NCCL collectives go on, and whether a launcher started us. */
#ifndef DSP_COMM_COMM_H
#define DSP_COMM_COMM_H
#include <stddef.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NCCL only: the cudaStream_t collectives are enqueued on (so a CUDA graph can
 * capture them). Host engines: DSP_ERR_UNSUPPORTED. */
dsp_status dsp_comm_set_stream(dsp_comm *c, void *stream);
/* 1 when an MPI launcher started this process (its environment variables). */
int dsp_comm_launched_by_mpi(void);

#ifdef __cplusplus
}
#endif
#endif
