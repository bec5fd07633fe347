/* Speculative sampling's acceptance on the host (kernels/accept_args.h,
 * dsp_op_accept; docs/CONTRACTS.md, "Verification"). p and q of a slot are
 * softmax_row.h's rows; the residual w_v = max(p_v - q_v, 0) in double is
 * summed in chunks of DSP_ACCEPT_CHUNK ids (each chunk in id order from 0,
 * then the chunk sums in order: the mass), and the draw is the first id v
 * whose R + P_v passes u x mass, R the chunk sums before v's chunk and P_v
 * v's chunk's sum up to v; the CUDA kernel computes the same bits. */
#ifndef DSP_KERNELS_CPU_SPEC_ACCEPT_H
#define DSP_KERNELS_CPU_SPEC_ACCEPT_H
#include <stddef.h>
#include <stdint.h>

#include "kernels/accept_args.h"

#define DSP_ACCEPT_CHUNK 1024
enum { DSP_ACCEPT_PURPOSE = 1, DSP_RESIDUAL_PURPOSE = 2 };

/* The scratch bytes for up to max_seqs x gamma slots over nthreads threads. */
size_t dsp_cpu_accept_bytes(int64_t vocab, int32_t max_seqs, int32_t gamma, int nthreads);
/* a->ws holds dsp_cpu_accept_bytes(..., nthreads) bytes (host memory); tlog and qlog are host memory. */
void dsp_cpu_accept(const dsp_op_accept_args *a, int nthreads);

#endif
