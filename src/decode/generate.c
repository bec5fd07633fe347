/* Plain decoding with the target: chunked prefill, then one token per
 * unfinished sequence per call. The speculative loop (speculative.c) must give
 * the same greedy tokens; both share this file's bookkeeping. */
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/status.h"
#include "decode/gen_common.h"

dsp_status dsp_gen_check(const dsp_target *t, int32_t nseq, const int32_t *const *prompts, const int32_t *lens,
                         const dsp_generate_options *o, int32_t extra, int any_count) {
  const dsp_target_info *in = dsp_target_info_of(t);
  const int32_t max_seqs = in->max_seqs, max_len = in->max_len;
  if (!o || !prompts || !lens || nseq < 1 || (!any_count && nseq > max_seqs))
    return dsp_fail(DSP_ERR_ARG, "generate: 1 .. %d prompts with their lengths and options", max_seqs);
  if (o->max_new < 1) return dsp_fail(DSP_ERR_ARG, "generate: max_new is %d; at least 1", o->max_new);
  if (!(o->temperature >= 0.0f) || o->temperature > 1e30f)
    return dsp_fail(DSP_ERR_RANGE, "generate: temperature %g must be finite and >= 0", (double)o->temperature);
  for (int32_t s = 0; s < nseq; s++) {
    if (lens[s] < 1 || !prompts[s]) return dsp_fail(DSP_ERR_ARG, "generate: prompt %d is empty", s);
    /* the last new token is never run, so a sequence needs prompt + max_new - 1 positions (+ a verify block) */
    if ((int64_t)lens[s] + o->max_new - 1 + extra > max_len)
      return dsp_fail(DSP_ERR_RANGE,
                      "generate: prompt %d has %d tokens; with %d new ones it needs %lld cache positions, the cache "
                      "holds %d",
                      s, lens[s], o->max_new, (long long)lens[s] + o->max_new - 1 + extra, max_len);
    for (int32_t i = 0; i < lens[s]; i++)
      if (prompts[s][i] < 0 || prompts[s][i] >= in->vocab)
        return dsp_fail(DSP_ERR_RANGE, "generate: prompt %d token %d is %d, outside the vocabulary [0, %lld)", s, i,
                        prompts[s][i], (long long)in->vocab);
  }
  return DSP_OK;
}

int dsp_gen_is_eos(const dsp_target *t, const dsp_generate_options *o, int64_t id) {
  const dsp_target_info *in = dsp_target_info_of(t);
  if (o->ignore_eos) return 0;
  for (int32_t i = 0; i < in->n_eos; i++)
    if (in->eos[i] == id) return 1;
  return 0;
}

dsp_status dsp_gen_prefill(dsp_target *t, int32_t nseq, const int32_t *const *prompts, const int32_t *lens,
                           const dsp_generate_options *o, int64_t *first, dsp_generate_stats *st) {
  const int32_t cap = dsp_target_info_of(t)->max_tokens;
  int32_t *slot = malloc((size_t)nseq * 4), *count = malloc((size_t)nseq * 4), *tok = malloc((size_t)cap * 4);
  int32_t *done = calloc((size_t)nseq, 4), *which = malloc((size_t)nseq * 4);
  float *temp = malloc((size_t)nseq * 4);
  uint64_t *seed = malloc((size_t)nseq * 8);
  int64_t *next = malloc((size_t)nseq * 8);
  dsp_status s = slot && count && tok && done && which && temp && seed && next ? DSP_OK
                                                                               : dsp_fail(DSP_ERR_NOMEM, "generate: out of memory");
  for (int32_t q = 0; s == DSP_OK && q < nseq; q++) s = dsp_target_truncate(t, q, 0);
  for (int32_t q = 0; q < nseq; q++) st->prompt_tokens += lens[q];
  /* calls of at most cap tokens; a sequence's pieces go in order, so each call
   * may end a prompt (its last row then draws the first new token) */
  for (int32_t cur = 0; s == DSP_OK && cur < nseq;) {
    int32_t ns = 0, nt = 0;
    for (int32_t q = cur; q < nseq && nt < cap; q++) {
      const int32_t k = lens[q] - done[q] < cap - nt ? lens[q] - done[q] : cap - nt;
      slot[ns] = q;
      count[ns] = k;
      temp[ns] = o->temperature;
      seed[ns] = o->seeds ? o->seeds[q] : o->seed;
      which[ns] = q;
      memcpy(tok + nt, prompts[q] + done[q], (size_t)k * 4);
      nt += k;
      done[q] += k;
      ns++;
    }
    dsp_target_batch b = {.nseq = ns, .slot = slot, .count = count, .tokens = tok, .last_only = 1,
                          .temperature = o->temperature > 0.0f ? temp : NULL, .seed = seed};
    dsp_target_outputs out = {.next = next};
    s = dsp_target_forward(t, &b, &out);
    st->prefill_calls++;
    for (int32_t r = 0; s == DSP_OK && r < ns; r++)
      if (done[which[r]] == lens[which[r]]) first[which[r]] = next[r];
    while (cur < nseq && done[cur] == lens[cur]) cur++;
  }
  free(slot), free(count), free(tok), free(done), free(which), free(temp), free(seed), free(next);
  return s;
}

