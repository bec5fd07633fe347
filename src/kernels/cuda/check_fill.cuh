/* Random bf16 operands for the devices' self-checks (markov_wgcheck.cu,
 * lm_wgmma.cu): exponents 2^-24 .. 2^24, random sign and mantissa, 1 in 16
 * zero, so sums are inexact and differ under any change of order. A hash of
 * (index, salt): the same values on every device and run. CUDA C++ only. */
#ifndef DSP_CUDA_CHECK_FILL_CUH
#define DSP_CUDA_CHECK_FILL_CUH

#include <stddef.h>
#include <stdint.h>

namespace {

__global__ void dsp_check_fill(uint16_t *p, size_t n, uint64_t salt) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ salt;
  h ^= h >> 31, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 29, h *= 0x94D049BB133111EBull, h ^= h >> 32;
  const uint32_t e = (uint32_t)((h >> 8) % 49) + 127 - 24;
  p[i] = (h & 0xF0) == 0 ? 0 : (uint16_t)(((h & 1) << 15) | (e << 7) | ((h >> 16) & 0x7F));
}

}  // namespace

#endif
