/* Fused Markov step instances: sampling=true, strict=true (markov_kernel.cuh). */
#include "kernels/cuda/markov_kernel.cuh"

dsp_status dsp_mk_launch_sx(const dsp_mk_args *a, const dsp_mk_launch *l, cudaStream_t s, int query, size_t *smem,
                          int *occ) {
  return mk_launch_family<true, true>(a, l, s, query, smem, occ);
}
