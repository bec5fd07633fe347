/* The operations' shared checks, then the backend's entry. */
#include "backend/ops.h"

#include <math.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/status.h"
#include "kernels/cpu/spec_accept.h"

static dsp_status check_dev(const dsp_backend *be, int dev) {
  if (!be) return dsp_fail(DSP_ERR_ARG, "op: no backend");
  if (dev < 0 || dev >= be->ndev) return dsp_fail(DSP_ERR_ARG, "op: device %d outside [0, %d)", dev, be->ndev);
  return DSP_OK;
}

dsp_status dsp_op_alloc(dsp_backend *be, int dev, size_t bytes, void **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "op alloc: NULL output");
  *out = NULL;
  DSP_TRY(check_dev(be, dev));
  return be->ops->alloc(be, dev, bytes, out);
}

void dsp_op_release(dsp_backend *be, int dev, void *p) {
  if (p && check_dev(be, dev) == DSP_OK) be->ops->release(be, dev, p);
}

dsp_status dsp_op_upload(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes) {
  DSP_TRY(check_dev(be, dev));
  if (bytes && (!dst || !src)) return dsp_fail(DSP_ERR_ARG, "op upload: NULL buffer for %zu bytes", bytes);
  return bytes ? be->ops->upload(be, dev, dst, src, bytes) : DSP_OK;
}

dsp_status dsp_op_download(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes) {
  DSP_TRY(check_dev(be, dev));
  if (bytes && (!dst || !src)) return dsp_fail(DSP_ERR_ARG, "op download: NULL buffer for %zu bytes", bytes);
  return bytes ? be->ops->download(be, dev, dst, src, bytes) : DSP_OK;
}

dsp_status dsp_op_copy(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes) {
  DSP_TRY(check_dev(be, dev));
  if (bytes && (!dst || !src)) return dsp_fail(DSP_ERR_ARG, "op copy: NULL buffer for %zu bytes", bytes);
  return bytes ? be->ops->copy(be, dev, dst, src, bytes) : DSP_OK;
}

dsp_status dsp_op_sync(dsp_backend *be, int dev) {
  DSP_TRY(check_dev(be, dev));
  return be->ops->sync(be, dev);
}

dsp_status dsp_op_weight_slice(dsp_backend *be, dsp_weight *w, int32_t slices, int32_t *taken) {
  if (!be || !w || slices < 1 || !taken) return dsp_fail(DSP_ERR_ARG, "op weight slice: bad arguments");
  *taken = 1;
  return be->ops->weight_slice && slices > 1 ? be->ops->weight_slice(be, w, slices, taken) : DSP_OK;
}

dsp_status dsp_op_weight_create(dsp_backend *be, int dev, const dsp_tensor *host, int strict, dsp_weight **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "op weight: NULL output");
  *out = NULL;
  DSP_TRY(check_dev(be, dev));
  if (!host || host->dtype != DSP_BF16 || host->ndim != 2 || host->shape[0] < 1 || host->shape[1] < 1 ||
      host->stride[1] != 1 || host->stride[0] < host->shape[1] || !host->data)
    return dsp_fail(DSP_ERR_SHAPE, "op weight: want a non-empty [N, K] BF16 host view with contiguous rows");
  return be->ops->weight_create(be, dev, host, strict, out);
}

void dsp_op_weight_free(dsp_backend *be, dsp_weight *w) {
  if (w && be) be->ops->weight_free(be, w);
}

const char *dsp_op_weight_describe(const dsp_backend *be, const dsp_weight *w) {
  return w && be ? be->ops->weight_describe(w) : "";
}

dsp_status dsp_op_gemm(dsp_backend *be, int dev, const dsp_tensor *a, const dsp_weight *w, dsp_tensor *c) {
  DSP_TRY(check_dev(be, dev));
  if (!a || !w || !c) return dsp_fail(DSP_ERR_ARG, "op gemm: NULL argument");
  if (a->dtype != DSP_BF16 || a->ndim != 2 || c->ndim != 2 || (c->dtype != DSP_BF16 && c->dtype != DSP_F32))
    return dsp_fail(DSP_ERR_SHAPE, "op gemm: want a [M, K] BF16 and c [M, N] BF16 or F32");
  if (a->stride[1] != 1 || c->stride[1] != 1 || c->shape[0] != a->shape[0])
    return dsp_fail(DSP_ERR_SHAPE, "op gemm: rows of a and c must agree and be contiguous");
  return be->ops->gemm(be, dev, a, w, c);
}

