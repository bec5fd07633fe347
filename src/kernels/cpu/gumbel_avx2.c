/* gumbel_avx2.h: Philox4x32-10 on 8 lanes, the noise's two logs in double
 * (4 lanes at a time), and the selection keys. */
#include "kernels/cpu/gumbel_avx2.h"

#include "core/philox.h"
#include "core/select.h"
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/gumbel_bound.h"

/* 32 x 32 -> 64-bit products of every lane: (hi, lo) halves. */
DSP_AVX2_INLINE void mulhilo(__m256i a, uint32_t m, __m256i *hi, __m256i *lo) {
  const __m256i mv = _mm256_set1_epi64x((long long)m);
  const __m256i pe = _mm256_mul_epu32(a, mv);                        /* even lanes' 64-bit products */
  const __m256i po = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), mv); /* odd lanes' */
  *lo = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xAA);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
}

/* Word 0 of Philox4x32-10 for counters (c0[lane], c1, c2, c3), key (k0, k1). */
DSP_AVX2_INLINE __m256i philox_w0(__m256i c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  __m256i x0 = c0, x1 = _mm256_set1_epi32((int)c1), x2 = _mm256_set1_epi32((int)c2), x3 = _mm256_set1_epi32((int)c3);
  for (int r = 0; r < 10; r++) {
    if (r) k0 += DSP_PHILOX_W0, k1 += DSP_PHILOX_W1;
    __m256i hi0, lo0, hi1, lo1;
    mulhilo(x0, DSP_PHILOX_M0, &hi0, &lo0);
    mulhilo(x2, DSP_PHILOX_M1, &hi1, &lo1);
    x0 = _mm256_xor_si256(_mm256_xor_si256(hi1, x1), _mm256_set1_epi32((int)k0));
    x1 = lo1;
    x2 = _mm256_xor_si256(_mm256_xor_si256(hi0, x3), _mm256_set1_epi32((int)k1));
    x3 = lo0;
  }
  return x0;
}

/* log(x[j]) for positive normal x, j < NV: gumbel_avx512.c's log8 (the same steps and constants) on 4 lanes,
 * each step across all NV vectors so that their dependent chains (a division, a 10-step polynomial) overlap. */
DSP_AVX2_INLINE void logv(__m256d *x, const int NV) {
  __m256d m[4], s[4], z[4], p[4];
  __m256i e[4];
  const __m256d one = _mm256_set1_pd(1.0);
#pragma GCC unroll 4
  for (int j = 0; j < NV; j++) {
    const __m256i bits = _mm256_castpd_si256(x[j]);
    e[j] = _mm256_sub_epi64(_mm256_srli_epi64(bits, 52), _mm256_set1_epi64x(1023));
    m[j] = _mm256_castsi256_pd(_mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi64x(0x000FFFFFFFFFFFFFll)),
                                               _mm256_set1_epi64x(0x3FF0000000000000ll)));
    const __m256d big = _mm256_cmp_pd(m[j], _mm256_set1_pd(0x1.6a09e667f3bcdp0), _CMP_GT_OQ);
    m[j] = _mm256_blendv_pd(m[j], _mm256_mul_pd(m[j], _mm256_set1_pd(0.5)), big);
    e[j] = _mm256_add_epi64(e[j], _mm256_and_si256(_mm256_castpd_si256(big), _mm256_set1_epi64x(1)));
    s[j] = _mm256_div_pd(_mm256_sub_pd(m[j], one), _mm256_add_pd(m[j], one));
    z[j] = _mm256_mul_pd(s[j], s[j]);
    p[j] = _mm256_set1_pd(1.0 / 21);
  }
  for (int k = 19; k >= 1; k -= 2)
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++) p[j] = _mm256_fmadd_pd(p[j], z[j], _mm256_set1_pd(1.0 / k));
#pragma GCC unroll 4
  for (int j = 0; j < NV; j++) {
    const __m256d lm = _mm256_mul_pd(_mm256_add_pd(s[j], s[j]), p[j]);
    /* e is small (|e| < 1100): its low 32-bit words as int32, exactly converted */
    const __m128i e32 =
        _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(e[j], _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
    const __m256d ed = _mm256_cvtepi32_pd(e32);
    const __m256d hi = _mm256_set1_pd(0x1.62e42fefa0000p-1), lo = _mm256_set1_pd(0x1.cf79abc9e3b3ap-40);
    x[j] = _mm256_add_pd(_mm256_mul_pd(ed, hi), _mm256_fmadd_pd(ed, lo, lm));
  }
}

