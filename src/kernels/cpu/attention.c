/* GQA attention over the KV cache on the CPU (layers.h gives the numerics).
 * One work item is a (row, kv head) pair: the query heads sharing that kv head
 * read each key once. The AVX-512 path puts 16 keys in the lanes of a vector,
 * so each key's q.k is still one fp32 chain in order over d, and p.v puts 16
 * dims in the lanes, each a chain in key order: bit-identical to the scalar
 * path, which stays for CPUs without AVX-512 and for odd head dims. q.k runs
 * the rows of a run on one slot together (one key gather for all their heads;
 * a few q vectors against several blocks of keys at once, so that enough
 * chains are in flight), p.v every head of a KV head at once (one load of a
 * value row for all), the softmax's rounding passes 16 keys at a time and its
 * sums eight q vectors at a time. */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/bf16.h"
#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/expf.h"
#include "kernels/cpu/expf_avx512.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/layers.h"


enum { RUN = 8 }; /* rows of one slot whose q.k share each key load */

/* Per thread: q of a run's (row, head) pairs in fp32 (RUN x rep x D), their
 * scores (RUN x rep x max_len), their output accumulators (RUN x rep x D). */
size_t dsp_cpu_attention_scratch(int64_t max_len, int64_t q_heads, int64_t kv_heads, int64_t head_dim, int nthreads) {
  const int64_t rep = kv_heads > 0 ? (q_heads + kv_heads - 1) / kv_heads : q_heads;
  const size_t per = (size_t)(RUN * rep * head_dim + RUN * rep * max_len + RUN * rep * head_dim + 16);
  return (per + 15) / 16 * 16 * (size_t)nthreads;
}

typedef dsp_cpu_attn_item item;

DSP_FMA_CLONES static void scores_scalar(const item *it) {
  for (int64_t j = 0; j < it->nk; j++) {
    const dsp_bf16 *kr = it->kb + j * it->kst;
    for (int64_t r = 0; r < it->nq; r++) {
      const float *q = it->qf + r * it->D;
      float s = 0.0f;
      for (int64_t d = 0; d < it->D; d++) s = fmaf(q[d], dsp_bf16_to_f32(kr[d]), s);
      it->e[r * it->es + j] = s;
    }
  }
}

DSP_FMA_CLONES static void pv_scalar(const item *it, int64_t r) {
  const float *p = it->e + r * it->es;
  float *acc = it->acc + r * it->D;
  for (int64_t d = 0; d < it->D; d++) acc[d] = 0.0f;
  for (int64_t j = 0; j < it->nk; j++) {
    const dsp_bf16 *vr = it->vb + j * it->kst;
    for (int64_t d = 0; d < it->D; d++) acc[d] = fmaf(p[j], dsp_bf16_to_f32(vr[d]), acc[d]);
  }
}

/* Scores into probabilities for head r, in place: s = bf16(bf16(s) * scale),
 * e = expf(s - max), z = the sum of e in key order, p = bf16(e / z). */
static void softmax_scalar(const item *it, int64_t r, float scale) {
  float *e = it->e + r * it->es, m = -INFINITY, z = 0.0f;
  for (int64_t j = 0; j < it->nk; j++) {
    e[j] = dsp_round_bf16(dsp_round_bf16(e[j]) * scale);
    m = e[j] > m ? e[j] : m;
  }
  for (int64_t j = 0; j < it->nk; j++) {
    e[j] = dsp_cpu_expf(e[j] - m);
    z += e[j];
  }
  for (int64_t j = 0; j < it->nk; j++) e[j] = dsp_round_bf16(e[j] / z);
}

/* For D % 32 == 0: kt[(d / 2) * 16 + j] = the dword (d, d + 1) of key j < nb, 0 past nb, by one 64-byte load per
 * key and 32 dims and a transpose: the lanes a gather would bring, at a fraction of a gather's cost. */
