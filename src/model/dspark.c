/* One DSpark proposal on the backend's operations: the context append
 * (every layer's K and V of ctx = hidden_norm(fc(taps)) in one product, one
 * RoPE call over all layers' heads), the block through the draft layers
 * (its K/V written past the context, where attention reads them and the next
 * append overwrites them), the final norm, then the Markov head and the
 * confidence head. Each row's arithmetic depends on that row and its slot
 * alone, as in the target. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "core/bf16.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/dspark_impl.h"
#include "model/markov_head_impl.h"
#include "model/qwen3_impl.h"

static dsp_status check_batch(const dsp_draft *dr, const dsp_draft_batch *b) {
  const dsp_draft_options *o = &dr->opt;
  if (b && (b->rows < 0 || b->rows > dr->blk))
    return dsp_fail(DSP_ERR_RANGE, "draft: a block of %d rows; this draft's blocks have 1 .. %lld", b->rows,
                    (long long)dr->blk);
  const int64_t H = dr->cfg.hidden, G = b && b->rows > 0 ? b->rows : dr->blk;
  if (!b || b->nseq < 1 || b->nseq > o->max_seqs || !b->slot || (!b->anchor && !b->append_only) || !b->ctx_count ||
      !b->ctx_row0)
    return dsp_fail(DSP_ERR_ARG, "draft: a batch needs 1 .. %d sequences with slots, anchors and context rows",
                    o->max_seqs);
  int64_t total = 0;
  for (int32_t s = 0; s < b->nseq; s++) {
    const int32_t sl = b->slot[s];
    if (sl < 0 || sl >= o->max_seqs) return dsp_fail(DSP_ERR_RANGE, "draft: slot %d outside [0, %d)", sl, o->max_seqs);
    for (int32_t r = 0; r < s; r++)
      if (b->slot[r] == sl) return dsp_fail(DSP_ERR_ARG, "draft: slot %d appears twice in one batch", sl);
    if (b->ctx_count[s] < 0) return dsp_fail(DSP_ERR_ARG, "draft: sequence %d appends %d rows", s, b->ctx_count[s]);
    if (!b->append_only && (b->anchor[s] < 0 || b->anchor[s] >= dr->cfg.vocab))
      return dsp_fail(DSP_ERR_RANGE, "draft: anchor %d outside the vocabulary [0, %lld)", b->anchor[s],
                      (long long)dr->cfg.vocab);
    const int64_t start = dr->len[sl] + b->ctx_count[s];
    if (start + (b->append_only ? 0 : G) > o->max_len)
      return dsp_fail(DSP_ERR_RANGE, "draft: slot %d: a block of %lld at position %lld passes the %d positions of the "
                      "context cache", sl, (long long)G, (long long)start, o->max_len);
    if (b->temperature && (!(b->temperature[s] >= 0.0f) || isinf(b->temperature[s])))
      return dsp_fail(DSP_ERR_RANGE, "draft: temperature[%d] = %g: must be finite and >= 0", s,
                      (double)b->temperature[s]);
    if (b->ctx_count[s] && b->ctx_target) {
      if (!dr->target->d[0].taps.data)
        return dsp_fail(DSP_ERR_ARG, "draft: the target was loaded without taps");
      if (b->ctx_row0[s] < 0 || b->ctx_row0[s] + b->ctx_count[s] > dr->target->ntok)
        return dsp_fail(DSP_ERR_RANGE, "draft: sequence %d's context rows %d .. %d outside the %lld rows of the "
                        "target's last call", s, b->ctx_row0[s], b->ctx_row0[s] + b->ctx_count[s],
                        (long long)dr->target->ntok);
    } else if (b->ctx_count[s]) {
      const dsp_tensor *c = b->ctx;
      if (!c || !c->data || c->dtype != DSP_BF16 || c->ndim != 3 || c->shape[0] != dr->cfg.ntaps || c->shape[2] != H ||
          c->stride[2] != 1)
        return dsp_fail(DSP_ERR_SHAPE, "draft: context taps must be a [%d, rows, %lld] BF16 view", dr->cfg.ntaps,
                        (long long)H);
      if (b->ctx_row0[s] < 0 || b->ctx_row0[s] + b->ctx_count[s] > c->shape[1])
        return dsp_fail(DSP_ERR_RANGE, "draft: sequence %d's context rows %d .. %d outside the %lld rows given", s,
                        b->ctx_row0[s], b->ctx_row0[s] + b->ctx_count[s], (long long)c->shape[1]);
    }
    total += b->ctx_count[s];
  }
  if (total > o->max_ctx)
    return dsp_fail(DSP_ERR_RANGE, "draft: %lld context rows in one call; at most %d", (long long)total, o->max_ctx);
  return DSP_OK;
}

/* Device 0's staging: the context rows' features and positions, the block rows. */
static void stage(dsp_draft *dr, const dsp_draft_batch *b) {
  dr_dev *d0 = &dr->d[0];
  dr_meta *m = &d0->hm;
  const int64_t H = dr->cfg.hidden, T = dr->cfg.ntaps, P = dr->opt.max_len;
  const int64_t G = b->rows > 0 ? b->rows : dr->blk; /* this call's block rows */
  int64_t n = 0, r = 0;
  dr->bcall = G;
  for (int32_t s = 0; s < b->nseq; s++) {
    const int64_t sl = b->slot[s], p0 = dr->len[sl];
    for (int32_t i = 0; i < b->ctx_count[s]; i++, n++) {
      m->csrc[n] = b->ctx_row0[s] + i;
      for (int64_t j = 0; !b->ctx_target && j < T; j++)
        memcpy(d0->h_feats + (n * T + j) * H,
               (const dsp_bf16 *)b->ctx->data + j * b->ctx->stride[0] + (b->ctx_row0[s] + i) * b->ctx->stride[1],
               (size_t)H * 2);
      m->cpos[n] = (int32_t)(p0 + i);
      m->crows[n] = sl * P + p0 + i;
    }
    const int64_t start = p0 + b->ctx_count[s];
    for (int64_t k = 0; !b->append_only && k < G; k++, r++) {
      m->bids[r] = k == 0 ? b->anchor[s] : (int32_t)dr->cfg.mask_token_id;
      m->bpos[r] = (int32_t)(start + k);
      m->brows[r] = sl * P + start + k;
      m->bslot[r] = (int32_t)sl;
      m->bkeys[r] = (int32_t)(start + G);
    }
  }
  dr->nreal = r;
  if (dr->fused) { /* the bucket's padding: inert rows on the spare slot, and the head's row map */
    const dsp_markov_fused *fb = &dr->fb;
    const int64_t spare = dr->opt.max_seqs, Gh = dr->info.gamma;
    for (; n < (int64_t)fb->size * (G + 1); n++) m->cpos[n] = 0, m->crows[n] = spare * P, m->csrc[n] = 0;
    for (; r < (int64_t)fb->size * G; r++) {
      const int64_t k = r % G;
      m->bids[r] = 0, m->bpos[r] = (int32_t)k, m->brows[r] = spare * P + k;
      m->bslot[r] = (int32_t)spare, m->bkeys[r] = (int32_t)G;
    }
    for (int64_t k = 0; k < Gh; k++)
      for (int64_t q = 0; q < fb->rows; q++) m->hidx[k * fb->rows + q] = (q < fb->size ? q : 0) * G + k;
  }
  dr->nctx = n;
  dr->nrows = r;
  dr->ctx_target = b->ctx_target != 0;
  for (int di = 1; di < dr->nd; di++) {
    memcpy(dr->d[di].h_meta, d0->h_meta, d0->meta_bytes);
    if (!dr->ctx_target) memcpy(dr->d[di].h_feats, d0->h_feats, (size_t)(n * T * H) * 2);
  }
}

