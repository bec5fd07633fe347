/* The AVX2+FMA forms of the CPU attention's q.k and p.v (attention_impl.h):
 * q.k puts 8 keys in the lanes (the keys transposed through registers, no
 * gathers), p.v 8 dims; every lane is one of the scalar path's fmaf chains.
 * The softmax is the scalar one's arithmetic on 8 keys at a time. */
#include "kernels/cpu/attention_impl.h"

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/expf_avx2.h"

/* kt[(d / 2) * 8 + j] = the dword (d, d + 1) of key j < nb, 0 past nb. */
DSP_AVX2_INLINE void keys_transposed(const dsp_cpu_attn_item *it, const dsp_bf16 *base, int64_t nb, int32_t *kt) {
  for (int64_t d0 = 0; d0 < it->D; d0 += 16) {
    __m256i r[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      r[j] = j < nb ? _mm256_loadu_si256((const __m256i *)(base + j * it->kst + d0)) : _mm256_setzero_si256();
    dsp_avx2_transpose8(r);
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) _mm256_store_si256((__m256i *)(kt + (d0 / 2 + p) * 8), r[p]);
  }
}

/* Up to RMAX q vectors (rc of them) against the KB blocks of 8 keys in kt (block b at kt + b * 4 * D): KB x RMAX
 * <= 12 chains in flight, so that a decode step's few q vectors still hide the multiply-add latency. */
DSP_AVX2_INLINE void scores_group(const dsp_cpu_attn_item *it, const int32_t *kt, const int KB, const int RMAX,
                                  int64_t j0, int64_t r0, int rc) {
  const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
  __m256 acc[12];
#pragma GCC unroll 12
  for (int i = 0; i < KB * RMAX; i++) acc[i] = _mm256_setzero_ps();
  const float *q = it->qf + r0 * it->D;
  for (int64_t d = 0; d < it->D; d += 2) {
#pragma GCC unroll 4
    for (int b = 0; b < KB; b++) {
      const __m256i x = _mm256_load_si256((const __m256i *)(kt + b * 4 * it->D + d * 4));
      const __m256 lo = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
      const __m256 hv = _mm256_castsi256_ps(_mm256_and_si256(x, hi));
#pragma GCC unroll 12
      for (int i = 0; i < RMAX; i++)
        if (i < rc) {
          acc[b * RMAX + i] = _mm256_fmadd_ps(_mm256_broadcast_ss(q + i * it->D + d), lo, acc[b * RMAX + i]);
          acc[b * RMAX + i] = _mm256_fmadd_ps(_mm256_broadcast_ss(q + i * it->D + d + 1), hv, acc[b * RMAX + i]);
        }
    }
  }
#pragma GCC unroll 4
  for (int b = 0; b < KB; b++) {
    const __m256i live = dsp_avx2_lanes(it->nk - (j0 + 8 * b));
#pragma GCC unroll 12
    for (int i = 0; i < RMAX; i++)
      if (i < rc) _mm256_maskstore_ps(it->e + (r0 + i) * it->es + j0 + 8 * b, live, acc[b * RMAX + i]);
  }
}

DSP_AVX2 void dsp_cpu_attn_scores_avx2(const dsp_cpu_attn_item *it) {
  int32_t kt[4 * 8 * 128] __attribute__((aligned(32))); /* up to 4 blocks of 8 keys, D <= 256 */
  const int kb = it->nq <= 3 ? 4 : it->nq <= 6 ? 2 : 1; /* key blocks per group */
  for (int64_t j0 = 0; j0 < it->nk; j0 += 8 * kb) {
    for (int b = 0; b < kb; b++) {
      const int64_t jb = j0 + 8 * b, nb = it->nk - jb < 8 ? it->nk - jb : 8;
      const dsp_bf16 *base = it->kb + jb * it->kst;
      /* the block after next: a head's keys lie one cache row apart, too far apart for the hardware to follow */
      for (int64_t j = 8 * kb; j < 8 * kb + 8 && jb + j < it->nk; j++)
        for (int64_t c = 0; c < it->D * 2; c += 64) _mm_prefetch((const char *)(base + j * it->kst) + c, _MM_HINT_T0);
      keys_transposed(it, base, nb, kt + b * 4 * it->D);
    }
    for (int64_t r0 = 0; r0 < it->nq; r0 += 12 / kb) {
      const int rc = (int)(it->nq - r0 < 12 / kb ? it->nq - r0 : 12 / kb);
      if (kb == 4) scores_group(it, kt, 4, 3, j0, r0, rc);
      else if (kb == 2) scores_group(it, kt, 2, 6, j0, r0, rc);
      else scores_group(it, kt, 1, 12, j0, r0, rc);
    }
  }
}

/* p.v of q vectors r0 .. r0 + rc - 1 (rc <= HG) over dims d0 .. d0 + 8 NV - 1: NV x HG <= 12 chains share each
 * value row's load. NV and HG are constants at every call site, so acc stays in registers. */
DSP_AVX2_INLINE void pv_group(const dsp_cpu_attn_item *it, int64_t d0, const int NV, const int HG, int64_t r0, int rc,
                              int64_t j0, int64_t j1) {
  __m256 acc[12];
  float *out = it->acc + r0 * it->D + d0;
#pragma GCC unroll 12
  for (int h = 0; h < HG; h++)
#pragma GCC unroll 4
    for (int c = 0; c < NV; c++)
      acc[h * NV + c] = j0 && h < rc ? _mm256_loadu_ps(out + h * it->D + 8 * c) : _mm256_setzero_ps();
  const float *p = it->e + r0 * it->es;
  for (int64_t j = j0; j < j1; j++) {
    const dsp_bf16 *vr = it->vb + j * it->kst + d0;
    if (j + 16 < j1) _mm_prefetch((const char *)(vr + 16 * it->kst), _MM_HINT_T0);
    __m256 v[4];
#pragma GCC unroll 4
    for (int c = 0; c < NV; c++)
      v[c] = _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(vr + 8 * c))), 16));
