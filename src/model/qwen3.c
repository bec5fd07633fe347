/* The Qwen3 target's forward, on the backend's operations only. One call
 * serves prefill, decode and verify: the batch's new tokens are the rows of
 * every product; each sequence's keys and values go to its cache slot at its
 * next positions, and attention sees the slot's cache causally. Every row's
 * arithmetic is independent of the other rows (products, norms and attention
 * reduce in a fixed order per row), so a position's results do not depend on
 * the batch, the bucket or how its tokens were split over calls. With TP > 1
 * the o and down products are row-parallel: fp32 partials, all-reduced, then
 * rounded once (docs/CONTRACTS.md, "The models"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "core/status.h"
#include "core/select.h"
#include "core/tensor.h"
#include "model/qwen3_impl.h"

/* One device's part of a forward, as enqueued operations (run directly, or
 * captured into a graph): the metadata in, every layer, the selection's keys out. */
static dsp_status step(dsp_target *t, int di) {
  qw_dev *d = &t->d[di];
  dsp_backend *be = t->be;
  const dsp_target_info *in = &t->info;
  const int64_t M = t->mrows, S = t->srows;
  const int dev = d->dev;
  DSP_TRY(dsp_op_upload_async(be, dev, d->dm.rows, d->hm.rows, d->meta_bytes));
  dsp_tensor x = dsp_dec_rows(d->a.x, M);
  DSP_TRY(dsp_op_embed(be, dev, &d->embed, d->dm.ids, M, &x));
  dsp_dec_io io = {.kv_stride = d->s.hkv * in->head_dim, .slots = t->opt.max_seqs + 1, .max_len = t->opt.max_len,
                   .rows = d->dm.rows, .pos = d->dm.pos, .rslot = d->dm.rslot, .rkeys = d->dm.rkeys,
                   .rope_cos = &d->rope_cos, .rope_sin = &d->rope_sin, .comm = d->comm, .row_group = t->group};
  for (int64_t l = 0; l < in->layers; l++) {
    qw_layer *L = &d->layer[l];
    io.k_cache = L->k_cache;
    io.v_cache = L->v_cache;
    io.h_ready = l > 0; /* each layer norms the next one's input with its last residual */
    io.next_norm = l + 1 < in->layers ? &d->layer[l + 1].w.in_norm : NULL;
    DSP_TRY(dsp_dec_layer_forward(be, dev, &L->w, &d->s, &d->a, M, &io));
    for (int i = 0; i < t->opt.ntaps; i++)
      if (t->taps[i] == l && d->taps.data) { /* the residual stream is replicated: each device's own */
        char *dst = (char *)d->taps.data + (size_t)i * (size_t)t->opt.max_tokens * (size_t)in->hidden * 2;
        DSP_TRY(dsp_op_copy(be, dev, dst, x.data, (size_t)(M * in->hidden) * 2));
      }
  }
  /* the selecting rows, normed, through this rank's LM-head rows */
  dsp_tensor hs = dsp_dec_rows(d->a.h, S);
  if (t->batch->last_only) {
    DSP_TRY(dsp_op_gather_rows(be, dev, &x, d->dm.selidx, &hs));
    DSP_TRY(dsp_op_rmsnorm(be, dev, &hs, &d->final_norm, (float)in->eps, &hs));
  } else {
    DSP_TRY(dsp_op_rmsnorm(be, dev, &x, &d->final_norm, (float)in->eps, &hs));
  }
  dsp_tensor lg = dsp_dec_rows(d->logits, S);
  DSP_TRY(dsp_op_gemm(be, dev, &hs, d->lm, &lg));
  dsp_op_select_args sa = {.logits = &lg, .id0 = d->v0, .n_valid = d->vreal,
                           .t_row = t->sampling ? d->dm.trow : NULL, .seed_row = d->dm.seedrow,
                           .pos = d->dm.selpos, .keys = d->d_keys};
  DSP_TRY(dsp_op_select(be, dev, &sa));
  return dsp_op_download_async(be, dev, d->h_keys, d->d_keys, (size_t)S * 8);
}