DSP_AVX512_INLINE void keys_transposed(const item *it, const dsp_bf16 *base, int64_t nb, int32_t *kt) {
  for (int64_t d0 = 0; d0 < it->D; d0 += 32) {
    __m512i r[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) r[j] = j < nb ? _mm512_loadu_si512(base + j * it->kst + d0) : _mm512_setzero_si512();
    dsp_avx512_transpose16(r);
#pragma GCC unroll 16
    for (int p = 0; p < 16; p++) _mm512_store_si512(kt + (d0 / 2 + p) * 16, r[p]);
  }
}

/* q vectors r0 .. r0 + rc - 1 (rc <= RC) against nbk <= NB blocks of 16 keys
 * from key j0, 16 keys per vector: kt holds block b's (d, d + 1) dword of
 * every key at kt + b * D * 8 (keys_transposed), or, base given (NB 1; a
 * literal NULL at the other call sites, so the test folds away), a 32-bit
 * gather at an even d brings them from base (D is even, so it never reads
 * past a key's row). NB x RC chains in flight, so that a decode's few q
 * vectors do not wait on one FMA chain per block; each chain still one fmaf
 * chain in order over d per key. NB and RC are constants at every call site,
 * so the loops unroll and acc stays in registers. */
DSP_AVX512_INLINE void scores_blocks(const item *it, const int32_t *kt, const dsp_bf16 *base, __m512i idx,
                                     const int NB, const int RC, int nbk, const __mmask16 *live, int64_t j0, int64_t r0,
                                     int rc) {
  const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
  __m512 acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
  const float *q = it->qf + r0 * it->D;
  for (int64_t d = 0; d < it->D; d += 2) {
#pragma GCC unroll 4
    for (int b = 0; b < NB; b++)
      if (b < nbk) {
        const __m512i x = !base ? _mm512_load_si512(kt + b * it->D * 8 + d * 8)
                                : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live[0], idx, base + d, 2);
        const __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
        const __m512 hv = _mm512_castsi512_ps(_mm512_and_si512(x, hi));
#pragma GCC unroll 8
        for (int i = 0; i < RC; i++)
          if (i < rc) {
            acc[b * RC + i] = _mm512_fmadd_ps(_mm512_set1_ps(q[i * it->D + d]), lo, acc[b * RC + i]);
            acc[b * RC + i] = _mm512_fmadd_ps(_mm512_set1_ps(q[i * it->D + d + 1]), hv, acc[b * RC + i]);
          }
      }
  }
#pragma GCC unroll 4
  for (int b = 0; b < NB; b++)
#pragma GCC unroll 8
    for (int i = 0; i < RC; i++)
      if (b < nbk && i < rc) _mm512_mask_storeu_ps(it->e + (r0 + i) * it->es + j0 + 16 * b, live[b], acc[b * RC + i]);
}

/* Few q vectors (a decode row's heads, a short run): NB blocks of keys
 * transposed, then every q vector against all of them. */
DSP_AVX512_INLINE void scores_few(const item *it, const int NB, const int RC) {
  int32_t kt[4 * 16 * 128] __attribute__((aligned(64))); /* NB <= 4 blocks, D <= 256 */
  for (int64_t j0 = 0; j0 < it->nk; j0 += 16 * NB) {
    const int nbk = (int)((it->nk - j0 + 15) / 16 < NB ? (it->nk - j0 + 15) / 16 : NB);
    __mmask16 live[4];
    for (int b = 0; b < nbk; b++) {
      const int64_t jb = j0 + 16 * b, nb = it->nk - jb < 16 ? it->nk - jb : 16;
      const dsp_bf16 *base = it->kb + jb * it->kst;
      live[b] = dsp_avx512_lanes(nb);
      /* the same block of the next group: a head's keys lie one cache row apart, too far for the hardware */
      for (int64_t j = 16 * NB; j < 16 * NB + 16 && jb + j < it->nk; j++)
        for (int64_t c = 0; c < it->D * 2; c += 64) _mm_prefetch((const char *)(base + j * it->kst) + c, _MM_HINT_T0);
      keys_transposed(it, base, nb, kt + b * it->D * 8);
    }
    for (int64_t r0 = 0; r0 < it->nq; r0 += RC) /* a full group's count a constant: no per-step tests */
      if (it->nq - r0 >= RC) scores_blocks(it, kt, NULL, _mm512_setzero_si512(), NB, RC, nbk, live, j0, r0, RC);
      else scores_blocks(it, kt, NULL, _mm512_setzero_si512(), NB, RC, nbk, live, j0, r0, (int)(it->nq - r0));
  }
}

