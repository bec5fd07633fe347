/* CPU bf16 product (contract 2) and fused Markov step (contracts 3, 4).
 * Expected values come from the contracts, computed here: exact sums in double
 * on grid inputs, the normative chain acc = fmaf(a, w, acc) over k in order
 * with a rounding written here, and an argmax written from torch.argmax's
 * semantics. Every case runs on each path this CPU has (AVX-512 BF16, AVX-512F, AVX2, scalar). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/select.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/markov_step.h"
#include "kernels/cpu/matmul.h"

/* ---- helpers written from the contracts ------------------------------------ */
static const char *const PATHS[] = {"avx512bf16", "avx512", "avx2", "scalar"};
#define NPATHS 4

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static uint64_t rnd(void) {
  uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t u_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float widen(uint16_t h) { return f_of((uint32_t)h << 16); }
static uint16_t bf16_bits(float f) { return (uint16_t)(u_of(f) >> 16); }

/* Contract 1 rounding, written here: nearest, ties to even; NaN stays NaN. */
static uint16_t ref_round(float f) {
  if (isnan(f)) return 0x7FC0;
  uint32_t u = u_of(f), lo = u & 0xFFFFu, hi = u >> 16;
  if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u))) hi++;
  return (uint16_t)hi;
}

/* The normative chain for one output. */
static float ref_chain(const uint16_t *a, int64_t as, const uint16_t *w, int64_t ws, int64_t k) {
  float acc = 0.0f;
  for (int64_t i = 0; i < k; i++) acc = fmaf(widen(a[i * as]), widen(w[i * ws]), acc);
  return acc;
}

/* Bit-equal, with every NaN equal to every NaN. */
static int same_f32(float x, float y) { return (isnan(x) && isnan(y)) || u_of(x) == u_of(y); }
static int same_bf16(uint16_t x, uint16_t y) { return (isnan(widen(x)) && isnan(widen(y))) || x == y; }

static uint16_t rnd_bf16_normal(int emin, int emax) {
  int e = emin + (int)(rnd() % (uint64_t)(emax - emin + 1));
  uint16_t sign = (uint16_t)((rnd() & 1) << 15);
  return (uint16_t)(sign | (uint16_t)((e + 127) << 7) | (uint16_t)(rnd() & 0x7F));
}

static void fill_normal(uint16_t *p, size_t n, int emin, int emax) {
  for (size_t i = 0; i < n; i++) p[i] = rnd_bf16_normal(emin, emax);
}

static int force(const char *path) {
  dsp_status s = dsp_cpu_kernel_force(path);
  if (s == DSP_ERR_UNSUPPORTED) {
    print_message("  (path %s: not on this CPU, skipped)\n", path);
    return 0;
  }
  assert_int_equal(s, DSP_OK);
  return 1;
}

static dsp_cpu_packed *pack(dsp_tensor w) {
  dsp_cpu_packed *p = NULL;
  assert_int_equal(dsp_cpu_pack(&w, &p), DSP_OK);
  assert_non_null(p);
  return p;
}

/* c = a @ w^T with the current path; c contiguous [M, N] of dt. */
static void product(dsp_tensor a, const dsp_cpu_packed *w, void *c, dsp_dtype dt, int threads) {
  dsp_tensor ct = dsp_tensor_2d(c, dt, a.shape[0], dsp_cpu_packed_n(w));
  assert_int_equal(dsp_cpu_matmul_nt(&a, w, &ct, threads), DSP_OK);
}

/* ---- (1) exact grid: every partial sum is exact, so the result is the double sum */
static void test_exact_grid(void **st) {
  (void)st;
  enum { M = 13, K = 300, N = 77 };
  static uint16_t a[M * K], w[N * K], c16[M * N];
  static float c32[M * N];
  /* i * 2^-2 with |i| <= 8: products are multiples of 2^-4 below 4 in size, and
   * 300 of them stay below 2^24 units: every fp32 partial sum is exact. */
  for (int i = 0; i < M * K; i++) a[i] = bf16_bits((float)((int)(rnd() % 17) - 8) * 0.25f);
  for (int i = 0; i < N * K; i++) w[i] = bf16_bits((float)((int)(rnd() % 17) - 8) * 0.25f);
  /* one all-ones pair: row 0 . col 0 = 300 */
  for (int i = 0; i < K; i++) a[i] = w[i] = bf16_bits(1.0f);
  dsp_cpu_packed *p = pack(dsp_tensor_2d(w, DSP_BF16, N, K));
  for (int pi = 0; pi < NPATHS; pi++) {
    if (!force(PATHS[pi])) continue;
    product(dsp_tensor_2d(a, DSP_BF16, M, K), p, c16, DSP_BF16, 2);
    product(dsp_tensor_2d(a, DSP_BF16, M, K), p, c32, DSP_F32, 2);
    assert_int_equal(c16[0], 0x4396); /* 300.0 */
    for (int m = 0; m < M; m++)
      for (int n = 0; n < N; n++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += (double)widen(a[m * K + k]) * (double)widen(w[n * K + k]);
        assert_true((double)c32[m * N + n] == s);
        assert_int_equal(c16[m * N + n], ref_round((float)s));
      }
  }
  dsp_cpu_kernel_force(NULL);
  dsp_cpu_packed_free(p);
}

