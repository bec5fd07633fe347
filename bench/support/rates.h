/* Ceilings measured through a backend's own ops, for the floors the model
 * benchmarks print: copy bandwidth and the bf16 GEMM rate. */
#ifndef DSP_BENCH_RATES_H
#define DSP_BENCH_RATES_H
#include <stdint.h>

#include "dspark.h"

double dsp_bench_now_ms(void);
/* The median of v[0 .. n-1] (sorts v). */
double dsp_bench_median(double *v, int n);
/* Bytes read + written per second by the backend's copy of 1 GiB (best of 5); exits on failure. */
double dsp_bench_copy_rate(dsp_backend *be);
/* Flop/s of the backend's bf16 GEMM at m x n x k (best of 5); exits on failure. */
double dsp_bench_product_rate(dsp_backend *be, int64_t m, int64_t n, int64_t k);

#endif
