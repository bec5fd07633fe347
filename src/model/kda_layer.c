/* A Kimi-Linear KDA layer (dspark.h, dsp_kda_layer): its tensors read as the
 * checkpoint ships them, each TP rank's heads kept by its device (one per
 * process, or several driven by one), and per call, on every device
 *   P = x [q; k; v; b; f_a; g_a]^T    one product (f_a, g_a replicated)
 *   f = f_b(P.f_a), z = g_b(P.g_a)    this rank's heads
 *   y = the backend's KDA op (conv, gate, beta, recurrence, gated norm)
 *   out = o_proj(y)                   row-parallel over TP: fp32 partials,
 *                                     all-reduced, rounded once
 * Weights are BF16 except A_log, dt_bias and o_norm, read as F32 or BF16. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/ops.h"
#include "core/bf16.h"
#include "core/status.h"
#include "io/hf_dir.h"
#include "io/kda_config.h"
#include "model/decoder.h"

/* One device's share: a TP rank's weights, buffers and states. */
typedef struct {
  int32_t rank;                  /* its TP rank */
  dsp_weight *w1, *wf, *wg, *wo; /* [n1, hidden], [hl K, K] x 2, [hidden, hl K] */
  float *conv_w, *a_log, *dt_bias, *norm_w; /* backend copies: [3 hl K][W], [hl], [hl K], [K] */
  void *x, *p, *f, *z, *y, *out, *ws; /* backend buffers of max_tokens rows */
  dsp_kda_state st;
  dsp_kda_conv_state cs;
  float *part;                   /* [max_tokens, hidden] host (TP > 1) */
} kl_dev;

/* What a call gives every device's job (dsp_backend_each). */
typedef struct {
  const char *dir;               /* load */
  const dsp_kda_seqs *seqs;      /* forward: per call, or */
  const dsp_kda_staged *staged;  /* staged once, one per device */
  const dsp_tensor *x;
  dsp_tensor *y;
  int64_t T;
  int form;                      /* the batch's */
  int32_t src, dst;              /* accept */
} kl_call;

struct dsp_kda_layer {
  dsp_backend *be;
  dsp_kda_layer_options opt;
  dsp_kda_layer_info info;
  int32_t tp, hl, nd;            /* TP size, each rank's heads, devices of this process */
  int64_t n1;                    /* columns of P: 2 K + 3 hl K + hl */
  int64_t ld1;                   /* P's row stride: n1 rounded up to 8 (the CUDA products' operand rule) */
  size_t ws_bytes;
  kl_dev *d;                     /* [nd] */
  kl_call call;
  int32_t *cu;                   /* [max_seqs + 1] host */
  int32_t *tok_slot;             /* [max_tokens] host: a kept call's per-token state slots */
  int32_t *kept;                 /* [max_seqs] tokens the last kept call ran per slot (0: none to accept) */
  uint8_t *has;                  /* [max_seqs] host */
  char report[400];
};

/* This rank's heads as the KDA kernels see them (Kimi-Linear: value heads = heads, V = K). */
static dsp_kda_dims dims_of(const dsp_kda_layer *L) {
  const int32_t K = (int32_t)L->info.head_dim;
  return (dsp_kda_dims){.num_heads = L->hl, .num_v_heads = L->hl, .head_k = K, .head_v = K};
}

/* A tensor of dir with one of two shapes (n2 == 0: one form), BF16 (or F32 when f32_ok). */
static dsp_status find_tensor(const dsp_hf_dir *dir, const char *name, int32_t n1, const int64_t *s1, int32_t n2,
                              const int64_t *s2, int f32_ok, dsp_tensor *t) {
  dsp_st_file *f;
  dsp_dtype dt;
  int32_t nd;
  int64_t sh[DSP_MAX_DIMS];
  DSP_TRY(dsp_dec_lookup(dir, name, f32_ok, &f, &dt, &nd, sh));
  int ok = nd == n1 && !memcmp(sh, s1, (size_t)n1 * 8);
  ok |= n2 && nd == n2 && !memcmp(sh, s2, (size_t)n2 * 8);
  if (!ok) {
    char got[128] = "", want[128] = "";
    for (int32_t i = 0, n = 0; i < nd; i++) n += snprintf(got + n, sizeof got - (size_t)n, "%s%lld", i ? ", " : "", (long long)sh[i]);
    for (int32_t i = 0, n = 0; i < n1; i++) n += snprintf(want + n, sizeof want - (size_t)n, "%s%lld", i ? ", " : "", (long long)s1[i]);
    return dsp_fail(DSP_ERR_SHAPE, "%s: tensor '%s' has shape [%s], config.json says [%s]", dsp_st_path(f), name, got,
                    want);
  }
  return dsp_st_view(f, name, t);
}

