/* expf.h's arithmetic on 16 lanes (two halves of 8 doubles), bit for bit the
 * scalar dsp_cpu_expf. Include only from AVX-512 files (avx512.h). */
#ifndef DSP_KERNELS_CPU_EXPF_AVX512_H
#define DSP_KERNELS_CPU_EXPF_AVX512_H
#include <immintrin.h>

#include "kernels/cpu/avx512.h"
#include "kernels/cpu/expf.h"

DSP_AVX512_INLINE __m256 dsp_avx512_expf8(__m256 x) {
  const __m512d xd = _mm512_cvtps_pd(x), inv = _mm512_set1_pd(DSP_CPU_EXP_INVLN2N);
  const __m512d shift = _mm512_set1_pd(DSP_CPU_EXP_SHIFT);
  __m512d kd = _mm512_fmadd_pd(inv, xd, shift);
  const __m512i ki = _mm512_castpd_si512(kd);
  kd = _mm512_sub_pd(kd, shift);
  const __m512d r = _mm512_fmsub_pd(inv, xd, kd);
  /* the table's entry ki & 31 from its four registers (two two-register permutes and a blend on bit 4): the
     same values as a gather, at half the time per value on this project's AVX-512 CPU */
  const __m512i t0 = _mm512_loadu_si512(dsp_cpu_exp2_tab), t1 = _mm512_loadu_si512(dsp_cpu_exp2_tab + 8);
  const __m512i t2 = _mm512_loadu_si512(dsp_cpu_exp2_tab + 16), t3 = _mm512_loadu_si512(dsp_cpu_exp2_tab + 24);
  const __m512i lo = _mm512_permutex2var_epi64(t0, ki, t1), hi = _mm512_permutex2var_epi64(t2, ki, t3);
  const __m512i tv = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), lo, hi);
  const __m512i t = _mm512_add_epi64(tv, _mm512_slli_epi64(ki, 47));
  const __m512d z = _mm512_fmadd_pd(_mm512_set1_pd(DSP_CPU_EXP_C0), r, _mm512_set1_pd(DSP_CPU_EXP_C1));
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(DSP_CPU_EXP_C2), r, _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(z, r2, y);
  return _mm512_cvtpd_ps(_mm512_mul_pd(y, _mm512_castsi512_pd(t)));
}

DSP_AVX512_INLINE __m512 dsp_avx512_expf(__m512 x) {
  __m512 e = _mm512_insertf32x8(_mm512_castps256_ps512(dsp_avx512_expf8(_mm512_castps512_ps256(x))),
                                dsp_avx512_expf8(_mm512_extractf32x8_ps(x, 1)), 1);
  /* specials as the scalar form: NaN -> x + x, above HI -> inf, below LO -> +0 */
  e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, _mm512_set1_ps(DSP_CPU_EXP_HI), _CMP_GT_OQ),
                         _mm512_set1_ps(__builtin_inff()));
  e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, _mm512_set1_ps(DSP_CPU_EXP_LO), _CMP_LT_OQ), _mm512_setzero_ps());
  return _mm512_mask_add_ps(e, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x, x);
}

#endif
