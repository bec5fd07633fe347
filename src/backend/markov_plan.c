#include "backend/markov_plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/layout.h"
#include "core/status.h"

void dsp_markov_rows(int64_t vocab_padded, int size, int rank, int64_t *row0, int64_t *rows_per_rank,
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

const char *dsp_path_name(dsp_path p) {
  switch (p) {
    case DSP_PATH_AUTO: return "auto";
    case DSP_PATH_ORIGINAL: return "original";
    case DSP_PATH_SHARDED: return "sharded";
    case DSP_PATH_REPLICATED: return "replicated";
  }
  return "?";
}

dsp_status dsp_markov_plan_make(const dsp_markov_config *cfg, int32_t tp_size, int32_t tp_rank, int has_w2_full,
                                dsp_markov_plan *p) {
  memset(p, 0, sizeof *p);
  if (!cfg) return dsp_fail(DSP_ERR_ARG, "markov head: NULL config");
  if (cfg->vocab < 1 || cfg->vocab_padded < cfg->vocab || cfg->hidden < 1 || cfg->rank < 1 || cfg->gamma < 1 ||
      cfg->max_batch < 1)
    return dsp_fail(DSP_ERR_ARG, "markov head: bad config (V %lld, Vp %lld, H %lld, R %lld, gamma %lld, batch %d)",
                    (long long)cfg->vocab, (long long)cfg->vocab_padded, (long long)cfg->hidden, (long long)cfg->rank,
                    (long long)cfg->gamma, cfg->max_batch);
  if (cfg->vocab_padded > INT64_MAX / 4 || cfg->gamma > INT32_MAX || cfg->hidden > INT32_MAX || cfg->rank > INT32_MAX)
    return dsp_fail(DSP_ERR_RANGE, "markov head: config out of range (Vp %lld, gamma %lld, H %lld, R %lld)",
                    (long long)cfg->vocab_padded, (long long)cfg->gamma, (long long)cfg->hidden, (long long)cfg->rank);
  if ((unsigned)cfg->path > DSP_PATH_REPLICATED || (unsigned)cfg->contract > DSP_CONTRACT_FP32_ADD)
    return dsp_fail(DSP_ERR_ARG, "markov head: unknown path %d or contract %d", (int)cfg->path, (int)cfg->contract);
  if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size)
    return dsp_fail(DSP_ERR_ARG, "markov head: TP rank %d of %d", tp_rank, tp_size);
  if (tp_size > cfg->vocab_padded)
    return dsp_fail(DSP_ERR_ARG,
                    "markov head: TP size %d is larger than the padded vocabulary (%lld rows): ranks would own "
                    "no rows",
                    tp_size, (long long)cfg->vocab_padded);
  p->cfg = *cfg;
  p->tp_size = tp_size;
  p->tp_rank = tp_rank;
  dsp_markov_rows(cfg->vocab_padded, tp_size, tp_rank, &p->row0, &p->vr, &p->rows_real);
  p->has_full = has_w2_full || tp_size == 1;
  return dsp_markov_plan_set_path(p, cfg->path);
}

dsp_status dsp_markov_plan_set_path(dsp_markov_plan *p, dsp_path requested) {
  /* Eligibility: bf16 weights and one split for LM and W2 rows hold by
   * construction; what remains is that every rank owns a real row. */
  const int eligible = p->tp_size <= p->cfg.vocab;
  dsp_path want = requested == DSP_PATH_AUTO ? DSP_PATH_SHARDED : requested;
  p->sharded_fallback = want == DSP_PATH_SHARDED && !eligible;
  if (p->sharded_fallback) want = DSP_PATH_ORIGINAL;
  if (want != DSP_PATH_SHARDED && !p->has_full)
    return dsp_fail(DSP_ERR_ARG, "markov head: the %s path needs the full markov_w2 on every rank",
                    dsp_path_name(want));
  p->cfg.path = requested;
  p->greedy_path = want;
  return DSP_OK;
}

