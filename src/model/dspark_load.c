/* Loading a DeepSpec DSpark draft directory for a loaded Qwen3 target: its
 * config and tensors checked against the target, each TP rank's slices, the
 * stacked context projection, the Markov head over the target's LM head. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "core/bf16.h"
#include "core/env.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/dspark_impl.h"
#include "model/markov_head_impl.h"
#include "model/qwen3_impl.h"

static dsp_status dev_alloc(dr_dev *d, dsp_backend *be, size_t bytes, void **p) {
  DSP_TRY(dsp_op_alloc(be, d->dev, bytes, p));
  DSP_ASSERT(d->nmem < (int)(sizeof d->mem / sizeof d->mem[0]));
  d->mem[d->nmem++] = *p;
  return DSP_OK;
}

/* The names a draft checkpoint holds (DeepSpec's: no "model." prefix). */
static int expected(const dsp_hf_config *c, const char *name) {
  static const char *const top[] = {"embed_tokens.weight", "norm.weight", "hidden_norm.weight", "lm_head.weight",
                                    "fc.weight", "markov_head.markov_w1.weight", "markov_head.markov_w2.weight"};
  static const char *const per_layer[] = {"input_layernorm.weight", "post_attention_layernorm.weight",
                                          "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                          "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                          "self_attn.q_norm.weight", "self_attn.k_norm.weight",
                                          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
  for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
    if (!strcmp(name, top[i])) return 1;
  if (!strcmp(name, "confidence_head.proj.weight") || !strcmp(name, "confidence_head.proj.bias")) return c->confidence;
  int layer, n = 0;
  if (sscanf(name, "layers.%d.%n", &layer, &n) != 1 || n == 0 || layer < 0 || layer >= c->layers) return 0;
  char back[160];
  snprintf(back, sizeof back, "layers.%d.%s", layer, name + n);
  if (strcmp(back, name)) return 0;
  for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++)
    if (!strcmp(name + n, per_layer[i])) return 1;
  return 0;
}

/* The draft against its target: what must agree, and the taps. */
static dsp_status check_pair(const dsp_draft *d, const char *dir) {
  const dsp_hf_config *c = &d->cfg;
  const dsp_target *t = d->target;
  const dsp_target_info *ti = dsp_target_info_of(t);
  if (!c->is_draft)
    return dsp_fail(DSP_ERR_FORMAT, "%s: config field 'architectures' is not [\"Qwen3DSparkModel\"]: not a DSpark draft",
                    dir);
  const struct {
    const char *field;
    int64_t mine, theirs;
  } same[] = {{"hidden_size", c->hidden, ti->hidden},        {"num_attention_heads", c->heads, ti->heads},
              {"num_key_value_heads", c->kv_heads, ti->kv_heads}, {"head_dim", c->head_dim, ti->head_dim},
              {"vocab_size", c->vocab, ti->vocab}};
  for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
    if (same[i].mine != same[i].theirs)
      return dsp_fail(DSP_ERR_FORMAT, "%s: the draft's %s is %lld, its target's %lld", dir, same[i].field,
                      (long long)same[i].mine, (long long)same[i].theirs);
  if (c->num_target_layers && c->num_target_layers != ti->layers)
    return dsp_fail(DSP_ERR_FORMAT, "%s: the draft was trained for a %lld-layer target (num_target_layers); this "
                    "target has %lld", dir, (long long)c->num_target_layers, (long long)ti->layers);
  for (int i = 0; i < c->ntaps; i++)
    if (c->taps[i] >= ti->layers - 1)
      return dsp_fail(DSP_ERR_FORMAT, "%s: target_layer_ids names layer %d; the target's layers are 0 .. %lld and its "
                      "last one (reported after the final norm) cannot be tapped", dir, c->taps[i],
                      (long long)ti->layers - 1);
  int same_taps = t->opt.ntaps == c->ntaps;
  for (int i = 0; same_taps && i < c->ntaps; i++) same_taps = t->opt.taps[i] == c->taps[i];
  if (!same_taps)
    return dsp_fail(DSP_ERR_ARG, "%s: the target must be loaded with the draft's taps (target_layer_ids, %d of them, "
                    "from %d)", dir, c->ntaps, c->taps[0]);
  const int64_t gamma = d->opt.gamma ? d->opt.gamma : c->block_size;
  if (gamma < 1 || gamma > c->block_size)
    return dsp_fail(DSP_ERR_RANGE, "draft: gamma %lld is above the checkpoint's block_size %lld (a draft trained for "
                    "blocks of %lld proposes at most that many tokens)", (long long)gamma, (long long)c->block_size,
                    (long long)c->block_size);
  if (c->mask_token_id >= c->vocab)
    return dsp_fail(DSP_ERR_RANGE, "%s: mask_token_id %lld outside the vocabulary", dir, (long long)c->mask_token_id);
  const dsp_draft_options *o = &d->opt;
  if (o->max_seqs < 1 || o->max_len < c->block_size + 1 || o->max_ctx < 1)
    return dsp_fail(DSP_ERR_ARG, "draft: options need max_seqs >= 1, max_ctx >= 1 and max_len above block_size");
  if (o->max_len > c->max_positions)
    return dsp_fail(DSP_ERR_RANGE, "draft: a context of %d positions exceeds max_position_embeddings %lld", o->max_len,
                    (long long)c->max_positions);
  if (t->be != d->be) return dsp_fail(DSP_ERR_ARG, "draft: the draft and its target must share one backend");
  return DSP_OK;
}