DSP_AVX2_INLINE __m256d abs_pd(__m256d x) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), x); }

/* g from 8 NV first words (NV / 2 vectors of 8 words, 4 lanes per double vector); returns the lanes (bits) whose
 * float rounding is too close to call, recomputed there by dsp_gumbel_of_word. */
DSP_AVX2_INLINE unsigned noise(const uint32_t *r, float *g, const int NV) {
  __m256d y[4];
#pragma GCC unroll 4
  for (int j = 0; j < NV; j++) { /* (double)r for unsigned r: the low 31 bits exactly, plus 2^31 where the top bit is set */
    const __m128i rv = _mm_loadu_si128((const __m128i *)(r + 4 * j));
    const __m256d rlo = _mm256_cvtepi32_pd(_mm_and_si128(rv, _mm_set1_epi32(0x7FFFFFFF)));
    const __m256d rtop = _mm256_and_pd(_mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_srai_epi32(rv, 31))),
                                       _mm256_set1_pd(2147483648.0));
    y[j] = _mm256_mul_pd(_mm256_add_pd(_mm256_add_pd(rlo, rtop), _mm256_set1_pd(0.5)), _mm256_set1_pd(0x1p-32));
  }
  logv(y, NV);
#pragma GCC unroll 4
  for (int j = 0; j < NV; j++) y[j] = _mm256_sub_pd(_mm256_setzero_pd(), y[j]);
  logv(y, NV);
  unsigned near = 0;
#pragma GCC unroll 4
  for (int j = 0; j < NV; j++) {
    y[j] = _mm256_sub_pd(_mm256_setzero_pd(), y[j]);
    const __m128 f = _mm256_cvtpd_ps(y[j]);
    _mm_storeu_ps(g + 4 * j, f);
    /* |y - f| must stay below half an ulp of f by more than both logs' error (gumbel_avx512.c's bound) */
    const __m256d fd = _mm256_cvtps_pd(f);
    const __m256d ulp = _mm256_castsi256_pd(_mm256_sub_epi64(
        _mm256_and_si256(_mm256_castpd_si256(fd), _mm256_set1_epi64x(0x7FF0000000000000ll)),
        _mm256_set1_epi64x(23ll << 52)));
    const __m256d tol = _mm256_mul_pd(_mm256_add_pd(_mm256_set1_pd(1.0), abs_pd(y[j])), _mm256_set1_pd(0x1p-46));
    const __m256d room = _mm256_sub_pd(_mm256_mul_pd(ulp, _mm256_set1_pd(0.5)), tol);
    const __m256d dist = abs_pd(_mm256_sub_pd(y[j], fd));
    const __m256d tiny = _mm256_cmp_pd(abs_pd(fd), _mm256_set1_pd(0x1p-100), _CMP_LT_OQ);
    near |= (unsigned)_mm256_movemask_pd(_mm256_or_pd(_mm256_cmp_pd(dist, room, _CMP_NLT_UQ), tiny)) << (4 * j);
  }
  for (int i = 0; i < 4 * NV; i++)
    if (near >> i & 1) g[i] = dsp_gumbel_of_word(r[i]);
  return near;
}

DSP_AVX2 int dsp_cpu_gumbel_from_r8_avx2(const uint32_t *r, float *g) { return __builtin_popcount(noise(r, g, 2)); }

/* Philox's first words of ids id0 .. id0 + 8 NB - 1 (id0's high word shared by all) into r. */
DSP_AVX2_INLINE void words(uint64_t seed, int64_t position, int64_t id0, uint32_t *r, const int NB) {
  const uint32_t lo = (uint32_t)(uint64_t)id0;
#pragma GCC unroll 2
  for (int b = 0; b < NB; b++) {
    const __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32((int)(lo + 8u * (uint32_t)b)),
                                        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_storeu_si256((__m256i *)(r + 8 * b),
                        philox_w0(c0, (uint32_t)((uint64_t)id0 >> 32), (uint32_t)(uint64_t)position,
                                  (uint32_t)((uint64_t)position >> 32), (uint32_t)seed, (uint32_t)(seed >> 32)));
  }
}

/* g[i] = dsp_gumbel(seed, position, id0 + i), i < 16 (ids whose low words do not wrap), two vectors of 8 in step. */
DSP_AVX2_INLINE void gumbel16(uint64_t seed, int64_t position, int64_t id0, float *g) {
  uint32_t r[16];
  words(seed, position, id0, r, 2);
  noise(r, g, 4);
}

