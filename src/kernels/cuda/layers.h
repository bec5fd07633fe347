/* The models' element-wise and row-wise layers on the GPU, with the numerics
 * of docs/CONTRACTS.md ("The models"): bf16 between operations, fp32 inside,
 * the same rounding points as the CPU (src/kernels/cpu/layers.h). Where the
 * CPU sums in order, these kernels sum in the fixed orders below, chosen by
 * the shapes of one row only (never by the batch, the number of new tokens
 * or the launch), so every row's result is batch-invariant; they equal the
 * CPU's wherever the sums are exact, and expf may differ from the CPU's libm
 * in the last fp32 bit.
 *   RMSNorm: lane l of a warp sums x_d^2 for d = l, l+32, ... (fmaf, in
 *     order), then an xor butterfly over 16, 8, 4, 2, 1.
 *   attention: q.k in order over d (fmaf, as the CPU); z: thread j of 256
 *     sums keys j, j+256, ... in order, the warps' butterflies, then warps
 *     0..7 in order; p.v per dim: the keys in 8 contiguous ranges
 *     [w n / 8, (w+1) n / 8) of the row's n keys, each summed in key order,
 *     the ranges added in order.
 * Every function enqueues on s (capturable) and takes device pointers;
 * strides are in elements. */
#ifndef DSP_KERNELS_CUDA_LAYERS_H
#define DSP_KERNELS_CUDA_LAYERS_H
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A bf16 view: rows x heads x dim (heads = 1 for 2-D views). */
typedef struct {
  void *data;
  int64_t rows, heads, dim;
  int64_t s_row, s_head, s_dim;
} dsp_cu_view;

void dsp_cu_embed(const dsp_cu_view *table, const int32_t *ids, int64_t t, const dsp_cu_view *out, cudaStream_t s);
void dsp_cu_rmsnorm(const dsp_cu_view *x, const uint16_t *w, float eps, const dsp_cu_view *out, cudaStream_t s);
/* x = bf16(x + y) in place ([M, N] views, heads = 1), then out = RMSNorm(x) as dsp_cu_rmsnorm. */
void dsp_cu_add_rmsnorm(const dsp_cu_view *x, const dsp_cu_view *y, const uint16_t *w, float eps,
                        const dsp_cu_view *out, cudaStream_t s);
/* A decoder layer's attention inputs: q, k = RoPE(RMSNorm(.)) in place, k's
 * and v's rows into cache rows idx[t]; the bits of rmsnorm, rope and
 * scatter_rows one after another. Returns 0 (nothing launched) unless the
 * head dim is 32, 64, 128, 192 or 256. */
typedef struct {
  dsp_cu_view q, k;          /* [T, Hq, D], [T, Hkv, D] */
  dsp_cu_view v;             /* [T, Hkv * D] (heads = 1) */
  const uint16_t *q_norm, *k_norm;
  float eps;
  const int32_t *pos;        /* [T] */
  const uint16_t *cos, *sin; /* [P, D/2] contiguous */
  const int64_t *idx;        /* [T] cache rows */
  dsp_cu_view k_cache, v_cache; /* [N, Hkv * D] (heads = 1) */
} dsp_cu_attn_in_args;
int dsp_cu_attn_in(const dsp_cu_attn_in_args *a, cudaStream_t s);
/* x [T, N, D] in place; cos, sin [P, D/2]. */
void dsp_cu_rope(const dsp_cu_view *x, const int32_t *pos, const uint16_t *cos, const uint16_t *sin, cudaStream_t s);
/* 2-D views [M, N] (heads = 1): out = bf16(a + b). */
void dsp_cu_add(const dsp_cu_view *a, const dsp_cu_view *b, const dsp_cu_view *out, cudaStream_t s);
/* out = bf16(bf16(silu(g)) * u). */
void dsp_cu_silu_mul(const dsp_cu_view *g, const dsp_cu_view *u, const dsp_cu_view *out, cudaStream_t s);
/* out = bf16(x + bf16(p)); p fp32 [M, N] with row stride ps. */
void dsp_cu_round_add(const dsp_cu_view *x, const float *p, int64_t ps, const dsp_cu_view *out, cudaStream_t s);
/* dst row idx[t] = src row t (bf16 rows of width src->dim). */
void dsp_cu_scatter_rows(const dsp_cu_view *src, const int64_t *idx, const dsp_cu_view *dst, cudaStream_t s);
/* dst row t = src row idx[t], t < dst->rows. */
void dsp_cu_gather_rows(const dsp_cu_view *src, const int64_t *idx, const dsp_cu_view *dst, cudaStream_t s);