DSP_AVX512 static void scores_avx512(const item *it) {
  const int tr = it->D % 32 == 0 && it->D <= 256;
  if (tr && it->nq <= 2) {
    scores_few(it, 4, 2);
    return;
  }
  if (tr && it->nq <= 4) {
    scores_few(it, 4, 4);
    return;
  }
  if (tr && it->nq <= 8) {
    scores_few(it, 2, 8);
    return;
  }
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i idx = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)it->kst));
  int32_t kt[16 * 128] __attribute__((aligned(64))); /* D <= 256 */
  for (int64_t j0 = 0; j0 < it->nk; j0 += 16) {
    const int64_t nb = it->nk - j0 < 16 ? it->nk - j0 : 16;
    const __mmask16 live = dsp_avx512_lanes(nb);
    const dsp_bf16 *base = it->kb + j0 * it->kst;
    /* the block after next: a head's keys lie one cache row apart, too far apart for the hardware to follow */
    for (int64_t j = 32; j < 48 && j0 + j < it->nk; j++)
      for (int64_t c = 0; c < it->D * 2; c += 64) _mm_prefetch((const char *)(base + j * it->kst) + c, _MM_HINT_T0);
    if (tr) keys_transposed(it, base, nb, kt);
    for (int64_t r0 = 0; r0 < it->nq; r0 += 16)
      if (tr && it->nq - r0 >= 16) scores_blocks(it, kt, NULL, idx, 1, 16, 1, &live, j0, r0, 16);
      else if (tr) scores_blocks(it, kt, NULL, idx, 1, 16, 1, &live, j0, r0, (int)(it->nq - r0));
      else scores_blocks(it, NULL, base, idx, 1, 16, 1, &live, j0, r0, (int)(it->nq - r0 < 16 ? it->nq - r0 : 16));
  }
}

/* p.v of heads r0 .. r0 + rc - 1 (rc <= HG) over dims d0 .. d0 + 16 NV - 1: 16
 * dims in the lanes, each (head, dim) one fmaf chain in key order as the scalar
 * path; NV x HG <= 16 chains in flight share each value row's load. NV and HG
 * are constants at every call site, so the loops unroll and acc stays in
 * registers. */
DSP_AVX512_INLINE void pv_group(const item *it, int64_t d0, const int NV, const int HG, int64_t r0, int rc,
                                const __mmask16 *m, int64_t j0, int64_t j1) {
  __m512 acc[16];
  float *out = it->acc + r0 * it->D + d0;
#pragma GCC unroll 16
  for (int h = 0; h < HG; h++)
#pragma GCC unroll 4
    for (int c = 0; c < NV; c++)
      acc[h * NV + c] = j0 && h < rc ? _mm512_maskz_loadu_ps(m[c], out + h * it->D + 16 * c) : _mm512_setzero_ps();
  const float *p = it->e + r0 * it->es;
  for (int64_t j = j0; j < j1; j++) {
    const dsp_bf16 *vr = it->vb + j * it->kst + d0;
    if (j + 16 < j1)
#pragma GCC unroll 4
      for (int c = 0; c < NV; c += 2) _mm_prefetch((const char *)(vr + 16 * it->kst + 16 * c), _MM_HINT_T0);
    __m512 v[4];
#pragma GCC unroll 4
    for (int c = 0; c < NV; c++)
      v[c] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m[c], vr + 16 * c)), 16));
