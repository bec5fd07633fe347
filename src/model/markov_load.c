/* Reading the head's weights and a proposal's inputs from safetensors files
 * (the layouts of `dspark head`, README). A rank maps the whole file but
 * touches only its own rows of lm_head and markov_w2 (zero-copy views; the
 * packing reads just those pages). */
#include "dspark.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "core/tensor.h"
#include "backend/markov_plan.h"

/* A 2-D BF16 tensor of the weights file, by name. */
static dsp_status weight_view(dsp_st_file *f, const char *name, dsp_tensor *t) {
  dsp_dtype dt;
  int32_t nd;
  int64_t sh[DSP_MAX_DIMS];
  dsp_status s = dsp_st_info(f, name, &dt, &nd, sh);
  if (s == DSP_ERR_MISSING)
    return dsp_fail(s, "%s: tensor '%s' is missing (the head needs lm_head.weight, markov_w1.weight, markov_w2.weight)",
                    dsp_st_path(f), name);
  if (s != DSP_OK) return s;
  if (dt != DSP_BF16)
    return dsp_fail(DSP_ERR_DTYPE, "%s: tensor '%s' is %s; dspark's head needs BF16 weights", dsp_st_path(f), name,
                    dsp_dtype_name(dt));
  if (nd != 2) return dsp_fail(DSP_ERR_SHAPE, "%s: tensor '%s' must be 2-D, has %d dims", dsp_st_path(f), name, nd);
  if (sh[0] < 1 || sh[1] < 1)
    return dsp_fail(DSP_ERR_SHAPE, "%s: tensor '%s' is empty", dsp_st_path(f), name);
  return dsp_st_view(f, name, t);
}

static dsp_status parse_vocab(dsp_st_file *f, int64_t vp, int64_t *v) {
  const char *s = dsp_st_metadata(f, "vocab_size");
  *v = vp;
  if (!s) return DSP_OK;
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (errno || end == s || *end || x < 1 || x > vp)
    return dsp_fail(DSP_ERR_FORMAT, "%s: __metadata__ vocab_size '%s' must be an integer in [1, %lld]",
                    dsp_st_path(f), s, (long long)vp);
  *v = x;
  return DSP_OK;
}

dsp_status dsp_markov_weights_from_file(dsp_st_file *f, int32_t size, int32_t rank, int need_full, dsp_markov_config *cfg,
                                        dsp_markov_weights *w) {
  dsp_tensor lm, w1, w2;
  DSP_TRY(weight_view(f, "lm_head.weight", &lm));
  DSP_TRY(weight_view(f, "markov_w1.weight", &w1));
  DSP_TRY(weight_view(f, "markov_w2.weight", &w2));
  const char *p = dsp_st_path(f);
  int64_t vp = lm.shape[0];
  if (w1.shape[0] != vp || w2.shape[0] != vp)
    return dsp_fail(DSP_ERR_SHAPE, "%s: vocabulary rows differ: lm_head.weight %lld, markov_w1.weight %lld, markov_w2.weight %lld",
                    p, (long long)vp, (long long)w1.shape[0], (long long)w2.shape[0]);
  if (w1.shape[1] != w2.shape[1])
    return dsp_fail(DSP_ERR_SHAPE, "%s: Markov rank differs: markov_w1.weight has R %lld, markov_w2.weight has R %lld",
                    p, (long long)w1.shape[1], (long long)w2.shape[1]);
  DSP_TRY(parse_vocab(f, vp, &cfg->vocab));
  cfg->vocab_padded = vp;
  cfg->hidden = lm.shape[1];
  cfg->rank = w1.shape[1];
  int64_t row0, vr, real;
  dsp_markov_rows(vp, size, rank, &row0, &vr, &real);
  memset(w, 0, sizeof *w);
  w->lm_local = dsp_tensor_rows(&lm, real ? row0 : 0, real ? row0 + real : 0);
  w->w2_local = dsp_tensor_rows(&w2, real ? row0 : 0, real ? row0 + real : 0);
  w->w1 = w1;
  if (need_full) {
    w->w2_full = w2;
    w->has_w2_full = 1;
  }
  return DSP_OK;
}

