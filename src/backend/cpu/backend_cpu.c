/* The CPU backend: OpenMP threads in this process, tensor parallelism over the
 * ranks of its communicator (one TP rank per process), or over several TP
 * ranks of this one process (devices > 1: a thread each, a "threads"
 * communicator, the host's threads shared among them). */
#include <omp.h>
#include <stdio.h>

#include "backend/backend.h"
#include "backend/cpu/markov_cpu.h"
#include "backend/cpu/ops_cpu.h"
#include "core/status.h"
#include "core/threads.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/matmul.h"

/* A device's OpenMP team: the process's threads shared among its devices. */
static void cpu_thread_enter(dsp_backend *be, int dev) {
  (void)dev;
  omp_set_num_threads(dsp_cpu_threads_per_device(be));
}

static const dsp_backend_ops cpu_ops = {
    .markov_create = dsp_cpu_markov_create,
    .markov_propose = dsp_cpu_markov_propose,
    .markov_set_path = dsp_cpu_markov_set_path,
    .markov_detail = dsp_cpu_markov_detail,
    .markov_last_timing = dsp_cpu_markov_last_timing,
    .markov_free = dsp_cpu_markov_free,
    .free = dsp_cpu_backend_free,
    .alloc = dsp_cpu_op_alloc,
    .release = dsp_cpu_op_release,
    .upload = dsp_cpu_op_copy,
    .download = dsp_cpu_op_copy,
    .copy = dsp_cpu_op_copy,
    .sync = dsp_cpu_op_sync,
    .weight_create = dsp_cpu_op_weight_create,
    .weight_free = dsp_cpu_op_weight_free,
    .weight_slice = dsp_cpu_op_weight_slice,
    .weight_describe = dsp_cpu_op_weight_describe,
    .gemm = dsp_cpu_op_gemm,
    .markov_step = dsp_cpu_op_markov_step,
    .embed = dsp_cpu_op_embed,
    .rmsnorm = dsp_cpu_op_rmsnorm,
    .rope = dsp_cpu_op_rope,
    .add = dsp_cpu_op_add,
    .silu_mul = dsp_cpu_op_silu_mul,
    .scatter_rows = dsp_cpu_op_scatter_rows,
    .attention = dsp_cpu_op_attention,
    .round_add = dsp_cpu_op_round_add,
    .select = dsp_cpu_op_select,
    .gather_rows = dsp_cpu_op_gather_rows,
    .kda_workspace = dsp_cpu_op_kda_workspace,
    .kda = dsp_cpu_op_kda,
    .kda_copy = dsp_cpu_op_kda_copy,
    .host_alloc = dsp_cpu_op_alloc,
    .host_release = dsp_cpu_op_release,
    .upload_async = dsp_cpu_op_copy,
    .download_async = dsp_cpu_op_copy,
    .accept_workspace = dsp_cpu_op_accept_workspace,
    .accept = dsp_cpu_op_accept,
    .thread_enter = cpu_thread_enter,
    .memory_used = dsp_cpu_op_memory_used,
};

dsp_status dsp_backend_cpu_init(dsp_backend *be, const dsp_backend_config *cfg) {
  const int procs = dsp_comm_size(be->comm);
  be->ops = &cpu_ops;
  DSP_TRY(dsp_cpu_backend_impl(be));
  be->ndev = cfg->devices <= 1 ? 1 : cfg->devices;
  if (be->ndev == 1) {
    be->tp[0] = be->comm;
    be->tp_size = procs;
    be->tp_rank0 = dsp_comm_rank(be->comm);
  } else {
    /* several TP ranks in this process, one thread each: what one process
     * driving several GPUs runs, on the CPU */
    if (procs != 1)
      return dsp_fail(DSP_ERR_ARG, "backend cpu: %d TP ranks in one process cannot also run under mpirun (%d ranks)",
                      be->ndev, procs);
    for (int i = 0; i < be->ndev; i++) be->device[i] = i;
    DSP_TRY(dsp_cpu_backend_own_tp(be));
    be->tp_size = be->ndev;
    be->tp_rank0 = 0;
  }
  /* the caller's thread runs device 0: with several devices it keeps only that device's share */
  dsp_threads_setup();
  const int per = dsp_cpu_threads_per_device(be);
  if (be->ndev > 1) omp_set_num_threads(per);
  char kern[48];
  snprintf(kern, sizeof kern, "%s%s", dsp_cpu_amx_chosen() ? "amx (linear layers) and " : "", dsp_cpu_kernel_name());
  if (be->ndev == 1)
    snprintf(be->desc, sizeof be->desc, "cpu: %s kernels, %d threads per process, %d process%s", kern, per,
             be->tp_size, be->tp_size == 1 ? "" : "es");
  else
    snprintf(be->desc, sizeof be->desc, "cpu: %s kernels, %d TP ranks in one process, %d thread%s each", kern,
             be->ndev, per, per == 1 ? "" : "s");
  return DSP_OK;
}
