/* The CPU kernels of the models' element-wise and row-wise layers, each with
 * the numerics of docs/CONTRACTS.md ("The models"): bf16 tensors between
 * operations, fp32 inside, one rounding per tensor torch would hold in bf16.
 * Views carry strides in elements (3-D views: [rows, heads, dim]); every
 * kernel reads and writes only its views' elements. */
#ifndef DSP_KERNELS_CPU_LAYERS_H
#define DSP_KERNELS_CPU_LAYERS_H
#include <stdint.h>

#include "dspark.h"

/* out[t] = table[ids[t]] for t < T: table [V, H], out [T, H] (BF16). */
void dsp_cpu_embed(const dsp_tensor *table, const int32_t *ids, int64_t t, dsp_tensor *out);
/* RMSNorm over the last dim of x [R, D] or [R, N, D]: var = the fp32 sum of
 * x^2 in order over d, divided by D; xn = bf16(x * (1 / sqrtf(var + eps)));
 * out = bf16(w * xn). x and out may be the same view. */
void dsp_cpu_rmsnorm(const dsp_tensor *x, const dsp_bf16 *w, float eps, dsp_tensor *out);
/* NeoX rotate-half RoPE in place on x [T, N, D]: for i < D/2,
 * x_i' = bf16(bf16(x_i c) - bf16(x_{i+D/2} s)), x_{i+D/2}' = bf16(bf16(x_{i+D/2} c) + bf16(x_i s)),
 * c, s = the bf16 tables' row pos[t], column i ([P, D/2]). */
void dsp_cpu_rope(dsp_tensor *x, const int32_t *pos, const dsp_bf16 *cos, const dsp_bf16 *sin, int64_t half);
/* out = bf16(a + b), [M, N] views (out may alias a or b). */
void dsp_cpu_add(const dsp_tensor *a, const dsp_tensor *b, dsp_tensor *out);
/* out = bf16(bf16(g / (1 + expf(-g))) * u), [M, N] views. */
void dsp_cpu_silu_mul(const dsp_tensor *g, const dsp_tensor *u, dsp_tensor *out);
/* dst row idx[t] = src row t for t < T ([*, W] views of one dtype). */
void dsp_cpu_scatter_rows(const dsp_tensor *src, const int64_t *idx, dsp_tensor *dst);
/* dst row t = src row idx[t] for t < T (BF16 views). */
void dsp_cpu_gather_rows(const dsp_tensor *src, const int64_t *idx, dsp_tensor *dst);

/* GQA attention over a KV cache, eager numerics: s = bf16(q . k) (fp32 sum
 * in order over d), s = bf16(s * scale), m = max, e_j = expf(s_j - m), z = the
 * fp32 sum of e in key order, p_j = bf16(e_j / z), out = bf16(sum_j p_j v_j)
 * (fp32, in key order). Row t reads slot row_slot[t] and sees its keys
 * 0 .. row_keys[t] - 1 (both clamped to the cache). */
typedef struct {
  const dsp_tensor *q;          /* [T, Hq, D] */
  const dsp_bf16 *k, *v;        /* caches [slots][max_len][Hkv][D] */
  int64_t slots, max_len, kv_heads, kv_stride; /* kv_stride: elements per cache row */
  const int32_t *row_slot, *row_keys; /* [T] */
  float scale;
  dsp_tensor *out;              /* [T, Hq * D] (or [T, Hq, D]) */
  float *scratch;               /* dsp_cpu_attention_scratch floats, 64-byte aligned */
} dsp_cpu_attention_args;
/* Floats of scratch for nthreads threads (up to this max_len, these heads). */
size_t dsp_cpu_attention_scratch(int64_t max_len, int64_t q_heads, int64_t kv_heads, int64_t head_dim, int nthreads);
void dsp_cpu_attention(const dsp_cpu_attention_args *a);

#endif