/* 1 when tensor `name` of dir equals tensor `tname` of tdir byte for byte. */
static int same_tensor(const dsp_hf_dir *dir, const char *name, const dsp_hf_dir *tdir, const char *tname, int64_t n,
                       int64_t k) {
  dsp_tensor a, b;
  if (dsp_dec_tensor(dir, name, n, k, &a) != DSP_OK || dsp_dec_tensor(tdir, tname, n, k, &b) != DSP_OK) return 0;
  return !memcmp(a.data, b.data, (size_t)(n * k) * 2);
}

size_t dr_meta_layout(void *base, int64_t C, int64_t M, int64_t Hn, dr_meta *m) {
  char *p = base;
  size_t off = 0;
#define DR_TAKE(field, type, n)                          \
  m->field = base ? (type *)(void *)(p + off) : NULL;    \
  off += ((size_t)(n) * sizeof(type) + 63) / 64 * 64;
  DR_TAKE(crows, int64_t, C)
  DR_TAKE(brows, int64_t, M)
  DR_TAKE(cpos, int32_t, C)
  DR_TAKE(bpos, int32_t, M)
  DR_TAKE(bids, int32_t, M)
  DR_TAKE(bslot, int32_t, M)
  DR_TAKE(bkeys, int32_t, M)
  DR_TAKE(hidx, int64_t, Hn)
  DR_TAKE(csrc, int64_t, C)
#undef DR_TAKE
  return off;
}

