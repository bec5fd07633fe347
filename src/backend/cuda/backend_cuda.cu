/* The CUDA backend: one GPU per process (under mpirun the local rank's GPU,
 * NCCL bootstrapped over MPI when there are several ranks), or several GPUs
 * driven by one process with an NCCL group of its own. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "core/status.h"
}
#include "backend/backend.h"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/markov_cuda.h"
#include "backend/cuda/ops_cuda.h"
#include "kernels/cuda/common/check.h"
#include "kernels/cuda/common/device.h"

static void cuda_free(dsp_backend *be) {
  dsp_cuda_impl *m = (dsp_cuda_impl *)be->impl;
  if (m && m->own_tp)
    for (int i = 0; i < be->ndev; i++) dsp_comm_free(be->tp[i]);
  for (int i = 0; m && i < be->ndev; i++) {
    cudaSetDevice(be->device[i]);
    if (m->stream[i]) cudaStreamDestroy(m->stream[i]);
  }
  cudaGetLastError();
  free(m);
  be->impl = NULL;
}

static const dsp_backend_ops cuda_ops = {
    dsp_cuda_markov_create,    dsp_cuda_markov_propose,  NULL,
    dsp_cuda_markov_detail,    dsp_cuda_markov_last_timing, dsp_cuda_markov_free,
    cuda_free,                 dsp_cuda_op_alloc,        dsp_cuda_op_release,
    dsp_cuda_op_upload,        dsp_cuda_op_download,     dsp_cuda_op_copy,
    dsp_cuda_op_sync,
    dsp_cuda_op_weight_create, dsp_cuda_op_weight_free,  dsp_cuda_op_weight_describe,
    dsp_cuda_op_gemm,          dsp_cuda_op_markov_step,  dsp_cuda_op_embed,
    dsp_cuda_op_rmsnorm,       dsp_cuda_op_rope,         dsp_cuda_op_add,
    dsp_cuda_op_silu_mul,      dsp_cuda_op_scatter_rows, dsp_cuda_op_attention,
    dsp_cuda_op_round_add,     dsp_cuda_op_select,       dsp_cuda_op_gather_rows,
    dsp_cuda_op_host_alloc,    dsp_cuda_op_host_release, dsp_cuda_op_upload_async,
    dsp_cuda_op_download_async, dsp_cuda_op_capture_begin, dsp_cuda_op_capture_end,
    dsp_cuda_op_replay,        dsp_cuda_op_graph_free,
    dsp_cuda_markov_fused_bucket, dsp_cuda_markov_fused_stage, dsp_cuda_markov_fused_enqueue,
    dsp_cuda_markov_fused_collect,
    dsp_cuda_op_kda_workspace, dsp_cuda_op_kda,          dsp_cuda_op_kda_copy,
    dsp_cuda_op_add_rmsnorm,   dsp_cuda_op_attn_in,
    dsp_cuda_op_accept_workspace, dsp_cuda_op_accept, dsp_cuda_markov_logits,
    dsp_cuda_op_allreduce,     NULL,                     dsp_cuda_op_memory_used,
    dsp_cuda_op_weight_slice,
};

extern "C" int dsp_backend_cuda_devices(void) { return dsp_cuda_device_count(); }

extern "C" dsp_status dsp_backend_cuda_init(dsp_backend *be, const dsp_backend_config *cfg) {
  const int visible = dsp_cuda_device_count();
  if (visible < 1) return dsp_fail(DSP_ERR_DEVICE, "backend cuda: no CUDA device is visible to this process");
  dsp_cuda_impl *m = (dsp_cuda_impl *)calloc(1, sizeof *m);
  if (!m) return dsp_fail(DSP_ERR_NOMEM, "backend cuda: out of memory");
  be->impl = m;
  be->ops = &cuda_ops;
  const int procs = dsp_comm_size(be->comm);
  be->ndev = cfg->devices <= 1 ? 1 : cfg->devices;
  if (be->ndev == 1) {
    /* one GPU per process; ranks on a host take devices round-robin */
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    be->device[0] = lr ? atoi(lr) % visible : 0;
    be->tp_size = procs;
    be->tp_rank0 = dsp_comm_rank(be->comm);
    if (procs > 1) {
      DSP_TRY(dsp_comm_nccl_create(be->comm, be->device[0], &be->tp[0]));
      m->own_tp = 1;
    } else {
      be->tp[0] = be->comm;
    }
  } else {
    if (procs != 1)
      return dsp_fail(DSP_ERR_ARG, "backend cuda: %d GPUs driven by one process cannot also run under mpirun (%d ranks)",
                      be->ndev, procs);
    if (visible < be->ndev)
      return dsp_fail(DSP_ERR_DEVICE, "backend cuda: %d GPUs asked for, this machine has %d", be->ndev, visible);
    for (int i = 0; i < be->ndev; i++) be->device[i] = i;
    DSP_TRY(dsp_comm_nccl_create_group(be->ndev, be->device, be->tp));
    m->own_tp = 1;
    be->tp_size = be->ndev;
    be->tp_rank0 = 0;
  }
  for (int i = 0; i < be->ndev; i++) {
    DSP_CUDA_TRY(cudaSetDevice(be->device[i]));
    DSP_CUDA_TRY(cudaStreamCreateWithFlags(&m->stream[i], cudaStreamNonBlocking));
  }
  cudaDeviceProp prop;
  char name[256] = "GPU";
  if (cudaGetDeviceProperties(&prop, be->device[0]) == cudaSuccess) snprintf(name, sizeof name, "%s", prop.name);
  cudaGetLastError();
  snprintf(be->desc, sizeof be->desc, "cuda: %s x%d per process, %d process%s", name, be->ndev, procs,
           procs == 1 ? "" : "es");
  return DSP_OK;
}