#pragma GCC unroll 16
    for (int h = 0; h < HG; h++)
      if (h < rc) {
        const __m512 pj = _mm512_set1_ps(p[h * it->es + j]);
#pragma GCC unroll 4
        for (int c = 0; c < NV; c++) acc[h * NV + c] = _mm512_fmadd_ps(pj, v[c], acc[h * NV + c]);
      }
  }
#pragma GCC unroll 16
  for (int h = 0; h < HG; h++)
    if (h < rc)
#pragma GCC unroll 4
      for (int c = 0; c < NV; c++) _mm512_mask_storeu_ps(out + h * it->D + 16 * c, m[c], acc[h * NV + c]);
}

/* q vectors v0 .. v0 + nq - 1 over keys [j0, j1) (j0 > 0: continuing their
 * chains from it->acc), 64 dims at a time, in groups whose size is a constant
 * of the call (a full group, then 8, 4, 2, 1): no per-key test of which
 * vectors are live. */
DSP_AVX512 static void pv_range(const item *it, int64_t v0, int64_t nq, int64_t j0, int64_t j1) {
  for (int64_t d0 = 0; d0 < it->D; d0 += 64) {
    const int64_t n = it->D - d0 < 64 ? it->D - d0 : 64;
    const int nv = (int)((n + 15) / 16), hg = 16 / nv; /* vectors per value row, q vectors per full group */
    __mmask16 m[4];
    for (int c = 0; c < 4; c++) m[c] = dsp_avx512_lanes(n - 16 * c);
    for (int64_t r0 = v0, g; r0 < v0 + nq; r0 += g) {
      const int64_t rem = v0 + nq - r0;
      g = rem >= hg ? hg : rem >= 8 ? 8 : rem >= 4 ? 4 : rem >= 2 ? 2 : 1;
      switch (nv * 32 + (int)g) {
        case 4 * 32 + 4: pv_group(it, d0, 4, 4, r0, 4, m, j0, j1); break;
        case 4 * 32 + 2: pv_group(it, d0, 4, 2, r0, 2, m, j0, j1); break;
        case 4 * 32 + 1: pv_group(it, d0, 4, 1, r0, 1, m, j0, j1); break;
        case 3 * 32 + 5: pv_group(it, d0, 3, 5, r0, 5, m, j0, j1); break;
        case 3 * 32 + 4: pv_group(it, d0, 3, 4, r0, 4, m, j0, j1); break;
        case 3 * 32 + 2: pv_group(it, d0, 3, 2, r0, 2, m, j0, j1); break;
        case 3 * 32 + 1: pv_group(it, d0, 3, 1, r0, 1, m, j0, j1); break;
        case 2 * 32 + 8: pv_group(it, d0, 2, 8, r0, 8, m, j0, j1); break;
        case 2 * 32 + 4: pv_group(it, d0, 2, 4, r0, 4, m, j0, j1); break;
        case 2 * 32 + 2: pv_group(it, d0, 2, 2, r0, 2, m, j0, j1); break;
        case 2 * 32 + 1: pv_group(it, d0, 2, 1, r0, 1, m, j0, j1); break;
        case 1 * 32 + 16: pv_group(it, d0, 1, 16, r0, 16, m, j0, j1); break;
        case 1 * 32 + 8: pv_group(it, d0, 1, 8, r0, 8, m, j0, j1); break;
        case 1 * 32 + 4: pv_group(it, d0, 1, 4, r0, 4, m, j0, j1); break;
        case 1 * 32 + 2: pv_group(it, d0, 1, 2, r0, 2, m, j0, j1); break;
        default: pv_group(it, d0, 1, 1, r0, 1, m, j0, j1); break;
      }
    }
  }
}

