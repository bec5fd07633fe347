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

#include "kernels/accept_args.h"
#include "kernels/kda_types.h"
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
/* A row-parallel weight (o, down) in K slices: each output the halving tree of
 * its slices' sums (kernels/cpu/slices.h), the order that gives the same bits
 * at every TP size that is a power of two dividing the model's slices
 * (docs/CONTRACTS.md). The CPU backend takes it (K a multiple of 32 x slices,
 * else DSP_ERR_SHAPE); CUDA takes what its kernels run (kernels/cuda/gemm.h:
 * dsp_cuda_gemm_slice) and otherwise keeps one sum over K, which the weight's
 * description then says. *taken: the slices the weight now runs (1: one sum
 * over K). Before the weight's first product. */
dsp_status dsp_op_weight_slice(dsp_backend *be, dsp_weight *w, int32_t slices, int32_t *taken);
/* Which kernel the weight's products run (e.g. "avx512f panels", "own wgmma kernel, ..."). */
const char *dsp_op_weight_describe(const dsp_backend *be, const dsp_weight *w);

/* c[m, n] = sum_k a[m, k] * w[n, k] (contract 2): a [M, K] BF16, c [M, N] BF16
 * (rounded once) or F32 (the accumulator as is: partial sums a row-parallel
 * layer all-reduces) with unit column stride; rows may be strided. */
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

/* ---- the models' layers (numerics: docs/CONTRACTS.md, "The models") ------------
 * Integer arrays (ids, positions, row indices, sequence metadata) are backend
 * memory too, so a captured graph can replay them after they are restaged. */

/* out[t] = table[ids[t]], t < T: table [V, H], out [T, H] BF16. */
dsp_status dsp_op_embed(dsp_backend *be, int dev, const dsp_tensor *table, const int32_t *ids, int64_t t,
                        dsp_tensor *out);
/* RMSNorm over the last dim of x ([R, D] or [R, N, D], any strides): out =
 * bf16(w * bf16(x / sqrt(mean(x^2) + eps))); w [D] BF16. out may be x. */
dsp_status dsp_op_rmsnorm(dsp_backend *be, int dev, const dsp_tensor *x, const dsp_tensor *w, float eps,
                          dsp_tensor *out);
/* NeoX rotate-half RoPE in place on x [T, N, D] at positions pos[t], from
 * tables cos, sin [P, D/2] BF16. */
dsp_status dsp_op_rope(dsp_backend *be, int dev, dsp_tensor *x, const int32_t *pos, const dsp_tensor *cos,
                       const dsp_tensor *sin);
/* out = bf16(a + b), [M, N] BF16 views. */
dsp_status dsp_op_add(dsp_backend *be, int dev, const dsp_tensor *a, const dsp_tensor *b, dsp_tensor *out);
/* out = bf16(bf16(silu(g)) * u), [M, N] BF16 views. */
dsp_status dsp_op_silu_mul(dsp_backend *be, int dev, const dsp_tensor *g, const dsp_tensor *u, dsp_tensor *out);
/* dst row idx[t] = src row t, t < T ([T, W] and [N, W] views of one dtype; idx int64). */
dsp_status dsp_op_scatter_rows(dsp_backend *be, int dev, const dsp_tensor *src, const int64_t *idx, dsp_tensor *dst);

/* The residual add and the next RMSNorm in one call: x = bf16(x + y) in
 * place, then out = rmsnorm(x, w, eps); x, y, out [M, N] BF16 (out not x).
 * The bits are those of add then rmsnorm. */
dsp_status dsp_op_add_rmsnorm(dsp_backend *be, int dev, dsp_tensor *x, const dsp_tensor *y, const dsp_tensor *w,
                              float eps, dsp_tensor *out);

/* A decoder layer's attention inputs in one call, with the bits of rmsnorm
 * (q with q_norm, k with k_norm), rope (both at pos) and scatter_rows (k's
 * rows, then v's, into rows idx[t] of the caches) called in that order. q
 * [T, Hq, D] and k [T, Hkv, D] (contiguous heads) change in place; v [T,
 * Hkv*D]; k_cache, v_cache [N, Hkv*D]. Backends fuse it where they can. */
typedef struct {
  dsp_tensor *q, *k;
  const dsp_tensor *v;
  const dsp_tensor *q_norm, *k_norm;
  float eps;
  const int32_t *pos;
  const dsp_tensor *cos, *sin;
  const int64_t *idx;
  dsp_tensor *k_cache, *v_cache;
} dsp_op_attn_in_args;
dsp_status dsp_op_attn_in(dsp_backend *be, int dev, const dsp_op_attn_in_args *a);