/* At most the target's slots of prompts, all in slots 0 .. nseq-1. */
static dsp_status generate_batch(dsp_target *t, int32_t nseq, const int32_t *const *prompts, const int32_t *lens,
                                 const dsp_generate_options *o, dsp_token_fn fn, void *ctx, int32_t *finished,
                                 dsp_generate_stats *st) {
  dsp_generate_stats local = {0};
  if (!st) st = &local;
  *st = (dsp_generate_stats){0};
  DSP_TRY(dsp_gen_check(t, nseq, prompts, lens, o, 0, 0));
  int64_t *last = malloc((size_t)nseq * 8), *next = malloc((size_t)nseq * 8);
  int32_t *made = calloc((size_t)nseq, 4), *stop = calloc((size_t)nseq, 4), *slot = malloc((size_t)nseq * 4);
  int32_t *count = malloc((size_t)nseq * 4), *tok = malloc((size_t)nseq * 4), *which = malloc((size_t)nseq * 4);
  float *temp = malloc((size_t)nseq * 4);
  uint64_t *seed = malloc((size_t)nseq * 8);
  dsp_status s = last && next && made && stop && slot && count && tok && which && temp && seed
                     ? DSP_OK
                     : dsp_fail(DSP_ERR_NOMEM, "generate: out of memory");
  double t0 = dsp_now_ms();
  if (s == DSP_OK) s = dsp_gen_prefill(t, nseq, prompts, lens, o, last, st);
  st->prefill_ms = dsp_now_ms() - t0;
  t0 = dsp_now_ms();
  int32_t live = 0;
  for (int32_t q = 0; s == DSP_OK && q < nseq; q++) {
    const int32_t id = (int32_t)last[q];
    made[q] = 1;
    stop[q] = dsp_gen_is_eos(t, o, id) ? 2 : made[q] >= o->max_new;
    if (fn) fn(ctx, q, &id, 1);
    live += !stop[q];
  }
  while (s == DSP_OK && live > 0) {
    int32_t ns = 0;
    for (int32_t q = 0; q < nseq; q++)
      if (!stop[q]) {
        slot[ns] = q, count[ns] = 1, tok[ns] = (int32_t)last[q], which[ns] = q;
        temp[ns] = o->temperature;
        seed[ns] = o->seeds ? o->seeds[q] : o->seed;
        ns++;
      }
    dsp_target_batch b = {.nseq = ns, .slot = slot, .count = count, .tokens = tok,
                          .temperature = o->temperature > 0.0f ? temp : NULL, .seed = seed};
    dsp_target_outputs out = {.next = next};
    s = dsp_target_forward(t, &b, &out);
    st->decode_calls++;
    for (int32_t r = 0; s == DSP_OK && r < ns; r++) {
      const int32_t q = which[r], id = (int32_t)next[r];
      last[q] = id;
      made[q]++;
      stop[q] = dsp_gen_is_eos(t, o, id) ? 2 : made[q] >= o->max_new;
      if (fn) fn(ctx, q, &id, 1);
      live -= stop[q] != 0;
    }
  }
  st->decode_ms = dsp_now_ms() - t0;
  for (int32_t q = 0; q < nseq; q++) st->new_tokens += made ? made[q] : 0;
  if (finished)
    for (int32_t q = 0; q < nseq; q++) finished[q] = stop && stop[q] == 2;
  free(last), free(next), free(made), free(stop), free(slot), free(count), free(tok), free(which), free(temp), free(seed);
  return s;
}

static void stats_add(dsp_generate_stats *a, const dsp_generate_stats *b) {
  a->prompt_tokens += b->prompt_tokens, a->new_tokens += b->new_tokens;
  a->prefill_calls += b->prefill_calls, a->decode_calls += b->decode_calls;
  a->prefill_ms += b->prefill_ms, a->decode_ms += b->decode_ms;
}

/* A wave's callback: its sequence q is the caller's base + q. */
typedef struct {
  dsp_token_fn fn;
  void *ctx;
  int32_t base;
} wave_sink;

static void wave_tokens(void *p, int32_t seq, const int32_t *ids, int32_t n) {
  const wave_sink *w = p;
  w->fn(w->ctx, w->base + seq, ids, n);
}

dsp_status dsp_generate(dsp_target *t, int32_t nseq, const int32_t *const *prompts, const int32_t *lens,
                        const dsp_generate_options *o, dsp_token_fn fn, void *ctx, int32_t *finished,
                        dsp_generate_stats *st) {
  if (!t) return dsp_fail(DSP_ERR_ARG, "generate: NULL target");
  dsp_generate_stats local;
  if (!st) st = &local;
  *st = (dsp_generate_stats){0};
  DSP_TRY(dsp_gen_check(t, nseq, prompts, lens, o, 0, 1));
  const int32_t W = dsp_target_info_of(t)->max_seqs;
  for (int32_t q0 = 0; q0 < nseq; q0 += W) { /* waves of the target's slots; each prompt keeps its seed */
    const int32_t n = nseq - q0 < W ? nseq - q0 : W;
    dsp_generate_options g = *o;
    g.seeds = o->seeds ? o->seeds + q0 : NULL;
    wave_sink ws = {.fn = fn, .ctx = ctx, .base = q0};
    dsp_generate_stats one;
    DSP_TRY(generate_batch(t, n, prompts + q0, lens + q0, &g, fn ? wave_tokens : NULL, &ws,
                           finished ? finished + q0 : NULL, &one));
    stats_add(st, &one);
  }
  return DSP_OK;
}
