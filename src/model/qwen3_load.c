/* Loading a Qwen3 target from a Hugging Face directory onto the backend: the
 * config (refusing what dspark cannot run), every tensor checked by name,
 * dtype and shape (a missing or unexpected tensor is an error), each TP rank's
 * slices (its query and kv heads, its MLP columns, its vocabulary rows)
 * fused where one product serves (q, k, v; gate, up), the KV cache, the RoPE
 * tables and the activation buffers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "core/bf16.h"
#include "core/env.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/hf_dir.h"
#include "backend/markov_plan.h"
#include "model/qwen3_impl.h"

#define NAME_MAX_LEN 160

/* The names a Qwen3 checkpoint holds; anything else is refused. */
static int expected(const dsp_hf_config *c, const char *name) {
  static const char *const per_layer[] = {"input_layernorm.weight", "post_attention_layernorm.weight",
                                          "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                          "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                          "self_attn.q_norm.weight", "self_attn.k_norm.weight",
                                          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
  if (!strcmp(name, "model.embed_tokens.weight") || !strcmp(name, "model.norm.weight")) return 1;
  if (!strcmp(name, "lm_head.weight")) return !c->tied;
  int layer, n = 0;
  if (sscanf(name, "model.layers.%d.%n", &layer, &n) != 1 || n == 0 || layer < 0 || layer >= c->layers) return 0;
  char back[NAME_MAX_LEN];
  snprintf(back, sizeof back, "model.layers.%d.%s", layer, name + n);
  if (strcmp(back, name)) return 0; /* "model.layers.01." and the like */
  for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++)
    if (!strcmp(name + n, per_layer[i])) return 1;
  return 0;
}

static dsp_status check_names(const dsp_hf_dir *dir, const dsp_hf_config *c) {
  for (int i = 0; i < dsp_hf_dir_count(dir); i++) {
    const char *n = dsp_hf_dir_name(dir, i);
    if (!expected(c, n))
      return dsp_fail(DSP_ERR_FORMAT, "%s: unexpected tensor '%.200s' for a %lld-layer %s%s", dsp_hf_dir_path(dir), n,
                      (long long)c->layers, c->arch, c->tied ? " with tied embeddings" : "");
  }
  return DSP_OK;
}

static dsp_status dev_alloc(dsp_target *t, qw_dev *d, size_t bytes, void **p) {
  DSP_TRY(dsp_op_alloc(t->be, d->dev, bytes, p));
  DSP_ASSERT(d->nmem < (int)(sizeof d->mem / sizeof d->mem[0]));
  d->mem[d->nmem++] = *p;
  return DSP_OK;
}

typedef struct {
  dsp_target *t;
  const dsp_hf_dir *dir;
} load_ctx;

static dsp_status load_layer(load_ctx *c, qw_dev *d, int64_t l, dsp_bf16 *host) {
  dsp_target *t = c->t;
  qw_layer *L = &d->layer[l];
  char prefix[64];
  snprintf(prefix, sizeof prefix, "model.layers.%lld.", (long long)l);
  DSP_TRY(dsp_dec_layer_load(t->be, d->dev, c->dir, prefix, &d->s, host, &L->w));
  const size_t cache = (size_t)(t->opt.max_seqs + 1) * (size_t)t->opt.max_len * (size_t)(d->s.hkv * t->cfg.head_dim) * 2;
  DSP_TRY(dsp_op_alloc(t->be, d->dev, cache, (void **)&L->k_cache));
  DSP_TRY(dsp_op_alloc(t->be, d->dev, cache, (void **)&L->v_cache));
  return DSP_OK;
}