/* Elements [e0, e0 + n) of a BF16 or F32 tensor as floats. */
static void to_f32(const dsp_tensor *t, int64_t e0, int64_t n, float *out) {
  for (int64_t i = 0; i < n; i++)
    out[i] = t->dtype == DSP_F32 ? ((const float *)t->data)[e0 + i] : dsp_bf16_to_f32(((const dsp_bf16 *)t->data)[e0 + i]);
}

static dsp_status put_f32(dsp_backend *be, int dev, const float *h, size_t n, float **out) {
  DSP_TRY(dsp_op_alloc(be, dev, n * 4, (void **)out));
  return dsp_op_upload(be, dev, *out, h, n * 4);
}

static dsp_status weight(dsp_backend *be, int dev, const dsp_bf16 *h, int64_t rows, int64_t cols, dsp_weight **w) {
  dsp_tensor v = dsp_tensor_2d((void *)h, DSP_BF16, rows, cols);
  return dsp_op_weight_create(be, dev, &v, -1, w);
}

/* The tensors a Kimi-Linear KDA layer holds under model.layers.N.self_attn.;
   anything else there (a bias, say) would be ignored, so it is refused. */
static const char *const kda_tensors[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "b_proj.weight",
                                          "f_a_proj.weight", "f_b_proj.weight", "g_a_proj.weight",
                                          "g_b_proj.weight", "o_proj.weight", "q_conv1d.weight",
                                          "k_conv1d.weight", "v_conv1d.weight", "A_log", "dt_bias",
                                          "o_norm.weight"};

static dsp_status check_names(const dsp_hf_dir *dir, int32_t layer) {
  for (int i = 0; i < dsp_hf_dir_count(dir); i++) {
    const char *n = dsp_hf_dir_name(dir, i);
    int l, at = 0;
    if (sscanf(n, "model.layers.%d.self_attn.%n", &l, &at) != 1 || at == 0 || l != layer) continue;
    char canon[64];
    snprintf(canon, sizeof canon, "model.layers.%d.self_attn.", (int)layer);
    int ok = 0; /* a spelling such as "model.layers.02." names this layer too but is never read */
    for (size_t j = 0; !strncmp(n, canon, strlen(canon)) && j < sizeof kda_tensors / sizeof kda_tensors[0]; j++)
      ok |= !strcmp(n + at, kda_tensors[j]);
    if (!ok)
      return dsp_fail(DSP_ERR_FORMAT, "%s: unexpected tensor '%.200s' for Kimi-Linear KDA layer %d: the layer runs no "
                      "bias or other extra tensor", dsp_hf_dir_path(dir), n, (int)layer);
  }
  return DSP_OK;
}

