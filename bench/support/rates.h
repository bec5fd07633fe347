/* Ceilings measured through a backend's own ops, for the floors the model
 * benchmarks print: copy bandwidth and the bf16 GEMM rate. */
#ifndef DSP_BENCH_RATES_H
#define DSP_BENCH_RATES_H
#include <stdint.h>

#include <stdio.h>
#include <stdlib.h>

#include "dspark.h"

/* A failed call in a benchmark: file, line, the call and the library's message, then exit 1. */
#define DSP_BENCH_TRY(x)                                                                 \
  do {                                                                                   \
    if ((x) != DSP_OK) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, dsp_error_message());   \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

/* The synthetic prompt id of sequence b at position i (the one the peers use too). */
static inline int32_t dsp_bench_token(int64_t i, int64_t b, int64_t V) {
  return (int32_t)((i * 7919 + b * 104729 + 13) % V);
}
/* "1,32" into bs[0 .. *n - 1] (at most cap, each >= 1); *max the largest. 0, or -1 for a bad list. */
int dsp_bench_batches(const char *list, int32_t *bs, int cap, int *n, int32_t *max);

double dsp_bench_now_ms(void);
/* The median of v[0 .. n-1] (sorts v). */
double dsp_bench_median(double *v, int n);
/* The bandwidth floors divide bytes by: on CUDA the bytes read + written per second by the device's copy of
 * 1 GiB (best of 5); on the CPU the read stream of dsp_cpu_measure_read_gbps (support/ceilings.h), since a CPU
 * copy also reads each destination line before writing it. Exits on failure. */
double dsp_bench_copy_rate(dsp_backend *be);
/* Flop/s of the backend's bf16 GEMM at m x n x k (best of 5); exits on failure. */
double dsp_bench_product_rate(dsp_backend *be, int64_t m, int64_t n, int64_t k);
/* Milliseconds per all-reduce of `floats` fp32 values in device memory over every device's TP communicator
 * (dsp_op_allreduce, as the decoder's row-parallel sum calls it): the median of 7 timings of 20 calls, the
 * slowest rank's. 0 at TP 1. Collective over the backend's processes. */
double dsp_bench_allreduce_ms(dsp_backend *be, int64_t floats);
/* Milliseconds per exchange of `rows` selection keys among the processes (the target's (value, id)
 * exchange: every process's best key per row, 8 bytes each, gathered by every process; with one process the
 * devices' keys meet in host memory and nothing is exchanged). Collective. */
double dsp_bench_exchange_ms(dsp_backend *be, int64_t rows);
/* bytes[r], r < TP size: each TP rank's memory in use (dsp_op_memory_used; -1 where not known), gathered
 * to every process. Collective. */
void dsp_bench_memory(dsp_backend *be, double *bytes);

#endif