static dsp_status load_dev(void *ctx, int di) {
  dsp_draft *dr = ctx;
  dr_dev *d = &dr->d[di];
  dsp_backend *be = dr->be;
  const dsp_hf_config *c = &dr->cfg;
  const int64_t H = c->hidden, D = c->head_dim, L = c->layers, Wk = d->s.hkv * D, G = dr->blk;
  const int64_t M = (int64_t)dr->rows_cap * G, C = dr->ctx_cap, P = dr->opt.max_len;
  d->layer = calloc((size_t)L, sizeof *d->layer);
  d->k_norms = calloc((size_t)L, sizeof *d->k_norms);
  const int64_t fused = (d->s.hq + 2 * d->s.hkv) * D > 2 * d->s.inter ? (d->s.hq + 2 * d->s.hkv) * D : 2 * d->s.inter;
  const int64_t rows = fused > 2 * L * Wk ? fused : 2 * L * Wk;
  dsp_bf16 *host = malloc((size_t)(rows * H) * 2);
  dsp_status s = d->layer && d->k_norms && host ? DSP_OK : dsp_fail(DSP_ERR_NOMEM, "draft: out of memory");
  for (int64_t l = 0; l < L && s == DSP_OK; l++) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "layers.%lld.", (long long)l);
    s = dsp_dec_layer_load(be, d->dev, dr->dir, prefix, &d->s, host, &d->layer[l]);
    d->k_norms[l] = d->layer[l].k_norm;
  }
  /* the context's K and V of every layer in one product: k rows of all layers, then v rows */
  for (int64_t l = 0; l < L && s == DSP_OK; l++) {
    char n[96];
    dsp_tensor k, v;
    snprintf(n, sizeof n, "layers.%lld.self_attn.k_proj.weight", (long long)l);
    s = dsp_dec_tensor(dr->dir, n, c->kv_heads * D, H, &k);
    snprintf(n, sizeof n, "layers.%lld.self_attn.v_proj.weight", (long long)l);
    if (s == DSP_OK) s = dsp_dec_tensor(dr->dir, n, c->kv_heads * D, H, &v);
    if (s == DSP_OK) {
      dsp_dec_copy_rows(host + l * Wk * H, &k, d->tp_rank * Wk, Wk);
      dsp_dec_copy_rows(host + (L + l) * Wk * H, &v, d->tp_rank * Wk, Wk);
    }
  }
  if (s == DSP_OK) {
    dsp_tensor w = dsp_tensor_2d(host, DSP_BF16, 2 * L * Wk, H);
    s = dsp_op_weight_create(be, d->dev, &w, -1, &d->ctx_kv);
  }
  free(host);
  DSP_TRY(s);
  dsp_tensor fc, nm;
  DSP_TRY(dsp_dec_tensor(dr->dir, "fc.weight", H, c->ntaps * H, &fc));
  DSP_TRY(dsp_op_weight_create(be, d->dev, &fc, -1, &d->fc));
  void *m;
  DSP_TRY(dsp_dec_tensor(dr->dir, "hidden_norm.weight", H, 0, &nm));
  DSP_TRY(dsp_dec_vector(be, d->dev, &nm, &d->hidden_norm, &m));
  d->mem[d->nmem++] = m;
  DSP_TRY(dsp_dec_tensor(dr->dir, "norm.weight", H, 0, &nm));
  DSP_TRY(dsp_dec_vector(be, d->dev, &nm, &d->final_norm, &m));
  d->mem[d->nmem++] = m;
  const int64_t half = D / 2;
  dsp_bf16 *tab = malloc((size_t)(2 * P * half) * 2);
  if (!tab) return dsp_fail(DSP_ERR_NOMEM, "draft: out of memory for the RoPE tables");
  dsp_dec_rope_tables(P, D, c->rope_theta, tab, tab + P * half);
  s = dev_alloc(d, be, (size_t)(2 * P * half) * 2, &m);
  if (s == DSP_OK) s = dsp_op_upload(be, d->dev, m, tab, (size_t)(2 * P * half) * 2);
  free(tab);
  DSP_TRY(s);
  d->rope_cos = dsp_tensor_2d(m, DSP_BF16, P, half);
  d->rope_sin = dsp_tensor_2d((dsp_bf16 *)m + P * half, DSP_BF16, P, half);
  /* the stacked context cache, one spare slot for padding rows */
  const size_t cache = (size_t)(dr->opt.max_seqs + 1) * (size_t)P * (size_t)(L * Wk) * 2;
  DSP_TRY(dev_alloc(d, be, cache, (void **)&d->k_cache));
  DSP_TRY(dev_alloc(d, be, cache, (void **)&d->v_cache));
  DSP_TRY(dsp_dec_act_alloc(be, d->dev, &d->s, M, &d->a, d->mem, &d->nmem));
  if (d->s.row_parallel) DSP_TRY(dsp_op_allreduce_reserve(be, d->dev, d->comm, M * d->s.hidden));
  DSP_TRY(dev_alloc(d, be, (size_t)(C * c->ntaps * H) * 2, &m));
  d->feats = dsp_tensor_2d(m, DSP_BF16, C, c->ntaps * H);
  DSP_TRY(dev_alloc(d, be, (size_t)(C * H) * 2, &m));
  d->ctx = dsp_tensor_2d(m, DSP_BF16, C, H);
  DSP_TRY(dev_alloc(d, be, (size_t)(C * 2 * L * Wk) * 2, &m));
  d->ckv = dsp_tensor_2d(m, DSP_BF16, C, 2 * L * Wk);
  const int64_t Hn = G * ((dr->rows_cap + 15) / 16 * 16); /* the head's rows: batches padded to 16 */
  d->meta_bytes = dr_meta_layout(NULL, C, M, Hn, &d->dm);
  DSP_TRY(dev_alloc(d, be, d->meta_bytes, &m));
  dr_meta_layout(m, C, M, Hn, &d->dm);
  DSP_TRY(dsp_op_host_alloc(be, d->dev, d->meta_bytes, &d->h_meta));
  memset(d->h_meta, 0, d->meta_bytes);
  dr_meta_layout(d->h_meta, C, M, Hn, &d->hm);
  DSP_TRY(dsp_op_host_alloc(be, d->dev, (size_t)(C * c->ntaps * H) * 2, (void **)&d->h_feats));
  memset(d->h_feats, 0, (size_t)(C * c->ntaps * H) * 2); /* a captured call's padding rows: finite */
  return DSP_OK;
}