/* p.v of the run's nr rows x rep heads: the keys every row sees with all q
 * vectors together (more chains in flight), then each row's own further keys;
 * each (vector, dim) chain still runs in key order from +0. */
typedef void (*pv_range_fn)(const item *it, int64_t v0, int64_t nq, int64_t j0, int64_t j1);
static void pv_run(const item *it, int64_t nr, const int64_t *row_nk, pv_range_fn range) {
  int64_t common = INT64_MAX;
  for (int64_t r = 0; r < nr; r++) common = row_nk[r] < common ? row_nk[r] : common;
  range(it, 0, nr * it->rep, 0, common);
  for (int64_t r = 0; r < nr; r++)
    if (row_nk[r] > common) range(it, r * it->rep, it->rep, common, row_nk[r]);
}

/* softmax_scalar's bits in passes that run several q vectors' z sums (each a
 * chain in key order) at once instead of one after another. Pass 1 (one q
 * vector): the rounding passes 16 keys at a time and the max over lanes (equal
 * values may differ only in the sign of a zero, which no e = expf(s - max)
 * sees); then expf 16 keys at a time (expf_avx512.h: the scalar one's bits). A
 * vector with a NaN score gets NaN everywhere, as the scalar path's NaN z
 * gives. softmax_scale_avx512: pass 1, returning the max. */
DSP_AVX512 static float softmax_scale_avx512(float *e, int64_t nk, float scale, int *nan_seen) {
  const __m512 sc = _mm512_set1_ps(scale);
  __m512 mv = _mm512_set1_ps(-INFINITY);
  __mmask16 nan = 0;
  for (int64_t j = 0; j < nk; j += 16) {
    const __mmask16 live = dsp_avx512_lanes(nk - j);
    const __m512 x = _mm512_maskz_loadu_ps(live, e + j);
    nan |= _mm512_mask_cmp_ps_mask(live, x, x, _CMP_UNORD_Q);
    const __m512 y = dsp_avx512_round_bf16(_mm512_mul_ps(dsp_avx512_round_bf16(x), sc));
    _mm512_mask_storeu_ps(e + j, live, y);
    mv = _mm512_mask_max_ps(mv, live, mv, y);
  }
  *nan_seen = nan != 0;
  return _mm512_reduce_max_ps(mv);
}

DSP_AVX512 static void softmax_exp_avx512(float *e, int64_t nk, float scale) {
  int nan;
  const __m512 mm = _mm512_set1_ps(softmax_scale_avx512(e, nk, scale, &nan));
  if (nan) {
    for (int64_t j = 0; j < nk; j++) e[j] = NAN;
    return;
  }
  for (int64_t j = 0; j < nk; j += 16) {
    const __mmask16 live = dsp_avx512_lanes(nk - j);
    _mm512_mask_storeu_ps(e + j, live, dsp_avx512_expf(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, e + j), mm)));
  }
}

/* The expf pass and the z sums of up to 8 q vectors together (their pass 1
 * done: mx their maxima, nan whether a score was NaN): block by block, each
 * vector's e stored, then added to its z in key order. A block's adds wait on
 * each other, the next block's expf does not, so the sums' latency hides
 * under the expf's work (the same bits as the passes one after another). */
DSP_AVX512 static void softmax_ez_avx512(float *e, int64_t es, const int64_t *nk, int n, const float *mx,
                                         const int *nan, float *z) {
  float zs[8];
  int64_t most = 0;
  for (int v = 0; v < n; v++) {
    most = nk[v] > most ? nk[v] : most;
    zs[v] = nan[v] ? NAN : 0.0f; /* a NaN vector's z: the sum of its NaNs */
    for (int64_t j = 0; nan[v] && j < nk[v]; j++) e[v * es + j] = NAN;
  }
  for (int64_t j = 0; j < most; j += 16)
    for (int v = 0; v < n; v++) {
      if (nan[v] || j >= nk[v]) continue;
      float *ev = e + v * es;
      const __mmask16 live = dsp_avx512_lanes(nk[v] - j);
      _mm512_mask_storeu_ps(ev + j, live,
                            dsp_avx512_expf(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, ev + j), _mm512_set1_ps(mx[v]))));
      const int64_t nb = nk[v] - j < 16 ? nk[v] - j : 16;
      float t = zs[v];
      for (int64_t i = 0; i < nb; i++) t += ev[j + i];
      zs[v] = t;
    }
  for (int v = 0; v < n; v++) z[v] = zs[v];
}