static dsp_status load_weights(dsp_kda_layer *L, int dev, const dsp_hf_dir *dir, dsp_bf16 *host, float *hf) {
  kl_dev *D = &L->d[dev];
  dsp_backend *be = L->be;
  const int64_t Hd = L->info.hidden, H = L->info.heads, K = L->info.head_dim, W = L->info.conv_width;
  const int64_t hl = L->hl, r0 = (int64_t)D->rank * hl, HK = H * K;
  char pre[96], name[160];
  snprintf(pre, sizeof pre, "model.layers.%d.self_attn.", (int)L->opt.layer);
#define NAME(s) (snprintf(name, sizeof name, "%s%s", pre, s), name)
  DSP_TRY(check_names(dir, L->opt.layer));
  dsp_tensor q, k, v, b, fa, ga, fb, gb, o, c[3], al, dtb, nw;
  const int64_t sq[2] = {HK, Hd}, sb[2] = {H, Hd}, sa[2] = {K, Hd}, sbk[2] = {HK, K}, so[2] = {Hd, HK};
  DSP_TRY(find_tensor(dir, NAME("q_proj.weight"), 2, sq, 0, NULL, 0, &q));
  DSP_TRY(find_tensor(dir, NAME("k_proj.weight"), 2, sq, 0, NULL, 0, &k));
  DSP_TRY(find_tensor(dir, NAME("v_proj.weight"), 2, sq, 0, NULL, 0, &v));
  DSP_TRY(find_tensor(dir, NAME("b_proj.weight"), 2, sb, 0, NULL, 0, &b));
  DSP_TRY(find_tensor(dir, NAME("f_a_proj.weight"), 2, sa, 0, NULL, 0, &fa));
  DSP_TRY(find_tensor(dir, NAME("g_a_proj.weight"), 2, sa, 0, NULL, 0, &ga));
  DSP_TRY(find_tensor(dir, NAME("f_b_proj.weight"), 2, sbk, 0, NULL, 0, &fb));
  DSP_TRY(find_tensor(dir, NAME("g_b_proj.weight"), 2, sbk, 0, NULL, 0, &gb));
  DSP_TRY(find_tensor(dir, NAME("o_proj.weight"), 2, so, 0, NULL, 0, &o));
  const int64_t sc3[3] = {HK, 1, W}, sc2[2] = {HK, W}, sa4[4] = {1, 1, H, 1}, sa1[1] = {H}, sdt[1] = {HK},
                sn[1] = {K};
  static const char *convs[3] = {"q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"};
  for (int i = 0; i < 3; i++) DSP_TRY(find_tensor(dir, NAME(convs[i]), 3, sc3, 2, sc2, 0, &c[i]));
  DSP_TRY(find_tensor(dir, NAME("A_log"), 1, sa1, 4, sa4, 1, &al));
  DSP_TRY(find_tensor(dir, NAME("dt_bias"), 1, sdt, 0, NULL, 1, &dtb));
  DSP_TRY(find_tensor(dir, NAME("o_norm.weight"), 1, sn, 0, NULL, 1, &nw));
#undef NAME
  /* P's rows: f_a and g_a first (the next products read them at an aligned column),
     then this rank's q, k, v and b rows */
  const dsp_tensor *rows[6] = {&fa, &ga, &q, &k, &v, &b};
  const int64_t from[6] = {0, 0, r0 * K, r0 * K, r0 * K, r0}, count[6] = {K, K, hl * K, hl * K, hl * K, hl};
  int64_t at = 0;
  for (int i = 0; i < 6; i++) {
    memcpy(host + at * Hd, (const dsp_bf16 *)rows[i]->data + from[i] * Hd, (size_t)(count[i] * Hd) * 2);
    at += count[i];
  }
  DSP_TRY(weight(be, dev, host, L->n1, Hd, &D->w1));
  DSP_TRY(weight(be, dev, (const dsp_bf16 *)fb.data + r0 * K * K, hl * K, K, &D->wf));
  DSP_TRY(weight(be, dev, (const dsp_bf16 *)gb.data + r0 * K * K, hl * K, K, &D->wg));
  for (int64_t i = 0; i < Hd; i++) /* o_proj's columns of this rank's heads */
    memcpy(host + i * hl * K, (const dsp_bf16 *)o.data + i * HK + r0 * K, (size_t)(hl * K) * 2);
  DSP_TRY(weight(be, dev, host, Hd, hl * K, &D->wo));
  for (int i = 0; i < 3; i++)
    for (int64_t ch = 0; ch < hl * K; ch++)
      for (int64_t j = 0; j < W; j++)
        hf[(i * hl * K + ch) * W + j] = dsp_bf16_to_f32(((const dsp_bf16 *)c[i].data)[(r0 * K + ch) * W + j]);
  DSP_TRY(put_f32(be, dev, hf, (size_t)(3 * hl * K * W), &D->conv_w));
  to_f32(&al, r0, hl, hf);
  DSP_TRY(put_f32(be, dev, hf, (size_t)hl, &D->a_log));
  to_f32(&dtb, r0 * K, hl * K, hf);
  DSP_TRY(put_f32(be, dev, hf, (size_t)(hl * K), &D->dt_bias));
  to_f32(&nw, 0, K, hf);
  return put_f32(be, dev, hf, (size_t)K, &D->norm_w);
}

/* Device dev's buffers and state pool. */
static dsp_status alloc_dev(dsp_kda_layer *L, int dev) {
  dsp_backend *be = L->be;
  kl_dev *D = &L->d[dev];
  const int64_t Hd = L->info.hidden, K = L->info.head_dim, hl = L->hl, T = L->opt.max_tokens, S = L->opt.max_seqs;
  const int64_t W1 = L->info.conv_width - 1, Dc = 3 * hl * K;
  const struct {
    void **p;
    size_t bytes;
  } buf[] = {{&D->x, (size_t)(T * Hd) * 2}, {&D->p, (size_t)(T * L->ld1) * 2}, {&D->f, (size_t)(T * hl * K) * 2},
             {&D->z, (size_t)(T * hl * K) * 2}, {&D->y, (size_t)(T * hl * K) * 2},
             {&D->out, (size_t)(T * Hd) * (L->tp > 1 ? 4 : 2)}};
  for (size_t i = 0; i < sizeof buf / sizeof buf[0]; i++) DSP_TRY(dsp_op_alloc(be, dev, buf[i].bytes, buf[i].p));
  DSP_TRY(dsp_op_alloc(be, dev, L->ws_bytes, &D->ws));
  /* slots 0 .. S-1 the sequences'; then `verify` per sequence for a kept call's per-token states */
  const int64_t pool = S * (1 + (int64_t)L->opt.verify);
  D->st = (dsp_kda_state){.slot_stride = hl * K * K, .num_slots = (int32_t)pool};
  DSP_TRY(dsp_op_alloc(be, dev, (size_t)(pool * hl * K * K) * 4, (void **)&D->st.data));
  D->cs = (dsp_kda_conv_state){.slot_stride = (W1 > 0 ? W1 : 1) * Dc, .num_slots = (int32_t)pool};
  DSP_TRY(dsp_op_alloc(be, dev, (size_t)(pool * D->cs.slot_stride) * 2, (void **)&D->cs.data));
  D->part = L->tp > 1 ? malloc((size_t)(T * Hd) * 4) : NULL;
  if (L->tp > 1 && !D->part) return dsp_fail(DSP_ERR_NOMEM, "kda layer: out of memory");
  return DSP_OK;
}

