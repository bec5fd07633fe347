/* libFuzzer target for the safetensors reader: whatever the bytes, opening
 * either fails cleanly or yields a handle whose every accessor stays inside
 * the buffer (ASan checks each byte a view or a row copy touches). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dspark.h"
#include "core/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Keeps the sums alive so the reads are not optimised away. */
static volatile uint64_t g_sink;

static void touch_tensor(const dsp_st_file *f, const char *name) {
  dsp_dtype dt;
  int32_t nd;
  int64_t shape[DSP_MAX_DIMS];
  if (dsp_st_info(f, name, &dt, &nd, shape) != DSP_OK) return;
  uint64_t sum = 0;
  dsp_tensor v;
  if (dsp_st_view(f, name, &v) == DSP_OK) {
    size_t n = (size_t)dsp_tensor_numel(&v) * dsp_dtype_size(v.dtype);
    for (size_t i = 0; i < n; i++) sum += ((const uint8_t *)v.data)[i];
  }
  if (nd >= 1 && shape[0] > 0) {
    /* The data range fits in the input, so a row does too. */
    size_t row = dsp_dtype_size(dt);
    for (int32_t d = 1; d < nd; d++) row *= (size_t)shape[d];
    uint8_t *buf = malloc(row ? row : 1);
    if (!buf) abort();
    if (dsp_st_read_rows(f, name, 0, 1, buf) != DSP_OK) abort();
    if (dsp_st_read_rows(f, name, shape[0] - 1, 1, buf) != DSP_OK) abort();
    for (size_t i = 0; i < row; i++) sum += buf[i];
    if (dsp_st_read_rows(f, name, shape[0], 1, buf) != DSP_ERR_RANGE) abort();
    free(buf);
  }
  g_sink += sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dsp_st_file *f = NULL;
  if (dsp_st_open_memory(data, size, "fuzz", &f) != DSP_OK) {
    if (f) abort(); /* a failed open hands out no handle */
    return 0;
  }
  for (int i = 0; i < dsp_st_count(f); i++) {
    const dsp_st_entry *e = dsp_st_entry_at(f, i);
    if (!e || e->begin > e->end || strcmp(e->name, dsp_st_name(f, i)) != 0) abort();
    touch_tensor(f, e->name);
  }
  const char *m = dsp_st_metadata(f, "format");
  if (m) g_sink += strlen(m);
  dsp_st_close(f);
  return 0;
}