dsp_status dsp_op_markov_step(dsp_backend *be, int dev, const dsp_op_markov_args *a) {
  DSP_TRY(check_dev(be, dev));
  if (!a || !a->e || !a->w2 || !a->base || !a->best_val || !a->best_id)
    return dsp_fail(DSP_ERR_ARG, "op markov step: NULL argument");
  return be->ops->markov_step(be, dev, a);
}

/* ---- Kimi Delta Attention ---------------------------------------------------------- */
static dsp_status kda_present(const dsp_backend *be) {
  if (!be->ops->kda || !be->ops->kda_workspace)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "op kda: the %s backend has no KDA kernels yet (the CPU has)",
                    dsp_backend_kind_name(be->kind));
  return DSP_OK;
}

dsp_status dsp_op_kda_workspace(dsp_backend *be, const dsp_kda_dims *d, int32_t conv_width, int64_t max_tokens,
                                size_t *bytes) {
  if (!be || !d || !bytes || max_tokens < 1) return dsp_fail(DSP_ERR_ARG, "op kda workspace: bad argument");
  DSP_TRY(kda_present(be));
  return be->ops->kda_workspace(be, d, conv_width, max_tokens, bytes);
}

dsp_status dsp_op_kda(dsp_backend *be, int dev, const dsp_op_kda_args *a) {
  DSP_TRY(check_dev(be, dev));
  if (!a || !(a->seqs || a->staged) || !a->qkv || !a->conv_w || !a->f || !a->b || !a->z || !a->norm_w || !a->state ||
      !a->conv_state || !a->y || !a->ws)
    return dsp_fail(DSP_ERR_ARG, "op kda: NULL argument");
  if (a->form != DSP_KDA_CHUNKED && a->form != DSP_KDA_RECURRENT)
    return dsp_fail(DSP_ERR_ARG, "op kda: form %d is neither chunked nor recurrent", a->form);
  if (a->value_tile != 0 && a->value_tile != 16 && a->value_tile != 32 && a->value_tile != 64)
    return dsp_fail(DSP_ERR_ARG, "op kda: value tile %d (0, 16, 32 or 64)", (int)a->value_tile);
  if (a->staged && a->staged->num_slots > a->state->num_slots)
    return dsp_fail(DSP_ERR_RANGE, "op kda: a batch staged for %d slots, the state has %d",
                    (int)a->staged->num_slots, (int)a->state->num_slots);
  DSP_TRY(kda_present(be));
  return be->ops->kda(be, dev, a);
}

dsp_status dsp_op_kda_copy(dsp_backend *be, int dev, const dsp_kda_dims *d, const dsp_kda_conv_dims *cd,
                           dsp_kda_state *st, dsp_kda_conv_state *cs, int32_t src, int32_t dst) {
  DSP_TRY(check_dev(be, dev));
  if (!d || !cd || !st || !cs) return dsp_fail(DSP_ERR_ARG, "op kda copy: NULL argument");
  DSP_TRY(kda_present(be));
  if (!be->ops->kda_copy) return dsp_fail(DSP_ERR_UNSUPPORTED, "op kda copy: not on this backend");
  return be->ops->kda_copy(be, dev, d, cd, st, cs, src, dst);
}

/* ---- the models' layers ---------------------------------------------------------- */
static dsp_status check_view(const dsp_tensor *t, const char *op, const char *what, int nd_lo, int nd_hi,
                             dsp_dtype dt) {
  if (!t || !t->data) return dsp_fail(DSP_ERR_ARG, "op %s: %s is missing", op, what);
  if (t->ndim < nd_lo || t->ndim > nd_hi || t->dtype != dt)
    return dsp_fail(DSP_ERR_SHAPE, "op %s: %s is %d-D %s, want %d to %d dims of %s", op, what, (int)t->ndim,
                    dsp_dtype_name(t->dtype), nd_lo, nd_hi, dsp_dtype_name(dt));
  return DSP_OK;
}

static dsp_status same_shape(const dsp_tensor *a, const dsp_tensor *b, const char *op) {
  if (a->ndim != b->ndim) return dsp_fail(DSP_ERR_SHAPE, "op %s: views of %d and %d dims", op, a->ndim, b->ndim);
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return dsp_fail(DSP_ERR_SHAPE, "op %s: view shapes differ in dim %d", op, i);
  return DSP_OK;
}

