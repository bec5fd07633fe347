/* The DSpark Markov head on the CPU backend (DESIGN §1-§3).
 *
 * One proposal: base = bf16(hidden @ lm_local^T) for this rank's vocabulary rows,
 * then gamma Markov steps, each adding bias = bf16(W2 @ W1[prev]) and selecting.
 * Three greedy paths give identical tokens because every per-element value is
 * computed by the same kernel in the same order whatever rows a rank owns
 * (shard invariance, src/cpu/matmul.h), and selection uses one total order
 * (src/core/select.h), so the best of the per-chunk winners is the global winner:
 *   original   - all-gather base once; per step the full-vocabulary W2 product on
 *                every rank (computed chunk by chunk), argmax, optional broadcast;
 *   sharded    - per step local W2 rows only, local top-1, all-gather of one
 *                (value, id) pair per row and rank, global top-1, optional broadcast;
 *   replicated - all-gather base once, full product on every rank, no per-step
 *                collective.
 * A batch with any sampled row runs the sampling variant: full corrected logits
 * on every rank (original/replicated: full product; sharded: local product and a
 * per-step all-gather of the local logits), then Gumbel-max per row.
 * All buffers are sized at creation for max_batch: a proposal allocates nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "core/arena.h"
#include "core/bf16.h"
#include "core/select.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cpu/markov_step.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/sample.h"

struct dsp_head {
  dsp_head_config cfg;
  dsp_comm *comm;
  int rank, size;
  int64_t row0, vr, rows_real; /* this rank's global rows [row0, row0 + rows_real), vr per rank */
  dsp_path greedy_path;
  int has_full;
  dsp_tensor w1;               /* [Vp, R] BF16, caller-owned */
  dsp_cpu_packed *lm;          /* local LM-head rows */
  dsp_cpu_packed *w2_local;    /* local W2 rows (own, or chunk `rank` of w2_chunks) */
  int own_w2_local;
  dsp_cpu_packed **w2_chunks;  /* full W2 as size chunks of vr rows (original/replicated) */
  dsp_arena *arena;
  /* per-proposal buffers, sized for max_batch */
  dsp_bf16 *base_local;        /* [M, vr], M = max_batch * gamma */
  dsp_bf16 *base_all;          /* [size][M][vr] gathered */
  dsp_bf16 *e;                 /* [max_batch, R] */
  int64_t *prev;               /* [max_batch] */
  dsp_pair *pair, *pairs_all;  /* [max_batch], [size * max_batch] */
  float *val;                  /* [max_batch] per-chunk best values */
  int64_t *ids;                /* [max_batch] per-chunk best ids */
  void *logits_local;          /* [max_batch, vr] (sharded sampling / logits) */
  void *logits_all;            /* [size][max_batch][vr] gathered local logits */
  void *logits_step;           /* [max_batch, V] one step's full logits */
  char report[256];
  double t_lm_ms, t_tail_ms; /* the last proposal's two parts (wall clock) */
};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

void dsp_head_last_timing(const dsp_head *h, double *lm_ms, double *tail_ms) {
  *lm_ms = h->t_lm_ms;
  *tail_ms = h->t_tail_ms;
}

const char *dsp_path_name(dsp_path p) {
  switch (p) {
    case DSP_PATH_AUTO: return "auto";
    case DSP_PATH_ORIGINAL: return "original";
    case DSP_PATH_SHARDED: return "sharded";
    case DSP_PATH_REPLICATED: return "replicated";
  }
  return "?";
}

void dsp_head_rows(int64_t vocab_padded, int size, int rank, int64_t *row0, int64_t *rows_per_rank,
                   int64_t *rows_real) {
  int64_t vr = (vocab_padded + size - 1) / size;
  int64_t r0 = vr * rank;
  int64_t real = vocab_padded - r0;
  if (real > vr) real = vr;
  if (real < 0) real = 0;
  *row0 = r0;
  *rows_per_rank = vr;
  *rows_real = real;
}

static size_t logit_size(const dsp_head *h) { return h->cfg.contract == DSP_CONTRACT_FP32_ADD ? 4 : 2; }
static dsp_dtype logit_dtype(const dsp_head *h) {
  return h->cfg.contract == DSP_CONTRACT_FP32_ADD ? DSP_F32 : DSP_BF16;
}

