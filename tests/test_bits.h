/* Bit views of floats for the CPU kernel tests. */
#ifndef DSP_TEST_BITS_H
#define DSP_TEST_BITS_H
#include <stdint.h>
#include <string.h>

static inline float f_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint32_t u_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
/* bf16 -> fp32 (exact), and an fp32's upper half (a bf16 that holds it exactly). */
static inline float widen(uint16_t h) { return f_of((uint32_t)h << 16); }
static inline uint16_t hi16(float f) { return (uint16_t)(u_of(f) >> 16); }

#endif
