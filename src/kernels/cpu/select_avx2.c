/* Greedy selection on AVX2, 8 ids at a time: each lane keeps the best order
 * key it has seen and its first id (a later column wins only when strictly
 * better, so among equal keys the lowest id stays), then the lanes' keys meet
 * in core/select.h's 64-bit form. The 32-bit key of a value, biased for
 * signed compares: bits u ^ (sign ? 0x7FFFFFFF : 0), -0 as +0, every NaN on
 * top; that is dsp_select_key's high word with its top bit flipped. */
#include "kernels/cpu/select_avx2.h"

#include "core/select.h"
#include "kernels/cpu/avx2.h"

DSP_AVX2_INLINE __m256i order_key(__m256i u) {
  u = _mm256_andnot_si256(_mm256_cmpeq_epi32(u, _mm256_set1_epi32((int)0x80000000u)), u); /* -0 -> +0 */
  const __m256i k = _mm256_xor_si256(u, _mm256_and_si256(_mm256_srai_epi32(u, 31), _mm256_set1_epi32(0x7FFFFFFF)));
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
  return _mm256_blendv_epi8(k, _mm256_set1_epi32(0x7FFFFFFF), nan);
}

DSP_AVX2 uint64_t dsp_cpu_select_greedy_avx2(const uint16_t *row, int64_t n, int64_t id0) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), empty = _mm256_set1_epi32((int)0x80000000u);
  __m256i bk = empty, bi = _mm256_setzero_si256(); /* empty: below every real key (even -inf's) */
  for (int64_t v = 0; v < n; v += 8) {
    __m128i h;
    if (n - v >= 8) {
      h = _mm_loadu_si128((const __m128i *)(row + v));
    } else {
      uint16_t t[8] = {0};
      for (int64_t i = v; i < n; i++) t[i - v] = row[i];
      h = _mm_loadu_si128((const __m128i *)t);
    }
    __m256i k = order_key(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    k = _mm256_blendv_epi8(empty, k, dsp_avx2_lanes(n - v));
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