typedef struct {
  dsp_draft *dr;
} head_ctx;

/* The Markov head's weights for TP rank r: the target's LM-head rows, the draft's W1 and W2. */
static dsp_status head_weights(void *ctx, int32_t size, int32_t rank, dsp_markov_weights *w) {
  dsp_draft *dr = ((head_ctx *)ctx)->dr;
  const int64_t V = dr->cfg.vocab, H = dr->cfg.hidden, R = dr->cfg.markov_rank;
  int64_t r0, vr, vreal;
  dsp_markov_rows(V, size, rank, &r0, &vr, &vreal);
  const dsp_target_info *ti = dsp_target_info_of(dr->target);
  dsp_tensor lm, w2;
  DSP_TRY(dsp_dec_tensor(dr->tdir, ti->tied ? "model.embed_tokens.weight" : "lm_head.weight", V, H, &lm));
  DSP_TRY(dsp_dec_tensor(dr->dir, "markov_head.markov_w2.weight", V, R, &w2));
  memset(w, 0, sizeof *w);
  w->lm_local = dsp_tensor_rows(&lm, r0, r0 + vreal);
  w->w1 = dr->w1;
  w->w2_local = dsp_tensor_rows(&w2, r0, r0 + vreal);
  w->w2_full = w2;
  w->has_w2_full = 1;
  return DSP_OK;
}

static dsp_status load_all(dsp_draft *dr, const char *dir) {
  const dsp_hf_config *c = &dr->cfg;
  DSP_TRY(check_pair(dr, dir));
  DSP_TRY(dsp_hf_dir_open(dir, &dr->dir));
  for (int i = 0; i < dsp_hf_dir_count(dr->dir); i++)
    if (!expected(c, dsp_hf_dir_name(dr->dir, i)))
      return dsp_fail(DSP_ERR_FORMAT, "%s: unexpected tensor '%.200s' for a %lld-layer DSpark draft%s", dir,
                      dsp_hf_dir_name(dr->dir, i), (long long)c->layers,
                      c->confidence ? "" : " without a confidence head");
  DSP_TRY(dsp_hf_dir_open(dr->target->dir, &dr->tdir));
  const int64_t V = c->vocab, H = c->hidden, R = c->markov_rank;
  DSP_TRY(dsp_dec_tensor(dr->dir, "markov_head.markov_w1.weight", V, R, &dr->w1));
  const dsp_target_info *ti = dsp_target_info_of(dr->target);
  /* the draft's own copies are checked present and shaped; the target's are used */
  dsp_tensor e;
  DSP_TRY(dsp_dec_tensor(dr->dir, "embed_tokens.weight", V, H, &e));
  DSP_TRY(dsp_dec_tensor(dr->dir, "lm_head.weight", V, H, &e));
  dr->info.own_embeddings_differ =
      !same_tensor(dr->dir, "embed_tokens.weight", dr->tdir, "model.embed_tokens.weight", V, H) ||
      !same_tensor(dr->dir, "lm_head.weight", dr->tdir, ti->tied ? "model.embed_tokens.weight" : "lm_head.weight", V, H);
  if (c->confidence) {
    const int64_t fin = H + (c->confidence_markov ? R : 0);
    dsp_tensor cw, cb;
    DSP_TRY(dsp_dec_tensor(dr->dir, "confidence_head.proj.weight", 1, fin, &cw));
    DSP_TRY(dsp_dec_tensor(dr->dir, "confidence_head.proj.bias", 1, 0, &cb));
    dr->conf_w = malloc((size_t)fin * 2);
    if (!dr->conf_w) return dsp_fail(DSP_ERR_NOMEM, "draft: out of memory");
    memcpy(dr->conf_w, cw.data, (size_t)fin * 2);
    dr->conf_b = dsp_bf16_to_f32(((const dsp_bf16 *)cb.data)[0]);
  }
  const int32_t P = dr->tp;
  for (int di = 0; di < dr->nd; di++) {
    dr_dev *d = &dr->d[di];
    d->dev = di;
    d->tp_rank = dr->be->tp_rank0 + di;
    d->comm = dr->be->tp[di];
    d->s = (dsp_dec_shape){.hidden = H, .head_dim = c->head_dim, .heads = c->heads, .kv_heads = c->kv_heads,
                           .intermediate = c->intermediate, .hq = c->heads / P, .hkv = c->kv_heads / P,
                           .inter = c->intermediate / P, .tp = P, .tp_rank = d->tp_rank,
                           .row_parallel = P > 1 || dsp_env_get()->row_parallel, .eps = c->eps};
  }
  if (c->kv_heads % P || c->intermediate % P)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "draft: TP size %d does not divide the %lld kv heads or intermediate_size "
                    "%lld", P, (long long)c->kv_heads, (long long)c->intermediate);
  const size_t S = (size_t)dr->opt.max_seqs, G = (size_t)dr->blk;
  dr->len = calloc(S, sizeof *dr->len);
  DSP_TRY(dsp_op_host_alloc(dr->be, 0, S * G * (size_t)H * 2, (void **)&dr->h_hidden));
  dr->anchor64 = malloc(S * 8);
  dr->pos64 = malloc(S * 8);
  if (!dr->len || !dr->h_hidden || !dr->anchor64 || !dr->pos64) return dsp_fail(DSP_ERR_NOMEM, "draft: out of memory");
  return DSP_OK;
}

