/* expf.h's arithmetic on 8 lanes (two halves of 4 doubles), bit for bit the
 * scalar dsp_cpu_expf. Include only from AVX2 files (avx2.h). */
#ifndef DSP_KERNELS_CPU_EXPF_AVX2_H
#define DSP_KERNELS_CPU_EXPF_AVX2_H
#include <immintrin.h>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/expf.h"

DSP_AVX2_INLINE __m128 dsp_avx2_expf4(__m128 x) {
  const __m256d xd = _mm256_cvtps_pd(x), inv = _mm256_set1_pd(DSP_CPU_EXP_INVLN2N);
  const __m256d shift = _mm256_set1_pd(DSP_CPU_EXP_SHIFT);
  __m256d kd = _mm256_fmadd_pd(inv, xd, shift);
  const __m256i ki = _mm256_castpd_si256(kd);
  kd = _mm256_sub_pd(kd, shift);
  const __m256d r = _mm256_fmsub_pd(inv, xd, kd);
  const __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
  const __m256i t = _mm256_add_epi64(_mm256_i64gather_epi64((const long long *)dsp_cpu_exp2_tab, idx, 8),
                                     _mm256_slli_epi64(ki, 47));
  const __m256d z = _mm256_fmadd_pd(_mm256_set1_pd(DSP_CPU_EXP_C0), r, _mm256_set1_pd(DSP_CPU_EXP_C1));
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(DSP_CPU_EXP_C2), r, _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(z, r2, y);
  return _mm256_cvtpd_ps(_mm256_mul_pd(y, _mm256_castsi256_pd(t)));
}

DSP_AVX2_INLINE __m256 dsp_avx2_expf(__m256 x) {
  __m256 e = _mm256_set_m128(dsp_avx2_expf4(_mm256_extractf128_ps(x, 1)), dsp_avx2_expf4(_mm256_castps256_ps128(x)));
  /* specials as the scalar form: NaN -> x + x, above HI -> inf, below LO -> +0 */
  e = _mm256_blendv_ps(e, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, _mm256_set1_ps(DSP_CPU_EXP_HI), _CMP_GT_OQ));
  e = _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(DSP_CPU_EXP_LO), _CMP_LT_OQ));
  return _mm256_blendv_ps(e, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

#endif
