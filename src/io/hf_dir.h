/* A Hugging Face model directory's weights: model.safetensors, or the shards
 * model.safetensors.index.json lists, each opened once (mapped, nothing read
 * until a tensor is asked for). Every tensor lives in exactly one file, the
 * one the index names. */
#ifndef DSP_IO_HF_DIR_H
#define DSP_IO_HF_DIR_H
#include "dspark.h"

typedef struct dsp_hf_dir dsp_hf_dir;

dsp_status dsp_hf_dir_open(const char *dir, dsp_hf_dir **out);
void dsp_hf_dir_close(dsp_hf_dir *d);
/* The file holding `name`, or DSP_ERR_MISSING naming it. */
dsp_status dsp_hf_dir_find(const dsp_hf_dir *d, const char *name, dsp_st_file **f);
/* Every tensor name, over all files (for the check that none is unexpected). */
int dsp_hf_dir_count(const dsp_hf_dir *d);
const char *dsp_hf_dir_name(const dsp_hf_dir *d, int i);
const char *dsp_hf_dir_path(const dsp_hf_dir *d);

#endif
