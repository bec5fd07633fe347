/* Speculative decoding with a DSpark draft (dspark.h, dsp_speculate): a
 * chunked prefill whose taps fill the draft's context, then rounds of
 * propose, verify, accept, roll back. Sequences take the models' slots as
 * they free: a finished one leaves the batch and the next prompt is prefilled
 * into its slot. All buffers are made once per call. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/clock.h"
#include "core/status.h"
#include "decode/gamma_auto.h"
#include "decode/gen_common.h"
#include "model/dspark_impl.h"
#include "model/qwen3_impl.h"

typedef struct {
  int64_t n;        /* positions in the target's cache */
  int32_t x;        /* the anchor: committed, not yet run */
  int32_t made, stop;
  int32_t ctx_row0, ctx_count; /* taps rows the draft's context still lacks (from the last verification) */
  int32_t slot;                /* the models' cache slot while admitted */
} seq_state;


typedef struct {
  dsp_target *t;
  dsp_draft *d;
  const dsp_spec_options *o;
  int32_t G;
  dsp_gamma_auto ag;
  int64_t V;
  int sampling;
  int rejection; /* sampled rows accepted by min(1, p / q) (else exact: equal to the target's own draws) */
  seq_state *s;
  int32_t *slot, *count, *tok, *which, *anchor, *row0, *ccount;
  float *temp, *conf;
  uint64_t *seed;
  int64_t *next, *drafts;
  /* sampling's acceptance: dsp_op_accept on the models' own logits where both are one rank's backend memory
   * (acc_op; the target's read in place where t_dev, the draft's where q_dev), else the host's on copies */
  int acc_op, t_dev, q_dev;
  dsp_bf16 *tlog, *qlog;      /* host copies: [rows, V] the target's, [nseq, G, V] the draft's corrected logits */
  dsp_op_accept_args aa;      /* over the arrays below, made once */
  int64_t *toff, *qoff, *apos; /* [nseq G], [nseq G], [nseq] */
  int32_t *ndraft, *residual;  /* [nseq] */
  void *ws_host;              /* the host acceptance's scratch (not acc_op) */
  int nthreads;
  int32_t *acc, *bonus;       /* [nseq]: accepted drafts, the bonus */
  int32_t *commit;            /* [G + 1] */
  /* gamma auto's decode steps leave the draft alone (lazy): a running sequence's context rows wait in host memory,
   * pend [ntaps][nslots x pend_cap][H] (slot's rows from slot x pend_cap), until a proposal needs them */
  int lazy;
  dsp_bf16 *pend, *taps_host; /* taps_host [ntaps][nslots x (G + 1)][H]: a verification's taps */
  int32_t *pend_n, pend_cap;
  int32_t nslots, *free_slot, nfree; /* slots not held by a running sequence */
  uint8_t *pick;              /* [nseq] gamma auto's probe of part of the batch: the sequences that draft */
  int32_t probe_q;            /* where the next such probe starts looking (the part rotates over the batch) */
  int32_t *adm, *done;        /* [nslots] an admission's prompts and the prompt tokens run of each */
  int32_t next_q;             /* the first prompt not yet admitted */
} spec;

/* Whether running sequence q is one of sel's: every one (sel < 0), or those whose pick flag equals sel. */
static int chosen(const spec *c, int32_t q, int sel) { return !c->s[q].stop && (sel < 0 || c->pick[q] == sel); }

/* The waiting context rows of the sequences sel chooses into the draft, in calls of at most its context rows. */
static dsp_status flush(spec *c, dsp_generate_stats *st, int sel) {
  const dsp_target_info *ti = dsp_target_info_of(c->t);
  int64_t sh[3] = {c->t->opt.ntaps, (int64_t)c->nslots * c->pend_cap, ti->hidden};
  dsp_tensor pv = dsp_tensor_view(c->pend, DSP_BF16, 3, sh);
  const double t0 = dsp_now_ms();
  for (int32_t q = 0; q < c->next_q;) {
    int32_t ns = 0, rows = 0;
    for (; q < c->next_q; q++) {
      const int32_t sl = c->s[q].slot, n = c->pend_n[sl];
      if (!chosen(c, q, sel) || n == 0) continue;
      if (rows + n > c->d->opt.max_ctx) break;
      c->slot[ns] = sl, c->row0[ns] = sl * c->pend_cap, c->ccount[ns] = n;
      c->pend_n[sl] = 0;
      rows += n, ns++;
    }
    dsp_draft_batch db = {.nseq = ns, .slot = c->slot, .ctx = &pv, .ctx_row0 = c->row0, .ctx_count = c->ccount,
                          .append_only = 1};
    dsp_draft_outputs dout = {0};
    if (ns > 0) DSP_TRY(dsp_draft_propose(c->d, &db, &dout));
  }
  st->draft_ms += dsp_now_ms() - t0;
  return DSP_OK;
}

