/* Fused Markov step instances: sampling=false, strict=false (markov_kernel.cuh). */
#include "kernels/cuda/markov_kernel.cuh"

dsp_status dsp_mk_launch_g(const dsp_mk_args *a, const dsp_mk_launch *l, cudaStream_t s, int query, size_t *smem,
                          int *occ) {
  return mk_launch_family<false, false>(a, l, s, query, smem, occ);
}

#include "kernels/cuda/markov_ring_launch.cuh"

dsp_status dsp_mk_ring_g(const dsp_mk_args *a, const dsp_mk_launch *l, cudaStream_t s, int query, size_t *smem,
                        int *occ) {
  return rg_launch_family<false>(a, l, s, query, smem, occ);
}