DSP_AVX2 int dsp_cpu_gumbel8_avx2(uint64_t seed, int64_t position, int64_t id0, int n, float *g) {
  const uint64_t lo = (uint64_t)id0 & 0xFFFFFFFFu;
  if (id0 < 0 || lo + 8 > 0x100000000ull) { /* the lanes' high words would differ */
    for (int i = 0; i < n; i++) g[i] = dsp_gumbel(seed, position, id0 + i);
    return n;
  }
  uint32_t r[8];
  words(seed, position, id0, r, 1);
  float t[8];
  const int redone = __builtin_popcount(noise(r, t, 2));
  for (int i = 0; i < n; i++) g[i] = t[i];
  return redone;
}

/* The 32-bit order key of a value, biased for signed compares: bits u ^ (sign ? 0x7FFFFFFF : 0), -0 as +0,
 * every NaN on top; that is dsp_select_key's high word with its top bit flipped. */
DSP_AVX2_INLINE __m256i order_key(__m256 x) {
  __m256i u = _mm256_castps_si256(x);
  u = _mm256_andnot_si256(_mm256_cmpeq_epi32(u, _mm256_set1_epi32((int)0x80000000u)), u); /* -0 -> +0 */
  const __m256i k = _mm256_xor_si256(u, _mm256_and_si256(_mm256_srai_epi32(u, 31), _mm256_set1_epi32(0x7FFFFFFF)));
  return _mm256_blendv_epi8(k, _mm256_set1_epi32(0x7FFFFFFF), _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
}

/* Row values v .. v + m - 1 (m <= 8) as floats, the lanes past m zero. */
DSP_AVX2_INLINE __m256 row8(const void *row, int f32, int64_t v, int64_t m) {
  if (f32) {
    float t[8] = {0};
    for (int64_t i = 0; m < 8 && i < m; i++) t[i] = ((const float *)row)[v + i];
    return _mm256_loadu_ps(m == 8 ? (const float *)row + v : t);
  }
  uint16_t t[8] = {0};
  for (int64_t i = 0; m < 8 && i < m; i++) t[i] = ((const uint16_t *)row)[v + i];
  const __m128i h = _mm_loadu_si128((const __m128i *)(m == 8 ? (const uint16_t *)row + v : t));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The largest number among x / T over live lanes m of one half (-inf if none); *nan |= a live NaN. */
DSP_AVX2_INLINE float half_top(__m256 q, int64_t m, int *nan) {
  const __m256 live = _mm256_castsi256_ps(dsp_avx2_lanes(m)), ord = _mm256_cmp_ps(q, q, _CMP_ORD_Q);
  *nan |= _mm256_movemask_ps(_mm256_andnot_ps(ord, live)) != 0;
  float t[8], top = -INFINITY;
  _mm256_storeu_ps(t, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), q, _mm256_and_ps(live, ord)));
  for (int l = 0; l < 8; l++) top = t[l] > top ? t[l] : top;
  return top;
}

/* The noise of ids id0 .. id0 + 15 into g16 (from the words r when have_r). */
DSP_AVX2_INLINE void noise16(uint64_t seed, int64_t position, int64_t id0, const uint32_t *r, int have_r, float *g16) {
  const uint64_t lo = (uint64_t)id0 & 0xFFFFFFFFu;
  if (have_r) noise(r, g16, 4);
  else if (id0 >= 0 && lo + 16 <= 0x100000000ull) gumbel16(seed, position, id0, g16);
  else dsp_cpu_gumbel8_avx2(seed, position, id0, 8, g16), dsp_cpu_gumbel8_avx2(seed, position, id0 + 8, 8, g16 + 8);
}

/* Sampling's floor (gumbel_avx512.c, select_sampled): the top x / T plus the noise's lowest, raised by the
 * values of the 16 ids holding that top (computed here once more: this form keeps the lowest id among equal
 * keys by taking ids in order). */
DSP_AVX2 static float sampled_floor(const void *row, int f32, int64_t n, __m256 tv, uint64_t seed, int64_t position,
                                    int64_t id0) {
  float top = -INFINITY, g16[16];
  int64_t first = 0;
  int nan = 0;
  for (int64_t v = 0; v < n; v += 8) {
    const int64_t m = n - v < 8 ? n - v : 8;
    const float b = half_top(_mm256_div_ps(row8(row, f32, v, m), tv), m, &nan);
    if (b > top) top = b, first = v & ~(int64_t)15;
  }
  float floor = top + DSP_GUMBEL_LO;
  if (top == -INFINITY) return floor;
  noise16(seed, position, id0 + first, NULL, 0, g16);
  for (int64_t v = first; v < first + 16 && v < n; v += 8) {
    const int64_t m = n - v < 8 ? n - v : 8;
    const __m256 x = _mm256_add_ps(_mm256_div_ps(row8(row, f32, v, m), tv), _mm256_loadu_ps(g16 + (v - first)));
    const float xb = half_top(x, m, &nan);
    floor = xb > floor ? xb : floor;
  }
  return floor;
}

