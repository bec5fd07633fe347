/* A Qwen3 decoder layer on the backend's operations, shared by the target
 * (src/model/qwen3.c) and the DSpark draft (src/model/dspark.c): one TP rank's
 * weights (q, k and v fused in one product, gate and up in another; o and
 * down row-parallel) and one layer's forward over M rows whose keys and values
 * go to a KV cache and whose attention reads it. */
#ifndef DSP_MODEL_DECODER_H
#define DSP_MODEL_DECODER_H
#include "backend/backend.h"
#include "io/hf_dir.h"

/* One TP rank's share of a Qwen3-shaped model. */
typedef struct {
  int64_t hidden, head_dim, heads, kv_heads, intermediate; /* the model's */
  int64_t hq, hkv, inter;                                  /* this rank's heads, kv heads, MLP columns */
  int32_t tp, tp_rank;
  int32_t row_parallel; /* o and down as fp32 partials, all-reduced, rounded once (TP > 1, or DSPARK_ROW_PARALLEL) */
  double eps;
} dsp_dec_shape;

typedef struct {
  dsp_weight *qkv, *o, *gate_up, *down;
  dsp_tensor in_norm, post_norm, q_norm, k_norm; /* device vectors (their data is freed with the layer) */
  int32_t o_slices, down_slices; /* the K slices o and down run (1: one sum over K) */
} dsp_dec_layer;

/* The activations of a forward, views of as many rows as it may run. */
typedef struct {
  dsp_tensor x, h, qkv, attn, o, gu, act, part; /* part: F32 row-parallel partials (row_parallel) */
} dsp_dec_act;

/* Where a layer's keys and values go and what its attention reads. */
typedef struct {
  dsp_bf16 *k_cache, *v_cache;     /* [slots][max_len] rows of kv_stride elements, this layer's at column 0 */
  int64_t kv_stride, slots, max_len;
  const int64_t *rows;             /* [M] device: the cache row (slot * max_len + position) of each row's K/V */
  const int32_t *pos, *rslot, *rkeys; /* [M] device: position, slot read, keys seen */
  const dsp_tensor *rope_cos, *rope_sin;
  dsp_comm *comm;                  /* the TP communicator (row_parallel's all-reduce) */
  int row_group;                   /* runs of this many rows read one slot (a draft block): a speed hint */
  /* next_norm: after its last residual the layer writes h = next_norm(x) (the next layer's input
   * norm, or the final norm; one fused call at TP 1); h_ready: the layer before did, so the input
   * norm is skipped */
  const dsp_tensor *next_norm;
  int h_ready;
} dsp_dec_io;

/* Tensor `name` of dir: its file, dtype and shape; refused unless BF16 (or F32 when f32_ok). */
dsp_status dsp_dec_lookup(const dsp_hf_dir *dir, const char *name, int f32_ok, dsp_st_file **f, dsp_dtype *dt,
                          int32_t *nd, int64_t sh[DSP_MAX_DIMS]);
/* A BF16 tensor of a checkpoint directory with the shape expected (cols 0: a vector). */
dsp_status dsp_dec_tensor(const dsp_hf_dir *dir, const char *name, int64_t rows, int64_t cols, dsp_tensor *t);
/* A device vector from a host view; *mem is what to release. */
dsp_status dsp_dec_vector(dsp_backend *be, int dev, const dsp_tensor *h, dsp_tensor *out, void **mem);
/* cos / sin [n][D/2] as transformers builds them: inv_freq = 1 / theta^(2i/D)
 * in fp32, the angle position * inv_freq in fp32, its cosine rounded to fp32 then bf16. */
void dsp_dec_rope_tables(int64_t n, int64_t D, double theta, dsp_bf16 *cs, dsp_bf16 *sn);
/* Rows [r0, r0 + n) of a [R, C] view into dst (contiguous). */
void dsp_dec_copy_rows(dsp_bf16 *dst, const dsp_tensor *t, int64_t r0, int64_t n);
/* Layer l of dir, names prefix + "self_attn.q_proj.weight" etc. (prefix e.g.
 * "model.layers.3."); host: scratch of max((hq + 2 hkv) D, 2 inter) x H values. */
dsp_status dsp_dec_layer_load(dsp_backend *be, int dev, const dsp_hf_dir *dir, const char *prefix,
                              const dsp_dec_shape *s, dsp_bf16 *host, dsp_dec_layer *L);
void dsp_dec_layer_free(dsp_backend *be, int dev, dsp_dec_layer *L);
/* How a layer's o and down products sum over K, for a start-up line: "o and down in N K slices a rank
 * (TP-invariant order)" or "o and down in one sum over K". */
void dsp_dec_slices_note(const dsp_dec_layer *L, char *buf, size_t n);
/* Activations for rows rows (device memory, tracked in mem[*nmem]). */
dsp_status dsp_dec_act_alloc(dsp_backend *be, int dev, const dsp_dec_shape *s, int64_t rows, dsp_dec_act *a,
                             void **mem, int *nmem);
/* x = layer(x) over M rows: input norm (unless io->h_ready), q/k/v, q/k
 * norms, RoPE at pos, K/V into the cache rows, attention, o (+ all-reduce at
 * TP > 1), residual, post-attention norm, SwiGLU (+ all-reduce), residual
 * (and h = io->next_norm(x) where set). */
dsp_status dsp_dec_layer_forward(dsp_backend *be, int dev, const dsp_dec_layer *L, const dsp_dec_shape *s,
                                 dsp_dec_act *a, int64_t M, const dsp_dec_io *io);

/* Row helpers on 2-D views. */
static inline dsp_tensor dsp_dec_rows(dsp_tensor t, int64_t rows) {
  t.shape[0] = rows;
  return t;
}
/* Columns [c0, c0 + n) of a 2-D view. */
static inline dsp_tensor dsp_dec_cols(dsp_tensor t, int64_t c0, int64_t n) {
  t.data = (char *)t.data + (size_t)(c0 * t.stride[1]) * dsp_dtype_size(t.dtype);
  t.shape[1] = n;
  return t;
}
/* rows x heads x D view at column c0 of a 2-D [rows, W] view. */
static inline dsp_tensor dsp_dec_heads(dsp_tensor t, int64_t rows, int64_t c0, int64_t heads, int64_t d) {
  dsp_tensor v = {.data = (char *)t.data + (size_t)c0 * dsp_dtype_size(t.dtype), .dtype = t.dtype, .ndim = 3,
                  .shape = {rows, heads, d}, .stride = {t.stride[0], d, 1}};
  return v;
}

#endif