/* Three [M, N] BF16 views of one shape (an element-wise op's a, b and out). */
static dsp_status check_three(const char *op, const dsp_tensor *a, const char *na, const dsp_tensor *b,
                              const char *nb, const dsp_tensor *out) {
  DSP_TRY(check_view(a, op, na, 2, 2, DSP_BF16));
  DSP_TRY(check_view(b, op, nb, 2, 2, DSP_BF16));
  DSP_TRY(check_view(out, op, "out", 2, 2, DSP_BF16));
  DSP_TRY(same_shape(a, b, op));
  return same_shape(a, out, op);
}

/* An RMSNorm's weight [D] (contiguous BF16) for rows of D, and its eps. */
static dsp_status check_norm(const char *op, const dsp_tensor *w, int64_t D, float eps) {
  DSP_TRY(check_view(w, op, "w", 1, 1, DSP_BF16));
  if (w->shape[0] != D || w->stride[0] != 1)
    return dsp_fail(DSP_ERR_SHAPE, "op %s: weight of %lld for rows of %lld", op, (long long)w->shape[0], (long long)D);
  if (!(eps > 0.0f)) return dsp_fail(DSP_ERR_ARG, "op %s: eps %g must be > 0", op, (double)eps);
  return DSP_OK;
}

dsp_status dsp_op_embed(dsp_backend *be, int dev, const dsp_tensor *table, const int32_t *ids, int64_t t,
                        dsp_tensor *out) {
  DSP_TRY(check_dev(be, dev));
  DSP_TRY(check_view(table, "embed", "table", 2, 2, DSP_BF16));
  DSP_TRY(check_view(out, "embed", "out", 2, 2, DSP_BF16));
  if (out->shape[0] < t || out->shape[1] != table->shape[1] || (t && !ids))
    return dsp_fail(DSP_ERR_SHAPE, "op embed: out [%lld, %lld] for %lld rows of width %lld", (long long)out->shape[0],
                    (long long)out->shape[1], (long long)t, (long long)table->shape[1]);
  return t ? be->ops->embed(be, dev, table, ids, t, out) : DSP_OK;
}

dsp_status dsp_op_rmsnorm(dsp_backend *be, int dev, const dsp_tensor *x, const dsp_tensor *w, float eps,
                          dsp_tensor *out) {
  DSP_TRY(check_dev(be, dev));
  DSP_TRY(check_view(x, "rmsnorm", "x", 2, 3, DSP_BF16));
  DSP_TRY(check_view(out, "rmsnorm", "out", 2, 3, DSP_BF16));
  DSP_TRY(same_shape(x, out, "rmsnorm"));
  DSP_TRY(check_norm("rmsnorm", w, x->shape[x->ndim - 1], eps));
  return be->ops->rmsnorm(be, dev, x, w, eps, out);
}

/* RoPE's tables cos, sin [P, D/2] (contiguous BF16) for heads of D, and positions where there are rows. */
static dsp_status check_rope(const char *op, int64_t D, const dsp_tensor *cos, const dsp_tensor *sin, int64_t rows,
                             const int32_t *pos) {
  DSP_TRY(check_view(cos, op, "cos", 2, 2, DSP_BF16));
  DSP_TRY(check_view(sin, op, "sin", 2, 2, DSP_BF16));
  if (D % 2 || cos->shape[1] * 2 != D || sin->shape[1] != cos->shape[1] || sin->shape[0] != cos->shape[0] ||
      cos->stride[1] != 1 || sin->stride[1] != 1 || cos->stride[0] != cos->shape[1] ||
      sin->stride[0] != sin->shape[1] || (rows && !pos))
    return dsp_fail(DSP_ERR_SHAPE, "op %s: head dim %lld against tables of %lld contiguous columns", op, (long long)D,
                    (long long)cos->shape[1]);
  return DSP_OK;
}

dsp_status dsp_op_rope(dsp_backend *be, int dev, dsp_tensor *x, const int32_t *pos, const dsp_tensor *cos,
                       const dsp_tensor *sin) {
  DSP_TRY(check_dev(be, dev));
  DSP_TRY(check_view(x, "rope", "x", 3, 3, DSP_BF16));
  DSP_TRY(check_rope("rope", x->shape[2], cos, sin, x->shape[0], pos));
  return x->shape[0] ? be->ops->rope(be, dev, x, pos, cos, sin) : DSP_OK;
}

