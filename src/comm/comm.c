/* Backend-neutral side of the communicator: argument checks, dispatch through
 * the ops table, and dsp_comm_agree (built from allreduce + bcast, so it works
 * on any backend that has a host communicator). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/status.h"

int dsp_comm_rank(const dsp_comm *c) {
  DSP_ASSERT(c);
  return c->rank;
}

int dsp_comm_size(const dsp_comm *c) {
  DSP_ASSERT(c);
  return c->size;
}

const char *dsp_comm_kind(const dsp_comm *c) {
  DSP_ASSERT(c);
  return c->kind;
}

dsp_status dsp_comm_allgather(dsp_comm *c, const void *send, void *recv, size_t bytes) {
  if (!c) return dsp_fail(DSP_ERR_ARG, "comm allgather: no communicator");
  if (bytes > SIZE_MAX / (size_t)c->size)
    return dsp_fail(DSP_ERR_ARG, "comm allgather: %zu bytes x %d ranks overflows size_t", bytes, c->size);
  if (bytes && (!send || !recv))
    return dsp_fail(DSP_ERR_ARG, "comm allgather: NULL buffer for %zu bytes", bytes);
  return c->ops->allgather(c, send, recv, bytes);
}

dsp_status dsp_comm_bcast(dsp_comm *c, void *buf, size_t bytes, int root) {
  if (!c) return dsp_fail(DSP_ERR_ARG, "comm bcast: no communicator");
  if (root < 0 || root >= c->size)
    return dsp_fail(DSP_ERR_ARG, "comm bcast: root %d outside 0..%d", root, c->size - 1);
  if (bytes && !buf) return dsp_fail(DSP_ERR_ARG, "comm bcast: NULL buffer for %zu bytes", bytes);
  return c->ops->bcast(c, buf, bytes, root);
}

dsp_status dsp_comm_allreduce(dsp_comm *c, const void *send, void *recv, size_t count, dsp_dtype dt,
                              dsp_reduce_op op) {
  if (!c) return dsp_fail(DSP_ERR_ARG, "comm allreduce: no communicator");
  if (dt != DSP_F32 && dt != DSP_I32 && dt != DSP_I64)
    return dsp_fail(DSP_ERR_DTYPE, "comm allreduce: dtype %s (want F32, I32 or I64)", dsp_dtype_name(dt));
  if (op != DSP_REDUCE_SUM && op != DSP_REDUCE_MAX)
    return dsp_fail(DSP_ERR_ARG, "comm allreduce: unknown reduction %d", (int)op);
  if (count && (!send || !recv))
    return dsp_fail(DSP_ERR_ARG, "comm allreduce: NULL buffer for %zu elements", count);
  if (count > SIZE_MAX / dsp_dtype_size(dt))
    return dsp_fail(DSP_ERR_ARG, "comm allreduce: %zu elements overflow size_t", count);
  return c->ops->allreduce(c, send, recv, count, dt, op);
}

dsp_status dsp_comm_barrier(dsp_comm *c) {
  if (!c) return dsp_fail(DSP_ERR_ARG, "comm barrier: no communicator");
  return c->ops->barrier(c);
}

void dsp_comm_abort(dsp_comm *c, int code) {
  if (c) c->ops->abort(c, code);
  exit(code);
}

void dsp_comm_free(dsp_comm *c) {
  if (c) c->ops->free(c);
}

dsp_status dsp_comm_set_stream(dsp_comm *c, void *stream) {
  if (!c) return dsp_fail(DSP_ERR_ARG, "comm set_stream: no communicator");
  if (!c->ops->set_stream)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "comm set_stream: the %s communicator runs on the host; streams are for nccl",
                    c->kind);
  return c->ops->set_stream(c, stream);
}

dsp_status dsp_comm_reserve(dsp_comm *c, size_t count) {
  if (!c) return dsp_fail(DSP_ERR_ARG, "comm reserve: no communicator");
  return c->ops->reserve ? c->ops->reserve(c, count) : DSP_OK;
}

void dsp_comm_poison(dsp_comm *c, int on) {
  if (c && c->ops->poison) c->ops->poison(c, on);
}

/* What the first failing rank tells the others. Sized like the thread's
 * message buffer in core/status.c, so a message is never cut shorter here. */
typedef struct {
  int32_t status;
  char msg[1024];
} agree_note;

dsp_status dsp_comm_agree(dsp_comm *c, dsp_status local) {
  if (!c) return dsp_fail(DSP_ERR_ARG, "comm agree: no communicator");
  dsp_comm *h = dsp_comm_host_of(c);
  agree_note note;
  memset(&note, 0, sizeof note);
  note.status = (int32_t)local;
  if (local != DSP_OK) {
    const char *m = dsp_error_message();
    /* An empty message still names the failure. */
    snprintf(note.msg, sizeof note.msg, "%s", m[0] ? m : dsp_status_name(local));
  }

  /* MAX over (size - rank) of the failing ranks picks the lowest failing rank;
   * 0 means nobody failed. */
  int32_t key = local != DSP_OK ? (int32_t)(h->size - h->rank) : 0;
  dsp_status s = dsp_comm_allreduce(h, &key, &key, 1, DSP_I32, DSP_REDUCE_MAX);
  if (s != DSP_OK) return s;
  if (key == 0) return DSP_OK;
  int first = h->size - key;
  DSP_ASSERT(first >= 0 && first < h->size);

  s = dsp_comm_bcast(h, &note, sizeof note, first);
  if (s != DSP_OK) return s;
  note.msg[sizeof note.msg - 1] = 0; /* never trust a peer's terminator */
  DSP_ASSERT(note.status != DSP_OK);
  /* named once: alone there is no rank to name, and an agreed message already names it */
  int r, used = 0;
  if (h->size == 1 || (sscanf(note.msg, "rank %d:%n", &r, &used) == 1 && used > 0))
    return dsp_fail((dsp_status)note.status, "%s", note.msg);
  return dsp_fail((dsp_status)note.status, "rank %d: %s", first, note.msg);
}
