/* The Markov head on the CPU (DESIGN §1-§3).
 *
 * One proposal: base = bf16(hidden @ lm_local^T) for this rank's vocabulary rows
 * (on AMX tiles where the models' products take them, amx.h; else the chain),
 * then gamma Markov steps, each adding bias = bf16(W2 @ W1[prev]) and selecting.
 * The three greedy paths give identical tokens because every per-element value is
 * computed by the same kernel in the same order whatever rows a rank owns
 * (shard invariance, kernels/cpu/matmul.h), and selection uses one total order
 * (core/select.h), so the best of the per-chunk winners is the global winner:
 *   original   - all-gather base once; per step the full-vocabulary W2 product on
 *                every rank (computed chunk by chunk), argmax, optional broadcast;
 *   sharded    - per step local W2 rows only, local top-1, all-gather of one
 *                (value, id) pair per row and rank, global top-1, optional broadcast;
 *   replicated - all-gather base once, full product on every rank, no per-step
 *                collective.
 * A batch with any sampled row runs the sampling variant: full corrected logits
 * on every rank (with all of W2: the full product; sharded: the local product and
 * a per-step all-gather of the local logits), then Gumbel-max per row.
 * All buffers are carved at creation from one arena sized by the plan's layout:
 * a proposal allocates nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/markov_cpu.h"
#include "core/arena.h"
#include "core/clock.h"
#include "core/layout.h"
#include "core/select.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/markov_step.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/sample.h"

struct dsp_markov_exec {
  dsp_markov_plan plan;
  dsp_comm *comm;
  dsp_tensor w1;               /* [Vp, R] BF16: a private copy (the caller's views need not outlive create) */
  dsp_cpu_packed *lm;          /* local LM-head rows, for the fmaf chain ... */
  dsp_cpu_amx *lm_amx;         /* ... or on AMX tiles, as the models' products where AMX is chosen (amx.h) */
  dsp_cpu_packed *w2_local;    /* local W2 rows (own, or chunk `rank` of w2_chunks) */
  int own_w2_local;
  dsp_cpu_packed **w2_chunks;  /* full W2 as tp_size chunks of vr rows (original/replicated) */
  dsp_arena *arena;
  dsp_markov_layout lay;       /* row_pad = vr, batch_pad = max_batch */
  /* per-proposal buffers, sized for max_batch */
  dsp_bf16 *base_local;        /* [M, vr], M = max_batch * gamma */
  dsp_bf16 *base_all;          /* [P][M][vr] gathered */
  dsp_bf16 *e;                 /* [max_batch, R] */
  int64_t *prev;               /* [max_batch] */
  dsp_pair *pair, *pairs_all;  /* [max_batch], [P * max_batch] */
  float *val;                  /* [max_batch] per-chunk best values */
  int64_t *ids;                /* [max_batch] per-chunk best ids */
  void *logits_local;          /* [max_batch, vr] (sharded sampling / logits) */
  void *logits_all;            /* [P][max_batch][vr] gathered local logits */
  void *logits_step;           /* [max_batch, V] one step's full logits */
  dsp_bf16 *w1_data;
  double t_lm_ms, t_tail_ms;   /* the last proposal's two parts (wall clock) */
};

static size_t logit_size(const dsp_markov_exec *h) { return h->lay.logit; }

void dsp_cpu_markov_last_timing(const dsp_markov_exec *h, double *lm_ms, double *tail_ms) {
  *lm_ms = h->t_lm_ms;
  *tail_ms = h->t_tail_ms;
}

const char *dsp_cpu_markov_detail(const dsp_markov_exec *h) {
  (void)h;
  return "";
}

dsp_status dsp_cpu_markov_set_path(dsp_markov_exec *h, const dsp_markov_plan *plan) {
  h->plan = *plan;
  return DSP_OK;
}

static dsp_status pack_chunks(dsp_markov_exec *h, const dsp_tensor *w2_full) {
  const dsp_markov_plan *p = &h->plan;
  h->w2_chunks = calloc((size_t)p->tp_size, sizeof *h->w2_chunks);
  if (!h->w2_chunks) return dsp_fail(DSP_ERR_NOMEM, "markov head: out of memory");
  for (int r = 0; r < p->tp_size; r++) {
    int64_t r0, vr, real;
    dsp_markov_rows(p->cfg.vocab_padded, p->tp_size, r, &r0, &vr, &real);
    dsp_tensor rows = dsp_tensor_rows(w2_full, real ? r0 : 0, real ? r0 + real : 0);
    DSP_TRY(dsp_cpu_pack(&rows, &h->w2_chunks[r]));
  }
  return DSP_OK;
}

