/* AVX-512 forms of layers.c's RMSNorm, silu_mul, RoPE and add, bit for bit
 * the scalar ones (test_ops checks it). RMSNorm: the sum of squares of 16 rows at once,
 * one row per lane (32 elements of each row loaded and transposed), each still one fmaf chain in order over d;
 * the scaling 16
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
  if (n == 1) { /* one row: its chain alone (as fast at 256 dims, faster at 32; from 2 rows the lanes win) */
    float acc = 0.0f;
    for (int64_t d = 0; d < D; d++) {
      const float v = dsp_bf16_to_f32(xr[0][d]);
      acc = __builtin_fmaf(v, v, acc);
    }
    sv[0] = acc;
  } else {
    /* lane i is row i: 32 elements of each row by one 64-byte load (masked at the row's end, zeros past it: an
     * fmaf of +0 leaves a sum of squares as it is), transposed so that vector p holds the pair (d0 + 2p,
     * d0 + 2p + 1) of every row; each lane is still the row's fmaf chain in order over d */
    __m512 ss = _mm512_setzero_ps();
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    for (int64_t d0 = 0; d0 < D; d0 += 32) {
      const __mmask32 m = D - d0 >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (D - d0)) - 1u);
      __m512i r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; i++) r[i] = i < n ? _mm512_maskz_loadu_epi16(m, xr[i] + d0) : _mm512_setzero_si512();
      dsp_avx512_transpose16(r);
#pragma GCC unroll 16
      for (int p = 0; p < 16; p++) {
        const __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(r[p], 16)), hv = _mm512_castsi512_ps(_mm512_and_si512(r[p], hi));
        ss = _mm512_fmadd_ps(lo, lo, ss);
        ss = _mm512_fmadd_ps(hv, hv, ss);
      }
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
