/* gumbel_avx512.h: Philox4x32-10 on 16 lanes, the noise's two logs in
 * double, and the selection keys. */
#include <immintrin.h>

#include "core/philox.h"
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/gumbel_avx512.h"
#include "kernels/cpu/gumbel_bound.h"

/* 32 x 32 -> 64-bit products of every lane: (hi, lo) halves. */
DSP_AVX512_INLINE void mulhilo(__m512i a, uint32_t m, __m512i *hi, __m512i *lo) {
  const __m512i mv = _mm512_set1_epi64((long long)m);
  const __m512i pe = _mm512_mul_epu32(a, mv);                         /* even lanes' 64-bit products */
  const __m512i po = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), mv);  /* odd lanes' */
  *lo = _mm512_mask_blend_epi32((__mmask16)0xAAAA, pe, _mm512_slli_epi64(po, 32));
  *hi = _mm512_mask_blend_epi32((__mmask16)0xAAAA, _mm512_srli_epi64(pe, 32), po);
}

/* Word 0 of Philox4x32-10 for counters (c0[lane], c1, c2, c3), key (k0, k1). */
DSP_AVX512_INLINE __m512i philox_w0(__m512i c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  __m512i x0 = c0, x1 = _mm512_set1_epi32((int)c1), x2 = _mm512_set1_epi32((int)c2), x3 = _mm512_set1_epi32((int)c3);
  for (int r = 0; r < 10; r++) {
    if (r) k0 += DSP_PHILOX_W0, k1 += DSP_PHILOX_W1;
    __m512i hi0, lo0, hi1, lo1;
    mulhilo(x0, DSP_PHILOX_M0, &hi0, &lo0);
    mulhilo(x2, DSP_PHILOX_M1, &hi1, &lo1);
    x0 = _mm512_xor_si512(_mm512_xor_si512(hi1, x1), _mm512_set1_epi32((int)k0));
    x1 = lo1;
    x2 = _mm512_xor_si512(_mm512_xor_si512(hi0, x3), _mm512_set1_epi32((int)k1));
    x3 = lo0;
  }
  return x0;
}

/* log(x) for positive normal x, within a few ulps: x = 2^e m, m in
 * [sqrt(2)/2, sqrt(2)), s = (m - 1) / (m + 1), log m = 2 atanh s by its series
 * to s^21 (|s| <= 0.1716: the rest is below 2^-56 of it), e ln 2 in two parts. */
DSP_AVX512_INLINE __m512d log8(__m512d x) {
  const __m512i bits = _mm512_castpd_si512(x);
  __m512i e = _mm512_sub_epi64(_mm512_srli_epi64(bits, 52), _mm512_set1_epi64(1023));
  __m512d m = _mm512_castsi512_pd(_mm512_or_si512(_mm512_and_si512(bits, _mm512_set1_epi64(0x000FFFFFFFFFFFFFll)),
                                                  _mm512_set1_epi64(0x3FF0000000000000ll)));
  const __mmask8 big = _mm512_cmp_pd_mask(m, _mm512_set1_pd(0x1.6a09e667f3bcdp0), _CMP_GT_OQ);
  m = _mm512_mask_mul_pd(m, big, m, _mm512_set1_pd(0.5));
  e = _mm512_mask_add_epi64(e, big, e, _mm512_set1_epi64(1));
  const __m512d one = _mm512_set1_pd(1.0);
  const __m512d s = _mm512_div_pd(_mm512_sub_pd(m, one), _mm512_add_pd(m, one)), z = _mm512_mul_pd(s, s);
  __m512d p = _mm512_set1_pd(1.0 / 21);
  for (int k = 19; k >= 1; k -= 2) p = _mm512_fmadd_pd(p, z, _mm512_set1_pd(1.0 / k));
  const __m512d lm = _mm512_mul_pd(_mm512_add_pd(s, s), p);
  const __m512d ed = _mm512_cvtepi64_pd(e);
  /* ln 2 = hi + lo, hi with its low 32 bits zero (e * hi exact for |e| < 2^20) */
  const __m512d hi = _mm512_set1_pd(0x1.62e42fefa0000p-1), lo = _mm512_set1_pd(0x1.cf79abc9e3b3ap-40);
  return _mm512_add_pd(_mm512_mul_pd(ed, hi), _mm512_fmadd_pd(ed, lo, lm));
}

/* g from 8 first words; returns the lanes whose float rounding is too close
 * to call (for a scalar recomputation). */
