/* Device-side numerics shared by the CUDA kernels (CUDA C++ only).
 * bf16 rounding per contract 1 with the CPU backend's canonical NaN
 * (src/cpu/kernel.h: every NaN a kernel writes is +qNaN 0x7FC0 / 0x7FC00000),
 * the 64-bit selection key that realises src/core/select.h's order, a warp's
 * sum in a fixed order and a launch's block count. */
#ifndef DSP_CUDA_DEVMATH_CUH
#define DSP_CUDA_DEVMATH_CUH
#include <stdint.h>

#include "core/select.h"

/* fp32 -> bf16 bits: NaN canonical, else round to nearest even; inf stays inf,
 * subnormals are kept (pure integer arithmetic, so no flush can happen). */
__device__ __forceinline__ uint16_t dsp_dev_bf16_bits(float f) {
  if (f != f) return 0x7FC0u;
  uint32_t u = __float_as_uint(f);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float dsp_dev_bf16_val(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ __forceinline__ float dsp_dev_round_bf16(float f) { return dsp_dev_bf16_val(dsp_dev_bf16_bits(f)); }

/* The same rounding in one instruction (cvt.rn.bf16.f32): dsp_dev_bf16_bits' bits for every input but a NaN,
 * which gives some NaN (test_cuda_mathf compares all 2^32 inputs); for values whose NaN payload never reaches
 * an output. */
__device__ __forceinline__ float dsp_dev_round_bf16_hw(float f) {
  uint16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return dsp_dev_bf16_val(h);
}
/* Two roundings packed (lo in the low half), the same bits. */
__device__ __forceinline__ uint32_t dsp_dev_bf16x2_hw(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

/* A product's output element i: bf16 with one rounding, or (f32) the fp32 sum
 * unrounded, as a row-parallel product's partial that is all-reduced first. */
__device__ __forceinline__ void dsp_dev_store_sum(void *out, size_t i, float v, int f32) {
  if (f32) ((float *)out)[i] = v;
  else ((uint16_t *)out)[i] = dsp_dev_bf16_bits(v);
}

/* fp32 output with the canonical NaN. */
__device__ __forceinline__ float dsp_dev_canon_f32(float f) { return f != f ? __uint_as_float(0x7FC00000u) : f; }

/* Selection key of core/select.h (dsp_select_key): the best pair is a plain
 * max of keys; 0 means "no candidate". Ids must be < 2^31 (the head checks Vp). */
__device__ __forceinline__ unsigned long long dsp_dev_key(float v, uint32_t id) {
  return (unsigned long long)dsp_select_key(v, id);
}

__device__ __forceinline__ uint32_t dsp_dev_key_id(unsigned long long key) { return ~(uint32_t)key; }

/* The sum of x over a warp's 32 lanes by an xor butterfly over 16, 8, 4, 2, 1:
 * a fixed order, and every lane holds the same bits (a + b == b + a). */
__device__ __forceinline__ float dsp_dev_warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

/* Blocks of `per` threads covering n items (host side of a launch). */
static inline unsigned dsp_dev_blocks_for(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

#endif
