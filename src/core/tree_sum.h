/* The F32 sum of n values by the halving tree: [lo, hi) with more than one
 * value is [lo, mid) + [mid, hi), mid = lo + (hi - lo) / 2, left operand
 * first. The communicators add the ranks' partials in this order, the order a
 * row-parallel product's K slices take inside one rank (kernels/cpu/slices.h),
 * so a TP size that is a power of two gives TP 1's bits. */
#ifndef DSP_CORE_TREE_SUM_H
#define DSP_CORE_TREE_SUM_H
#include <stddef.h>

/* v[lo * stride], v[(lo + 1) * stride], ..., v[(hi - 1) * stride]; hi > lo. */
static inline float dsp_tree_sum_f32(const float *v, size_t stride, int lo, int hi) {
  if (hi - lo == 1) return v[(size_t)lo * stride];
  const int mid = lo + (hi - lo) / 2;
  const float l = dsp_tree_sum_f32(v, stride, lo, mid);
  return l + dsp_tree_sum_f32(v, stride, mid, hi);
}

#endif
