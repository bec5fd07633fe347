/* The AVX-512F path: a 12 x 32 register tile (24 zmm accumulators), one fused
 * multiply-add per output per k (the chain of kernel.h), vectors across the 32
 * panel columns. Compiled for AVX-512 by function attribute; dispatch
 * (dispatch.c) selects it only where the CPU has the features. */
#include <immintrin.h>
#include <stddef.h>

#include "kernels/cpu/avx512.h"
#include "kernels/cpu/kernel.h"


/* NP (1 or 2) panels per k step, b0 and b1 into t0 and t1: 2 NP accumulators per row, each the chain of
 * kernel.h. MR and NP are constants at every call site, so the loops unroll and acc stays in registers. */
DSP_AVX512_INLINE void tile_np(const float *ap, const int MR, const int NP, const uint16_t *b0, const uint16_t *b1,
                               int64_t kc, float *t0, float *t1, int load, const char *pf0, const char *pf1) {
  __m512 acc[DSP_CPU_MR][4];
  const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
#pragma GCC unroll 12
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
    for (int p = 0; p < NP; p++) {
      const float *t = (p ? t1 : t0) + i * DSP_CPU_NR;
      acc[i][2 * p] = load ? _mm512_load_ps(t) : _mm512_setzero_ps();
      acc[i][2 * p + 1] = load ? _mm512_load_ps(t + 16) : _mm512_setzero_ps();
    }
#pragma GCC unroll 4
  for (int64_t kk = 0; kk < kc; kk++) {
    __m512 w[4];
#pragma GCC unroll 2
    for (int p = 0; p < NP; p++) {
      const __m512i x = _mm512_load_si512((const void *)((p ? b1 : b0) + kk * DSP_CPU_NR));
      w[2 * p] = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
      w[2 * p + 1] = _mm512_castsi512_ps(_mm512_and_si512(x, hi));
    }
    const float *av = ap + kk * MR;
    _mm_prefetch(pf0 + kk * 64, _MM_HINT_T1);
    if (NP == 2) _mm_prefetch(pf1 + kk * 64, _MM_HINT_T1);
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
      const __m512 a = _mm512_set1_ps(av[i]);
#pragma GCC unroll 4
      for (int c = 0; c < 2 * NP; c++) acc[i][c] = _mm512_fmadd_ps(a, w[c], acc[i][c]);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
    for (int p = 0; p < NP; p++) {
      float *t = (p ? t1 : t0) + i * DSP_CPU_NR;
      _mm512_store_ps(t, acc[i][2 * p]);
      _mm512_store_ps(t + 16, acc[i][2 * p + 1]);
    }
}

DSP_AVX512_INLINE void tile_mr(const float *ap, const int MR, const uint16_t *bp, int64_t kc, float *tile, int load,
                               const char *pf) {
  tile_np(ap, MR, 1, bp, bp, kc, tile, tile, load, pf, pf);
}

#define TILE_FN(n)                                                                                   \
  DSP_AVX512 static void tile_##n(const float *ap, const uint16_t *bp, int64_t kc, float *tile, int load, \
                                  const char *pf) {                                                    \
    tile_mr(ap, n, bp, kc, tile, load, pf);                                                            \
  }
TILE_FN(1) TILE_FN(2) TILE_FN(3) TILE_FN(4) TILE_FN(5) TILE_FN(6)
TILE_FN(7) TILE_FN(8) TILE_FN(9) TILE_FN(10) TILE_FN(11) TILE_FN(12)

DSP_AVX512 void dsp_cpu_tile_avx512(const float *ap, int mr, const uint16_t *bp, int64_t kc, float *tile, int load,
                                    const void *pfv) {
  /* No prefetch wanted: touch the block being read (already in L1). */
  const char *pf = pfv ? (const char *)pfv : (const char *)bp;
  DSP_CPU_MR_CALL(tile_, mr, ap, bp, kc, tile, load, pf)
}