/* Real vocabulary rows among global rows [r0, r0 + n). */
static int64_t valid_rows(const dsp_head *h, int64_t r0, int64_t n) {
  int64_t v = h->cfg.vocab - r0;
  return v < 0 ? 0 : (v > n ? n : v);
}

static void make_report(dsp_head *h) {
  const char *c = h->cfg.contract == DSP_CONTRACT_FP32_ADD ? "fp32-add" : "bf16";
  const char *bc = h->cfg.broadcast ? "broadcast on" : "broadcast off";
  const char *samp = h->greedy_path == DSP_PATH_SHARDED
                         ? "full logits (local W2 rows, logits all-gathered per step)"
                         : "full logits";
  switch (h->greedy_path) {
    case DSP_PATH_SHARDED:
      snprintf(h->report, sizeof h->report,
               "dspark: markov head greedy: W2 sharded over TP%d, %s local top-1, %s; sampling: %s", h->size, c,
               bc, samp);
      break;
    case DSP_PATH_REPLICATED:
      snprintf(h->report, sizeof h->report,
               "dspark: markov head greedy: replicated over TP%d (base all-gathered once, full W2 on every rank, "
               "no per-step collective), %s; sampling: %s",
               h->size, c, samp);
      break;
    default:
      snprintf(h->report, sizeof h->report,
               "dspark: markov head greedy: original over TP%d (base all-gathered, full W2 on every rank), %s, "
               "%s%s; sampling: %s",
               h->size, c, bc, h->cfg.path == DSP_PATH_SHARDED || h->cfg.path == DSP_PATH_AUTO
                                    ? " (sharded path not eligible: TP size > vocabulary)"
                                    : "",
               samp);
  }
}

static int sharded_eligible(const dsp_head *h) {
  /* bf16 weights and an aligned split are guaranteed by construction (the loader
   * rejects other dtypes; LM and W2 rows use one split); what remains is a rank
   * count that leaves every rank a real row. */
  return h->size <= h->cfg.vocab;
}

dsp_status dsp_head_set_path(dsp_head *h, dsp_path p) {
  dsp_path want = p == DSP_PATH_AUTO ? DSP_PATH_SHARDED : p;
  if (want == DSP_PATH_SHARDED && !sharded_eligible(h)) want = DSP_PATH_ORIGINAL;
  if (want != DSP_PATH_SHARDED && !h->has_full)
    return dsp_fail(DSP_ERR_ARG, "markov head: the %s path needs the full markov_w2 on every rank",
                    dsp_path_name(want));
  h->cfg.path = p;
  h->greedy_path = want;
  make_report(h);
  return DSP_OK;
}

static dsp_status check_weights(const dsp_head_config *c, const dsp_head_weights *w, int64_t rows_real) {
  const struct { const char *name; const dsp_tensor *t; int64_t rows, cols; int need; } t[] = {
      {"lm_head.weight (local rows)", &w->lm_local, rows_real, c->hidden, 1},
      {"markov_w1.weight", &w->w1, c->vocab_padded, c->rank, 1},
      {"markov_w2.weight (local rows)", &w->w2_local, rows_real, c->rank, !w->has_w2_full},
      {"markov_w2.weight", &w->w2_full, c->vocab_padded, c->rank, w->has_w2_full},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    if (!t[i].need) continue;
    const dsp_tensor *x = t[i].t;
    if (x->dtype != DSP_BF16)
      return dsp_fail(DSP_ERR_DTYPE, "markov head: %s is %s, expected BF16", t[i].name, dsp_dtype_name(x->dtype));
    if (x->ndim != 2 || x->shape[0] != t[i].rows || x->shape[1] != t[i].cols)
      return dsp_fail(DSP_ERR_SHAPE, "markov head: %s has shape [%lld, %lld], expected [%lld, %lld]", t[i].name,
                      (long long)x->shape[0], (long long)(x->ndim > 1 ? x->shape[1] : 0), (long long)t[i].rows,
                      (long long)t[i].cols);
    if (x->stride[1] != 1) return dsp_fail(DSP_ERR_SHAPE, "markov head: %s rows must be contiguous", t[i].name);
  }
  return DSP_OK;
}

