/* The Qwen3 decoder layer shared by the target and the draft (decoder.h). */
#include "model/decoder.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/ops.h"
#include "core/bf16.h"
#include "core/env.h"
#include "core/status.h"
#include "core/tensor.h"

dsp_status dsp_dec_lookup(const dsp_hf_dir *dir, const char *name, int f32_ok, dsp_st_file **f, dsp_dtype *dt,
                          int32_t *nd, int64_t sh[DSP_MAX_DIMS]) {
  DSP_TRY(dsp_hf_dir_find(dir, name, f));
  DSP_TRY(dsp_st_info(*f, name, dt, nd, sh));
  if (*dt != DSP_BF16 && !(f32_ok && *dt == DSP_F32))
    return dsp_fail(DSP_ERR_DTYPE, "%s: tensor '%s' is %s; dspark runs BF16 weights%s", dsp_st_path(*f), name,
                    dsp_dtype_name(*dt), f32_ok ? " (or F32 here)" : "");
  return DSP_OK;
}

dsp_status dsp_dec_tensor(const dsp_hf_dir *dir, const char *name, int64_t rows, int64_t cols, dsp_tensor *t) {
  dsp_st_file *f;
  dsp_dtype dt;
  int32_t nd;
  int64_t sh[DSP_MAX_DIMS];
  DSP_TRY(dsp_dec_lookup(dir, name, 0, &f, &dt, &nd, sh));
  const int want_nd = cols ? 2 : 1;
  if (nd != want_nd || sh[0] != rows || (cols && sh[1] != cols))
    return dsp_fail(DSP_ERR_SHAPE, "%s: tensor '%s' has shape [%lld%s%lld], config.json says [%lld%s%lld]",
                    dsp_st_path(f), name, (long long)sh[0], nd > 1 ? ", " : "", nd > 1 ? (long long)sh[1] : 0LL,
                    (long long)rows, cols ? ", " : "", cols ? (long long)cols : 0LL);
  return dsp_st_view(f, name, t);
}

dsp_status dsp_dec_vector(dsp_backend *be, int dev, const dsp_tensor *h, dsp_tensor *out, void **mem) {
  const size_t bytes = (size_t)h->shape[0] * 2;
  DSP_TRY(dsp_op_alloc(be, dev, bytes, mem));
  DSP_TRY(dsp_op_upload(be, dev, *mem, h->data, bytes));
  *out = dsp_tensor_view(*mem, DSP_BF16, 1, h->shape);
  return DSP_OK;
}

void dsp_dec_rope_tables(int64_t n, int64_t D, double theta, dsp_bf16 *cs, dsp_bf16 *sn) {
  const int64_t half = D / 2;
  for (int64_t i = 0; i < half; i++) {
    const float inv = 1.0f / powf((float)theta, (float)(2 * i) / (float)D);
    for (int64_t p = 0; p < n; p++) {
      const float ang = (float)p * inv;
      cs[p * half + i] = dsp_f32_to_bf16((float)cos((double)ang));
      sn[p * half + i] = dsp_f32_to_bf16((float)sin((double)ang));
    }
  }
}

void dsp_dec_copy_rows(dsp_bf16 *dst, const dsp_tensor *t, int64_t r0, int64_t n) {
  for (int64_t r = 0; r < n; r++) memcpy(dst + r * t->shape[1], dsp_tensor_row(t, r0 + r), (size_t)t->shape[1] * 2);
}

static dsp_status weight_rows(dsp_backend *be, int dev, dsp_bf16 *host, int64_t n, int64_t k, dsp_weight **w) {
  dsp_tensor v = dsp_tensor_2d(host, DSP_BF16, n, k);
  return dsp_op_weight_create(be, dev, &v, -1, w);
}

/* A row-parallel weight's K slices on this rank (DSPARK_TP_INVARIANT=0: none): the model's slices (one per KV
 * head, so every TP size divides them) over the TP size. Where a slice would not be a multiple of 32 columns (or
 * there would be more than 16), the model keeps one sum over K, and TP sizes may then differ in the last bits (so
 * too where a backend's kernels do not run that many slices: CUDA's tensor cores take 2, 4 or 8, kernels/cuda/gemm.h). */
static dsp_status row_slices(dsp_backend *be, dsp_weight *w, const dsp_dec_shape *s, int64_t k_model,
                             int32_t *taken) {
  const int64_t S = s->kv_heads;
  /* auto: CUDA keeps one sum, its slices past 32 rows run on the K split (prefill +37%: bench/RESULTS.md) */
  const int want = dsp_env_get()->tp_invariant, on = want >= 0 ? want : dsp_backend_kind_of(be) != DSP_BACKEND_CUDA;
  *taken = 1;
  if (!on || S < 2 || S > 16 || k_model % (S * 32) || S % s->tp) return DSP_OK;
  return dsp_op_weight_slice(be, w, (int32_t)(S / s->tp), taken);
}

