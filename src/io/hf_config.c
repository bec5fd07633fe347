#include "io/hf_config.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/json_get.h"

dsp_status dsp_read_text(const char *path, char **out, size_t *len) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return dsp_fail(DSP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    const size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (n < cap - 1) break;
    if (cap > ((size_t)256 << 20)) {
      free(buf);
      fclose(f);
      return dsp_fail(DSP_ERR_FORMAT, "%s: larger than 256 MiB", path);
    }
    char *p = realloc(buf, cap * 2);
    if (!p) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = p;
    cap *= 2;
  }
  const int err = ferror(f);
  fclose(f);
  if (!buf) return dsp_fail(DSP_ERR_NOMEM, "%s: out of memory", path);
  if (err) {
    free(buf);
    return dsp_fail(DSP_ERR_IO, "%s: read error", path);
  }
  buf[n] = 0;
  *out = buf;
  if (len) *len = n;
  return DSP_OK;
}

/* eos_token_id: an integer or a list of them, appended to out. */
static dsp_status add_eos(const json_t *v, const char *label, const char *file, int64_t vocab, dsp_hf_config *out) {
  if (!v || json_is_null(v)) return DSP_OK;
  const json_t *one[1] = {v};
  size_t n = json_is_array(v) ? json_array_size(v) : 1;
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_is_array(v) ? json_array_get(v, i) : one[0];
    if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= vocab)
      return dsp_fail(DSP_ERR_FORMAT, "%s: %s eos_token_id must be token ids in [0, %lld)", label, file,
                      (long long)vocab);
    const int64_t id = json_integer_value(e);
    int seen = 0;
    for (int k = 0; k < out->n_eos; k++) seen |= out->eos[k] == id;
    if (seen) continue;
    if (out->n_eos == DSP_MAX_EOS)
      return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: more than %d eos ids", label, DSP_MAX_EOS);
    out->eos[out->n_eos++] = id;
  }
  return DSP_OK;
}

/* DeepSpec's draft fields (MODELS_NOTES.md in tests/oracle lists them). */
static dsp_status parse_draft(const json_t *c, const char *label, dsp_hf_config *out) {
  DSP_TRY(dsp_json_int(c, label, "block_size", 1, 1, 64, 0, &out->block_size));
  DSP_TRY(dsp_json_int(c, label, "mask_token_id", 1, 0, out->vocab - 1, 0, &out->mask_token_id));
  DSP_TRY(dsp_json_int(c, label, "markov_rank", 1, 0, 4096, 0, &out->markov_rank));
  DSP_TRY(dsp_json_int(c, label, "num_target_layers", 0, 1, 4096, 0, &out->num_target_layers));
  if (out->markov_rank == 0)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: config field 'markov_rank' is 0 (a draft without a Markov head)", label);
  const json_t *ht = json_object_get(c, "markov_head_type");
  if (!(json_is_string(ht) && !strcmp(json_string_value(ht), "vanilla")))
    return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: config field 'markov_head_type' is not \"vanilla\" (the gated and rnn "
                    "heads are not supported)", label);
  const json_t *taps = json_object_get(c, "target_layer_ids");
  if (!json_is_array(taps) || json_array_size(taps) < 1 || json_array_size(taps) > 64)
    return dsp_fail(DSP_ERR_FORMAT, "%s: config field 'target_layer_ids' must be a list of 1 .. 64 layer ids", label);
  out->ntaps = (int)json_array_size(taps);
  for (int i = 0; i < out->ntaps; i++) {
    const json_t *e = json_array_get(taps, (size_t)i);
    if (!json_is_integer(e) || json_integer_value(e) < -1 || json_integer_value(e) > 4095)
      return dsp_fail(DSP_ERR_FORMAT, "%s: config field 'target_layer_ids[%d]' is not a layer id", label, i);
    out->taps[i] = (int32_t)json_integer_value(e);
    if (out->taps[i] == -1)
      return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: config field 'target_layer_ids' names -1 (the embedding output), "
                      "which dspark does not tap yet", label);
    if (i && out->taps[i] <= out->taps[i - 1])
      return dsp_fail(DSP_ERR_FORMAT, "%s: config field 'target_layer_ids' must increase", label);
  }
  DSP_TRY(dsp_json_bool(c, label, "enable_confidence_head", &out->confidence));
  DSP_TRY(dsp_json_bool(c, label, "confidence_head_with_markov", &out->confidence_markov));
  out->confidence_markov &= out->confidence;
  return DSP_OK;
}