dsp_status dsp_op_add(dsp_backend *be, int dev, const dsp_tensor *a, const dsp_tensor *b, dsp_tensor *out) {
  DSP_TRY(check_dev(be, dev));
  DSP_TRY(check_three("add", a, "a", b, "b", out));
  return be->ops->add(be, dev, a, b, out);
}

dsp_status dsp_op_silu_mul(dsp_backend *be, int dev, const dsp_tensor *g, const dsp_tensor *u, dsp_tensor *out) {
  DSP_TRY(check_dev(be, dev));
  DSP_TRY(check_three("silu_mul", g, "g", u, "u", out));
  return be->ops->silu_mul(be, dev, g, u, out);
}

dsp_status dsp_op_scatter_rows(dsp_backend *be, int dev, const dsp_tensor *src, const int64_t *idx, dsp_tensor *dst) {
  DSP_TRY(check_dev(be, dev));
  if (!src || !dst || src->ndim != 2 || dst->ndim != 2 || src->dtype != dst->dtype || src->shape[1] != dst->shape[1] ||
      (src->shape[0] && (!idx || !src->data || !dst->data)))
    return dsp_fail(DSP_ERR_SHAPE, "op scatter_rows: want [T, W] and [N, W] views of one dtype");
  return src->shape[0] ? be->ops->scatter_rows(be, dev, src, idx, dst) : DSP_OK;
}

dsp_status dsp_op_add_rmsnorm(dsp_backend *be, int dev, dsp_tensor *x, const dsp_tensor *y, const dsp_tensor *w,
                              float eps, dsp_tensor *out) {
  DSP_TRY(check_dev(be, dev));
  DSP_TRY(check_three("add_rmsnorm", x, "x", y, "y", out));
  if (out->data == x->data) return dsp_fail(DSP_ERR_ARG, "op add_rmsnorm: out must not be x");
  DSP_TRY(check_norm("add_rmsnorm", w, x->shape[1], eps)); /* before x changes */
  if (!be->ops->add_rmsnorm) {
    DSP_TRY(dsp_op_add(be, dev, x, y, x));
    return dsp_op_rmsnorm(be, dev, x, w, eps, out);
  }
  return be->ops->add_rmsnorm(be, dev, x, y, w, eps, out);
}

/* [T, H, D] with contiguous heads as [T, H*D]. */
static dsp_tensor heads_flat(const dsp_tensor *t) {
  const int64_t sh[2] = {t->shape[0], t->shape[1] * t->shape[2]};
  dsp_tensor f = dsp_tensor_view(t->data, t->dtype, 2, sh);
  f.stride[0] = t->stride[0];
  return f;
}

dsp_status dsp_op_attn_in(dsp_backend *be, int dev, const dsp_op_attn_in_args *a) {
  DSP_TRY(check_dev(be, dev));
  if (!a) return dsp_fail(DSP_ERR_ARG, "op attn_in: NULL argument");
  DSP_TRY(check_view(a->q, "attn_in", "q", 3, 3, DSP_BF16));
  DSP_TRY(check_view(a->k, "attn_in", "k", 3, 3, DSP_BF16));
  DSP_TRY(check_view(a->v, "attn_in", "v", 2, 2, DSP_BF16));
  const int64_t T = a->q->shape[0], hk = a->k->shape[1], D = a->q->shape[2];
  if (a->k->shape[0] != T || a->k->shape[2] != D || a->v->shape[0] != T || a->v->shape[1] != hk * D ||
      a->k->stride[2] != 1 || a->k->stride[1] != D)
    return dsp_fail(DSP_ERR_SHAPE, "op attn_in: q [%lld, %lld, %lld], k [%lld, %lld, %lld] (contiguous heads) and v "
                    "[%lld, %lld] disagree", (long long)T, (long long)a->q->shape[1], (long long)D,
                    (long long)a->k->shape[0], (long long)hk, (long long)a->k->shape[2], (long long)a->v->shape[0],
                    (long long)a->v->shape[1]);
  if (!a->k_cache || !a->v_cache || a->k_cache->ndim != 2 || a->v_cache->ndim != 2 ||
      a->k_cache->shape[1] != hk * D || a->v_cache->shape[1] != hk * D)
    return dsp_fail(DSP_ERR_SHAPE, "op attn_in: caches of rows of %lld wanted", (long long)(hk * D));
  if (be->ops->attn_in) {
    /* the parts' own checks first, so the fused form refuses exactly what the composition would */
    DSP_TRY(check_norm("attn_in (q)", a->q_norm, D, a->eps));
    DSP_TRY(check_norm("attn_in (k)", a->k_norm, D, a->eps));
    DSP_TRY(check_rope("attn_in", D, a->cos, a->sin, T, a->pos));
    if (T && (!a->idx || !a->k_cache->data || !a->v_cache->data))
      return dsp_fail(DSP_ERR_ARG, "op attn_in: NULL rows or caches");
    int done = 0;
    DSP_TRY(be->ops->attn_in(be, dev, a, &done));
    if (done) return DSP_OK;
  }
  DSP_TRY(dsp_op_rmsnorm(be, dev, a->q, a->q_norm, a->eps, a->q));
  DSP_TRY(dsp_op_rmsnorm(be, dev, a->k, a->k_norm, a->eps, a->k));
  DSP_TRY(dsp_op_rope(be, dev, a->q, a->pos, a->cos, a->sin));
  DSP_TRY(dsp_op_rope(be, dev, a->k, a->pos, a->cos, a->sin));
  const dsp_tensor kf = heads_flat(a->k);
  DSP_TRY(dsp_op_scatter_rows(be, dev, &kf, a->idx, a->k_cache));
  return dsp_op_scatter_rows(be, dev, a->v, a->idx, a->v_cache);
}

