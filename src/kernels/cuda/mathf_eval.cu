/* mathf_eval.h: one thread per input. */
#include "kernels/cuda/mathf_eval.h"

#include <cuda_runtime.h>

#include "core/log1pf.h"
#include "kernels/cuda/common/check.h"
#include "kernels/cuda/common/expf.cuh"

__global__ void k_mathf_eval(const float *x, int64_t n, float *e, float *l) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) e[i] = dsp_dev_expf(x[i]), l[i] = dsp_log1pf(x[i]);
}

extern "C" dsp_status dsp_cuda_mathf_eval(const float *x, int64_t n, float *exp_out, float *log1p_out) {
  if (n <= 0) return DSP_OK;
  float *d = NULL;
  const size_t b = (size_t)n * sizeof(float);
  DSP_CUDA_TRY(cudaMalloc(&d, 3 * b));
  dsp_status st = DSP_OK;
  if (cudaMemcpy(d, x, b, cudaMemcpyHostToDevice) != cudaSuccess) st = DSP_ERR_DEVICE;
  if (st == DSP_OK) {
    k_mathf_eval<<<(unsigned)((n + 255) / 256), 256>>>(d, n, d + n, d + 2 * n);
    if (cudaGetLastError() != cudaSuccess || cudaMemcpy(exp_out, d + n, b, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(log1p_out, d + 2 * n, b, cudaMemcpyDeviceToHost) != cudaSuccess)
      st = DSP_ERR_DEVICE;
  }
  if (st != DSP_OK)
    st = dsp_fail(DSP_ERR_DEVICE, "%s:%d: mathf eval: %s", __FILE__, __LINE__, cudaGetErrorString(cudaGetLastError()));
  cudaFree(d);
  return st;
}