static dsp_status pack_chunks(dsp_head *h, const dsp_tensor *w2_full) {
  h->w2_chunks = calloc((size_t)h->size, sizeof *h->w2_chunks);
  if (!h->w2_chunks) return dsp_fail(DSP_ERR_NOMEM, "markov head: out of memory");
  for (int p = 0; p < h->size; p++) {
    int64_t r0, vr, real;
    dsp_head_rows(h->cfg.vocab_padded, h->size, p, &r0, &vr, &real);
    dsp_tensor rows = dsp_tensor_rows(w2_full, real ? r0 : 0, real ? r0 + real : 0);
    DSP_TRY(dsp_cpu_pack(&rows, &h->w2_chunks[p]));
  }
  return DSP_OK;
}

dsp_status dsp_head_create(const dsp_head_config *cfg, dsp_comm *comm, const dsp_head_weights *w,
                           dsp_head **out) {
  *out = NULL;
  if (cfg->vocab < 1 || cfg->vocab_padded < cfg->vocab || cfg->hidden < 1 || cfg->rank < 1 || cfg->gamma < 1 ||
      cfg->max_batch < 1)
    return dsp_fail(DSP_ERR_ARG, "markov head: bad config (V %lld, Vp %lld, H %lld, R %lld, gamma %lld, batch %d)",
                    (long long)cfg->vocab, (long long)cfg->vocab_padded, (long long)cfg->hidden,
                    (long long)cfg->rank, (long long)cfg->gamma, cfg->max_batch);
  dsp_head *h = calloc(1, sizeof *h);
  if (!h) return dsp_fail(DSP_ERR_NOMEM, "markov head: out of memory");
  h->cfg = *cfg;
  h->comm = comm;
  h->rank = dsp_comm_rank(comm);
  h->size = dsp_comm_size(comm);
  dsp_head_rows(cfg->vocab_padded, h->size, h->rank, &h->row0, &h->vr, &h->rows_real);
  h->has_full = w->has_w2_full;
  h->w1 = w->w1;
  dsp_status s = check_weights(cfg, w, h->rows_real);
  if (s == DSP_OK) s = dsp_cpu_pack(&w->lm_local, &h->lm);
  if (s == DSP_OK && h->has_full) {
    s = pack_chunks(h, &w->w2_full);
    if (s == DSP_OK) h->w2_local = h->w2_chunks[h->rank];
  } else if (s == DSP_OK) {
    s = dsp_cpu_pack(&w->w2_local, &h->w2_local);
    h->own_w2_local = 1;
  }
  size_t mb = (size_t)cfg->max_batch, m = mb * (size_t)cfg->gamma, vr = (size_t)h->vr, P = (size_t)h->size;
  size_t ls = cfg->contract == DSP_CONTRACT_FP32_ADD ? 4 : 2;
  size_t need = m * vr * 2 * (1 + P) + mb * (size_t)cfg->rank * 2 + mb * 8 + mb * sizeof(dsp_pair) * (1 + P) + mb * 12 + 64 * 4 +
                mb * vr * ls * (1 + P) + mb * (size_t)cfg->vocab * ls + 16 * 64;
  if (s == DSP_OK) s = dsp_arena_create(need, &h->arena);
  if (s == DSP_OK) {
    h->base_local = dsp_arena_alloc(h->arena, m * vr * 2);
    h->base_all = dsp_arena_alloc(h->arena, P * m * vr * 2);
    h->e = dsp_arena_alloc(h->arena, mb * (size_t)cfg->rank * 2);
    h->prev = dsp_arena_alloc(h->arena, mb * 8);
    h->pair = dsp_arena_alloc(h->arena, mb * sizeof(dsp_pair));
    h->val = dsp_arena_alloc(h->arena, mb * 4);
    h->ids = dsp_arena_alloc(h->arena, mb * 8);
    h->pairs_all = dsp_arena_alloc(h->arena, P * mb * sizeof(dsp_pair));
    h->logits_local = dsp_arena_alloc(h->arena, mb * vr * ls);
    h->logits_all = dsp_arena_alloc(h->arena, P * mb * vr * ls);
    h->logits_step = dsp_arena_alloc(h->arena, mb * (size_t)cfg->vocab * ls);
    DSP_ASSERT(h->logits_step != NULL);
    /* Columns past this rank's real rows are never selected; keep them defined. */
    memset(h->base_local, 0, m * vr * 2);
  }
  if (s == DSP_OK) s = dsp_head_set_path(h, cfg->path);
  if (s != DSP_OK) {
    dsp_head_free(h);
    return s;
  }
  *out = h;
  return DSP_OK;
}