/* x [M, N] F32 (contiguous rows) summed over the ranks of comm, in place: a
 * row-parallel product's partials. On CUDA the NCCL call is enqueued on device
 * dev's stream after the work before it (capturable); one rank leaves x as is. */
dsp_status dsp_op_allreduce(dsp_backend *be, int dev, dsp_comm *comm, dsp_tensor *x);
/* After it, dsp_op_allreduce of up to count floats allocates nothing (so a graph can capture it). */
dsp_status dsp_op_allreduce_reserve(dsp_backend *be, int dev, dsp_comm *comm, int64_t count);
/* Memory in use for device dev: on CUDA the GPU's (total minus free: the runtime allocates up front, so after
 * loading and the first calls it is the peak); on the CPU this process's peak resident set. */
dsp_status dsp_op_memory_used(dsp_backend *be, int dev, size_t *bytes);

/* out = bf16(x + bf16(p)): x, out [M, N] BF16, p [M, N] F32 (an all-reduced
 * row-parallel product; out may be x). */
dsp_status dsp_op_round_add(dsp_backend *be, int dev, const dsp_tensor *x, const dsp_tensor *p, dsp_tensor *out);

/* Per row r of logits [R, N] BF16 the selection key (core/select.h,
 * dsp_select_key: a plain max picks the best under contract 4's order) of
 * the best column < n_valid, ids id0 + column; rows with t_row[r] > 0 score
 * fp32(logit / T) + g(seed_row[r], pos[r], id) (contract 5). t_row, seed_row,
 * pos: [R] backend memory, or t_row NULL (every row greedy). keys: [R]
 * backend memory (0 where n_valid is 0). */
typedef struct {
  const dsp_tensor *logits;
  int64_t id0, n_valid;
  const float *t_row;
  const uint64_t *seed_row;
  const int64_t *pos;
  uint64_t *keys;
} dsp_op_select_args;
dsp_status dsp_op_select(dsp_backend *be, int dev, const dsp_op_select_args *a);

/* Speculative sampling's acceptance: kernels/accept_args.h says what it computes from what. */
dsp_status dsp_op_accept_workspace(dsp_backend *be, int64_t vocab, int32_t max_seqs, int32_t gamma, size_t *ws_bytes,
                                   size_t *hs_bytes);
dsp_status dsp_op_accept(dsp_backend *be, int dev, const dsp_op_accept_args *a);
/* The same acceptance on host memory whatever the backend (the logits gathered from several ranks or devices),
 * over nthreads threads; ws is host memory of dsp_op_accept_host_bytes. */
size_t dsp_op_accept_host_bytes(int64_t vocab, int32_t max_seqs, int32_t gamma, int nthreads);
void dsp_op_accept_host(const dsp_op_accept_args *a, int nthreads);

/* GQA attention of rows over KV-cache slots: row t (a query of q) reads slot
 * row_slot[t] and sees its keys 0 .. row_keys[t] - 1 (causal: its position +
 * 1; a block that sees all of itself: the block's end). row_slot, row_keys:
 * [T] backend memory; each row's result depends on that row alone. Values
 * outside [0, slots) and [1, max_len] are clamped there. */
typedef struct {
  const dsp_tensor *q;          /* [T, Hq, D] BF16 */
  const dsp_bf16 *k, *v;        /* caches [slots][max_len][Hkv][D] BF16 */
  int64_t slots, max_len, kv_heads;
  int64_t kv_stride;            /* elements from one cache row to the next (0: kv_heads * D) */
  const int32_t *row_slot, *row_keys;
  float scale;
  dsp_tensor *out;              /* [T, Hq * D] or [T, Hq, D] BF16 */
  int row_group;                /* a hint: runs of this many rows read one slot (0, 1: none); never changes a result */
} dsp_op_attention_args;
dsp_status dsp_op_attention(dsp_backend *be, int dev, const dsp_op_attention_args *a);

/* dst row t = src row idx[t], t < T ([T, W] and [N, W] BF16 views; idx int64 backend memory). */
dsp_status dsp_op_gather_rows(dsp_backend *be, int dev, const dsp_tensor *src, const int64_t *idx, dsp_tensor *dst);