dsp_status dsp_op_attention(dsp_backend *be, int dev, const dsp_op_attention_args *a) {
  DSP_TRY(check_dev(be, dev));
  if (!a || !a->k || !a->v || !a->row_slot || !a->row_keys) return dsp_fail(DSP_ERR_ARG, "op attention: NULL argument");
  DSP_TRY(check_view(a->q, "attention", "q", 3, 3, DSP_BF16));
  DSP_TRY(check_view(a->out, "attention", "out", 2, 3, DSP_BF16));
  if (a->kv_heads < 1 || a->q->shape[1] % a->kv_heads || a->max_len < 1 || a->slots < 1 || a->q->stride[2] != 1)
    return dsp_fail(DSP_ERR_SHAPE, "op attention: %lld query heads over %lld kv heads, %lld slots of %lld",
                    (long long)a->q->shape[1], (long long)a->kv_heads, (long long)a->slots, (long long)a->max_len);
  if (a->kv_stride && a->kv_stride < a->kv_heads * a->q->shape[2])
    return dsp_fail(DSP_ERR_SHAPE, "op attention: cache rows of %lld elements hold %lld", (long long)a->kv_stride,
                    (long long)(a->kv_heads * a->q->shape[2]));
  if (a->out->shape[0] != a->q->shape[0])
    return dsp_fail(DSP_ERR_SHAPE, "op attention: %lld output rows for %lld queries", (long long)a->out->shape[0],
                    (long long)a->q->shape[0]);
  return a->q->shape[0] ? be->ops->attention(be, dev, a) : DSP_OK;
}

dsp_status dsp_op_gather_rows(dsp_backend *be, int dev, const dsp_tensor *src, const int64_t *idx, dsp_tensor *dst) {
  DSP_TRY(check_dev(be, dev));
  DSP_TRY(check_view(src, "gather_rows", "src", 2, 2, DSP_BF16));
  DSP_TRY(check_view(dst, "gather_rows", "dst", 2, 2, DSP_BF16));
  if (src->shape[1] != dst->shape[1] || (dst->shape[0] && !idx))
    return dsp_fail(DSP_ERR_SHAPE, "op gather_rows: rows of %lld into rows of %lld", (long long)src->shape[1],
                    (long long)dst->shape[1]);
  return dst->shape[0] ? be->ops->gather_rows(be, dev, src, idx, dst) : DSP_OK;
}

dsp_status dsp_op_host_alloc(dsp_backend *be, int dev, size_t bytes, void **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "op host alloc: NULL output");
  *out = NULL;
  DSP_TRY(check_dev(be, dev));
  return be->ops->host_alloc(be, dev, bytes, out);
}

void dsp_op_host_release(dsp_backend *be, int dev, void *p) {
  if (p && check_dev(be, dev) == DSP_OK) be->ops->host_release(be, dev, p);
}