/* The context append: ctx = hidden_norm(fc(taps)) of N rows, every layer's K
 * (k_norm, one RoPE over all layers' heads) and V into the stacked cache. */
static dsp_status append_ctx(dsp_draft *dr, int di, int64_t N) {
  dr_dev *d = &dr->d[di];
  dsp_backend *be = dr->be;
  const int dev = d->dev;
  const dsp_hf_config *c = &dr->cfg;
  const int64_t H = c->hidden, D = c->head_dim, L = c->layers, Wk = d->s.hkv * D;
  const float eps = (float)c->eps;
  dsp_tensor f = dsp_dec_rows(d->feats, N), x = dsp_dec_rows(d->ctx, N), kv = dsp_dec_rows(d->ckv, N);
  if (dr->ctx_target) { /* each tap's rows straight from the target's buffer on this device */
    const int64_t R = dr->target->opt.max_tokens;
    for (int64_t j = 0; j < c->ntaps; j++) {
      dsp_tensor src = dsp_tensor_2d((dsp_bf16 *)dr->target->d[di].taps.data + j * R * H, DSP_BF16, R, H);
      dsp_tensor dst = dsp_dec_cols(f, j * H, H);
      DSP_TRY(dsp_op_gather_rows(be, dev, &src, d->dm.csrc, &dst));
    }
  } else {
    DSP_TRY(dsp_op_upload_async(be, dev, d->feats.data, d->h_feats, (size_t)(N * c->ntaps * H) * 2));
  }
  DSP_TRY(dsp_op_gemm(be, dev, &f, d->fc, &x));
  DSP_TRY(dsp_op_rmsnorm(be, dev, &x, &d->hidden_norm, eps, &x));
  DSP_TRY(dsp_op_gemm(be, dev, &x, d->ctx_kv, &kv));
  for (int64_t l = 0; l < L; l++) { /* each layer's k_norm on its heads */
    dsp_tensor k = dsp_dec_heads(kv, N, l * Wk, d->s.hkv, D);
    DSP_TRY(dsp_op_rmsnorm(be, dev, &k, &d->k_norms[l], eps, &k));
  }
  dsp_tensor kall = dsp_dec_heads(kv, N, 0, L * d->s.hkv, D); /* every layer's heads: one rotation */
  DSP_TRY(dsp_op_rope(be, dev, &kall, d->dm.cpos, &d->rope_cos, &d->rope_sin));
  const int64_t rows = (int64_t)(dr->opt.max_seqs + 1) * dr->opt.max_len;
  dsp_tensor kc = dsp_tensor_2d(d->k_cache, DSP_BF16, rows, L * Wk), vc = dsp_tensor_2d(d->v_cache, DSP_BF16, rows, L * Wk);
  dsp_tensor ks = dsp_dec_cols(kv, 0, L * Wk), vs = dsp_dec_cols(kv, L * Wk, L * Wk);
  DSP_TRY(dsp_op_scatter_rows(be, dev, &ks, d->dm.crows, &kc));
  return dsp_op_scatter_rows(be, dev, &vs, d->dm.crows, &vc);
}