#define TILE2_FN(n)                                                                                            \
  DSP_AVX512 static void tile2_##n(const float *ap, const uint16_t *b0, const uint16_t *b1, int64_t kc, float *t0, \
                                   float *t1, int load, const char *p0, const char *p1) {                          \
    tile_np(ap, n, 2, b0, b1, kc, t0, t1, load, p0, p1);                                                           \
  }
TILE2_FN(1) TILE2_FN(2) TILE2_FN(3) TILE2_FN(4)

DSP_AVX512 void dsp_cpu_tile2_avx512(const float *ap, int mr, const uint16_t *bp0, const uint16_t *bp1, int64_t kc,
                                     float *tile0, float *tile1, int load, const void *pf0, const void *pf1) {
  /* No prefetch wanted: touch the blocks being read (already in L1). */
  const char *p0 = pf0 ? (const char *)pf0 : (const char *)bp0, *p1 = pf1 ? (const char *)pf1 : (const char *)bp1;
  DSP_CPU_MR2_CALL(tile2_, mr, ap, bp0, bp1, kc, tile0, tile1, load, p0, p1)
}

DSP_AVX512_INLINE __m512 canon_f32(__m512 v) {
  return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                            _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
}

DSP_AVX512 void dsp_cpu_store_avx512(const float *tile, int mr, int ncols, void *c0, dsp_dtype dt, int64_t rs,
                                     int64_t cs) {
  if (cs != 1) {
    dsp_cpu_store_scalar(tile, mr, ncols, c0, dt, rs, cs);
    return;
  }
  __mmask16 m0 = dsp_avx512_lanes(ncols), m1 = dsp_avx512_lanes(ncols - 16);
  for (int i = 0; i < mr; i++) {
    __m512 v0 = _mm512_load_ps(tile + i * DSP_CPU_NR), v1 = _mm512_load_ps(tile + i * DSP_CPU_NR + 16);
    if (dt == DSP_BF16) {
      uint16_t *row = (uint16_t *)c0 + i * rs;
      _mm256_mask_storeu_epi16(row, m0, _mm512_cvtepi32_epi16(dsp_avx512_rne_bf16(v0)));
      _mm256_mask_storeu_epi16(row + 16, m1, _mm512_cvtepi32_epi16(dsp_avx512_rne_bf16(v1)));
    } else {
      float *row = (float *)c0 + i * rs;
      _mm512_mask_storeu_ps(row, m0, canon_f32(v0));
      _mm512_mask_storeu_ps(row + 16, m1, canon_f32(v1));
    }
  }
}

/* 16 columns of one row: logits, and the lane-wise running best. */
DSP_AVX512_INLINE void markov_half(__m512 acc, const dsp_bf16 *base, int64_t bcs, void *logit, int64_t lcs, int fp32_add,
                                   __mmask16 valid, float *bv, int32_t *bi, int32_t n0) {
  __m512 bias = _mm512_castsi512_ps(_mm512_slli_epi32(dsp_avx512_rne_bf16(acc), 16));
  __m512i b16;
  if (bcs == 1) {
    b16 = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(valid, base));
  } else {
    uint16_t tmp[16] = {0};
    for (int c = 0; c < 16; c++)
      if (valid >> c & 1) tmp[c] = base[c * bcs];
    b16 = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)tmp));
  }
  __m512 s = _mm512_add_ps(_mm512_castsi512_ps(_mm512_slli_epi32(b16, 16)), bias);
  __m512 v;
  if (fp32_add) {
    v = canon_f32(s);
    if (logit) {
      if (lcs == 1) {
        _mm512_mask_storeu_ps(logit, valid, v);
      } else {
        float tmp[16];
        _mm512_storeu_ps(tmp, v);
        for (int c = 0; c < 16; c++)
          if (valid >> c & 1) ((float *)logit)[c * lcs] = tmp[c];
      }
    }
  } else {
    __m512i h = dsp_avx512_rne_bf16(s);
    v = _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
    if (logit) {
      __m256i h16 = _mm512_cvtepi32_epi16(h);
      if (lcs == 1) {
        _mm256_mask_storeu_epi16(logit, valid, h16);
      } else {
        uint16_t tmp[16];
        _mm256_storeu_si256((__m256i *)tmp, h16);
        for (int c = 0; c < 16; c++)
          if (valid >> c & 1) ((uint16_t *)logit)[c * lcs] = tmp[c];
      }
    }
  }
  /* Columns reach a lane in increasing order: a later one wins only when
   * strictly better (larger, or the first NaN), or when the lane is empty. */
  __m512 o = _mm512_loadu_ps(bv);
  __m512i oi = _mm512_loadu_si512(bi);
  __mmask16 take = _mm512_cmp_ps_mask(v, o, _CMP_GT_OQ) |
                   (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(o, o, _CMP_ORD_Q)) |
                   _mm512_cmplt_epi32_mask(oi, _mm512_setzero_si512());
  take &= valid;
  __m512i ids = _mm512_add_epi32(_mm512_set1_epi32(n0),
                                 _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  _mm512_storeu_ps(bv, _mm512_mask_mov_ps(o, take, v));
  _mm512_storeu_si512(bi, _mm512_mask_mov_epi32(oi, take, ids));
}

