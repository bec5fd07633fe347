#include "kernels/cuda/rank_sum.h"

namespace {

/* ranks [lo, hi): [lo, mid) + [mid, hi), mid = lo + (hi - lo) / 2; D bounds the depth (2^D ranks), so the
 * recursion is unrolled at compile time */
template <int D>
__device__ __forceinline__ float tree(const float *__restrict__ p, int64_t ld, int64_t i, int lo, int hi) {
  if (hi - lo == 1) return p[(int64_t)lo * ld + i];
  const int mid = lo + (hi - lo) / 2;
  return __fadd_rn(tree<D - 1>(p, ld, i, lo, mid), tree<D - 1>(p, ld, i, mid, hi));
}
template <>
__device__ __forceinline__ float tree<0>(const float *__restrict__ p, int64_t ld, int64_t i, int lo, int hi) {
  (void)hi;
  return p[(int64_t)lo * ld + i];
}

__global__ void rank_sum_kernel(const float *__restrict__ parts, int P, int64_t ld, int64_t n, float *__restrict__ out) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = tree<5>(parts, ld, i, 0, P);
}

}  // namespace

extern "C" cudaError_t dsp_cuda_rank_sum(const float *parts, int P, int64_t ld, int64_t n, float *out,
                                         cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  const int64_t blocks = (n + 255) / 256;
  rank_sum_kernel<<<(unsigned)(blocks < 1024 ? blocks : 1024), 256, 0, s>>>(parts, P, ld, n, out);
  return cudaGetLastError();
}
