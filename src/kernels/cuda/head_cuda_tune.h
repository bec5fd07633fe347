/* Knobs of the CUDA head for tests and benchmarks (not part of the public
 * API). Every field left at its default (-1 / NULL) takes the DSPARK_*
 * environment setting or the built-in choice. */
#ifndef DSP_CUDA_HEAD_CUDA_TUNE_H
#define DSP_CUDA_HEAD_CUDA_TUNE_H
#include "kernels/cuda/head_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int strict;            /* 1: fixed-order fmaf products (bitwise = CPU); -1: DSPARK_CUDA_STRICT */
  int graphs;            /* 0: run eagerly; -1: DSPARK_GRAPHS */
  const char *buckets;   /* "4,8"; NULL: DSPARK_BUCKETS */
  int per_step;          /* 1: one launch per step even where one persistent launch could run all */
  int force_collectives; /* 1: the multi-rank plan (NCCL calls in the graphs) even on one rank */
  int prefetch;          /* L2 prefetch distance in 16-row units, 0 = off; -1: default */
  int serpentine;        /* 1: odd steps walk their units backwards (L2 reuse); -1: default */
  int kernel;            /* Markov step kernel (cuda/markov.h): 1 register-streaming, 5 ring 4 (chunks
                            claimed dynamically, packed W2), 6 ring 5 (ring 4 with wgmma consumers where
                            they apply; only after its check, else ring 4), 0 = the fastest of the three
                            on this head, timed at creation; -1: default (0). 2-4 (ring kernels 1-3)
                            were removed and are refused.
                            Strict mode always runs the register kernel. */
  int l2keep;            /* ring kernel 4: eighths of W2's chunks copied with an L2 evict_last policy (the
                            rest, and the base rows, evict_first); 0: no cache hints; -1: default (3) */
  int resident;          /* ring kernel 5 (one warpgroup per chunk): W2 chunks each warpgroup keeps in
                            registers through the tail (dsp_mk_args.resident); -1: default (2) */
  int lm_choice;         /* LM-head algorithm: 0 the default, the own wgmma kernel (cuda/lm_wgmma.h)
                            where the device runs it and its checks pass, else cuBLASLt's pinned
                            heuristic first; 1 time the cuBLASLt candidates at creation and keep the
                            fastest (benchmarks); 2 the fixed sm_90 cuBLASLt configuration of bench_lm's
                            sweep (benchmarks); 3 cuBLASLt's pinned heuristic first (benchmarks);
                            4 the own kernel in single blocks, not clusters of two (benchmarks) */
  int pdl;               /* 0: the persistent tail waits for the LM head's product to end before it
                            launches; -1 / 1: it launches as the product finishes (programmatic dependent
                            launch, where this device can capture it) and reads base only after
                            griddepcontrol.wait */
} dsp_cuda_tuning;

void dsp_cuda_tuning_default(dsp_cuda_tuning *t);
dsp_status dsp_cuda_head_create_tuned(const dsp_head_config *cfg, dsp_comm *comm, const dsp_head_weights *w,
                                      int device, const dsp_cuda_tuning *t, dsp_cuda_head **out);
/* Bytes of device memory the head holds (weights, buffers), and the graphs' share. */
void dsp_cuda_head_memory(const dsp_cuda_head *h, size_t *buffers, size_t *graphs);

#ifdef __cplusplus
}
#endif
#endif