#pragma GCC unroll 12
    for (int h = 0; h < HG; h++)
      if (h < rc) {
        const __m256 pj = _mm256_broadcast_ss(p + h * it->es + j);
#pragma GCC unroll 4
        for (int c = 0; c < NV; c++) acc[h * NV + c] = _mm256_fmadd_ps(pj, v[c], acc[h * NV + c]);
      }
  }
#pragma GCC unroll 12
  for (int h = 0; h < HG; h++)
    if (h < rc)
#pragma GCC unroll 4
      for (int c = 0; c < NV; c++) _mm256_storeu_ps(out + h * it->D + 8 * c, acc[h * NV + c]);
}

DSP_AVX2 void dsp_cpu_attn_pv_avx2(const dsp_cpu_attn_item *it, int64_t v0, int64_t nq, int64_t j0, int64_t j1) {
  for (int64_t d0 = 0; d0 < it->D; d0 += 32) {
    const int nv = it->D - d0 < 32 ? 2 : 4, hg = nv == 4 ? 3 : 6; /* D % 16 == 0 */
    for (int64_t r0 = v0; r0 < v0 + nq; r0 += hg) {
      const int rc = (int)(v0 + nq - r0 < hg ? v0 + nq - r0 : hg);
      if (nv == 4) pv_group(it, d0, 4, 3, r0, rc, j0, j1);
      else pv_group(it, d0, 2, 6, r0, rc, j0, j1);
    }
  }
}

/* One q vector's scores into e = expf(s - max), s = bf16(bf16(s) * scale) (the scalar softmax's first two passes;
 * a NaN score makes every e NaN, as the scalar path's NaN z does). */
DSP_AVX2_INLINE void softmax_exp(float *e, int64_t nk, float scale) {
  const __m256 sc = _mm256_set1_ps(scale);
  __m256 mv = _mm256_set1_ps(-__builtin_inff()), nan = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= nk; j += 8) {
    const __m256 x = _mm256_loadu_ps(e + j);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m256 y = dsp_avx2_round_bf16(_mm256_mul_ps(dsp_avx2_round_bf16(x), sc));
    _mm256_storeu_ps(e + j, y);
    mv = _mm256_max_ps(mv, y);
  }
  float m[8];
  _mm256_storeu_ps(m, mv);
  int isnan = _mm256_movemask_ps(nan) != 0;
  float mx = m[0];
  for (int l = 1; l < 8; l++) mx = m[l] > mx ? m[l] : mx; /* equal values differ at most in a zero's sign: no e sees it */
  for (; j < nk; j++) {
    const float y = _mm256_cvtss_f32(dsp_avx2_round_bf16(
        _mm256_mul_ps(dsp_avx2_round_bf16(_mm256_set1_ps(e[j])), sc)));
    isnan |= e[j] != e[j];
    e[j] = y;
    mx = y > mx ? y : mx;
  }
  if (isnan) {
    for (j = 0; j < nk; j++) e[j] = __builtin_nanf("");
    return;
  }
  const __m256 mm = _mm256_set1_ps(mx);
  for (j = 0; j + 8 <= nk; j += 8) _mm256_storeu_ps(e + j, dsp_avx2_expf(_mm256_sub_ps(_mm256_loadu_ps(e + j), mm)));
  for (; j < nk; j++) e[j] = _mm256_cvtss_f32(dsp_avx2_expf(_mm256_set1_ps(e[j] - mx)));
}

/* p = bf16(e / z). */
DSP_AVX2_INLINE void softmax_div(float *e, int64_t nk, float z) {
  const __m256 zv = _mm256_set1_ps(z);
  int64_t j = 0;
  for (; j + 8 <= nk; j += 8) _mm256_storeu_ps(e + j, dsp_avx2_round_bf16(_mm256_div_ps(_mm256_loadu_ps(e + j), zv)));
  for (; j < nk; j++) e[j] = _mm256_cvtss_f32(dsp_avx2_round_bf16(_mm256_set1_ps(e[j] / z)));
}

DSP_AVX2 void dsp_cpu_attn_softmax_avx2(const dsp_cpu_attn_item *it, int64_t nr, const int64_t *row_nk, float scale) {
  const int64_t nv = nr * it->rep;
  for (int64_t v = 0; v < nv; v++) softmax_exp(it->e + v * it->es, row_nk[v / it->rep], scale);
  for (int64_t v0 = 0; v0 < nv; v0 += 4) { /* z: each a chain in key order from +0, four in flight */
    const int n = (int)(nv - v0 < 4 ? nv - v0 : 4);
    const float *e[4];
    int64_t nk[4], least = INT64_MAX;
    for (int v = 0; v < 4; v++) { /* past n: vector v0's keys again, summed and dropped */
      e[v] = it->e + (v0 + (v < n ? v : 0)) * it->es;
      nk[v] = row_nk[(v0 + (v < n ? v : 0)) / it->rep];
      least = nk[v] < least ? nk[v] : least;
    }
    float z0 = 0.0f, z1 = 0.0f, z2 = 0.0f, z3 = 0.0f;
    for (int64_t j = 0; j < least; j++) z0 += e[0][j], z1 += e[1][j], z2 += e[2][j], z3 += e[3][j];
    float z[4] = {z0, z1, z2, z3};
    for (int v = 0; v < n; v++) {
      for (int64_t j = least; j < nk[v]; j++) z[v] += e[v][j];
      softmax_div(it->e + (v0 + v) * it->es, nk[v], z[v]);
    }
  }
}
