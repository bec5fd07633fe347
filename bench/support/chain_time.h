/* What one dependent step costs on the GPU, without the work: a chain of phases in which every block reads what
 * every block of the phase before wrote (as a product reads the whole normalised row), run as a graph of kernels
 * (plain launches, or programmatic ones that start early), and as one persistent kernel with a grid barrier
 * between phases. bench_chain prints it against a decode step's kernel count. */
#ifndef DSP_BENCH_SUPPORT_CHAIN_TIME_H
#define DSP_BENCH_SUPPORT_CHAIN_TIME_H

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  double plain_us;   /* graph of kernels, stream-ordered launches */
  double pdl_us;     /* graph of kernels, programmatic launches triggering at their start */
  double barrier_us; /* one kernel, a grid barrier (release add, acquire poll) between phases */
  double free_us;    /* one kernel, the same phases without any barrier: the work alone (its sums race) */
  int equal;         /* 1 when the kernels' chain and the barrier kernel ended on the same bits */
} dsp_bench_chain_times;

/* Median time of the whole chain over `reps` runs after a warm-up: `phases` phases of `blocks` blocks (at most one
 * a multiprocessor, so the barrier kernel's blocks are all resident), each block reading blocks x floats values and
 * writing its `floats`. */
dsp_status dsp_bench_chain(int phases, int blocks, int floats, int reps, dsp_bench_chain_times *t);

#ifdef __cplusplus
}
#endif
#endif