dsp_status dsp_markov_plan_check_weights(const dsp_markov_plan *p, const dsp_markov_weights *w) {
  if (!w) return dsp_fail(DSP_ERR_ARG, "markov head: no weights");
  const dsp_markov_config *c = &p->cfg;
  const struct { const char *name; const dsp_tensor *t; int64_t rows, cols; int need; } t[] = {
      {"lm_head.weight (local rows)", &w->lm_local, p->rows_real, c->hidden, 1},
      {"markov_w1.weight", &w->w1, c->vocab_padded, c->rank, 1},
      {"markov_w2.weight (local rows)", &w->w2_local, p->rows_real, c->rank, !w->has_w2_full},
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
    if (t[i].rows * t[i].cols > 0 && !x->data) return dsp_fail(DSP_ERR_ARG, "markov head: %s has no data", t[i].name);
  }
  return DSP_OK;
}

dsp_status dsp_markov_check_inputs(const dsp_markov_config *cfg, const dsp_markov_inputs *in) {
  if (!cfg || !in) return dsp_fail(DSP_ERR_ARG, "markov head: NULL config or inputs");
  if (in->batch < 1 || in->batch > cfg->max_batch)
    return dsp_fail(DSP_ERR_SHAPE, "markov head: batch %d outside [1, %d]", in->batch, cfg->max_batch);
  if (!in->hidden || !in->anchor) return dsp_fail(DSP_ERR_ARG, "markov head: inputs need hidden and anchor");
  const dsp_tensor *x = in->hidden;
  if (x->dtype != DSP_BF16) return dsp_fail(DSP_ERR_DTYPE, "hidden is %s, expected BF16", dsp_dtype_name(x->dtype));
  if (x->ndim != 3 || x->shape[0] != in->batch || x->shape[1] != cfg->gamma || x->shape[2] != cfg->hidden)
    return dsp_fail(DSP_ERR_SHAPE, "hidden has shape [%lld, %lld, %lld], expected [%d, %lld, %lld] (batch, gamma, H)",
                    (long long)x->shape[0], (long long)(x->ndim > 1 ? x->shape[1] : 0),
                    (long long)(x->ndim > 2 ? x->shape[2] : 0), in->batch, (long long)cfg->gamma,
                    (long long)cfg->hidden);
  if (!x->data) return dsp_fail(DSP_ERR_ARG, "markov head: hidden has no data");
  if (in->slots < 0 || in->slots > cfg->gamma)
    return dsp_fail(DSP_ERR_RANGE, "markov head: %d slots wanted of gamma %lld", in->slots, (long long)cfg->gamma);
  for (int32_t b = 0; b < in->batch; b++) {
    if (in->anchor[b] < 0 || in->anchor[b] >= cfg->vocab)
      return dsp_fail(DSP_ERR_RANGE, "anchor[%d] = %lld is outside the vocabulary [0, %lld)", b,
                      (long long)in->anchor[b], (long long)cfg->vocab);
    if (in->temperature) {
      float t = in->temperature[b];
      if (!(t >= 0.0f) || isinf(t))
        return dsp_fail(DSP_ERR_RANGE, "temperature[%d] = %g: must be finite and >= 0 (0 = greedy)", b, (double)t);
    }
    /* slot k draws at position + 1 + k, which must not overflow */
    if (in->position && (in->position[b] < 0 || in->position[b] > INT64_MAX - cfg->gamma))
      return dsp_fail(DSP_ERR_RANGE, "position[%d] = %lld: must be in [0, %lld] (position + gamma must not overflow)",
                      b, (long long)in->position[b], (long long)(INT64_MAX - cfg->gamma));
  }
  return DSP_OK;
}

dsp_status dsp_markov_plan_check_outputs(const dsp_markov_plan *p, const dsp_markov_inputs *in,
                                         const dsp_markov_outputs *out) {
  if (!out || !out->tokens) return dsp_fail(DSP_ERR_ARG, "markov head: no tokens output");
  if (!out->logits) return DSP_OK;
  const dsp_tensor *l = out->logits;
  const dsp_dtype dt = dsp_markov_logit_dtype(p);
  if (l->dtype != dt || l->ndim != 3 || l->shape[0] != in->batch || l->shape[1] != p->cfg.gamma ||
      l->shape[2] != p->cfg.vocab || !l->data)
    return dsp_fail(DSP_ERR_SHAPE, "markov head: logits output must be [%d, %lld, %lld] %s", in->batch,
                    (long long)p->cfg.gamma, (long long)p->cfg.vocab, dsp_dtype_name(dt));
  return DSP_OK;
}

