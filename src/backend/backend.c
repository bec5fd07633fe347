/* The public face of the backend: creation by kind, the TP layout, and the
 * per-device thread group that one process driving several GPUs needs. */
#include "backend/backend.h"

#include <pthread.h>
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

typedef struct {
  dsp_status (*fn)(void *ctx, int dev);
  void *ctx;
  int dev;
  dsp_status s;
  char msg[1024];
} each_job;

static void *each_run(void *p) {
  each_job *j = p;
  j->s = j->fn(j->ctx, j->dev);
  if (j->s != DSP_OK) snprintf(j->msg, sizeof j->msg, "%s", dsp_error_message());
  return NULL;
}

dsp_status dsp_backend_each(dsp_backend *be, dsp_status (*fn)(void *ctx, int dev), void *ctx) {
  if (be->ndev == 1) return fn(ctx, 0);
  each_job *jobs = calloc((size_t)be->ndev, sizeof *jobs);
  pthread_t *t = calloc((size_t)be->ndev, sizeof *t);
  if (!jobs || !t) {
    free(jobs);
    free(t);
    return dsp_fail(DSP_ERR_NOMEM, "backend: out of memory for %d device threads", be->ndev);
  }
  int started = 0;
  for (; started < be->ndev; started++) {
    jobs[started] = (each_job){.fn = fn, .ctx = ctx, .dev = started};
    if (pthread_create(&t[started], NULL, each_run, &jobs[started])) break;
  }
  for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
  dsp_status s = started < be->ndev ? dsp_fail(DSP_ERR_NOMEM, "backend: cannot start %d device threads", be->ndev)
                                    : DSP_OK;
  for (int i = 0; i < be->ndev && s == DSP_OK; i++)
    if (jobs[i].s != DSP_OK) s = dsp_fail(jobs[i].s, "GPU %d: %s", be->device[i], jobs[i].msg);
  free(jobs);
  free(t);
  return s;
}
