/* What the dspark subcommands share: option parsing and the backend options. */
#ifndef DSP_TOOLS_TOOL_COMMON_H
#define DSP_TOOLS_TOOL_COMMON_H
#include "dspark.h"

typedef struct {
  dsp_backend_kind kind; /* --backend cpu|cuda */
  int tp;                /* --tp N: GPUs driven by this one process (CUDA only) */
} dsp_tool_backend;

void dsp_tool_backend_init(dsp_tool_backend *b);
/* 0: consumed (*used = 1 when it took the value), 1: not a backend option, -1: bad value (printed). */
int dsp_tool_backend_option(dsp_tool_backend *b, const char *opt, const char *val, int *used);
/* The backend the options ask for, over comm's processes. */
dsp_status dsp_tool_backend_create(const dsp_tool_backend *b, dsp_comm *comm, dsp_backend **out);
int dsp_tool_parse_path(const char *v, dsp_path *p);
int dsp_tool_parse_contract(const char *v, dsp_contract *c);
int dsp_tool_parse_onoff(const char *opt, const char *v, int *out);
int dsp_tool_parse_i64(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out);
/* The settings check every program starts with: 0, or 1 after printing why. */
int dsp_tool_settings(const char *prog);

#endif
