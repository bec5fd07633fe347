#include <cuda_runtime.h>

#include "kernels/cuda/common/device.h"

extern "C" int dsp_cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}