dsp_status dsp_op_upload_async(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes) {
  DSP_TRY(check_dev(be, dev));
  if (bytes && (!dst || !src)) return dsp_fail(DSP_ERR_ARG, "op upload: NULL buffer for %zu bytes", bytes);
  return bytes ? be->ops->upload_async(be, dev, dst, src, bytes) : DSP_OK;
}

dsp_status dsp_op_download_async(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes) {
  DSP_TRY(check_dev(be, dev));
  if (bytes && (!dst || !src)) return dsp_fail(DSP_ERR_ARG, "op download: NULL buffer for %zu bytes", bytes);
  return bytes ? be->ops->download_async(be, dev, dst, src, bytes) : DSP_OK;
}

int dsp_op_has_graphs(const dsp_backend *be) { return be && be->ops->capture_begin != NULL; }

dsp_status dsp_op_capture_begin(dsp_backend *be, int dev) {
  DSP_TRY(check_dev(be, dev));
  if (!be->ops->capture_begin) return dsp_fail(DSP_ERR_UNSUPPORTED, "op capture: the %s backend has no graphs",
                                               dsp_backend_kind_name(be->kind));
  return be->ops->capture_begin(be, dev);
}

dsp_status dsp_op_capture_end(dsp_backend *be, int dev, dsp_op_graph **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "op capture: NULL output");
  *out = NULL;
  DSP_TRY(check_dev(be, dev));
  if (!be->ops->capture_end) return dsp_fail(DSP_ERR_UNSUPPORTED, "op capture: no graphs");
  return be->ops->capture_end(be, dev, out);
}

dsp_status dsp_op_replay(dsp_backend *be, int dev, dsp_op_graph *g) {
  DSP_TRY(check_dev(be, dev));
  if (!g || !be->ops->replay) return dsp_fail(DSP_ERR_ARG, "op replay: no graph");
  return be->ops->replay(be, dev, g);
}

void dsp_op_graph_free(dsp_backend *be, dsp_op_graph *g) {
  if (g && be && be->ops->graph_free) be->ops->graph_free(be, g);
}

dsp_status dsp_op_allreduce(dsp_backend *be, int dev, dsp_comm *comm, dsp_tensor *x) {
  DSP_TRY(check_dev(be, dev));
  if (!comm) return dsp_fail(DSP_ERR_ARG, "op allreduce: no communicator");
  DSP_TRY(check_view(x, "allreduce", "x", 2, 2, DSP_F32));
  if (x->shape[0] > 1 && x->stride[0] != x->shape[1])
    return dsp_fail(DSP_ERR_SHAPE, "op allreduce: x's rows must be contiguous (stride %lld, %lld columns)",
                    (long long)x->stride[0], (long long)x->shape[1]);
  if (be->ops->allreduce) return be->ops->allreduce(be, dev, comm, x);
  return dsp_comm_allreduce(comm, x->data, x->data, (size_t)(x->shape[0] * x->shape[1]), DSP_F32, DSP_REDUCE_SUM);
}

dsp_status dsp_op_allreduce_reserve(dsp_backend *be, int dev, dsp_comm *comm, int64_t count) {
  DSP_TRY(check_dev(be, dev));
  if (!comm || count < 0) return dsp_fail(DSP_ERR_ARG, "op allreduce_reserve: no communicator or a negative count");
  return dsp_comm_reserve(comm, (size_t)count);
}

dsp_status dsp_op_memory_used(dsp_backend *be, int dev, size_t *bytes) {
  DSP_TRY(check_dev(be, dev));
  if (!bytes) return dsp_fail(DSP_ERR_ARG, "op memory_used: NULL output");
  if (!be->ops->memory_used) return dsp_fail(DSP_ERR_UNSUPPORTED, "op memory_used: not known on this backend");
  return be->ops->memory_used(be, dev, bytes);
}

dsp_status dsp_op_round_add(dsp_backend *be, int dev, const dsp_tensor *x, const dsp_tensor *p, dsp_tensor *out) {
  DSP_TRY(check_dev(be, dev));
  DSP_TRY(check_view(x, "round_add", "x", 2, 2, DSP_BF16));
  DSP_TRY(check_view(p, "round_add", "p", 2, 2, DSP_F32));
  DSP_TRY(check_view(out, "round_add", "out", 2, 2, DSP_BF16));
  DSP_TRY(same_shape(x, p, "round_add"));
  DSP_TRY(same_shape(x, out, "round_add"));
  return be->ops->round_add(be, dev, x, p, out);
}

