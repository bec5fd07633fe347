/* K slices of a row-parallel weight on the GPU (kernels/cpu/slices.h states the order): each slice's sum from
 * +0, the slices' sums added by the halving tree. A kernel walking the slices in order keeps a small stack of
 * finished subtrees: after slice i it pushes that slice's sums and adds the top two entries (left
 * first) once per tree node that closes at slice i. How many close there comes from the host as 4 bits per slice
 * (dsp_slice_merges), so one kernel runs any slice count up to 16. CUDA C++ only. */
#ifndef DSP_CUDA_SLICES_CUH
#define DSP_CUDA_SLICES_CUH
#include <stdint.h>

/* Stack entries a tree of up to 16 slices needs (one per level, and the leaf just pushed). */
#define DSP_SLICE_DEPTH 5

/* Nodes of the halving tree over [lo, hi) that close at each slice, 4 bits per slice: a node closes after its
 * last slice, hi - 1. */
static inline void dsp_slice_merges_rec(int lo, int hi, unsigned long long *m) {
  if (hi - lo < 2) return;
  const int mid = lo + (hi - lo) / 2;
  dsp_slice_merges_rec(lo, mid, m);
  dsp_slice_merges_rec(mid, hi, m);
  *m += 1ull << (4 * (hi - 1));
}
static inline unsigned long long dsp_slice_merges(int slices) {
  unsigned long long m = 0;
  dsp_slice_merges_rec(0, slices, &m);
  return m;
}

/* Slice i's sums d[0..NV) are done: onto the stack (depth sp, DEP entries), then `merges` additions of the top
 * entry into the one below; d starts again at +0. Every index is a constant after unrolling and sp selects by
 * predicate; ptxas keeps the entries in a small local frame, touched once a slice. */
template <int NV, int DEP>
__device__ __forceinline__ void dsp_slice_close(float *d, float (&stk)[DEP][NV], int &sp, int merges) {
#pragma unroll
  for (int l = 0; l < DEP; l++)
    if (l == sp) {
#pragma unroll
      for (int v = 0; v < NV; v++) stk[l][v] = d[v];
    }
  sp++;
  for (; merges > 0; merges--, sp--) {
#pragma unroll
    for (int l = 1; l < DEP; l++)
      if (l == sp - 1) {
#pragma unroll
        for (int v = 0; v < NV; v++) stk[l - 1][v] = __fadd_rn(stk[l - 1][v], stk[l][v]);
      }
  }
#pragma unroll
  for (int v = 0; v < NV; v++) d[v] = 0.0f;
}

/* The halving tree of x[LO..HI) with compile-time bounds (a cluster's SK partials). */
template <int LO, int HI>
__device__ __forceinline__ float dsp_slice_tree(const float *x) {
  if constexpr (HI - LO == 1) {
    return x[LO];
  } else {
    constexpr int MID = LO + (HI - LO) / 2;
    return __fadd_rn(dsp_slice_tree<LO, MID>(x), dsp_slice_tree<MID, HI>(x));
  }
}

#endif