/* Runs the step directly, or replays (first: runs, then captures) this bucket's graph. */
static dsp_status forward_dev(void *ctx, int di) {
  dsp_target *t = ctx;
  qw_dev *d = &t->d[di];
  if (t->bucket < 0) {
    DSP_TRY(step(t, di));
  } else if (d->graph[t->bucket][t->sampling + 2 * (t->group > 1)]) {
    DSP_TRY(dsp_op_replay(t->be, d->dev, d->graph[t->bucket][t->sampling + 2 * (t->group > 1)]));
  } else {
    /* the first call of a bucket runs eagerly (which also readies the products for its row count), then captures */
    DSP_TRY(step(t, di));
    DSP_TRY(dsp_op_sync(t->be, d->dev));
    DSP_TRY(dsp_op_capture_begin(t->be, d->dev));
    dsp_status s = step(t, di);
    dsp_op_graph *g = NULL;
    dsp_status e = dsp_op_capture_end(t->be, d->dev, &g);
    DSP_TRY(s);
    DSP_TRY(e);
    d->graph[t->bucket][t->sampling + 2 * (t->group > 1)] = g;
  }
  DSP_TRY(dsp_op_sync(t->be, d->dev));
  if (t->want_logits) {
    dsp_bf16 *dst = t->h_logits + (size_t)d->tp_rank * (size_t)t->opt.max_tokens * (size_t)d->vr;
    DSP_TRY(dsp_op_download(t->be, d->dev, dst, d->logits.data, (size_t)(t->nsel * d->vr) * 2));
  }
  return DSP_OK;
}

/* Fills device 0's staging with the call's metadata (padding rows after the
 * real ones read and write the spare slot), then copies it to the others'. */
static void stage(dsp_target *t, const dsp_target_batch *b) {
  qw_meta *m = &t->d[0].hm;
  const int32_t spare = t->opt.max_seqs;
  int64_t r = 0, k = 0;
  for (int32_t s = 0; s < b->nseq; s++) {
    const int64_t p0 = t->len[b->slot[s]];
    for (int32_t i = 0; i < b->count[s]; i++, r++) {
      m->ids[r] = b->tokens[r];
      m->pos[r] = (int32_t)(p0 + i);
      m->rslot[r] = b->slot[s];
      m->rkeys[r] = (int32_t)(p0 + i + 1);
      m->rows[r] = (int64_t)b->slot[s] * t->opt.max_len + p0 + i;
      if (!b->last_only || i == b->count[s] - 1) {
        m->selidx[k] = r;
        m->selpos[k] = p0 + i + 1; /* the position of the token it draws */
        m->trow[k] = b->temperature ? b->temperature[s] : 0.0f;
        m->seedrow[k] = b->seed ? b->seed[s] : 0;
        k++;
      }
    }
  }
  for (; r < t->mrows; r++) {
    m->ids[r] = 0, m->pos[r] = 0, m->rslot[r] = spare, m->rkeys[r] = 1;
    m->rows[r] = (int64_t)spare * t->opt.max_len;
  }
  for (; k < t->srows; k++) m->selidx[k] = 0, m->selpos[k] = 0, m->trow[k] = 0.0f, m->seedrow[k] = 0;
  for (int di = 1; di < t->nd; di++) memcpy(t->d[di].h_meta, t->d[0].h_meta, t->d[0].meta_bytes);
}

