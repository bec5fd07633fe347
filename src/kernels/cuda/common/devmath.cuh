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
__device__ __forceinline__ uint16_t dsp_dev_bf16_bits_hw(float f) {
  uint16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float dsp_dev_round_bf16_hw(float f) { return dsp_dev_bf16_val(dsp_dev_bf16_bits_hw(f)); }
/* Two roundings packed (lo in the low half), the same bits. */
__device__ __forceinline__ uint32_t dsp_dev_bf16x2_hw(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

/* IEEE division by a divisor used many times (a softmax's z): its reciprocal is refined once, then each
 * quotient is the compiler's own fast path of div.rn.f32 (q = a y, r = fma(-b, q, a), q + r y), with no branch
 * per element. fast says the operands are where that path is the correctly rounded quotient (a zero, or a
 * normal |a| in [2^-90, 2^10] over b in [2^-10, 2^31]: a normal quotient); elsewhere the caller takes
 * __fdiv_rn. test_cuda_mathf compares it with __fdiv_rn on every such a for a set of b. */
struct dsp_dev_divisor {
  float b, y;
  uint32_t ok;
};
__device__ __forceinline__ dsp_dev_divisor dsp_dev_divisor_of(float b) {
  float y0;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y0) : "f"(b));
  const float e = __fmaf_rn(y0, -b, 1.0f);
  return {b, __fmaf_rn(y0, e, y0), (uint32_t)(b >= 0x1p-10f && b <= 0x1p31f)};
}
/* The range test in integer compares without branches (|a| bits: 0, or 2^-90 .. 2^10). */
__device__ __forceinline__ float dsp_dev_div_fast(float a, const dsp_dev_divisor &d, uint32_t &fast) {
  const uint32_t ua = __float_as_uint(a) & 0x7FFFFFFFu;
  fast = d.ok & ((uint32_t)(ua - 0x12800000u <= 0x32000000u) | (uint32_t)(ua == 0u));
  const float q = __fmul_rn(a, d.y), r = __fmaf_rn(q, -d.b, a);
  return __fmaf_rn(d.y, r, q);
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
