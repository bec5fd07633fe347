/* A Hugging Face model directory's config.json (and generation_config.json)
 * for the architectures dspark runs, in the transformers 4.x and 5.x forms.
 * Whatever a field asks that dspark cannot honour is refused with the field
 * named, never ignored. */
#ifndef DSP_IO_HF_CONFIG_H
#define DSP_IO_HF_CONFIG_H
#include <stdint.h>

#include "dspark.h"

#define DSP_MAX_EOS 8

typedef struct {
  char arch[64];           /* "Qwen3ForCausalLM" */
  int64_t vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, max_positions;
  double rope_theta, eps;
  int tied;                /* tie_word_embeddings */
  int64_t eos[DSP_MAX_EOS];
  int n_eos;
  int64_t bos;             /* -1 when absent */
  /* a DSpark draft (architectures ["Qwen3DSparkModel"], DeepSpec's layout) */
  int is_draft;
  int64_t block_size, mask_token_id, markov_rank, num_target_layers; /* num_target_layers: 0 when absent */
  int32_t taps[64];        /* target_layer_ids, increasing */
  int ntaps;
  int confidence, confidence_markov; /* enable_confidence_head, confidence_head_with_markov */
} dsp_hf_config;

/* dir/config.json, then dir/generation_config.json's eos ids when present.
 * Accepts Qwen3ForCausalLM and Qwen3DSparkModel (is_draft set, its fields read). */
dsp_status dsp_hf_config_load(const char *dir, dsp_hf_config *out);
/* The same from JSON text (label names it in messages); generation may be NULL. */
dsp_status dsp_hf_config_parse(const char *config_json, const char *generation_json, const char *label,
                               dsp_hf_config *out);
/* A file's bytes, NUL-terminated (DSP_ERR_IO naming it when it cannot be read). */
dsp_status dsp_read_text(const char *path, char **out, size_t *len);

#endif