static dsp_status carve(dsp_markov_exec *h) {
  const dsp_markov_config *c = &h->plan.cfg;
  DSP_TRY(dsp_markov_plan_layout(&h->plan, 1, 1, 1, &h->lay));
  const dsp_markov_layout *l = &h->lay;
  const size_t mb = (size_t)c->max_batch, P = (size_t)h->plan.tp_size, ls = l->logit;
  size_t e_bytes, w1_bytes;
  DSP_TRY(dsp_layout_bytes(c->max_batch, c->rank, 1, 2, "markov head E", &e_bytes));
  DSP_TRY(dsp_layout_bytes(c->vocab_padded, c->rank, 1, 2, "markov_w1", &w1_bytes));
  const dsp_layout_entry e[] = {
      {(void **)&h->base_local, l->base_local},
      {(void **)&h->base_all, P * l->base_local},
      {(void **)&h->e, e_bytes},
      {(void **)&h->prev, mb * 8},
      {(void **)&h->pair, mb * sizeof(dsp_pair)},
      {(void **)&h->val, mb * 4},
      {(void **)&h->ids, mb * 8},
      {(void **)&h->pairs_all, P * mb * sizeof(dsp_pair)},
      {(void **)&h->logits_local, mb * (size_t)h->plan.vr * ls},
      {(void **)&h->logits_all, P * mb * (size_t)h->plan.vr * ls},
      {(void **)&h->logits_step, l->logits_full},
      {(void **)&h->w1_data, w1_bytes},
  };
  const int n = (int)(sizeof e / sizeof e[0]);
  size_t total;
  DSP_TRY(dsp_layout_total(e, n, &total));
  DSP_TRY(dsp_arena_create(total, &h->arena));
  void *base = dsp_arena_alloc(h->arena, total);
  DSP_ASSERT(base != NULL);
  dsp_layout_carve(base, e, n);
  /* Columns past this rank's real rows are never selected; keep them defined. */
  memset(h->base_local, 0, l->base_local);
  return DSP_OK;
}

dsp_status dsp_cpu_markov_create(dsp_backend *be, int dev, const dsp_markov_plan *plan, const dsp_markov_weights *w,
                                 dsp_markov_exec **out) {
  *out = NULL;
  dsp_markov_exec *h = calloc(1, sizeof *h);
  if (!h) return dsp_fail(DSP_ERR_NOMEM, "markov head: out of memory");
  h->plan = *plan;
  h->comm = be->tp[dev];
  dsp_status s = carve(h);
  if (s == DSP_OK) {
    /* W1 is read row by row at every step: a private contiguous copy (the view may have any strides) */
    const int64_t R = plan->cfg.rank;
    for (int64_t v = 0; v < plan->cfg.vocab_padded; v++) {
      const dsp_bf16 *src = (const dsp_bf16 *)w->w1.data + v * w->w1.stride[0];
      if (w->w1.stride[1] == 1) memcpy(h->w1_data + v * R, src, (size_t)R * 2);
      else
        for (int64_t r = 0; r < R; r++) h->w1_data[v * R + r] = src[r * w->w1.stride[1]];
    }
    h->w1 = dsp_tensor_2d(h->w1_data, DSP_BF16, plan->cfg.vocab_padded, plan->cfg.rank);
    s = dsp_cpu_amx_chosen() ? dsp_cpu_amx_pack(&w->lm_local, &h->lm_amx) : dsp_cpu_pack(&w->lm_local, &h->lm);
  }
  if (s == DSP_OK && plan->has_full) {
    /* TP 1 without a separate full W2: the local rows are all of it */
    s = pack_chunks(h, w->has_w2_full ? &w->w2_full : &w->w2_local);
    if (s == DSP_OK) h->w2_local = h->w2_chunks[plan->tp_rank];
  } else if (s == DSP_OK) {
    s = dsp_cpu_pack(&w->w2_local, &h->w2_local);
    h->own_w2_local = 1;
  }
  if (s != DSP_OK) {
    dsp_cpu_markov_free(h);
    return s;
  }
  *out = h;
  return DSP_OK;
}