static dsp_status load_dev(void *ctx, int di) {
  load_ctx *c = ctx;
  dsp_target *t = c->t;
  qw_dev *d = &t->d[di];
  const dsp_hf_config *cf = &t->cfg;
  const int64_t H = cf->hidden, D = cf->head_dim, V = cf->vocab, T = t->opt.max_tokens;
  d->layer = calloc((size_t)cf->layers, sizeof *d->layer);
  const int64_t fused = (d->s.hq + 2 * d->s.hkv) * D > 2 * d->s.inter ? (d->s.hq + 2 * d->s.hkv) * D : 2 * d->s.inter;
  dsp_bf16 *host = malloc((size_t)(fused * H) * 2);
  if (!d->layer || !host) {
    free(host);
    return dsp_fail(DSP_ERR_NOMEM, "target: out of memory");
  }
  dsp_status ls = DSP_OK;
  for (int64_t l = 0; l < cf->layers && ls == DSP_OK; l++) ls = load_layer(c, d, l, host);
  free(host);
  DSP_TRY(ls);
  dsp_tensor e, nm, lm;
  DSP_TRY(dsp_dec_tensor(c->dir, "model.embed_tokens.weight", V, H, &e));
  void *m;
  DSP_TRY(dev_alloc(t, d, (size_t)(V * H) * 2, &m));
  DSP_TRY(dsp_op_upload(t->be, d->dev, m, e.data, (size_t)(V * H) * 2));
  d->embed = dsp_tensor_2d(m, DSP_BF16, V, H);
  DSP_TRY(dsp_dec_tensor(c->dir, "model.norm.weight", H, 0, &nm));
  DSP_TRY(dsp_dec_vector(t->be, d->dev, &nm, &d->final_norm, &m));
  d->mem[d->nmem++] = m;
  if (cf->tied) lm = e;
  else DSP_TRY(dsp_dec_tensor(c->dir, "lm_head.weight", V, H, &lm));
  dsp_tensor mine = dsp_tensor_rows(&lm, d->v0, d->v0 + d->vreal);
  DSP_TRY(dsp_op_weight_create(t->be, d->dev, &mine, -1, &d->lm));
  /* RoPE tables for every position of the cache */
  const int64_t half = D / 2, P = t->opt.max_len;
  dsp_bf16 *tab = malloc((size_t)(2 * P * half) * 2);
  if (!tab) return dsp_fail(DSP_ERR_NOMEM, "target: out of memory for the RoPE tables");
  dsp_dec_rope_tables(P, D, cf->rope_theta, tab, tab + P * half);
  dsp_status s = dev_alloc(t, d, (size_t)(2 * P * half) * 2, &m);
  if (s == DSP_OK) s = dsp_op_upload(t->be, d->dev, m, tab, (size_t)(2 * P * half) * 2);
  free(tab);
  DSP_TRY(s);
  d->rope_cos = dsp_tensor_2d(m, DSP_BF16, P, half);
  d->rope_sin = dsp_tensor_2d((dsp_bf16 *)m + P * half, DSP_BF16, P, half);
  /* activations and metadata for max_tokens rows */
  DSP_TRY(dsp_dec_act_alloc(t->be, d->dev, &d->s, T, &d->a, d->mem, &d->nmem));
  if (d->s.row_parallel) DSP_TRY(dsp_op_allreduce_reserve(t->be, d->dev, d->comm, T * d->s.hidden));
  DSP_TRY(dev_alloc(t, d, (size_t)(T * d->vr) * 2, &m));
  d->logits = dsp_tensor_2d(m, DSP_BF16, T, d->vreal); /* the padding columns past this rank's real rows are never written */
  if (t->opt.ntaps) { /* every device's: a draft on it reads them there */
    DSP_TRY(dev_alloc(t, d, (size_t)(t->opt.ntaps * T * H) * 2, &m));
    d->taps = dsp_tensor_2d(m, DSP_BF16, t->opt.ntaps * T, H);
  }
  /* the call's metadata (one block each side) and the selections' keys */
  d->meta_bytes = qw_meta_layout(NULL, T, &d->dm);
  DSP_TRY(dev_alloc(t, d, d->meta_bytes, &m));
  qw_meta_layout(m, T, &d->dm);
  DSP_TRY(dsp_op_host_alloc(t->be, d->dev, d->meta_bytes, &d->h_meta));
  qw_meta_layout(d->h_meta, T, &d->hm);
  DSP_TRY(dev_alloc(t, d, (size_t)T * 8, (void **)&d->d_keys));
  DSP_TRY(dsp_op_host_alloc(t->be, d->dev, (size_t)T * 8, (void **)&d->h_keys));
  return DSP_OK;
}

void dsp_target_free(dsp_target *t) {
  if (!t) return;
  for (int di = 0; di < t->nd; di++) {
    qw_dev *d = &t->d[di];
    for (int64_t l = 0; d->layer && l < t->cfg.layers; l++) {
      qw_layer *L = &d->layer[l];
      dsp_dec_layer_free(t->be, d->dev, &L->w);
      dsp_op_release(t->be, d->dev, L->k_cache);
      dsp_op_release(t->be, d->dev, L->v_cache);
    }
    free(d->layer);
    dsp_op_weight_free(t->be, d->lm);
    for (int b = 0; b < QW_BUCKETS; b++)
      for (int v = 0; v < 4; v++) dsp_op_graph_free(t->be, d->graph[b][v]);
    dsp_op_host_release(t->be, d->dev, d->h_meta);
    dsp_op_host_release(t->be, d->dev, d->h_keys);
    for (int i = 0; i < d->nmem; i++) dsp_op_release(t->be, d->dev, d->mem[i]);
  }
  free(t->len);
  free(t->keys);
  free(t->keys_all);
  free(t->h_logits);
  free(t);
}