void dsp_dec_slices_note(const dsp_dec_layer *L, char *buf, size_t n) {
  if (L->o_slices > 1 && L->down_slices == L->o_slices)
    snprintf(buf, n, "o and down in %d K slices a rank (TP-invariant order)", (int)L->o_slices);
  else
    snprintf(buf, n, "o and down in one sum over K");
}

dsp_status dsp_dec_layer_load(dsp_backend *be, int dev, const dsp_hf_dir *dir, const char *prefix,
                              const dsp_dec_shape *s, dsp_bf16 *host, dsp_dec_layer *L) {
  const int64_t H = s->hidden, D = s->head_dim, I = s->intermediate, r = s->tp_rank;
  char n[256];
  dsp_tensor q, k, v, o, g, u, dn, nm;
#define TENSOR(suffix, rows, cols, out)             \
  snprintf(n, sizeof n, "%s%s", prefix, suffix);    \
  DSP_TRY(dsp_dec_tensor(dir, n, rows, cols, out))
  TENSOR("self_attn.q_proj.weight", s->heads * D, H, &q);
  TENSOR("self_attn.k_proj.weight", s->kv_heads * D, H, &k);
  TENSOR("self_attn.v_proj.weight", s->kv_heads * D, H, &v);
  TENSOR("self_attn.o_proj.weight", H, s->heads * D, &o);
  TENSOR("mlp.gate_proj.weight", I, H, &g);
  TENSOR("mlp.up_proj.weight", I, H, &u);
  TENSOR("mlp.down_proj.weight", H, I, &dn);
  /* q, k, v rows of this rank's heads: one product */
  dsp_dec_copy_rows(host, &q, r * s->hq * D, s->hq * D);
  dsp_dec_copy_rows(host + s->hq * D * H, &k, r * s->hkv * D, s->hkv * D);
  dsp_dec_copy_rows(host + (s->hq + s->hkv) * D * H, &v, r * s->hkv * D, s->hkv * D);
  DSP_TRY(weight_rows(be, dev, host, (s->hq + 2 * s->hkv) * D, H, &L->qkv));
  dsp_dec_copy_rows(host, &g, r * s->inter, s->inter);
  dsp_dec_copy_rows(host + s->inter * H, &u, r * s->inter, s->inter);
  DSP_TRY(weight_rows(be, dev, host, 2 * s->inter, H, &L->gate_up));
  /* o and down: this rank's input columns (row-parallel) */
  dsp_tensor oc = dsp_tensor_cols(&o, r * s->hq * D, (r + 1) * s->hq * D);
  DSP_TRY(dsp_op_weight_create(be, dev, &oc, -1, &L->o));
  DSP_TRY(row_slices(be, L->o, s, s->heads * D, &L->o_slices));
  dsp_tensor dc = dsp_tensor_cols(&dn, r * s->inter, (r + 1) * s->inter);
  DSP_TRY(dsp_op_weight_create(be, dev, &dc, -1, &L->down));
  DSP_TRY(row_slices(be, L->down, s, I, &L->down_slices));
  void *m; /* the vectors are freed through their views' data */
  TENSOR("input_layernorm.weight", H, 0, &nm);
  DSP_TRY(dsp_dec_vector(be, dev, &nm, &L->in_norm, &m));
  TENSOR("post_attention_layernorm.weight", H, 0, &nm);
  DSP_TRY(dsp_dec_vector(be, dev, &nm, &L->post_norm, &m));
  TENSOR("self_attn.q_norm.weight", D, 0, &nm);
  DSP_TRY(dsp_dec_vector(be, dev, &nm, &L->q_norm, &m));
  TENSOR("self_attn.k_norm.weight", D, 0, &nm);
  DSP_TRY(dsp_dec_vector(be, dev, &nm, &L->k_norm, &m));
#undef TENSOR
  return DSP_OK;
}

void dsp_dec_layer_free(dsp_backend *be, int dev, dsp_dec_layer *L) {
  dsp_op_weight_free(be, L->qkv);
  dsp_op_weight_free(be, L->o);
  dsp_op_weight_free(be, L->gate_up);
  dsp_op_weight_free(be, L->down);
  dsp_op_release(be, dev, L->in_norm.data);
  dsp_op_release(be, dev, L->post_norm.data);
  dsp_op_release(be, dev, L->q_norm.data);
  dsp_op_release(be, dev, L->k_norm.data);
  memset(L, 0, sizeof *L);
}

dsp_status dsp_dec_act_alloc(dsp_backend *be, int dev, const dsp_dec_shape *s, int64_t rows, dsp_dec_act *a,
                             void **mem, int *nmem) {
  const int64_t H = s->hidden, Wqkv = (s->hq + 2 * s->hkv) * s->head_dim;
  const struct {
    dsp_tensor *t;
    int64_t cols;
    dsp_dtype dt;
  } act[] = {{&a->x, H, DSP_BF16},        {&a->h, H, DSP_BF16},
             {&a->qkv, Wqkv, DSP_BF16},   {&a->attn, s->hq * s->head_dim, DSP_BF16},
             {&a->o, H, DSP_BF16},        {&a->gu, 2 * s->inter, DSP_BF16},
             {&a->act, s->inter, DSP_BF16}, {&a->part, H, DSP_F32}};
  for (size_t i = 0; i < sizeof act / sizeof act[0]; i++) {
    void *m;
    DSP_TRY(dsp_op_alloc(be, dev, (size_t)(rows * act[i].cols) * dsp_dtype_size(act[i].dt), &m));
    mem[(*nmem)++] = m;
    *act[i].t = dsp_tensor_2d(m, act[i].dt, rows, act[i].cols);
  }
  return DSP_OK;
}

