/* The backend's operations, the building blocks components run (the models'
 * layers from now on) and the op-parity harness checks (tests/test_ops.c).
 * Buffers are backend memory (host memory on the CPU, device memory on CUDA,
 * on the device `dev` of the backend); views' data pointers point into it.
 * On CUDA every operation is enqueued on the device's stream; dsp_op_sync
 * waits for it. */
#ifndef DSP_BACKEND_OPS_H
#define DSP_BACKEND_OPS_H
#include <stddef.h>
#include <stdint.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A weight [N, K] (bf16) prepared once for products: packed panels on the
 * CPU; a device copy and the GEMM's kernel choice on CUDA. */
typedef struct dsp_weight dsp_weight;

dsp_status dsp_op_alloc(dsp_backend *be, int dev, size_t bytes, void **out);
void dsp_op_release(dsp_backend *be, int dev, void *p);
dsp_status dsp_op_upload(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes);
dsp_status dsp_op_download(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes);
/* dst <- src, both backend memory of the device. */
dsp_status dsp_op_copy(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes);
dsp_status dsp_op_sync(dsp_backend *be, int dev);

/* host: an [N, K] BF16 host view (rows contiguous). strict: 1 the fixed-order
 * fp32 chain (CUDA: bitwise equal to the CPU on any input), 0 the default
 * kernel, -1 the DSPARK_CUDA_STRICT setting. */
dsp_status dsp_op_weight_create(dsp_backend *be, int dev, const dsp_tensor *host, int strict, dsp_weight **out);
void dsp_op_weight_free(dsp_backend *be, dsp_weight *w);
/* Which kernel the weight's products run (e.g. "avx512f panels", "own wgmma kernel, ..."). */
const char *dsp_op_weight_describe(const dsp_backend *be, const dsp_weight *w);

/* c[m, n] = sum_k a[m, k] * w[n, k] (contract 2): a [M, K] BF16, c [M, N] BF16
 * (rounded once) with unit column stride; rows may be strided. */
dsp_status dsp_op_gemm(dsp_backend *be, int dev, const dsp_tensor *a, const dsp_weight *w, dsp_tensor *c);

/* One Markov step over a weight's rows (contracts 3 and 4): for every row b,
 * bias_v = bf16(sum_r w2[v][r] e[b][r]), logit_v = bf16(f32(base) + f32(bias))
 * (fp32_add: unrounded), and the best (value, id) under the selection order
 * among rows v < n_valid, ids id0 + v. e [B, R] and base [B, N] BF16 and the
 * optional logits [B, n_valid] (BF16, F32 with fp32_add) are backend memory;
 * best_val / best_id are host arrays of B. */
typedef struct {
  const dsp_tensor *e;
  const dsp_weight *w2;
  const dsp_tensor *base;
  int fp32_add;
  int64_t id0, n_valid;
  float *best_val;
  int64_t *best_id;
  dsp_tensor *logits;
} dsp_op_markov_args;
dsp_status dsp_op_markov_step(dsp_backend *be, int dev, const dsp_op_markov_args *a);

#ifdef __cplusplus
}
#endif
#endif
