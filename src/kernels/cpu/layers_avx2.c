/* AVX2+FMA forms of layers.c's RMSNorm, silu_mul, RoPE and add, bit for bit
 * the scalar ones (test_ops checks it). RMSNorm: the sums of squares of 8
 * rows at once, one row per lane (8 x 8 blocks transposed through registers),
 * each still one fmaf chain in order over d; everything else 8 columns at a
 * time, tails through an 8-wide buffer. The roundings are core/bf16.h's (a
 * NaN keeps its sign and payload, quieted). Called only where
 * dsp_cpu_isa_current() is AVX2. */
#include <immintrin.h>
#include <string.h>

#include "core/bf16.h"
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/expf_avx2.h"
#include "kernels/cpu/layers_avx2.h"

/* dsp_f32_to_bf16 on 8 lanes, packed to 8 bf16. */
DSP_AVX2_INLINE __m128i bf16_pack(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i b = _mm256_blendv_epi8(r, q, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  return _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
}
DSP_AVX2_INLINE __m256 round_bf16(__m256 v) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bf16_pack(v)), 16));
}
DSP_AVX2_INLINE __m256 load8(const dsp_bf16 *p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
DSP_AVX2_INLINE void store8(dsp_bf16 *p, __m256 v) { _mm_storeu_si128((__m128i *)p, bf16_pack(v)); }

DSP_AVX2 void dsp_cpu_rmsnorm_avx2(dsp_bf16 *const *xr, dsp_bf16 *const *orow, int n, int64_t D, const dsp_bf16 *w,
                                   float eps) {
  float sv[16], inv[16];
  const int64_t D8 = D / 8 * 8;
  for (int i0 = 0; i0 < n; i0 += 8) {
    __m256 ss = _mm256_setzero_ps();
    for (int64_t d = 0; d < D8; d += 8) {
      __m256i r[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; j++) /* past n: row i0 again, summed and dropped */
        r[j] = _mm256_castps_si256(load8(xr[i0 + j < n ? i0 + j : i0] + d));
      dsp_avx2_transpose8(r);
#pragma GCC unroll 8
      for (int p = 0; p < 8; p++) {
        const __m256 v = _mm256_castsi256_ps(r[p]);
        ss = _mm256_fmadd_ps(v, v, ss);
      }
    }
    float s8[8];
    _mm256_storeu_ps(s8, ss);
    for (int i = i0; i < n && i < i0 + 8; i++) {
      float acc = s8[i - i0];
      for (int64_t d = D8; d < D; d++) {
        const float v = dsp_bf16_to_f32(xr[i][d]);
        acc = __builtin_fmaf(v, v, acc);
      }
      sv[i] = acc;
    }
  }
  for (int i = 0; i < n; i++) inv[i] = 1.0f / __builtin_sqrtf(sv[i] / (float)D + eps);
  for (int i = 0; i < n; i++) {
    const __m256 s = _mm256_set1_ps(inv[i]);
    int64_t d = 0;
    for (; d + 8 <= D; d += 8) store8(orow[i] + d, _mm256_mul_ps(load8(w + d), round_bf16(_mm256_mul_ps(load8(xr[i] + d), s))));
    for (; d < D; d++) {
      const float xn = dsp_round_bf16(dsp_bf16_to_f32(xr[i][d]) * inv[i]);
      orow[i][d] = dsp_f32_to_bf16(dsp_bf16_to_f32(w[d]) * xn);
    }
  }
}

DSP_AVX2_INLINE __m256 silu_mul8(__m256 x, __m256 u) {
  const __m256 e = dsp_avx2_expf(_mm256_xor_ps(x, _mm256_set1_ps(-0.0f))); /* -x, as the scalar form */
  return _mm256_mul_ps(round_bf16(_mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e))), u);
}

/* The last n % 8 elements of the row ops: copied into 8-wide buffers (zero past the end), computed, copied back. */
#define TAIL(n, j) ((n) - (j) > 0 ? (size_t)((n) - (j)) * 2 : 0)

/* o = op(a, b) over n elements, 8 at a time (SILU: bf16(silu(a)) * b, else a + b), rounded to bf16 once. */
enum { OP_ADD, OP_SILU };
DSP_AVX2_INLINE __m256 op2(const int OP, __m256 a, __m256 b) {
  return OP == OP_SILU ? silu_mul8(a, b) : _mm256_add_ps(a, b);
}
DSP_AVX2_INLINE void row2(const dsp_bf16 *a, const dsp_bf16 *b, dsp_bf16 *o, int64_t n, const int OP) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) store8(o + j, op2(OP, load8(a + j), load8(b + j)));
  if (j < n) {
    dsp_bf16 ta[8] = {0}, tb[8] = {0}, to[8];
    memcpy(ta, a + j, TAIL(n, j)), memcpy(tb, b + j, TAIL(n, j));
    store8(to, op2(OP, load8(ta), load8(tb)));
    memcpy(o + j, to, TAIL(n, j));
  }
}

DSP_AVX2 void dsp_cpu_silu_mul_avx2(const dsp_bf16 *g, const dsp_bf16 *u, dsp_bf16 *o, int64_t n) {
  row2(g, u, o, n, OP_SILU);
}

DSP_AVX2_INLINE void rope8(dsp_bf16 *lo, dsp_bf16 *hi, const dsp_bf16 *c, const dsp_bf16 *sn) {
  const __m256 a = load8(lo), b = load8(hi), ci = load8(c), si = load8(sn);
  store8(lo, _mm256_sub_ps(round_bf16(_mm256_mul_ps(a, ci)), round_bf16(_mm256_mul_ps(b, si))));
  store8(hi, _mm256_add_ps(round_bf16(_mm256_mul_ps(b, ci)), round_bf16(_mm256_mul_ps(a, si))));
}

DSP_AVX2 void dsp_cpu_rope_avx2(dsp_bf16 *row, const dsp_bf16 *c, const dsp_bf16 *sn, int64_t half) {
  int64_t i = 0;
  for (; i + 8 <= half; i += 8) rope8(row + i, row + half + i, c + i, sn + i);
  if (i < half) {
    dsp_bf16 ta[8] = {0}, tb[8] = {0}, tc[8] = {0}, ts[8] = {0};
    memcpy(ta, row + i, TAIL(half, i)), memcpy(tb, row + half + i, TAIL(half, i));
    memcpy(tc, c + i, TAIL(half, i)), memcpy(ts, sn + i, TAIL(half, i));
    rope8(ta, tb, tc, ts);
    memcpy(row + i, ta, TAIL(half, i)), memcpy(row + half + i, tb, TAIL(half, i));
  }
}

DSP_AVX2 void dsp_cpu_add_avx2(const dsp_bf16 *a, const dsp_bf16 *b, dsp_bf16 *o, int64_t n) { row2(a, b, o, n, OP_ADD); }