/* Pass 2: z of n <= 8 q vectors, vector v's e at e + v * es over its nk[v]
 * keys, each a chain of adds in key order from +0: eight chains in registers,
 * interleaved over the keys all of them have (a chain's add waits on the one
 * before, so one chain alone runs at the add's latency), then each one's own. */
static void softmax_z(const float *e, int64_t es, const int64_t *nk, int n, float *z) {
  int64_t common = INT64_MAX;
  const float *p[8];
  for (int v = 0; v < 8; v++) {
    p[v] = e + (v < n ? v : 0) * es; /* the missing ones repeat vector 0, their sums unused */
    if (v < n) common = nk[v] < common ? nk[v] : common;
  }
  float z0 = 0.0f, z1 = 0.0f, z2 = 0.0f, z3 = 0.0f, z4 = 0.0f, z5 = 0.0f, z6 = 0.0f, z7 = 0.0f;
  for (int64_t j = 0; j < common; j++) {
    z0 += p[0][j], z1 += p[1][j], z2 += p[2][j], z3 += p[3][j];
    z4 += p[4][j], z5 += p[5][j], z6 += p[6][j], z7 += p[7][j];
  }
  const float zs[8] = {z0, z1, z2, z3, z4, z5, z6, z7};
  for (int v = 0; v < n; v++) {
    float t = zs[v];
    for (int64_t j = common; j < nk[v]; j++) t += p[v][j];
    z[v] = t;
  }
}

/* Pass 2 for 9 to 16 q vectors: lane v adds vector v's e in key order from
 * +0, one gather a key. */
DSP_AVX512 static void softmax_z_lanes(const float *e, int64_t es, const int64_t *nk, int n, float *z) {
  int64_t most = 0;
  for (int v = 0; v < n; v++) most = nk[v] > most ? nk[v] : most;
  __m512i idx = _mm512_setzero_si512(), cnt = _mm512_setzero_si512();
  for (int v = 0; v < n; v++) {
    idx = _mm512_mask_set1_epi32(idx, (__mmask16)(1u << v), (int)(v * es));
    cnt = _mm512_mask_set1_epi32(cnt, (__mmask16)(1u << v), (int)nk[v]);
  }
  __m512 zv = _mm512_setzero_ps();
  for (int64_t j = 0; j < most; j++) {
    const __mmask16 live = _mm512_cmpgt_epi32_mask(cnt, _mm512_set1_epi32((int)j));
    const __m512 x = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, idx, e + j, 4);
    zv = _mm512_mask_add_ps(zv, live, zv, x);
  }
  float t[16];
  _mm512_storeu_ps(t, zv);
  for (int v = 0; v < n; v++) z[v] = t[v];
}

/* Pass 3: p = bf16(e / z). */
DSP_AVX512 static void softmax_div_avx512(float *e, int64_t nk, float z) {
  const __m512 zv = _mm512_set1_ps(z);
  for (int64_t j = 0; j < nk; j += 16) {
    const __mmask16 live = dsp_avx512_lanes(nk - j);
    _mm512_mask_storeu_ps(e + j, live, dsp_avx512_round_bf16(_mm512_div_ps(_mm512_maskz_loadu_ps(live, e + j), zv)));
  }
}

