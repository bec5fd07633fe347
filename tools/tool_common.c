#include "tool_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dsp_tool_backend_init(dsp_tool_backend *b) { *b = (dsp_tool_backend){.kind = DSP_BACKEND_CPU, .tp = 1}; }

int dsp_tool_parse_i64(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi) {
    fprintf(stderr, "dspark: %s wants an integer in [%lld, %lld], got '%s'\n", opt, (long long)lo, (long long)hi, v);
    return -1;
  }
  *out = x;
  return 0;
}

int dsp_tool_backend_option(dsp_tool_backend *b, const char *opt, const char *val, int *used) {
  if (!strcmp(opt, "--backend")) {
    if (!val || (strcmp(val, "cpu") && strcmp(val, "cuda"))) {
      fprintf(stderr, "dspark: --backend wants cpu or cuda%s%s%s\n", val ? ", got '" : "", val ? val : "",
              val ? "'" : "");
      return -1;
    }
    b->kind = strcmp(val, "cuda") ? DSP_BACKEND_CPU : DSP_BACKEND_CUDA;
    *used = 1;
    return 0;
  }
  if (!strcmp(opt, "--tp")) {
    int64_t n;
    if (!val) {
      fprintf(stderr, "dspark: --tp wants a count of TP ranks (GPUs, or CPU ranks) for this process\n");
      return -1;
    }
    if (dsp_tool_parse_i64("--tp", val, 1, 64, &n)) return -1;
    b->tp = (int)n;
    *used = 1;
    return 0;
  }
  return 1;
}

dsp_status dsp_tool_backend_create(const dsp_tool_backend *b, dsp_comm *comm, dsp_backend **out) {
  *out = NULL;
  dsp_backend_config cfg = {.kind = b->kind, .comm = comm, .devices = b->tp};
  return dsp_comm_agree(comm, dsp_backend_create(&cfg, out));
}

int dsp_tool_parse_path(const char *v, dsp_path *p) {
  static const char *names[] = {"auto", "original", "sharded", "replicated"};
  for (int i = 0; i < 4; i++)
    if (!strcmp(v, names[i])) {
      *p = (dsp_path)i;
      return 0;
    }
  fprintf(stderr, "dspark: --path wants auto, original, sharded or replicated, got '%s'\n", v);
  return -1;
}

int dsp_tool_parse_contract(const char *v, dsp_contract *c) {
  if (!strcmp(v, "bf16")) *c = DSP_CONTRACT_BF16;
  else if (!strcmp(v, "fp32-add")) *c = DSP_CONTRACT_FP32_ADD;
  else {
    fprintf(stderr, "dspark: --contract wants bf16 or fp32-add, got '%s'\n", v);
    return -1;
  }
  return 0;
}

int dsp_tool_parse_onoff(const char *opt, const char *v, int *out) {
  if (!strcmp(v, "on")) *out = 1;
  else if (!strcmp(v, "off")) *out = 0;
  else {
    fprintf(stderr, "dspark: %s wants on or off, got '%s'\n", opt, v);
    return -1;
  }
  return 0;
}

int dsp_tool_settings(const char *prog) {
  if (dsp_settings_check() == DSP_OK) return 0;
  fprintf(stderr, "%s: error: %s\n", prog, dsp_error_message());
  return 1;
}
