/* The CUDA backend's own state, shared by its files. */
#ifndef DSP_BACKEND_CUDA_CUDA_IMPL_H
#define DSP_BACKEND_CUDA_CUDA_IMPL_H
#include <cuda_runtime.h>

#include "backend/backend.h"

typedef struct {
  int own_tp;                                /* the tp communicators are ours (NCCL) */
  cudaStream_t stream[DSP_BACKEND_MAX_DEVICES]; /* each device's stream for the operations */
  size_t att_smem[DSP_BACKEND_MAX_DEVICES];  /* the attention kernels' shared-memory limit set so far */
} dsp_cuda_impl;

static inline cudaStream_t dsp_cuda_stream(const dsp_backend *be, int dev) {
  return ((const dsp_cuda_impl *)be->impl)->stream[dev];
}

#endif