/* Device dev's job at load: its rank's weights from the checkpoint, then its buffers. */
static dsp_status load_dev(void *ctx, int dev) {
  dsp_kda_layer *L = ctx;
  const int64_t K = L->info.head_dim, Hd = L->info.hidden, W = L->info.conv_width, hl = L->hl;
  dsp_hf_dir *hd;
  DSP_TRY(dsp_hf_dir_open(L->call.dir, &hd));
  const int64_t cells = L->n1 * Hd > Hd * hl * K ? L->n1 * Hd : Hd * hl * K;
  dsp_bf16 *host = malloc((size_t)cells * 2);
  float *hf = malloc((size_t)(3 * hl * K * W + hl * K + K + hl) * 4);
  dsp_status s = host && hf ? load_weights(L, dev, hd, host, hf) : dsp_fail(DSP_ERR_NOMEM, "kda layer: out of memory");
  free(host);
  free(hf);
  dsp_hf_dir_close(hd);
  DSP_TRY(s);
  return alloc_dev(L, dev);
}

static dsp_status load(dsp_kda_layer *L, const char *dir) {
  dsp_kda_config c;
  DSP_TRY(dsp_kda_config_load(dir, &c));
  const dsp_kda_layer_options *o = &L->opt;
  if (o->layer < 0 || o->layer >= c.layers)
    return dsp_fail(DSP_ERR_RANGE, "%s: layer %d outside the checkpoint's %lld layers", dir, (int)o->layer,
                    (long long)c.layers);
  if (!c.kda[o->layer])
    return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: layer %d (number %d in linear_attn_config) is not in kda_layers: a "
                    "full-attention layer", dir, (int)o->layer, (int)o->layer + 1);
  if (o->max_seqs < 1 || o->max_tokens < 1 || o->verify < 0 || (int64_t)o->max_seqs * (1 + o->verify) > (1 << 30))
    return dsp_fail(DSP_ERR_ARG, "kda layer: max_seqs and max_tokens must be >= 1, verify >= 0");
  if (c.heads % L->tp)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: TP size %d does not divide linear_attn_config.num_heads = %lld", dir,
                    (int)L->tp, (long long)c.heads);
  L->info = (dsp_kda_layer_info){.hidden = c.hidden, .heads = c.heads, .head_dim = c.head_dim,
                                 .conv_width = c.conv_width, .lower_bound_gate = c.lower_bound_gate,
                                 .lower_bound = c.lower_bound, .eps = c.eps};
  L->hl = (int32_t)(c.heads / L->tp);
  const int64_t K = c.head_dim, Hd = c.hidden, S = o->max_seqs, T = o->max_tokens;
  L->n1 = 3 * L->hl * K + L->hl + 2 * K;
  L->ld1 = (L->n1 + 7) / 8 * 8;
  const dsp_kda_dims d = dims_of(L);
  DSP_TRY(dsp_op_kda_workspace(L->be, &d, (int32_t)c.conv_width, T, &L->ws_bytes));
  L->cu = calloc((size_t)S + 1, 4);
  L->has = calloc((size_t)S, 1);
  L->tok_slot = malloc((size_t)T * 4);
  L->kept = calloc((size_t)S, 4);
  if (!L->cu || !L->has || !L->tok_slot || !L->kept) return dsp_fail(DSP_ERR_NOMEM, "kda layer: out of memory");
  L->call.dir = dir;
  DSP_TRY(dsp_backend_each(L->be, load_dev, L));
  snprintf(L->report, sizeof L->report,
           "dspark: KDA layer %d of %s (%s): hidden %lld, %lld heads of %lld (%d on each of TP %d), short conv %lld, "
           "gate %s", (int)o->layer, dir, dsp_backend_kind_name(L->be->kind), (long long)Hd, (long long)c.heads,
           (long long)K, (int)L->hl, (int)L->tp, (long long)c.conv_width,
           c.lower_bound_gate ? "lower-bound sigmoid" : "softplus");
  return DSP_OK;
}