/* ---- Kimi Delta Attention: a KDA layer between its projections and o_proj ------
 * (numerics: kernels/cpu/kda.h). The short conv with SiLU over q | k | v, the
 * gate from f, beta = sigmoid(b), the recurrence in the form asked for, then
 * the gated output RMSNorm with z; every sequence's conv and recurrent states
 * read (unless has_state is 0) and written back to its slot. Views are rows of
 * backend memory with the strides given (elements); seqs' arrays are host
 * memory; ws holds dsp_op_kda_workspace's bytes for up to max_tokens tokens.
 * A batch is given either as seqs (host arrays, staged by the call itself) or
 * as staged (dsp_op_kda_stage, once for all the batch's layers); only a staged
 * call enqueues nothing but kernels, so only it may be captured in a graph. */
typedef struct {
  dsp_kda_dims dims;                   /* this rank's heads */
  int32_t conv_width;
  int form;                            /* DSP_KDA_CHUNKED or DSP_KDA_RECURRENT */
  const dsp_kda_seqs *seqs;            /* or NULL with staged */
  const dsp_kda_staged *staged;        /* wins over seqs */
  int32_t value_tile;                  /* value columns per tile: 0 the backend's choice, or 16, 32, 64;
                                          never changes a result */
  const dsp_bf16 *qkv;                 /* [T, 2 H K + HV V] before the conv */
  int64_t qkv_tok;
  const float *conv_w;                 /* [2 H K + HV V][W] */
  const dsp_bf16 *f;                   /* [T, HV K] the gate's input */
  int64_t f_tok;
  const float *A_log, *dt_bias;        /* [HV], [HV K] */
  dsp_kda_gate_cfg gate;
  const dsp_bf16 *b;                   /* [T, HV] */
  int64_t b_tok;
  const dsp_bf16 *z;                   /* [T, HV V] the output gate */
  int64_t z_tok;
  const float *norm_w;                 /* [V] */
  float eps;
  dsp_kda_state *state;
  dsp_kda_conv_state *conv_state;
  dsp_bf16 *y;                         /* [T, HV V] */
  int64_t y_tok;
  void *ws;
  size_t ws_bytes;
} dsp_op_kda_args;
dsp_status dsp_op_kda_workspace(dsp_backend *be, const dsp_kda_dims *d, int32_t conv_width, int64_t max_tokens,
                                size_t *bytes);
dsp_status dsp_op_kda(dsp_backend *be, int dev, const dsp_op_kda_args *a);
/* Staging a batch for up to max_seqs sequences and max_tokens tokens into buf,
 * backend memory of stage_bytes' size: the batch checked against state pools
 * of num_slots (dsp_kda_seqs' rules) and copied there with its token and chunk
 * maps; *out points into buf. The host arrays may change once it returns; buf
 * must not be staged again while an enqueued op or a replay still reads it. */
dsp_status dsp_op_kda_stage_bytes(int32_t max_seqs, int64_t max_tokens, size_t *bytes);
dsp_status dsp_op_kda_stage(dsp_backend *be, int dev, const dsp_kda_seqs *s, int32_t num_slots, void *buf,
                            size_t bytes, dsp_kda_staged *out);
/* Slot src's recurrent and conv states into slot dst (an accepted prefix). */
dsp_status dsp_op_kda_copy(dsp_backend *be, int dev, const dsp_kda_dims *d, const dsp_kda_conv_dims *cd,
                           dsp_kda_state *st, dsp_kda_conv_state *cs, int32_t src, int32_t dst);

/* ---- staging and graphs ------------------------------------------------------------
 * Host memory the device reads and writes asynchronously (pinned on CUDA):
 * an async upload reads src when the stream gets there, an async download
 * fills dst by the next dsp_op_sync. Both may be captured in a graph, which
 * then reads and writes the same host buffers at every replay. */
dsp_status dsp_op_host_alloc(dsp_backend *be, int dev, size_t bytes, void **out);
void dsp_op_host_release(dsp_backend *be, int dev, void *p);
dsp_status dsp_op_upload_async(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes);
dsp_status dsp_op_download_async(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes);

/* Capture of the operations device dev enqueues between begin and end into a
 * graph replayed by dsp_op_replay (CUDA graphs; the CPU has none: begin
 * returns DSP_ERR_UNSUPPORTED). Nothing runs while capturing. */
typedef struct dsp_op_graph dsp_op_graph;
int dsp_op_has_graphs(const dsp_backend *be);
dsp_status dsp_op_capture_begin(dsp_backend *be, int dev);
dsp_status dsp_op_capture_end(dsp_backend *be, int dev, dsp_op_graph **out);
dsp_status dsp_op_replay(dsp_backend *be, int dev, dsp_op_graph *g);
void dsp_op_graph_free(dsp_backend *be, dsp_op_graph *g);

#ifdef __cplusplus
}
#endif
#endif
