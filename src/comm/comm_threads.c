/* The in-process communicator: n ranks that are threads of this process (the
 * CPU backend's devices), exchanging through shared memory. Each collective
 * publishes every rank's buffer, passes a barrier, lets each rank read the
 * others' buffers directly, and passes a second barrier before any buffer may
 * change. F32 sums go by the halving tree over ranks (core/tree_sum.h), so
 * results are the same on every rank and on every run, and match the K
 * slices of a row-parallel product. A rank that fails alone poisons the group (the device
 * threads do it for a failed job), so the others' collectives return an error
 * instead of waiting for it forever; once every rank's job has returned, the
 * group is cleared for the next. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/event.h"
#include "core/status.h"
#include "core/tree_sum.h"

typedef struct {
  int n;
  atomic_int refs;
  atomic_int failed; /* a rank failed alone: every collective from then on fails */
  dsp_barrier bar;
  const void **buf; /* [n] each rank's published buffer */
} th_group;

typedef struct {
  th_group *g;
  void *tmp; /* an in-place reduction's result before it replaces the input */
  size_t tmp_bytes;
} th_impl;

static th_impl *impl_of(dsp_comm *c) { return (th_impl *)c->impl; }

/* The group's barrier, or DSP_ERR_COMM once a rank has failed alone. */
static dsp_status meet(dsp_comm *c) {
  th_group *g = impl_of(c)->g;
  if (!atomic_load(&g->failed)) dsp_barrier_wait_or(&g->bar, &g->failed);
  if (atomic_load(&g->failed))
    return dsp_fail(DSP_ERR_COMM, "comm threads: rank %d: another rank of this process failed alone", c->rank);
  return DSP_OK;
}

static dsp_status th_allgather(dsp_comm *c, const void *send, void *recv, size_t bytes) {
  th_group *g = impl_of(c)->g;
  g->buf[c->rank] = send;
  DSP_TRY(meet(c));
  for (int j = 0; j < c->size && bytes; j++) {
    char *dst = (char *)recv + (size_t)j * bytes;
    if (j != c->rank) memcpy(dst, g->buf[j], bytes);
    else if (dst != send) memmove(dst, send, bytes); /* others read only the send buffer */
  }
  return meet(c);
}

static dsp_status th_bcast(dsp_comm *c, void *buf, size_t bytes, int root) {
  th_group *g = impl_of(c)->g;
  g->buf[c->rank] = buf;
  DSP_TRY(meet(c));
  if (c->rank != root && bytes) memcpy(buf, g->buf[root], bytes);
  return meet(c);
}

#define TH_REDUCE(T, UT)                                                                \
  static void reduce_##T(const void **in, int n, size_t count, dsp_reduce_op op, void *out) { \
    T *o = out;                                                                         \
    for (size_t i = 0; i < count; i++) {                                                \
      T acc = ((const T *)in[0])[i];                                                    \
      for (int j = 1; j < n; j++) {                                                     \
        const T x = ((const T *)in[j])[i];                                              \
        if (op == DSP_REDUCE_SUM) acc = (T)((UT)acc + (UT)x);                           \
        else acc = x > acc ? x : acc;                                                   \
      }                                                                                 \
      o[i] = acc;                                                                       \
    }                                                                                   \
  }
TH_REDUCE(float, float)
TH_REDUCE(int32_t, uint32_t)
TH_REDUCE(int64_t, uint64_t)
#undef TH_REDUCE

/* core/tree_sum.h's order over the ranks' buffers, element by element */
static void sum_tree(const void **in, int n, size_t count, float *out) {
  float v[n];
  for (size_t i = 0; i < count; i++) {
    for (int r = 0; r < n; r++) v[r] = ((const float *)in[r])[i];
    out[i] = dsp_tree_sum_f32(v, 1, 0, n);
  }
}