/* Whether ids v .. v + 15 may still reach the floor: any NaN among them, else fp32(qmax + G) not below it for G
 * = DSP_GUMBEL_HI, then for G the bound of their largest Philox word (left in r, *have_r set, for the noise). */
DSP_AVX2 static int may_win16(const void *row, int f32, int64_t n, int64_t v, __m256 tv, float floor, uint64_t seed,
                              int64_t position, int64_t id0, uint32_t *r, int *have_r) {
  float qb = -INFINITY;
  int nan = 0;
  for (int64_t h = v; h < v + 16 && h < n; h += 8) {
    const int64_t m = n - h < 8 ? n - h : 8;
    const float b = half_top(_mm256_div_ps(row8(row, f32, h, m), tv), m, &nan);
    qb = b > qb ? b : qb;
  }
  *have_r = 0;
  const uint64_t lo = (uint64_t)(id0 + v) & 0xFFFFFFFFu;
  if (nan || id0 + v < 0 || lo + 16 > 0x100000000ull) return 1;
  if (qb + DSP_GUMBEL_HI < floor) return 0;
  words(seed, position, id0 + v, r, 2);
  *have_r = 1;
  uint32_t wmax = 0;
  for (int64_t i = 0; i < 16 && v + i < n; i++) wmax = r[i] > wmax ? r[i] : wmax;
  return !(qb + dsp_gumbel_bound(wmax) < floor);
}

/* Each lane keeps the best key it has seen and its first id (a later column wins only when strictly better, so
 * among equal keys the lowest id stays); then the lanes meet in core/select.h's 64-bit form. */
DSP_AVX2 uint64_t dsp_cpu_select_avx2(const void *row, int f32, int64_t n, float T, uint64_t seed, int64_t position,
                                      int64_t id0) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), empty = _mm256_set1_epi32((int)0x80000000u);
  const __m256 tv = _mm256_set1_ps(T);
  __m256i bk = empty, bi = _mm256_setzero_si256(); /* empty: below every real key (even -inf's) */
  float g16[16];
  float floor = T > 0.0f && n > 0 ? sampled_floor(row, f32, n, tv, seed, position, id0) : 0.0f;
  for (int64_t v = 0; v < n; v += 8) {
    const int64_t m = n - v < 8 ? n - v : 8;
    __m256 x = row8(row, f32, v, m);
    if (T > 0.0f) {
      if (v % 16 == 0) { /* the noise of this and the next 8 ids at once, unless none of them can win */
        uint32_t r[16];
        int have_r;
        if (!may_win16(row, f32, n, v, tv, floor, seed, position, id0, r, &have_r)) {
          v += 8;
          continue;
        }
        noise16(seed, position, id0 + v, r, have_r, g16);
      }
      x = _mm256_add_ps(_mm256_div_ps(x, tv), _mm256_loadu_ps(g16 + v % 16)); /* two roundings, never fused */
      int nan = 0;
      const float xb = half_top(x, m, &nan);
      floor = xb > floor ? xb : floor;
    }
    const __m256i k = _mm256_blendv_epi8(empty, order_key(x), dsp_avx2_lanes(m));
    const __m256i take = _mm256_cmpgt_epi32(k, bk);
    bk = _mm256_blendv_epi8(bk, k, take);
    bi = _mm256_blendv_epi8(bi, _mm256_add_epi32(lane, _mm256_set1_epi32((int)v)), take);
  }
  int32_t ks[8], is[8];
  _mm256_storeu_si256((__m256i *)ks, bk);
  _mm256_storeu_si256((__m256i *)is, bi);
  uint64_t best = 0;
  for (int l = 0; l < 8; l++) {
    if ((uint32_t)ks[l] == 0x80000000u) continue;
    const uint64_t key = ((uint64_t)((uint32_t)ks[l] ^ 0x80000000u) << 32) | (uint32_t)~(uint32_t)(id0 + is[l]);
    best = key > best ? key : best;
  }
  return best;
}
