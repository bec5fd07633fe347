/* The CPU kernels' expf: exp(x) = 2^(k/32) * 2^(r/32) with k = round(x * 32 / ln 2),
 * the 2^(r/32) by a cubic in double and one rounding to float, special
 * values as C's expf. It is the arithmetic of glibc's FMA expf (the libm the
 * scalar kernels called before it), so the bits are libm's on such machines:
 * test_cpu_expf compares every bf16 input and random floats. One definition
 * for the scalar and the AVX-512 paths (expf_avx512.h) makes them agree bit
 * for bit on every machine. */
#ifndef DSP_KERNELS_CPU_EXPF_H
#define DSP_KERNELS_CPU_EXPF_H
#include <stdint.h>

/* 2^(i/32) as double bits, less i << 47 (the exponent the scale adds back); CUDA's
 * copy (kernels/cuda/common/expf.cuh) takes the same initializer. */
#define DSP_CPU_EXP2_TAB                                                                                           \
  {0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,            \
   0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,            \
   0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,            \
   0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,            \
   0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,            \
   0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,            \
   0x3fefa4afa2a490da, 0x3fefd0765b6e4540}
extern const uint64_t dsp_cpu_exp2_tab[32];
#define DSP_CPU_EXP_INVLN2N 0x1.71547652b82fep+5 /* 32 / ln 2 */
#define DSP_CPU_EXP_SHIFT 0x1.8p52
#define DSP_CPU_EXP_C0 0x1.c6af84b912394p-20
#define DSP_CPU_EXP_C1 0x1.ebfce50fac4f3p-13
#define DSP_CPU_EXP_C2 0x1.62e42ff0c52d6p-6
#define DSP_CPU_EXP_HI 0x1.62e42ep6f  /* above: +inf */
#define DSP_CPU_EXP_LO -0x1.9fe368p6f /* below: +0 */

float dsp_cpu_expf(float x);

#endif
