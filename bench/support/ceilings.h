/* Measured ceilings of this machine, the floors benchmarks report against:
 * copy bandwidth and the bf16 product rate of our kernel (cpu/matmul.h). */
#ifndef DSP_CPU_CEILINGS_H
#define DSP_CPU_CEILINGS_H
#include <stdint.h>

/* memcpy of a 256 MiB buffer (well beyond the caches) split over the
 * DSPARK_THREADS threads; GB/s counting bytes read + written, median of 5.
 * Returns a negative value (and sets the error message) when it cannot allocate. */
double dsp_cpu_measure_copy_gbps(void);

/* Reads of a 512 MiB buffer (written first, so no page is the kernel's shared zero page) split over the
 * DSPARK_THREADS threads: GB/s, median of 5. The rate a product's weight stream can reach: a copy also reads
 * each destination line before writing it, so it counts a third less than the memory moved. Negative (and the
 * error message set) when it cannot allocate. */
double dsp_cpu_measure_read_gbps(void);

/* The product c[M, N] (bf16) = a[M, K] @ w[N, K]^T on random bf16 inputs, packed
 * weights, nthreads as in dsp_cpu_matmul_nt; GFLOP/s = 2*M*K*N / median time of
 * repeated calls (about half a second in all, after one warm-up call).
 * Negative on failure (message set). */
double dsp_cpu_measure_product_gflops(int64_t M, int64_t K, int64_t N, int nthreads);

/* The fused Markov step (greedy: local top-1 only, no logits written) at
 * e [M, R], W2 [N, R]; GFLOP/s = 2*M*R*N / median time; *ms_per_step (optional)
 * gets the median time in milliseconds. Negative on failure (message set). */
double dsp_cpu_measure_markov_gflops(int64_t M, int64_t R, int64_t N, int nthreads, double *ms_per_step);

#endif