/* The block's M rows through the draft layers and the final norm, into d->a.h. */
static dsp_status block_rows(dsp_draft *dr, int di, int64_t M) {
  dr_dev *d = &dr->d[di];
  dsp_backend *be = dr->be;
  const int dev = d->dev;
  const dsp_hf_config *c = &dr->cfg;
  const int64_t D = c->head_dim, L = c->layers, Wk = d->s.hkv * D;
  const dsp_target *t = dr->target;
  dsp_tensor x = dsp_dec_rows(d->a.x, M);
  DSP_TRY(dsp_op_embed(be, dev, &t->d[di].embed, d->dm.bids, M, &x)); /* the target's table on this device */
  dsp_dec_io io = {.kv_stride = L * Wk, .slots = dr->opt.max_seqs + 1, .max_len = dr->opt.max_len,
                   .rows = d->dm.brows, .pos = d->dm.bpos, .rslot = d->dm.bslot, .rkeys = d->dm.bkeys,
                   .rope_cos = &d->rope_cos, .rope_sin = &d->rope_sin, .comm = d->comm,
                   .row_group = (int)dr->bcall};
  for (int64_t l = 0; l < L; l++) {
    io.k_cache = d->k_cache + l * Wk;
    io.v_cache = d->v_cache + l * Wk;
    io.h_ready = l > 0; /* each layer norms the next one's input (the last: the final norm) */
    io.next_norm = l + 1 < L ? &d->layer[l + 1].in_norm : &d->final_norm;
    DSP_TRY(dsp_dec_layer_forward(be, dev, &d->layer[l], &d->s, &d->a, M, &io));
  }
  return DSP_OK;
}