/* The context rows of the target's last call of the sequences sel chooses (their taps, read before the next call
 * replaces them) into their waiting rows: one copy per tap of the call's rows (a verification's: at most
 * nslots x (G + 1)), then each sequence's from there. */
static dsp_status stash(spec *c, dsp_generate_stats *st, int sel) {
  int32_t rows = 0, over = 0;
  for (int32_t q = 0; q < c->next_q; q++) {
    const seq_state *s = &c->s[q];
    if (!chosen(c, q, sel) || s->ctx_count == 0) continue;
    rows = s->ctx_row0 + s->ctx_count > rows ? s->ctx_row0 + s->ctx_count : rows;
    over |= c->pend_n[s->slot] + s->ctx_count > c->pend_cap;
  }
  if (rows == 0) return DSP_OK;
  if (over) DSP_TRY(flush(c, st, -1));
  const dsp_target *t = c->t;
  const int64_t H = dsp_target_info_of(t)->hidden, R = t->opt.max_tokens, Rh = (int64_t)c->nslots * (c->G + 1);
  const int64_t P = (int64_t)c->nslots * c->pend_cap;
  DSP_ASSERT(rows <= Rh);
  for (int64_t j = 0; j < t->opt.ntaps; j++)
    DSP_TRY(dsp_op_download(t->be, 0, c->taps_host + j * Rh * H, (const dsp_bf16 *)t->d[0].taps.data + j * R * H,
                            (size_t)((int64_t)rows * H) * 2));
  for (int32_t q = 0; q < c->next_q; q++) {
    seq_state *s = &c->s[q];
    if (!chosen(c, q, sel) || s->ctx_count == 0) continue;
    for (int64_t j = 0; j < t->opt.ntaps; j++)
      memcpy(c->pend + (j * P + (int64_t)s->slot * c->pend_cap + c->pend_n[s->slot]) * H,
             c->taps_host + (j * Rh + s->ctx_row0) * H, (size_t)(s->ctx_count * H) * 2);
    c->pend_n[s->slot] += s->ctx_count;
    s->ctx_count = 0;
  }
  return DSP_OK;
}

/* Prefills the sequences adm[0 .. na-1] (each holding its slot) in calls of
 * at most the target's call size; done[] counts each one's prompt tokens run. */
