/* Checked CUDA / cuBLASLt / NCCL calls for the CUDA backend (C and CUDA C++).
 * A failing call records "file:line: call: error text" with dsp_fail and
 * returns DSP_ERR_DEVICE (DSP_ERR_COMM for NCCL) from the enclosing function. */
#ifndef DSP_CUDA_CHECK_H
#define DSP_CUDA_CHECK_H
#include <cuda_runtime.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "core/status.h"
#ifdef __cplusplus
}
#endif

#define DSP_CUDA_TRY(call)                                                                      \
  do {                                                                                          \
    cudaError_t dsp_cu_e_ = (call);                                                             \
    if (dsp_cu_e_ != cudaSuccess)                                                               \
      return dsp_fail(DSP_ERR_DEVICE, "%s:%d: %s: %s", __FILE__, __LINE__, #call,               \
                      cudaGetErrorString(dsp_cu_e_));                                           \
  } while (0)

/* The last launch's error (launch configuration, missing kernel image). */
#define DSP_CUDA_TRY_LAUNCH() DSP_CUDA_TRY(cudaGetLastError())

#define DSP_CUBLAS_TRY(call)                                                                    \
  do {                                                                                          \
    cublasStatus_t dsp_cb_e_ = (call);                                                          \
    if (dsp_cb_e_ != CUBLAS_STATUS_SUCCESS)                                                     \
      return dsp_fail(DSP_ERR_DEVICE, "%s:%d: %s: cublas status %d (%s)", __FILE__, __LINE__,   \
                      #call, (int)dsp_cb_e_, cublasLtGetStatusString(dsp_cb_e_));                 \
  } while (0)

#define DSP_NCCL_TRY(call)                                                                      \
  do {                                                                                          \
    ncclResult_t dsp_nc_e_ = (call);                                                            \
    if (dsp_nc_e_ != ncclSuccess)                                                               \
      return dsp_fail(DSP_ERR_COMM, "%s:%d: %s: %s", __FILE__, __LINE__, #call,                 \
                      ncclGetErrorString(dsp_nc_e_));                                           \
  } while (0)

#endif
