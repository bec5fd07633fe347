#include "core/bf16.h"

void dsp_bf16_from_f32_n(dsp_bf16 *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = dsp_f32_to_bf16(src[i]);
}

void dsp_bf16_to_f32_n(float *dst, const dsp_bf16 *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = dsp_bf16_to_f32(src[i]);
}
