/* The AVX2+FMA path, the same chain as kernel.h. A 32-column panel line is
 * taken as two 16-column halves: the 256-bit half h holds columns 8h..8h+7
 * (low bf16 of each 32-bit lane) and 16+8h..16+8h+7 (high bf16), two
 * accumulators per row. Three or more rows run a half at a time (6 to 12
 * accumulators; 3 rows over a whole panel would need all 16 registers and
 * spill); one or two rows take the whole panel, and one row two panels, so
 * that 8 independent chains hide the multiply-add latency. Epilogues
 * are the scalar ones but for the plain store. */
#include <immintrin.h>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/kernel.h"

/* Rows i0 .. i0 + R - 1 over NH halves: NH 1 is half h0 of panel b0, NH 2 all
 * of b0, NH 4 all of b0 then all of b1 (into t0, t1). */
DSP_AVX2_INLINE void tile_h(const float *ap, int mr, int i0, const int R, const int NH, int h0, const uint16_t *b0,
                            const uint16_t *b1, int64_t kc, float *t0, float *t1, int load, const char *pf0,
                            const char *pf1) {
  __m256 acc[6][8];
  const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
#pragma GCC unroll 6
  for (int i = 0; i < R; i++)
#pragma GCC unroll 4
    for (int u = 0; u < NH; u++) {
      const int h = NH == 1 ? h0 : u & 1;
      const float *t = (u >> 1 ? t1 : t0) + (i0 + i) * DSP_CPU_NR;
      acc[i][2 * u] = load ? _mm256_loadu_ps(t + 8 * h) : _mm256_setzero_ps();
      acc[i][2 * u + 1] = load ? _mm256_loadu_ps(t + 16 + 8 * h) : _mm256_setzero_ps();
    }
  for (int64_t kk = 0; kk < kc; kk++) {
    const float *av = ap + kk * mr + i0;
    _mm_prefetch(pf0 + kk * 64, _MM_HINT_T1);
    if (NH == 4) _mm_prefetch(pf1 + kk * 64, _MM_HINT_T1);
#pragma GCC unroll 4
    for (int u = 0; u < NH; u++) {
      const int h = NH == 1 ? h0 : u & 1;
      const __m256i x = _mm256_load_si256((const __m256i *)((u >> 1 ? b1 : b0) + kk * DSP_CPU_NR + 16 * h));
      const __m256 w0 = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
      const __m256 w1 = _mm256_castsi256_ps(_mm256_and_si256(x, hi));
#pragma GCC unroll 6
      for (int i = 0; i < R; i++) {
        const __m256 a = _mm256_broadcast_ss(av + i);
        acc[i][2 * u] = _mm256_fmadd_ps(a, w0, acc[i][2 * u]);
        acc[i][2 * u + 1] = _mm256_fmadd_ps(a, w1, acc[i][2 * u + 1]);
      }
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < R; i++)
#pragma GCC unroll 4
    for (int u = 0; u < NH; u++) {
      const int h = NH == 1 ? h0 : u & 1;
      float *t = (u >> 1 ? t1 : t0) + (i0 + i) * DSP_CPU_NR;
      _mm256_storeu_ps(t + 8 * h, acc[i][2 * u]);
      _mm256_storeu_ps(t + 16 + 8 * h, acc[i][2 * u + 1]);
    }
}

/* The shapes used, each with its constants so that the loops unroll and acc stays in registers. */
#define HALF_FN(n)                                                                                                  \
  DSP_AVX2 static void half_##n(const float *ap, int mr, int i0, int h, const uint16_t *bp, int64_t kc, float *tile, \
                                int load, const char *pf) {                                                         \
    tile_h(ap, mr, i0, n, 1, h, bp, bp, kc, tile, tile, load, pf, pf);                                              \
  }