dsp_status dsp_op_select(dsp_backend *be, int dev, const dsp_op_select_args *a) {
  DSP_TRY(check_dev(be, dev));
  if (!a || !a->keys) return dsp_fail(DSP_ERR_ARG, "op select: NULL argument");
  DSP_TRY(check_view(a->logits, "select", "logits", 2, 2, DSP_BF16));
  if (a->n_valid < 0 || a->n_valid > a->logits->shape[1] || (a->t_row && (!a->seed_row || !a->pos)) ||
      a->id0 < 0 || a->id0 + a->n_valid > ((int64_t)1 << 31))
    return dsp_fail(DSP_ERR_ARG, "op select: %lld valid columns of %lld from id %lld, or sampling without seeds and "
                    "positions", (long long)a->n_valid, (long long)a->logits->shape[1], (long long)a->id0);
  if (a->logits->stride[1] != 1) return dsp_fail(DSP_ERR_SHAPE, "op select: logits need unit column stride");
  return a->logits->shape[0] ? be->ops->select(be, dev, a) : DSP_OK;
}

dsp_status dsp_op_accept_workspace(dsp_backend *be, int64_t vocab, int32_t max_seqs, int32_t gamma, size_t *ws_bytes,
                                   size_t *hs_bytes) {
  if (!be || !ws_bytes || !hs_bytes || vocab < 1 || max_seqs < 1 || gamma < 1)
    return dsp_fail(DSP_ERR_ARG, "op accept workspace: needs a backend, vocab, sequences and gamma >= 1");
  if (!be->ops->accept_workspace) return dsp_fail(DSP_ERR_UNSUPPORTED, "op accept: not on this backend");
  return be->ops->accept_workspace(be, vocab, max_seqs, gamma, ws_bytes, hs_bytes);
}

dsp_status dsp_op_accept(dsp_backend *be, int dev, const dsp_op_accept_args *a) {
  DSP_TRY(check_dev(be, dev));
  if (!be->ops->accept) return dsp_fail(DSP_ERR_UNSUPPORTED, "op accept: not on this backend");
  if (!a || !a->tlog || !a->qlog || !a->toff || !a->qoff || !a->drafts || !a->pos || !a->ndraft || !a->temp ||
      !a->seed || !a->accepted || !a->residual || !a->ws || a->vocab < 1 || a->nseq < 1 || a->gamma < 1)
    return dsp_fail(DSP_ERR_ARG, "op accept: NULL argument or empty batch");
  size_t ws = 0, hs = 0;
  DSP_TRY(be->ops->accept_workspace(be, a->vocab, a->nseq, a->gamma, &ws, &hs));
  if (a->ws_bytes < ws || a->hs_bytes < hs || (hs && !a->hs))
    return dsp_fail(DSP_ERR_ARG, "op accept: the workspace holds %zu + %zu bytes; %d x %d slots need %zu + %zu",
                    a->ws_bytes, a->hs_bytes, a->nseq, a->gamma, ws, hs);
  for (int32_t r = 0; r < a->nseq; r++) {
    if (a->ndraft[r] < 0 || a->ndraft[r] > a->gamma || !(a->temp[r] > 0.0f) || isinf(a->temp[r]))
      return dsp_fail(DSP_ERR_RANGE, "op accept: sequence %d has %d drafts (gamma %d) at temperature %g", r,
                      a->ndraft[r], a->gamma, (double)a->temp[r]);
    for (int32_t i = 0; i < a->ndraft[r]; i++) {
      const int64_t j = (int64_t)r * a->gamma + i;
      if (a->drafts[j] < 0 || a->drafts[j] >= a->vocab || a->toff[j] < 0 || a->qoff[j] < 0)
        return dsp_fail(DSP_ERR_RANGE, "op accept: sequence %d slot %d: draft %lld outside [0, %lld) or a negative "
                        "row offset", r, i, (long long)a->drafts[j], (long long)a->vocab);
    }
  }
  return be->ops->accept(be, dev, a);
}

size_t dsp_op_accept_host_bytes(int64_t vocab, int32_t max_seqs, int32_t gamma, int nthreads) {
  return dsp_cpu_accept_bytes(vocab, max_seqs, gamma, nthreads);
}

void dsp_op_accept_host(const dsp_op_accept_args *a, int nthreads) { dsp_cpu_accept(a, nthreads); }
