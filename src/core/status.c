#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static _Thread_local char g_msg[1024];

const char *dsp_status_name(dsp_status s) {
  switch (s) {
    case DSP_OK: return "ok";
    case DSP_ERR_ARG: return "bad argument";
    case DSP_ERR_IO: return "i/o error";
    case DSP_ERR_FORMAT: return "bad format";
    case DSP_ERR_DTYPE: return "bad dtype";
    case DSP_ERR_SHAPE: return "bad shape";
    case DSP_ERR_RANGE: return "out of range";
    case DSP_ERR_MISSING: return "missing";
    case DSP_ERR_NOMEM: return "out of memory";
    case DSP_ERR_COMM: return "communication error";
    case DSP_ERR_DEVICE: return "device error";
    case DSP_ERR_UNSUPPORTED: return "unsupported";
  }
  return "unknown status";
}

const char *dsp_error_message(void) { return g_msg; }

void dsp_error_clear(void) { g_msg[0] = 0; }

dsp_status dsp_fail(dsp_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_msg, sizeof g_msg, fmt, ap);
  va_end(ap);
  return s;
}

void dsp_assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "dspark: internal error: assertion '%s' failed at %s:%d\n", expr, file, line);
  fflush(stderr);
  abort();
}