static dsp_status check_batch(const dsp_target *t, const dsp_target_batch *b) {
  if (!b || b->nseq < 1 || b->nseq > t->opt.max_seqs || !b->slot || !b->count || !b->tokens)
    return dsp_fail(DSP_ERR_ARG, "target: a batch needs 1 .. %d sequences with slots, counts and tokens",
                    t->opt.max_seqs);
  int64_t total = 0;
  for (int32_t s = 0; s < b->nseq; s++) {
    const int32_t sl = b->slot[s];
    if (sl < 0 || sl >= t->opt.max_seqs)
      return dsp_fail(DSP_ERR_RANGE, "target: slot %d outside [0, %d)", sl, t->opt.max_seqs);
    for (int32_t r = 0; r < s; r++)
      if (b->slot[r] == sl) return dsp_fail(DSP_ERR_ARG, "target: slot %d appears twice in one batch", sl);
    if (b->count[s] < 1) return dsp_fail(DSP_ERR_ARG, "target: sequence %d brings %d new tokens", s, b->count[s]);
    if (t->len[sl] + b->count[s] > t->opt.max_len)
      return dsp_fail(DSP_ERR_RANGE, "target: slot %d would hold %lld positions; the cache holds %d", sl,
                      (long long)(t->len[sl] + b->count[s]), t->opt.max_len);
    if (b->temperature && (!(b->temperature[s] >= 0.0f) || isinf(b->temperature[s])))
      return dsp_fail(DSP_ERR_RANGE, "target: temperature[%d] = %g: must be finite and >= 0", s,
                      (double)b->temperature[s]);
    total += b->count[s];
  }
  if (total > t->opt.max_tokens)
    return dsp_fail(DSP_ERR_RANGE, "target: %lld new tokens in one call; at most %d", (long long)total,
                    t->opt.max_tokens);
  for (int64_t i = 0; i < total; i++)
    if (b->tokens[i] < 0 || b->tokens[i] >= t->info.vocab)
      return dsp_fail(DSP_ERR_RANGE, "target: token id %d outside the vocabulary [0, %lld)", b->tokens[i],
                      (long long)t->info.vocab);
  return DSP_OK;
}

