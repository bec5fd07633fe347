/* libFuzzer target for a sharded checkpoint's index: the input is
 * model.safetensors.index.json, written into a directory that holds two
 * shards (model-00001-of-00002.safetensors: "a.weight", "b.weight";
 * model-00002-of-00002.safetensors: "c.weight") and opened as a Hugging Face
 * model directory. Whatever the bytes, opening either fails with a message or
 * yields a directory whose index and shards agree: the tensors of the shards
 * the index names (the index is what the directory holds: a shard it does not
 * name is not opened), each found in the file holding it, and any other name
 * refused as missing. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/hf_dir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_dir[64];

static void shard(const char *file, const char *const *names, int n) {
  char p[160];
  snprintf(p, sizeof p, "%s/%s", g_dir, file);
  uint16_t v[2] = {0x3F80, 0xBF80};
  dsp_st_writer *w;
  if (dsp_st_writer_create(p, &w) != DSP_OK) abort();
  for (int i = 0; i < n; i++) {
    dsp_tensor t = dsp_tensor_2d(v, DSP_BF16, 1, 2);
    if (dsp_st_writer_add(w, names[i], &t) != DSP_OK) abort();
  }
  if (dsp_st_writer_finish(w) != DSP_OK) abort();
}

static void cleanup(void) {
  static const char *const files[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                      "model.safetensors.index.json"};
  char p[160];
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s/%s", g_dir, files[i]);
    remove(p);
  }
  remove(g_dir);
}

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/fuzz_hf_dir.XXXXXX");
  if (!mkdtemp(g_dir)) abort();
  atexit(cleanup);
  static const char *const one[] = {"a.weight", "b.weight"}, *const two[] = {"c.weight"};
  shard("model-00001-of-00002.safetensors", one, 2);
  shard("model-00002-of-00002.safetensors", two, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_dir[0]) setup();
  char p[160];
  snprintf(p, sizeof p, "%s/model.safetensors.index.json", g_dir);
  FILE *f = fopen(p, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f)) abort();
  dsp_hf_dir *d = NULL;
  if (dsp_hf_dir_open(g_dir, &d) != DSP_OK) {
    if (d || !dsp_error_message()[0]) abort(); /* a refusal leaves nothing open and says why */
    return 0;
  }
  const int n = dsp_hf_dir_count(d);
  if (n != 1 && n != 2 && n != 3) abort(); /* shard 2, shard 1, or both */
  for (int i = 0; i < n; i++) {
    const char *name = dsp_hf_dir_name(d, i);
    const int first = !strcmp(name, "a.weight") || !strcmp(name, "b.weight");
    if (!first && strcmp(name, "c.weight")) abort();
    dsp_st_file *sf = NULL;
    if (dsp_hf_dir_find(d, name, &sf) != DSP_OK || !sf) abort();
    if (!strstr(dsp_st_path(sf), first ? "model-00001-of-00002" : "model-00002-of-00002")) abort();
  }
  dsp_st_file *sf = NULL;
  if (dsp_hf_dir_find(d, "d.weight", &sf) != DSP_ERR_MISSING) abort();
  dsp_hf_dir_close(d);
  return 0;
}