static dsp_status parse(const json_t *c, const json_t *gen, const char *label, dsp_hf_config *out) {
  memset(out, 0, sizeof *out);
  if (!json_is_object(c)) return dsp_fail(DSP_ERR_FORMAT, "%s: config.json is not a JSON object", label);
  const json_t *archs = json_object_get(c, "architectures");
  const json_t *mt = json_object_get(c, "model_type");
  const char *arch = json_is_array(archs) && json_array_size(archs) == 1 && json_is_string(json_array_get(archs, 0))
                         ? json_string_value(json_array_get(archs, 0))
                         : NULL;
  if (arch && strcmp(arch, "Qwen3ForCausalLM") && strcmp(arch, "Qwen3DSparkModel"))
    return dsp_fail(DSP_ERR_UNSUPPORTED,
                    "%s: config field 'architectures' is [\"%s\"]; dspark runs Qwen3ForCausalLM and its "
                    "Qwen3DSparkModel drafts", label, arch);
  if (!arch && !(json_is_string(mt) && !strcmp(json_string_value(mt), "qwen3")))
    return dsp_fail(DSP_ERR_UNSUPPORTED,
                    "%s: config fields 'architectures' / 'model_type' name no architecture dspark runs (Qwen3)", label);
  out->is_draft = arch && !strcmp(arch, "Qwen3DSparkModel");
  snprintf(out->arch, sizeof out->arch, "%s", out->is_draft ? "Qwen3DSparkModel" : "Qwen3ForCausalLM");
  DSP_TRY(dsp_json_int(c, label, "vocab_size", 1, 1, (int64_t)1 << 31, 0, &out->vocab));
  DSP_TRY(dsp_json_int(c, label, "hidden_size", 1, 1, 1 << 20, 0, &out->hidden));
  DSP_TRY(dsp_json_int(c, label, "intermediate_size", 1, 1, 1 << 22, 0, &out->intermediate));
  DSP_TRY(dsp_json_int(c, label, "num_hidden_layers", 1, 1, 4096, 0, &out->layers));
  DSP_TRY(dsp_json_int(c, label, "num_attention_heads", 1, 1, 4096, 0, &out->heads));
  DSP_TRY(dsp_json_int(c, label, "num_key_value_heads", 0, 1, 4096, out->heads, &out->kv_heads));
  DSP_TRY(dsp_json_int(c, label, "head_dim", 0, 2, 1024, out->hidden / out->heads, &out->head_dim));
  if (out->head_dim < 2) /* the default, hidden_size / num_attention_heads, can be below the minimum */
    return dsp_fail(DSP_ERR_FORMAT, "%s: head_dim %lld (hidden_size / num_attention_heads without a head_dim field) "
                    "must be at least 2", label, (long long)out->head_dim);
  DSP_TRY(dsp_json_int(c, label, "max_position_embeddings", 0, 1, (int64_t)1 << 30, 32768, &out->max_positions));
  if (out->heads % out->kv_heads)
    return dsp_fail(DSP_ERR_FORMAT, "%s: num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
                    label, (long long)out->heads, (long long)out->kv_heads);
  if (out->head_dim % 2)
    return dsp_fail(DSP_ERR_FORMAT, "%s: head_dim %lld must be even (rotate-half RoPE)", label, (long long)out->head_dim);
  /* rope_theta: top level (4.x) or rope_parameters (5.x); only the default rope type */
  const json_t *rs = json_object_get(c, "rope_scaling"), *rp = json_object_get(c, "rope_parameters");
  if (rs && !json_is_null(rs) && !(json_is_object(rs) && json_object_size(rs) == 0))
    return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: config field 'rope_scaling' is set (rope scaling is not supported)",
                    label);
  if (rp && !json_is_null(rp)) {
    if (!json_is_object(rp)) return dsp_fail(DSP_ERR_FORMAT, "%s: config field 'rope_parameters' is not an object", label);
    const json_t *rt = json_object_get(rp, "rope_type");
    if (rt && !(json_is_string(rt) && !strcmp(json_string_value(rt), "default")))
      return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: config field 'rope_parameters.rope_type' is not \"default\"", label);
    DSP_TRY(dsp_json_real(rp, label, "rope_theta", 1.0, 1e12, &out->rope_theta));
  } else {
    DSP_TRY(dsp_json_real(c, label, "rope_theta", 1.0, 1e12, &out->rope_theta));
  }
  const json_t *eps = json_object_get(c, "rms_norm_eps");
  out->eps = 1e-6;
  if (eps) DSP_TRY(dsp_json_real(c, label, "rms_norm_eps", 1e-12, 1.0, &out->eps));
  const json_t *act = json_object_get(c, "hidden_act");
  if (act && !(json_is_string(act) && !strcmp(json_string_value(act), "silu")))
    return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: config field 'hidden_act' is not \"silu\"", label);
  DSP_TRY(dsp_json_refuse_true(c, label, "attention_bias", "attention biases are not supported"));
  DSP_TRY(dsp_json_refuse_true(c, label, "use_sliding_window", "sliding-window layers are not supported"));
  DSP_TRY(dsp_json_refuse_true(c, label, "quantization_config", "quantized weights are not supported (bf16 only)"));
  const json_t *lt = json_object_get(c, "layer_types");
  for (size_t i = 0; json_is_array(lt) && i < json_array_size(lt); i++) {
    const json_t *e = json_array_get(lt, i);
    if (!json_is_string(e) || strcmp(json_string_value(e), "full_attention"))
      return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: config field 'layer_types[%zu]' is not \"full_attention\"", label, i);
  }
  static const char *const dtype_keys[2] = {"torch_dtype", "dtype"}; /* transformers 4.x, 5.x */
  for (int i = 0; i < 2; i++) {
    const char *k = dtype_keys[i];
    const json_t *dt = json_object_get(c, k);
    if (dt && !json_is_null(dt) && !(json_is_string(dt) && !strcmp(json_string_value(dt), "bfloat16")))
      return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: config field '%s' is not \"bfloat16\" (dspark runs bf16 weights)",
                      label, k);
  }
  const json_t *tie = json_object_get(c, "tie_word_embeddings");
  if (tie && !json_is_boolean(tie))
    return dsp_fail(DSP_ERR_FORMAT, "%s: config field 'tie_word_embeddings' is not a boolean", label);
  out->tied = tie && json_is_true(tie);
  DSP_TRY(dsp_json_int(c, label, "bos_token_id", 0, 0, out->vocab - 1, -1, &out->bos));
  DSP_TRY(add_eos(json_object_get(c, "eos_token_id"), label, "config.json", out->vocab, out));
  if (out->is_draft) DSP_TRY(parse_draft(c, label, out));
  if (gen) {
    if (!json_is_object(gen)) return dsp_fail(DSP_ERR_FORMAT, "%s: generation_config.json is not a JSON object", label);
    DSP_TRY(add_eos(json_object_get(gen, "eos_token_id"), label, "generation_config.json", out->vocab, out));
  }
  return DSP_OK;
}

