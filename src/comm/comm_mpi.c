/* The MPI communicator: a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN,
 * so a failing call comes back to us and becomes DSP_ERR_COMM with file, line
 * and MPI's own words. MPI counts are ints; transfers above max_count (INT_MAX
 * unless a test lowers it) are split: allgather through one derived datatype
 * (rank order in recv must hold, so no chunking there), bcast and allreduce in
 * chunks (both are element-wise); F32 sums over 3 or more ranks go by the
 * halving tree over ranks (core/tree_sum.h) through an all-to-all and an
 * all-gather (mpi_sum_ordered). Calls come
 * from one thread (FUNNELED). */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/status.h"
#include "core/tree_sum.h"

typedef struct {
  MPI_Comm comm;
  size_t max_count;
} mpi_impl;

/* MPI is process-wide: we finalise it only if we started it, and only when
 * the last communicator we handed out is freed. */
static int g_we_init;
static int g_live;

static dsp_status mpi_fail(int rc, const char *call, const char *file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, text, &n) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error code %d", rc);
  int name = (int)strcspn(call, "("); /* "MPI_Bcast(buf, ...)" -> "MPI_Bcast" */
  return dsp_fail(DSP_ERR_COMM, "%s:%d: %.*s failed: %s", file, line, name, call, text);
}

#define MPI_TRY(call)                                                \
  do {                                                               \
    int mpi_rc_ = (call);                                            \
    if (mpi_rc_ != MPI_SUCCESS) return mpi_fail(mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)

static MPI_Comm comm_of(const dsp_comm *c) { return ((const mpi_impl *)c->impl)->comm; }
static size_t max_of(const dsp_comm *c) { return ((const mpi_impl *)c->impl)->max_count; }

/* One datatype of exactly `bytes` bytes (extent == bytes) built from
 * max-byte blocks and a remainder, so a count of 1 moves it all. */
static dsp_status bytes_type(size_t bytes, size_t max, MPI_Datatype *out) {
  size_t q = bytes / max, r = bytes % max;
  if (q > INT_MAX || bytes > (size_t)PTRDIFF_MAX)
    return dsp_fail(DSP_ERR_ARG, "comm mpi: %zu bytes per rank is beyond what MPI counts can describe", bytes);
  MPI_Datatype block, rest, t;
  MPI_TRY(MPI_Type_contiguous((int)max, MPI_BYTE, &block));
  int rc;
  const char *what = "MPI_Type_contiguous";
  if (r == 0) {
    rc = MPI_Type_contiguous((int)q, block, &t);
  } else {
    rc = MPI_Type_contiguous((int)r, MPI_BYTE, &rest);
    if (rc != MPI_SUCCESS) {
      MPI_Type_free(&block);
      return mpi_fail(rc, "MPI_Type_contiguous", __FILE__, __LINE__);
    }
    int lens[2] = {(int)q, 1};
    MPI_Aint disp[2] = {0, (MPI_Aint)(q * max)};
    MPI_Datatype types[2] = {block, rest};
    what = "MPI_Type_create_struct";
    rc = MPI_Type_create_struct(2, lens, disp, types, &t);
    MPI_Type_free(&rest); /* t keeps what it needs */
  }
  MPI_Type_free(&block);
  if (rc != MPI_SUCCESS) return mpi_fail(rc, what, __FILE__, __LINE__);
  rc = MPI_Type_commit(&t);
  if (rc != MPI_SUCCESS) {
    MPI_Type_free(&t);
    return mpi_fail(rc, "MPI_Type_commit", __FILE__, __LINE__);
  }
  *out = t;
  return DSP_OK;
}

static dsp_status mpi_allgather(dsp_comm *c, const void *send, void *recv, size_t bytes) {
  MPI_Comm comm = comm_of(c);
  const void *sbuf = send;
  if (bytes && send == (const char *)recv + (size_t)c->rank * bytes) sbuf = MPI_IN_PLACE;
  if (bytes <= max_of(c)) {
    MPI_TRY(MPI_Allgather(sbuf, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm));
    return DSP_OK;
  }
  MPI_Datatype t;
  DSP_TRY(bytes_type(bytes, max_of(c), &t));
  int rc = MPI_Allgather(sbuf, 1, t, recv, 1, t, comm);
  MPI_Type_free(&t);
  if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Allgather", __FILE__, __LINE__);
  return DSP_OK;
}

static dsp_status mpi_bcast(dsp_comm *c, void *buf, size_t bytes, int root) {
  MPI_Comm comm = comm_of(c);
  size_t max = max_of(c);
  for (size_t off = 0; off < bytes; off += max) {
    size_t n = bytes - off < max ? bytes - off : max;
    MPI_TRY(MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, comm));
  }
  return DSP_OK;
}

