/* The AVX-512 BF16 path of the product: vdpbf16ps on the chain's own panels,
 * two k steps per instruction, with the bits of the fmaf chain (kernel.h).
 *
 * vdpbf16ps adds, per 32-bit lane, the product of the two operands' high
 * bf16 halves to the accumulator and rounds, then the product of their low
 * halves and rounds (measured on the CPUs where dsp_cpu_dot_check passes:
 * bit for bit two fmaf, high pair first; a bf16 x bf16 product is exact in
 * fp32). So k step 2p goes in the high halves and 2p + 1 in the low ones:
 * each lane then runs acc = fmaf(a[2p], w[2p], acc); acc = fmaf(a[2p + 1],
 * w[2p + 1], acc), the chain itself. The instruction reads subnormal inputs
 * as zero and flushes subnormal results; the caller runs it only where the
 * rows' guards (kernel.h) rule both out, the chain's kernels elsewhere. */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/cpu/kernel.h"

#define DSP_DOT __attribute__((target("avx512f,avx512bw,avx512bf16,fma")))
#define DSP_DOT_INLINE static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512bf16,fma")))

/* Panel lines k and k + 1 (word j: row j low, row 16 + j high) into the two operands of step pair (k, k + 1):
 * rows 0..15 and rows 16..31, each lane's high half at k and low half at k + 1. */
DSP_DOT_INLINE void dot_pair(const uint16_t *b, int has_odd, __m512i *r0, __m512i *r1) {
  const __m512i x0 = _mm512_load_si512((const void *)b);
  const __m512i x1 = has_odd ? _mm512_load_si512((const void *)(b + DSP_CPU_NR)) : _mm512_setzero_si512();
  *r0 = _mm512_mask_blend_epi16(0x55555555u, _mm512_slli_epi32(x0, 16), x1);
  *r1 = _mm512_mask_blend_epi16(0x55555555u, x0, _mm512_srli_epi32(x1, 16));
}

/* NP (1 or 2) panels, MR rows: the chain over kc steps (kc odd only at the end of K: the missing step's operands
 * are zeros, and acc + (+0 * +0) is acc, which is never -0). ap: the pair words of dsp_cpu_pair_tile at this
 * block's k0, word (p, i) at [2 p MR + i]. */
DSP_DOT_INLINE void dot_np(const float *ap, const int MR, const int NP, const uint16_t *b0, const uint16_t *b1,
                           int64_t kc, float *t0, float *t1, int load, const char *pf0, const char *pf1) {
  const uint32_t *aq = (const uint32_t *)(const void *)ap;
  __m512 acc[DSP_CPU_MR][4];
#pragma GCC unroll 12
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
    for (int p = 0; p < NP; p++) {
      const float *t = (p ? t1 : t0) + i * DSP_CPU_NR;
      acc[i][2 * p] = load ? _mm512_load_ps(t) : _mm512_setzero_ps();
      acc[i][2 * p + 1] = load ? _mm512_load_ps(t + 16) : _mm512_setzero_ps();
    }
  const int64_t pairs = (kc + 1) / 2;
#pragma GCC unroll 2
  for (int64_t pp = 0; pp < pairs; pp++) {
    const int64_t kk = 2 * pp;
    const int has_odd = kk + 1 < kc;
    __m512i w[4];
#pragma GCC unroll 2
    for (int p = 0; p < NP; p++) dot_pair((p ? b1 : b0) + kk * DSP_CPU_NR, has_odd, &w[2 * p], &w[2 * p + 1]);
    _mm_prefetch(pf0 + kk * 64, _MM_HINT_T1);
    _mm_prefetch(pf0 + kk * 64 + 64, _MM_HINT_T1);
    if (NP == 2) {
      _mm_prefetch(pf1 + kk * 64, _MM_HINT_T1);
      _mm_prefetch(pf1 + kk * 64 + 64, _MM_HINT_T1);
    }
    const uint32_t *av = aq + kk * MR;
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32((int)av[i]);
#pragma GCC unroll 4
      for (int c = 0; c < 2 * NP; c++) acc[i][c] = _mm512_dpbf16_ps(acc[i][c], (__m512bh)w[c], a);
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

#define DOT_FN(n)                                                                                            \
  DSP_DOT static void dot_##n(const float *ap, const uint16_t *bp, int64_t kc, float *tile, int load,        \
                              const char *pf) {                                                              \
    dot_np(ap, n, 1, bp, bp, kc, tile, tile, load, pf, pf);                                                  \
  }
DOT_FN(1) DOT_FN(2) DOT_FN(3) DOT_FN(4) DOT_FN(5) DOT_FN(6)
DOT_FN(7) DOT_FN(8) DOT_FN(9) DOT_FN(10) DOT_FN(11) DOT_FN(12)

DSP_DOT void dsp_cpu_tile_dot(const float *ap, int mr, const uint16_t *bp, int64_t kc, float *tile, int load,
                              const void *pfv) {
  const char *pf = pfv ? (const char *)pfv : (const char *)bp; /* no prefetch wanted: the block being read */
  DSP_CPU_MR_CALL(dot_, mr, ap, bp, kc, tile, load, pf)
}

#define DOT2_FN(n)                                                                                              \
  DSP_DOT static void dot2_##n(const float *ap, const uint16_t *b0, const uint16_t *b1, int64_t kc, float *t0,  \
                               float *t1, int load, const char *p0, const char *p1) {                           \
    dot_np(ap, n, 2, b0, b1, kc, t0, t1, load, p0, p1);                                                         \
  }