/* ---- (2) + (6) the paths agree with the chain written here, bit for bit ------ */
static void check_against_chain(int M, int K, int N, const uint16_t *a, const uint16_t *w) {
  dsp_cpu_packed *p = pack(dsp_tensor_2d((void *)w, DSP_BF16, N, K));
  uint16_t *c16 = malloc(sizeof *c16 * (size_t)(M * N));
  float *c32 = malloc(sizeof *c32 * (size_t)(M * N)), *ref = malloc(sizeof *ref * (size_t)(M * N));
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) ref[m * N + n] = ref_chain(a + (size_t)m * K, 1, w + (size_t)n * K, 1, K);
  int ran = 0;
  for (int pi = 0; pi < NPATHS; pi++) {
    if (!force(PATHS[pi])) continue;
    ran++;
    for (int th = 1; th <= 2; th++) {
      product(dsp_tensor_2d((void *)a, DSP_BF16, M, K), p, c16, DSP_BF16, th);
      product(dsp_tensor_2d((void *)a, DSP_BF16, M, K), p, c32, DSP_F32, th);
      for (int i = 0; i < M * N; i++) {
        if (!same_f32(c32[i], ref[i]) || !same_bf16(c16[i], ref_round(ref[i])))
          fail_msg("path %s threads %d: element %d: f32 %08x bf16 %04x, chain %08x", PATHS[pi], th, i,
                   u_of(c32[i]), c16[i], u_of(ref[i]));
        /* NaN is written in the one canonical form on every path. */
        if (isnan(ref[i])) assert_true(u_of(c32[i]) == 0x7FC00000u && c16[i] == 0x7FC0);
      }
    }
  }
  assert_true(ran >= 1);
  dsp_cpu_kernel_force(NULL);
  free(c16);
  free(c32);
  free(ref);
  dsp_cpu_packed_free(p);
}

static void test_paths_agree_random(void **st) {
  (void)st;
  enum { M = 29, K = 173, N = 100 };
  static uint16_t a[M * K], w[N * K];
  fill_normal(a, M * K, -20, 20);
  fill_normal(w, N * K, -20, 20);
  check_against_chain(M, K, N, a, w);
}

/* K around the kernel's k blocks (256 steps): the spilled partial sums must
 * continue the one chain exactly; at 13 rows, and at 1 and 3 (panels in pairs,
 * N 97 leaving the last of four panels unpaired). */
static void test_k_block_edges(void **st) {
  (void)st;
  const int ks[] = {1, 255, 256, 257, 512, 513, 1000}, ms[][2] = {{13, 33}, {1, 97}, {3, 97}};
  for (size_t r = 0; r < sizeof ms / sizeof ms[0]; r++)
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
      const int M = ms[r][0], N = ms[r][1];
      uint16_t *a = malloc(sizeof *a * (size_t)(M * ks[i])), *w = malloc(sizeof *w * (size_t)(N * ks[i]));
      fill_normal(a, (size_t)(M * ks[i]), -20, 20);
      fill_normal(w, (size_t)(N * ks[i]), -20, 20);
      check_against_chain(M, ks[i], N, a, w);
      free(a);
      free(w);
    }
}

static void test_order_k7168_specials(void **st) {
  (void)st;
  enum { M = 4, K = 7168, N = 40 };
  uint16_t *a = malloc(sizeof *a * M * K), *w = malloc(sizeof *w * N * K);
  fill_normal(a, M * K, -8, 8);
  fill_normal(w, N * K, -8, 8);
  /* Specials in some rows and columns only, so most outputs stay finite. */
  a[1 * K + 5000] = 0x7FC1;            /* NaN with a payload: row 1 all NaN */
  a[2 * K + 17] = 0x7F80;              /* +inf: row 2 is inf or NaN (inf - inf) */
  w[3 * K + 7000] = 0xFF80;            /* -inf: column 3 */
  w[4 * K + 100] = 0xFFC0;             /* negative NaN: column 4 */
  for (int k = 0; k < K; k += 3) w[5 * K + k] = (uint16_t)(0x0001 + (k & 0x7F)); /* subnormal bf16 */
  /* Row 3 x column 6: subnormal products that must not be flushed. Row 3 x
   * column 7: subnormal products with more bits than a subnormal holds, where
   * one fused rounding differs from a rounded product then a rounded sum. */
  for (int k = 0; k < K; k++) {
    a[3 * K + k] = rnd_bf16_normal(-70, -70);
    w[6 * K + k] = k % 1024 ? 0 : (uint16_t)((k & 1024) ? 0x8000 : 0x0000) | bf16_bits(0x1p-60f);
    w[7 * K + k] = rnd_bf16_normal(-66, -66);
  }
  check_against_chain(M, K, N, a, w);
  /* The grid is discriminating: the reverse order differs somewhere. */
  int differ = 0;
  for (int n = 0; n < N && !differ; n++) {
    float fw = ref_chain(a, 1, w + (size_t)n * K, 1, K);
    float bw = ref_chain(a + K - 1, -1, w + (size_t)n * K + K - 1, -1, K);
    differ = u_of(fw) != u_of(bw);
  }
  assert_true(differ);
  /* The subnormal output really is a subnormal (no flush to zero) ... */
  float r = ref_chain(a + 3 * K, 1, w + 6 * K, 1, K);
  assert_true(r != 0.0f && fabsf(r) < 0x1p-126f);
  /* ... and a multiply-then-add chain would be caught (bf16 x bf16 products are
   * exact in fp32 except where they underflow, as in row 3 x column 7). */
  float fused = ref_chain(a + 3 * K, 1, w + 7 * K, 1, K), split = 0.0f;
  for (int k = 0; k < K; k++) {
    volatile float prod = widen(a[3 * K + k]) * widen(w[7 * K + k]);
    split = split + prod;
  }
  assert_true(u_of(fused) != u_of(split));
  free(a);
  free(w);
}