void dsp_head_free(dsp_head *h) {
  if (!h) return;
  if (h->w2_chunks) {
    for (int p = 0; p < h->size; p++) dsp_cpu_packed_free(h->w2_chunks[p]);
    free(h->w2_chunks);
  }
  if (h->own_w2_local) dsp_cpu_packed_free(h->w2_local);
  dsp_cpu_packed_free(h->lm);
  dsp_arena_free(h->arena);
  free(h);
}

const char *dsp_head_report(const dsp_head *h) { return h->report; }
dsp_path dsp_head_greedy_path(const dsp_head *h) { return h->greedy_path; }

dsp_status dsp_head_check_inputs(const dsp_head_config *cfg, const dsp_head_inputs *in) {
  if (in->batch < 1 || in->batch > cfg->max_batch)
    return dsp_fail(DSP_ERR_SHAPE, "markov head: batch %d outside [1, %d]", in->batch, cfg->max_batch);
  const dsp_tensor *x = in->hidden;
  if (x->dtype != DSP_BF16) return dsp_fail(DSP_ERR_DTYPE, "hidden is %s, expected BF16", dsp_dtype_name(x->dtype));
  if (x->ndim != 3 || x->shape[0] != in->batch || x->shape[1] != cfg->gamma || x->shape[2] != cfg->hidden)
    return dsp_fail(DSP_ERR_SHAPE, "hidden has shape [%lld, %lld, %lld], expected [%d, %lld, %lld] (batch, gamma, H)",
                    (long long)x->shape[0], (long long)(x->ndim > 1 ? x->shape[1] : 0),
                    (long long)(x->ndim > 2 ? x->shape[2] : 0), in->batch, (long long)cfg->gamma,
                    (long long)cfg->hidden);
  for (int32_t b = 0; b < in->batch; b++) {
    if (in->anchor[b] < 0 || in->anchor[b] >= cfg->vocab)
      return dsp_fail(DSP_ERR_RANGE, "anchor[%d] = %lld is outside the vocabulary [0, %lld)", b,
                      (long long)in->anchor[b], (long long)cfg->vocab);
    if (in->temperature) {
      float t = in->temperature[b];
      if (!(t >= 0.0f) || isinf(t))
        return dsp_fail(DSP_ERR_RANGE, "temperature[%d] = %g: must be finite and >= 0 (0 = greedy)", b, (double)t);
    }
    if (in->position && in->position[b] < 0)
      return dsp_fail(DSP_ERR_RANGE, "position[%d] = %lld: must be >= 0", b, (long long)in->position[b]);
  }
  return DSP_OK;
}

/* W1 rows of the previous tokens. */
static void gather_e(dsp_head *h, int32_t B) {
  size_t R = (size_t)h->cfg.rank;
  for (int32_t b = 0; b < B; b++)
    memcpy(h->e + (size_t)b * R, dsp_tensor_row(&h->w1, h->prev[b]), R * 2);
}

/* Step k's base rows [B, n] of a [M = B*gamma, vr]-shaped block. */
static dsp_tensor step_base(const dsp_head *h, dsp_bf16 *block, int32_t B, int64_t k, int64_t n) {
  dsp_tensor t = dsp_tensor_2d(block + k * h->vr, DSP_BF16, B, n);
  t.stride[0] = h->cfg.gamma * h->vr;
  return t;
}

/* The full-vocabulary product for one step, chunk by chunk over the gathered
 * base: per-row best in best[], and the logits into logits [B, V] when given. */
