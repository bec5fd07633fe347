/* The one-rank communicator: every collective is a copy (memmove, since in
 * place is allowed), the barrier does nothing, abort is exit. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/status.h"

static dsp_status self_allgather(dsp_comm *c, const void *send, void *recv, size_t bytes) {
  (void)c;
  if (bytes && send != recv) memmove(recv, send, bytes);
  return DSP_OK;
}

static dsp_status self_bcast(dsp_comm *c, void *buf, size_t bytes, int root) {
  (void)c, (void)buf, (void)bytes, (void)root;
  return DSP_OK;
}

static dsp_status self_allreduce(dsp_comm *c, const void *send, void *recv, size_t count, dsp_dtype dt,
                                 dsp_reduce_op op) {
  (void)c, (void)op; /* the sum or max of one value is that value */
  size_t bytes = count * dsp_dtype_size(dt);
  if (bytes && send != recv) memmove(recv, send, bytes);
  return DSP_OK;
}

static dsp_status self_barrier(dsp_comm *c) {
  (void)c;
  return DSP_OK;
}

__attribute__((noreturn)) static void self_abort(dsp_comm *c, int code) {
  (void)c;
  exit(code);
}

static void self_free(dsp_comm *c) { free(c); }

static const struct dsp_comm_ops self_ops = {
    .allgather = self_allgather,
    .bcast = self_bcast,
    .allreduce = self_allreduce,
    .barrier = self_barrier,
    .abort = self_abort,
    .free = self_free,
    .set_stream = NULL,
};

dsp_status dsp_comm_self_create(dsp_comm **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "comm self: NULL output handle");
  *out = NULL;
  dsp_comm *c = calloc(1, sizeof *c);
  if (!c) return dsp_fail(DSP_ERR_NOMEM, "comm self: cannot allocate the communicator");
  c->ops = &self_ops;
  c->rank = 0;
  c->size = 1;
  c->kind = "self";
  *out = c;
  return DSP_OK;
}
