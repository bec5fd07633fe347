/* K slices of a row-parallel weight (o, down): the order that makes a product
 * the same bits at every TP size that is a power of two dividing the slices.
 *
 * A sliced weight's K splits into S equal slices. Output (m, n) is each
 * slice's sum in the weight's own order (the fmaf chain or AMX's blocks, from
 * +0 over the slice's k alone), then the S partials added in fp32 by the
 * halving tree: [lo, hi) with more than one slice is [lo, mid) + [mid, hi),
 * mid = lo + (hi - lo) / 2, left operand first. A TP rank holding S / P
 * contiguous slices (P a power of two) computes one subtree of that tree, and
 * the communicator adds the ranks' partials by the same tree over ranks
 * (dsp_comm's F32 sums), so P ranks give TP 1's bits. */
#ifndef DSP_KERNELS_CPU_SLICES_H
#define DSP_KERNELS_CPU_SLICES_H
#include <stddef.h>

/* The tree over slices [lo, hi) of buf (slice s's n floats at buf + s * stride), result in slice lo's floats. */
static inline void dsp_cpu_slice_tree(float *buf, size_t stride, int lo, int hi, size_t n) {
  if (hi - lo < 2) return;
  const int mid = lo + (hi - lo) / 2;
  dsp_cpu_slice_tree(buf, stride, lo, mid, n);
  dsp_cpu_slice_tree(buf, stride, mid, hi, n);
  float *l = buf + (size_t)lo * stride;
  const float *r = buf + (size_t)mid * stride;
#pragma omp simd /* -O2 leaves the loop scalar otherwise; the adds are elementwise, so the bits are the same */
  for (size_t i = 0; i < n; i++) l[i] = l[i] + r[i];
}

#endif