/* x += y where y is this rank's part of a row-parallel product of in (the fused form, without row_parallel:
 * y's bf16), then, where norm is set, h = norm(x) (the fused form: in the same call as the add). At TP 1 the
 * row-parallel form gives the same bits: bf16(x + bf16(p)) with p the whole sum is bf16(x + o). */
static dsp_status residual(dsp_backend *be, int dev, const dsp_dec_shape *s, dsp_dec_act *a, const dsp_tensor *in,
                           const dsp_weight *w, int64_t m, dsp_comm *comm, const dsp_tensor *norm) {
  dsp_tensor x = dsp_dec_rows(a->x, m), h = dsp_dec_rows(a->h, m);
  if (!s->row_parallel) {
    dsp_tensor o = dsp_dec_rows(a->o, m);
    DSP_TRY(dsp_op_gemm(be, dev, in, w, &o));
    return norm ? dsp_op_add_rmsnorm(be, dev, &x, &o, norm, (float)s->eps, &h) : dsp_op_add(be, dev, &x, &o, &x);
  }
  dsp_tensor p = dsp_dec_rows(a->part, m);
  DSP_TRY(dsp_op_gemm(be, dev, in, w, &p));
  DSP_TRY(dsp_op_allreduce(be, dev, comm, &p));
  DSP_TRY(dsp_op_round_add(be, dev, &x, &p, &x));
  return norm ? dsp_op_rmsnorm(be, dev, &x, norm, (float)s->eps, &h) : DSP_OK;
}

dsp_status dsp_dec_layer_forward(dsp_backend *be, int dev, const dsp_dec_layer *L, const dsp_dec_shape *s,
                                 dsp_dec_act *a, int64_t M, const dsp_dec_io *io) {
  const int64_t D = s->head_dim, Wq = s->hq * D, Wk = s->hkv * D;
  const float eps = (float)s->eps;
  dsp_tensor x = dsp_dec_rows(a->x, M), h = dsp_dec_rows(a->h, M), qkv = dsp_dec_rows(a->qkv, M);
  if (!io->h_ready) DSP_TRY(dsp_op_rmsnorm(be, dev, &x, &L->in_norm, eps, &h));
  DSP_TRY(dsp_op_gemm(be, dev, &h, L->qkv, &qkv));
  /* q and k normed and rotated in place, the new keys and values into their cache rows */
  dsp_tensor q = dsp_dec_heads(qkv, M, 0, s->hq, D), k = dsp_dec_heads(qkv, M, Wq, s->hkv, D);
  const int64_t cache_rows = io->slots * io->max_len;
  dsp_tensor kc = dsp_tensor_2d(io->k_cache, DSP_BF16, cache_rows, Wk), vc = dsp_tensor_2d(io->v_cache, DSP_BF16, cache_rows, Wk);
  kc.stride[0] = vc.stride[0] = io->kv_stride;
  const dsp_tensor vs = dsp_dec_cols(qkv, Wq + Wk, Wk);
  const dsp_op_attn_in_args ai = {.q = &q, .k = &k, .v = &vs, .q_norm = &L->q_norm, .k_norm = &L->k_norm,
                                  .eps = eps, .pos = io->pos, .cos = io->rope_cos, .sin = io->rope_sin,
                                  .idx = io->rows, .k_cache = &kc, .v_cache = &vc};
  DSP_TRY(dsp_op_attn_in(be, dev, &ai));
  dsp_tensor attn = dsp_dec_rows(a->attn, M);
  dsp_op_attention_args aa = {.q = &q, .k = io->k_cache, .v = io->v_cache, .slots = io->slots,
                              .max_len = io->max_len, .kv_heads = s->hkv, .kv_stride = io->kv_stride,
                              .row_slot = io->rslot, .row_keys = io->rkeys,
                              .scale = (float)(1.0 / sqrt((double)D)), .out = &attn,
                              .row_group = io->row_group};
  DSP_TRY(dsp_op_attention(be, dev, &aa));
  DSP_TRY(residual(be, dev, s, a, &attn, L->o, M, io->comm, &L->post_norm));
  dsp_tensor gu = dsp_dec_rows(a->gu, M), act = dsp_dec_rows(a->act, M);
  DSP_TRY(dsp_op_gemm(be, dev, &h, L->gate_up, &gu));
  dsp_tensor g = dsp_dec_cols(gu, 0, s->inter), u = dsp_dec_cols(gu, s->inter, s->inter);
  DSP_TRY(dsp_op_silu_mul(be, dev, &g, &u, &act));
  return residual(be, dev, s, a, &act, L->down, M, io->comm, io->next_norm);
}
