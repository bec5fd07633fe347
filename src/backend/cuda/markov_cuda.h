/* The Markov head's CUDA executor (DESIGN §1-§4), with the semantics of the
 * CPU executor: contracts 2-5, the three greedy paths, the sampling variant,
 * run as the shared plan (backend/markov_plan.h) says.
 *
 * Per proposal the host picks the smallest captured batch bucket >= B and the
 * variant (sampling when any row has T > 0 or logits are asked for), copies the
 * inputs into that bucket's static device buffers on the replay stream (padding
 * rows inert: anchor 0, hidden 0, T 0), replays the bucket's CUDA graph and
 * copies the tokens (and logits) back. Every rank of the communicator calls
 * each function collectively.
 *
 * Besides the backend ops (markov_create & co. in backend/backend.h), kernel
 * tests and benchmarks create heads directly with tuning knobs. */
#ifndef DSP_BACKEND_CUDA_MARKOV_CUDA_H
#define DSP_BACKEND_CUDA_MARKOV_CUDA_H
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dsp_markov_exec dsp_cuda_head;

/* Knobs for tests and benchmarks. Every field left at its default (-1 / NULL)
 * takes the DSPARK_* environment setting or the built-in choice. */
typedef struct {
  int strict;            /* 1: fixed-order fmaf products (bitwise = CPU); -1: DSPARK_CUDA_STRICT */
  int graphs;            /* 0: run eagerly; -1: DSPARK_GRAPHS */
  const char *buckets;   /* "4,8"; NULL: DSPARK_BUCKETS */
  int per_step;          /* 1: one launch per step even where one persistent launch could run all */
  int force_collectives; /* 1: the multi-rank plan (NCCL calls in the graphs) even on one rank */
  int prefetch;          /* register kernel: L2 prefetch distance in 16-row units, 0 = off; -1: default */
  int serpentine;        /* 1: odd steps walk their units backwards (L2 reuse); -1: default */
  int kernel;            /* the tail kernel, a dsp_tail_kernel (core/env.h); -1: DSPARK_CUDA_TAIL.
                            Strict mode always runs the register kernel. */
  int l2keep;            /* ring kernel: eighths of W2's chunks copied with an L2 evict_last policy (the
                            rest, and the base rows, evict_first); 0: no cache hints; -1: default (3) */
  int resident;          /* ring-wgmma kernel (one warpgroup per chunk): W2 chunks each warpgroup keeps in
                            registers through the tail (dsp_mk_args.resident); -1: default (2) */
  int lm_choice;         /* LM-head product: 0 the own wgmma kernel (kernels/cuda/gemm_wgmma.h) where the
                            device runs it and its checks pass, else cuBLASLt's pinned algorithm; 3 cuBLASLt's
                            pinned algorithm; 4 the own kernel in single blocks, not clusters of two */
  int pdl;               /* 0: the persistent tail waits for the LM head's product to end before it
                            launches; -1 / 1: it launches as the product finishes (programmatic dependent
                            launch, where this device can capture it) */
  int noise;             /* 1: a sampled tail reads the Gumbel noise of its steps from a buffer that a kernel
                            of full occupancy fills before it; 0: the tail draws it itself; -1: DSPARK_CUDA_NOISE */
} dsp_cuda_tuning;

void dsp_cuda_tuning_default(dsp_cuda_tuning *t);
/* comm: NULL or a one-rank communicator for a single GPU; an NCCL communicator
 * (shared: the head sets its stream before each use); or an MPI communicator,
 * from which the head bootstraps its own NCCL communicator. Weights are host
 * views (rows contiguous) copied to `device` once. DSP_ERR_DEVICE "no CUDA
 * device" when there is no usable GPU. t: NULL for the defaults. */
dsp_status dsp_cuda_head_create(const dsp_markov_config *cfg, dsp_comm *comm, const dsp_markov_weights *w,
                                int device, const dsp_cuda_tuning *t, dsp_cuda_head **out);
dsp_status dsp_cuda_head_propose(dsp_cuda_head *h, const dsp_markov_inputs *in, dsp_markov_outputs *out);
/* The plan's start-up line. */
const char *dsp_cuda_head_report(const dsp_cuda_head *h);
/* Buckets captured, graph memory, the LM-head product, the tail kernel and its checks. */
const char *dsp_cuda_head_detail(const dsp_cuda_head *h);
void dsp_cuda_head_free(dsp_cuda_head *h);
/* Bytes of device memory the head holds (weights, buffers), and the graphs' share. */
void dsp_cuda_head_memory(const dsp_cuda_head *h, size_t *buffers, size_t *graphs);

/* For timing replays (bench/): the stream everything runs on; a new graph of
 * the proposal (or only its Markov tail) of the bucket that serves `batch`,
 * over that bucket's static inputs (the caller destroys it); and the replay of
 * the bucket's own captured proposal (eager when graphs are off). */
cudaStream_t dsp_cuda_head_stream(const dsp_cuda_head *h);
dsp_status dsp_cuda_head_capture(dsp_cuda_head *h, int32_t batch, int sampling, int tail_only, cudaGraphExec_t *out);
dsp_status dsp_cuda_head_replay(dsp_cuda_head *h, int32_t batch, int sampling);

/* The backend ops (backend/backend.h). */
dsp_status dsp_cuda_markov_create(dsp_backend *be, int dev, const dsp_markov_plan *plan, const dsp_markov_weights *w,
                                  dsp_markov_exec **out);
dsp_status dsp_cuda_markov_propose(dsp_markov_exec *x, const dsp_markov_inputs *in, dsp_markov_outputs *out);
const char *dsp_cuda_markov_detail(const dsp_markov_exec *x);
void dsp_cuda_markov_last_timing(const dsp_markov_exec *x, double *lm_ms, double *tail_ms);
void dsp_cuda_markov_free(dsp_markov_exec *x);
dsp_status dsp_cuda_markov_fused_bucket(dsp_markov_exec *x, int32_t batch, dsp_markov_fused *out);
void dsp_cuda_markov_fused_stage(dsp_markov_exec *x, const dsp_markov_inputs *in);
dsp_status dsp_cuda_markov_fused_enqueue(dsp_backend *be, int dev, dsp_markov_exec *x, int32_t batch, int sampling);
dsp_status dsp_cuda_markov_fused_collect(dsp_markov_exec *x, const dsp_markov_inputs *in, dsp_markov_outputs *out);
dsp_status dsp_cuda_markov_logits(const dsp_markov_exec *x, int32_t batch, const void **data, int64_t *ld,
                                  int32_t *rows);

#ifdef __cplusplus
}
#endif
#endif