/* The three passes over the run's nr rows x rep heads (vector r * rep + h
 * holds row r's keys). */
static void softmax_run_avx512(const item *it, int64_t nr, const int64_t *row_nk, float scale) {
  const int64_t nv = nr * it->rep;
  if (nv <= 8) { /* a decode row's heads, a short run: expf and z together */
    int64_t nk[8];
    float mx[8], z[8];
    int nan[8];
    for (int v = 0; v < nv; v++) {
      nk[v] = row_nk[v / it->rep];
      mx[v] = softmax_scale_avx512(it->e + v * it->es, nk[v], scale, &nan[v]);
    }
    softmax_ez_avx512(it->e, it->es, nk, (int)nv, mx, nan, z);
    for (int v = 0; v < nv; v++) softmax_div_avx512(it->e + v * it->es, nk[v], z[v]);
    return;
  }
  for (int64_t v = 0; v < nv; v++) softmax_exp_avx512(it->e + v * it->es, row_nk[v / it->rep], scale);
  for (int64_t v0 = 0; v0 < nv; v0 += 16) {
    const int n = (int)(nv - v0 < 16 ? nv - v0 : 16);
    int64_t nk[16];
    float z[16];
    for (int v = 0; v < n; v++) nk[v] = row_nk[(v0 + v) / it->rep];
    if (n > 8) softmax_z_lanes(it->e + v0 * it->es, it->es, nk, n, z);
    else softmax_z(it->e + v0 * it->es, it->es, nk, n, z);
    for (int v = 0; v < n; v++) softmax_div_avx512(it->e + (v0 + v) * it->es, nk[v], z[v]);
  }
}

/* A q row to fp32 and an output row to bf16, 16 dims at a time (the scalar
 * conversions' bits, a NaN keeping its sign and payload, quieted). */
DSP_AVX512 static void row_to_f32(const dsp_bf16 *src, float *dst, int64_t D) {
  for (int64_t d = 0; d < D; d += 16) {
    const __mmask16 m = dsp_avx512_lanes(D - d);
    const __m512i x = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + d));
    _mm512_mask_storeu_ps(dst + d, m, _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)));
  }
}
DSP_AVX512 static void row_to_bf16(const float *src, dsp_bf16 *dst, int64_t D) {
  for (int64_t d = 0; d < D; d += 16) {
    const __mmask16 m = dsp_avx512_lanes(D - d);
    _mm256_mask_storeu_epi16(dst + d, m, dsp_avx512_to_bf16(_mm512_maskz_loadu_ps(m, src + d)));
  }
}

static int64_t clamp_slot(const dsp_cpu_attention_args *a, int64_t t) {
  return a->row_slot[t] < 0 ? 0 : a->row_slot[t] >= a->slots ? a->slots - 1 : a->row_slot[t];
}
static int64_t clamp_keys(const dsp_cpu_attention_args *a, int64_t t) {
  return a->row_keys[t] < 1 ? 1 : a->row_keys[t] > a->max_len ? a->max_len : a->row_keys[t];
}

/* Work items: (RUN rows, kv head). Inside one, each run of consecutive rows on
 * one slot (a verify call's tokens, a draft block) computes its q.k together
 * over the run's most keys; each row then takes its own keys' scores, so no
 * row's result depends on the others (the scalar path runs rows one by one). */
