/* The ring kernels built for measurement (bench/support/markov_bench.cu): the
 * product's code plus the ring-wgmma kernel's other warpgroup split
 * (dsp_mk_launch.ring 6); bench_tail passes them its trace buffer. */
#ifndef DSP_BENCH_SUPPORT_MARKOV_BENCH_H
#define DSP_BENCH_SUPPORT_MARKOV_BENCH_H
#include "kernels/cuda/markov.h"

#ifdef __cplusplus
extern "C" {
#endif

/* As dsp_cuda_markov_launch for the ring kernels (l->ring 4, 5, or 6). */
dsp_status dsp_bench_ring_launch(const dsp_mk_args *a, const dsp_mk_launch *l, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
