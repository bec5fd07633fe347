/* The Markov head (DESIGN §1-§3): the public handle over one executor per
 * device of the backend. Creation fetches each TP rank's weights, makes and
 * checks the shared plan, and agrees with the other ranks before any
 * collective; a proposal checks its inputs and outputs once, then runs every
 * device's executor (rank 0's results go to the caller; with several GPUs in
 * one process the others' tokens are checked equal). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/markov_head_impl.h"

static dsp_status create_one(void *ctx, int dev) {
  dsp_markov_head *h = ctx;
  return h->be->ops->markov_create(h->be, dev, &h->plan[dev], &h->w[dev], &h->x[dev]);
}

static void make_report(dsp_markov_head *h) {
  dsp_markov_plan_line(&h->plan[0], dsp_backend_kind_name(h->be->kind), h->report, sizeof h->report);
  const char *d = h->be->ops->markov_detail(h->x[0]);
  if (dsp_settings_verbose() && d && *d) {
    size_t n = strlen(h->report);
    snprintf(h->report + n, sizeof h->report - n, "\ndspark: markov head detail: %s", d);
  }
}

dsp_status dsp_markov_head_create(dsp_backend *be, const dsp_markov_config *cfg, dsp_markov_weights_fn weights,
                                  void *ctx, dsp_markov_head **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "markov head: NULL output handle");
  *out = NULL;
  if (!be || !cfg || !weights) return dsp_fail(DSP_ERR_ARG, "markov head: NULL backend, config or weights");
  DSP_TRY(dsp_settings_check());
  dsp_markov_head *h = calloc(1, sizeof *h);
  if (!h) return dsp_fail(DSP_ERR_NOMEM, "markov head: out of memory");
  h->be = be;
  h->n = be->ndev;
  /* Each rank's weights and plan: local checks, agreed before any collective. */
  dsp_status s = DSP_OK;
  for (int i = 0; i < h->n && s == DSP_OK; i++) {
    const int32_t rank = be->tp_rank0 + i;
    memset(&h->w[i], 0, sizeof h->w[i]);
    s = weights(ctx, be->tp_size, rank, &h->w[i]);
    if (s == DSP_OK) s = dsp_markov_plan_make(cfg, be->tp_size, rank, h->w[i].has_w2_full, &h->plan[i]);
    if (s == DSP_OK) s = dsp_markov_plan_check_weights(&h->plan[i], &h->w[i]);
  }
  if (s == DSP_OK && h->n > 1) {
    h->tok_scratch = calloc((size_t)h->n * (size_t)cfg->max_batch * (size_t)cfg->gamma, sizeof *h->tok_scratch);
    if (!h->tok_scratch) s = dsp_fail(DSP_ERR_NOMEM, "markov head: out of memory");
  }
  s = dsp_comm_agree(be->comm, s);
  if (s == DSP_OK) s = dsp_comm_agree(be->comm, dsp_backend_each(be, create_one, h));
  if (s == DSP_OK) make_report(h);
  memset(h->w, 0, sizeof h->w); /* the views were for create only */
  if (s != DSP_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dsp_error_message());
    dsp_markov_head_free(h);
    return dsp_fail(s, "%s", msg);
  }
  *out = h;
  return DSP_OK;
}

static dsp_status propose_one(void *ctx, int dev) {
  dsp_markov_head *h = ctx;
  return h->be->ops->markov_propose(h->x[dev], h->in, &h->out[dev]);
}

/* Several devices: every one computes the same tokens; rank 0's go to the
 * caller, the others' into scratch (all ask for logits when rank 0 does, so
 * they run the same variant). */
static dsp_status propose_group(dsp_markov_head *h, const dsp_markov_inputs *in, dsp_markov_outputs *out) {
  const size_t nt = (size_t)in->batch * (size_t)h->plan[0].cfg.gamma;
  size_t nl = out->logits ? (size_t)dsp_tensor_numel(out->logits) * dsp_dtype_size(out->logits->dtype) : 0;
  if (nl && nl * (size_t)h->n > h->logit_scratch_bytes) {
    /* asked for logits only on some proposals: grown once, then reused */
    char *p = realloc(h->logit_scratch, nl * (size_t)h->n);
    if (!p) return dsp_fail(DSP_ERR_NOMEM, "markov head: out of memory for %d devices' logits", h->n);
    h->logit_scratch = p;
    h->logit_scratch_bytes = nl * (size_t)h->n;
  }
  h->in = in;
  for (int i = 0; i < h->n; i++) {
    h->out[i] = *out;
    if (i == 0) continue;
    h->out[i].tokens = h->tok_scratch + nt * (size_t)i;
    if (nl) {
      h->logit_view[i] = dsp_tensor_view(h->logit_scratch + nl * (size_t)i, out->logits->dtype, out->logits->ndim,
                                         out->logits->shape);
      h->out[i].logits = &h->logit_view[i];
    }
  }
  DSP_TRY(dsp_backend_each(h->be, propose_one, h));
  for (int i = 1; i < h->n; i++)
    if (memcmp(out->tokens, h->tok_scratch + nt * (size_t)i, nt * sizeof *out->tokens))
      return dsp_fail(DSP_ERR_DEVICE, "markov head: GPU %d proposed different tokens from GPU %d", h->be->device[i],
                      h->be->device[0]);
  return DSP_OK;
}

dsp_status dsp_markov_head_propose(dsp_markov_head *h, const dsp_markov_inputs *in, dsp_markov_outputs *out) {
  if (!h || !in || !out) return dsp_fail(DSP_ERR_ARG, "markov head: NULL argument");
  DSP_TRY(dsp_markov_check_inputs(&h->plan[0].cfg, in));
  DSP_TRY(dsp_markov_plan_check_outputs(&h->plan[0], in, out));
  if (h->n == 1) return h->be->ops->markov_propose(h->x[0], in, out);
  return propose_group(h, in, out);
}

dsp_status dsp_markov_head_set_path(dsp_markov_head *h, dsp_path p) {
  if (!h->be->ops->markov_set_path)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "markov head: the %s head's path is fixed at creation",
                    dsp_backend_kind_name(h->be->kind));
  for (int i = 0; i < h->n; i++) {
    dsp_markov_plan q = h->plan[i];
    DSP_TRY(dsp_markov_plan_set_path(&q, p));
    DSP_TRY(h->be->ops->markov_set_path(h->x[i], &q));
    h->plan[i] = q;
  }
  make_report(h);
  return DSP_OK;
}

const char *dsp_markov_head_report(const dsp_markov_head *h) { return h->report; }
dsp_path dsp_markov_head_greedy_path(const dsp_markov_head *h) { return h->plan[0].greedy_path; }

void dsp_markov_head_last_timing(const dsp_markov_head *h, double *lm_ms, double *tail_ms) {
  h->be->ops->markov_last_timing(h->x[0], lm_ms, tail_ms);
}

void dsp_markov_head_free(dsp_markov_head *h) {
  if (!h) return;
  for (int i = 0; i < h->n; i++)
    if (h->x[i]) h->be->ops->markov_free(h->x[i]);
  free(h->tok_scratch);
  free(h->logit_scratch);
  free(h);
}
