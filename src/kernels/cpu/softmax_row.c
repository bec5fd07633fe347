/* softmax_row.h's row softmax: a portable loop and AVX2 / AVX-512 forms (the
 * expf of expf_avx2.h / expf_avx512.h, bit for bit the scalar one; the eight
 * partial sums as two vectors of 4 or one of 8 doubles). */
#include "kernels/cpu/softmax_row.h"

#include <math.h>

#include "core/bf16.h"
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/expf.h"
#include "kernels/cpu/expf_avx2.h"
#include "kernels/cpu/expf_avx512.h"
#include "kernels/cpu/kernel.h"

/* x_v = fp32(l_v) / T into e, and their max (NaN-free rows: a NaN is never larger). */
static float scaled_max(const dsp_bf16 *l, int64_t V, float T, float *e) {
  float m = -INFINITY;
  for (int64_t v = 0; v < V; v++) {
    e[v] = dsp_bf16_to_f32(l[v]) / T;
    m = e[v] > m ? e[v] : m;
  }
  return m;
}

/* The tail from v0 and the eight partials' sum. */
static double finish(float *e, int64_t v0, int64_t V, float m, double s[8]) {
  for (int64_t v = v0; v < V; v++) {
    e[v] = dsp_cpu_expf(e[v] - m);
    s[v - v0] += (double)e[v];
  }
  double z = 0.0;
  for (int l = 0; l < 8; l++) z += s[l];
  return z;
}

static double row_scalar(const dsp_bf16 *l, int64_t V, float T, float *e) {
  const float m = scaled_max(l, V, T, e);
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t v = 0;
  for (; v + 8 <= V; v += 8)
    for (int j = 0; j < 8; j++) {
      e[v + j] = dsp_cpu_expf(e[v + j] - m);
      s[j] += (double)e[v + j];
    }
  return finish(e, v, V, m, s);
}

/* scaled_max 8 (16) ids at a time: the same fp32 divisions; the max, order-free, ignores NaNs as the loop does
 * (max_ps returns its second operand, the running max, when the first is NaN); equal maxima may differ only in
 * the sign of a zero, which no x - m sees. */
DSP_AVX2 static float scaled_max_avx2(const dsp_bf16 *l, int64_t V, float T, float *e) {
  const __m256 tv = _mm256_set1_ps(T);
  __m256 mv = _mm256_set1_ps(-INFINITY);
  int64_t v = 0;
  for (; v + 8 <= V; v += 8) {
    const __m256 x = _mm256_div_ps(
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(l + v))), 16)), tv);
    _mm256_storeu_ps(e + v, x);
    mv = _mm256_max_ps(x, mv);
  }
  float mm[8], m = scaled_max(l + v, V - v, T, e + v);
  _mm256_storeu_ps(mm, mv);
  for (int j = 0; j < 8; j++) m = mm[j] > m ? mm[j] : m;
  return m;
}

DSP_AVX512 static float scaled_max_avx512(const dsp_bf16 *l, int64_t V, float T, float *e) {
  const __m512 tv = _mm512_set1_ps(T);
  __m512 mv = _mm512_set1_ps(-INFINITY);
  int64_t v = 0;
  for (; v + 16 <= V; v += 16) {
    const __m512 x = _mm512_div_ps(
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(l + v))), 16)),
        tv);
    _mm512_storeu_ps(e + v, x);
    mv = _mm512_max_ps(x, mv);
  }
  float mm[16], m = scaled_max(l + v, V - v, T, e + v);
  _mm512_storeu_ps(mm, mv);
  for (int j = 0; j < 16; j++) m = mm[j] > m ? mm[j] : m;
  return m;
}

DSP_AVX2 static double row_avx2(const dsp_bf16 *l, int64_t V, float T, float *e) {
  const float m = scaled_max_avx2(l, V, T, e);
  const __m256 mv = _mm256_set1_ps(m);
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  int64_t v = 0;
  for (; v + 8 <= V; v += 8) {
    const __m256 x = dsp_avx2_expf(_mm256_sub_ps(_mm256_loadu_ps(e + v), mv));
    _mm256_storeu_ps(e + v, x);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(x)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
  }
  double s[8];
  _mm256_storeu_pd(s, s0), _mm256_storeu_pd(s + 4, s1);
  return finish(e, v, V, m, s);
}

DSP_AVX512 static double row_avx512(const dsp_bf16 *l, int64_t V, float T, float *e) {
  const float m = scaled_max_avx512(l, V, T, e);
  const __m512 mv = _mm512_set1_ps(m);
  __m512d s8 = _mm512_setzero_pd();
  int64_t v = 0;
  for (; v + 16 <= V; v += 16) { /* ids v + j, then v + 8 + j into partial j */
    const __m512 x = dsp_avx512_expf(_mm512_sub_ps(_mm512_loadu_ps(e + v), mv));
    _mm512_storeu_ps(e + v, x);
    s8 = _mm512_add_pd(s8, _mm512_cvtps_pd(_mm512_castps512_ps256(x)));
    s8 = _mm512_add_pd(s8, _mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1)));
  }
  double s[8];
  _mm512_storeu_pd(s, s8);
  for (; v + 8 <= V; v += 8)
    for (int j = 0; j < 8; j++) {
      e[v + j] = dsp_cpu_expf(e[v + j] - m);
      s[j] += (double)e[v + j];
    }
  return finish(e, v, V, m, s);
}

double dsp_cpu_softmax_row(const dsp_bf16 *l, int64_t V, float T, float *e) {
  switch (dsp_cpu_isa_current()) {
    case DSP_CPU_ISA_AVX512: return row_avx512(l, V, T, e);
    case DSP_CPU_ISA_AVX2: return row_avx2(l, V, T, e);
    default: return row_scalar(l, V, T, e);
  }
}