/* An F32 sum over 3 or more ranks by the halving tree: MPI's own reductions pick
 * their association by message size and rank count, so the same row could
 * round differently in a prefill and in a decode step. Per segment of at most
 * P x max_count elements: each rank receives its chunk of every rank's values
 * (MPI_Alltoall), adds them by the tree ((x0 + x1) + (x2 + x3) for four), and the sums are
 * all-gathered; a ring all-reduce's traffic. Two ranks need none of this:
 * x0 + x1 is x1 + x0. */
static dsp_status mpi_sum_ordered(dsp_comm *c, const float *send, float *recv, size_t count) {
  const size_t P = (size_t)c->size, me = (size_t)c->rank, max = max_of(c);
  const size_t seg = P * max < count ? P * max : count; /* elements per segment */
  const size_t ch_max = (seg + P - 1) / P;
  float *pad = malloc(P * ch_max * sizeof *pad + 4), *parts = malloc(P * ch_max * sizeof *parts + 4);
  dsp_status s = DSP_OK;
  if (!pad || !parts) s = dsp_fail(DSP_ERR_NOMEM, "comm mpi: no buffer for an ordered sum of %zu floats", count);
  /* the ranks agree before a collective, so one rank's missing buffer cannot strand the others */
  int ok = s == DSP_OK, all_ok = 0;
  int rc = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm_of(c));
  if (rc != MPI_SUCCESS && s == DSP_OK) s = mpi_fail(rc, "MPI_Allreduce(ok)", __FILE__, __LINE__);
  if (s == DSP_OK && !all_ok) s = dsp_fail(DSP_ERR_NOMEM, "comm mpi: a rank had no buffer for an ordered sum");
  for (size_t off = 0; s == DSP_OK && off < count; off += seg) {
    const size_t n = count - off < seg ? count - off : seg, ch = (n + P - 1) / P;
    memcpy(pad, send + off, n * sizeof *pad); /* send may be recv */
    memset(pad + n, 0, (P * ch - n) * sizeof *pad);
    rc = MPI_Alltoall(pad, (int)ch, MPI_FLOAT, parts, (int)ch, MPI_FLOAT, comm_of(c));
    if (rc != MPI_SUCCESS) {
      s = mpi_fail(rc, "MPI_Alltoall(sum)", __FILE__, __LINE__);
      break;
    }
    for (size_t j = 0; j < ch; j++) pad[me * ch + j] = dsp_tree_sum_f32(parts + j, ch, 0, (int)P);
    rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, pad, (int)ch, MPI_FLOAT, comm_of(c));
    if (rc != MPI_SUCCESS) {
      s = mpi_fail(rc, "MPI_Allgather(sum)", __FILE__, __LINE__);
      break;
    }
    memcpy(recv + off, pad, n * sizeof *pad);
  }
  free(pad);
  free(parts);
  return s;
}

static dsp_status mpi_allreduce(dsp_comm *c, const void *send, void *recv, size_t count, dsp_dtype dt,
                                dsp_reduce_op op) {
  if (dt == DSP_F32 && op == DSP_REDUCE_SUM && c->size > 2) return mpi_sum_ordered(c, send, recv, count);
  MPI_Comm comm = comm_of(c);
  MPI_Datatype type = dt == DSP_F32 ? MPI_FLOAT : dt == DSP_I32 ? MPI_INT32_T : MPI_INT64_T;
  MPI_Op mop = op == DSP_REDUCE_SUM ? MPI_SUM : MPI_MAX;
  size_t esize = dsp_dtype_size(dt), max = max_of(c);
  int in_place = send == recv;
  for (size_t off = 0; off < count; off += max) {
    size_t n = count - off < max ? count - off : max;
    const void *s = in_place ? MPI_IN_PLACE : (const char *)send + off * esize;
    MPI_TRY(MPI_Allreduce(s, (char *)recv + off * esize, (int)n, type, mop, comm));
  }
  return DSP_OK;
}

