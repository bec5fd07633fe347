/* The CPU bf16 product c = a @ w^T (contract 2) against weights packed once at
 * load time. The accumulation order is written down in cpu/kernel.h: per
 * output, acc = +0, then acc = fmaf(a[m][k], w[n][k], acc) for k = 0..K-1, then
 * one RNE rounding to bf16. It is the same on every path and for every N split,
 * M and thread count, so results are bit-identical across all of them. */
#ifndef DSP_CPU_MATMUL_H
#define DSP_CPU_MATMUL_H
#include <stddef.h>
#include <stdint.h>

#include "dspark.h"

typedef struct dsp_cpu_packed dsp_cpu_packed;

/* Packs w, an [N, K] BF16 view with any strides (vocabulary rows: LM head,
 * markov_w2), into kernel panels. DSP_ERR_DTYPE / DSP_ERR_SHAPE on misuse,
 * DSP_ERR_NOMEM when the panels cannot be allocated. */
dsp_status dsp_cpu_pack(const dsp_tensor *w, dsp_cpu_packed **out);
void dsp_cpu_packed_free(dsp_cpu_packed *p);
int64_t dsp_cpu_packed_n(const dsp_cpu_packed *p);
int64_t dsp_cpu_packed_k(const dsp_cpu_packed *p);
size_t dsp_cpu_packed_bytes(const dsp_cpu_packed *p);

/* Splits the weight's K into `slices` equal slices summed by the halving tree
 * of slices.h (the order a row-parallel weight keeps at every TP size). K must
 * be a multiple of 32 x slices; DSP_ERR_SHAPE otherwise. 1 restores one chain. */
dsp_status dsp_cpu_packed_slice(dsp_cpu_packed *p, int32_t slices);

/* c[m, n] = sum_k a[m, k] * w[n, k] for n in [0, N), in the order above.
 * a: [M, K] BF16 view; c: [M, N] view, BF16 (rounded once) or F32 (the fp32
 * accumulator as is). Only c's elements are written (gaps of a strided c stay).
 * NaN results are written as the canonical quiet NaN. nthreads <= 0: the
 * DSPARK_THREADS setting (0 there: OpenMP's default). After a thread's first
 * call of a given size, calls allocate nothing. */
dsp_status dsp_cpu_matmul_nt(const dsp_tensor *a, const dsp_cpu_packed *w, dsp_tensor *c, int nthreads);

/* The path dispatch chose: "avx512f", "avx2" or "scalar". DSPARK_CPU_KERNEL
 * (auto|avx512|avx2|scalar; amx: the chain's auto here, AMX tiles for layer weights, amx.h) forces one; a forced path the CPU lacks falls back
 * to auto with a one-line warning on stderr. */
const char *dsp_cpu_kernel_name(void);

/* Tests and benchmarks: force a path ("avx512", "avx2", "scalar"); NULL or
 * "auto" restores the automatic choice. DSP_ERR_ARG for an unknown name,
 * DSP_ERR_UNSUPPORTED when this CPU lacks the path. Not thread-safe against
 * running products. */
dsp_status dsp_cpu_kernel_force(const char *name);

#endif