dsp_status dsp_hf_config_parse(const char *config_json, const char *generation_json, const char *label,
                               dsp_hf_config *out) {
  json_error_t e;
  json_t *c = json_loads(config_json, JSON_REJECT_DUPLICATES, &e);
  if (!c) return dsp_fail(DSP_ERR_FORMAT, "%s: config.json: %s (line %d)", label, e.text, e.line);
  json_t *g = NULL;
  if (generation_json) {
    g = json_loads(generation_json, JSON_REJECT_DUPLICATES, &e);
    if (!g) {
      json_decref(c);
      return dsp_fail(DSP_ERR_FORMAT, "%s: generation_config.json: %s (line %d)", label, e.text, e.line);
    }
  }
  dsp_status s = parse(c, g, label, out);
  json_decref(c);
  json_decref(g);
  return s;
}

dsp_status dsp_hf_config_load(const char *dir, dsp_hf_config *out) {
  char path[4096];
  snprintf(path, sizeof path, "%s/config.json", dir);
  char *cfg = NULL, *gen = NULL;
  DSP_TRY(dsp_read_text(path, &cfg, NULL));
  snprintf(path, sizeof path, "%s/generation_config.json", dir);
  FILE *probe = fopen(path, "rb");
  dsp_status s = DSP_OK;
  if (probe) {
    fclose(probe);
    s = dsp_read_text(path, &gen, NULL);
  }
  if (s == DSP_OK) s = dsp_hf_config_parse(cfg, gen, dir, out);
  free(cfg);
  free(gen);
  return s;
}