void dsp_cpu_markov_free(dsp_markov_exec *h) {
  if (!h) return;
  if (h->w2_chunks) {
    for (int p = 0; p < h->plan.tp_size; p++) dsp_cpu_packed_free(h->w2_chunks[p]);
    free(h->w2_chunks);
  }
  if (h->own_w2_local) dsp_cpu_packed_free(h->w2_local);
  dsp_cpu_packed_free(h->lm);
  dsp_cpu_amx_free(h->lm_amx);
  dsp_arena_free(h->arena);
  free(h);
}

/* W1 rows of the previous tokens. */
static void gather_e(dsp_markov_exec *h, int32_t B) {
  size_t R = (size_t)h->plan.cfg.rank;
  for (int32_t b = 0; b < B; b++) memcpy(h->e + (size_t)b * R, dsp_tensor_row(&h->w1, h->prev[b]), R * 2);
}

/* Step k's base rows [B, n] of a [M = B*gamma, vr]-shaped block. */
static dsp_tensor step_base(const dsp_markov_exec *h, dsp_bf16 *block, int32_t B, int64_t k, int64_t n) {
  dsp_tensor t = dsp_tensor_2d(block + k * h->plan.vr, DSP_BF16, B, n);
  t.stride[0] = h->plan.cfg.gamma * h->plan.vr;
  return t;
}

/* The full-vocabulary product for one step, chunk by chunk over the gathered
 * base: per-row best in best[], and the logits into logits [B, V] when given. */
static dsp_status full_step(dsp_markov_exec *h, int32_t B, int64_t k, size_t M, dsp_tensor *logits, dsp_pair *best) {
  const dsp_markov_plan *p = &h->plan;
  dsp_tensor e = dsp_tensor_2d(h->e, DSP_BF16, B, p->cfg.rank);
  for (int32_t b = 0; b < B; b++) best[b] = (dsp_pair){-INFINITY, 0, DSP_PAIR_NONE_ID};
  /* TP 1 multiplies base_local directly: nothing was gathered */
  dsp_bf16 *gathered = p->tp_size == 1 ? h->base_local : h->base_all;
  for (int r = 0; r < p->tp_size; r++) {
    int64_t r0 = p->vr * r, nv = dsp_markov_valid_rows(p, r0, p->vr);
    const dsp_cpu_packed *w2 = h->w2_chunks[r];
    if (nv == 0) continue;
    dsp_tensor base = step_base(h, gathered + (size_t)r * M * (size_t)p->vr, B, k, dsp_cpu_packed_n(w2));
    dsp_tensor lg;
    if (logits) lg = dsp_tensor_cols(logits, r0, r0 + nv);
    dsp_cpu_markov_args a = {.e = &e, .w2 = w2, .base = &base, .fp32_add = p->cfg.contract == DSP_CONTRACT_FP32_ADD,
                             .id0 = r0, .n_valid = nv, .best_val = h->val, .best_id = h->ids,
                             .logits = logits ? &lg : NULL};
    DSP_TRY(dsp_cpu_markov_step(&a, 0));
    for (int32_t b = 0; b < B; b++)
      if (dsp_pair_better(h->val[b], h->ids[b], best[b].value, best[b].id))
        best[b] = (dsp_pair){h->val[b], 0, h->ids[b]};
  }
  return DSP_OK;
}

/* The sharded step: local rows only; best per row over this rank's rows, and
 * the local logits into logits_local when want_logits. */
static dsp_status local_step(dsp_markov_exec *h, int32_t B, int64_t k, int want_logits, dsp_pair *best) {
  const dsp_markov_plan *p = &h->plan;
  dsp_tensor e = dsp_tensor_2d(h->e, DSP_BF16, B, p->cfg.rank);
  int64_t nv = dsp_markov_valid_rows(p, p->row0, p->rows_real);
  for (int32_t b = 0; b < B; b++) best[b] = (dsp_pair){-INFINITY, 0, DSP_PAIR_NONE_ID};
  if (nv == 0) return DSP_OK;
  dsp_tensor base = step_base(h, h->base_local, B, k, p->rows_real);
  dsp_tensor lg = {.data = h->logits_local, .dtype = dsp_markov_logit_dtype(p), .ndim = 2,
                   .shape = {B, nv}, .stride = {p->vr, 1}};
  dsp_cpu_markov_args a = {.e = &e, .w2 = h->w2_local, .base = &base,
                           .fp32_add = p->cfg.contract == DSP_CONTRACT_FP32_ADD, .id0 = p->row0, .n_valid = nv,
                           .best_val = h->val, .best_id = h->ids, .logits = want_logits ? &lg : NULL};
  DSP_TRY(dsp_cpu_markov_step(&a, 0));
  for (int32_t b = 0; b < B; b++) best[b] = (dsp_pair){h->val[b], 0, h->ids[b]};
  return DSP_OK;
}