DSP_AVX512_INLINE __m256 noise8(__m256i r, __mmask8 *near) {
  const __m512d u = _mm512_mul_pd(_mm512_add_pd(_mm512_cvtepu32_pd(r), _mm512_set1_pd(0.5)),
                                  _mm512_set1_pd(0x1p-32));
  const __m512d x1 = _mm512_sub_pd(_mm512_setzero_pd(), log8(u));
  const __m512d y = _mm512_sub_pd(_mm512_setzero_pd(), log8(x1));
  const __m256 f = _mm512_cvtpd_ps(y);
  /* |y - f| must stay below half an ulp of f by more than both logs' error
   * (about 2^-50 (1 + |y|) here, 2^-52 (1 + |y|) in libm) */
  const __m512d fd = _mm512_cvtps_pd(f);
  const __m512d ulp = _mm512_castsi512_pd(_mm512_sub_epi64(
      _mm512_and_si512(_mm512_castpd_si512(fd), _mm512_set1_epi64(0x7FF0000000000000ll)), _mm512_set1_epi64(23ll << 52)));
  const __m512d tol = _mm512_mul_pd(_mm512_add_pd(_mm512_set1_pd(1.0), _mm512_abs_pd(y)), _mm512_set1_pd(0x1p-46));
  const __m512d room = _mm512_sub_pd(_mm512_mul_pd(ulp, _mm512_set1_pd(0.5)), tol);
  const __m512d dist = _mm512_abs_pd(_mm512_sub_pd(y, fd));
  const __mmask8 tiny = _mm512_cmp_pd_mask(_mm512_abs_pd(fd), _mm512_set1_pd(0x1p-100), _CMP_LT_OQ);
  *near = (__mmask8)(_mm512_cmp_pd_mask(dist, room, _CMP_NLT_UQ) | tiny);
  return f;
}

DSP_AVX512 int dsp_cpu_gumbel_from_r16_avx512(const uint32_t *r, float *g) {
  const __m512i rv = _mm512_loadu_si512(r);
  __mmask8 n0, n1;
  _mm256_storeu_ps(g, noise8(_mm512_castsi512_si256(rv), &n0));
  _mm256_storeu_ps(g + 8, noise8(_mm512_extracti64x4_epi64(rv, 1), &n1));
  const unsigned near = (unsigned)n0 | ((unsigned)n1 << 8);
  for (int i = 0; i < 16; i++)
    if (near >> i & 1) g[i] = dsp_gumbel_of_word(r[i]);
  return __builtin_popcount(near);
}

/* Whether ids id0 .. id0 + 15 share Philox's second counter word (the high word of the id). */
static int one_high_word(int64_t id0) { return id0 >= 0 && ((uint64_t)id0 & 0xFFFFFFFFu) + 16 <= 0x100000000ull; }

/* Philox's first words of ids id0 .. id0 + 15 (one_high_word(id0)). */
DSP_AVX512_INLINE __m512i words16(uint64_t seed, int64_t position, int64_t id0) {
  const __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)(uint64_t)id0),
                                      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  return philox_w0(c0, (uint32_t)((uint64_t)id0 >> 32), (uint32_t)(uint64_t)position,
                   (uint32_t)((uint64_t)position >> 32), (uint32_t)seed, (uint32_t)(seed >> 32));
}

DSP_AVX512 int dsp_cpu_gumbel16_avx512(uint64_t seed, int64_t position, int64_t id0, int n, float *g) {
  if (!one_high_word(id0)) { /* the lanes' high words would differ */
    for (int i = 0; i < n; i++) g[i] = dsp_gumbel(seed, position, id0 + i);
    return n;
  }
  uint32_t r[16];
  _mm512_storeu_si512(r, words16(seed, position, id0));
  float t[16];
  const int redone = dsp_cpu_gumbel_from_r16_avx512(r, t);
  for (int i = 0; i < n; i++) g[i] = t[i];
  return redone;
}

/* core/select.h's key on 16 lanes: the value's order in the high 32 bits (-0
 * onto +0, NaN on top), ~id in the low 32. */
DSP_AVX512_INLINE __m512i keys_max(__m512i best, __m512 x, __mmask16 m, uint32_t id) {
  const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i u = _mm512_castps_si512(x);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  u = _mm512_mask_mov_epi32(u, _mm512_cmpeq_epi32_mask(u, sign), _mm512_setzero_si512());
  const __mmask16 neg = _mm512_test_epi32_mask(u, sign);
  __m512i o = _mm512_mask_mov_epi32(_mm512_or_si512(u, sign), neg, _mm512_xor_si512(u, _mm512_set1_epi32(-1)));
  o = _mm512_mask_mov_epi32(o, nan, _mm512_set1_epi32(-1));
  const __m512i ids = _mm512_xor_si512(_mm512_add_epi32(lane, _mm512_set1_epi32((int)id)), _mm512_set1_epi32(-1));
  /* (~id, order) pairs as 64-bit keys: unpacklo holds elements 0 1 4 5 8 9 12 13, unpackhi the rest */
  const __m512i klo = _mm512_unpacklo_epi32(ids, o), khi = _mm512_unpackhi_epi32(ids, o);
  const unsigned mm = m;
  const __mmask8 mlo = (__mmask8)((mm & 3) | ((mm >> 4 & 3) << 2) | ((mm >> 8 & 3) << 4) | ((mm >> 12 & 3) << 6));
  const __mmask8 mhi = (__mmask8)((mm >> 2 & 3) | ((mm >> 6 & 3) << 2) | ((mm >> 10 & 3) << 4) | ((mm >> 14 & 3) << 6));
  best = _mm512_max_epu64(best, _mm512_maskz_mov_epi64(mlo, klo));
  return _mm512_max_epu64(best, _mm512_maskz_mov_epi64(mhi, khi));
}

