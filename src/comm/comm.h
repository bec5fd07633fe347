/* The communicator: one interface, several backends (self, MPI, NCCL).
 * Host backends (self, MPI) take host buffers; NCCL takes device buffers and
 * enqueues on the stream set with dsp_comm_set_stream (so collectives can be
 * captured in CUDA graphs). Ranks are numbered 0..size-1; gathers are in rank order.
 *
 * Collectives are called by every rank, in the same order, with the same sizes.
 * Zero bytes / zero elements are allowed (buffers may then be NULL). Counts
 * above INT_MAX work on MPI (split internally). Failures are DSP_ERR_COMM with
 * file:line and the engine's message; bad arguments are DSP_ERR_ARG/DSP_ERR_DTYPE.
 *
 * Failing together, never hanging: a rank that fails alone must not leave the
 * others waiting in a collective. Callers therefore
 *   - call dsp_comm_agree(c, s) at every point where ranks can diverge (file
 *     reads, allocation, input checks), so all ranks return the same error, and
 *   - for an error that cannot be agreed on, end with dsp_comm_abort, or simply
 *     exit non-zero: under mpirun (Open MPI 4.1, checked by the test
 *     test_comm_rank_exit) a rank that exits without MPI_Finalize makes mpirun
 *     kill the other ranks and exit non-zero within seconds. */
#ifndef DSP_COMM_COMM_H
#define DSP_COMM_COMM_H
#include <stddef.h>

#include "dspark.h"

typedef enum { DSP_REDUCE_SUM = 0, DSP_REDUCE_MAX } dsp_reduce_op;
typedef struct dsp_comm dsp_comm;

/* One rank: collectives are copies, the barrier does nothing, abort exits. */
dsp_status dsp_comm_self_create(dsp_comm **out);
/* MPI_COMM_WORLD; initialises MPI when nobody has (and finalises it at free). */
dsp_status dsp_comm_mpi_create(dsp_comm **out);

int dsp_comm_rank(const dsp_comm *c);
int dsp_comm_size(const dsp_comm *c);
const char *dsp_comm_kind(const dsp_comm *c); /* "self", "mpi", "nccl" */

/* recv holds size * bytes: rank r's `bytes` at offset r * bytes. In place when
 * send == recv + rank * bytes; other overlaps are not allowed. */
dsp_status dsp_comm_allgather(dsp_comm *c, const void *send, void *recv, size_t bytes);
dsp_status dsp_comm_bcast(dsp_comm *c, void *buf, size_t bytes, int root);
/* send == recv is allowed (in place). dt: DSP_F32, DSP_I32, DSP_I64. Every rank
 * gets the same result; an F32 SUM's rounding order is the engine's (exact
 * when the sum is exact), so results that must be bit-fixed use MAX or integers. */
dsp_status dsp_comm_allreduce(dsp_comm *c, const void *send, void *recv, size_t count, dsp_dtype dt,
                              dsp_reduce_op op);
dsp_status dsp_comm_barrier(dsp_comm *c);
/* Every rank passes its own status; every rank gets the worst (the first
 * non-OK by rank order), and on failure a message naming the failing rank and
 * its reason. Call at the points where a rank may fail alone (file reads).
 * Precisely: when all pass DSP_OK, returns DSP_OK and leaves the message
 * alone; otherwise, with R the lowest rank that failed, every rank (R too)
 * returns R's status with the message "rank R: <R's dsp_error_message()>".
 * A collective failure inside returns DSP_ERR_COMM. */
dsp_status dsp_comm_agree(dsp_comm *c, dsp_status local);
/* Ends every rank with exit code `code` (for errors that cannot be agreed on):
 * MPI_Abort on MPI, exit on self. c may be NULL (then exit). */
void dsp_comm_abort(dsp_comm *c, int code) __attribute__((noreturn));
/* NULL is fine. MPI: finalises MPI with the last communicator if we started it. */
void dsp_comm_free(dsp_comm *c);
/* NCCL only: the cudaStream_t collectives are enqueued on. Host backends:
 * DSP_ERR_UNSUPPORTED. */
dsp_status dsp_comm_set_stream(dsp_comm *c, void *stream);

#endif