typedef struct {
  dsp_cu_view q;             /* [T, Hq, D] */
  const uint16_t *k, *v;     /* [slots][max_len][Hkv][D] */
  int64_t slots, max_len, kv_heads, kv_stride; /* kv_stride: elements per cache row */
  const int32_t *row_slot, *row_keys; /* [T] device: the slot a row reads, the keys it sees */
  float scale;
  dsp_cu_view out;           /* [T, Hq, D] (a 2-D [T, Hq*D] view as heads of D) */
  int rows_per_block, heads_per_block, pairs; /* the launch (dsp_cu_attention_config) */
  int key_split;             /* tensor-core form: blocks per cluster sharing a run's keys (1 none) */
  int warps, q_vec;          /* tensor-core form: warps per block (4, 8); q read in 16-byte pieces */
  int q_reg;                 /* tensor-core form: q fragments in registers (1), or two m-tiles' in shared memory */
  int per_sm;                /* tensor-core form (stored scores): its blocks an SM's shared memory holds (1 or 2) */
} dsp_cu_attention_args;
/* Chooses the launch (attention.cu): row_group consecutive rows that read one
 * slot (the caller's hint: a draft block's rows; 1 none) and a KV head's query
 * heads share one block's loads where the shared memory (smem_limit bytes per
 * block) and the SM count leave it worth it. Launch choices never change a
 * result. 1, or 0 when D is above 256 or the cache too long for one head. */
int dsp_cu_attention_config(dsp_cu_attention_args *a, int row_group, int sms, size_t smem_limit);
/* Raises the kernels' shared-memory limit to smem_limit once per device. */
cudaError_t dsp_cu_attention_prepare(size_t smem_limit);
void dsp_cu_attention(const dsp_cu_attention_args *a, cudaStream_t s);
/* The tensor-core form (attention_tc.cu; the default, DSPARK_CUDA_ATTENTION=fp32 opts out), with its
 * own fixed orders: q.k in 16-dim tensor-core groups; z and p.v over 128-key
 * chunks added in order (the file's head says how within a chunk). Head dims
 * 32, 64 and 128, GQA groups up to 32, 16-byte aligned caches with kv_stride % 8
 * == 0, and a cache short enough for one row's (row, head) pairs' scores in
 * shared memory, or with long_caches in a cluster's shared memory; the
 * config returns 0 otherwise (a property of the shapes, never of the batch).
 * It splits a run's keys over a cluster of up to 8 blocks, in whole chunks,
 * while the launch's blocks leave sms free, or for every call of a cache past
 * one block (the sums keep their chunk order, so no bit changes). Blocks of
 * two m-tiles read q from shared memory where that lets two of them share an
 * SM (q_form 0), always (2) or never (1): again the same bits. */
int dsp_cu_attention_tc_config(dsp_cu_attention_args *a, int row_group, int sms, size_t smem_limit, int long_caches,
                               int q_form);
cudaError_t dsp_cu_attention_tc_prepare(size_t smem_limit);
void dsp_cu_attention_tc(const dsp_cu_attention_args *a, cudaStream_t s);
/* The tensor-core form's bits for long runs of rows on a slot (attention_pf.cu): the scores computed three times
 * instead of stored, so 64 (row, head) pairs share each staged key tile and any cache length fits. Head dims 32,
 * 64 and 128, groups up to 64. Returns 1 when the runs (row_group) fill its blocks and the blocks the sms, with
 * need 1 for any rows, with need 2 also for runs of 16 pairs or more whose blocks fill the sms. */
int dsp_cu_attention_pf_config(dsp_cu_attention_args *a, int row_group, int sms, size_t smem_limit, int need);
cudaError_t dsp_cu_attention_pf_prepare(size_t smem_limit);
void dsp_cu_attention_pf(const dsp_cu_attention_args *a, cudaStream_t s);

/* Per row r of logits [R, N] (bf16, row stride ls): the selection key
 * (devmath.cuh) of the best column < n_valid, ids id0 + column; rows whose
 * temperature t_row[r] > 0 score fp32(logit / T) + g(seed_row[r], pos[r], id).
 * t_row, seed_row, pos: [R] device, or t_row NULL (greedy). keys: [R] device (0 where
 * n_valid is 0). */
cudaError_t dsp_cu_select(const uint16_t *logits, int64_t R, int64_t ls, int64_t n_valid, int64_t id0, const float *t_row,
                   const uint64_t *seed_row, const int64_t *pos, unsigned long long *keys, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