/* ---- the AVX-512 BF16 path's guard -------------------------------------------------
 * Pairs of products that cancel to one 2^-127 (a subnormal partial sum): a[2j] w[2j] = 2^-113 and
 * a[2j+1] w[2j+1] = -(1 - 2^-7)(1 + 2^-7) 2^-113, so the chain holds 2^-127, 2^-126, ... and ends normal.
 * At scale 0 the rows' guards sum to 140: vdpbf16ps alone would flush every pair to 0 (asserted where the
 * CPU has it), so the product must take the chain there; at scale 1 they sum to 142 and every partial sum is a
 * multiple of 2^-126, and at 2 to 144. Every path must give the chain's bits at each scale. */
static uint16_t bf16_scaled(float x, int s) { return bf16_bits(ldexpf(x, s)); }

static void test_dot_guard(void **st) {
  (void)st;
  enum { M = 3, K = 128, N = 40 };
  static uint16_t a[M * K], w[N * K];
  for (int scale = 0; scale <= 2; scale++) {
    for (int m = 0; m < M; m++)
      for (int k = 0; k < K; k += 2) {
        a[m * K + k] = bf16_scaled(0x1p-57f, scale);
        a[m * K + k + 1] = bf16_scaled(-(1.0f - 0x1p-7f) * 0x1p-57f, scale);
      }
    for (int n = 0; n < N; n++)
      for (int k = 0; k < K; k += 2) {
        w[n * K + k] = bf16_scaled(0x1p-56f, scale);
        w[n * K + k + 1] = bf16_scaled((1.0f + 0x1p-7f) * 0x1p-56f, scale);
      }
    const float chain = ref_chain(a, 1, w, 1, K);
    assert_true(chain == ldexpf((float)(K / 2), -127 + 2 * scale)); /* the chain keeps every subnormal step */
    check_against_chain(M, K, N, a, w);
    if (scale == 0 && dsp_cpu_kernel_force("avx512bf16") == DSP_OK) {
      /* the kernel alone, on the pair words of this tile: its flushes lose the sum */
      dsp_cpu_packed *p = pack(dsp_tensor_2d(w, DSP_BF16, N, K));
      dsp_tensor at = dsp_tensor_2d(a, DSP_BF16, M, K);
      static uint32_t words[DSP_CPU_MR * K];
      static float tile[DSP_CPU_MR * DSP_CPU_NR] __attribute__((aligned(64)));
      int16_t g = 0;
      dsp_cpu_pair_tile(&at, 0, words, &g);
      assert_true(g + p->guard[0] < DSP_CPU_GUARD_MIN);
      dsp_cpu_tile_dot((const float *)(const void *)words, M, dsp_cpu_panel(p, 0), K, tile, 0, NULL);
      assert_true(u_of(tile[0]) != u_of(chain));
      print_message("  guards summing to %d: vdpbf16ps alone gives %a, the chain %a\n", g + p->guard[0],
                    (double)tile[0], (double)chain);
      dsp_cpu_packed_free(p);
      dsp_cpu_kernel_force(NULL);
    }
  }
}

/* An A row holding one subnormal (read as zero by vdpbf16ps) times a weight that makes its product normal: the
 * product must see the subnormal (the guard sends the row to the chain), in the 32-wide part of the row's guard
 * scan and in its tail. */
static void test_dot_guard_subnormal_a(void **st) {
  (void)st;
  const int ks[] = {128, 100}, at[] = {40, 98};
  for (int c = 0; c < 2; c++) {
    const int M = 2, K = ks[c], N = 33;
    uint16_t *a = calloc((size_t)(M * K), 2), *w = malloc(sizeof *w * (size_t)(N * K));
    fill_normal(w, (size_t)(N * K), 20, 22); /* biased exponents 147-149: with the subnormal's 0, past 142 */
    a[at[c]] = 0x0041;                        /* a subnormal bf16 */
    a[K + 3] = bf16_bits(1.0f); /* row 1: normal */
    check_against_chain(M, K, N, a, w);
    assert_true(ref_chain(a, 1, w, 1, K) != 0.0f);
    free(a);
    free(w);
  }
}