static dsp_status check_options(const dsp_hf_config *c, const dsp_target_options *o) {
  if (o->max_seqs < 1 || o->max_len < 1 || o->max_tokens < 1 || o->ntaps < 0 || o->ntaps > 64 ||
      (o->ntaps && !o->taps))
    return dsp_fail(DSP_ERR_ARG, "target: options need max_seqs, max_len, max_tokens >= 1 and at most 64 taps");
  if (o->max_len > c->max_positions)
    return dsp_fail(DSP_ERR_RANGE, "target: a cache of %d positions exceeds max_position_embeddings %lld",
                    o->max_len, (long long)c->max_positions);
  for (int32_t i = 0; i < o->ntaps; i++)
    if (o->taps[i] < 0 || o->taps[i] >= c->layers)
      return dsp_fail(DSP_ERR_RANGE, "target: tap layer %d outside the model's layers [0, %lld)", o->taps[i],
                      (long long)c->layers);
  return DSP_OK;
}

static dsp_status tp_layout(dsp_target *t) {
  const dsp_hf_config *c = &t->cfg;
  const int32_t P = t->tp;
  if (c->kv_heads % P || c->heads % P)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "target: TP size %d does not divide the %lld kv heads (and %lld query heads)",
                    P, (long long)c->kv_heads, (long long)c->heads);
  if (c->intermediate % P)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "target: TP size %d does not divide intermediate_size %lld", P,
                    (long long)c->intermediate);
  if (P > c->vocab) return dsp_fail(DSP_ERR_UNSUPPORTED, "target: TP size %d exceeds the vocabulary", P);
  if (P > 1 && t->be->kind == DSP_BACKEND_CUDA && !dsp_env_get()->cuda_tp_unverified)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "target: TP %d on the CUDA backend has not been run on several GPUs yet "
                    "(CUDA runs the target at TP 1; DSPARK_CUDA_TP_UNVERIFIED=1 runs it, for the tests that will "
                    "check it; the same code runs at TP > 1 on CPU ranks, as processes or threads)", P);
  for (int di = 0; di < t->nd; di++) {
    qw_dev *d = &t->d[di];
    d->dev = di;
    d->tp_rank = t->be->tp_rank0 + di;
    d->comm = t->be->tp[di];
    d->s = (dsp_dec_shape){.hidden = c->hidden, .head_dim = c->head_dim, .heads = c->heads, .kv_heads = c->kv_heads,
                           .intermediate = c->intermediate, .hq = c->heads / P, .hkv = c->kv_heads / P,
                           .inter = c->intermediate / P, .tp = P, .tp_rank = d->tp_rank,
                           .row_parallel = P > 1 || dsp_env_get()->row_parallel, .eps = c->eps};
    dsp_markov_rows(c->vocab, P, d->tp_rank, &d->v0, &d->vr, &d->vreal);
  }
  return DSP_OK;
}

static dsp_status host_staging(dsp_target *t) {
  const size_t T = (size_t)t->opt.max_tokens, S = (size_t)t->opt.max_seqs, procs = (size_t)dsp_comm_size(t->be->comm);
  t->len = calloc(S, sizeof *t->len);
  t->keys = calloc(T, sizeof *t->keys);
  t->keys_all = calloc(T * procs, sizeof *t->keys_all);
  t->h_logits = calloc(T * (size_t)t->tp * (size_t)t->d[0].vr, 2);
  if (!t->len || !t->keys || !t->keys_all || !t->h_logits)
    return dsp_fail(DSP_ERR_NOMEM, "target: out of memory for host staging");
  /* graph buckets: row counts a decode or verify call is padded up to */
  static const int32_t sizes[QW_BUCKETS] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256};
  t->nbuckets = 0;
  if (dsp_op_has_graphs(t->be) && dsp_env_get()->graphs)
    for (int i = 0; i < QW_BUCKETS && sizes[i] <= t->opt.max_tokens; i++) t->buckets[t->nbuckets++] = sizes[i];
  return DSP_OK;
}

