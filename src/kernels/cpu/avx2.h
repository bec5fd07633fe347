/* What the CPU kernels' AVX2+FMA paths share: the target attributes, tail
 * masks and an 8 x 8 dword transpose. Include only from files whose callers
 * check dsp_cpu_isa_current() first. */
#ifndef DSP_KERNELS_CPU_AVX2_H
#define DSP_KERNELS_CPU_AVX2_H
#include <immintrin.h>
#include <stdint.h>

#define DSP_AVX2 __attribute__((target("avx2,fma")))
#define DSP_AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

/* All-ones in the first n of 8 lanes (none for n <= 0, all for n >= 8). */
DSP_AVX2_INLINE __m256i dsp_avx2_lanes(int64_t n) {
  const int c = n >= 8 ? 8 : n <= 0 ? 0 : (int)n;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* fp32 rounded to bf16 and back (dsp_round_bf16 on 8 lanes, RNE; NaN canonical). */
DSP_AVX2_INLINE __m256 dsp_avx2_round_bf16(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_slli_epi32(
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16), 16);
  return _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)),
                          _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

/* r[p] lane j = the old r[j] lane p. */
DSP_AVX2_INLINE void dsp_avx2_transpose8(__m256i r[8]) {
  __m256i t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) { /* u[i + c], each 128-bit block: lane c of rows i .. i + 3 */
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    r[c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x31);
  }
}

#endif