dsp_status dsp_kda_layer_load(dsp_backend *be, const char *dir, const dsp_kda_layer_options *o, dsp_kda_layer **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "kda layer: NULL output handle");
  *out = NULL;
  if (!be || !dir || !o) return dsp_fail(DSP_ERR_ARG, "kda layer: NULL backend, directory or options");
  dsp_kda_layer *L = calloc(1, sizeof *L);
  if (!L) return dsp_fail(DSP_ERR_NOMEM, "kda layer: out of memory");
  L->be = be;
  L->opt = *o;
  L->tp = be->tp_size;
  L->nd = be->ndev;
  L->d = calloc((size_t)L->nd, sizeof *L->d);
  if (!L->d) {
    free(L);
    return dsp_fail(DSP_ERR_NOMEM, "kda layer: out of memory");
  }
  for (int i = 0; i < L->nd; i++) L->d[i].rank = be->tp_rank0 + i;
  dsp_status s = dsp_comm_agree(be->comm, load(L, dir));
  if (s != DSP_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dsp_error_message());
    dsp_kda_layer_free(L);
    return dsp_fail(s, "%s", msg);
  }
  *out = L;
  return DSP_OK;
}

/* The op's view of batch b: cu, has and tok_slot ([max_seqs + 1], [max_seqs], [max_tokens]) filled here; a kept
 * call's per-token states go to the pool's slots past the sequences' (alloc_state). A recurrent call of one token
 * per sequence (decode) goes without cu_seqlens, the op's decode form: on CUDA its one fused kernel (the same bits
 * as the separate kernels, which a cu_seqlens array always chose). */
static dsp_kda_seqs seqs_of(const dsp_kda_layer_options *o, const dsp_kda_batch *b, int32_t *cu, uint8_t *has,
                            int32_t *tok_slot) {
  int one = b->form == DSP_KDA_RECURRENT;
  cu[0] = 0;
  for (int32_t s = 0; s < b->nseq; s++) {
    cu[s + 1] = cu[s] + b->count[s];
    one &= b->count[s] == 1;
    has[s] = !(b->fresh && b->fresh[s]);
    for (int32_t i = 0; b->keep && i < b->count[s]; i++) tok_slot[cu[s] + i] = o->max_seqs + b->slot[s] * o->verify + i;
  }
  return (dsp_kda_seqs){.num_seqs = b->nseq, .cu_seqlens = one ? NULL : cu, .slot = b->slot, .has_state = has,
                        .write_final = 1, .token_slot = b->keep ? tok_slot : NULL};
}

/* The batch against layer options o; *T: its tokens. */
static dsp_status check_seqs(const dsp_kda_layer_options *o, const dsp_kda_batch *b, int64_t *T) {
  if (!b || b->nseq < 1 || b->nseq > o->max_seqs || !b->slot || !b->count)
    return dsp_fail(DSP_ERR_ARG, "kda layer: a batch needs 1 .. %d sequences with slots and counts", o->max_seqs);
  if (b->form != DSP_KDA_CHUNKED && b->form != DSP_KDA_RECURRENT)
    return dsp_fail(DSP_ERR_ARG, "kda layer: form %d is neither DSP_KDA_CHUNKED nor DSP_KDA_RECURRENT", b->form);
  if (b->keep && b->form != DSP_KDA_RECURRENT)
    return dsp_fail(DSP_ERR_ARG, "kda layer: a kept (verify) call runs the recurrent form");
  *T = 0;
  for (int32_t s = 0; s < b->nseq; s++) {
    if (b->slot[s] < 0 || b->slot[s] >= o->max_seqs)
      return dsp_fail(DSP_ERR_RANGE, "kda layer: slot %d outside [0, %d)", b->slot[s], o->max_seqs);
    for (int32_t r = 0; r < s; r++)
      if (b->slot[r] == b->slot[s]) return dsp_fail(DSP_ERR_ARG, "kda layer: slot %d appears twice", b->slot[s]);
    if (b->count[s] < 1) return dsp_fail(DSP_ERR_ARG, "kda layer: sequence %d brings %d tokens", s, b->count[s]);
    if (b->keep && b->count[s] > o->verify)
      return dsp_fail(DSP_ERR_RANGE, "kda layer: a kept call of %d tokens for sequence %d; the layer was loaded to "
                      "keep %d (options.verify)", b->count[s], s, o->verify);
    *T += b->count[s];
  }
  if (*T > o->max_tokens)
    return dsp_fail(DSP_ERR_RANGE, "kda layer: %lld tokens in one call; at most %d", (long long)*T, o->max_tokens);
  return DSP_OK;
}

