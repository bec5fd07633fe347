/* The ring kernels' benchmark build: see markov_bench.h. */
#define DSP_MK_BENCH_VARIANTS 1
#include "kernels/cuda/markov_ring_launch.cuh"
#include "support/markov_bench.h"

extern "C" dsp_status dsp_bench_ring_launch(const dsp_mk_args *a, const dsp_mk_launch *l, cudaStream_t s) {
  size_t smem;
  int occ[2];
  if (l->sampling) return rg_launch_family<true>(a, l, s, 0, &smem, occ);
  return rg_launch_family<false>(a, l, s, 0, &smem, occ);
}
