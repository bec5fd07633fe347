/* A build without NCCL: one GPU per process, and these say why not more. */
#include "core/status.h"

dsp_status dsp_comm_nccl_create(dsp_comm *mpi, int device, dsp_comm **out) {
  (void)mpi, (void)device;
  if (out) *out = NULL;
  return dsp_fail(DSP_ERR_UNSUPPORTED, "comm nccl: this dspark was built without NCCL (one GPU per process only)");
}

dsp_status dsp_comm_nccl_create_group(int n, const int *devices, dsp_comm **out) {
  (void)devices;
  for (int i = 0; out && i < n; i++) out[i] = NULL;
  return dsp_fail(DSP_ERR_UNSUPPORTED, "comm nccl: this dspark was built without NCCL (one GPU per process only)");
}