static dsp_status check_views(const dsp_kda_layer *L, const dsp_tensor *x, const dsp_tensor *y, int64_t T) {
  if (!x || !y) return dsp_fail(DSP_ERR_ARG, "kda layer: NULL x or y");
  const dsp_tensor *v[2] = {x, y};
  for (int i = 0; i < 2; i++)
    if (!v[i]->data || v[i]->dtype != DSP_BF16 || v[i]->ndim != 2 || v[i]->shape[0] != T ||
        v[i]->shape[1] != L->info.hidden || v[i]->stride[1] != 1)
      return dsp_fail(DSP_ERR_SHAPE, "kda layer: %s must be a [%lld, %lld] BF16 view with unit column stride",
                      i ? "y" : "x", (long long)T, (long long)L->info.hidden);
  return DSP_OK;
}

/* Device dev's share of a call (L->call): x in, its heads' KDA, its o_proj partial; at TP > 1 the partials
 * all-reduced in fp32 and rounded once, device 0 writing y. */
static dsp_status forward_dev(void *ctx, int dev) {
  dsp_kda_layer *L = ctx;
  kl_dev *D = &L->d[dev];
  dsp_backend *be = L->be;
  const kl_call *cl = &L->call;
  const dsp_tensor *x = cl->x;
  dsp_tensor *y = cl->y;
  const int64_t Hd = L->info.hidden, K = L->info.head_dim, hl = L->hl, HK = hl * K, T = cl->T;
  for (int64_t t = 0; t < T; t++)
    DSP_TRY(dsp_op_upload(be, dev, (dsp_bf16 *)D->x + t * Hd, (const dsp_bf16 *)x->data + t * x->stride[0],
                          (size_t)Hd * 2));
  dsp_tensor xv = dsp_tensor_2d(D->x, DSP_BF16, T, Hd), pv = dsp_tensor_2d(D->p, DSP_BF16, T, L->n1);
  pv.stride[0] = L->ld1;
  DSP_TRY(dsp_op_gemm(be, dev, &xv, D->w1, &pv));
  dsp_tensor fa = dsp_tensor_2d(D->p, DSP_BF16, T, K), ga = fa;
  fa.stride[0] = ga.stride[0] = L->ld1;
  ga.data = (dsp_bf16 *)fa.data + K;
  dsp_tensor fv = dsp_tensor_2d(D->f, DSP_BF16, T, HK), zv = dsp_tensor_2d(D->z, DSP_BF16, T, HK);
  DSP_TRY(dsp_op_gemm(be, dev, &fa, D->wf, &fv));
  DSP_TRY(dsp_op_gemm(be, dev, &ga, D->wg, &zv));
  dsp_op_kda_args a = {
      .dims = dims_of(L),
      .conv_width = (int32_t)L->info.conv_width, .form = cl->form, .seqs = cl->seqs,
      .staged = cl->staged ? &cl->staged[dev] : NULL,
      .qkv = (dsp_bf16 *)D->p + 2 * K, .qkv_tok = L->ld1, .conv_w = D->conv_w, .f = D->f, .f_tok = HK, .A_log = D->a_log,
      .dt_bias = D->dt_bias,
      .gate = {.form = L->info.lower_bound_gate ? DSP_KDA_GATE_LOWER_BOUND : DSP_KDA_GATE_SOFTPLUS,
               .lower_bound = (float)L->info.lower_bound},
      .b = (dsp_bf16 *)D->p + 2 * K + 3 * HK, .b_tok = L->ld1, .z = D->z, .z_tok = HK, .norm_w = D->norm_w,
      .eps = (float)L->info.eps, .state = &D->st, .conv_state = &D->cs, .y = D->y, .y_tok = HK, .ws = D->ws,
      .ws_bytes = L->ws_bytes};
  DSP_TRY(dsp_op_kda(be, dev, &a));
  dsp_tensor yv = dsp_tensor_2d(D->y, DSP_BF16, T, HK);
  dsp_tensor ov = dsp_tensor_2d(D->out, L->tp > 1 ? DSP_F32 : DSP_BF16, T, Hd);
  DSP_TRY(dsp_op_gemm(be, dev, &yv, D->wo, &ov));
  if (L->tp == 1) {
    for (int64_t t = 0; t < T; t++)
      DSP_TRY(dsp_op_download(be, dev, (dsp_bf16 *)y->data + t * y->stride[0], (const dsp_bf16 *)D->out + t * Hd,
                              (size_t)Hd * 2));
    return DSP_OK;
  }
  DSP_TRY(dsp_op_download(be, dev, D->part, D->out, (size_t)(T * Hd) * 4));
  DSP_TRY(dsp_comm_allreduce(be->tp[dev], D->part, D->part, (size_t)(T * Hd), DSP_F32, DSP_REDUCE_SUM));
  if (dev == 0) /* every rank holds the same sums */
    for (int64_t t = 0; t < T; t++)
      for (int64_t c = 0; c < Hd; c++) ((dsp_bf16 *)y->data)[t * y->stride[0] + c] = dsp_f32_to_bf16(D->part[t * Hd + c]);
  return DSP_OK;
}

