/* synth: writes a small seeded checkpoint and a proposal's inputs in the
 * layouts `dspark head` reads (for demos, tests and users checking parity). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dspark.h"
#include "core/status.h"
#include "core/tensor.h"
#include "support/synth.h"
#include "tool_common.h"

typedef struct {
  const char *weights, *inputs;
  int64_t vocab, vocab_padded, hidden, rank, batch, gamma, seed;
  double temperature;
  int64_t sampled_every; /* every n-th request samples (0: none) */
} synth_args;

static dsp_status add(dsp_st_writer *w, const char *name, void *data, dsp_dtype dt, int nd, const int64_t *sh) {
  dsp_tensor t = dsp_tensor_view(data, dt, nd, sh);
  return dsp_st_writer_add(w, name, &t);
}

static dsp_status write_weights(const synth_args *a) {
  dsp_markov_config cfg = {.vocab = a->vocab, .vocab_padded = a->vocab_padded, .hidden = a->hidden, .rank = a->rank};
  dsp_synth_weights sw;
  DSP_TRY(dsp_synth_weights_create(&cfg, 1, 0, 1, (uint64_t)a->seed, &sw));
  dsp_st_writer *w;
  dsp_status s = dsp_st_writer_create(a->weights, &w);
  if (s == DSP_OK) {
    int64_t lm[2] = {a->vocab_padded, a->hidden}, mk[2] = {a->vocab_padded, a->rank};
    char v[32];
    snprintf(v, sizeof v, "%lld", (long long)a->vocab);
    s = add(w, "lm_head.weight", sw.lm, DSP_BF16, 2, lm);
    if (s == DSP_OK) s = add(w, "markov_w1.weight", sw.w1, DSP_BF16, 2, mk);
    if (s == DSP_OK) s = add(w, "markov_w2.weight", sw.w2, DSP_BF16, 2, mk);
    if (s == DSP_OK) s = dsp_st_writer_meta(w, "vocab_size", v);
    if (s == DSP_OK) s = dsp_st_writer_finish(w);
    else dsp_st_writer_abort(w);
  }
  dsp_synth_weights_free(&sw);
  return s;
}

static dsp_status write_inputs(const synth_args *a) {
  size_t B = (size_t)a->batch;
  dsp_bf16 *hid = malloc(B * (size_t)(a->gamma * a->hidden) * 2);
  int64_t *anchor = malloc(B * 8), *seed = malloc(B * 8), *pos = malloc(B * 8);
  float *temp = malloc(B * 4);
  dsp_status s = DSP_OK;
  if (!hid || !anchor || !seed || !pos || !temp) s = dsp_fail(DSP_ERR_NOMEM, "synth: out of memory");
  dsp_st_writer *w = NULL;
  if (s == DSP_OK) {
    dsp_synth_fill(hid, a->batch * a->gamma, a->hidden, 0, (uint64_t)a->seed + 99, 1.0f);
    for (size_t b = 0; b < B; b++) {
      anchor[b] = (int64_t)((b * 7919 + (size_t)a->seed * 31 + 11) % (size_t)a->vocab);
      seed[b] = a->seed * 1000 + (int64_t)b;
      pos[b] = 100 + (int64_t)b;
      temp[b] = a->sampled_every && b % (size_t)a->sampled_every == 0 ? (float)a->temperature : 0.0f;
    }
    s = dsp_st_writer_create(a->inputs, &w);
  }
  if (s == DSP_OK) {
    int64_t hs[3] = {a->batch, a->gamma, a->hidden}, bs[1] = {a->batch};
    /* widest dtypes first: the writer packs tensors in order, so this keeps
     * every tensor aligned to its element size */
    s = add(w, "anchor", anchor, DSP_I64, 1, bs);
    if (s == DSP_OK && a->sampled_every) s = add(w, "seed", seed, DSP_I64, 1, bs);
    if (s == DSP_OK) s = add(w, "position", pos, DSP_I64, 1, bs);
    if (s == DSP_OK && a->sampled_every) s = add(w, "temperature", temp, DSP_F32, 1, bs);
    if (s == DSP_OK) s = add(w, "hidden", hid, DSP_BF16, 3, hs);
    if (s == DSP_OK) s = dsp_st_writer_finish(w);
    else dsp_st_writer_abort(w);
  }
  free(hid); free(anchor); free(seed); free(pos); free(temp);
  return s;
}

int main(int argc, char **argv) {
  synth_args a = {.vocab = 32000, .hidden = 512, .rank = 64, .batch = 8, .gamma = 7, .seed = 1,
                  .temperature = 0.8, .sampled_every = 0};
  struct { const char *name; int64_t *dst, lo, hi; } num[] = {
      {"--vocab", &a.vocab, 1, 1 << 24}, {"--vocab-padded", &a.vocab_padded, 1, 1 << 24},
      {"--hidden", &a.hidden, 1, 65536}, {"--rank", &a.rank, 1, 8192}, {"--batch", &a.batch, 1, 4096},
      {"--gamma", &a.gamma, 1, 64}, {"--seed", &a.seed, 0, 1LL << 40}, {"--sampled-every", &a.sampled_every, 0, 4096}};
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int found = 0;
    for (size_t j = 0; j < sizeof num / sizeof num[0] && !found; j++)
      if (!strcmp(o, num[j].name)) {
        found = 1;
        if (!v || dsp_tool_parse_i64(o, v, num[j].lo, num[j].hi, num[j].dst)) return 2;
      }
    if (found) {}
    else if (!strcmp(o, "--weights") && v) a.weights = v;
    else if (!strcmp(o, "--inputs") && v) a.inputs = v;
    else if (!strcmp(o, "--temperature") && v) a.temperature = atof(v);
    else {
      fprintf(stderr, "usage: synth [--weights W.safetensors] [--inputs I.safetensors] [--vocab V]\n"
                      "       [--vocab-padded Vp] [--hidden H] [--rank R] [--batch B] [--gamma G] [--seed S]\n"
                      "       [--sampled-every N] [--temperature T]\n");
      return 2;
    }
    i++;
  }
  if (!a.vocab_padded) a.vocab_padded = a.vocab;
  if (a.vocab_padded < a.vocab || !(a.temperature > 0)) {
    fprintf(stderr, "synth: need --vocab-padded >= --vocab and --temperature > 0\n");
    return 2;
  }
  dsp_status s = DSP_OK;
  if (a.weights) s = write_weights(&a);
  if (s == DSP_OK && a.inputs) s = write_inputs(&a);
  if (s != DSP_OK) {
    fprintf(stderr, "synth: error: %s\n", dsp_error_message());
    return 1;
  }
  return 0;
}