/* All-gather every rank's local logits [B, vr] into logits [B, V]. */
static dsp_status gather_logits(dsp_markov_exec *h, int32_t B, dsp_tensor *logits) {
  const dsp_markov_plan *p = &h->plan;
  size_t ls = logit_size(h), chunk = (size_t)p->cfg.max_batch * (size_t)p->vr * ls;
  DSP_TRY(dsp_comm_allgather(h->comm, h->logits_local, h->logits_all, chunk));
  for (int r = 0; r < p->tp_size; r++) {
    int64_t r0 = p->vr * r, nv = dsp_markov_valid_rows(p, r0, p->vr);
    for (int32_t b = 0; b < B && nv > 0; b++) {
      const char *src = (const char *)h->logits_all + (size_t)r * chunk + (size_t)b * (size_t)p->vr * ls;
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

dsp_status dsp_cpu_markov_propose(dsp_markov_exec *h, const dsp_markov_inputs *in, dsp_markov_outputs *out) {
  const dsp_markov_plan *p = &h->plan;
  const int32_t B = in->batch;
  const int64_t G = p->cfg.gamma, V = p->cfg.vocab;
  const size_t M = (size_t)p->cfg.max_batch * (size_t)G;
  const int sampling = dsp_markov_any_sampled(in);
  const dsp_markov_steps st = dsp_markov_plan_steps(p, sampling, p->tp_size > 1);
  /* the sampling variant multiplies all of W2 where every rank has it; the
   * greedy variant follows the greedy path */
  const int full = p->tp_size == 1 || (sampling ? p->has_full : p->greedy_path != DSP_PATH_SHARDED);

  /* base = bf16(hidden @ lm_local^T): [B*gamma, rows_real] into a [M, vr] block */
  double t0 = dsp_now_ms();
  dsp_tensor hid;
  DSP_TRY(dsp_tensor_flatten2d(in->hidden, &hid));
  dsp_tensor base = {.data = h->base_local, .dtype = DSP_BF16, .ndim = 2,
                     .shape = {(int64_t)B * G, p->rows_real}, .stride = {p->vr, 1}};
  DSP_TRY(h->lm_amx ? dsp_cpu_amx_matmul_nt(&hid, h->lm_amx, &base, 0) : dsp_cpu_matmul_nt(&hid, h->lm, &base, 0));
  if (full && p->tp_size > 1)
    DSP_TRY(dsp_comm_allgather(h->comm, h->base_local, h->base_all, M * (size_t)p->vr * 2));

  double t1 = dsp_now_ms();
  h->t_lm_ms = t1 - t0;
  for (int32_t b = 0; b < B; b++) h->prev[b] = in->anchor[b];
  int want_logits = sampling || out->logits;
  /* the steps wanted: later slots depend on these, never the reverse */
  const int64_t steps = in->slots > 0 && in->slots < G && !out->logits ? in->slots : G;
  for (int64_t k = 0; k < steps; k++) {
    gather_e(h, B);
    dsp_tensor lstep = {.data = h->logits_step, .dtype = dsp_markov_logit_dtype(p), .ndim = 2, .shape = {B, V},
                        .stride = {V, 1}};
    if (out->logits) { /* write straight into the caller's [B, gamma, V] view */
      lstep = *out->logits;
      lstep.data = (char *)out->logits->data + (size_t)(k * out->logits->stride[1]) * logit_size(h);
      lstep.ndim = 2;
      lstep.shape[0] = B;
      lstep.shape[1] = V;
      lstep.stride[0] = out->logits->stride[0];
      lstep.stride[1] = out->logits->stride[2];
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
        for (int r = 1; r < p->tp_size; r++) {
          dsp_pair c = h->pairs_all[(size_t)r * (size_t)B + (size_t)b];
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
    if (st.bcast) DSP_TRY(dsp_comm_bcast(h->comm, h->prev, (size_t)B * sizeof(int64_t), 0));
    for (int32_t b = 0; b < B; b++) out->tokens[(size_t)b * (size_t)G + (size_t)k] = h->prev[b];
  }
  h->t_tail_ms = dsp_now_ms() - t1;
  return DSP_OK;
}