/* ---- (3) shard invariance + (8) threads -------------------------------------- */
static void test_shard_invariance(void **st) {
  (void)st;
  enum { M = 7, K = 64, N = 1000 };
  static uint16_t a[M * K], w[N * K], full[M * N], part[M * N];
  fill_normal(a, M * K, -10, 10);
  fill_normal(w, N * K, -10, 10);
  dsp_tensor wt = dsp_tensor_2d(w, DSP_BF16, N, K), at = dsp_tensor_2d(a, DSP_BF16, M, K);
  const int pieces[] = {1, 3, 7, 1000};
  for (int pi = 0; pi < NPATHS; pi++) {
    if (!force(PATHS[pi])) continue;
    dsp_cpu_packed *p = pack(wt);
    product(at, p, full, DSP_BF16, 1);
    dsp_cpu_packed_free(p);
    for (size_t q = 0; q < sizeof pieces / sizeof pieces[0]; q++) {
      /* One-row pieces on the fastest path only: the others share its driver. */
      if (pieces[q] == N && pi > 0 && dsp_cpu_kernel_force(PATHS[pi - 1]) == DSP_OK) {
        dsp_cpu_kernel_force(PATHS[pi]);
        continue;
      }
      /* Random cut points (sorted), mostly not multiples of 16. */
      int np = pieces[q], cut[1001];
      cut[0] = 0;
      cut[np] = N;
      if (np == N) {
        for (int i = 1; i < np; i++) cut[i] = i;
      } else {
        for (int i = 1; i < np; i++) cut[i] = (int)(rnd() % (N - 1)) + 1;
        for (int i = 1; i < np; i++)
          for (int j = i + 1; j < np; j++)
            if (cut[j] < cut[i]) { int t = cut[i]; cut[i] = cut[j]; cut[j] = t; }
      }
      memset(part, 0xAB, sizeof part);
      dsp_tensor ct = dsp_tensor_2d(part, DSP_BF16, M, N);
      for (int i = 0; i < np; i++) {
        if (cut[i] == cut[i + 1]) continue;
        dsp_tensor ws = dsp_tensor_rows(&wt, cut[i], cut[i + 1]);
        dsp_tensor cs = dsp_tensor_cols(&ct, cut[i], cut[i + 1]);
        dsp_cpu_packed *ps = pack(ws);
        assert_int_equal(dsp_cpu_matmul_nt(&at, ps, &cs, np == N ? 1 : 2), DSP_OK);
        dsp_cpu_packed_free(ps);
      }
      assert_memory_equal(full, part, sizeof full);
    }
    /* Thread counts 1, 2 and 3 give the same bits. */
    p = pack(wt);
    for (int th = 2; th <= 3; th++) {
      product(at, p, part, DSP_BF16, th);
      assert_memory_equal(full, part, sizeof full);
    }
    dsp_cpu_packed_free(p);
  }
  dsp_cpu_kernel_force(NULL);
}

/* ---- (4) batch invariance ------------------------------------------------------ */
static void test_batch_invariance(void **st) {
  (void)st;
  enum { M = 32, K = 200, N = 150 };
  static uint16_t a[M * K], w[N * K], batch[M * N], one[N];
  fill_normal(a, M * K, -12, 12);
  fill_normal(w, N * K, -12, 12);
  dsp_cpu_packed *p = pack(dsp_tensor_2d(w, DSP_BF16, N, K));
  const int sizes[] = {32, 13, 25, 1};
  for (int pi = 0; pi < NPATHS; pi++) {
    if (!force(PATHS[pi])) continue;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      int mb = sizes[s];
      product(dsp_tensor_2d(a, DSP_BF16, mb, K), p, batch, DSP_BF16, 2);
      for (int m = 0; m < mb; m++) {
        product(dsp_tensor_2d(a + m * K, DSP_BF16, 1, K), p, one, DSP_BF16, 1);
        assert_memory_equal(one, batch + m * N, sizeof one);
      }
    }
  }
  dsp_cpu_kernel_force(NULL);
  dsp_cpu_packed_free(p);
}