static dsp_status prefill(spec *c, const int32_t *adm, int32_t na, int32_t *done, const int32_t *const *prompts,
                          const int32_t *lens, dsp_generate_stats *st) {
  dsp_target *t = c->t;
  const int32_t cap = dsp_target_info_of(t)->max_tokens;
  dsp_status s = DSP_OK;
  for (int32_t i = 0; s == DSP_OK && i < na; i++) {
    const int32_t q = adm[i];
    done[i] = 0;
    s = dsp_target_truncate(t, c->s[q].slot, 0);
    if (s == DSP_OK) s = dsp_draft_truncate(c->d, c->s[q].slot, 0);
    if (c->lazy) c->pend_n[c->s[q].slot] = 0;
    st->prompt_tokens += lens[q];
  }
  for (int32_t cur = 0; s == DSP_OK && cur < na;) {
    int32_t ns = 0, nt = 0;
    for (int32_t i = cur; i < na && nt < cap; i++) {
      const int32_t q = adm[i];
      const int32_t k = lens[q] - done[i] < cap - nt ? lens[q] - done[i] : cap - nt;
      c->slot[ns] = c->s[q].slot, c->count[ns] = k, c->which[ns] = i, c->row0[ns] = nt;
      c->temp[ns] = c->o->gen.temperature;
      c->seed[ns] = c->o->gen.seeds ? c->o->gen.seeds[q] : c->o->gen.seed;
      memcpy(c->tok + nt, prompts[q] + done[i], (size_t)k * 4);
      nt += k;
      done[i] += k;
      ns++;
    }
    dsp_target_batch b = {.nseq = ns, .slot = c->slot, .count = c->count, .tokens = c->tok, .last_only = 1,
                          .temperature = c->sampling ? c->temp : NULL, .seed = c->seed};
    dsp_target_outputs out = {.next = c->next};
    s = dsp_target_forward(t, &b, &out);
    st->prefill_calls++;
    /* the same rows' taps into the draft's context, read where the target keeps them */
    dsp_draft_batch db = {.nseq = ns, .slot = c->slot, .ctx_row0 = c->row0, .ctx_count = c->count,
                          .append_only = 1, .ctx_target = 1};
    dsp_draft_outputs dout = {0};
    if (s == DSP_OK) s = dsp_draft_propose(c->d, &db, &dout);
    for (int32_t r = 0; s == DSP_OK && r < ns; r++) {
      const int32_t i = c->which[r], q = adm[i];
      if (done[i] == lens[q]) {
        c->s[q].x = (int32_t)c->next[r];
        c->s[q].n = lens[q];
      }
    }
    while (cur < na && done[cur] == lens[adm[cur]]) cur++;
  }
  return s;
}

/* Admits waiting prompts into free slots (prefill, then each one's first token);
 * one that ends at its first token frees its slot for the next at once.
 * *live counts the running sequences. */
static dsp_status admit(spec *c, int32_t nseq, const int32_t *const *prompts, const int32_t *lens, dsp_token_fn fn,
                        void *ctx, int32_t *live, dsp_generate_stats *st) {
  const dsp_generate_options *g = &c->o->gen;
  if (c->nfree > 0 && c->next_q < nseq) {
    /* the prefill replaces the target's taps: first the running sequences'
     * pending context rows (from the last verification) go into the draft, or wait */
    int32_t ns = 0;
    if (c->lazy) DSP_TRY(stash(c, st, -1));
    for (int32_t q = 0; q < c->next_q; q++)
      if (!c->s[q].stop && c->s[q].ctx_count > 0) {
        c->slot[ns] = c->s[q].slot, c->row0[ns] = c->s[q].ctx_row0, c->ccount[ns] = c->s[q].ctx_count;
        c->s[q].ctx_count = 0;
        ns++;
      }
    if (ns > 0) {
      dsp_draft_batch db = {.nseq = ns, .slot = c->slot, .ctx_row0 = c->row0, .ctx_count = c->ccount,
                            .append_only = 1, .ctx_target = 1};
      dsp_draft_outputs dout = {0};
      const double t0 = dsp_now_ms();
      DSP_TRY(dsp_draft_propose(c->d, &db, &dout));
      st->draft_ms += dsp_now_ms() - t0;
    }
  }
  while (c->nfree > 0 && c->next_q < nseq) {
    int32_t na = 0;
    int32_t *adm = c->adm;
    while (c->nfree > 0 && c->next_q < nseq) {
      const int32_t q = c->next_q++;
      c->s[q].slot = c->free_slot[--c->nfree];
      adm[na++] = q;
    }
    DSP_TRY(prefill(c, adm, na, c->done, prompts, lens, st));
    for (int32_t i = 0; i < na; i++) {
      seq_state *s = &c->s[adm[i]];
      s->made = 1;
      s->stop = dsp_gen_is_eos(c->t, g, s->x) ? 2 : s->made >= g->max_new;
      if (fn) fn(ctx, adm[i], &s->x, 1);
      if (s->stop) c->free_slot[c->nfree++] = s->slot;
      else ++*live;
    }
  }
  return DSP_OK;
}

/* Greedy: the longest prefix of the drafts equal to the target's argmax, then its argmax as the bonus (exact
 * sampling: the same with the target's Gumbel-max draws, which plain sampled decoding would commit). */
