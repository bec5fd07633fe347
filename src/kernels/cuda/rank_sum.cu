#include "kernels/cuda/rank_sum.h"

namespace {

__global__ void rank_sum_kernel(const float *__restrict__ parts, int P, int64_t ld, int64_t n, float *__restrict__ out) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float acc = parts[i];
    for (int r = 1; r < P; r++) acc = __fadd_rn(acc, parts[(int64_t)r * ld + i]);
    out[i] = acc;
  }
}

}  // namespace

extern "C" cudaError_t dsp_cuda_rank_sum(const float *parts, int P, int64_t ld, int64_t n, float *out,
                                         cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  const int64_t blocks = (n + 255) / 256;
  rank_sum_kernel<<<(unsigned)(blocks < 1024 ? blocks : 1024), 256, 0, s>>>(parts, P, ld, n, out);
  return cudaGetLastError();
}
