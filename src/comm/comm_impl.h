/* The communicator's insides, shared by the backends (comm_self.c, comm_mpi.c,
 * cuda/comm_nccl.c) and the dispatch in comm.c. Users see only comm.h.
 *
 * A backend fills a struct dsp_comm (ops, rank, size, kind; impl for its own
 * state) and returns it from its _create. The dispatch has already checked the
 * arguments before an op runs: c != NULL, buffers non-NULL when there are bytes
 * to move, 0 <= root < size, dt in {F32, I32, I64}, op in {SUM, MAX}, and
 * size * bytes fits in size_t. An op records failures with dsp_fail
 * (DSP_ERR_COMM, with file:line and the engine's own error text). */
#ifndef DSP_COMM_COMM_IMPL_H
#define DSP_COMM_COMM_IMPL_H
#include <stddef.h>

#include "comm/comm.h"

struct dsp_comm_ops {
  /* In place when send == (char *)recv + rank * bytes. */
  dsp_status (*allgather)(dsp_comm *c, const void *send, void *recv, size_t bytes);
  dsp_status (*bcast)(dsp_comm *c, void *buf, size_t bytes, int root);
  /* In place when send == recv. */
  dsp_status (*allreduce)(dsp_comm *c, const void *send, void *recv, size_t count, dsp_dtype dt,
                          dsp_reduce_op op);
  dsp_status (*barrier)(dsp_comm *c);
  /* Must not return: ends every rank with `code`. */
  void (*abort)(dsp_comm *c, int code) __attribute__((noreturn));
  /* Releases the backend's state, c->host when the backend owns it, and c. */
  void (*free)(dsp_comm *c);
  /* NULL for host backends (dsp_comm_set_stream then says unsupported). */
  dsp_status (*set_stream)(dsp_comm *c, void *stream);
  /* NULL where a rank that fails alone ends its process (MPI, NCCL: the launcher ends the others) */
  void (*poison)(dsp_comm *c, int on);
  /* NULL where collectives allocate nothing (dsp_comm_reserve) */
  dsp_status (*reserve)(dsp_comm *c, size_t count);
};

struct dsp_comm {
  const struct dsp_comm_ops *ops;
  int rank, size;
  const char *kind;   /* static string: "self", "mpi", "nccl" */
  void *stream;       /* device backends: the stream collectives go on */
  /* A communicator over the same ranks that takes host buffers, for the
   * control plane (dsp_comm_agree). NULL: this one does (self, MPI). A device
   * backend (NCCL) sets it to the MPI communicator it bootstrapped from. */
  dsp_comm *host;
  void *impl;         /* the backend's own state */
};

/* The communicator that takes host buffers for c's ranks (c itself or c->host). */
static inline dsp_comm *dsp_comm_host_of(dsp_comm *c) { return c->host ? c->host : c; }

/* MPI backend, for tests: the most elements (bytes for allgather/bcast) one MPI
 * call is given before the backend splits a transfer (chunks for bcast and
 * allreduce, a derived datatype for allgather). Default INT_MAX; 1 <= n <= INT_MAX. */
dsp_status dsp_comm_mpi_set_max_count(dsp_comm *c, size_t n);

#endif