/* The batch's metadata: made here from b (per call), or staged once for every layer (a plan: one per device). */
static dsp_status forward(dsp_kda_layer *L, const dsp_kda_batch *b, const dsp_kda_staged *staged, const dsp_tensor *x,
                          dsp_tensor *y, int64_t T) {
  const dsp_kda_seqs seqs = seqs_of(&L->opt, b, L->cu, L->has, L->tok_slot);
  L->call = (kl_call){.seqs = staged ? NULL : &seqs, .staged = staged, .x = x, .y = y, .T = T, .form = b->form};
  return dsp_backend_each(L->be, forward_dev, L);
}

dsp_status dsp_kda_layer_forward(dsp_kda_layer *L, const dsp_kda_batch *b, const dsp_tensor *x, dsp_tensor *y) {
  if (!L) return dsp_fail(DSP_ERR_ARG, "kda layer: NULL layer");
  int64_t T = 0;
  dsp_status s = check_seqs(&L->opt, b, &T);
  if (s == DSP_OK) s = check_views(L, x, y, T);
  if (s == DSP_OK) s = forward(L, b, NULL, x, y, T);
  s = dsp_comm_agree(L->be->comm, s);
  for (int32_t q = 0; s == DSP_OK && q < b->nseq; q++) L->kept[b->slot[q]] = b->keep ? b->count[q] : 0;
  return s;
}

/* ---- a batch staged once for every layer (dspark.h, dsp_kda_plan) ---------------------------------------- */
struct dsp_kda_plan {
  dsp_backend *be;
  dsp_kda_layer_options opt;
  dsp_kda_batch b;               /* the staged batch, over the copies below */
  int32_t *slot, *count, *cu, *tok_slot;
  uint8_t *fresh, *has;
  void *buf[DSP_BACKEND_MAX_DEVICES]; /* each device's backend memory: the staged arrays */
  size_t bytes;
  dsp_kda_staged staged[DSP_BACKEND_MAX_DEVICES];
  int64_t T;                     /* 0: nothing staged */
};

void dsp_kda_plan_free(dsp_kda_plan *p) {
  if (!p) return;
  for (int i = 0; i < p->be->ndev; i++)
    if (p->buf[i]) dsp_op_release(p->be, i, p->buf[i]);
  free(p->slot), free(p->count), free(p->cu), free(p->tok_slot), free(p->fresh), free(p->has);
  free(p);
}

dsp_status dsp_kda_plan_create(dsp_backend *be, const dsp_kda_layer_options *o, dsp_kda_plan **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "kda plan: NULL output");
  *out = NULL;
  if (!be || !o || o->max_seqs < 1 || o->max_tokens < 1 || o->verify < 0 ||
      (int64_t)o->max_seqs * (1 + o->verify) > (1 << 30))
    return dsp_fail(DSP_ERR_ARG, "kda plan: a backend and the layers' options (max_seqs, max_tokens >= 1)");
  dsp_kda_plan *p = calloc(1, sizeof *p);
  if (!p) return dsp_fail(DSP_ERR_NOMEM, "kda plan: out of memory");
  p->be = be, p->opt = *o;
  const size_t S = (size_t)o->max_seqs, T = (size_t)o->max_tokens;
  p->slot = malloc(S * 4), p->count = malloc(S * 4), p->cu = malloc((S + 1) * 4), p->tok_slot = malloc(T * 4);
  p->fresh = malloc(S), p->has = malloc(S);
  dsp_status s = p->slot && p->count && p->cu && p->tok_slot && p->fresh && p->has
                     ? dsp_op_kda_stage_bytes(o->max_seqs, o->max_tokens, &p->bytes)
                     : dsp_fail(DSP_ERR_NOMEM, "kda plan: out of memory");
  for (int i = 0; s == DSP_OK && i < be->ndev; i++) s = dsp_op_alloc(be, i, p->bytes, &p->buf[i]);
  s = dsp_comm_agree(be->comm, s);
  if (s != DSP_OK) {
    dsp_kda_plan_free(p);
    return s;
  }
  *out = p;
  return DSP_OK;
}