static dsp_status propose_dev(void *ctx, int di) {
  dsp_draft *dr = ctx;
  dr_dev *d = &dr->d[di];
  const int64_t N = dr->nctx, M = dr->nrows;
  DSP_TRY(dsp_op_upload_async(dr->be, d->dev, d->dm.crows, d->hm.crows, d->meta_bytes));
  if (N > 0) DSP_TRY(append_ctx(dr, di, N));
  if (M > 0) {
    DSP_TRY(block_rows(dr, di, M));
    if (di == 0) DSP_TRY(dsp_op_download(dr->be, d->dev, dr->h_hidden, d->a.h.data, (size_t)(M * dr->cfg.hidden) * 2));
  }
  return dsp_op_sync(dr->be, d->dev);
}

/* A captured proposal (one device, TP 1): the staged metadata and the
 * bucket's context rows in, the append, the block, its states gathered into
 * the head's static input, the head; tokens (and logits) land in pinned
 * memory, the block's states too when the call asks for confidences. */
static dsp_status fused_step(dsp_draft *dr) {
  dr_dev *d = &dr->d[0];
  dsp_backend *be = dr->be;
  const dsp_markov_fused *fb = &dr->fb;
  const int64_t H = dr->cfg.hidden, M = dr->nrows;
  DSP_TRY(dsp_op_upload_async(be, d->dev, d->dm.crows, d->hm.crows, d->meta_bytes));
  DSP_TRY(append_ctx(dr, 0, dr->nctx));
  DSP_TRY(block_rows(dr, 0, M));
  dsp_tensor h = dsp_dec_rows(d->a.h, M);
  dsp_tensor in = dsp_tensor_2d(fb->hidden, DSP_BF16, dr->info.gamma * fb->rows, H);
  in.stride[0] = fb->ld;
  DSP_TRY(dsp_op_gather_rows(be, d->dev, &h, d->dm.hidx, &in));
  /* the real sequences' block states only: the bucket's padding rows may exceed max_seqs (h_hidden's rows) */
  if (dr->want_conf) DSP_TRY(dsp_op_download_async(be, d->dev, dr->h_hidden, h.data, (size_t)(dr->nreal * H) * 2));
  return be->ops->markov_fused_enqueue(be, d->dev, dr->head->x[0], fb->size, dr->sampling);
}

/* Replays the call's bucket and variant; its first call runs eagerly (which
 * also readies the products for its row counts), then captures. */
static dsp_status run_fused(dsp_draft *dr) {
  dr_dev *d = &dr->d[0];
  dsp_op_graph **g = &d->graph[dr->fb.index][dr->sampling + 2 * dr->ctx_target + 4 * dr->want_conf];
  if (*g) {
    DSP_TRY(dsp_op_replay(dr->be, d->dev, *g));
  } else {
    DSP_TRY(fused_step(dr));
    DSP_TRY(dsp_op_sync(dr->be, d->dev));
    DSP_TRY(dsp_op_capture_begin(dr->be, d->dev));
    dsp_status s = fused_step(dr);
    dsp_status e = dsp_op_capture_end(dr->be, d->dev, g);
    DSP_TRY(s);
    DSP_TRY(e);
    dr->ngraphs++;
    DSP_TRY(dsp_op_replay(dr->be, d->dev, *g)); /* the captured run is the one whose results are read */
  }
  return dsp_op_sync(dr->be, d->dev);
}

