/* The NCCL communicator (src/comm/comm_impl.h): collectives on device buffers,
 * enqueued on the stream set with dsp_comm_set_stream, so a CUDA graph can
 * capture them. Host buffers also work (staged through a device scratch
 * buffer and synchronised), for the control plane: dsp_comm_agree and
 * barriers. Two ways in: one process per GPU bootstrapped over MPI, or one
 * process driving several GPUs (ncclCommInitAll, a thread per rank). F32 sums
 * over 3 or more ranks go by the halving tree over ranks (ordered_sum), as on the host engines. */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/status.h"
#include "kernels/cuda/common/check.h"
#include "kernels/cuda/common/device.h"
#include "kernels/cuda/rank_sum.h"

typedef struct {
  ncclComm_t nc;
  int device;
  void *scratch; /* device staging for host buffers */
  size_t scratch_bytes;
  void *oscratch; /* a rank-order sum's: the ranks' chunks, then the chunks' sums */
  size_t oscratch_bytes;
} nccl_impl;

static nccl_impl *impl_of(dsp_comm *c) { return (nccl_impl *)c->impl; }

static int on_device(const void *p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* A device buffer *p of *have bytes grown to at least `bytes`. */
static dsp_status grow(void **p, size_t *have, size_t bytes) {
  if (*have >= bytes) return DSP_OK;
  if (*p) DSP_CUDA_TRY(cudaFree(*p));
  *p = NULL;
  *have = 0;
  DSP_CUDA_TRY(cudaMalloc(p, bytes));
  *have = bytes;
  return DSP_OK;
}

static dsp_status scratch_for(dsp_comm *c, size_t bytes) {
  nccl_impl *m = impl_of(c);
  return grow(&m->scratch, &m->scratch_bytes, bytes);
}

static dsp_status nccl_allgather(dsp_comm *c, const void *send, void *recv, size_t bytes) {
  nccl_impl *m = impl_of(c);
  cudaStream_t s = (cudaStream_t)c->stream;
  DSP_CUDA_TRY(cudaSetDevice(m->device));
  if (bytes == 0) return DSP_OK;
  if (on_device(recv) && on_device(send)) {
    DSP_NCCL_TRY(ncclAllGather(send, recv, bytes, ncclUint8, m->nc, s));
    return DSP_OK;
  }
  size_t total = bytes * (size_t)c->size;
  DSP_TRY(scratch_for(c, total));
  char *sc = (char *)m->scratch;
  DSP_CUDA_TRY(cudaMemcpyAsync(sc + (size_t)c->rank * bytes, send, bytes, cudaMemcpyDefault, s));
  DSP_NCCL_TRY(ncclAllGather(sc + (size_t)c->rank * bytes, sc, bytes, ncclUint8, m->nc, s));
  DSP_CUDA_TRY(cudaMemcpyAsync(recv, sc, total, cudaMemcpyDefault, s));
  DSP_CUDA_TRY(cudaStreamSynchronize(s));
  return DSP_OK;
}

static dsp_status nccl_bcast(dsp_comm *c, void *buf, size_t bytes, int root) {
  nccl_impl *m = impl_of(c);
  cudaStream_t s = (cudaStream_t)c->stream;
  DSP_CUDA_TRY(cudaSetDevice(m->device));
  if (bytes == 0) return DSP_OK;
  if (on_device(buf)) {
    DSP_NCCL_TRY(ncclBroadcast(buf, buf, bytes, ncclUint8, root, m->nc, s));
    return DSP_OK;
  }
  DSP_TRY(scratch_for(c, bytes));
  DSP_CUDA_TRY(cudaMemcpyAsync(m->scratch, buf, bytes, cudaMemcpyDefault, s));
  DSP_NCCL_TRY(ncclBroadcast(m->scratch, m->scratch, bytes, ncclUint8, root, m->nc, s));
  DSP_CUDA_TRY(cudaMemcpyAsync(buf, m->scratch, bytes, cudaMemcpyDefault, s));
  DSP_CUDA_TRY(cudaStreamSynchronize(s));
  return DSP_OK;
}

/* A rank-order sum's scratch for count elements over P ranks: P chunks of ceil(count / P) floats received,
 * then as many of the chunks' sums. */
static size_t ordered_bytes(int P, size_t count) { return 2 * (size_t)P * ((count + (size_t)P - 1) / (size_t)P) * 4; }

static dsp_status oscratch_for(dsp_comm *c, size_t bytes) {
  nccl_impl *m = impl_of(c);
  if (m->oscratch_bytes >= bytes) return DSP_OK;
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (c->stream && cudaStreamIsCapturing((cudaStream_t)c->stream, &cs) == cudaSuccess &&
      cs != cudaStreamCaptureStatusNone)
    return dsp_fail(DSP_ERR_ARG, "comm nccl: a rank-order sum of %zu bytes inside a graph capture needs "
                    "dsp_comm_reserve before it (%zu reserved)", bytes, m->oscratch_bytes);
  return grow(&m->oscratch, &m->oscratch_bytes, bytes);
}

static dsp_status nccl_reserve(dsp_comm *c, size_t count) {
  if (c->size < 3) return DSP_OK;
  DSP_CUDA_TRY(cudaSetDevice(impl_of(c)->device));
  return oscratch_for(c, ordered_bytes(c->size, count));
}

/* recv = the F32 sum of every rank's send by the halving tree over ranks (core/tree_sum.h), as the host engines take it
 * (NCCL's own reduction associates by message size, so a row's sum would depend on the rows beside it).
 * Bandwidth as a ring all-reduce: each rank receives its chunk from every rank (send/recv), sums it in
 * that order, and the sums are all-gathered. Device buffers, on the comm's stream; in place allowed. */
static dsp_status ordered_sum(dsp_comm *c, const float *send, float *recv, size_t count) {
  nccl_impl *m = impl_of(c);
  cudaStream_t s = (cudaStream_t)c->stream;
  const int P = c->size, me = c->rank;
  const size_t ch = (count + (size_t)P - 1) / (size_t)P, my0 = (size_t)me * ch;
  const size_t mylen = my0 < count ? (count - my0 < ch ? count - my0 : ch) : 0;
  DSP_TRY(oscratch_for(c, ordered_bytes(P, count)));
  float *parts = (float *)m->oscratch, *sums = parts + (size_t)P * ch;
  ncclResult_t r = ncclGroupStart();
  for (int q = 0; r == ncclSuccess && q < P; q++) {
    if (q == me) continue;
    const size_t q0 = (size_t)q * ch, qlen = q0 < count ? (count - q0 < ch ? count - q0 : ch) : 0;
    if (qlen) r = ncclSend(send + q0, qlen, ncclFloat32, q, m->nc, s);
    if (r == ncclSuccess && mylen) r = ncclRecv(parts + (size_t)q * ch, mylen, ncclFloat32, q, m->nc, s);
  }
  const ncclResult_t e = ncclGroupEnd();
  if (r != ncclSuccess || e != ncclSuccess)
    return dsp_fail(DSP_ERR_COMM, "%s:%d: the ordered sum's exchange: %s", __FILE__, __LINE__,
                    ncclGetErrorString(r != ncclSuccess ? r : e));
  if (mylen) {
    DSP_CUDA_TRY(cudaMemcpyAsync(parts + (size_t)me * ch, send + my0, mylen * 4, cudaMemcpyDeviceToDevice, s));
    DSP_CUDA_TRY(dsp_cuda_rank_sum(parts, P, (int64_t)ch, (int64_t)mylen, sums + (size_t)me * ch, s));
  }
  DSP_NCCL_TRY(ncclAllGather(sums + (size_t)me * ch, sums, ch, ncclFloat32, m->nc, s));
  DSP_CUDA_TRY(cudaMemcpyAsync(recv, sums, count * 4, cudaMemcpyDeviceToDevice, s));
  return DSP_OK;
}

static dsp_status nccl_allreduce(dsp_comm *c, const void *send, void *recv, size_t count, dsp_dtype dt,
                                 dsp_reduce_op op) {
  nccl_impl *m = impl_of(c);
  cudaStream_t s = (cudaStream_t)c->stream;
  ncclDataType_t t = dt == DSP_F32 ? ncclFloat32 : dt == DSP_I32 ? ncclInt32 : ncclInt64;
  ncclRedOp_t o = op == DSP_REDUCE_MAX ? ncclMax : ncclSum;
  size_t bytes = count * dsp_dtype_size(dt);
  DSP_CUDA_TRY(cudaSetDevice(m->device));
  if (count == 0) return DSP_OK;
  const int ordered = dt == DSP_F32 && op == DSP_REDUCE_SUM && c->size > 2;
  if (on_device(send) && on_device(recv)) {
    if (ordered) return ordered_sum(c, send, recv, count);
    DSP_NCCL_TRY(ncclAllReduce(send, recv, count, t, o, m->nc, s));
    return DSP_OK;
  }
  DSP_TRY(scratch_for(c, bytes));
  DSP_CUDA_TRY(cudaMemcpyAsync(m->scratch, send, bytes, cudaMemcpyDefault, s));
  if (ordered) DSP_TRY(ordered_sum(c, m->scratch, m->scratch, count));
  else DSP_NCCL_TRY(ncclAllReduce(m->scratch, m->scratch, count, t, o, m->nc, s));
  DSP_CUDA_TRY(cudaMemcpyAsync(recv, m->scratch, bytes, cudaMemcpyDefault, s));
  DSP_CUDA_TRY(cudaStreamSynchronize(s));
  return DSP_OK;
}

static dsp_status nccl_barrier(dsp_comm *c) {
  int32_t x = 0;
  DSP_TRY(nccl_allreduce(c, &x, &x, 1, DSP_I32, DSP_REDUCE_SUM));
  return DSP_OK;
}

__attribute__((noreturn)) static void nccl_abort(dsp_comm *c, int code) {
  nccl_impl *m = impl_of(c);
  if (m && m->nc) ncclCommAbort(m->nc);
  if (c->host) dsp_comm_abort(c->host, code);
  exit(code);
}

static void nccl_free(dsp_comm *c) {
  nccl_impl *m = impl_of(c);
  if (m) {
    cudaSetDevice(m->device);
    if (m->nc) ncclCommDestroy(m->nc);
    if (m->scratch) cudaFree(m->scratch);
    if (m->oscratch) cudaFree(m->oscratch);
    free(m);
  }
  free(c);
}

static dsp_status nccl_set_stream(dsp_comm *c, void *stream) {
  c->stream = stream;
  return DSP_OK;
}

static const struct dsp_comm_ops nccl_ops = {
    .allgather = nccl_allgather,
    .bcast = nccl_bcast,
    .allreduce = nccl_allreduce,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
    .free = nccl_free,
    .set_stream = nccl_set_stream,
    .poison = NULL,
    .reserve = nccl_reserve,
};

static dsp_status wrap(ncclComm_t nc, int device, int rank, int size, dsp_comm *host, dsp_comm **out) {
  dsp_comm *c = calloc(1, sizeof *c);
  nccl_impl *m = calloc(1, sizeof *m);
  if (!c || !m) {
    free(c);
    free(m);
    ncclCommDestroy(nc);
    return dsp_fail(DSP_ERR_NOMEM, "comm nccl: cannot allocate the communicator");
  }
  m->nc = nc;
  m->device = device;
  c->ops = &nccl_ops;
  c->rank = rank;
  c->size = size;
  c->kind = "nccl";
  c->host = host;
  c->impl = m;
  *out = c;
  return DSP_OK;
}

static dsp_status check_device(int device) {
  int n = dsp_cuda_device_count();
  if (n == 0) return dsp_fail(DSP_ERR_DEVICE, "comm nccl: no CUDA device");
  if (device < 0 || device >= n)
    return dsp_fail(DSP_ERR_DEVICE, "comm nccl: device %d outside the %d visible CUDA devices", device, n);
  return DSP_OK;
}

dsp_status dsp_comm_nccl_create(dsp_comm *mpi, int device, dsp_comm **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "comm nccl: NULL output handle");
  *out = NULL;
  if (!mpi) return dsp_fail(DSP_ERR_ARG, "comm nccl: no MPI communicator to bootstrap from");
  dsp_comm *host = dsp_comm_host_of(mpi);
  /* every rank learns whether every device is usable before anyone blocks in NCCL */
  DSP_TRY(dsp_comm_agree(host, check_device(device)));
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  dsp_status s = DSP_OK;
  if (host->rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      s = dsp_fail(DSP_ERR_COMM, "%s:%d: ncclGetUniqueId: %s", __FILE__, __LINE__, ncclGetErrorString(r));
  }
  DSP_TRY(dsp_comm_agree(host, s));
  DSP_TRY(dsp_comm_bcast(host, &id, sizeof id, 0));
  DSP_CUDA_TRY(cudaSetDevice(device));
  ncclComm_t nc = NULL;
  ncclResult_t r = ncclCommInitRank(&nc, host->size, id, host->rank);
  s = r == ncclSuccess ? DSP_OK
                       : dsp_fail(DSP_ERR_COMM, "%s:%d: ncclCommInitRank (rank %d of %d): %s", __FILE__, __LINE__,
                                  host->rank, host->size, ncclGetErrorString(r));
  s = dsp_comm_agree(host, s);
  if (s != DSP_OK) {
    if (nc) ncclCommDestroy(nc);
    return s;
  }
  return wrap(nc, device, host->rank, host->size, host, out);
}