static int32_t accept_greedy(const spec *c, int32_t r, int32_t vrow, int32_t k, int32_t *bonus) {
  const int64_t *dr = c->drafts + (int64_t)r * c->G;
  int32_t a = 0;
  while (a < k && dr[a] == c->next[vrow + a]) a++;
  *bonus = (int32_t)c->next[vrow + a];
  return a;
}

/* Sampling: each sequence's accepted drafts and its bonus (the residual draw at the first rejection, or the
 * target's own draw after a full accept), from the logits where this round left them. */
static dsp_status accept_sampled(spec *c, int32_t ns) {
  dsp_op_accept_args *a = &c->aa;
  const int32_t G = c->G;
  const int64_t *tstride = c->t_dev ? &c->t->d[0].logits.stride[0] : &c->V;
  const void *qd = NULL;
  int64_t qld = c->V;
  int32_t qrows = 0;
  if (c->q_dev) DSP_TRY(dsp_draft_device_logits(c->d, ns, &qd, &qld, &qrows));
  for (int32_t r = 0; r < ns; r++) {
    c->ndraft[r] = c->count[r] - 1;
    c->apos[r] = c->s[c->which[r]].n + 1;
    for (int32_t i = 0; i < G; i++) {
      c->toff[r * G + i] = (int64_t)(c->row0[r] + i) * *tstride;
      c->qoff[r * G + i] = c->q_dev ? ((int64_t)i * qrows + r) * qld : ((int64_t)r * G + i) * c->V;
    }
  }
  a->tlog = c->t_dev ? c->t->d[0].logits.data : c->tlog;
  a->qlog = c->q_dev ? qd : c->qlog;
  a->nseq = ns, a->accepted = c->acc;
  if (c->acc_op) DSP_TRY(dsp_op_accept(c->t->be, 0, a));
  else dsp_op_accept_host(a, c->nthreads);
  for (int32_t r = 0; r < ns; r++)
    c->bonus[r] = a->residual[r] >= 0 ? a->residual[r] : (int32_t)c->next[c->row0[r] + a->ndraft[r]];
  return DSP_OK;
}

/* Where sampling's acceptance reads the logits (spec's acc_op, t_dev, q_dev), and its buffers. */
static dsp_status accept_setup(spec *c, int32_t W) {
  dsp_backend *be = c->t->be;
  const size_t SG = (size_t)W * (size_t)c->G;
  const int one_rank = c->t->nd == 1 && c->t->tp == 1 && dsp_comm_size(be->comm) == 1;
  const void *qd = NULL;
  int64_t qld = 0;
  int32_t qrows = 0;
  if (be->kind == DSP_BACKEND_CUDA) {
    c->q_dev = one_rank && c->d->be == be && dsp_draft_device_logits(c->d, 1, &qd, &qld, &qrows) == DSP_OK;
    dsp_error_clear();
    c->acc_op = c->t_dev = c->q_dev;
  } else { /* the CPU's backend memory is the host's: the target's logits in place, the draft's copied */
    c->t_dev = one_rank;
    c->acc_op = 1;
  }
  dsp_op_accept_args *a = &c->aa;
  c->toff = malloc(SG * 8), c->qoff = malloc(SG * 8), c->apos = malloc((size_t)W * 8);
  c->ndraft = malloc((size_t)W * 4), c->residual = malloc((size_t)W * 4);
  *a = (dsp_op_accept_args){.vocab = c->V, .gamma = c->G, .drafts = c->drafts, .seed = c->seed, .temp = c->temp,
                            .toff = c->toff, .qoff = c->qoff, .pos = c->apos, .ndraft = c->ndraft,
                            .residual = c->residual};
  if (!c->t_dev) c->tlog = malloc((size_t)W * (size_t)(c->G + 1) * (size_t)c->V * 2);
  if (!c->q_dev) c->qlog = malloc(SG * (size_t)c->V * 2);
  if (!c->toff || !c->qoff || !c->apos || !c->ndraft || !c->residual || (!c->t_dev && !c->tlog) ||
      (!c->q_dev && !c->qlog))
    return dsp_fail(DSP_ERR_NOMEM, "speculate: out of memory");
  if (!c->acc_op) {
    a->ws_bytes = dsp_op_accept_host_bytes(c->V, W, c->G, c->nthreads);
    c->ws_host = a->ws = malloc(a->ws_bytes);
    return a->ws ? DSP_OK : dsp_fail(DSP_ERR_NOMEM, "speculate: out of memory");
  }
  DSP_TRY(dsp_op_accept_workspace(be, c->V, W, c->G, &a->ws_bytes, &a->hs_bytes));
  DSP_TRY(dsp_op_alloc(be, 0, a->ws_bytes, &a->ws));
  if (a->hs_bytes) DSP_TRY(dsp_op_host_alloc(be, 0, a->hs_bytes, &a->hs));
  return DSP_OK;
}

