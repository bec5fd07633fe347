/* KDA forget gate: the log decay g [T][HV][K] (fp32) from the raw f_b_proj
 * output, in exactly one of the two forms (kda.h). The recurrence kernels take
 * g as made here and never apply a gate again. */
#include <math.h>

#include "core/bf16.h"
#include "core/log1pf.h"
#include "core/status.h"
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/expf.h"
#include "kernels/cpu/expf_avx512.h"
#include "kernels/cpu/kda.h"
#include "kernels/cpu/kernel.h"

/* torch's softplus with beta 1, threshold 20, as fla's naive gate and vLLM use. */
static inline float softplus20(float x) { return x > 20.0f ? x : dsp_log1pf(dsp_cpu_expf(x)); }

/* dsp_log1pf (core/log1pf.h) on 8 lanes in double, the same IEEE operations
 * in the same order, for y >= 0 or NaN (an expf's result): both branches on
 * every lane, then the lane's own. */
DSP_AVX512 static __m256 log1pf8(__m256 yf) {
  const __m512d x = _mm512_cvtps_pd(yf);
  __m512d p = _mm512_fmadd_pd(x, _mm512_set1_pd(-0.25), _mm512_set1_pd(1.0 / 3.0));
  p = _mm512_fmadd_pd(x, p, _mm512_set1_pd(-0.5));
  p = _mm512_fmadd_pd(x, p, _mm512_set1_pd(1.0));
  const __m512d small = _mm512_mul_pd(x, p);
  const __m512d s = _mm512_add_pd(_mm512_set1_pd(1.0), x);
  const __m512i b = _mm512_castpd_si512(s);
  __m512i e = _mm512_sub_epi64(_mm512_and_si512(_mm512_srli_epi64(b, 52), _mm512_set1_epi64(0x7ff)), _mm512_set1_epi64(1023));
  __m512d m = _mm512_castsi512_pd(
      _mm512_or_si512(_mm512_and_si512(b, _mm512_set1_epi64(0x000fffffffffffffll)), _mm512_set1_epi64(0x3ff0000000000000ll)));
  const __mmask8 big = _mm512_cmp_pd_mask(m, _mm512_set1_pd(0x1.6a09e667f3bcdp+0), _CMP_GT_OQ);
  m = _mm512_mask_mul_pd(m, big, m, _mm512_set1_pd(0.5));
  e = _mm512_mask_add_epi64(e, big, e, _mm512_set1_epi64(1));
  const __m512d one = _mm512_set1_pd(1.0);
  const __m512d f = _mm512_div_pd(_mm512_sub_pd(m, one), _mm512_add_pd(m, one)), f2 = _mm512_mul_pd(f, f);
  static const double inv[] = {1.0 / 19.0, 1.0 / 17.0, 1.0 / 15.0, 1.0 / 13.0, 1.0 / 11.0,
                               1.0 / 9.0,  1.0 / 7.0,  1.0 / 5.0,  1.0 / 3.0};
  __m512d q = _mm512_set1_pd(1.0 / 21.0);
  for (int i = 0; i < 9; i++) q = _mm512_fmadd_pd(f2, q, _mm512_set1_pd(inv[i]));
  const __m512d t = _mm512_add_pd(f, f), u = _mm512_mul_pd(f2, q);
  const __m512d lm = _mm512_fmadd_pd(t, u, t);
  const __m512d general = _mm512_fmadd_pd(_mm512_cvtepi64_pd(e), _mm512_set1_pd(0x1.62e42fefa39efp-1), lm);
  const __mmask8 tiny = _mm512_cmp_pd_mask(_mm512_abs_pd(x), _mm512_set1_pd(0x1p-10), _CMP_LT_OQ);
  __m256 r = _mm512_cvtpd_ps(_mm512_mask_mov_pd(general, tiny, small));
  r = _mm256_mask_mov_ps(r, _mm256_cmp_ps_mask(yf, yf, _CMP_UNORD_Q), _mm256_add_ps(yf, yf)); /* NaN: y + y */
  return _mm256_mask_mov_ps(r, _mm256_cmp_ps_mask(yf, _mm256_set1_ps(__builtin_inff()), _CMP_EQ_OQ), yf);
}