int dsp_markov_any_sampled(const dsp_markov_inputs *in) {
  for (int32_t b = 0; in->temperature && b < in->batch; b++)
    if (in->temperature[b] > 0.0f) return 1;
  return 0;
}

dsp_markov_steps dsp_markov_plan_steps(const dsp_markov_plan *p, int sampling, int collectives) {
  dsp_markov_steps s;
  memset(&s, 0, sizeof s);
  if (!collectives) return s; /* one rank's rows are the whole vocabulary: no collective */
  const int sharded = sampling ? !p->has_full : p->greedy_path == DSP_PATH_SHARDED;
  s.full = !sharded;
  s.exchange = sharded;
  s.bcast = p->cfg.broadcast && p->greedy_path != DSP_PATH_REPLICATED;
  s.gather_logits = sampling && sharded;
  return s;
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

dsp_status dsp_markov_plan_layout(const dsp_markov_plan *p, int64_t row_align, int64_t batch_align,
                                  int64_t hidden_align, dsp_markov_layout *l) {
  memset(l, 0, sizeof *l);
  const dsp_markov_config *c = &p->cfg;
  l->row_pad = round_up(p->vr, row_align);
  l->batch_pad = round_up(c->max_batch, batch_align);
  l->m = c->gamma * l->batch_pad;
  l->segs = p->tp_size;
  l->logit = c->contract == DSP_CONTRACT_FP32_ADD ? 4 : 2;
  const int gathers = p->tp_size > 1 && p->has_full;
  DSP_TRY(dsp_layout_bytes(l->m, l->row_pad, 1, 2, "markov head base", &l->base_local));
  DSP_TRY(dsp_layout_bytes(gathers ? l->segs : 0, l->m, l->row_pad, 2, "markov head gathered base", &l->base_all));
  DSP_TRY(dsp_layout_bytes(l->m, l->row_pad, 1, l->logit, "markov head logits", &l->logits_local));
  DSP_TRY(dsp_layout_bytes(l->segs, l->m, l->row_pad, l->logit, "markov head gathered logits", &l->logits_all));
  DSP_TRY(dsp_layout_bytes(l->batch_pad, c->vocab, 1, l->logit, "markov head step logits", &l->logits_full));
  DSP_TRY(dsp_layout_bytes(l->m, round_up(c->hidden, hidden_align), 1, 2, "markov head hidden", &l->hidden));
  return DSP_OK;
}

void dsp_markov_plan_line(const dsp_markov_plan *p, const char *backend, char *buf, size_t n) {
  const char *c = p->cfg.contract == DSP_CONTRACT_FP32_ADD ? "fp32-add" : "bf16";
  const char *bc = p->cfg.broadcast ? "broadcast on" : "broadcast off";
  const char *samp = p->tp_size > 1 && !p->has_full ? "local W2 rows, logits all-gathered" : "full logits";
  if (p->tp_size == 1)
    snprintf(buf, n, "dspark: markov head (%s) greedy: TP1, %s top-1, no collective; sampling: %s", backend, c, samp);
  else if (p->greedy_path == DSP_PATH_SHARDED)
    snprintf(buf, n, "dspark: markov head (%s) greedy: W2 sharded over TP%d, %s local top-1, %s; sampling: %s",
             backend, p->tp_size, c, bc, samp);
  else if (p->greedy_path == DSP_PATH_REPLICATED)
    snprintf(buf, n,
             "dspark: markov head (%s) greedy: replicated over TP%d (base all-gathered once, no per-step collective), "
             "%s; sampling: %s",
             backend, p->tp_size, c, samp);
  else
    snprintf(buf, n, "dspark: markov head (%s) greedy: original over TP%d (base all-gathered), %s, %s%s; sampling: %s",
             backend, p->tp_size, c, bc, p->sharded_fallback ? " (sharded path not eligible: TP size > vocabulary)" : "",
             samp);
}

int32_t dsp_markov_max_batch(const dsp_backend *be) {
  return be && dsp_backend_kind_of(be) == DSP_BACKEND_CUDA ? DSP_MARKOV_CUDA_MAX_BATCH : INT32_MAX;
}
