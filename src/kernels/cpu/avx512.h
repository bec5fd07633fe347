/* What the CPU kernels' AVX-512 paths share: the target attributes, tail
 * masks and the bf16 rounding of core/bf16.h on 16 lanes. Include only from
 * files whose callers check dsp_cpu_isa_current() first. */
#ifndef DSP_KERNELS_CPU_AVX512_H
#define DSP_KERNELS_CPU_AVX512_H
#include <immintrin.h>
#include <stdint.h>

#define DSP_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
#define DSP_AVX512_INLINE static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512dq,avx512vl,fma")))

/* The first n of 16 lanes (none for n <= 0, all for n >= 16). */
DSP_AVX512_INLINE __mmask16 dsp_avx512_lanes(int64_t n) {
  return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* fp32 -> bf16 bits in the low half of each 32-bit lane: RNE, NaN canonical. */
DSP_AVX512_INLINE __m512i dsp_avx512_rne_bf16(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  return _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
}

/* dsp_f32_to_bf16 on 16 lanes, bit for bit: RNE, a NaN keeping its sign and
 * payload, quieted. */
DSP_AVX512_INLINE __m256i dsp_avx512_to_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v), hi = _mm512_srli_epi32(u, 16);
  const __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(u, _mm512_add_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7FFF))), 16);
  const __m512i b = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(b);
}

/* fp32 rounded to bf16 and back (dsp_round_bf16 on 16 lanes; NaN canonical). */
DSP_AVX512_INLINE __m512 dsp_avx512_round_bf16(__m512 v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(dsp_avx512_rne_bf16(v), 16));
}

/* r[p] lane j = the old r[j] lane p: dwords within 128-bit blocks, then the blocks. */
DSP_AVX512_INLINE void dsp_avx512_transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) { /* u[4g + c], block b: lane 4b + c of rows 4g .. 4g + 3 */
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    const __m512i p0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44), p1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
    const __m512i p2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44),
                  p3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_i32x4(p0, p2, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(p0, p2, 0xDD);
    r[8 + c] = _mm512_shuffle_i32x4(p1, p3, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(p1, p3, 0xDD);
  }
}

#endif
