/* Reading the head's weights and a proposal's inputs from safetensors files
 * (the layouts of `dspark head`, README). A rank maps the whole file but
 * touches only its own rows of lm_head and markov_w2 (zero-copy views; the
 * packing reads just those pages). */
#ifndef DSP_MODEL_HEAD_LOAD_H
#define DSP_MODEL_HEAD_LOAD_H
#include "io/safetensors.h"
#include "dspark.h"

/* Fills cfg->vocab, vocab_padded, hidden, rank from W (other fields untouched)
 * and w with views into the mapped file, which stays open in *file. need_full:
 * also map all of markov_w2 (original and replicated paths). */
dsp_status dsp_head_load_weights(const char *path, int size, int rank, int need_full, dsp_head_config *cfg,
                                 dsp_head_weights *w, dsp_st_file **file);

/* The views of rank `rank` of `size` into an already open weights file. */
dsp_status dsp_head_weights_from_file(dsp_st_file *f, int size, int rank, int need_full, dsp_head_config *cfg,
                                      dsp_head_weights *w);

typedef struct {
  dsp_st_file *file;
  dsp_tensor hidden;       /* [B, gamma, H] BF16 view into the file */
  int64_t *anchor;         /* [B], owned */
  float *temperature;      /* [B] or NULL, owned */
  uint64_t *seed;          /* [B] or NULL, owned */
  int64_t *position;       /* [B] or NULL, owned */
  int32_t batch;
  int64_t gamma;
} dsp_head_input_file;

/* Reads I and checks it against cfg (H, V): shapes, dtypes, ranges. */
dsp_status dsp_head_load_inputs(const char *path, const dsp_head_config *cfg, dsp_head_input_file *in);
void dsp_head_input_file_free(dsp_head_input_file *in);
/* The dsp_head_inputs view of a loaded input file. */
dsp_head_inputs dsp_head_input_file_view(const dsp_head_input_file *in);

#endif
