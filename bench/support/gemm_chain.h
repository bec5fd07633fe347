/* A chain of few-row products, each product's output the next one's tokens, run two ways: as the model's graphs run
 * them (one few-row kernel a product, launched programmatically) and as one persistent kernel whose blocks stream
 * the next product's weights into their rings while the grid barrier between products is still open. The question
 * it answers: how much of a product's fixed cost at batch 1 is the kernel boundary (measurement only). */
#ifndef DSP_BENCH_SUPPORT_GEMM_CHAIN_H
#define DSP_BENCH_SUPPORT_GEMM_CHAIN_H

#include <stdint.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DSP_GEMM_CHAIN_MAX 8

typedef struct {
  double pick_us;   /* graph of the library's products, each at its own launch shape */
  double shape_us;  /* graph of the library's products, all at the chain kernel's shape */
  double chain_us;  /* the persistent chain kernel */
  double bytes;     /* weight bytes of the chain */
  int c, sb, stages; /* the chain kernel's shape */
  long long compared, differ; /* output values compared (every product's) and how many differ */
} dsp_bench_gemm_chain_times;

/* np products (at most DSP_GEMM_CHAIN_MAX) of n[j] rows over K n[j - 1] (K n[-1] = k0), m token rows (1..16),
 * distinct random weights; medians of reps graph replays. */
dsp_status dsp_bench_gemm_chain(int np, const int64_t *n, int64_t k0, int64_t m, int reps,
                                dsp_bench_gemm_chain_times *t);

#ifdef __cplusplus
}
#endif
#endif