dsp_status dsp_draft_load(dsp_backend *be, const char *dir, const dsp_target *target, const dsp_draft_options *opt,
                          dsp_draft **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "draft: NULL output handle");
  *out = NULL;
  if (!be || !dir || !target || !opt) return dsp_fail(DSP_ERR_ARG, "draft: NULL backend, directory, target or options");
  dsp_draft *dr = calloc(1, sizeof *dr);
  if (!dr) return dsp_fail(DSP_ERR_NOMEM, "draft: out of memory");
  dr->be = be;
  dr->target = target;
  dr->opt = *opt;
  dr->nd = be->ndev;
  dr->tp = be->tp_size;
  dsp_status s = dsp_hf_config_load(dir, &dr->cfg);
  if (s == DSP_OK) {
    const dsp_hf_config *c = &dr->cfg;
    dr->info = (dsp_draft_info){.layers = c->layers, .block_size = c->block_size,
                                .gamma = opt->gamma ? opt->gamma : c->block_size, .mask_token_id = c->mask_token_id,
                                .markov_rank = c->markov_rank, .ntaps = c->ntaps, .confidence = c->confidence};
    memcpy(dr->info.taps, c->taps, sizeof dr->info.taps);
    dr->blk = opt->block_gamma ? dr->info.gamma : c->block_size; /* a gamma above block_size fails in load_all */
    dr->bcall = dr->blk;
    s = load_all(dr, dir);
  }
  s = dsp_comm_agree(be->comm, s);
  if (s == DSP_OK) { /* the head first: with graphs its bucket for max_seqs sizes the block's buffers */
    const dsp_hf_config *c = &dr->cfg;
    dsp_markov_config mc = {.vocab = c->vocab, .vocab_padded = c->vocab, .hidden = c->hidden, .rank = c->markov_rank,
                            .gamma = dr->info.gamma, .max_batch = opt->max_seqs, .path = opt->path,
                            .contract = DSP_CONTRACT_BF16, .broadcast = !opt->no_broadcast};
    head_ctx hc = {dr};
    s = dsp_markov_head_create(be, &mc, head_weights, &hc, &dr->head);
    dr->graphs = s == DSP_OK && dsp_op_has_graphs(be) && dsp_env_get()->graphs && be->ops->markov_fused_bucket &&
                 dr->nd == 1 && dr->tp == 1;
    dr->rows_cap = opt->max_seqs;
    dsp_markov_fused fb;
    if (dr->graphs && be->ops->markov_fused_bucket(dr->head->x[0], opt->max_seqs, &fb) == DSP_OK &&
        fb.size > dr->rows_cap)
      dr->rows_cap = fb.size;
    const int64_t blk = (int64_t)dr->rows_cap * (dr->blk + 1);
    dr->ctx_cap = dr->graphs && blk > opt->max_ctx ? blk : opt->max_ctx;
  }
  if (s == DSP_OK) s = dsp_comm_agree(be->comm, dsp_backend_each(be, load_dev, dr));
  if (s != DSP_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dsp_error_message());
    dsp_draft_free(dr);
    return dsp_fail(s, "%s", msg);
  }
  char sl[96];
  dsp_dec_slices_note(&dr->d[0].layer[0], sl, sizeof sl);
  snprintf(dr->report, sizeof dr->report,
           "dspark: draft Qwen3DSparkModel (%s): %lld layers, block %lld (gamma %lld%s), %d taps from layer %d, "
           "Markov rank %lld, %s%s; the target's embedding and LM head%s; context %d slots x %d positions\n%s",
           dsp_backend_kind_name(be->kind), (long long)dr->cfg.layers, (long long)dr->cfg.block_size,
           (long long)dr->info.gamma, dr->blk < dr->cfg.block_size ? ", blocks of gamma rows" : "", dr->cfg.ntaps,
           dr->cfg.taps[0], (long long)dr->cfg.markov_rank, sl,
           dr->cfg.confidence ? ", confidence head" : "",
           dr->info.own_embeddings_differ ? " (the draft's own copies differ from them and are not used)" : "",
           opt->max_seqs, opt->max_len, dsp_markov_head_report(dr->head));
  *out = dr;
  return DSP_OK;
}

