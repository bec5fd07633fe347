/* The devices' threads of a backend that drives several devices from one
 * process: the caller runs device 0, and one persistent thread each runs the
 * others, started by the first dsp_backend_each and woken for every later one
 * (a decode step makes several such calls; a thread started per call would
 * cost tens of microseconds and, on the CPU, a new OpenMP team each time). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/event.h"
#include "core/status.h"

typedef struct {
  dsp_status s;
  char msg[1024];
} dev_result;

struct dsp_dev_pool {
  dsp_backend *be;
  int n, started;
  pthread_t *th;
  dev_result *res;
  dsp_event go, done;
  atomic_int left, origin;
  int quit, busy;
  dsp_status (*fn)(void *ctx, int dev);
  void *ctx;
};

typedef struct {
  struct dsp_dev_pool *p;
  int dev;
} worker_arg;

static _Thread_local int on_worker;

/* A device's job failed: its message kept, and its peers' collectives released (they would wait for it). The
 * first device to fail is the origin; the others may have failed only because it did. */
static void failed(struct dsp_dev_pool *p, int dev, dev_result *r) {
  snprintf(r->msg, sizeof r->msg, "%s", dsp_error_message());
  int none = -1;
  atomic_compare_exchange_strong(&p->origin, &none, dev);
  dsp_comm_poison(p->be->tp[dev], 1);
}

static void *worker(void *arg) {
  worker_arg a = *(worker_arg *)arg;
  free(arg);
  struct dsp_dev_pool *p = a.p;
  on_worker = 1;
  if (p->be->ops->thread_enter) p->be->ops->thread_enter(p->be, a.dev);
  unsigned seen = 0;
  for (;;) {
    dsp_event_wait(&p->go, seen);
    seen++; /* one bump per job: the caller waits for every device before the next */
    if (p->quit) return NULL;
    dev_result *r = &p->res[a.dev];
    r->s = p->fn(p->ctx, a.dev);
    if (r->s != DSP_OK) failed(p, a.dev, r);
    if (atomic_fetch_sub(&p->left, 1) == 1) dsp_event_bump(&p->done);
  }
}

static void pool_free(struct dsp_dev_pool *p) {
  if (!p) return;
  if (p->started) {
    p->quit = 1;
    dsp_event_bump(&p->go);
    for (int i = 0; i < p->started; i++) pthread_join(p->th[i], NULL);
  }
  dsp_event_destroy(&p->go);
  dsp_event_destroy(&p->done);
  free(p->th);
  free(p->res);
  free(p);
}

static dsp_status pool_start(dsp_backend *be) {
  struct dsp_dev_pool *p = calloc(1, sizeof *p);
  if (!p) return dsp_fail(DSP_ERR_NOMEM, "backend: out of memory for %d device threads", be->ndev);
  p->be = be;
  p->n = be->ndev;
  dsp_event_init(&p->go);
  dsp_event_init(&p->done);
  p->th = calloc((size_t)p->n, sizeof *p->th);
  p->res = calloc((size_t)p->n, sizeof *p->res);
  if (!p->th || !p->res) {
    pool_free(p);
    return dsp_fail(DSP_ERR_NOMEM, "backend: out of memory for %d device threads", be->ndev);
  }
  for (; p->started < p->n - 1; p->started++) {
    worker_arg *a = malloc(sizeof *a);
    if (a) *a = (worker_arg){p, p->started + 1};
    if (!a || pthread_create(&p->th[p->started], NULL, worker, a)) {
      free(a);
      pool_free(p);
      return dsp_fail(DSP_ERR_NOMEM, "backend: cannot start %d device threads", be->ndev);
    }
  }
  be->pool = p;
  return DSP_OK;
}

dsp_status dsp_backend_each(dsp_backend *be, dsp_status (*fn)(void *ctx, int dev), void *ctx) {
  if (be->ndev == 1) return fn(ctx, 0);
  if (on_worker || (be->pool && be->pool->busy))
    return dsp_fail(DSP_ERR_ARG, "backend: a device's job started another job on every device");
  if (!be->pool) DSP_TRY(pool_start(be));
  struct dsp_dev_pool *p = be->pool;
  p->busy = 1;
  p->fn = fn;
  p->ctx = ctx;
  atomic_store(&p->left, p->n - 1);
  atomic_store(&p->origin, -1);
  const unsigned seen = dsp_event_seq(&p->done);
  dsp_event_bump(&p->go);
  p->res[0].s = fn(ctx, 0);
  if (p->res[0].s != DSP_OK) failed(p, 0, &p->res[0]);
  dsp_event_wait(&p->done, seen);
  p->busy = 0;
  const int o = atomic_load(&p->origin);
  if (o < 0) return DSP_OK;
  dsp_comm_poison(be->tp[0], 0); /* every job has returned: no rank is inside a collective */
  return dsp_fail(p->res[o].s, "%s %d: %s", be->kind == DSP_BACKEND_CUDA ? "GPU" : "device", be->device[o],
                  p->res[o].msg);
}

void dsp_backend_each_stop(dsp_backend *be) {
  pool_free(be->pool);
  be->pool = NULL;
}