/* ---- (5) strided views ------------------------------------------------------------ */
static void test_strided_views(void **st) {
  (void)st;
  enum { M = 14, K = 45, N = 53, AW = K + 9, WW = K + 5, CW = N + 11 };
  static uint16_t a[M * K], w[N * K], ref[M * N];
  static uint16_t awide[M * AW], wwide[N * WW], wt2[K * N], at2[K * M], cwide[M * CW], cint[M * N * 2];
  fill_normal(a, M * K, -10, 10);
  fill_normal(w, N * K, -10, 10);
  for (int m = 0; m < M; m++)
    for (int k = 0; k < K; k++) {
      awide[m * AW + 3 + k] = a[m * K + k];
      at2[k * M + m] = a[m * K + k];
    }
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++) {
      wwide[n * WW + 2 + k] = w[n * K + k];
      wt2[k * N + n] = w[n * K + k];
    }
  for (int pi = 0; pi < NPATHS; pi++) {
    if (!force(PATHS[pi])) continue;
    dsp_cpu_packed *p = pack(dsp_tensor_2d(w, DSP_BF16, N, K));
    product(dsp_tensor_2d(a, DSP_BF16, M, K), p, ref, DSP_BF16, 2);
    /* w as row slices of wider rows, and as a transposed (column-strided) view. */
    dsp_tensor wv1 = {.data = wwide + 2, .dtype = DSP_BF16, .ndim = 2, .shape = {N, K}, .stride = {WW, 1}};
    dsp_tensor wv2 = {.data = wt2, .dtype = DSP_BF16, .ndim = 2, .shape = {N, K}, .stride = {1, N}};
    dsp_tensor av1 = {.data = awide + 3, .dtype = DSP_BF16, .ndim = 2, .shape = {M, K}, .stride = {AW, 1}};
    dsp_tensor av2 = {.data = at2, .dtype = DSP_BF16, .ndim = 2, .shape = {M, K}, .stride = {1, M}};
    dsp_cpu_packed *p1 = pack(wv1), *p2 = pack(wv2);
    assert_int_equal(dsp_cpu_packed_bytes(p1), dsp_cpu_packed_bytes(p));
    const dsp_cpu_packed *ps[] = {p1, p2};
    const dsp_tensor *as[] = {&av1, &av2};
    for (int v = 0; v < 4; v++) {
      /* c inside a wider buffer (column offset 5) ... */
      for (size_t i = 0; i < M * CW; i++) cwide[i] = 0xDEAD;
      dsp_tensor c1 = {.data = cwide + 5, .dtype = DSP_BF16, .ndim = 2, .shape = {M, N}, .stride = {CW, 1}};
      assert_int_equal(dsp_cpu_matmul_nt(as[v & 1], ps[v >> 1], &c1, 2), DSP_OK);
      for (int m = 0; m < M; m++)
        for (int j = 0; j < CW; j++) {
          if (j >= 5 && j < 5 + N) assert_int_equal(cwide[m * CW + j], ref[m * N + j - 5]);
          else assert_int_equal(cwide[m * CW + j], 0xDEAD);
        }
      /* ... and with a column stride of 2 (every other element). */
      for (size_t i = 0; i < M * N * 2; i++) cint[i] = 0xBEEF;
      dsp_tensor c2 = {.data = cint + 1, .dtype = DSP_BF16, .ndim = 2, .shape = {M, N}, .stride = {2 * N, 2}};
      assert_int_equal(dsp_cpu_matmul_nt(as[v & 1], ps[v >> 1], &c2, 1), DSP_OK);
      for (int i = 0; i < M * N; i++) {
        assert_int_equal(cint[2 * i + 1], ref[i]);
        assert_int_equal(cint[2 * i], 0xBEEF);
      }
    }
    dsp_cpu_packed_free(p);
    dsp_cpu_packed_free(p1);
    dsp_cpu_packed_free(p2);
  }
  dsp_cpu_kernel_force(NULL);
}

/* ---- (7) the fused Markov step ------------------------------------------------------ */
/* torch.argmax over v[0..n): first NaN wins; else the largest, the lowest id on
 * ties (with -0 == +0); all -inf gives 0. Written from contract 4. */
static int64_t ref_argmax(const float *v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(v[i])) return i;
    if (v[i] > v[best]) best = i;
  }
  return best;
}

enum { MM = 6, MR_ = 300, MN = 200, MNV = 181, MID0 = 1000, LW = MNV + 7 }; /* R > 256: two k blocks */

typedef struct {
  uint16_t e[MM * MR_], w2[MN * MR_], base[MM * MN];
} markov_case;

static void markov_case_make(markov_case *c) {
  /* Grid values so that many logits tie exactly; W2 rows repeat in groups of 5. */
  for (int i = 0; i < MM * MR_; i++) c->e[i] = bf16_bits((float)((int)(rnd() % 5) - 2) * 0.5f);
  for (int n = 0; n < MN; n++)
    for (int r = 0; r < MR_; r++)
      c->w2[n * MR_ + r] = n % 5 == 0 || n >= MNV ? bf16_bits((float)((int)(rnd() % 5) - 2) * 0.5f)
                                                 : c->w2[(n - n % 5) * MR_ + r];
  for (int m = 0; m < MM; m++)
    for (int n = 0; n < MN; n++) c->base[m * MN + n] = bf16_bits((float)(int)(rnd() % 3) * 0.25f);
  /* row 0: the second k block (r >= 256) lowers every logit by 44, so a winner
   * taken from the first block's partial sums would show. */
  for (int n = 0; n < MN; n++)
    for (int r = 256; r < MR_; r++) c->w2[n * MR_ + r] = bf16_bits(-1.0f);
  for (int r = 256; r < MR_; r++) c->e[0 * MR_ + r] = bf16_bits(1.0f);
  /* row 1: base all -inf, so every logit is -inf: id 0 wins. */
  for (int n = 0; n < MN; n++) c->base[1 * MN + n] = 0xFF80;
  /* row 2: NaNs at 120 and 37 (and one in padding): the first, 37, wins. */
  c->base[2 * MN + 120] = 0x7FC0;
  c->base[2 * MN + 37] = 0xFFC1;
  c->base[2 * MN + 190] = 0x7FC0;
  /* row 3: padding columns are huge (and NaN) and must never win. */
  for (int n = MNV; n < MN; n++) c->base[3 * MN + n] = n & 1 ? 0x7F7F : 0x7FC0;
  for (int n = MNV; n < MN; n++) c->base[0 * MN + n] = 0x7F80; /* +inf padding */
  /* row 4: e = (2^-100, 0, ...); W2 rows 0..2 = (-2^-100, -0.5, ...) give an
   * underflowing negative product, so acc stays -0 (-0 + -0 = -0); every other
   * W2 row has 0 in column 0, so acc stays +0. With base -0 at 0..2 and +0
   * elsewhere the logits are -0 at 0..2 and +0 after: all equal, id 0 wins. */
  for (int r = 0; r < MR_; r++) c->e[4 * MR_ + r] = bf16_bits(r == 0 ? 0x1p-100f : 0.0f);
  for (int n = 0; n < MN; n++)
    for (int r = 0; r < MR_; r++)
      if (n < 3) c->w2[n * MR_ + r] = bf16_bits(r == 0 ? -0x1p-100f : -0.5f);
      else if (r == 0) c->w2[n * MR_ + r] = 0;
  for (int n = 0; n < MN; n++) c->base[4 * MN + n] = n < 3 ? 0x8000 : 0x0000;
  /* row 5: one clear winner in the second half (crosses the thread split). */
  c->base[5 * MN + 170] = bf16_bits(1000.0f);
}