void dsp_draft_free(dsp_draft *dr) {
  if (!dr) return;
  for (int di = 0; di < dr->nd; di++) {
    dr_dev *d = &dr->d[di];
    for (int64_t l = 0; d->layer && l < dr->cfg.layers; l++) dsp_dec_layer_free(dr->be, d->dev, &d->layer[l]);
    free(d->layer);
    free(d->k_norms);
    dsp_op_weight_free(dr->be, d->fc);
    dsp_op_weight_free(dr->be, d->ctx_kv);
    for (int i = 0; i < d->nmem; i++) dsp_op_release(dr->be, d->dev, d->mem[i]);
    dsp_op_host_release(dr->be, d->dev, d->h_meta);
    dsp_op_host_release(dr->be, d->dev, d->h_feats);
    for (int i = 0; i < DR_GRAPHS; i++)
      for (int v = 0; v < 8; v++)
        if (d->graph[i][v]) dsp_op_graph_free(dr->be, d->graph[i][v]);
  }
  dsp_markov_head_free(dr->head);
  dsp_hf_dir_close(dr->dir);
  dsp_hf_dir_close(dr->tdir);
  free(dr->conf_w);
  free(dr->len);
  if (dr->h_hidden) dsp_op_host_release(dr->be, 0, dr->h_hidden);
  free(dr->anchor64);
  free(dr->pos64);
  free(dr);
}

const dsp_draft_info *dsp_draft_info_of(const dsp_draft *d) { return &d->info; }

dsp_status dsp_draft_read_info(const char *dir, dsp_draft_info *out) {
  if (!dir || !out) return dsp_fail(DSP_ERR_ARG, "draft info: NULL argument");
  dsp_hf_config c;
  DSP_TRY(dsp_hf_config_load(dir, &c));
  if (!c.is_draft)
    return dsp_fail(DSP_ERR_FORMAT, "%s: config field 'architectures' is not [\"Qwen3DSparkModel\"]: not a DSpark draft",
                    dir);
  *out = (dsp_draft_info){.layers = c.layers, .block_size = c.block_size, .gamma = c.block_size,
                          .mask_token_id = c.mask_token_id, .markov_rank = c.markov_rank, .ntaps = c.ntaps,
                          .confidence = c.confidence};
  memcpy(out->taps, c.taps, sizeof out->taps);
  return DSP_OK;
}
const char *dsp_draft_report(const dsp_draft *d) { return d->report; }