static dsp_status th_allreduce(dsp_comm *c, const void *send, void *recv, size_t count, dsp_dtype dt,
                               dsp_reduce_op op) {
  th_impl *m = impl_of(c);
  th_group *g = m->g;
  const size_t bytes = count * dsp_dtype_size(dt);
  /* in place, this rank's result must not overwrite what the others still read */
  void *out = recv;
  dsp_status s = DSP_OK;
  if (send == recv && bytes > m->tmp_bytes) {
    void *p = realloc(m->tmp, bytes);
    if (p) m->tmp = p, m->tmp_bytes = bytes;
    else s = dsp_fail(DSP_ERR_NOMEM, "comm threads: no scratch for a %zu-byte all-reduce", bytes);
  }
  if (send == recv) out = m->tmp;
  g->buf[c->rank] = send;
  DSP_TRY(meet(c));
  if (s == DSP_OK && count) {
    if (dt == DSP_F32 && op == DSP_REDUCE_SUM) sum_tree(g->buf, c->size, count, out);
    else if (dt == DSP_F32) reduce_float(g->buf, c->size, count, op, out);
    else if (dt == DSP_I32) reduce_int32_t(g->buf, c->size, count, op, out);
    else reduce_int64_t(g->buf, c->size, count, op, out);
  }
  DSP_TRY(meet(c));
  if (s == DSP_OK && send == recv && count) memcpy(recv, out, bytes);
  return s;
}

static dsp_status th_barrier(dsp_comm *c) { return meet(c); }

/* On: wakes the ranks waiting in a collective (the barrier's count is void
 * until it is cleared). Off: a fresh barrier, when no rank is inside one. */
static void th_poison(dsp_comm *c, int on) {
  th_group *g = impl_of(c)->g;
  if (on) {
    atomic_store(&g->failed, 1);
    dsp_event_bump(&g->bar.ev);
  } else {
    atomic_store(&g->bar.arrived, 0);
    atomic_store(&g->failed, 0);
  }
}

__attribute__((noreturn)) static void th_abort(dsp_comm *c, int code) {
  (void)c; /* the ranks are this process */
  exit(code);
}

static void group_release(th_group *g) {
  if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
  dsp_barrier_destroy(&g->bar);
  free(g->buf);
  free(g);
}

static void th_free(dsp_comm *c) {
  th_impl *m = impl_of(c);
  if (m) {
    group_release(m->g);
    free(m->tmp);
    free(m);
  }
  free(c);
}

static const struct dsp_comm_ops th_ops = {
    .allgather = th_allgather,
    .bcast = th_bcast,
    .allreduce = th_allreduce,
    .barrier = th_barrier,
    .abort = th_abort,
    .free = th_free,
    .set_stream = NULL,
    .poison = th_poison,
};

dsp_status dsp_comm_threads_create_group(int n, dsp_comm **out) {
  if (!out || n < 1) return dsp_fail(DSP_ERR_ARG, "comm threads: need 1 or more ranks and an output array");
  for (int i = 0; i < n; i++) out[i] = NULL;
  th_group *g = calloc(1, sizeof *g);
  const void **buf = calloc((size_t)n, sizeof *buf);
  if (!g || !buf) {
    free(g);
    free(buf);
    return dsp_fail(DSP_ERR_NOMEM, "comm threads: out of memory for %d ranks", n);
  }
  g->n = n;
  g->buf = buf;
  dsp_barrier_init(&g->bar, n);
  atomic_init(&g->refs, 0);
  atomic_init(&g->failed, 0);
  for (int i = 0; i < n; i++) {
    dsp_comm *c = calloc(1, sizeof *c);
    th_impl *m = calloc(1, sizeof *m);
    if (!c || !m) {
      free(c);
      free(m);
      for (int j = 0; j < i; j++) dsp_comm_free(out[j]), out[j] = NULL;
      if (i == 0) group_release((atomic_fetch_add(&g->refs, 1), g));
      return dsp_fail(DSP_ERR_NOMEM, "comm threads: out of memory for %d ranks", n);
    }
    m->g = g;
    atomic_fetch_add(&g->refs, 1);
    *c = (dsp_comm){.ops = &th_ops, .rank = i, .size = n, .kind = "threads", .impl = m};
    out[i] = c;
  }
  return DSP_OK;
}
