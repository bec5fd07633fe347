/* The AVX2+FMA path: 6 x 16 register tiles (12 ymm accumulators), the same
 * chain as kernel.h. A 32-column panel line is taken as two 16-column halves:
 * the 256-bit half h holds columns 8h..8h+7 (low bf16 of each 32-bit lane) and
 * 16+8h..16+8h+7 (high bf16). Epilogues are the scalar ones. */
#include <immintrin.h>

#include "kernels/cpu/kernel.h"

#define DSP_AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))
#define DSP_AVX2 __attribute__((target("avx2,fma")))

DSP_AVX2_INLINE void sub_tile(const float *ap, int mr, int i0, const int R, const uint16_t *bp, int h, int64_t kc,
                              float *tile, int load, const char *pf) {
  __m256 acc[6][2];
  const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
  if (load) {
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
      acc[i][0] = _mm256_loadu_ps(tile + (i0 + i) * DSP_CPU_NR + 8 * h);
      acc[i][1] = _mm256_loadu_ps(tile + (i0 + i) * DSP_CPU_NR + 16 + 8 * h);
    }
  } else {
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  }
  for (int64_t kk = 0; kk < kc; kk++) {
    __m256i x = _mm256_load_si256((const __m256i *)(bp + kk * DSP_CPU_NR + 16 * h));
    __m256 w0 = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    __m256 w1 = _mm256_castsi256_ps(_mm256_and_si256(x, hi));
    const float *av = ap + kk * mr + i0;
    _mm_prefetch(pf + kk * 64, _MM_HINT_T1);
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
      __m256 a = _mm256_broadcast_ss(av + i);
      acc[i][0] = _mm256_fmadd_ps(a, w0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(a, w1, acc[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < R; i++) {
    _mm256_storeu_ps(tile + (i0 + i) * DSP_CPU_NR + 8 * h, acc[i][0]);
    _mm256_storeu_ps(tile + (i0 + i) * DSP_CPU_NR + 16 + 8 * h, acc[i][1]);
  }
}

#define SUB_FN(n)                                                                                          \
  DSP_AVX2 static void sub_##n(const float *ap, int mr, int i0, const uint16_t *bp, int h, int64_t kc, float *tile, \
                               int load, const char *pf) {                                                         \
    sub_tile(ap, mr, i0, n, bp, h, kc, tile, load, pf);                                                            \
  }
SUB_FN(1) SUB_FN(2) SUB_FN(3) SUB_FN(4) SUB_FN(5) SUB_FN(6)

DSP_AVX2 void dsp_cpu_tile_avx2(const float *ap, int mr, const uint16_t *bp, int64_t kc, float *tile, int load,
                                const void *pfv) {
  for (int i0 = 0; i0 < mr; i0 += 6) {
    int r = mr - i0 < 6 ? mr - i0 : 6;
    for (int h = 0; h < 2; h++) {
      /* Prefetch in the first sub-tile only; the others touch the block read. */
      const char *pf = pfv && i0 == 0 && h == 0 ? (const char *)pfv : (const char *)bp;
      switch (r) {
        case 1: sub_1(ap, mr, i0, bp, h, kc, tile, load, pf); break;
        case 2: sub_2(ap, mr, i0, bp, h, kc, tile, load, pf); break;
        case 3: sub_3(ap, mr, i0, bp, h, kc, tile, load, pf); break;
        case 4: sub_4(ap, mr, i0, bp, h, kc, tile, load, pf); break;
        case 5: sub_5(ap, mr, i0, bp, h, kc, tile, load, pf); break;
        default: sub_6(ap, mr, i0, bp, h, kc, tile, load, pf); break;
      }
    }
  }
}
