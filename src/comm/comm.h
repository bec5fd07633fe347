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
/* on = 1: a rank of c failed alone and will not join its next collectives:
 * on ranks that are threads of this process, the others' collectives (those
 * waiting now and every later one) return DSP_ERR_COMM instead of waiting for
 * it. on = 0, once no rank is inside a collective: the group works again. No
 * effect on engines whose ranks are processes. c may be NULL. */
void dsp_comm_poison(dsp_comm *c, int on);
/* Makes an F32 all-reduce of up to count elements in device memory allocate
 * nothing later, so that it can be captured in a CUDA graph (NCCL over 3 or
 * more ranks: the rank-order sum's scratch). Collective-free; a no-op on the
 * host engines. */
dsp_status dsp_comm_reserve(dsp_comm *c, size_t count);
/* 1 when an MPI launcher started this process (its environment variables). */
int dsp_comm_launched_by_mpi(void);

#ifdef __cplusplus
}
#endif
#endif
