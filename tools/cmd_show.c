/* dspark show: the tensors of a safetensors file; small integer tensors in full. */
#include <inttypes.h>
#include <stdio.h>

#include "cmds.h"
#include "dspark.h"

static void show_one(dsp_st_file *f, const dsp_st_entry *e) {
  printf("  %s %s [", e->name, e->dtype);
  for (int32_t d = 0; d < e->ndim; d++) printf(d ? ", %" PRId64 : "%" PRId64, e->shape[d]);
  printf("]\n");
  dsp_tensor t;
  if (dsp_st_view(f, e->name, &t) != DSP_OK) return; /* a dtype dspark does not read: listed only */
  int64_t n = dsp_tensor_numel(&t);
  if (t.dtype != DSP_I64 || n > 1024 || t.ndim < 1) return;
  int64_t cols = t.shape[t.ndim - 1];
  for (int64_t i = 0; i < n; i++)
    printf("%s%" PRId64 "%s", i % cols ? " " : "    ", ((const int64_t *)t.data)[i], (i + 1) % cols ? "" : "\n");
}

int dsp_cmd_show(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: dspark show FILE.safetensors\n");
    return 2;
  }
  dsp_st_file *f;
  if (dsp_st_open(argv[1], &f) != DSP_OK) {
    fprintf(stderr, "dspark show: error: %s\n", dsp_error_message());
    return 1;
  }
  printf("%s:\n", argv[1]);
  for (int i = 0; i < dsp_st_count(f); i++) show_one(f, dsp_st_entry_at(f, i));
  dsp_st_close(f);
  return 0;
}