dsp_status dsp_comm_nccl_create_group(int ngpus, const int *devices, dsp_comm **out_array) {
  if (!out_array || !devices || ngpus < 1)
    return dsp_fail(DSP_ERR_ARG, "comm nccl group: need 1 or more devices and an output array");
  for (int i = 0; i < ngpus; i++) {
    out_array[i] = NULL;
    DSP_TRY(check_device(devices[i]));
  }
  ncclComm_t *nc = calloc((size_t)ngpus, sizeof *nc);
  if (!nc) return dsp_fail(DSP_ERR_NOMEM, "comm nccl group: out of memory");
  ncclResult_t r = ncclCommInitAll(nc, ngpus, devices);
  if (r != ncclSuccess) {
    free(nc);
    return dsp_fail(DSP_ERR_COMM, "%s:%d: ncclCommInitAll (%d devices): %s", __FILE__, __LINE__, ngpus,
                    ncclGetErrorString(r));
  }
  dsp_status s = DSP_OK;
  for (int i = 0; i < ngpus; i++) {
    if (s == DSP_OK) {
      s = wrap(nc[i], devices[i], i, ngpus, NULL, &out_array[i]);
    } else {
      ncclCommDestroy(nc[i]);
    }
  }
  if (s != DSP_OK)
    for (int i = 0; i < ngpus; i++) {
      dsp_comm_free(out_array[i]);
      out_array[i] = NULL;
    }
  free(nc);
  return s;
}
