/* Kimi-Linear's KDA fields of config.json (kda_config.h). */
#include "io/kda_config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/hf_config.h"
#include "io/json_get.h"

/* A list of 1-based layer numbers into mark[] (value v); each in 1..layers, none twice. */
static dsp_status layer_list(const json_t *lc, const char *label, const char *key, int64_t layers, uint8_t *mark,
                             uint8_t v) {
  const json_t *a = json_object_get(lc, key);
  if (!a || json_is_null(a)) return DSP_OK;
  if (!json_is_array(a))
    return dsp_fail(DSP_ERR_FORMAT, "%s: config field 'linear_attn_config.%s' must be a list of layer numbers", label,
                    key);
  for (size_t i = 0; i < json_array_size(a); i++) {
    const json_t *e = json_array_get(a, i);
    if (!json_is_integer(e) || json_integer_value(e) < 1 || json_integer_value(e) > layers)
      return dsp_fail(DSP_ERR_RANGE, "%s: config field 'linear_attn_config.%s' holds an entry outside 1 .. %lld "
                      "(layers are numbered from 1)", label, key, (long long)layers);
    const int64_t l = json_integer_value(e) - 1;
    if (mark[l])
      return dsp_fail(DSP_ERR_FORMAT, "%s: layer %lld appears twice in linear_attn_config's kda_layers and "
                      "full_attn_layers", label, (long long)l + 1);
    mark[l] = v;
  }
  return DSP_OK;
}

static dsp_status parse(const json_t *c, const char *label, dsp_kda_config *out) {
  if (!json_is_object(c)) return dsp_fail(DSP_ERR_FORMAT, "%s: not a JSON object", label);
  const json_t *ar = json_object_get(c, "architectures");
  int ok = 0;
  for (size_t i = 0; json_is_array(ar) && i < json_array_size(ar); i++)
    ok |= json_is_string(json_array_get(ar, i)) && !strcmp(json_string_value(json_array_get(ar, i)),
                                                           "KimiLinearForCausalLM");
  if (!ok)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: config field 'architectures' is not [\"KimiLinearForCausalLM\"]: dspark "
                    "runs the KDA layers of Kimi-Linear checkpoints", label);
  DSP_TRY(dsp_json_refuse_true(c, label, "quantization_config", "dspark runs BF16 weights, not quantized ones"));
  DSP_TRY(dsp_json_int(c, label, "hidden_size", 1, 1, 1 << 16, 0, &out->hidden));
  DSP_TRY(dsp_json_int(c, label, "num_hidden_layers", 1, 1, DSP_KDA_MAX_LAYERS, 0, &out->layers));
  DSP_TRY(dsp_json_real(c, label, "rms_norm_eps", 0.0, 1.0, &out->eps));
  const json_t *lc = json_object_get(c, "linear_attn_config");
  if (!json_is_object(lc))
    return dsp_fail(lc ? DSP_ERR_FORMAT : DSP_ERR_MISSING, "%s: config field 'linear_attn_config' %s", label,
                    lc ? "must be an object" : "is missing: no KDA layers");
  char sub[600];
  snprintf(sub, sizeof sub, "%s (linear_attn_config)", label);
  DSP_TRY(dsp_json_int(lc, sub, "head_dim", 1, 1, 256, 0, &out->head_dim));
  DSP_TRY(dsp_json_int(lc, sub, "num_heads", 1, 1, 4096, 0, &out->heads));
  DSP_TRY(dsp_json_int(lc, sub, "short_conv_kernel_size", 1, 1, 8, 0, &out->conv_width));
  DSP_TRY(dsp_json_refuse_true(lc, sub, "use_full_rank_gate", "dspark runs the low-rank gate (f_a_proj, f_b_proj)"));
  const json_t *lb = json_object_get(lc, "gate_lower_bound");
  out->lower_bound_gate = lb && !json_is_null(lb);
  out->lower_bound = 0.0;
  if (out->lower_bound_gate) {
    DSP_TRY(dsp_json_real(lc, sub, "gate_lower_bound", -1e30, 1e30, &out->lower_bound));
    if (!(out->lower_bound < 0.0) || !isfinite(out->lower_bound))
      return dsp_fail(DSP_ERR_RANGE, "%s: config field 'linear_attn_config.gate_lower_bound' = %g must be negative",
                      label, out->lower_bound);
  }
  memset(out->kda, 0, sizeof out->kda);
  uint8_t mark[DSP_KDA_MAX_LAYERS] = {0};
  if (!json_is_array(json_object_get(lc, "kda_layers")))
    return dsp_fail(DSP_ERR_MISSING, "%s: config field 'linear_attn_config.kda_layers' is missing", label);
  DSP_TRY(layer_list(lc, label, "kda_layers", out->layers, mark, 1));
  DSP_TRY(layer_list(lc, label, "full_attn_layers", out->layers, mark, 2));
  for (int64_t l = 0; l < out->layers; l++) out->kda[l] = mark[l] == 1;
  return DSP_OK;
}

dsp_status dsp_kda_config_parse(const char *text, const char *label, dsp_kda_config *out) {
  json_error_t e;
  json_t *c = json_loads(text, 0, &e);
  if (!c) return dsp_fail(DSP_ERR_FORMAT, "%s: not valid JSON (line %d: %s)", label, e.line, e.text);
  dsp_status s = parse(c, label, out);
  json_decref(c);
  return s;
}

dsp_status dsp_kda_config_load(const char *dir, dsp_kda_config *out) {
  char path[4096];
  if ((size_t)snprintf(path, sizeof path, "%s/config.json", dir) >= sizeof path)
    return dsp_fail(DSP_ERR_ARG, "kda config: directory name too long");
  char *text;
  DSP_TRY(dsp_read_text(path, &text, NULL));
  dsp_status s = dsp_kda_config_parse(text, path, out);
  free(text);
  return s;
}