/* The contract's corrected logits and winner for one row. */
static void markov_ref(const markov_case *c, int m, int fp32_add, float *logit) {
  for (int n = 0; n < MNV; n++) {
    float bias = widen(ref_round(ref_chain(c->e + m * MR_, 1, c->w2 + n * MR_, 1, MR_)));
    float s = widen(c->base[m * MN + n]) + bias;
    logit[n] = fp32_add ? s : widen(ref_round(s));
  }
}

static void test_markov_step(void **st) {
  (void)st;
  static markov_case c;
  markov_case_make(&c);
  /* Row 4's logits are all zero, with -0 at 0..2 (checked from the contract). */
  float lg[MNV];
  markov_ref(&c, 4, 0, lg);
  assert_true(signbit(lg[0]) && lg[0] == 0.0f && !signbit(lg[3]) && lg[MNV - 1] == 0.0f);
  dsp_tensor wt = dsp_tensor_2d(c.w2, DSP_BF16, MN, MR_), et = dsp_tensor_2d(c.e, DSP_BF16, MM, MR_);
  dsp_tensor bt = dsp_tensor_2d(c.base, DSP_BF16, MM, MN);
  dsp_cpu_packed *p = pack(wt);
  static uint16_t out16[MM * LW];
  static float out32[MM * LW];
  for (int pi = 0; pi < NPATHS; pi++) {
    if (!force(PATHS[pi])) continue;
    for (int fp32 = 0; fp32 <= 1; fp32++)
      for (int th = 1; th <= 2; th++) {
        float bv[MM];
        int64_t bi[MM];
        for (int i = 0; i < MM * LW; i++) {
          out16[i] = 0xDEAD;
          out32[i] = f_of(0xDEADBEEFu);
        }
        dsp_tensor lt = {.data = fp32 ? (void *)(out32 + 2) : (void *)(out16 + 2), .dtype = fp32 ? DSP_F32 : DSP_BF16,
                         .ndim = 2, .shape = {MM, MNV}, .stride = {LW, 1}};
        dsp_cpu_markov_args args = {.e = &et, .w2 = p, .base = &bt, .fp32_add = fp32, .id0 = MID0,
                                    .n_valid = MNV, .best_val = bv, .best_id = bi, .logits = &lt};
        assert_int_equal(dsp_cpu_markov_step(&args, th), DSP_OK);
        for (int m = 0; m < MM; m++) {
          markov_ref(&c, m, fp32, lg);
          int64_t want = ref_argmax(lg, MNV);
          if (bi[m] != MID0 + want || !same_f32(bv[m], lg[want]))
            fail_msg("path %s fp32_add %d threads %d row %d: got (%g, %lld), want (%g, %lld)", PATHS[pi], fp32, th, m,
                     (double)bv[m], (long long)bi[m], (double)lg[want], (long long)(MID0 + want));
          for (int j = 0; j < LW; j++) {
            int in = j >= 2 && j < 2 + MNV;
            if (fp32) {
              if (in) assert_true(same_f32(out32[m * LW + j], lg[j - 2]) &&
                                  (!isnan(lg[j - 2]) || u_of(out32[m * LW + j]) == 0x7FC00000u));
              else assert_int_equal(u_of(out32[m * LW + j]), 0xDEADBEEFu);
            } else {
              if (in) assert_true(same_bf16(out16[m * LW + j], bf16_bits(lg[j - 2])) &&
                                  (!isnan(lg[j - 2]) || out16[m * LW + j] == 0x7FC0));
              else assert_int_equal(out16[m * LW + j], 0xDEAD);
            }
          }
        }
        /* The semantics table, pinned: -inf row -> 0; first NaN -> 37; -0 == +0 -> 0; 170. */
        assert_int_equal(bi[1], MID0 + 0);
        assert_true(isinf(bv[1]) && bv[1] < 0);
        assert_int_equal(bi[2], MID0 + 37);
        assert_true(isnan(bv[2]));
        assert_int_equal(bi[4], MID0 + 0);
        assert_int_equal(bi[5], MID0 + 170);
        assert_true(bi[3] < MID0 + MNV && bi[0] < MID0 + MNV);
      }
    /* n_valid == 0: the empty candidate; nothing optional needed. */
    float bv[MM];
    int64_t bi[MM];
    dsp_cpu_markov_args none = {.e = &et, .w2 = p, .base = &bt, .id0 = MID0, .n_valid = 0, .best_val = bv, .best_id = bi};
    assert_int_equal(dsp_cpu_markov_step(&none, 2), DSP_OK);
    for (int m = 0; m < MM; m++) {
      assert_true(isinf(bv[m]) && bv[m] < 0);
      assert_true(bi[m] == DSP_PAIR_NONE_ID);
    }
    dsp_cpu_markov_args bare = {.e = &et, .w2 = p, .base = &bt, .n_valid = MNV};
    assert_int_equal(dsp_cpu_markov_step(&bare, 1), DSP_OK);
  }
  dsp_cpu_kernel_force(NULL);
  dsp_cpu_packed_free(p);
}