void dsp_cpu_attention(const dsp_cpu_attention_args *a) {
  const dsp_tensor *q = a->q;
  const int64_t T = q->shape[0], Hq = q->shape[1], D = q->shape[2], Hkv = a->kv_heads, rep = Hq / Hkv;
  const int64_t kstride_s = a->max_len * a->kv_stride, chunks = (T + RUN - 1) / RUN;
  const dsp_cpu_isa isa = dsp_cpu_isa_current();
  /* 2: AVX-512, 1: AVX2 (whole 16-dim key pieces), 0: the scalar loops */
  const int vec = isa == DSP_CPU_ISA_AVX512 && D % 2 == 0 ? 2 : isa >= DSP_CPU_ISA_AVX2 && D % 16 == 0 && D <= 256;
  const size_t per = dsp_cpu_attention_scratch(a->max_len, Hq, Hkv, D, 1);
#pragma omp parallel for collapse(2) schedule(static) if (chunks * Hkv > 1)
  for (int64_t c = 0; c < chunks; c++)
    for (int64_t g = 0; g < Hkv; g++) {
      float *sc = a->scratch + (size_t)omp_get_thread_num() * per;
      const int64_t end = c * RUN + RUN < T ? c * RUN + RUN : T;
      for (int64_t t0 = c * RUN, t1; t0 < end; t0 = t1) {
        const int64_t slot = clamp_slot(a, t0);
        int64_t nk = clamp_keys(a, t0);
        for (t1 = t0 + 1; vec && t1 < end && clamp_slot(a, t1) == slot; t1++) nk = clamp_keys(a, t1) > nk ? clamp_keys(a, t1) : nk;
        const int64_t nr = t1 - t0;
        item it = {.kb = a->k + slot * kstride_s + g * D, .vb = a->v + slot * kstride_s + g * D, .nk = nk, .D = D,
                   .rep = rep, .kst = a->kv_stride, .nq = nr * rep, .es = nk, .qf = sc, .e = sc + RUN * rep * D,
                   .acc = sc + RUN * rep * D + RUN * rep * a->max_len};
        for (int64_t r = 0; r < nr; r++)
          for (int64_t h = 0; h < rep; h++) {
            const dsp_bf16 *qr = (const dsp_bf16 *)q->data + (t0 + r) * q->stride[0] + (g * rep + h) * q->stride[1];
            if (vec == 2) row_to_f32(qr, it.qf + (r * rep + h) * D, D); /* q's dims are contiguous (ops.c) */
            else
              for (int64_t d = 0; d < D; d++) it.qf[(r * rep + h) * D + d] = dsp_bf16_to_f32(qr[d * q->stride[2]]);
          }
        int64_t row_nk[RUN];
        for (int64_t r = 0; r < nr; r++) row_nk[r] = clamp_keys(a, t0 + r);
        if (vec == 2) {
          scores_avx512(&it);
          softmax_run_avx512(&it, nr, row_nk, a->scale);
          pv_run(&it, nr, row_nk, pv_range);
        } else if (vec == 1) {
          dsp_cpu_attn_scores_avx2(&it);
          dsp_cpu_attn_softmax_avx2(&it, nr, row_nk, a->scale);
          pv_run(&it, nr, row_nk, dsp_cpu_attn_pv_avx2);
        } else {
          scores_scalar(&it);
        }
        for (int64_t r = 0; r < nr; r++) {
          item ir = it; /* row r: its scores, its keys, its accumulators */
          ir.e = it.e + r * rep * it.es;
          ir.acc = it.acc + r * rep * D;
          ir.nk = row_nk[r];
          if (!vec)
            for (int64_t h = 0; h < rep; h++) softmax_scalar(&ir, h, a->scale), pv_scalar(&ir, h);
          for (int64_t h = 0; h < rep; h++) {
            const int64_t hq = g * rep + h;
            dsp_bf16 *orow = a->out->ndim == 3
                                 ? (dsp_bf16 *)a->out->data + (t0 + r) * a->out->stride[0] + hq * a->out->stride[1]
                                 : (dsp_bf16 *)a->out->data + (t0 + r) * a->out->stride[0] + hq * D;
            const int64_t oc = a->out->stride[a->out->ndim - 1];
            if (vec == 2 && oc == 1) row_to_bf16(ir.acc + h * D, orow, D);
            else
              for (int64_t d = 0; d < D; d++) orow[d * oc] = dsp_f32_to_bf16(ir.acc[h * D + d]);
          }
        }
      }
    }
}
