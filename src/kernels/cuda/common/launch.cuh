/* Kernel launches that may overlap the kernel before them (PDL): inside a
 * stream capture, and unless DSPARK_CUDA_PDL=0, dsp_launch marks the launch
 * programmatic, so the grid's blocks may start while its predecessor runs.
 * Every kernel launched this way calls dsp_dev_grid_wait() (sync.cuh) before
 * its first access to memory another kernel writes or reads. CUDA C++ only. */
#ifndef DSP_KERNELS_CUDA_COMMON_LAUNCH_CUH
#define DSP_KERNELS_CUDA_COMMON_LAUNCH_CUH
#include <cuda_runtime.h>

#include <utility>

#include "core/env.h"

/* 1 where launches on s are to be programmatic: s is capturing and PDL is on. */
static inline int dsp_cuda_pdl(cudaStream_t s) {
  cudaStreamCaptureStatus c = cudaStreamCaptureStatusNone;
  return dsp_env_get()->cuda_pdl && cudaStreamIsCapturing(s, &c) == cudaSuccess && c == cudaStreamCaptureStatusActive;
}

/* The launch attribute that makes a launch programmatic. */
static inline cudaLaunchAttribute dsp_pdl_attribute(void) {
  cudaLaunchAttribute at;
  at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at.val.programmaticStreamSerializationAllowed = 1;
  return at;
}

template <typename... P, typename... A>
static inline void dsp_launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A &&...args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = s;
  cudaLaunchAttribute at = dsp_pdl_attribute();
  cfg.attrs = &at, cfg.numAttrs = dsp_cuda_pdl(s);
  cudaLaunchKernelEx(&cfg, k, std::forward<A>(args)...);
}

#endif