dsp_status dsp_kda_plan_stage(dsp_kda_plan *p, const dsp_kda_batch *b) {
  if (!p) return dsp_fail(DSP_ERR_ARG, "kda plan: NULL plan");
  int64_t T = 0;
  p->T = 0;
  dsp_status s = check_seqs(&p->opt, b, &T);
  if (s == DSP_OK) {
    const size_t n = (size_t)b->nseq;
    memcpy(p->slot, b->slot, n * 4), memcpy(p->count, b->count, n * 4);
    if (b->fresh) memcpy(p->fresh, b->fresh, n);
    p->b = (dsp_kda_batch){.nseq = b->nseq, .slot = p->slot, .count = p->count, .fresh = b->fresh ? p->fresh : NULL,
                           .form = b->form, .keep = b->keep};
    const dsp_kda_seqs seqs = seqs_of(&p->opt, &p->b, p->cu, p->has, p->tok_slot);
    for (int i = 0; s == DSP_OK && i < p->be->ndev; i++)
      s = dsp_op_kda_stage(p->be, i, &seqs, p->opt.max_seqs * (1 + p->opt.verify), p->buf[i], p->bytes,
                           &p->staged[i]);
  }
  s = dsp_comm_agree(p->be->comm, s);
  if (s == DSP_OK) p->T = T;
  return s;
}

dsp_status dsp_kda_layer_forward_plan(dsp_kda_layer *L, const dsp_kda_plan *p, const dsp_tensor *x, dsp_tensor *y) {
  if (!L || !p) return dsp_fail(DSP_ERR_ARG, "kda layer: NULL layer or plan");
  dsp_status s = DSP_OK;
  if (p->be != L->be || p->opt.max_seqs != L->opt.max_seqs || p->opt.max_tokens != L->opt.max_tokens ||
      p->opt.verify != L->opt.verify)
    s = dsp_fail(DSP_ERR_ARG, "kda layer: a plan made for other options (max_seqs %d, max_tokens %d, verify %d; the "
                 "layer's %d, %d, %d) or another backend", p->opt.max_seqs, p->opt.max_tokens, p->opt.verify,
                 L->opt.max_seqs, L->opt.max_tokens, L->opt.verify);
  else if (p->T == 0)
    s = dsp_fail(DSP_ERR_ARG, "kda layer: the plan holds no staged batch");
  if (s == DSP_OK) s = check_views(L, x, y, p->T);
  if (s == DSP_OK) s = forward(L, &p->b, p->staged, x, y, p->T);
  s = dsp_comm_agree(L->be->comm, s);
  for (int32_t q = 0; s == DSP_OK && q < p->b.nseq; q++) L->kept[p->b.slot[q]] = p->b.keep ? p->b.count[q] : 0;
  return s;
}

/* Device dev's states of the accepted token into the sequence's slot. */
static dsp_status accept_dev(void *ctx, int dev) {
  dsp_kda_layer *L = ctx;
  const dsp_kda_dims d = dims_of(L);
  const dsp_kda_conv_dims cd = {.channels = 3 * L->hl * d.head_k, .width = (int32_t)L->info.conv_width};
  return dsp_op_kda_copy(L->be, dev, &d, &cd, &L->d[dev].st, &L->d[dev].cs, L->call.src, L->call.dst);
}

dsp_status dsp_kda_layer_accept(dsp_kda_layer *L, int32_t slot, int32_t n) {
  if (!L || slot < 0 || slot >= L->opt.max_seqs)
    return dsp_fail(DSP_ERR_RANGE, "kda layer accept: slot %d outside [0, %d)", slot, L ? L->opt.max_seqs : 0);
  if (n < 1 || n > L->kept[slot])
    return dsp_fail(DSP_ERR_RANGE, "kda layer accept: slot %d's last kept call ran %d tokens; cannot keep %d", slot,
                    L->kept[slot], n);
  L->call = (kl_call){.src = L->opt.max_seqs + slot * L->opt.verify + n - 1, .dst = slot};
  DSP_TRY(dsp_backend_each(L->be, accept_dev, L));
  L->kept[slot] = 0; /* one accept per kept call */
  return DSP_OK;
}

const dsp_kda_layer_info *dsp_kda_layer_info_of(const dsp_kda_layer *L) { return &L->info; }
const char *dsp_kda_layer_report(const dsp_kda_layer *L) { return L->report; }

void dsp_kda_layer_free(dsp_kda_layer *L) {
  if (!L) return;
  for (int dev = 0; L->d && dev < L->nd; dev++) {
    kl_dev *D = &L->d[dev];
    dsp_weight *w[4] = {D->w1, D->wf, D->wg, D->wo};
    for (int i = 0; i < 4; i++) dsp_op_weight_free(L->be, w[i]);
    void *m[13] = {D->conv_w, D->a_log, D->dt_bias, D->norm_w, D->x, D->p, D->f, D->z, D->y, D->out, D->ws,
                   D->st.data, D->cs.data};
    for (int i = 0; i < 13; i++)
      if (m[i]) dsp_op_release(L->be, dev, m[i]);
    free(D->part);
  }
  free(L->d);
  free(L->cu);
  free(L->has);
  free(L->tok_slot);
  free(L->kept);
  free(L);
}
