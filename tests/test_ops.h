/* What the op-parity harness's files share (test_ops.c has the main and the
 * contract helpers; test_ops_kda.c the KDA operation; test_ops_fused.c the fused layer operations). */
#ifndef DSP_TESTS_TEST_OPS_H
#define DSP_TESTS_TEST_OPS_H
#include <stddef.h>
#include <stdint.h>

#include "dspark.h"

extern dsp_backend *g_be, *g_cpu; /* the backend under test; the CPU backend in CUDA runs (else NULL) */
extern int g_cuda, g_perf;
extern long long g_compared;

float bf(uint16_t h);
uint16_t f32_to_bf(float f);
uint64_t rnd(void);
uint16_t rand_val(void); /* a bf16 uniform in [-1, 1] */
int ulps16(uint16_t a, uint16_t b);
void *dev_put(dsp_backend *be, const void *h, size_t bytes);
void dev_get(dsp_backend *be, void *h, const void *d, size_t bytes);
/* Seconds per call of call(ctx) on g_be: a warm-up, then the median of 5 groups of reps. */
double median_time(dsp_status (*call)(void *), void *ctx, int reps);
double copy_rate(void); /* the floors' bandwidth, bytes per second (support/rates.h) */

uint32_t ref_philox0(uint64_t seed, uint64_t id, uint64_t pos); /* Philox4x32-10's first word, written here */

void t_kda(void **st);
void t_accept(void **st); /* test_ops_accept.c: speculative sampling's acceptance */
void perf_accept(double bw); /* its time against its floor (t_perf) */
void t_fused_layers(void); /* test_ops_fused.c: add_rmsnorm, attn_in against what they fuse */
#endif
