/* AVX-512 forms of layers.c's RMSNorm, silu_mul, RoPE and add, bit for bit
 * the scalar ones (test_ops checks it). RMSNorm: the sum of squares of 16 rows at once,
 * one row per lane, each still one fmaf chain in order over d; the scaling 16
 * dims at a time. silu_mul (with expf_avx512.h), RoPE and add: 16 columns at
 * a time. The
 * roundings are core/bf16.h's (a NaN keeps its sign and payload, quieted).
 * Called only where dsp_cpu_isa_current() is AVX-512. */
#include <immintrin.h>

#include "core/bf16.h"
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/expf_avx512.h"
#include "kernels/cpu/layers_avx512.h"

/* dsp_f32_to_bf16 on 16 lanes (low halves of the 32-bit lanes). */
DSP_AVX512_INLINE __m512i bf16_bits(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), q);
}
DSP_AVX512_INLINE __m512 round_bf16(__m512 v) { return _mm512_castsi512_ps(_mm512_slli_epi32(bf16_bits(v), 16)); }
DSP_AVX512_INLINE __m512 load16(const dsp_bf16 *p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
DSP_AVX512_INLINE void store16(dsp_bf16 *p, __m512 v, __mmask16 m) {
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(bf16_bits(v)));
}

DSP_AVX512 void dsp_cpu_rmsnorm_avx512(dsp_bf16 *const *xr, dsp_bf16 *const *orow, int n, int64_t D,
                                       const dsp_bf16 *w, float eps) {
  float sv[16], inv[16];
  if (n <= 2) { /* a chain per row: fewer loads than a gather per element */
    for (int i = 0; i < n; i++) {
      float acc = 0.0f;
      for (int64_t d = 0; d < D; d++) {
        const float v = dsp_bf16_to_f32(xr[i][d]);
        acc = __builtin_fmaf(v, v, acc);
      }
      sv[i] = acc;
    }
  } else {
    /* lane i reads row i's element d as the high half of the 32-bit word
     * ending at it (d >= 1), or the low half of the word starting at it
     * (d = 0): never past either end of a row of D >= 2 */
    long long addr[16];
    for (int i = 0; i < 16; i++) addr[i] = (long long)(i < n ? xr[i] : xr[0]);
    const __m512i a0 = _mm512_loadu_si512(addr), a1 = _mm512_loadu_si512(addr + 8);
    const __mmask16 live = (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1u);
    __m512 ss = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d++) {
      const __m512i off = _mm512_set1_epi64(d ? 2 * d - 2 : 0);
      const __m256i lo = _mm512_mask_i64gather_epi32(_mm256_setzero_si256(), (__mmask8)live,
                                                     _mm512_add_epi64(a0, off), NULL, 1);
      const __m256i hi = _mm512_mask_i64gather_epi32(_mm256_setzero_si256(), (__mmask8)(live >> 8),
                                                     _mm512_add_epi64(a1, off), NULL, 1);
      __m512i wd = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      wd = d ? _mm512_and_si512(wd, _mm512_set1_epi32((int)0xFFFF0000u)) : _mm512_slli_epi32(wd, 16);
      const __m512 v = _mm512_castsi512_ps(wd);
      ss = _mm512_fmadd_ps(v, v, ss);
    }
    _mm512_storeu_ps(sv, ss);
  }
  for (int i = 0; i < n; i++) inv[i] = 1.0f / __builtin_sqrtf(sv[i] / (float)D + eps);
  for (int i = 0; i < n; i++) {
    const __m512 s = _mm512_set1_ps(inv[i]);
    for (int64_t d = 0; d < D; d += 16) {
      const __mmask16 m = dsp_avx512_lanes(D - d);
      const __m512 xn = round_bf16(_mm512_mul_ps(load16(xr[i] + d, m), s));
      store16(orow[i] + d, _mm512_mul_ps(load16(w + d, m), xn), m);
    }
  }
}

DSP_AVX512 void dsp_cpu_silu_mul_avx512(const dsp_bf16 *g, const dsp_bf16 *u, dsp_bf16 *o, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = dsp_avx512_lanes(n - j);
    const __m512 x = load16(g + j, m);
    const __m512 e = dsp_avx512_expf(_mm512_xor_ps(x, _mm512_set1_ps(-0.0f))); /* -x, as the scalar form */
    const __m512 s = round_bf16(_mm512_div_ps(x, _mm512_add_ps(one, e)));
    store16(o + j, _mm512_mul_ps(s, load16(u + j, m)), m);
  }
}

DSP_AVX512 void dsp_cpu_rope_avx512(dsp_bf16 *row, const dsp_bf16 *c, const dsp_bf16 *sn, int64_t half) {
  for (int64_t i = 0; i < half; i += 16) {
    const __mmask16 m = dsp_avx512_lanes(half - i);
    const __m512 a = load16(row + i, m), b = load16(row + half + i, m);
    const __m512 ci = load16(c + i, m), si = load16(sn + i, m);
    store16(row + i, _mm512_sub_ps(round_bf16(_mm512_mul_ps(a, ci)), round_bf16(_mm512_mul_ps(b, si))), m);
    store16(row + half + i, _mm512_add_ps(round_bf16(_mm512_mul_ps(b, ci)), round_bf16(_mm512_mul_ps(a, si))), m);
  }
}

DSP_AVX512 void dsp_cpu_add_avx512(const dsp_bf16 *a, const dsp_bf16 *b, dsp_bf16 *o, int64_t n) {
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = dsp_avx512_lanes(n - j);
    store16(o + j, _mm512_add_ps(load16(a + j, m), load16(b + j, m)), m);
  }
}
