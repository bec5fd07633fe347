/* bf16 <-> fp32 per contract 1 (DESIGN §2): round to nearest, ties to even;
 * NaN stays NaN (quiet, sign kept); +-inf stay inf; subnormals are kept.
 * bf16 -> fp32 is exact. Inline so every kernel shares the one definition. */
#ifndef DSP_CORE_BF16_H
#define DSP_CORE_BF16_H
#include <stdint.h>
#include <string.h>

#include "dspark.h"

static inline float dsp_bf16_to_f32(dsp_bf16 h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline dsp_bf16 dsp_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (dsp_bf16)((u >> 16) | 0x0040u); /* NaN: quiet */
  /* RNE: add 0x7fff plus the lowest kept bit; a carry into the exponent is the
   * correct rounding up (and turns the largest finite values into inf). */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (dsp_bf16)(u >> 16);
}

/* Round an fp32 value to the nearest bf16 and back. */
static inline float dsp_round_bf16(float f) { return dsp_bf16_to_f32(dsp_f32_to_bf16(f)); }

void dsp_bf16_from_f32_n(dsp_bf16 *dst, const float *src, size_t n);
void dsp_bf16_to_f32_n(float *dst, const dsp_bf16 *src, size_t n);

#endif