/* One (token, head) row of K gates, 16 lanes at a time: the scalar loop's
 * operations lane by lane. */
DSP_AVX512 static void gate_row_avx512(const dsp_bf16 *fr, const float *bias, float a, int lb, float bound, float *out,
                                       int32_t K) {
  const __m512 sign = _mm512_set1_ps(-0.0f), av = _mm512_set1_ps(a);
  for (int32_t d = 0; d < K; d += 16) {
    const __mmask16 m = dsp_avx512_lanes(K - d);
    __m512 x = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, fr + d)), 16));
    if (bias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, bias + d));
    __m512 g;
    if (lb) {
      const __m512 e = dsp_avx512_expf(_mm512_xor_ps(_mm512_mul_ps(av, x), sign));
      g = _mm512_mul_ps(_mm512_set1_ps(bound), _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
    } else {
      const __m512 y = dsp_avx512_expf(x);
      const __m512 l = _mm512_insertf32x8(_mm512_castps256_ps512(log1pf8(_mm512_castps512_ps256(y))),
                                          log1pf8(_mm512_extractf32x8_ps(y, 1)), 1);
      const __m512 sp = _mm512_mask_mov_ps(l, _mm512_cmp_ps_mask(x, _mm512_set1_ps(20.0f), _CMP_GT_OQ), x);
      g = _mm512_xor_ps(_mm512_mul_ps(av, sp), sign);
    }
    _mm512_mask_storeu_ps(out + d, m, g);
  }
}

dsp_status dsp_kda_gate(int64_t T, int32_t HV, int32_t K, dsp_kda_in_bf16 f, const float *A_log,
                        const float *dt_bias, const dsp_kda_gate_cfg *cfg, float *g) {
  if (!cfg || !g || (T > 0 && !f.data)) return dsp_fail(DSP_ERR_ARG, "kda gate: NULL argument");
  if (T < 0 || HV <= 0 || K <= 0) return dsp_fail(DSP_ERR_SHAPE, "kda gate: T %lld, HV %d, K %d", (long long)T, (int)HV, (int)K);
  const int lb = cfg->form == DSP_KDA_GATE_LOWER_BOUND;
  if (!lb && cfg->form != DSP_KDA_GATE_SOFTPLUS) return dsp_fail(DSP_ERR_ARG, "kda gate: unknown form %d", (int)cfg->form);
  if (lb && !(isfinite(cfg->lower_bound) && cfg->lower_bound < 0.0f))
    return dsp_fail(DSP_ERR_ARG, "kda gate: lower bound %g is not finite and negative", (double)cfg->lower_bound);
  const float bound = cfg->lower_bound;
  const int vec = dsp_cpu_isa_current() == DSP_CPU_ISA_AVX512;
#pragma omp parallel for schedule(static) if (T * HV * K >= 65536)
  for (int64_t t = 0; t < T; t++)
    for (int32_t h = 0; h < HV; h++) {
      const dsp_bf16 *fr = f.data + t * f.tok + h * f.head;
      const float *bias = dt_bias ? dt_bias + (int64_t)h * K : NULL;
      const float a = A_log ? dsp_cpu_expf(A_log[h]) : 1.0f;
      float *out = g + (t * HV + h) * K;
      if (vec) gate_row_avx512(fr, bias, a, lb, bound, out, K);
      for (int32_t d = 0; !vec && d < K; d++) {
        float x = dsp_bf16_to_f32(fr[d]);
        if (bias) x += bias[d];
        /* Each form on its own; never the sigmoid of a softplus. */
        out[d] = lb ? bound * (1.0f / (1.0f + dsp_cpu_expf(-(a * x)))) : -(a * softplus20(x));
      }
    }
  return DSP_OK;
}