DSP_AVX512 void dsp_cpu_markov_avx512(const float *tile, int mr, int nvalid, const dsp_cpu_markov_tile *t) {
  __mmask16 m0 = dsp_avx512_lanes(nvalid), m1 = dsp_avx512_lanes(nvalid - 16);
  size_t lsz = t->fp32_add ? 4 : 2;
  for (int i = 0; i < mr; i++) {
    const dsp_bf16 *base = t->base0 + i * t->base_rs;
    char *logit = t->logit0 ? (char *)t->logit0 + (ptrdiff_t)(i * t->logit_rs) * (ptrdiff_t)lsz : NULL;
    float *bv = t->best_v + i * DSP_CPU_NR;
    int32_t *bi = t->best_i + i * DSP_CPU_NR;
    markov_half(_mm512_load_ps(tile + i * DSP_CPU_NR), base, t->base_cs, logit, t->logit_cs, t->fp32_add, m0, bv, bi,
                t->n0);
    if (m1)
      markov_half(_mm512_load_ps(tile + i * DSP_CPU_NR + 16), base + 16 * t->base_cs, t->base_cs,
                  logit ? logit + (ptrdiff_t)(16 * t->logit_cs) * (ptrdiff_t)lsz : NULL, t->logit_cs, t->fp32_add, m1, bv + 16,
                  bi + 16, t->n0 + 16);
  }
}

/* dsp_cpu_row_guard of a contiguous row, 32 values a step (A rows are guarded on every call, weights once). */
DSP_AVX512 int16_t dsp_cpu_row_guard_avx512(const uint16_t *x, int64_t n) {
  const __m512i ef = _mm512_set1_epi16(0xFF), mf = _mm512_set1_epi16(0x7F), vf = _mm512_set1_epi16(0x7FFF);
  __m512i g = _mm512_set1_epi16(255);
  __mmask32 special = 0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i v = _mm512_loadu_si512((const void *)(x + i)), e = _mm512_and_si512(_mm512_srli_epi16(v, 7), ef);
    special |= _mm512_cmpeq_epi16_mask(e, ef) |
               (_mm512_cmpeq_epi16_mask(e, _mm512_setzero_si512()) & _mm512_test_epi16_mask(v, mf));
    g = _mm512_mask_min_epu16(g, _mm512_test_epi16_mask(v, vf), g, e);
  }
  if (special) return -1024;
  uint16_t lanes[32];
  _mm512_storeu_si512((void *)lanes, g);
  int16_t r = i < n ? dsp_cpu_row_guard_scalar(x + i, n - i, 1) : 255;
  for (int l = 0; l < 32; l++) r = lanes[l] < r ? (int16_t)lanes[l] : r;
  return r;
}