/* Whether this proposal runs captured: a bucket of the head that the draft's
 * buffers hold (its rows and its context rows, block + 1 per sequence). */
static int pick_fused(dsp_draft *dr, const dsp_draft_batch *b, const dsp_draft_outputs *out) {
  dr->fused = 0;
  if (!dr->graphs || b->append_only || (b->rows > 0 && b->rows != dr->blk)) return 0;
  int64_t nctx = 0;
  for (int32_t s = 0; s < b->nseq; s++) nctx += b->ctx_count[s];
  dsp_markov_fused fb;
  if (dr->be->ops->markov_fused_bucket(dr->head->x[0], b->nseq, &fb) != DSP_OK) return 0;
  const int64_t K = dr->blk;
  if (fb.index >= DR_GRAPHS || fb.size > dr->rows_cap || fb.size * (K + 1) > dr->ctx_cap ||
      nctx > fb.size * (K + 1))
    return 0;
  int sampling = out->logits != NULL;
  for (int32_t s = 0; b->temperature && s < b->nseq; s++) sampling |= b->temperature[s] > 0.0f;
  dr->fb = fb;
  dr->sampling = sampling;
  dr->want_conf = out->confidence != NULL;
  dr->fused = 1;
  return 1;
}

/* c_k = sigmoid(bf16(proj . [h_k ; W1[prev_k]] + b)): fp32 in order over the features; the first n of the G
 * slots (the others 0: not drafted). */
static void confidence(const dsp_draft *dr, int32_t nseq, int64_t n, const int64_t *tokens, const int32_t *anchor,
                       float *out) {
  const int64_t H = dr->cfg.hidden, R = dr->cfg.markov_rank, G = dr->info.gamma;
  for (int32_t s = 0; s < nseq; s++)
    for (int64_t k = 0; k < G; k++) {
      if (k >= n) {
        out[s * G + k] = 0.0f;
        continue;
      }
      const dsp_bf16 *h = dr->h_hidden + (s * G + k) * H;
      float acc = 0.0f;
      for (int64_t i = 0; i < H; i++) acc = fmaf(dsp_bf16_to_f32(h[i]), dsp_bf16_to_f32(dr->conf_w[i]), acc);
      if (dr->cfg.confidence_markov) {
        const int64_t prev = k == 0 ? anchor[s] : tokens[s * G + k - 1];
        const dsp_bf16 *e = dsp_tensor_row(&dr->w1, prev);
        for (int64_t i = 0; i < R; i++) acc = fmaf(dsp_bf16_to_f32(e[i]), dsp_bf16_to_f32(dr->conf_w[H + i]), acc);
      }
      const float logit = dsp_round_bf16(acc + dr->conf_b);
      out[s * G + k] = (float)(1.0 / (1.0 + exp(-(double)logit)));
    }
}