DSP_AVX512_INLINE __m512 row16(const void *row, int f32, int64_t v, __mmask16 m) {
  return f32 ? _mm512_maskz_loadu_ps(m, (const float *)row + v)
             : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + v)), 16));
}

/* T > 0, pass 1: the largest number among x / T (-inf if none) and the block of 16 holding it. */
DSP_AVX512 static float top_q(const void *row, int f32, int64_t n, __m512 tv, int64_t *top_block) {
  float top = -INFINITY;
  *top_block = 0;
  for (int64_t v = 0; v < n; v += 16) {
    const __mmask16 m = dsp_avx512_lanes(n - v);
    const __m512 q = _mm512_div_ps(row16(row, f32, v, m), tv);
    const float b = _mm512_mask_reduce_max_ps(m & _mm512_cmp_ps_mask(q, q, _CMP_ORD_Q), q);
    if (b > top) top = b, *top_block = v;
  }
  return top;
}

/* Sampling: the winner's value is at least every value already computed and
 * the top x / T plus the noise's lowest (the floor, a float). A block whose
 * lanes cannot reach it is skipped: fp32(x / T + g) <= fp32(qmax + G) for any
 * float G above the block's noise (roundings are monotonic), first with G =
 * DSP_GUMBEL_HI (no Philox), then with the bound of its largest Philox word
 * (no logs). The block holding the top x / T runs first, to raise the floor.
 * A block with a NaN always runs (a NaN wins). */
DSP_AVX512 static uint64_t select_sampled(const void *row, int f32, int64_t n, float T, uint64_t seed,
                                          int64_t position, int64_t id0) {
  const __m512 tv = _mm512_set1_ps(T);
  int64_t first;
  float floor = top_q(row, f32, n, tv, &first) + DSP_GUMBEL_LO;
  __m512i best = _mm512_setzero_si512();
  for (int64_t i = -16; i < n; i += 16) {
    const int64_t v = i < 0 ? first : i;
    if (i == first) continue;
    const __mmask16 m = dsp_avx512_lanes(n - v);
    const __m512 q = _mm512_div_ps(row16(row, f32, v, m), tv);
    const __mmask16 num = m & _mm512_cmp_ps_mask(q, q, _CMP_ORD_Q);
    const float qb = _mm512_mask_reduce_max_ps(num, q);
    float g[16];
    if (num != m || !one_high_word(id0 + v)) {
      dsp_cpu_gumbel16_avx512(seed, position, id0 + v, 16, g);
    } else {
      if (qb + DSP_GUMBEL_HI < floor) continue;
      uint32_t r[16];
      const __m512i w = words16(seed, position, id0 + v);
      if (qb + dsp_gumbel_bound((uint32_t)_mm512_mask_reduce_max_epu32(m, w)) < floor) continue;
      _mm512_storeu_si512(r, w);
      dsp_cpu_gumbel_from_r16_avx512(r, g);
    }
    const __m512 x = _mm512_add_ps(q, _mm512_loadu_ps(g)); /* two roundings, never fused */
    const float xb = _mm512_mask_reduce_max_ps(m & _mm512_cmp_ps_mask(x, x, _CMP_ORD_Q), x);
    if (xb > floor) floor = xb;
    best = keys_max(best, x, m, (uint32_t)(id0 + v));
  }
  return (uint64_t)_mm512_reduce_max_epu64(best);
}

DSP_AVX512 uint64_t dsp_cpu_select_avx512(const void *row, int f32, int64_t n, float T, uint64_t seed,
                                          int64_t position, int64_t id0) {
  if (T > 0.0f) return n > 0 ? select_sampled(row, f32, n, T, seed, position, id0) : 0;
  __m512i best = _mm512_setzero_si512();
  for (int64_t v = 0; v < n; v += 16) {
    const __mmask16 m = dsp_avx512_lanes(n - v);
    best = keys_max(best, row16(row, f32, v, m), m, (uint32_t)(id0 + v));
  }
  return (uint64_t)_mm512_reduce_max_epu64(best);
}