/* A larger vocabulary where all logits tie: the lowest id must win across the
 * threads' ranges. */
static void test_markov_ties_across_threads(void **st) {
  (void)st;
  enum { M = 3, R = 16, N = 4099 };
  uint16_t *w2 = calloc((size_t)N * R, 2), *e = calloc(M * R, 2), *base = malloc((size_t)M * N * 2);
  for (int i = 0; i < M * N; i++) base[i] = bf16_bits(2.5f);
  base[0 * N + 0] = bf16_bits(2.0f); /* row 0: id 1 is the first of the max */
  base[2 * N + 4000] = 0x7FC0;       /* row 2: NaN near the end */
  base[2 * N + 4098] = 0x7FC0;
  dsp_tensor wt = dsp_tensor_2d(w2, DSP_BF16, N, R), et = dsp_tensor_2d(e, DSP_BF16, M, R);
  dsp_tensor bt = dsp_tensor_2d(base, DSP_BF16, M, N);
  dsp_cpu_packed *p = pack(wt);
  for (int pi = 0; pi < NPATHS; pi++) {
    if (!force(PATHS[pi])) continue;
    for (int th = 1; th <= 3; th++) {
      float bv[M];
      int64_t bi[M];
      dsp_cpu_markov_args args = {.e = &et, .w2 = p, .base = &bt, .id0 = 7, .n_valid = N, .best_val = bv, .best_id = bi};
      assert_int_equal(dsp_cpu_markov_step(&args, th), DSP_OK);
      assert_int_equal(bi[0], 7 + 1);
      assert_int_equal(bi[1], 7 + 0);
      assert_int_equal(bi[2], 7 + 4000);
      assert_true(bv[0] == 2.5f && bv[1] == 2.5f && isnan(bv[2]));
    }
  }
  dsp_cpu_kernel_force(NULL);
  dsp_cpu_packed_free(p);
  free(w2);
  free(e);
  free(base);
}