dsp_status dsp_draft_propose(dsp_draft *dr, const dsp_draft_batch *b, dsp_draft_outputs *out) {
  if (!dr || !out || (!out->tokens && !(b && b->append_only)))
    return dsp_fail(DSP_ERR_ARG, "draft propose: NULL argument");
  DSP_TRY(check_batch(dr, b));
  if (out->confidence && !dr->conf_w)
    return dsp_fail(DSP_ERR_ARG, "draft propose: confidence asked of a checkpoint without a confidence head");
  if (out->logits && b->rows > 0 && b->rows < dr->info.gamma)
    return dsp_fail(DSP_ERR_ARG, "draft propose: a block of %d rows drafts fewer than gamma %lld slots: no logits "
                    "output", b->rows, (long long)dr->info.gamma);
  const int fused = pick_fused(dr, b, out);
  stage(dr, b);
  const int64_t G = dr->info.gamma, H = dr->cfg.hidden;
  for (int32_t q = 0; !b->append_only && q < b->nseq; q++) {
    dr->anchor64[q] = b->anchor[q];
    dr->pos64[q] = dr->len[b->slot[q]] + b->ctx_count[q];
  }
  int64_t sh[3] = {b->nseq, G, H};
  dsp_tensor hv = dsp_tensor_view(dr->h_hidden, DSP_BF16, 3, sh);
  dsp_markov_inputs in = {.batch = b->nseq, .hidden = &hv, .anchor = dr->anchor64, .temperature = b->temperature,
                          .seed = b->seed, .position = dr->pos64};
  dsp_markov_outputs mo = {.tokens = out->tokens, .logits = out->logits};
  dsp_status s;
  if (fused) {
    dr->be->ops->markov_fused_stage(dr->head->x[0], &in);
    s = run_fused(dr);
    if (s == DSP_OK) s = dr->be->ops->markov_fused_collect(dr->head->x[0], &in, &mo);
  } else {
    s = dsp_backend_each(dr->be, propose_dev, dr);
  }
  s = dsp_comm_agree(dr->be->comm, s);
  if (s != DSP_OK) return s; /* the context rows of this call may be written; lengths unchanged */
  if (b->append_only) {
    for (int32_t q = 0; q < b->nseq; q++) dr->len[b->slot[q]] += b->ctx_count[q];
    return DSP_OK;
  }
  /* the head drafts the first gamma slots of the block; a call's block of fewer rows (never captured) gives its
     last row's state to the slots past it, whose tokens are then not proposals */
  const int64_t KC = dr->bcall, n = KC < G ? KC : G;
  for (int32_t q = 0; G < KC && (out->confidence || !fused) && q < b->nseq; q++)
    memmove(dr->h_hidden + q * G * H, dr->h_hidden + q * KC * H, (size_t)(G * H) * 2);
  for (int32_t q = b->nseq - 1; KC < G && q >= 0; q--) {
    memmove(dr->h_hidden + q * G * H, dr->h_hidden + q * KC * H, (size_t)(KC * H) * 2);
    for (int64_t k = KC; k < G; k++)
      memcpy(dr->h_hidden + (q * G + k) * H, dr->h_hidden + (q * G + KC - 1) * H, (size_t)H * 2);
  }
  in.slots = (int32_t)n;
  if (!fused) DSP_TRY(dsp_markov_head_propose(dr->head, &in, &mo));
  for (int32_t q = 0; q < b->nseq; q++)
    for (int64_t k = n; k < G; k++) out->tokens[q * G + k] = -1;
  if (out->confidence) confidence(dr, b->nseq, n, out->tokens, b->anchor, out->confidence);
  for (int32_t q = 0; q < b->nseq; q++) dr->len[b->slot[q]] += b->ctx_count[q];
  return DSP_OK;
}

int32_t dsp_draft_graphs(const dsp_draft *d) { return d ? d->ngraphs : 0; }

dsp_status dsp_draft_device_logits(const dsp_draft *dr, int32_t batch, const void **data, int64_t *ld,
                                   int32_t *rows) {
  if (dr->nd != 1 || dr->head->n != 1 || !dr->be->ops->markov_logits)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "draft: the corrected logits are kept on one device only");
  return dr->be->ops->markov_logits(dr->head->x[0], batch, data, ld, rows);
}

int64_t dsp_draft_length(const dsp_draft *d, int32_t slot) {
  return d && slot >= 0 && slot < d->opt.max_seqs ? d->len[slot] : -1;
}

dsp_status dsp_draft_truncate(dsp_draft *d, int32_t slot, int64_t len) {
  if (!d || slot < 0 || slot >= d->opt.max_seqs)
    return dsp_fail(DSP_ERR_RANGE, "draft truncate: slot %d outside [0, %d)", slot, d ? d->opt.max_seqs : 0);
  if (len < 0 || len > d->len[slot])
    return dsp_fail(DSP_ERR_RANGE, "draft truncate: slot %d holds %lld positions, cannot keep %lld", slot,
                    (long long)d->len[slot], (long long)len);
  d->len[slot] = len;
  return DSP_OK;
}
