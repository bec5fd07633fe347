/* The public face of the backend: creation by kind and the TP layout (the
 * per-device threads are in each.c). */
#include "backend/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

const char *dsp_backend_kind_name(dsp_backend_kind k) {
  return k == DSP_BACKEND_CPU ? "cpu" : k == DSP_BACKEND_CUDA ? "cuda" : "?";
}

dsp_status dsp_backend_create(const dsp_backend_config *cfg, dsp_backend **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "backend: NULL output handle");
  *out = NULL;
  if (!cfg) return dsp_fail(DSP_ERR_ARG, "backend: NULL config");
  DSP_TRY(dsp_settings_check());
  if (cfg->devices < 0 || cfg->devices > DSP_BACKEND_MAX_DEVICES)
    return dsp_fail(DSP_ERR_ARG, "backend: %d devices (want 0 .. %d)", cfg->devices, DSP_BACKEND_MAX_DEVICES);
  dsp_backend *be = calloc(1, sizeof *be);
  if (!be) return dsp_fail(DSP_ERR_NOMEM, "backend: out of memory");
  be->kind = cfg->kind;
  be->comm = cfg->comm;
  dsp_status s = DSP_OK;
  if (!be->comm) {
    s = dsp_comm_self_create(&be->own_comm);
    be->comm = be->own_comm;
  }
  if (s == DSP_OK) {
    switch (cfg->kind) {
      case DSP_BACKEND_CPU: s = dsp_backend_cpu_init(be, cfg); break;
      case DSP_BACKEND_CUDA: s = dsp_backend_cuda_init(be, cfg); break;
      default: s = dsp_fail(DSP_ERR_ARG, "backend: unknown kind %d", (int)cfg->kind);
    }
  }
  if (s != DSP_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dsp_error_message());
    dsp_backend_free(be);
    return dsp_fail(s, "%s", msg);
  }
  *out = be;
  return DSP_OK;
}

void dsp_backend_free(dsp_backend *be) {
  if (!be) return;
  dsp_backend_each_stop(be);
  if (be->ops && be->ops->free) be->ops->free(be);
  dsp_comm_free(be->own_comm);
  free(be);
}

int dsp_backend_available(dsp_backend_kind k) {
  return k == DSP_BACKEND_CPU || (k == DSP_BACKEND_CUDA && dsp_backend_cuda_devices() > 0);
}

dsp_backend_kind dsp_backend_kind_of(const dsp_backend *be) { return be->kind; }
int32_t dsp_backend_tp_size(const dsp_backend *be) { return be->tp_size; }
int32_t dsp_backend_tp_rank0(const dsp_backend *be) { return be->tp_rank0; }
int32_t dsp_backend_devices(const dsp_backend *be) { return be->ndev; }
dsp_comm *dsp_backend_comm(const dsp_backend *be) { return be->comm; }
const char *dsp_backend_describe(const dsp_backend *be) { return be->desc; }