/* ---- errors ----------------------------------------------------------------------- */
static void test_errors(void **st) {
  (void)st;
  static uint16_t buf[64 * 64];
  static float fbuf[64 * 64];
  dsp_cpu_packed *p = NULL;
  dsp_tensor wf = dsp_tensor_2d(fbuf, DSP_F32, 8, 8);
  assert_int_equal(dsp_cpu_pack(&wf, &p), DSP_ERR_DTYPE);
  assert_true(strstr(dsp_error_message(), "BF16") != NULL);
  assert_null(p);
  int64_t sh3[3] = {2, 4, 8};
  dsp_tensor w3 = dsp_tensor_view(buf, DSP_BF16, 3, sh3);
  assert_int_equal(dsp_cpu_pack(&w3, &p), DSP_ERR_SHAPE);
  assert_int_equal(dsp_cpu_pack(NULL, &p), DSP_ERR_ARG);

  p = pack(dsp_tensor_2d(buf, DSP_BF16, 10, 8));
  assert_int_equal(dsp_cpu_packed_n(p), 10);
  assert_int_equal(dsp_cpu_packed_k(p), 8);
  dsp_tensor a = dsp_tensor_2d(buf, DSP_BF16, 3, 8), af = dsp_tensor_2d(fbuf, DSP_F32, 3, 8);
  dsp_tensor c = dsp_tensor_2d(buf + 1024, DSP_BF16, 3, 10), ci = dsp_tensor_2d(fbuf, DSP_I64, 3, 10);
  assert_int_equal(dsp_cpu_matmul_nt(&af, p, &c, 1), DSP_ERR_DTYPE);
  assert_int_equal(dsp_cpu_matmul_nt(&a, p, &ci, 1), DSP_ERR_DTYPE);
  dsp_tensor a9 = dsp_tensor_2d(buf, DSP_BF16, 3, 9), c11 = dsp_tensor_2d(buf + 1024, DSP_BF16, 3, 11);
  dsp_tensor c4 = dsp_tensor_2d(buf + 1024, DSP_BF16, 4, 10);
  assert_int_equal(dsp_cpu_matmul_nt(&a9, p, &c, 1), DSP_ERR_SHAPE);
  assert_true(strstr(dsp_error_message(), "[3, 9]") != NULL);
  assert_int_equal(dsp_cpu_matmul_nt(&a, p, &c11, 1), DSP_ERR_SHAPE);
  assert_int_equal(dsp_cpu_matmul_nt(&a, p, &c4, 1), DSP_ERR_SHAPE);
  assert_int_equal(dsp_cpu_matmul_nt(NULL, p, &c, 1), DSP_ERR_ARG);
  assert_int_equal(dsp_cpu_matmul_nt(&a, p, &c, 1), DSP_OK);

  dsp_tensor base = dsp_tensor_2d(buf + 2048, DSP_BF16, 3, 10), base_short = dsp_tensor_2d(buf + 2048, DSP_BF16, 3, 6);
  dsp_tensor lg32 = dsp_tensor_2d(fbuf, DSP_F32, 3, 9), lg16 = dsp_tensor_2d(buf + 3072, DSP_BF16, 3, 9);
  dsp_cpu_markov_args ok = {.e = &a, .w2 = p, .base = &base, .n_valid = 9, .logits = &lg16};
  assert_int_equal(dsp_cpu_markov_step(&ok, 1), DSP_OK);
  dsp_cpu_markov_args x = ok;
  x.n_valid = 11;
  assert_int_equal(dsp_cpu_markov_step(&x, 1), DSP_ERR_RANGE);
  x = ok;
  x.logits = &lg32; /* F32 logits need the fp32-add contract */
  assert_int_equal(dsp_cpu_markov_step(&x, 1), DSP_ERR_DTYPE);
  x.fp32_add = 1;
  assert_int_equal(dsp_cpu_markov_step(&x, 1), DSP_OK);
  x = ok;
  x.base = &base_short;
  assert_int_equal(dsp_cpu_markov_step(&x, 1), DSP_ERR_SHAPE);
  x = ok;
  x.e = &a9;
  assert_int_equal(dsp_cpu_markov_step(&x, 1), DSP_ERR_SHAPE);
  x = ok;
  x.e = &af;
  assert_int_equal(dsp_cpu_markov_step(&x, 1), DSP_ERR_DTYPE);
  x = ok;
  x.id0 = -1;
  assert_int_equal(dsp_cpu_markov_step(&x, 1), DSP_ERR_RANGE);

  assert_int_equal(dsp_cpu_kernel_force("sse9"), DSP_ERR_ARG);
  assert_int_equal(dsp_cpu_kernel_force("auto"), DSP_OK);
  const char *name = dsp_cpu_kernel_name();
  assert_true(!strcmp(name, "avx512bf16") || !strcmp(name, "avx512f") || !strcmp(name, "avx2") ||
              !strcmp(name, "scalar"));
  /* the AVX-512 BF16 path is offered exactly where the CPU has it and its check passes */
  assert_int_equal(dsp_cpu_kernel_force("avx512bf16") == DSP_OK, dsp_cpu_isa_supported(DSP_CPU_ISA_AVX512) &&
                                                                 __builtin_cpu_supports("avx512bf16") &&
                                                                 dsp_cpu_dot_check());
  assert_int_equal(dsp_cpu_kernel_force(NULL), DSP_OK);
  dsp_cpu_packed_free(p);
  dsp_cpu_packed_free(NULL);
}

/* Empty shapes are valid and write nothing. */
static void test_empty(void **st) {
  (void)st;
  static uint16_t buf[64];
  dsp_cpu_packed *p = pack(dsp_tensor_2d(buf, DSP_BF16, 0, 8));
  dsp_tensor a = dsp_tensor_2d(buf, DSP_BF16, 2, 8), c = dsp_tensor_2d(buf + 32, DSP_BF16, 2, 0);
  assert_int_equal(dsp_cpu_matmul_nt(&a, p, &c, 1), DSP_OK);
  dsp_cpu_packed_free(p);
  /* K == 0: every output is the empty sum, +0. */
  p = pack(dsp_tensor_2d(buf, DSP_BF16, 3, 0));
  float out[6];
  memset(out, 0xFF, sizeof out);
  dsp_tensor a0 = dsp_tensor_2d(buf, DSP_BF16, 2, 0), c0 = dsp_tensor_2d(out, DSP_F32, 2, 3);
  assert_int_equal(dsp_cpu_matmul_nt(&a0, p, &c0, 2), DSP_OK);
  for (int i = 0; i < 6; i++) assert_int_equal(u_of(out[i]), 0);
  dsp_cpu_packed_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exact_grid),
      cmocka_unit_test(test_paths_agree_random),
      cmocka_unit_test(test_k_block_edges),
      cmocka_unit_test(test_order_k7168_specials),
      cmocka_unit_test(test_dot_guard),
      cmocka_unit_test(test_dot_guard_subnormal_a),
      cmocka_unit_test(test_shard_invariance),
      cmocka_unit_test(test_batch_invariance),
      cmocka_unit_test(test_strided_views),
      cmocka_unit_test(test_markov_step),
      cmocka_unit_test(test_markov_ties_across_threads),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_empty),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