static dsp_status full_step(dsp_head *h, int32_t B, int64_t k, size_t M, dsp_tensor *logits, dsp_pair *best) {
  dsp_tensor e = dsp_tensor_2d(h->e, DSP_BF16, B, h->cfg.rank);
  for (int32_t b = 0; b < B; b++) best[b] = (dsp_pair){-INFINITY, 0, DSP_PAIR_NONE_ID};
  for (int p = 0; p < h->size; p++) {
    int64_t r0 = h->vr * p, nv = valid_rows(h, r0, h->vr);
    const dsp_cpu_packed *w2 = h->w2_chunks[p];
    if (nv == 0) continue;
    dsp_tensor base = step_base(h, h->base_all + (size_t)p * M * (size_t)h->vr, B, k, dsp_cpu_packed_n(w2));
    dsp_tensor lg;
    if (logits) lg = dsp_tensor_cols(logits, r0, r0 + nv);
    float *val = h->val;
    int64_t *id = h->ids;
    dsp_cpu_markov_args a = {.e = &e, .w2 = w2, .base = &base, .fp32_add = h->cfg.contract == DSP_CONTRACT_FP32_ADD,
                             .id0 = r0, .n_valid = nv, .best_val = val, .best_id = id,
                             .logits = logits ? &lg : NULL};
    DSP_TRY(dsp_cpu_markov_step(&a, 0));
    for (int32_t b = 0; b < B; b++)
      if (dsp_pair_better(val[b], id[b], best[b].value, best[b].id)) best[b] = (dsp_pair){val[b], 0, id[b]};
  }
  return DSP_OK;
}

/* The sharded step: local rows only; best per row over this rank's rows, and
 * the local logits into h->logits_local when want_logits. */
static dsp_status local_step(dsp_head *h, int32_t B, int64_t k, int want_logits, dsp_pair *best) {
  dsp_tensor e = dsp_tensor_2d(h->e, DSP_BF16, B, h->cfg.rank);
  int64_t nv = valid_rows(h, h->row0, h->rows_real);
  for (int32_t b = 0; b < B; b++) best[b] = (dsp_pair){-INFINITY, 0, DSP_PAIR_NONE_ID};
  if (nv == 0) return DSP_OK;
  dsp_tensor base = step_base(h, h->base_local, B, k, h->rows_real);
  dsp_tensor lg = {.data = h->logits_local, .dtype = logit_dtype(h), .ndim = 2,
                   .shape = {B, nv}, .stride = {h->vr, 1}};
  float *val = h->val;
  int64_t *id = h->ids;
  dsp_cpu_markov_args a = {.e = &e, .w2 = h->w2_local, .base = &base,
                           .fp32_add = h->cfg.contract == DSP_CONTRACT_FP32_ADD, .id0 = h->row0, .n_valid = nv,
                           .best_val = val, .best_id = id, .logits = want_logits ? &lg : NULL};
  DSP_TRY(dsp_cpu_markov_step(&a, 0));
  for (int32_t b = 0; b < B; b++) best[b] = (dsp_pair){val[b], 0, id[b]};
  return DSP_OK;
}

/* All-gather every rank's local logits [B, vr] into logits [B, V]. */
static dsp_status gather_logits(dsp_head *h, int32_t B, dsp_tensor *logits) {
  size_t ls = logit_size(h), chunk = (size_t)h->cfg.max_batch * (size_t)h->vr * ls;
  DSP_TRY(dsp_comm_allgather(h->comm, h->logits_local, h->logits_all, chunk));
  for (int p = 0; p < h->size; p++) {
    int64_t r0 = h->vr * p, nv = valid_rows(h, r0, h->vr);
    for (int32_t b = 0; b < B && nv > 0; b++) {
      const char *src = (const char *)h->logits_all + (size_t)p * chunk + (size_t)b * (size_t)h->vr * ls;
      int64_t idx[2] = {b, r0};
      char *dst = dsp_tensor_at(logits, idx);
      if (logits->stride[1] == 1) {
        memcpy(dst, src, (size_t)nv * ls);
      } else {
        for (int64_t j = 0; j < nv; j++) memcpy(dst + (size_t)(j * logits->stride[1]) * ls, src + (size_t)j * ls, ls);
      }
    }
  }
  return DSP_OK;
}

