/* The Markov head on CUDA GPUs (DESIGN §1-§4), with the same semantics as the
 * CPU head (src/model/markov_head.c): contracts 2-5, the three greedy paths,
 * the sampling variant. Compiled only when DSPARK_HAVE_CUDA.
 *
 * Per proposal the host picks the smallest captured batch bucket >= B and the
 * variant (sampling when any row has T > 0 or logits are asked for), copies the
 * inputs into that bucket's static device buffers on the replay stream (padding
 * rows inert: anchor 0, hidden 0, T 0), replays the bucket's CUDA graph and
 * copies the tokens (and logits) back. Every rank of the communicator calls
 * each function collectively. */
#ifndef DSP_CUDA_HEAD_CUDA_H
#define DSP_CUDA_HEAD_CUDA_H
#include <stdint.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dsp_cuda_head dsp_cuda_head;

/* Weights are host views (any strides) copied to `device` once. comm: NULL or a
 * one-rank communicator for a single GPU; an NCCL communicator (below); or an
 * MPI communicator, from which the head bootstraps its own NCCL communicator.
 * DSP_ERR_DEVICE "no CUDA device" when there is no usable GPU. */
dsp_status dsp_cuda_head_create(const dsp_head_config *cfg, dsp_comm *comm, const dsp_head_weights *w, int device,
                                dsp_cuda_head **out);
dsp_status dsp_cuda_head_propose(dsp_cuda_head *h, const dsp_head_inputs *in, dsp_head_outputs *out);
/* The CPU head's start-up line plus the CUDA specifics (buckets captured, graph
 * memory, LM-head algorithm, tail kernel). */
const char *dsp_cuda_head_report(const dsp_cuda_head *h);
void dsp_cuda_head_free(dsp_cuda_head *h);

/* Benchmark hook: replays the proposal graph of the bucket for `batch` (the
 * variant given by `sampling`) `replays` times with CUDA events around each,
 * then a graph of the Markov tail alone (the gamma steps after the LM head),
 * and returns the median milliseconds of each. The static input buffers keep
 * whatever the last proposal of that bucket copied in. */
dsp_status dsp_cuda_head_time(dsp_cuda_head *h, int32_t batch, int sampling, int replays, float *ms_full_median,
                              float *ms_tail_median);

/* CUDA devices visible to this process; 0 when there is no driver or GPU. */
int dsp_cuda_device_count(void);

/* NCCL communicators (device buffers, on the stream of dsp_comm_set_stream).
 * One process per GPU: ranks and size of `mpi`, the ncclUniqueId broadcast
 * over it; `mpi` must outlive the result (it is the host-side communicator). */
dsp_status dsp_comm_nccl_create_mpi(dsp_comm *mpi, int device, dsp_comm **out);
/* One process driving ngpus GPUs: out_array[i] is rank i on devices[i]; use
 * each from its own thread. */
dsp_status dsp_comm_nccl_create_group(int ngpus, const int *devices, dsp_comm **out_array);

#ifdef __cplusplus
}
#endif
#endif