HALF_FN(3) HALF_FN(4) HALF_FN(5) HALF_FN(6)
#define FULL_FN(n)                                                                                                  \
  DSP_AVX2 static void full_##n(const float *ap, int mr, int i0, const uint16_t *bp, int64_t kc, float *tile,       \
                                int load, const char *pf) {                                                         \
    tile_h(ap, mr, i0, n, 2, 0, bp, bp, kc, tile, tile, load, pf, pf);                                              \
  }
FULL_FN(1) FULL_FN(2)

DSP_AVX2 void dsp_cpu_tile_avx2(const float *ap, int mr, const uint16_t *bp, int64_t kc, float *tile, int load,
                                const void *pfv) {
  for (int i0 = 0; i0 < mr; i0 += 6) {
    const int r = mr - i0 < 6 ? mr - i0 : 6;
    /* Prefetch in the first pass only; the others touch the block read. */
    const char *pf = pfv && i0 == 0 ? (const char *)pfv : (const char *)bp;
    switch (r) {
      case 1: full_1(ap, mr, i0, bp, kc, tile, load, pf); break;
      case 2: full_2(ap, mr, i0, bp, kc, tile, load, pf); break;
      default:
        for (int h = 0; h < 2; h++) {
          const char *p = h ? (const char *)bp : pf;
          if (r == 3) half_3(ap, mr, i0, h, bp, kc, tile, load, p);
          else if (r == 4) half_4(ap, mr, i0, h, bp, kc, tile, load, p);
          else if (r == 5) half_5(ap, mr, i0, h, bp, kc, tile, load, p);
          else half_6(ap, mr, i0, h, bp, kc, tile, load, p);
        }
    }
  }
}

DSP_AVX2 static void pair_1(const float *ap, const uint16_t *b0, const uint16_t *b1, int64_t kc, float *t0, float *t1,
                            int load, const char *p0, const char *p1) {
  tile_h(ap, 1, 0, 1, 4, 0, b0, b1, kc, t0, t1, load, p0, p1);
}

DSP_AVX2 void dsp_cpu_tile2_avx2(const float *ap, int mr, const uint16_t *bp0, const uint16_t *bp1, int64_t kc,
                                 float *tile0, float *tile1, int load, const void *pf0, const void *pf1) {
  if (mr > 1) { /* two rows or more already fill the registers with one panel */
    dsp_cpu_tile_avx2(ap, mr, bp0, kc, tile0, load, pf0);
    dsp_cpu_tile_avx2(ap, mr, bp1, kc, tile1, load, pf1);
    return;
  }
  /* No prefetch wanted: touch the blocks being read (already in L1). */
  pair_1(ap, bp0, bp1, kc, tile0, tile1, load, pf0 ? (const char *)pf0 : (const char *)bp0,
         pf1 ? (const char *)pf1 : (const char *)bp1);
}

/* dsp_cpu_store_scalar's results: whole 8-column groups as vectors, the rest by it. */
DSP_AVX2 void dsp_cpu_store_avx2(const float *tile, int mr, int ncols, void *c0, dsp_dtype dt, int64_t rs, int64_t cs) {
  const int nv = cs == 1 ? ncols / 8 : 0;
  for (int i = 0; i < mr; i++) {
    const float *t = tile + i * DSP_CPU_NR;
    for (int v = 0; v < nv; v++) {
      const __m256 x = _mm256_loadu_ps(t + 8 * v);
      const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
      if (dt == DSP_BF16) {
        const __m256i u = _mm256_castps_si256(x);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
        r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(nan));
        _mm_storeu_si128((__m128i *)((uint16_t *)c0 + i * rs + 8 * v),
                         _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
      } else {
        _mm256_storeu_ps((float *)c0 + i * rs + 8 * v,
                         _mm256_blendv_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)), nan));
      }
    }
  }
  if (nv * 8 < ncols) {
    const size_t es = dt == DSP_BF16 ? 2 : 4;
    dsp_cpu_store_scalar(tile + nv * 8, mr, ncols - nv * 8, (char *)c0 + (size_t)(nv * 8 * cs) * es, dt, rs, cs);
  }
}