static dsp_status mpi_barrier(dsp_comm *c) {
  MPI_TRY(MPI_Barrier(comm_of(c)));
  return DSP_OK;
}

__attribute__((noreturn)) static void mpi_abort(dsp_comm *c, int code) {
  MPI_Abort(comm_of(c), code);
  exit(code); /* MPI_Abort is not meant to return; if it does, still end */
}

/* Drops one reference to MPI; finalises when we started it and it was the last. */
static void mpi_release(void) {
  if (--g_live > 0 || !g_we_init) return;
  int done = 0;
  if (MPI_Finalized(&done) == MPI_SUCCESS && !done) {
    int rc = MPI_Finalize();
    if (rc != MPI_SUCCESS) {
      mpi_fail(rc, "MPI_Finalize", __FILE__, __LINE__);
      fprintf(stderr, "dspark: %s\n", dsp_error_message());
    }
  }
}

static void mpi_free(dsp_comm *c) {
  mpi_impl *m = c->impl;
  int done = 0, rc = MPI_Finalized(&done);
  /* After someone else's MPI_Finalize the communicator is already gone. */
  if (rc == MPI_SUCCESS && !done) rc = MPI_Comm_free(&m->comm);
  /* free cannot return a status; say it rather than lose it */
  if (rc != MPI_SUCCESS) {
    mpi_fail(rc, "MPI_Comm_free", __FILE__, __LINE__);
    fprintf(stderr, "dspark: %s\n", dsp_error_message());
  }
  free(m);
  free(c);
  mpi_release();
}

static const struct dsp_comm_ops mpi_ops = {
    .allgather = mpi_allgather,
    .bcast = mpi_bcast,
    .allreduce = mpi_allreduce,
    .barrier = mpi_barrier,
    .abort = mpi_abort,
    .free = mpi_free,
    .set_stream = NULL,
};

static dsp_status mpi_start(void) {
  int inited = 0, finalized = 0;
  MPI_TRY(MPI_Finalized(&finalized));
  if (finalized) return dsp_fail(DSP_ERR_COMM, "comm mpi: MPI was already finalised and cannot start again");
  MPI_TRY(MPI_Initialized(&inited));
  if (inited) return DSP_OK;
  int provided = 0;
  MPI_TRY(MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided));
  g_we_init = 1;
  if (provided < MPI_THREAD_FUNNELED)
    return dsp_fail(DSP_ERR_COMM, "comm mpi: MPI gives thread level %d, below MPI_THREAD_FUNNELED", provided);
  return DSP_OK;
}

static dsp_status mpi_setup(mpi_impl *m, int *rank, int *size) {
  MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &m->comm));
  MPI_TRY(MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN));
  MPI_TRY(MPI_Comm_rank(m->comm, rank));
  MPI_TRY(MPI_Comm_size(m->comm, size));
  return DSP_OK;
}

dsp_status dsp_comm_mpi_create(dsp_comm **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "comm mpi: NULL output handle");
  *out = NULL;
  g_live++; /* held while we set up, so a failure below can finalise what we started */
  dsp_status s = mpi_start();
  dsp_comm *c = NULL;
  mpi_impl *m = NULL;
  if (s == DSP_OK) {
    c = calloc(1, sizeof *c);
    m = calloc(1, sizeof *m);
    if (!c || !m) s = dsp_fail(DSP_ERR_NOMEM, "comm mpi: cannot allocate the communicator");
  }
  if (s == DSP_OK) {
    m->comm = MPI_COMM_NULL;
    s = mpi_setup(m, &c->rank, &c->size);
    if (s != DSP_OK && m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
  }
  if (s != DSP_OK) {
    free(c);
    free(m);
    mpi_release();
    return s;
  }
  m->max_count = INT_MAX;
  c->ops = &mpi_ops;
  c->kind = "mpi";
  c->impl = m;
  *out = c;
  return DSP_OK;
}

dsp_status dsp_comm_mpi_set_max_count(dsp_comm *c, size_t n) {
  if (!c || c->ops != &mpi_ops) return dsp_fail(DSP_ERR_ARG, "comm mpi: set_max_count needs an MPI communicator");
  if (n < 1 || n > INT_MAX) return dsp_fail(DSP_ERR_ARG, "comm mpi: max count %zu outside 1..INT_MAX", n);
  ((mpi_impl *)c->impl)->max_count = n;
  return DSP_OK;
}