/* A 1-D tensor of B elements of dtype dt copied out (absent: *dst stays NULL). */
static dsp_status vector_of(dsp_st_file *f, const char *name, dsp_dtype dt, int32_t B, int required, void **dst) {
  dsp_dtype got;
  int32_t nd;
  int64_t sh[DSP_MAX_DIMS];
  *dst = NULL;
  dsp_status s = dsp_st_info(f, name, &got, &nd, sh);
  if (s == DSP_ERR_MISSING && !required) return DSP_OK;
  if (s == DSP_ERR_MISSING) return dsp_fail(s, "%s: tensor '%s' is missing", dsp_st_path(f), name);
  if (s != DSP_OK) return s;
  if (got != dt)
    return dsp_fail(DSP_ERR_DTYPE, "%s: tensor '%s' is %s, expected %s", dsp_st_path(f), name, dsp_dtype_name(got),
                    dsp_dtype_name(dt));
  if (nd != 1 || sh[0] != B)
    return dsp_fail(DSP_ERR_SHAPE, "%s: tensor '%s' must have shape [%d] (one per request)", dsp_st_path(f), name, B);
  *dst = malloc((size_t)B * dsp_dtype_size(dt));
  if (!*dst) return dsp_fail(DSP_ERR_NOMEM, "out of memory reading '%s'", name);
  return dsp_st_read_rows(f, name, 0, B, *dst);
}

static dsp_status load_inputs(const dsp_markov_config *cfg, dsp_markov_input_file *in) {
  dsp_st_file *f = in->file;
  const char *p = dsp_st_path(f);
  dsp_dtype dt;
  int32_t nd;
  int64_t sh[DSP_MAX_DIMS];
  dsp_status s = dsp_st_info(f, "hidden", &dt, &nd, sh);
  if (s == DSP_ERR_MISSING) return dsp_fail(s, "%s: tensor 'hidden' [B, gamma, H] is missing", p);
  if (s != DSP_OK) return s;
  if (dt != DSP_BF16) return dsp_fail(DSP_ERR_DTYPE, "%s: tensor 'hidden' is %s, expected BF16", p, dsp_dtype_name(dt));
  if (nd != 3 || sh[0] < 1 || sh[1] < 1 || sh[0] > INT32_MAX)
    return dsp_fail(DSP_ERR_SHAPE, "%s: tensor 'hidden' must be [B, gamma, H] with B, gamma >= 1", p);
  if (sh[2] != cfg->hidden)
    return dsp_fail(DSP_ERR_SHAPE, "%s: tensor 'hidden' has width %lld but lm_head.weight has H = %lld", p,
                    (long long)sh[2], (long long)cfg->hidden);
  DSP_TRY(dsp_st_view(f, "hidden", &in->hidden));
  in->batch = (int32_t)sh[0];
  in->gamma = sh[1];
  DSP_TRY(vector_of(f, "anchor", DSP_I64, in->batch, 1, (void **)&in->anchor));
  DSP_TRY(vector_of(f, "temperature", DSP_F32, in->batch, 0, (void **)&in->temperature));
  DSP_TRY(vector_of(f, "seed", DSP_I64, in->batch, 0, (void **)&in->seed));
  DSP_TRY(vector_of(f, "position", DSP_I64, in->batch, 0, (void **)&in->position));
  dsp_markov_config c = *cfg;
  c.gamma = in->gamma;
  c.max_batch = in->batch;
  dsp_markov_inputs v = dsp_markov_input_file_view(in);
  s = dsp_markov_check_inputs(&c, &v);
  if (s != DSP_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", dsp_error_message());
    return dsp_fail(s, "%s: %s", p, msg);
  }
  return DSP_OK;
}

dsp_status dsp_markov_inputs_load(const char *path, const dsp_markov_config *cfg, dsp_markov_input_file *in) {
  memset(in, 0, sizeof *in);
  DSP_TRY(dsp_st_open(path, &in->file));
  dsp_status s = load_inputs(cfg, in);
  if (s != DSP_OK) dsp_markov_input_file_free(in);
  return s;
}

void dsp_markov_input_file_free(dsp_markov_input_file *in) {
  dsp_st_close(in->file);
  free(in->anchor);
  free(in->temperature);
  free(in->seed);
  free(in->position);
  memset(in, 0, sizeof *in);
}

dsp_markov_inputs dsp_markov_input_file_view(const dsp_markov_input_file *in) {
  dsp_markov_inputs v = {.batch = in->batch, .hidden = &in->hidden, .anchor = in->anchor,
                       .temperature = in->temperature, .seed = in->seed, .position = in->position};
  return v;
}
