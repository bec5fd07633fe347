/* mathf_eval.h: one thread per input. */
#include "kernels/cuda/mathf_eval.h"

#include <cuda_runtime.h>

#include "core/log1pf.h"
#include "kernels/cuda/common/check.h"
#include "kernels/cuda/common/devmath.cuh"
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

/* Inputs u .. u + 2^32 - 1 over the grid, a thread's stride apart: the non-NaN ones whose hardware bf16 rounding
   (single and packed) differs from the integer one, counted. */
__global__ void k_bf16_cvt_check(unsigned long long *bad) {
  unsigned long long n = 0;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t u = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; u < ((uint64_t)1 << 32); u += stride) {
    const float f = __uint_as_float((uint32_t)u), g = __uint_as_float((uint32_t)u ^ 0x80000000u);
    if (f != f) continue;
    const uint32_t want = dsp_dev_bf16_bits(f) | (uint32_t)dsp_dev_bf16_bits(g) << 16;
    n += __float_as_uint(dsp_dev_round_bf16_hw(f)) != __float_as_uint(dsp_dev_round_bf16(f));
    n += dsp_dev_bf16x2_hw(f, g) != want;
  }
  atomicAdd(bad, n);
}

extern "C" dsp_status dsp_cuda_bf16_cvt_check(unsigned long long *mismatches) {
  unsigned long long *d = NULL;
  DSP_CUDA_TRY(cudaMalloc(&d, sizeof *d));
  dsp_status st = DSP_OK;
  if (cudaMemset(d, 0, sizeof *d) != cudaSuccess) st = DSP_ERR_DEVICE;
  if (st == DSP_OK) {
    k_bf16_cvt_check<<<1024, 256>>>(d);
    if (cudaGetLastError() != cudaSuccess || cudaMemcpy(mismatches, d, sizeof *d, cudaMemcpyDeviceToHost) != cudaSuccess)
      st = DSP_ERR_DEVICE;
  }
  if (st != DSP_OK)
    st = dsp_fail(DSP_ERR_DEVICE, "%s:%d: bf16 check: %s", __FILE__, __LINE__, cudaGetErrorString(cudaGetLastError()));
  cudaFree(d);
  return st;
}

/* |a| over [2^-90, 2^10] by bit pattern (both signs, and zero) for divisor b: fast quotients, and those whose
   bits differ from __fdiv_rn's. */
__global__ void k_div_check(const float *bs, unsigned long long *cnt) {
  const float b = bs[blockIdx.y];
  const dsp_dev_divisor d = dsp_dev_divisor_of(b);
  const uint32_t lo = __float_as_uint(0x1p-90f), hi = __float_as_uint(0x1p10f);
  unsigned long long nf = 0, nd = 0;
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t u = lo + blockIdx.x * blockDim.x + threadIdx.x; u <= hi; u += stride) {
#pragma unroll
    for (int s = 0; s < 2; s++) {
      const float a = __uint_as_float(u ^ (s ? 0x80000000u : 0u));
      uint32_t fast;
      const float q = dsp_dev_div_fast(a, d, fast);
      nf += fast;
      nd += fast && __float_as_uint(q) != __float_as_uint(__fdiv_rn(a, b));
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) { /* zero */
    uint32_t fast;
    const float q = dsp_dev_div_fast(0.0f, d, fast);
    nf += fast;
    nd += fast && __float_as_uint(q) != __float_as_uint(__fdiv_rn(0.0f, b));
  }
  atomicAdd(cnt, nf);
  atomicAdd(cnt + 1, nd);
}

extern "C" dsp_status dsp_cuda_div_check(const float *b, int nb, unsigned long long *fast,
                                         unsigned long long *mismatches) {
  if (nb <= 0 || nb > 65535) return dsp_fail(DSP_ERR_ARG, "div check: %d divisors (1 to 65535)", nb);
  void *d = NULL;
  DSP_CUDA_TRY(cudaMalloc(&d, 2 * sizeof(unsigned long long) + (size_t)nb * sizeof(float)));
  unsigned long long *cnt = (unsigned long long *)d, h[2] = {0, 0};
  float *db = (float *)(cnt + 2);
  dsp_status st = DSP_OK;
  if (cudaMemset(cnt, 0, 2 * sizeof *cnt) != cudaSuccess ||
      cudaMemcpy(db, b, (size_t)nb * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
    st = DSP_ERR_DEVICE;
  if (st == DSP_OK) {
    k_div_check<<<dim3(1024, (unsigned)nb), 256>>>(db, cnt);
    if (cudaGetLastError() != cudaSuccess || cudaMemcpy(h, cnt, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess)
      st = DSP_ERR_DEVICE;
  }
  if (st != DSP_OK)
    st = dsp_fail(DSP_ERR_DEVICE, "%s:%d: div check: %s", __FILE__, __LINE__, cudaGetErrorString(cudaGetLastError()));
  *fast = h[0], *mismatches = h[1];
  cudaFree(d);
  return st;
}