static void accept_free(spec *c) {
  dsp_op_accept_args *a = &c->aa;
  free(c->toff), free(c->qoff), free(c->apos), free(c->ndraft), free(c->residual);
  if (c->acc_op) {
    if (a->ws) dsp_op_release(c->t->be, 0, a->ws);
    if (a->hs) dsp_op_host_release(c->t->be, 0, a->hs);
  }
  free(c->ws_host), free(c->tlog), free(c->qlog);
}

/* gamma auto's probe of part of the batch: part running sequences draft, from probe_q on (the part rotates). */
static void pick_part(spec *c, int32_t part) {
  memset(c->pick, 0, (size_t)c->next_q);
  int32_t q = c->probe_q % c->next_q, n = 0;
  for (int32_t i = 0; i < c->next_q && n < part; i++, q = (q + 1) % c->next_q)
    if (!c->s[q].stop) c->pick[q] = 1, n++;
  c->probe_q = q;
}

static dsp_status rounds(spec *c, int32_t nseq, const int32_t *const *prompts, const int32_t *lens, dsp_token_fn fn,
                         dsp_round_fn rf, void *ctx, int32_t live, dsp_generate_stats *st) {
  dsp_target *t = c->t;
  const dsp_generate_options *g = &c->o->gen;
  const int64_t K = c->G;
  while (live > 0) {
    /* gamma auto's k drafts (0: this round is a decode step; the draft appends its context, or with lazy it waits) */
    int32_t ns = 0;
    for (int32_t q = 0; q < c->next_q; q++) ns += !c->s[q].stop;
    const int32_t kmax = c->ag.on ? dsp_gamma_auto_k(&c->ag, c->G, ns, st) : (int32_t)K;
    /* a probe by part of the batch: those sequences draft (their waiting rows appended), the others' rows wait */
    const int32_t part = kmax > 0 && c->lazy && c->ag.part > 0 && c->ag.part < ns ? c->ag.part : 0;
    if (part) pick_part(c, part);
    const double st_ms = st->draft_ms;
    if (c->lazy && part) {
      DSP_TRY(stash(c, st, 0));
      DSP_TRY(flush(c, st, 1));
    } else if (c->lazy) {
      DSP_TRY(kmax == 0 ? stash(c, st, -1) : flush(c, st, -1));
    }
    /* propose: the batch in order, or the probing part first (rows 0 .. np - 1 draft) */
    ns = 0;
    int32_t np = 0;
    for (int sel = part ? 1 : -1; sel >= (part ? 0 : -1); sel--) {
      for (int32_t q = 0; q < c->next_q; q++)
        if (chosen(c, q, sel)) {
          c->slot[ns] = c->s[q].slot, c->which[ns] = q, c->anchor[ns] = c->s[q].x;
          c->row0[ns] = c->s[q].ctx_row0, c->ccount[ns] = c->s[q].ctx_count;
          c->temp[ns] = g->temperature;
          c->seed[ns] = g->seeds ? g->seeds[q] : g->seed;
          ns++;
        }
      if (sel != 0) np = ns;
    }
    int64_t qsh[3] = {np, K, c->V};
    dsp_tensor qv = dsp_tensor_view(c->qlog, DSP_BF16, 3, qsh);
    dsp_draft_batch db = {.nseq = np, .slot = c->slot, .ctx_row0 = c->row0, .ctx_count = c->ccount,
                          .anchor = c->anchor, .temperature = c->sampling ? c->temp : NULL, .seed = c->seed,
                          .append_only = kmax == 0, .ctx_target = 1, .rows = c->ag.rows && kmax > 0 ? kmax : 0};
    dsp_draft_outputs dout = {.tokens = c->drafts, .logits = c->rejection && !c->q_dev ? &qv : NULL,
                              .confidence = c->o->p_min > 0.0f ? c->conf : NULL};
    double t0 = dsp_now_ms();
    if (!(c->lazy && kmax == 0)) DSP_TRY(dsp_draft_propose(c->d, &db, &dout));
    const double prop_ms = dsp_now_ms() - t0;
    st->draft_ms += prop_ms;
    const double draft_ms = st->draft_ms - st_ms; /* with the waiting rows' stash or flush */
    /* verify [anchor, drafts] (cut at the first slot below the confidence threshold) */
    int32_t nt = 0;
    for (int32_t r = 0; r < ns; r++) {
      int32_t k = r < np ? kmax : 0;
      for (int32_t i = 0; c->o->p_min > 0.0f && i < k; i++)
        if (c->conf[r * K + i] < c->o->p_min) k = i;
      c->count[r] = k + 1;
      c->row0[r] = nt;
      c->tok[nt] = c->anchor[r];
      for (int32_t i = 0; i < k; i++) c->tok[nt + 1 + i] = (int32_t)c->drafts[r * K + i];
      nt += k + 1;
    }
    dsp_tensor lv = dsp_tensor_2d(c->tlog, DSP_BF16, nt, c->V);
    dsp_target_batch vb = {.nseq = ns, .slot = c->slot, .count = c->count, .tokens = c->tok,
                           .temperature = c->sampling ? c->temp : NULL, .seed = c->seed};
    dsp_target_outputs vo = {.next = c->next, .logits = c->rejection && !c->t_dev ? &lv : NULL};
    t0 = dsp_now_ms();
    DSP_TRY(dsp_target_forward(t, &vb, &vo));
    const double verify_ms = dsp_now_ms() - t0;
    st->verify_ms += verify_ms;
    st->decode_calls++;
    if (c->ag.on) DSP_TRY(dsp_gamma_auto_learn(&c->ag, t->be->comm, nt, kmax, part, verify_ms, draft_ms, prop_ms));
    /* accept, commit, roll back */
    if (c->rejection) DSP_TRY(accept_sampled(c, ns));
    else /* greedy, or exact sampling: c->next holds the target's own draws */
      for (int32_t r = 0; r < ns; r++) c->acc[r] = accept_greedy(c, r, c->row0[r], c->count[r] - 1, &c->bonus[r]);
    for (int32_t r = 0; r < ns; r++) {
      const int32_t q = c->which[r], k = c->count[r] - 1;
      seq_state *s = &c->s[q];
      const int32_t bonus = c->bonus[r], a = c->acc[r];
      if (kmax > 0 && r < np) st->rounds++;
      else st->plain_rounds++;
      st->drafted += k;
      st->accepted += a;
      for (int32_t i = 0; i <= a && i < k && i < 64; i++) st->tried[i]++;
      for (int32_t i = 0; i < a && i < 64; i++) st->kept[i]++;
      if (rf) {
        dsp_spec_round rd = {.seq = q, .anchor = s->x, .ndraft = k, .accepted = a, .bonus = bonus,
                             .draft = c->drafts + (int64_t)r * K};
        rf(ctx, &rd);
      }
      int32_t n = 0;
      for (int32_t i = 0; i <= a && !s->stop; i++) {
        const int32_t id = i < a ? (int32_t)c->drafts[r * K + i] : bonus;
        c->commit[n++] = id;
        s->made++;
        if (dsp_gen_is_eos(t, g, id)) s->stop = 2;
        else if (s->made >= g->max_new) s->stop = 1;
      }
      if (fn && n) fn(ctx, q, c->commit, n);
      if (s->stop) { /* it leaves the batch; its slot takes the next prompt */
        live--;
        c->free_slot[c->nfree++] = s->slot;
        continue;
      }
      DSP_TRY(dsp_target_truncate(t, s->slot, s->n + 1 + a)); /* the anchor and the accepted drafts */
      s->ctx_row0 = c->row0[r];
      s->ctx_count = a + 1;
      s->n += 1 + a;
      s->x = bonus;
    }
    DSP_TRY(admit(c, nseq, prompts, lens, fn, ctx, &live, st));
  }
  return DSP_OK;
}