dsp_status dsp_target_forward(dsp_target *t, const dsp_target_batch *b, dsp_target_outputs *out) {
  if (!t || !out) return dsp_fail(DSP_ERR_ARG, "target forward: NULL argument");
  DSP_TRY(check_batch(t, b));
  const dsp_target_info *in = &t->info;
  int64_t M = 0;
  int sampling = 0, group = 1;
  for (int32_t s = 0; s < b->nseq; s++) {
    M += b->count[s];
    group = b->count[s] > group ? b->count[s] : group;
    sampling |= b->temperature && b->temperature[s] > 0.0f;
  }
  t->ntok = M;
  t->nsel = b->last_only ? b->nseq : M;
  const int64_t S = t->nsel;
  if (out->logits) {
    const dsp_tensor *l = out->logits;
    if (l->dtype != DSP_BF16 || l->ndim != 2 || l->shape[0] != S || l->shape[1] != in->vocab || !l->data)
      return dsp_fail(DSP_ERR_SHAPE, "target forward: logits output must be [%lld, %lld] BF16", (long long)S,
                      (long long)in->vocab);
  }
  if (out->taps) {
    const dsp_tensor *tp = out->taps;
    if (tp->dtype != DSP_BF16 || tp->ndim != 3 || tp->shape[0] != t->opt.ntaps || tp->shape[1] != t->ntok ||
        tp->shape[2] != in->hidden || !tp->data)
      return dsp_fail(DSP_ERR_SHAPE, "target forward: taps output must be [%d, %lld, %lld] BF16", t->opt.ntaps,
                      (long long)t->ntok, (long long)in->hidden);
  }
  /* decode and verify calls (every row selects) replay a graph of the smallest bucket that holds them */
  t->bucket = -1;
  t->mrows = M;
  t->srows = S;
  t->sampling = sampling;
  t->group = group; /* a graph keeps the hint of its capture: a speed choice, never a result */
  for (int i = 0; !b->last_only && i < t->nbuckets; i++)
    if (t->buckets[i] >= M) {
      t->bucket = i;
      t->mrows = t->srows = t->buckets[i];
      break;
    }
  t->batch = b;
  t->want_logits = out->logits != NULL;
  stage(t, b);
  dsp_status s = dsp_backend_each(t->be, forward_dev, t);
  s = dsp_comm_agree(t->be->comm, s);
  if (s != DSP_OK) return s; /* the caches of this call's rows may hold partial writes; lengths unchanged */
  /* the selection: the best key of this process's devices, then of every process */
  for (int64_t k = 0; k < S; k++) {
    uint64_t best = t->d[0].h_keys[k];
    for (int di = 1; di < t->nd; di++) best = t->d[di].h_keys[k] > best ? t->d[di].h_keys[k] : best;
    t->keys[k] = best;
  }
  const int procs = dsp_comm_size(t->be->comm);
  if (procs > 1) {
    DSP_TRY(dsp_comm_allgather(t->be->comm, t->keys, t->keys_all, (size_t)S * 8));
    for (int64_t k = 0; k < S; k++)
      for (int p = 0; p < procs; p++) {
        const uint64_t c = t->keys_all[(size_t)p * (size_t)S + (size_t)k];
        t->keys[k] = c > t->keys[k] ? c : t->keys[k];
      }
  }
  if (out->next)
    for (int64_t k = 0; k < S; k++) {
      const int64_t id = dsp_select_key_id(t->keys[k]);
      DSP_ASSERT(t->keys[k] != 0 && id >= 0 && id < in->vocab);
      out->next[k] = id;
    }
  if (out->logits) {
    const int64_t vr = t->d[0].vr, chunk = (int64_t)t->opt.max_tokens * vr;
    if (procs > 1) /* each process's ranks' local logits to every process */
      DSP_TRY(dsp_comm_allgather(t->be->comm, t->h_logits + (size_t)t->be->tp_rank0 * (size_t)chunk, t->h_logits,
                                 (size_t)chunk * (size_t)t->nd * 2));
    for (int32_t rk = 0; rk < t->tp; rk++) {
      const int64_t v0 = rk * vr, n = in->vocab - v0 < vr ? in->vocab - v0 : vr;
      for (int64_t k = 0; k < S && n > 0; k++)
        for (int64_t v = 0; v < n; v++)
          ((dsp_bf16 *)out->logits->data)[k * out->logits->stride[0] + (v0 + v) * out->logits->stride[1]] =
              t->h_logits[(size_t)rk * (size_t)chunk + (size_t)(k * vr + v)];
    }
  }
  if (out->taps)
    for (int i = 0; i < t->opt.ntaps; i++)
      DSP_TRY(dsp_op_download(t->be, 0, (char *)out->taps->data + (size_t)(i * out->taps->stride[0]) * 2,
                              (char *)t->d[0].taps.data + (size_t)i * (size_t)t->opt.max_tokens * (size_t)in->hidden * 2,
                              (size_t)(t->ntok * in->hidden) * 2));
  for (int32_t q = 0; q < b->nseq; q++) t->len[b->slot[q]] += b->count[q];
  return DSP_OK;
}

int64_t dsp_target_length(const dsp_target *t, int32_t slot) {
  return t && slot >= 0 && slot < t->opt.max_seqs ? t->len[slot] : -1;
}

dsp_status dsp_target_truncate(dsp_target *t, int32_t slot, int64_t len) {
  if (!t || slot < 0 || slot >= t->opt.max_seqs)
    return dsp_fail(DSP_ERR_RANGE, "target truncate: slot %d outside [0, %d)", slot, t ? t->opt.max_seqs : 0);
  if (len < 0 || len > t->len[slot])
    return dsp_fail(DSP_ERR_RANGE, "target truncate: slot %d holds %lld positions, cannot keep %lld", slot,
                    (long long)t->len[slot], (long long)len);
  t->len[slot] = len; /* later writes overwrite the dropped rows; attention never reads past len */
  return DSP_OK;
}

const dsp_target_info *dsp_target_info_of(const dsp_target *t) { return &t->info; }
const char *dsp_target_report(const dsp_target *t) { return t->report; }