size_t qw_meta_layout(void *base, int64_t T, qw_meta *m) {
  char *p = base;
  size_t off = 0;
#define QW_TAKE(field, type)                               \
  m->field = base ? (type *)(void *)(p + off) : NULL;      \
  off += ((size_t)T * sizeof(type) + 63) / 64 * 64;
  QW_TAKE(rows, int64_t)
  QW_TAKE(selidx, int64_t)
  QW_TAKE(selpos, int64_t)
  QW_TAKE(seedrow, uint64_t)
  QW_TAKE(ids, int32_t)
  QW_TAKE(pos, int32_t)
  QW_TAKE(rslot, int32_t)
  QW_TAKE(rkeys, int32_t)
  QW_TAKE(trow, float)
#undef QW_TAKE
  return off;
}

static void make_report(dsp_target *t) {
  const dsp_hf_config *c = &t->cfg;
  char sl[96];
  dsp_dec_slices_note(&t->d[0].layer[0].w, sl, sizeof sl);
  snprintf(t->report, sizeof t->report,
           "dspark: target %s (%s): %lld layers, hidden %lld, %lld/%lld heads of %lld, vocabulary %lld%s; TP%d "
           "(heads and MLP columns split, LM head by vocabulary rows; %s); cache %d slots x %d positions",
           c->arch, dsp_backend_kind_name(t->be->kind), (long long)c->layers, (long long)c->hidden, (long long)c->heads,
           (long long)c->kv_heads, (long long)c->head_dim, (long long)c->vocab, c->tied ? ", tied embeddings" : "", t->tp,
           sl, t->opt.max_seqs, t->opt.max_len);
}

dsp_status dsp_target_load(dsp_backend *be, const char *dir, const dsp_target_options *opt, dsp_target **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "target: NULL output handle");
  *out = NULL;
  if (!be || !dir || !opt) return dsp_fail(DSP_ERR_ARG, "target: NULL backend, directory or options");
  DSP_TRY(dsp_settings_check());
  dsp_target *t = calloc(1, sizeof *t);
  if (!t) return dsp_fail(DSP_ERR_NOMEM, "target: out of memory");
  snprintf(t->dir, sizeof t->dir, "%s", dir);
  t->be = be;
  t->nd = be->ndev;
  t->tp = be->tp_size;
  t->opt = *opt;
  dsp_hf_dir *hd = NULL;
  load_ctx c = {.t = t};
  dsp_status s = dsp_hf_config_load(dir, &t->cfg);
  if (s == DSP_OK && t->cfg.is_draft)
    s = dsp_fail(DSP_ERR_FORMAT, "%s: config field 'architectures' is [\"Qwen3DSparkModel\"]: a DSpark draft, not a "
                 "target (a draft is loaded beside its target: dsp_draft_load, `dspark generate --draft`)", dir);
  if (s == DSP_OK) s = check_options(&t->cfg, opt);
  if (s == DSP_OK) {
    if (opt->ntaps) memcpy(t->taps, opt->taps, (size_t)opt->ntaps * sizeof *opt->taps);
    t->opt.taps = t->taps;
    s = tp_layout(t);
  }
  if (s == DSP_OK) s = dsp_hf_dir_open(dir, &hd);
  if (s == DSP_OK) s = check_names(hd, &t->cfg);
  if (s == DSP_OK) s = host_staging(t);
  c.dir = hd;
  s = dsp_comm_agree(be->comm, s);
  if (s == DSP_OK) s = dsp_comm_agree(be->comm, dsp_backend_each(be, load_dev, &c));
  dsp_hf_dir_close(hd);
  if (s != DSP_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dsp_error_message());
    dsp_target_free(t);
    return dsp_fail(s, "%s", msg);
  }
  dsp_target_info *in = &t->info;
  const dsp_hf_config *cf = &t->cfg;
  snprintf(in->arch, sizeof in->arch, "%s", cf->arch);
  in->vocab = cf->vocab;
  in->hidden = cf->hidden;
  in->layers = cf->layers;
  in->heads = cf->heads;
  in->kv_heads = cf->kv_heads;
  in->head_dim = cf->head_dim;
  in->intermediate = cf->intermediate;
  in->max_positions = cf->max_positions;
  in->rope_theta = cf->rope_theta;
  in->eps = cf->eps;
  in->tied = cf->tied;
  in->n_eos = cf->n_eos;
  memcpy(in->eos, cf->eos, sizeof in->eos);
  in->bos = cf->bos;
  in->max_seqs = opt->max_seqs;
  in->max_len = opt->max_len;
  in->max_tokens = opt->max_tokens;
  make_report(t);
  *out = t;
  return DSP_OK;
}