DOT2_FN(1) DOT2_FN(2) DOT2_FN(3) DOT2_FN(4)

DSP_DOT void dsp_cpu_tile2_dot(const float *ap, int mr, const uint16_t *bp0, const uint16_t *bp1, int64_t kc,
                               float *tile0, float *tile1, int load, const void *pf0, const void *pf1) {
  const char *p0 = pf0 ? (const char *)pf0 : (const char *)bp0, *p1 = pf1 ? (const char *)pf1 : (const char *)bp1;
  DSP_CPU_MR2_CALL(dot2_, mr, ap, bp0, bp1, kc, tile0, tile1, load, p0, p1)
}

/* ---- the start-up check ------------------------------------------------------------------------------- */
static uint64_t check_rng(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A normal bf16 of biased exponent in [elo, ehi], random sign and mantissa. */
static uint16_t check_bf16(uint64_t *s, int elo, int ehi) {
  const uint64_t r = check_rng(s);
  const int e = elo + (int)(r % (uint64_t)(ehi - elo + 1));
  return (uint16_t)(((r >> 20) & 1) << 15 | (uint64_t)e << 7 | ((r >> 24) & 0x7F));
}

static float check_widen(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

DSP_DOT static void check_rounds(const uint16_t *a, const uint16_t *b, const float *acc, float *out) {
  _mm512_storeu_ps(out, _mm512_dpbf16_ps(_mm512_loadu_ps(acc), (__m512bh)_mm512_loadu_si512((const void *)a),
                                         (__m512bh)_mm512_loadu_si512((const void *)b)));
}

int dsp_cpu_dot_check(void) {
  uint64_t s = 0x5EEDDA7Aull;
  int bad = 0;
  /* Pairs whose guards sum to at least DSP_CPU_GUARD_MIN (the only ones the product runs through the instruction):
     exponents from the guard's edge to near overflow, accumulators of every scale (cancellations among them),
     zeros; 16 lanes a round */
  for (int round = 0; round < 2000 && !bad; round++) {
    uint16_t a[32], b[32];
    float acc[16], out[16];
    const int band = round % 4;
    for (int i = 0; i < 32; i++) {
      const int lo = band == 0 ? 71 : band == 1 ? 100 : band == 2 ? 120 : 190;
      const int hi = band == 0 ? 75 : band == 1 ? 140 : band == 2 ? 134 : 200;
      a[i] = check_bf16(&s, lo, hi);
      b[i] = check_bf16(&s, lo, hi); /* band 0: exponent sums 142 .. 150, the guard's edge */
      if (check_rng(&s) % 16 == 0) b[i] = (uint16_t)(check_rng(&s) & 0x8000); /* a signed zero */
    }
    /* accumulators a chain can hold there (multiples of 2^-126 or 0): zero, the first product's negative (exact
       cancellation), that plus another product (near cancellation), a product of another scale */
    for (int j = 0; j < 16; j++) {
      const uint64_t r = check_rng(&s);
      const float p = check_widen(a[2 * j + 1]) * check_widen(b[2 * j + 1]);
      const float q = check_widen(check_bf16(&s, 71, 80)) * check_widen(check_bf16(&s, 71, 80));
      const float x = check_widen(check_bf16(&s, 64, 190)) * check_widen(check_bf16(&s, 126, 128));
      acc[j] = r % 4 == 0 ? 0.0f : r % 4 == 1 ? -p : r % 4 == 2 ? -p + q : x;
      if (!isfinite(acc[j])) acc[j] = 0.0f;
    }
    check_rounds(a, b, acc, out);
    for (int j = 0; j < 16; j++) {
      const float want = fmaf(check_widen(a[2 * j]), check_widen(b[2 * j]),
                              fmaf(check_widen(a[2 * j + 1]), check_widen(b[2 * j + 1]), acc[j]));
      uint32_t u, v;
      memcpy(&u, &out[j], 4), memcpy(&v, &want, 4);
      bad |= u != v && !(want != want && out[j] != out[j]);
    }
  }
  return !bad;
}

/* A tile's rows as pair words, high half k 2p, low half 2p + 1 (0 past K), word (p, i) at [2 p mr + i], and
 * the tile's guard: the smallest of its rows'. */
void dsp_cpu_pair_tile(const dsp_tensor *a, int64_t t, uint32_t *out, int16_t *guard) {
  const int64_t m0 = t * DSP_CPU_MR, k = a->shape[1], cs = a->stride[1];
  const int mr = (int)(a->shape[0] - m0 < DSP_CPU_MR ? a->shape[0] - m0 : DSP_CPU_MR);
  int16_t g = 255;
  for (int i = 0; i < mr; i++) {
    const uint16_t *row = (const uint16_t *)a->data + (m0 + i) * a->stride[0];
    for (int64_t kk = 0; kk < k; kk += 2)
      out[kk * mr + i] = (uint32_t)row[kk * cs] << 16 | (kk + 1 < k ? row[(kk + 1) * cs] : 0u);
    const int16_t r = dsp_cpu_row_guard(row, k, cs);
    g = r < g ? r : g;
  }
  *guard = g;
}
