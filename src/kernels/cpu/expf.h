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

/* 2^(i/32) as double bits, less i << 47 (the exponent the scale adds back). */
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