dsp_status dsp_head_propose(dsp_head *h, const dsp_head_inputs *in, dsp_head_outputs *out) {
  DSP_TRY(dsp_head_check_inputs(&h->cfg, in));
  const int32_t B = in->batch;
  const int64_t G = h->cfg.gamma, V = h->cfg.vocab;
  const size_t M = (size_t)h->cfg.max_batch * (size_t)G;
  int sampling = 0;
  for (int32_t b = 0; in->temperature && b < B; b++) sampling |= in->temperature[b] > 0.0f;
  if (out->logits) {
    const dsp_tensor *l = out->logits;
    if (l->dtype != logit_dtype(h) || l->ndim != 3 || l->shape[0] != B || l->shape[1] != G || l->shape[2] != V)
      return dsp_fail(DSP_ERR_SHAPE, "markov head: logits output must be [%d, %lld, %lld] %s", B, (long long)G,
                      (long long)V, dsp_dtype_name(logit_dtype(h)));
  }
  dsp_path path = h->greedy_path;
  int full = path != DSP_PATH_SHARDED;

  /* base = bf16(hidden @ lm_local^T): [B*gamma, rows_real] into a [M, vr] block */
  double t0 = now_ms();
  dsp_tensor hid;
  DSP_TRY(dsp_tensor_flatten2d(in->hidden, &hid));
  dsp_tensor base = {.data = h->base_local, .dtype = DSP_BF16, .ndim = 2,
                     .shape = {(int64_t)B * G, h->rows_real}, .stride = {h->vr, 1}};
  DSP_TRY(dsp_cpu_matmul_nt(&hid, h->lm, &base, 0));
  if (full) DSP_TRY(dsp_comm_allgather(h->comm, h->base_local, h->base_all, M * (size_t)h->vr * 2));

  double t1 = now_ms();
  h->t_lm_ms = t1 - t0;
  for (int32_t b = 0; b < B; b++) h->prev[b] = in->anchor[b];
  int want_logits = sampling || out->logits;
  for (int64_t k = 0; k < G; k++) {
    gather_e(h, B);
    dsp_tensor lstep = {.data = h->logits_step, .dtype = logit_dtype(h), .ndim = 2, .shape = {B, V},
                        .stride = {V, 1}};
    if (out->logits) { /* write straight into the caller's [B, gamma, V] view */
      lstep = *out->logits;
      lstep.data = (char *)out->logits->data + (size_t)(k * out->logits->stride[1]) * logit_size(h);
      lstep.ndim = 2;
      lstep.shape[0] = B; lstep.shape[1] = V;
      lstep.stride[0] = out->logits->stride[0]; lstep.stride[1] = out->logits->stride[2];
    }
    if (full) {
      DSP_TRY(full_step(h, B, k, M, want_logits ? &lstep : NULL, h->pair));
    } else {
      DSP_TRY(local_step(h, B, k, want_logits, h->pair));
      if (want_logits) DSP_TRY(gather_logits(h, B, &lstep));
      /* the exchange: one (value, id) pair per row and rank, then the global top-1 */
      DSP_TRY(dsp_comm_allgather(h->comm, h->pair, h->pairs_all, (size_t)B * sizeof(dsp_pair)));
      for (int32_t b = 0; b < B; b++) {
        dsp_pair best = h->pairs_all[b];
        for (int p = 1; p < h->size; p++) {
          dsp_pair c = h->pairs_all[(size_t)p * (size_t)B + (size_t)b];
          if (dsp_pair_better(c.value, c.id, best.value, best.id)) best = c;
        }
        h->pair[b] = best;
      }
    }
    for (int32_t b = 0; b < B; b++) {
      float t = in->temperature ? in->temperature[b] : 0.0f;
      int64_t tok = h->pair[b].id;
      if (t > 0.0f) {
        uint64_t seed = in->seed ? in->seed[b] : 0;
        int64_t pos = (in->position ? in->position[b] : 0) + 1 + k;
        tok = dsp_sample_row(&lstep, b, t, seed, pos);
      }
      /* rank 0 owns id 0 and V >= 1, so some real row always wins */
      DSP_ASSERT(tok >= 0 && tok < V);
      h->prev[b] = tok;
    }
    if (h->cfg.broadcast && path != DSP_PATH_REPLICATED)
      DSP_TRY(dsp_comm_bcast(h->comm, h->prev, (size_t)B * sizeof(int64_t), 0));
    for (int32_t b = 0; b < B; b++) out->tokens[(size_t)b * (size_t)G + (size_t)k] = h->prev[b];
  }
  h->t_tail_ms = now_ms() - t1;
  return DSP_OK;
}
