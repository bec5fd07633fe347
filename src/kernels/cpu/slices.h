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

/* l[i] = l[i] + r[i] for i < n: an ISA's form of one step of the tree. */
typedef void (*dsp_cpu_slice_add_fn)(float *l, const float *r, size_t n);

static inline void dsp_cpu_slice_add(float *l, const float *r, size_t n) {
#pragma omp simd /* -O2 leaves the loop scalar otherwise; the adds are elementwise, so the bits are the same */
  for (size_t i = 0; i < n; i++) l[i] = l[i] + r[i];
}

/* The tree over slices [lo, hi) of buf (slice s's n floats at buf + s * stride), result in slice lo's floats. */
static inline void dsp_cpu_slice_tree_with(float *buf, size_t stride, int lo, int hi, size_t n,
                                           dsp_cpu_slice_add_fn add) {
  if (hi - lo < 2) return;
  const int mid = lo + (hi - lo) / 2;
  dsp_cpu_slice_tree_with(buf, stride, lo, mid, n, add);
  dsp_cpu_slice_tree_with(buf, stride, mid, hi, n, add);
  add(buf + (size_t)lo * stride, buf + (size_t)mid * stride, n);
}

static inline void dsp_cpu_slice_tree(float *buf, size_t stride, int lo, int hi, size_t n) {
  dsp_cpu_slice_tree_with(buf, stride, lo, hi, n, dsp_cpu_slice_add);
}

#endif