dsp_status dsp_speculate(dsp_target *t, dsp_draft *d, int32_t nseq, const int32_t *const *prompts,
                         const int32_t *lens, const dsp_spec_options *o, dsp_token_fn fn, dsp_round_fn rf, void *ctx,
                         int32_t *finished, dsp_generate_stats *st) {
  if (!t || !d || !o) return dsp_fail(DSP_ERR_ARG, "speculate: NULL target, draft or options");
  dsp_generate_stats local;
  if (!st) st = &local;
  *st = (dsp_generate_stats){0};
  const dsp_draft_info *di = dsp_draft_info_of(d);
  const dsp_target_info *ti = dsp_target_info_of(t);
  if (d->target != t) return dsp_fail(DSP_ERR_ARG, "speculate: the draft was loaded for another target");
  const int32_t G = o->gamma > 0 ? o->gamma : (int32_t)di->gamma;
  if (o->verify != DSP_VERIFY_REJECTION && o->verify != DSP_VERIFY_EXACT)
    return dsp_fail(DSP_ERR_ARG, "speculate: verify %d is neither DSP_VERIFY_REJECTION nor DSP_VERIFY_EXACT",
                    o->verify);
  if (o->gamma == DSP_GAMMA_AUTO && o->gen.temperature >= 1e-5f && o->verify == DSP_VERIFY_REJECTION)
    return dsp_fail(DSP_ERR_ARG, "speculate: gamma auto is for greedy decoding or exact verification (a sampled "
                    "run's tokens under rejection would depend on its timings)");
  if (o->gamma < DSP_GAMMA_AUTO || G < 1 || G > di->gamma)
    return dsp_fail(DSP_ERR_RANGE, "speculate: gamma %d outside 1 .. %lld (the draft's gamma; its block_size is %lld)",
                    G, (long long)di->gamma, (long long)di->block_size);
  if (!(o->p_min >= 0.0f && o->p_min < 1.0f))
    return dsp_fail(DSP_ERR_RANGE, "speculate: the confidence threshold %g must be in [0, 1)", (double)o->p_min);
  if (o->p_min > 0.0f && !di->confidence)
    return dsp_fail(DSP_ERR_ARG, "speculate: a confidence threshold needs a draft with a confidence head");
  DSP_TRY(dsp_gen_check(t, nseq, prompts, lens, &o->gen, G + 1, 1));
  /* the running batch: as many sequences as both models have slots */
  const int32_t W = nseq < ti->max_seqs ? (nseq < d->opt.max_seqs ? nseq : d->opt.max_seqs)
                                        : (ti->max_seqs < d->opt.max_seqs ? ti->max_seqs : d->opt.max_seqs);
  if ((int64_t)W * (G + 1) > ti->max_tokens)
    return dsp_fail(DSP_ERR_RANGE, "speculate: a verification of %d x %d tokens exceeds the target's call size %d",
                    W, G + 1, ti->max_tokens);
  if (ti->max_tokens > d->opt.max_ctx)
    return dsp_fail(DSP_ERR_RANGE, "speculate: the draft's context calls (%d rows) must hold the target's (%d)",
                    d->opt.max_ctx, ti->max_tokens);
  for (int32_t q = 0; q < nseq; q++)
    if ((int64_t)lens[q] + o->gen.max_new + di->block_size > d->opt.max_len)
      return dsp_fail(DSP_ERR_RANGE, "speculate: prompt %d with %d new tokens needs %lld draft context positions; the "
                      "draft holds %d", q, o->gen.max_new, (long long)lens[q] + o->gen.max_new + di->block_size,
                      d->opt.max_len);
  spec c = {.t = t, .d = d, .o = o, .G = G, .V = ti->vocab,
            .sampling = o->gen.temperature >= 1e-5f,
            .rejection = o->gen.temperature >= 1e-5f && o->verify == DSP_VERIFY_REJECTION, .nslots = W,
            .ag = {.on = o->gamma == DSP_GAMMA_AUTO, .rows = o->gamma == DSP_GAMMA_AUTO && d->opt.block_gamma},
            .nthreads = omp_get_max_threads()};
  const size_t S = (size_t)W, R = (size_t)ti->max_tokens;
  c.s = calloc((size_t)nseq, sizeof *c.s);
  c.free_slot = malloc(S * 4);
  c.slot = malloc(S * 4), c.count = malloc(S * 4), c.which = malloc(S * 4), c.anchor = malloc(S * 4);
  c.row0 = malloc(S * 4), c.ccount = malloc(S * 4), c.tok = malloc(R * 4);
  c.temp = malloc(S * 4), c.conf = malloc(S * (size_t)G * 4), c.seed = malloc(S * 8);
  c.next = malloc(R * 8), c.drafts = malloc(S * (size_t)G * 8), c.commit = malloc((size_t)(G + 1) * 4);
  c.adm = malloc(S * 4), c.done = malloc(S * 4), c.acc = malloc(S * 4), c.bonus = malloc(S * 4);
  dsp_status s = c.s && c.free_slot && c.adm && c.done && c.slot && c.count && c.which && c.anchor && c.row0 &&
                         c.ccount && c.tok && c.temp && c.conf && c.seed && c.next && c.drafts && c.commit && c.acc &&
                         c.bonus
                     ? DSP_OK
                     : dsp_fail(DSP_ERR_NOMEM, "speculate: out of memory");
  if (s == DSP_OK && c.rejection) s = dsp_comm_agree(t->be->comm, accept_setup(&c, W));
  if (s == DSP_OK && c.ag.on) {
    /* room for a verification's rows and at least 32 decode steps', up to 64 MiB in all (where no drafts pay, the
       draft then runs no appends until the rows fill it), at most one of the draft's calls a slot */
    const int64_t row_bytes = (int64_t)t->opt.ntaps * (int64_t)S * ti->hidden * 2;
    int64_t cap = ((int64_t)64 << 20) / (row_bytes > 0 ? row_bytes : 1);
    cap = cap < G + 33 ? G + 33 : cap;
    cap = cap < d->opt.max_len ? cap : d->opt.max_len;
    c.lazy = 1;
    c.pend_cap = (int32_t)(cap < d->opt.max_ctx ? cap : d->opt.max_ctx);
    c.pick = calloc((size_t)nseq, 1);
    c.pend_n = calloc(S, 4);
    c.pend = malloc((size_t)t->opt.ntaps * S * (size_t)c.pend_cap * (size_t)ti->hidden * 2);
    c.taps_host = malloc((size_t)t->opt.ntaps * S * (size_t)(G + 1) * (size_t)ti->hidden * 2);
    if (!c.pick || !c.pend_n || !c.pend || !c.taps_host) s = dsp_fail(DSP_ERR_NOMEM, "speculate: out of memory");
  }
  for (int32_t i = 0; c.free_slot && i < W; i++) c.free_slot[i] = W - 1 - i; /* slot 0 first */
  c.nfree = W;
  int32_t live = 0;
  double t0 = dsp_now_ms();
  if (s == DSP_OK) s = admit(&c, nseq, prompts, lens, fn, ctx, &live, st);
  st->prefill_ms = dsp_now_ms() - t0;
  t0 = dsp_now_ms();
  if (s == DSP_OK) s = rounds(&c, nseq, prompts, lens, fn, rf, ctx, live, st);
  st->decode_ms = dsp_now_ms() - t0;
  for (int32_t q = 0; c.s && q < nseq; q++) {
    st->new_tokens += c.s[q].made;
    if (finished) finished[q] = c.s[q].stop == 2;
  }
  free(c.s), free(c.free_slot), free(c.adm), free(c.done), free(c.slot), free(c.count), free(c.which), free(c.anchor), free(c.row0), free(c.ccount);
  free(c.tok), free(c.temp), free(c.conf), free(c.seed), free(c.next), free(c.drafts), free(c.commit);
  free(c.acc), free(c.bonus), free(c.pend), free(c.pend_n), free(c.taps_host), free(c.pick);
  if (c.rejection) accept_free(&c);
  return s;
}
