/* KDA CPU kernels (src/kernels/cpu/kda*.c) against references written from the
 * operation's formulas: an fp64 loop in this file for each kernel, and the
 * independent numpy oracle tests/oracle/kda_ref.py for a whole layer's stages
 * (its fixture is generated into a temporary file when the script is found:
 * argv[1], or $DSPARK_KDA_ORACLE, or tests/oracle/kda_ref.py from the cwd).
 *
 * Error measures, printed per check:
 *   rms    sqrt(sum (c - r)^2 / sum r^2)  (fla's tests accept 5e-3 for the forward)
 *   excess max over elements of (|c - r| - half a bf16 ulp), over max |r|: the
 *          kernel's fp32 error once the one rounding of a bf16 output is allowed
 * Bit-identity claims (strides, tiles, threads, varlen, decode vs prefill, the
 * accepted prefix) are checked with memcmp. */
#include <math.h>
#include <omp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/bf16.h"
#include "kernels/cpu/kda.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/matmul.h"

/* Stated tolerances (KDA_NOTES.md lists what the kernels reach). */
#define TOL_STATE_RMS 1e-5   /* fp32 state against fp64 */
#define TOL_OUT_EXCESS 1e-5  /* bf16 output beyond its half-ulp rounding, over max |ref| */
#define TOL_OUT_RMS 2e-3     /* bf16 output: its rounding alone gives 1.5-1.7e-3 on these data */
#define TOL_GATE_REL 1e-6    /* per element: beta relative; g relative, absolute where |g| < 1
                                (exp(g) is what the recurrence sees; a small g in fp32 is only
                                as good as its argument, e.g. the lower-bound form's sigmoid tail) */
#define TOL_E2E_RMS 2.5e-3   /* a layer's chain from its projections, bf16 between stages */

static double worst_state_rms, worst_out_excess, worst_out_rms, worst_chunk_vs_rec;

/* ---- helpers ------------------------------------------------------------------ */
static uint64_t rng_s;
static void rng_seed(uint64_t s) { rng_s = s * 0x9E3779B97F4A7C15ull + 12345u; }
static uint64_t rng_u64(void) {
  uint64_t z = (rng_s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double unif(void) { return ((double)(rng_u64() >> 11) + 0.5) / 9007199254740992.0; }
static double gauss(void) { return sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif()); }
static dsp_bf16 rbf(double sc) { return dsp_f32_to_bf16((float)(gauss() * sc)); }
static double bfd(dsp_bf16 h) { return (double)dsp_bf16_to_f32(h); }
static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }
static double softplus(double x) { return x > 20.0 ? x : log1p(exp(x)); }

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  assert_non_null(p);
  return p;
}

typedef struct { double rms, excess, maxrel; } errs;

static double half_ulp_bf16(double x) {
  if (x == 0.0) return 0.0;
  int e;
  frexp(fabs(x), &e);
  return ldexp(1.0, e - 9);
}

static errs compare(const float *c, const double *r, int64_t n, int bf16_out) {
  double num = 0, den = 0, maxr = 0, ex = 0, maxd = 0;
  for (int64_t i = 0; i < n; i++) {
    double dd = fabs((double)c[i] - r[i]);
    num += dd * dd;
    den += r[i] * r[i];
    if (fabs(r[i]) > maxr) maxr = fabs(r[i]);
    if (dd > maxd) maxd = dd;
    double e = dd - (bf16_out ? half_ulp_bf16(fmax(fabs(r[i]), fabs((double)c[i]))) : 0.0);
    if (e > ex) ex = e;
  }
  errs out = {den > 0 ? sqrt(num / den) : sqrt(num), maxr > 0 ? ex / maxr : ex, maxr > 0 ? maxd / maxr : maxd};
  return out;
}

static void check_out(const char *what, const float *c, const double *r, int64_t n) {
  errs e = compare(c, r, n, 1);
  print_message("    %-34s out   rms %.2e  excess %.2e\n", what, e.rms, e.excess);
  if (e.excess > worst_out_excess) worst_out_excess = e.excess;
  if (e.rms > worst_out_rms) worst_out_rms = e.rms;
  assert_true(e.excess <= TOL_OUT_EXCESS);
  assert_true(e.rms <= TOL_OUT_RMS);
}

static void check_state(const char *what, const float *c, const double *r, int64_t n) {
  errs e = compare(c, r, n, 0);
  print_message("    %-34s state rms %.2e  max %.2e\n", what, e.rms, e.maxrel);
  if (e.rms > worst_state_rms) worst_state_rms = e.rms;
  assert_true(e.rms <= TOL_STATE_RMS);
}

/* ---- a recurrence case: merged q|k|v rows, g, beta, initial states ----------- */
enum { MAXN = 8, QPAD = 24, OPAD = 3 };
typedef struct {
  dsp_kda_dims d;
  int32_t N, cu[MAXN + 1];
  int64_t T, P;    /* tokens; merged row width */
  dsp_bf16 *qkv;   /* [T][P]: q | k | v | pad */
  float *g, *beta; /* [T][HV][K], [T][HV] */
  float *S0;       /* [N][HV][K][V] */
  uint8_t has[MAXN];
} kcase;

/* decay 0: mild (g ~ -0.01), 1: strong (g ~ -25), 2: lower bound -5 form */
static void case_make(kcase *c, dsp_kda_dims d, int32_t N, const int32_t *lens, int decay, uint64_t seed) {
  memset(c, 0, sizeof *c);
  rng_seed(seed);
  c->d = d;
  c->N = N;
  for (int32_t n = 0; n < N; n++) c->cu[n + 1] = c->cu[n] + lens[n];
  c->T = c->cu[N];
  const int64_t H = d.num_heads, HV = d.num_v_heads, K = d.head_k, V = d.head_v;
  c->P = 2 * H * K + HV * V + QPAD;
  c->qkv = xmalloc(sizeof(dsp_bf16) * (size_t)(c->T * c->P));
  for (int64_t i = 0; i < c->T * c->P; i++) c->qkv[i] = rbf(1.0);
  c->g = xmalloc(sizeof(float) * (size_t)(c->T * HV * K + 1));
  c->beta = xmalloc(sizeof(float) * (size_t)(c->T * HV + 1));
  double a[64];
  for (int64_t h = 0; h < HV; h++) a[h] = 1.0 + 15.0 * unif();
  for (int64_t t = 0; t < c->T; t++)
    for (int64_t h = 0; h < HV; h++) {
      for (int64_t e = 0; e < K; e++) {
        double x = 2.0 * gauss(), g;
        if (decay == 0) g = -0.5 * softplus(x - 4.0);
        else if (decay == 1) g = -8.0 * softplus(x + 3.0);
        else g = -5.0 * sigm(a[h] * x);
        c->g[(t * HV + h) * K + e] = (float)g;
      }
      c->beta[t * HV + h] = (float)sigm(gauss());
    }
  c->S0 = xmalloc(sizeof(float) * (size_t)(N * HV * K * V));
  for (int64_t i = 0; i < N * HV * K * V; i++) c->S0[i] = (float)(0.3 * gauss());
  for (int32_t n = 0; n < N; n++) c->has[n] = (uint8_t)(n % 2 == 1 || N == 1);
}

static void case_free(kcase *c) {
  free(c->qkv);
  free(c->g);
  free(c->beta);
  free(c->S0);
}

static dsp_kda_in_bf16 view_q(const kcase *c) { return (dsp_kda_in_bf16){c->qkv, c->P, c->d.head_k}; }
static dsp_kda_in_bf16 view_k(const kcase *c) {
  return (dsp_kda_in_bf16){c->qkv + (int64_t)c->d.num_heads * c->d.head_k, c->P, c->d.head_k};
}
static dsp_kda_in_bf16 view_v(const kcase *c) {
  return (dsp_kda_in_bf16){c->qkv + 2 * (int64_t)c->d.num_heads * c->d.head_k, c->P, c->d.head_v};
}

/* fp64 reference of sequence n, written from the formulas; o [T][HV][V] for the
 * whole batch, S [HV][K][V]; states (optional) [len][HV][K][V]. */
static void ref_seq(const kcase *c, int32_t n, const float *g, double *o, double *S, double *states) {
  const int64_t H = c->d.num_heads, HV = c->d.num_v_heads, K = c->d.head_k, V = c->d.head_v, G = HV / H;
  const double scale = 1.0 / sqrt((double)K);
  double *q = xmalloc(sizeof(double) * (size_t)K), *k = xmalloc(sizeof(double) * (size_t)K);
  double *u = xmalloc(sizeof(double) * (size_t)V);
  dsp_kda_in_bf16 qv = view_q(c), kv = view_k(c), vv = view_v(c);
  for (int64_t hv = 0; hv < HV; hv++) {
    double *Sh = S + hv * K * V;
    for (int64_t i = 0; i < K * V; i++) Sh[i] = c->has[n] ? (double)c->S0[(n * HV + hv) * K * V + i] : 0.0;
    for (int64_t t = c->cu[n]; t < c->cu[n + 1]; t++) {
      const int64_t h = hv / G;
      double nq = 0, nk = 0;
      for (int64_t e = 0; e < K; e++) {
        q[e] = bfd(qv.data[t * qv.tok + h * qv.head + e]);
        k[e] = bfd(kv.data[t * kv.tok + h * kv.head + e]);
        nq += q[e] * q[e];
        nk += k[e] * k[e];
      }
      for (int64_t e = 0; e < K; e++) {
        q[e] = q[e] / sqrt(nq + 1e-6) * scale;
        k[e] = k[e] / sqrt(nk + 1e-6);
      }
      for (int64_t e = 0; e < K; e++) {
        double dec = exp((double)g[(t * HV + hv) * K + e]);
        for (int64_t j = 0; j < V; j++) Sh[e * V + j] *= dec;
      }
      const double b = c->beta[t * HV + hv];
      for (int64_t j = 0; j < V; j++) {
        double a = 0;
        for (int64_t e = 0; e < K; e++) a += k[e] * Sh[e * V + j];
        u[j] = b * (bfd(vv.data[t * vv.tok + hv * vv.head + j]) - a);
      }
      for (int64_t e = 0; e < K; e++)
        for (int64_t j = 0; j < V; j++) Sh[e * V + j] += k[e] * u[j];
      for (int64_t j = 0; j < V; j++) {
        double a = 0;
        for (int64_t e = 0; e < K; e++) a += q[e] * Sh[e * V + j];
        o[(t * HV + hv) * V + j] = a;
      }
      if (states) memcpy(states + ((t - c->cu[n]) * HV + hv) * K * V, Sh, sizeof(double) * (size_t)(K * V));
    }
  }
  free(q);
  free(k);
  free(u);
}

/* One run of a recurrence form over a case: a state pool of N + 8 slots (slot of
 * sequence n is N-1-n, so slot 0 is used), a strided output. */
typedef struct {
  float *pool;
  int64_t stride;
  int32_t nslots, slots[MAXN];
  dsp_bf16 *o; /* [T][tok], head stride V + OPAD */
  int64_t otok;
} krun;

static void run_init(krun *r, const kcase *c) {
  const int64_t HV = c->d.num_v_heads, K = c->d.head_k, V = c->d.head_v;
  r->stride = HV * K * V + 16;
  r->nslots = c->N + 8;
  r->pool = xmalloc(sizeof(float) * (size_t)(r->stride * r->nslots));
  for (int64_t i = 0; i < r->stride * r->nslots; i++) r->pool[i] = NAN; /* nothing may read an unset slot */
  for (int32_t n = 0; n < c->N; n++) {
    r->slots[n] = c->N - 1 - n;
    memcpy(r->pool + r->slots[n] * r->stride, c->S0 + (int64_t)n * HV * K * V, sizeof(float) * (size_t)(HV * K * V));
  }
  r->otok = HV * (V + OPAD) + 5;
  r->o = xmalloc(sizeof(dsp_bf16) * (size_t)(c->T * r->otok + 1));
  for (int64_t i = 0; i < c->T * r->otok; i++) r->o[i] = 0x7FC1;
}

static void run_free(krun *r) {
  free(r->pool);
  free(r->o);
}

static dsp_kda_io case_io(const kcase *c, const krun *r, const float *g) {
  dsp_kda_io io = {view_q(c), view_k(c), view_v(c), g ? g : c->g, c->beta,
                   {r->o, r->otok, c->d.head_v + OPAD}};
  return io;
}

/* form 0: recurrent, 1: chunked; threads <= 0: all. */
static dsp_status run_form(int form, const kcase *c, krun *r, const dsp_kda_opts *opt, int32_t threads,
                           const float *g) {
  dsp_kda_seqs s = {c->N, c->cu, r->slots, c->has, 1, NULL};
  dsp_kda_io io = case_io(c, r, g);
  dsp_kda_state st = {r->pool, r->stride, r->nslots};
  size_t n = form ? dsp_kda_chunked_workspace_size(&c->d, opt, threads) : dsp_kda_recurrent_workspace_size(&c->d, threads);
  assert_true(n > 0);
  void *ws = xmalloc(n);
  dsp_status rc = form ? dsp_kda_chunked(&c->d, opt, &s, &io, &st, ws, n) : dsp_kda_recurrent(&c->d, opt, &s, &io, &st, ws, n);
  free(ws);
  return rc;
}

/* The run's outputs, contiguous [T][HV][V] floats. */
static float *gather_o(const kcase *c, const krun *r) {
  const int64_t HV = c->d.num_v_heads, V = c->d.head_v;
  float *o = xmalloc(sizeof(float) * (size_t)(c->T * HV * V));
  for (int64_t t = 0; t < c->T; t++)
    for (int64_t h = 0; h < HV; h++)
      for (int64_t j = 0; j < V; j++) o[(t * HV + h) * V + j] = dsp_bf16_to_f32(r->o[t * r->otok + h * (V + OPAD) + j]);
  return o;
}

/* Compares a run against the fp64 reference, every sequence. */
static void check_run(const char *what, const kcase *c, const krun *r) {
  const int64_t HV = c->d.num_v_heads, K = c->d.head_k, V = c->d.head_v;
  double *o = xmalloc(sizeof(double) * (size_t)(c->T * HV * V + 1));
  double *S = xmalloc(sizeof(double) * (size_t)(c->N * HV * K * V));
  float *Sc = xmalloc(sizeof(float) * (size_t)(c->N * HV * K * V));
  for (int32_t n = 0; n < c->N; n++) {
    ref_seq(c, n, c->g, o, S + (int64_t)n * HV * K * V, NULL);
    memcpy(Sc + (int64_t)n * HV * K * V, r->pool + r->slots[n] * r->stride, sizeof(float) * (size_t)(HV * K * V));
  }
  float *oc = gather_o(c, r);
  check_out(what, oc, o, c->T * HV * V);
  check_state(what, Sc, S, c->N * HV * K * V);
  free(o);
  free(S);
  free(Sc);
  free(oc);
}

static const dsp_kda_dims DIMS[] = {{3, 3, 64, 64}, {2, 2, 128, 128}, {1, 2, 64, 32}};
static const int32_t LENS[] = {37, 1, 130, 64};
static const char *DECAY[] = {"mild", "strong", "lower-bound"};

/* ---- gate and beta ----------------------------------------------------------- */
static void test_gate_forms(void **st) {
  (void)st;
  enum { T = 50, HV = 3, K = 40, P = HV * K + 7 };
  rng_seed(1);
  dsp_bf16 *f = xmalloc(sizeof(dsp_bf16) * T * P);
  float A[HV], bias[HV * K], *g = xmalloc(sizeof(float) * T * HV * K);
  for (int i = 0; i < T * P; i++) f[i] = rbf(4.0);
  f[3 * P + 5] = dsp_f32_to_bf16(100.0f); /* past the softplus threshold: finite, -a x */
  for (int h = 0; h < HV; h++) A[h] = (float)log(1.0 + 15.0 * unif());
  for (int i = 0; i < HV * K; i++) bias[i] = (float)(0.5 * gauss());
  for (int form = 0; form < 2; form++) {
    dsp_kda_gate_cfg cfg = {form ? DSP_KDA_GATE_LOWER_BOUND : DSP_KDA_GATE_SOFTPLUS, -5.0f};
    assert_int_equal(dsp_kda_gate(T, HV, K, (dsp_kda_in_bf16){f, P, K}, A, bias, &cfg, g), DSP_OK);
    double worst = 0;
    for (int t = 0; t < T; t++)
      for (int h = 0; h < HV; h++)
        for (int e = 0; e < K; e++) {
          double x = bfd(f[t * P + h * K + e]) + (double)bias[h * K + e], a = exp((double)A[h]);
          double r = form ? -5.0 * sigm(a * x) : -a * softplus(x), c = g[(t * HV + h) * K + e];
          assert_true(isfinite(c) && c <= 0.0);
          if (form) assert_true(c >= -5.0);
          double rel = fabs(c - r) / fmax(fabs(r), 1.0);
          if (rel > worst) worst = rel;
        }
    print_message("    gate %-11s max err %.2e\n", form ? "lower-bound" : "softplus", worst);
    assert_true(worst <= TOL_GATE_REL);
  }
  /* A_log NULL is a unit scale; dt_bias NULL no bias. */
  dsp_kda_gate_cfg sp = {DSP_KDA_GATE_SOFTPLUS, 0.0f};
  dsp_bf16 zero = 0;
  assert_int_equal(dsp_kda_gate(1, 1, 1, (dsp_kda_in_bf16){&zero, 1, 1}, NULL, NULL, &sp, g), DSP_OK);
  assert_true(fabs(g[0] + log(2.0)) < 1e-7);
  free(f);
  free(g);
}

static void test_beta_strided(void **st) {
  (void)st;
  enum { T = 77, HV = 5, P = 61 };
  rng_seed(2);
  dsp_bf16 *m = xmalloc(sizeof(dsp_bf16) * T * P), *c = xmalloc(sizeof(dsp_bf16) * T * HV);
  float *b1 = xmalloc(sizeof(float) * T * HV), *b2 = xmalloc(sizeof(float) * T * HV), *b3 = xmalloc(sizeof(float) * T * HV);
  for (int i = 0; i < T * P; i++) m[i] = rbf(3.0);
  for (int t = 0; t < T; t++)
    for (int h = 0; h < HV; h++) c[t * HV + h] = m[t * P + 40 + h];
  assert_int_equal(dsp_kda_beta(T, HV, m + 40, P, 1, b1), DSP_OK); /* a column block of a merged row */
  assert_int_equal(dsp_kda_beta(T, HV, c, HV, 1, b2), DSP_OK);
  assert_memory_equal(b1, b2, sizeof(float) * T * HV);
  for (int t = 0; t < T; t++) /* heads interleaved with stride 3 */
    for (int h = 0; h < HV; h++) m[t * P + 3 * h] = c[t * HV + h];
  assert_int_equal(dsp_kda_beta(T, HV, m, P, 3, b3), DSP_OK);
  assert_memory_equal(b1, b3, sizeof(float) * T * HV);
  double worst = 0;
  for (int i = 0; i < T * HV; i++) {
    double r = sigm(bfd(c[i]));
    worst = fmax(worst, fabs(b1[i] - r) / r);
  }
  print_message("    beta max rel %.2e\n", worst);
  assert_true(worst <= TOL_GATE_REL);
  free(m);
  free(c);
  free(b1);
  free(b2);
  free(b3);
}

/* The gate applied twice, or the two forms mixed, must fail the comparison that
 * the gate applied once passes. */
static void test_gate_once(void **st) {
  (void)st;
  const dsp_kda_dims d = {1, 1, 32, 32};
  const int32_t lens[1] = {40};
  for (int form = 0; form < 2; form++) {
    kcase c;
    case_make(&c, d, 1, lens, 0, 3 + form);
    const int64_t T = c.T, K = 32;
    dsp_bf16 *f = xmalloc(sizeof(dsp_bf16) * (size_t)(T * K)), *f2 = xmalloc(sizeof(dsp_bf16) * (size_t)(T * K));
    float A = (float)log(4.0), bias[32], *g1 = xmalloc(sizeof(float) * (size_t)(T * K));
    float *g2 = xmalloc(sizeof(float) * (size_t)(T * K)), *g3 = xmalloc(sizeof(float) * (size_t)(T * K));
    for (int e = 0; e < K; e++) bias[e] = (float)(0.3 * gauss());
    for (int64_t i = 0; i < T * K; i++) f[i] = rbf(2.0);
    for (int64_t t = 0; t < T; t++) /* the reference applies the gate once, in fp64 */
      for (int e = 0; e < K; e++) {
        double x = bfd(f[t * K + e]) + bias[e], a = exp((double)A);
        c.g[t * K + e] = (float)(form ? -5.0 * sigm(a * x) : -a * softplus(x));
      }
    dsp_kda_gate_cfg cfg = {form ? DSP_KDA_GATE_LOWER_BOUND : DSP_KDA_GATE_SOFTPLUS, -5.0f};
    dsp_kda_gate_cfg other = {form ? DSP_KDA_GATE_SOFTPLUS : DSP_KDA_GATE_LOWER_BOUND, -5.0f};
    assert_int_equal(dsp_kda_gate(T, 1, K, (dsp_kda_in_bf16){f, K, K}, &A, bias, &cfg, g1), DSP_OK);
    for (int64_t i = 0; i < T * K; i++) f2[i] = dsp_f32_to_bf16(g1[i]);
    assert_int_equal(dsp_kda_gate(T, 1, K, (dsp_kda_in_bf16){f2, K, K}, &A, bias, &cfg, g2), DSP_OK); /* twice */
    assert_int_equal(dsp_kda_gate(T, 1, K, (dsp_kda_in_bf16){f, K, K}, &A, bias, &other, g3), DSP_OK); /* mixed */
    double *o = xmalloc(sizeof(double) * (size_t)(T * 32)), S[32 * 32];
    ref_seq(&c, 0, c.g, o, S, NULL);
    const float *gs[3] = {g1, g2, g3};
    double err[3];
    for (int w = 0; w < 3; w++) {
      krun r;
      run_init(&r, &c);
      assert_int_equal(run_form(0, &c, &r, NULL, 0, gs[w]), DSP_OK);
      float *oc = gather_o(&c, &r);
      err[w] = compare(oc, o, T * 32, 1).rms;
      free(oc);
      run_free(&r);
    }
    print_message("    %-11s gate once rms %.2e, twice %.2e, other form %.2e\n", form ? "lower-bound" : "softplus",
                  err[0], err[1], err[2]);
    assert_true(err[0] <= TOL_OUT_RMS);
    assert_true(err[1] > 20 * TOL_OUT_RMS && err[2] > 20 * TOL_OUT_RMS);
    free(o);
    free(f);
    free(f2);
    free(g1);
    free(g2);
    free(g3);
    case_free(&c);
  }
}

/* ---- gated RMSNorm ---------------------------------------------------------------- */
static void test_norm_strided(void **st) {
  (void)st;
  enum { T = 29, HV = 3, V = 64, HS = V + 5, TS = HV * HS + 11, P = 3 * HV * V + 9 };
  rng_seed(4);
  const float eps = 1e-5f;
  float w[V];
  for (int j = 0; j < V; j++) w[j] = (float)(1.0 + 0.2 * gauss());
  dsp_bf16 *xs = xmalloc(sizeof(dsp_bf16) * T * TS), *zm = xmalloc(sizeof(dsp_bf16) * T * P);
  dsp_bf16 *xc = xmalloc(sizeof(dsp_bf16) * T * HV * V), *zc = xmalloc(sizeof(dsp_bf16) * T * HV * V);
  dsp_bf16 *ys = xmalloc(sizeof(dsp_bf16) * T * TS), *yc = xmalloc(sizeof(dsp_bf16) * T * HV * V);
  for (int i = 0; i < T * TS; i++) xs[i] = rbf(0.7);
  for (int i = 0; i < T * P; i++) zm[i] = rbf(2.0);
  const int zoff = 2 * HV * V + 4; /* the gate: a column block of a merged projection row */
  for (int t = 0; t < T; t++)
    for (int h = 0; h < HV; h++)
      for (int j = 0; j < V; j++) {
        xc[(t * HV + h) * V + j] = xs[t * TS + h * HS + j];
        zc[(t * HV + h) * V + j] = zm[t * P + zoff + h * V + j];
      }
  memset(ys, 0xAB, sizeof(dsp_bf16) * T * TS);
  assert_int_equal(dsp_kda_gated_rmsnorm(T, HV, V, (dsp_kda_in_bf16){xs, TS, HS}, (dsp_kda_in_bf16){zm + zoff, P, V}, w,
                                         eps, (dsp_kda_out_bf16){ys, TS, HS}),
                   DSP_OK);
  assert_int_equal(dsp_kda_gated_rmsnorm(T, HV, V, (dsp_kda_in_bf16){xc, HV * V, V}, (dsp_kda_in_bf16){zc, HV * V, V}, w,
                                         eps, (dsp_kda_out_bf16){yc, HV * V, V}),
                   DSP_OK);
  float *c = xmalloc(sizeof(float) * T * HV * V);
  double *r = xmalloc(sizeof(double) * T * HV * V);
  for (int t = 0; t < T; t++)
    for (int h = 0; h < HV; h++) {
      const dsp_bf16 *x = xc + (t * HV + h) * V;
      double ss = 0;
      for (int j = 0; j < V; j++) ss += bfd(x[j]) * bfd(x[j]);
      for (int j = 0; j < V; j++) {
        assert_int_equal(ys[t * TS + h * HS + j], yc[(t * HV + h) * V + j]); /* strided == contiguous, bit for bit */
        c[(t * HV + h) * V + j] = dsp_bf16_to_f32(yc[(t * HV + h) * V + j]);
        r[(t * HV + h) * V + j] = bfd(x[j]) / sqrt(ss / V + eps) * w[j] * sigm(bfd(zc[(t * HV + h) * V + j]));
      }
      assert_int_equal(ys[t * TS + h * HS + V], 0xABAB); /* the gaps are not written */
    }
  check_out("gated rmsnorm", c, r, T * HV * V);
  /* in place: y is x */
  assert_int_equal(dsp_kda_gated_rmsnorm(T, HV, V, (dsp_kda_in_bf16){xc, HV * V, V}, (dsp_kda_in_bf16){zc, HV * V, V}, w,
                                         eps, (dsp_kda_out_bf16){xc, HV * V, V}),
                   DSP_OK);
  assert_memory_equal(xc, yc, sizeof(dsp_bf16) * T * HV * V);
  free(xs);
  free(zm);
  free(xc);
  free(zc);
  free(ys);
  free(yc);
  free(c);
  free(r);
}

/* ---- short conv ------------------------------------------------------------------ */
enum { CD = 3 * 2 * 64, CW = 4, CP = CD + 40, CY = CD + 7 };

static void conv_ref(const dsp_bf16 *x, int64_t t0, int64_t t1, const float *w, const float *bias,
                     const dsp_bf16 *state, double *y /* [t1-t0][CD] */) {
  for (int64_t t = t0; t < t1; t++)
    for (int c = 0; c < CD; c++) {
      double acc = bias ? bias[c] : 0.0;
      for (int j = 0; j < CW; j++) {
        int64_t p = t - (CW - 1) + j; /* input position; before t0: the state */
        double xv = p >= t0 ? bfd(x[p * CP + c]) : (state ? bfd(state[(p - t0 + CW - 1) * CD + c]) : 0.0);
        acc += w[c * CW + j] * xv;
      }
      y[(t - t0) * CD + c] = acc * sigm(acc);
    }
}

static void test_conv_prefill_ref(void **st) {
  (void)st;
  enum { N = 4, NS = 6, SS = (CW - 1) * CD + 8 };
  const int32_t cu[N + 1] = {0, 37, 38, 40, 110}, slots[N] = {3, 0, 2, 1};
  const uint8_t has[N] = {1, 0, 1, 1};
  const int64_t T = cu[N];
  rng_seed(5);
  dsp_bf16 *x = xmalloc(sizeof(dsp_bf16) * (size_t)(T * CP)), *y = xmalloc(sizeof(dsp_bf16) * (size_t)(T * CY));
  dsp_bf16 *pool = xmalloc(sizeof(dsp_bf16) * NS * SS), *pool0 = xmalloc(sizeof(dsp_bf16) * NS * SS);
  float *w = xmalloc(sizeof(float) * CD * CW), bias[CD];
  for (int64_t i = 0; i < T * CP; i++) x[i] = rbf(1.0);
  for (int i = 0; i < NS * SS; i++) pool0[i] = rbf(1.0);
  for (int i = 0; i < CD * CW; i++) w[i] = (float)(0.5 * gauss());
  for (int i = 0; i < CD; i++) bias[i] = (float)(0.1 * gauss());
  for (int wb = 0; wb < 2; wb++) {
    memcpy(pool, pool0, sizeof(dsp_bf16) * NS * SS);
    dsp_kda_conv_dims cd = {CD, CW};
    dsp_kda_seqs s = {N, cu, slots, has, 1, NULL};
    dsp_kda_conv_state cs = {pool, SS, NS};
    assert_int_equal(dsp_kda_conv(&cd, &s, x, CP, w, wb ? bias : NULL, &cs, y, CY), DSP_OK);
    float *c = xmalloc(sizeof(float) * (size_t)(T * CD));
    double *r = xmalloc(sizeof(double) * (size_t)(T * CD));
    for (int n = 0; n < N; n++) {
      conv_ref(x, cu[n], cu[n + 1], w, wb ? bias : NULL, has[n] ? pool0 + slots[n] * SS : NULL, r + cu[n] * CD);
      /* the final state: the last W-1 inputs of (state ++ x), as they came */
      for (int j = 0; j < CW - 1; j++) {
        int64_t p = cu[n + 1] - (CW - 1) + j;
        for (int ch = 0; ch < CD; ch++) {
          dsp_bf16 want = p >= cu[n] ? x[p * CP + ch] : (has[n] ? pool0[slots[n] * SS + (p - cu[n] + CW - 1) * CD + ch] : 0);
          assert_int_equal(pool[slots[n] * SS + j * CD + ch], want);
        }
      }
    }
    for (int64_t t = 0; t < T; t++)
      for (int ch = 0; ch < CD; ch++) c[t * CD + ch] = dsp_bf16_to_f32(y[t * CY + ch]);
    check_out(wb ? "conv varlen, bias" : "conv varlen", c, r, T * CD);
    for (int i = 4 * SS; i < NS * SS; i++) assert_int_equal(pool[i], pool0[i]); /* other slots untouched */
    free(c);
    free(r);
  }
  free(x);
  free(y);
  free(pool);
  free(pool0);
  free(w);
}

/* Decode after a prefill gives the bits of one longer prefill; the verify
 * path's per-token states equal fresh runs over each accepted prefix. */
/* The AVX-512 gate (16 key dims in the lanes, log1p in double on 8) against
 * the scalar loop: bit for bit, both forms, with and without A_log and bias,
 * K a multiple of 16 and not, inputs across softplus's threshold 20, expf's
 * underflow, log1p's small branch (expf(x) near 2^-10), a NaN and +-inf. */
static void test_gate_isa(void **st) {
  (void)st;
  if (!dsp_cpu_isa_supported(DSP_CPU_ISA_AVX512)) {
    print_message("no AVX-512 on this CPU: only the scalar gate runs (nothing to compare)\n");
    return;
  }
  enum { T = 300, HV = 3, KMAX = 128 };
  const int32_t Ks[] = {128, 40};
  rng_seed(12);
  dsp_bf16 *f = xmalloc(sizeof(dsp_bf16) * T * HV * KMAX);
  float *A = xmalloc(sizeof(float) * HV), *bias = xmalloc(sizeof(float) * HV * KMAX);
  float *g[2] = {xmalloc(sizeof(float) * T * HV * KMAX), xmalloc(sizeof(float) * T * HV * KMAX)};
  for (int i = 0; i < T * HV * KMAX; i++) {
    const int k = i % 11;
    f[i] = k == 0 ? rbf(40.0) : k == 1 ? dsp_f32_to_bf16(-6.93f + (float)(0.01 * gauss())) : k == 2 ? rbf(120.0) : rbf(4.0);
  }
  f[17] = 0x7fc1, f[18] = 0x7f80, f[19] = 0xff80, f[20] = dsp_f32_to_bf16(20.0f);
  for (int h = 0; h < HV; h++) A[h] = (float)(0.5 * gauss());
  for (int i = 0; i < HV * KMAX; i++) bias[i] = (float)gauss();
  long differ = 0;
  for (size_t ki = 0; ki < 2; ki++)
    for (int form = 0; form < 2; form++)
      for (int opt = 0; opt < 4; opt++) {
        const int32_t K = Ks[ki];
        const dsp_kda_gate_cfg cfg = {form ? DSP_KDA_GATE_LOWER_BOUND : DSP_KDA_GATE_SOFTPLUS, -5.0f};
        for (int p = 0; p < 2; p++) {
          assert_int_equal(dsp_cpu_kernel_force(p ? "scalar" : "avx512"), DSP_OK);
          assert_int_equal(dsp_kda_gate(T, HV, K, (dsp_kda_in_bf16){f, (int64_t)HV * KMAX, KMAX}, opt & 1 ? A : NULL,
                                        opt & 2 ? bias : NULL, &cfg, g[p]),
                           DSP_OK);
        }
        assert_int_equal(dsp_cpu_kernel_force(NULL), DSP_OK);
        for (int64_t i = 0; i < (int64_t)T * HV * K; i++) {
          uint32_t a, b;
          memcpy(&a, &g[0][i], 4), memcpy(&b, &g[1][i], 4);
          differ += a != b;
        }
      }
  free(f), free(A), free(bias), free(g[0]), free(g[1]);
  assert_int_equal(differ, 0);
}

/* The AVX-512 convolution (16 channels in the lanes) against the scalar loop:
 * bit for bit, outputs and states, a varlen batch with and without bias,
 * channel counts that are and are not multiples of 16 and 64, widths 4 and 2,
 * states kept per token, a NaN input and large values (SiLU's tails). */
static void test_conv_isa(void **st) {
  (void)st;
  if (!dsp_cpu_isa_supported(DSP_CPU_ISA_AVX512)) {
    print_message("no AVX-512 on this CPU: only the scalar convolution runs (nothing to compare)\n");
    return;
  }
  enum { N = 3, NS = 8 };
  const int32_t cu[N + 1] = {0, 700, 701, 709}, slots[N] = {2, 0, 5}; /* enough outputs that an fp32 ulp shows */
  const uint8_t has[N] = {1, 0, 1};
  int32_t tslot[709];
  for (int t = 0; t < 709; t++) tslot[t] = t >= 701 && t < 705 ? 6 + (t % 2) : -1; /* a verify keeping states */
  const int32_t Ds[] = {CD, 100, 37}, Ws[] = {4, 2};
  rng_seed(11);
  for (size_t di = 0; di < 3; di++)
    for (size_t wi = 0; wi < 2; wi++) {
      const int32_t D = Ds[di], W = Ws[wi], SS = (W - 1) * D, T = cu[N];
      dsp_bf16 *x = xmalloc(sizeof(dsp_bf16) * (size_t)(T * D)), *pool0 = xmalloc(sizeof(dsp_bf16) * (size_t)(NS * SS));
      float *w = xmalloc(sizeof(float) * (size_t)(D * W)), *bias = xmalloc(sizeof(float) * (size_t)D);
      for (int64_t i = 0; i < (int64_t)T * D; i++) x[i] = rbf(i % 97 == 5 ? 60.0 : 1.5);
      x[7 * D + 3] = 0x7fc1; /* a NaN */
      for (int i = 0; i < NS * SS; i++) pool0[i] = rbf(1.0);
      for (int i = 0; i < D * W; i++) w[i] = (float)(0.7 * gauss());
      for (int i = 0; i < D; i++) bias[i] = (float)(0.2 * gauss());
      for (int wb = 0; wb < 2; wb++) {
        dsp_bf16 *y[2], *pool[2];
        for (int p = 0; p < 2; p++) {
          y[p] = xmalloc(sizeof(dsp_bf16) * (size_t)(T * D));
          pool[p] = xmalloc(sizeof(dsp_bf16) * (size_t)(NS * SS));
          memcpy(pool[p], pool0, sizeof(dsp_bf16) * (size_t)(NS * SS));
          dsp_kda_conv_dims cd = {D, W};
          dsp_kda_seqs s = {N, cu, slots, has, 1, tslot};
          dsp_kda_conv_state cs = {pool[p], SS, NS};
          assert_int_equal(dsp_cpu_kernel_force(p ? "scalar" : "avx512"), DSP_OK);
          assert_int_equal(dsp_kda_conv(&cd, &s, x, D, w, wb ? bias : NULL, &cs, y[p], D), DSP_OK);
        }
        assert_int_equal(dsp_cpu_kernel_force(NULL), DSP_OK);
        assert_memory_equal(y[0], y[1], sizeof(dsp_bf16) * (size_t)(T * D));
        assert_memory_equal(pool[0], pool[1], sizeof(dsp_bf16) * (size_t)(NS * SS));
        for (int p = 0; p < 2; p++) free(y[p]), free(pool[p]);
      }
      free(x), free(pool0), free(w), free(bias);
    }
}

static void test_conv_decode_verify(void **st) {
  (void)st;
  enum { T = 12, SS = (CW - 1) * CD, NS = 8 };
  rng_seed(6);
  dsp_bf16 *x = xmalloc(sizeof(dsp_bf16) * T * CP), *ya = xmalloc(sizeof(dsp_bf16) * T * CY);
  dsp_bf16 *yb = xmalloc(sizeof(dsp_bf16) * T * CY), *pool = xmalloc(sizeof(dsp_bf16) * NS * SS);
  float *w = xmalloc(sizeof(float) * CD * CW);
  for (int i = 0; i < T * CP; i++) x[i] = rbf(1.0);
  for (int i = 0; i < CD * CW; i++) w[i] = (float)(0.5 * gauss());
  for (int i = 0; i < NS * SS; i++) pool[i] = rbf(1.0);
  memset(yb, 0, sizeof(dsp_bf16) * T * CY);
  dsp_kda_conv_dims cd = {CD, CW};
  dsp_kda_conv_state cs = {pool, SS, NS};
  const uint8_t no[1] = {0};
  /* slot 1: one prefill of 12 tokens from zeros */
  int32_t cu12[2] = {0, T}, s1[1] = {1}, s0[1] = {0};
  dsp_kda_seqs a = {1, cu12, s1, no, 1, NULL};
  assert_int_equal(dsp_kda_conv(&cd, &a, x, CP, w, NULL, &cs, ya, CY), DSP_OK);
  /* slot 0: a prefill of 2 (shorter than W-1), then 10 decode steps */
  int32_t cu2[2] = {0, 2};
  dsp_kda_seqs b = {1, cu2, s0, no, 1, NULL};
  assert_int_equal(dsp_kda_conv(&cd, &b, x, CP, w, NULL, &cs, yb, CY), DSP_OK);
  for (int t = 2; t < T; t++) {
    dsp_kda_seqs dec = {1, NULL, s0, NULL, 1, NULL};
    assert_int_equal(dsp_kda_conv(&cd, &dec, x + t * CP, CP, w, NULL, &cs, yb + t * CY, CY), DSP_OK);
  }
  for (int t = 0; t < T; t++) assert_memory_equal(ya + t * CY, yb + t * CY, sizeof(dsp_bf16) * CD);
  assert_memory_equal(pool, pool + SS, sizeof(dsp_bf16) * SS);
  /* verify 5 tokens from slot 0 (write_final 0), states kept in slots 2..6 */
  int32_t cu5[2] = {0, 5}, ts[5] = {2, 3, 4, 5, 6};
  dsp_bf16 keep[SS];
  memcpy(keep, pool, sizeof keep);
  dsp_kda_seqs v = {1, cu5, s0, NULL, 0, ts};
  assert_int_equal(dsp_kda_conv(&cd, &v, x, CP, w, NULL, &cs, ya, CY), DSP_OK);
  assert_memory_equal(pool, keep, sizeof keep); /* the sequence's own slot is not touched */
  for (int acc = 1; acc <= 5; acc++) {
    memcpy(pool + 7 * SS, keep, sizeof keep);
    int32_t cua[2] = {0, acc}, s7[1] = {7};
    dsp_kda_seqs f = {1, cua, s7, NULL, 1, NULL};
    assert_int_equal(dsp_kda_conv(&cd, &f, x, CP, w, NULL, &cs, yb, CY), DSP_OK);
    assert_memory_equal(pool + 7 * SS, pool + ts[acc - 1] * SS, sizeof keep);
    for (int t = 0; t < acc; t++) assert_memory_equal(ya + t * CY, yb + t * CY, sizeof(dsp_bf16) * CD);
  }
  assert_int_equal(dsp_kda_conv_state_copy(&cd, &cs, ts[2], 0), DSP_OK); /* accept 3 */
  assert_memory_equal(pool, pool + ts[2] * SS, sizeof keep);
  /* width 1 has no state */
  dsp_kda_conv_dims c1 = {CD, 1};
  dsp_kda_seqs one = {1, cu2, s0, NULL, 1, NULL};
  assert_int_equal(dsp_kda_conv(&c1, &one, x, CP, w, NULL, NULL, ya, CY), DSP_OK);
  double r = bfd(x[CP + 5]) * (double)w[5];
  assert_true(fabs(dsp_bf16_to_f32(ya[CY + 5]) - r * sigm(r)) <= half_ulp_bf16(r * sigm(r)) * 1.01 + 1e-6);
  free(x);
  free(ya);
  free(yb);
  free(pool);
  free(w);
}

/* ---- the recurrence, both forms, against fp64 -------------------------------------- */
static void forms_ref(int form) {
  for (size_t di = 0; di < sizeof DIMS / sizeof DIMS[0]; di++)
    for (int decay = 0; decay < 3; decay++) {
      kcase c;
      case_make(&c, DIMS[di], 4, LENS, decay, 100 + 10 * di + decay);
      krun r;
      run_init(&r, &c);
      assert_int_equal(run_form(form, &c, &r, NULL, 0, NULL), DSP_OK);
      char what[96];
      snprintf(what, sizeof what, "%s H%d HV%d K%d V%d %s", form ? "chunked" : "recurrent", DIMS[di].num_heads,
               DIMS[di].num_v_heads, DIMS[di].head_k, DIMS[di].head_v, DECAY[decay]);
      check_run(what, &c, &r);
      run_free(&r);
      case_free(&c);
    }
}
static void test_recurrent_ref(void **st) {
  (void)st;
  forms_ref(0);
}
static void test_chunked_ref(void **st) {
  (void)st;
  forms_ref(1);
}

static void test_chunked_vs_recurrent(void **st) {
  (void)st;
  for (size_t di = 0; di < sizeof DIMS / sizeof DIMS[0]; di++)
    for (int decay = 0; decay < 3; decay++) {
      kcase c;
      case_make(&c, DIMS[di], 4, LENS, decay, 200 + 10 * di + decay);
      krun a, b;
      run_init(&a, &c);
      run_init(&b, &c);
      assert_int_equal(run_form(0, &c, &a, NULL, 0, NULL), DSP_OK);
      assert_int_equal(run_form(1, &c, &b, NULL, 0, NULL), DSP_OK);
      const int64_t n = (int64_t)c.d.num_v_heads * c.d.head_k * c.d.head_v;
      double *ra = xmalloc(sizeof(double) * (size_t)(c.N * n));
      float *fb = xmalloc(sizeof(float) * (size_t)(c.N * n));
      for (int32_t s = 0; s < c.N; s++)
        for (int64_t i = 0; i < n; i++) {
          ra[s * n + i] = a.pool[a.slots[s] * a.stride + i];
          fb[s * n + i] = b.pool[b.slots[s] * b.stride + i];
        }
      errs e = compare(fb, ra, c.N * n, 0);
      float *oa = gather_o(&c, &a), *ob = gather_o(&c, &b);
      const int64_t no = c.T * c.d.num_v_heads * c.d.head_v;
      double *oad = xmalloc(sizeof(double) * (size_t)no);
      for (int64_t i = 0; i < no; i++) oad[i] = oa[i];
      errs eo = compare(ob, oad, no, 0);
      print_message("    chunked vs recurrent K%d %-11s state rms %.2e, out rms %.2e\n", c.d.head_k, DECAY[decay], e.rms,
                    eo.rms);
      if (e.rms > worst_chunk_vs_rec) worst_chunk_vs_rec = e.rms;
      assert_true(e.rms <= 2 * TOL_STATE_RMS);
      assert_true(eo.rms <= TOL_OUT_RMS);
      free(ra);
      free(fb);
      free(oa);
      free(ob);
      free(oad);
      run_free(&a);
      run_free(&b);
      case_free(&c);
    }
}

/* ---- layout and batch invariance ----------------------------------------------------- */
static void assert_runs_equal(const kcase *c, const krun *a, const krun *b) {
  const int64_t n = (int64_t)c->d.num_v_heads * c->d.head_k * c->d.head_v;
  assert_memory_equal(a->o, b->o, sizeof(dsp_bf16) * (size_t)(c->T * a->otok));
  for (int32_t s = 0; s < c->N; s++)
    assert_memory_equal(a->pool + a->slots[s] * a->stride, b->pool + b->slots[s] * b->stride, sizeof(float) * (size_t)n);
}

static void test_value_tile(void **st) {
  (void)st;
  kcase c;
  case_make(&c, DIMS[1], 2, (const int32_t[]){37, 130}, 2, 300);
  krun base;
  run_init(&base, &c);
  assert_int_equal(run_form(1, &c, &base, NULL, 0, NULL), DSP_OK);
  assert_int_equal(dsp_kda_chunked_value_tile(&c.d, NULL), 64);
  const int32_t tiles[] = {16, 48, 64, 128, 1000};
  const int32_t want[] = {16, 48, 64, 128, 128};
  size_t prev = 0;
  for (int i = 0; i < 5; i++) {
    dsp_kda_opts o = {0.0f, 0, tiles[i]};
    assert_int_equal(dsp_kda_chunked_value_tile(&c.d, &o), want[i]); /* the explicit setting wins */
    size_t ws = dsp_kda_chunked_workspace_size(&c.d, &o, 1);
    assert_true(ws >= prev);
    prev = ws;
    for (int32_t threads = 1; threads <= 2; threads++) {
      krun r;
      run_init(&r, &c);
      assert_int_equal(run_form(1, &c, &r, &o, threads, NULL), DSP_OK);
      assert_runs_equal(&c, &base, &r);
      run_free(&r);
    }
  }
  /* a workspace for a tile of 16 is too small for 128 */
  dsp_kda_opts small = {0.0f, 0, 16}, big = {0.0f, 0, 128}, bad = {0.0f, 0, -1};
  size_t n16 = dsp_kda_chunked_workspace_size(&c.d, &small, 1);
  assert_true(n16 < dsp_kda_chunked_workspace_size(&c.d, &big, 1));
  void *ws = xmalloc(n16);
  dsp_kda_seqs s = {c.N, c.cu, base.slots, c.has, 0, NULL};
  dsp_kda_io io = case_io(&c, &base, NULL);
  dsp_kda_state stt = {base.pool, base.stride, base.nslots};
  assert_int_equal(dsp_kda_chunked(&c.d, &big, &s, &io, &stt, ws, n16), DSP_ERR_NOMEM);
  assert_int_equal(dsp_kda_chunked_value_tile(&c.d, &bad), 0);
  assert_int_equal(dsp_kda_chunked(&c.d, &bad, &s, &io, &stt, ws, n16), DSP_ERR_ARG);
  free(ws);
  /* the recurrent form on one thread gives the bits of two */
  krun r1, r2;
  run_init(&r1, &c);
  run_init(&r2, &c);
  assert_int_equal(run_form(0, &c, &r1, NULL, 1, NULL), DSP_OK);
  assert_int_equal(run_form(0, &c, &r2, NULL, 2, NULL), DSP_OK);
  assert_runs_equal(&c, &r1, &r2);
  run_free(&r1);
  run_free(&r2);
  run_free(&base);
  case_free(&c);
}

/* The AVX-512 recurrence (16 value columns in the lanes) against the scalar
 * path: bit for bit, V a multiple of 16 and not, GQA, with per-token states. */
static void test_recurrent_isa(void **st) {
  (void)st;
  if (!dsp_cpu_isa_supported(DSP_CPU_ISA_AVX512)) {
    print_message("no AVX-512 on this CPU: only the scalar recurrence runs (nothing to compare)\n");
    return;
  }
  const dsp_kda_dims dims[] = {{2, 2, 128, 128}, {1, 2, 64, 40}, {1, 1, 32, 72}};
  for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
    kcase c;
    case_make(&c, dims[di], 4, LENS, (int)(di % 3), 900 + di);
    krun r[2];
    for (int p = 0; p < 2; p++) {
      run_init(&r[p], &c);
      assert_int_equal(dsp_cpu_kernel_force(p ? "scalar" : "avx512"), DSP_OK);
      assert_int_equal(run_form(0, &c, &r[p], NULL, 0, NULL), DSP_OK);
    }
    assert_int_equal(dsp_cpu_kernel_force(NULL), DSP_OK);
    assert_memory_equal(r[0].o, r[1].o, sizeof(dsp_bf16) * (size_t)(c.T * r[0].otok));
    assert_memory_equal(r[0].pool, r[1].pool, sizeof(float) * (size_t)(r[0].nslots * r[0].stride));
    for (int p = 0; p < 2; p++) run_free(&r[p]);
    case_free(&c);
  }
}

static void test_varlen_equals_alone(void **st) {
  (void)st;
  for (int form = 0; form < 2; form++) {
    kcase c;
    case_make(&c, DIMS[0], 4, LENS, 0, 400 + form);
    krun all;
    run_init(&all, &c);
    assert_int_equal(run_form(form, &c, &all, NULL, 0, NULL), DSP_OK);
    for (int32_t n = 0; n < c.N; n++) {
      krun one;
      run_init(&one, &c);
      dsp_kda_seqs s = {1, (const int32_t[]){0, c.cu[n + 1] - c.cu[n]}, &one.slots[n], &c.has[n], 1, NULL};
      dsp_kda_io io = case_io(&c, &one, NULL);
      const int64_t t0 = c.cu[n];
      io.q.data += t0 * c.P;
      io.k.data += t0 * c.P;
      io.v.data += t0 * c.P;
      io.g += t0 * c.d.num_v_heads * c.d.head_k;
      io.beta += t0 * c.d.num_v_heads;
      io.o.data += t0 * one.otok;
      dsp_kda_state stt = {one.pool, one.stride, one.nslots};
      size_t nb = form ? dsp_kda_chunked_workspace_size(&c.d, NULL, 0) : dsp_kda_recurrent_workspace_size(&c.d, 0);
      void *ws = xmalloc(nb);
      assert_int_equal(form ? dsp_kda_chunked(&c.d, NULL, &s, &io, &stt, ws, nb) : dsp_kda_recurrent(&c.d, NULL, &s, &io, &stt, ws, nb),
                       DSP_OK);
      free(ws);
      const int64_t n_s = (int64_t)c.d.num_v_heads * c.d.head_k * c.d.head_v;
      assert_memory_equal(all.o + t0 * all.otok, one.o + t0 * one.otok, sizeof(dsp_bf16) * (size_t)((c.cu[n + 1] - t0) * all.otok));
      assert_memory_equal(all.pool + all.slots[n] * all.stride, one.pool + one.slots[n] * one.stride, sizeof(float) * (size_t)n_s);
      run_free(&one);
    }
    run_free(&all);
    case_free(&c);
  }
}

/* ---- decode after prefill; speculative verification --------------------------------- */
/* Runs tokens [t0, t1) of case sequence 0 from slot `slot` (has_state 1). */
static void run_span(int form, const kcase *c, krun *r, int32_t slot, int64_t t0, int64_t t1, int write_final,
                     const int32_t *token_slot) {
  int32_t cu[2] = {0, (int32_t)(t1 - t0)};
  dsp_kda_seqs s = {1, form == 2 ? NULL : cu, &slot, NULL, write_final, token_slot};
  dsp_kda_io io = case_io(c, r, NULL);
  io.q.data += t0 * c->P;
  io.k.data += t0 * c->P;
  io.v.data += t0 * c->P;
  io.g += t0 * c->d.num_v_heads * c->d.head_k;
  io.beta += t0 * c->d.num_v_heads;
  io.o.data += t0 * r->otok;
  dsp_kda_state stt = {r->pool, r->stride, r->nslots};
  size_t nb = form == 1 ? dsp_kda_chunked_workspace_size(&c->d, NULL, 0) : dsp_kda_recurrent_workspace_size(&c->d, 0);
  void *ws = xmalloc(nb);
  assert_int_equal(form == 1 ? dsp_kda_chunked(&c->d, NULL, &s, &io, &stt, ws, nb) : dsp_kda_recurrent(&c->d, NULL, &s, &io, &stt, ws, nb),
                   DSP_OK);
  free(ws);
}

static void test_prefill_then_decode(void **st) {
  (void)st;
  kcase c;
  case_make(&c, DIMS[0], 1, (const int32_t[]){73}, 0, 500);
  const int64_t HV = c.d.num_v_heads, n_s = HV * c.d.head_k * c.d.head_v, V = c.d.head_v;
  for (int pre = 0; pre < 2; pre++) { /* prefill by the recurrent (0) or chunked (1) form, then 3 decode steps */
    krun a, b;
    run_init(&a, &c);
    run_init(&b, &c);
    run_span(pre, &c, &a, 0, 0, 70, 1, NULL);
    for (int64_t t = 70; t < 73; t++) run_span(2, &c, &a, 0, t, t + 1, 1, NULL);
    run_span(pre, &c, &b, 0, 0, 73, 1, NULL);
    if (pre == 0) { /* the same form: the same bits */
      assert_runs_equal(&c, &a, &b);
    } else {
      float *oa = gather_o(&c, &a), *ob = gather_o(&c, &b);
      double *od = xmalloc(sizeof(double) * (size_t)(73 * HV * V)), *sd = xmalloc(sizeof(double) * (size_t)n_s);
      for (int64_t i = 0; i < 73 * HV * V; i++) od[i] = ob[i];
      for (int64_t i = 0; i < n_s; i++) sd[i] = b.pool[i];
      errs eo = compare(oa, od, 73 * HV * V, 0), es = compare(a.pool, sd, n_s, 0);
      print_message("    chunked prefill + decode vs longer chunked prefill: out rms %.2e, state rms %.2e\n", eo.rms, es.rms);
      assert_true(eo.rms <= TOL_OUT_RMS && es.rms <= 2 * TOL_STATE_RMS);
      assert_memory_equal(a.o, b.o, sizeof(dsp_bf16) * (size_t)(70 * a.otok)); /* the shared prefill */
      free(oa);
      free(ob);
      free(od);
      free(sd);
    }
    run_free(&a);
    run_free(&b);
  }
  case_free(&c);
}

static void test_verify_accept(void **st) {
  (void)st;
  kcase c;
  case_make(&c, DIMS[2], 1, (const int32_t[]){26}, 1, 600);
  const int64_t n_s = (int64_t)c.d.num_v_heads * c.d.head_k * c.d.head_v;
  krun r, f;
  run_init(&r, &c);
  run_init(&f, &c);
  run_span(1, &c, &r, 0, 0, 20, 1, NULL); /* prefix in slot 0 */
  float *keep = xmalloc(sizeof(float) * (size_t)n_s);
  memcpy(keep, r.pool, sizeof(float) * (size_t)n_s);
  const int32_t ts[5] = {1, 2, 3, 4, 5};
  run_span(0, &c, &r, 0, 20, 25, 0, ts); /* verify 5 tokens, keep every state */
  assert_memory_equal(r.pool, keep, sizeof(float) * (size_t)n_s);
  for (int a = 1; a <= 5; a++) { /* a fresh run over the accepted prefix from the same state */
    memcpy(f.pool + 6 * f.stride, keep, sizeof(float) * (size_t)n_s);
    run_span(0, &c, &f, 6, 20, 20 + a, 1, NULL);
    assert_memory_equal(f.pool + 6 * f.stride, r.pool + ts[a - 1] * r.stride, sizeof(float) * (size_t)n_s);
    assert_memory_equal(f.o + 20 * f.otok, r.o + 20 * r.otok, sizeof(dsp_bf16) * (size_t)(a * r.otok));
  }
  /* accept 3, then decode the next token from the accepted state */
  dsp_kda_state stt = {r.pool, r.stride, r.nslots};
  assert_int_equal(dsp_kda_state_copy(&c.d, &stt, ts[2], 0), DSP_OK);
  run_span(2, &c, &r, 0, 23, 24, 1, NULL);
  memcpy(f.pool + 6 * f.stride, keep, sizeof(float) * (size_t)n_s);
  run_span(0, &c, &f, 6, 20, 24, 1, NULL);
  assert_memory_equal(f.pool + 6 * f.stride, r.pool, sizeof(float) * (size_t)n_s);
  assert_memory_equal(f.o + 23 * f.otok, r.o + 23 * r.otok, sizeof(dsp_bf16) * (size_t)r.otok);
  /* and the kept states match fp64 */
  double *o = xmalloc(sizeof(double) * (size_t)(c.T * c.d.num_v_heads * c.d.head_v)), *S = xmalloc(sizeof(double) * (size_t)n_s);
  double *states = xmalloc(sizeof(double) * (size_t)(c.T * n_s));
  memcpy(c.S0, keep, sizeof(float) * (size_t)n_s); /* reference from the prefix state, tokens 20.. */
  kcase c2 = c;
  c2.cu[0] = 20;
  c2.cu[1] = 25;
  c2.has[0] = 1;
  ref_seq(&c2, 0, c.g, o, S, states);
  check_state("verify: state after 5 of 5", r.pool + 5 * r.stride, states + 4 * n_s, n_s);
  free(o);
  free(S);
  free(states);
  free(keep);
  run_free(&r);
  run_free(&f);
  case_free(&c);
}

/* ---- padding, has_state, slot 0, bad arguments --------------------------------------- */
static void test_padding_and_fresh_state(void **st) {
  (void)st;
  for (int form = 0; form < 2; form++) {
    kcase c;
    case_make(&c, DIMS[2], 3, (const int32_t[]){5, 3, 9}, 0, 700 + form);
    krun a, b;
    run_init(&a, &c);
    run_init(&b, &c);
    const int64_t n_s = (int64_t)c.d.num_v_heads * c.d.head_k * c.d.head_v;
    int32_t slots[3] = {-1, 0, 2}; /* padding, slot 0, slot 2 */
    uint8_t has[3] = {1, 0, 1};
    for (int64_t i = 0; i < n_s; i++) a.pool[i] = NAN; /* has_state 0: never read */
    memset(b.pool, 0, sizeof(float) * (size_t)n_s);
    memcpy(a.pool + 2 * a.stride, c.S0, sizeof(float) * (size_t)n_s);
    memcpy(b.pool + 2 * b.stride, c.S0, sizeof(float) * (size_t)n_s);
    float *before = xmalloc(sizeof(float) * (size_t)(a.stride * a.nslots));
    memcpy(before, a.pool, sizeof(float) * (size_t)(a.stride * a.nslots));
    dsp_kda_seqs sa = {3, c.cu, slots, has, 1, NULL}, sb = {3, c.cu, slots, NULL, 1, NULL};
    dsp_kda_io ia = case_io(&c, &a, NULL), ib = case_io(&c, &b, NULL);
    dsp_kda_state sta = {a.pool, a.stride, a.nslots}, stb = {b.pool, b.stride, b.nslots};
    size_t nb = form ? dsp_kda_chunked_workspace_size(&c.d, NULL, 0) : dsp_kda_recurrent_workspace_size(&c.d, 0);
    void *ws = xmalloc(nb);
    assert_int_equal(form ? dsp_kda_chunked(&c.d, NULL, &sa, &ia, &sta, ws, nb) : dsp_kda_recurrent(&c.d, NULL, &sa, &ia, &sta, ws, nb), DSP_OK);
    assert_int_equal(form ? dsp_kda_chunked(&c.d, NULL, &sb, &ib, &stb, ws, nb) : dsp_kda_recurrent(&c.d, NULL, &sb, &ib, &stb, ws, nb), DSP_OK);
    free(ws);
    for (int64_t i = 0; i < 5 * a.otok; i++) assert_int_equal(a.o[i], 0x7FC1); /* padding outputs untouched */
    assert_memory_equal(a.o + 5 * a.otok, b.o + 5 * b.otok, sizeof(dsp_bf16) * (size_t)(12 * a.otok));
    assert_memory_equal(a.pool, b.pool, sizeof(float) * (size_t)n_s);
    assert_memory_equal(a.pool + 2 * a.stride, b.pool + 2 * b.stride, sizeof(float) * (size_t)n_s);
    for (int32_t s = 0; s < a.nslots; s++) /* only slots 0 and 2 were written */
      if (s != 0 && s != 2)
        assert_memory_equal(a.pool + s * a.stride, before + s * a.stride, sizeof(float) * (size_t)a.stride);
    for (int64_t i = 0; i < n_s; i++) assert_false(isnan(a.pool[i]));
    free(before);
    run_free(&a);
    run_free(&b);
    case_free(&c);
  }
}

static void test_bad_arguments(void **st) {
  (void)st;
  kcase c;
  case_make(&c, DIMS[2], 2, (const int32_t[]){4, 3}, 0, 800);
  krun r;
  run_init(&r, &c);
  dsp_kda_io io = case_io(&c, &r, NULL);
  dsp_kda_state stt = {r.pool, r.stride, r.nslots};
  size_t nb = dsp_kda_recurrent_workspace_size(&c.d, 0);
  void *ws = xmalloc(nb);
  dsp_kda_seqs s = {c.N, c.cu, r.slots, c.has, 1, NULL};
  dsp_kda_dims bad = {2, 3, 64, 32};
  assert_int_equal(dsp_kda_recurrent(&bad, NULL, &s, &io, &stt, ws, nb), DSP_ERR_SHAPE);
  assert_true(strlen(dsp_error_message()) > 0);
  int32_t far[2] = {0, r.nslots};
  dsp_kda_seqs sf = {2, c.cu, far, NULL, 1, NULL};
  assert_int_equal(dsp_kda_recurrent(&c.d, NULL, &sf, &io, &stt, ws, nb), DSP_ERR_RANGE);
  int32_t cud[3] = {0, 5, 4};
  dsp_kda_seqs sd = {2, cud, r.slots, NULL, 1, NULL};
  assert_int_equal(dsp_kda_chunked(&c.d, NULL, &sd, &io, &stt, ws, nb), DSP_ERR_ARG);
  assert_int_equal(dsp_kda_recurrent(&c.d, NULL, &s, &io, &stt, ws, 100), DSP_ERR_NOMEM);
  assert_int_equal(dsp_kda_recurrent(&c.d, NULL, &s, &io, &stt, NULL, nb), DSP_ERR_NOMEM);
  int32_t tsl[7] = {0};
  dsp_kda_seqs st2 = {c.N, c.cu, r.slots, c.has, 1, tsl};
  size_t nc = dsp_kda_chunked_workspace_size(&c.d, NULL, 0);
  void *wc = xmalloc(nc);
  assert_int_equal(dsp_kda_chunked(&c.d, NULL, &st2, &io, &stt, wc, nc), DSP_ERR_UNSUPPORTED);
  tsl[3] = r.nslots + 1;
  assert_int_equal(dsp_kda_recurrent(&c.d, NULL, &st2, &io, &stt, ws, nb), DSP_ERR_RANGE);
  io.g = NULL;
  assert_int_equal(dsp_kda_recurrent(&c.d, NULL, &s, &io, &stt, ws, nb), DSP_ERR_ARG);
  dsp_kda_gate_cfg pos = {DSP_KDA_GATE_LOWER_BOUND, 1.0f};
  float g[4];
  dsp_bf16 f[4] = {0};
  assert_int_equal(dsp_kda_gate(1, 1, 4, (dsp_kda_in_bf16){f, 4, 4}, NULL, NULL, &pos, g), DSP_ERR_ARG);
  dsp_kda_conv_dims wide = {8, 9};
  assert_int_equal(dsp_kda_conv(&wide, &s, f, 8, g, NULL, NULL, f, 8), DSP_ERR_SHAPE);
  assert_int_equal(dsp_kda_state_copy(&c.d, &stt, -1, 0), DSP_ERR_RANGE);
  assert_int_equal(dsp_kda_beta(1, 1, NULL, 1, 1, g), DSP_ERR_ARG);
  free(ws);
  free(wc);
  run_free(&r);
  case_free(&c);
}

/* ---- the numpy oracle's layer fixture ---------------------------------------------- */
typedef struct { char name[48]; int code, ndim; int64_t shape[6], n; const void *data; } frec;
static char *fx_buf;
static frec fx[128];
static int fx_n;

static const frec *fx_get(const char *name) {
  for (int i = 0; i < fx_n; i++)
    if (strcmp(fx[i].name, name) == 0) return &fx[i];
  fail_msg("fixture has no %s", name);
  return NULL;
}
static const void *fxp(const char *pre, const char *name, int code) {
  char full[64];
  snprintf(full, sizeof full, "%s%s", pre, name);
  const frec *r = fx_get(full);
  assert_int_equal(r->code, code);
  return r->data;
}

static int fx_load(const char *path) {
  FILE *fh = fopen(path, "rb");
  if (!fh) return -1;
  fseek(fh, 0, SEEK_END);
  long len = ftell(fh);
  fseek(fh, 0, SEEK_SET);
  fx_buf = xmalloc((size_t)len);
  size_t got = fread(fx_buf, 1, (size_t)len, fh);
  fclose(fh);
  if (got != (size_t)len || len < 8 || memcmp(fx_buf, "KDAF", 4) != 0) return -1;
  uint32_t count;
  memcpy(&count, fx_buf + 4, 4);
  const size_t esz[4] = {8, 4, 2, 4};
  size_t off = 8;
  if (count > 128) return -1;
  for (uint32_t i = 0; i < count; i++) {
    frec *r = &fx[fx_n++];
    uint16_t nl;
    if (off + 2 > (size_t)len) return -1;
    memcpy(&nl, fx_buf + off, 2);
    off += 2;
    if (nl >= sizeof r->name || off + nl + 2 > (size_t)len) return -1;
    memcpy(r->name, fx_buf + off, nl);
    r->name[nl] = 0;
    off += nl;
    r->code = (unsigned char)fx_buf[off];
    r->ndim = (unsigned char)fx_buf[off + 1];
    off += 2;
    if (r->code > 3 || r->ndim > 6 || off + 8u * (size_t)r->ndim > (size_t)len) return -1;
    r->n = 1;
    for (int k = 0; k < r->ndim; k++) {
      memcpy(&r->shape[k], fx_buf + off, 8);
      off += 8;
      r->n *= r->shape[k];
    }
    const size_t nb = (size_t)r->n * esz[r->code];
    if (off + nb > (size_t)len) return -1;
    void *copy = xmalloc(nb); /* records are packed: copy each to aligned memory */
    memcpy(copy, fx_buf + off, nb);
    r->data = copy;
    off += nb;
  }
  return 0;
}

static void oracle_case(const char *pre) {
  const int32_t *dm = fxp(pre, "dims", 3);
  const int32_t H = dm[0], HV = dm[1], K = dm[2], V = dm[3], W = dm[4], N = dm[5], T = dm[6], P = dm[7], lb = dm[8];
  const int32_t *cu = fxp(pre, "cu", 3), *has32 = fxp(pre, "has_state", 3);
  const float lower = *(const float *)fxp(pre, "lower_bound", 1), eps = *(const float *)fxp(pre, "norm_eps", 1);
  const dsp_bf16 *proj = fxp(pre, "proj", 2), *conv0 = fxp(pre, "conv0", 2), *conv_py = fxp(pre, "conv", 2);
  const dsp_bf16 *convst = fxp(pre, "convst", 2);
  const float *conv_w = fxp(pre, "conv_w", 1), *S0 = fxp(pre, "S0", 1), *A_log = fxp(pre, "A_log", 1);
  const float *dt_bias = fxp(pre, "dt_bias", 1), *onorm = fxp(pre, "o_norm", 1);
  const float *g32 = fxp(pre, "g32", 1), *b32 = fxp(pre, "beta32", 1);
  const double *conv64 = fxp(pre, "conv64", 0), *g64 = fxp(pre, "g64", 0), *beta64 = fxp(pre, "beta64", 0);
  const double *o64 = fxp(pre, "o64", 0), *S64 = fxp(pre, "S64", 0), *norm64 = fxp(pre, "norm64", 0);
  const double *e2e64 = fxp(pre, "e2e64", 0);
  const dsp_kda_dims d = {H, HV, K, V};
  const int32_t D = 2 * H * K + HV * V, offf = D, offb = D + HV * K, offz = D + HV * K + HV;
  const int64_t nS = (int64_t)HV * K * V, SS = (int64_t)(W - 1) * D;
  print_message("  oracle case %s H%d HV%d K%d V%d, %d sequences, %s gate\n", pre, H, HV, K, V, N, lb ? "lower-bound" : "softplus");
  assert_true(N >= 1 && N <= 8 && T >= 1);
  uint8_t has[8];
  int32_t slots[8];
  for (int n = 0; n < N && n < 8; n++) {
    has[n] = (uint8_t)has32[n];
    slots[n] = N - 1 - n;
  }
  dsp_kda_gate_cfg gc = {lb ? DSP_KDA_GATE_LOWER_BOUND : DSP_KDA_GATE_SOFTPLUS, lower};
  dsp_kda_conv_dims cd = {D, W};
  /* pools, the slot of sequence n holding its caches */
  dsp_bf16 *cpool = xmalloc(sizeof(dsp_bf16) * (size_t)(N * SS));
  float *spool = xmalloc(sizeof(float) * (size_t)(N * nS));
  dsp_bf16 *y = xmalloc(sizeof(dsp_bf16) * (size_t)T * D), *o = xmalloc(sizeof(dsp_bf16) * (size_t)T * HV * V);
  dsp_bf16 *yn = xmalloc(sizeof(dsp_bf16) * (size_t)T * HV * V);
  float *g = xmalloc(sizeof(float) * (size_t)T * HV * K), *beta = xmalloc(sizeof(float) * (size_t)T * HV);
  float *tmp = xmalloc(sizeof(float) * (size_t)((int64_t)T * D + N * nS));
  size_t nws = dsp_kda_chunked_workspace_size(&d, NULL, 0);
  if (dsp_kda_recurrent_workspace_size(&d, 0) > nws) nws = dsp_kda_recurrent_workspace_size(&d, 0);
  void *ws = xmalloc(nws);
  dsp_kda_seqs s = {N, cu, slots, has, 1, NULL};
  dsp_kda_conv_state cs = {cpool, SS, N};
  dsp_kda_state st = {spool, nS, N};
#define LOAD_POOLS()                                                                                   \
  for (int n = 0; n < N; n++) {                                                                         \
    memcpy(cpool + slots[n] * SS, conv0 + n * SS, sizeof(dsp_bf16) * (size_t)SS);                      \
    memcpy(spool + slots[n] * nS, S0 + n * nS, sizeof(float) * (size_t)nS);                            \
  }

  /* 1. the conv over q|k|v read in place from the merged projection rows */
  LOAD_POOLS();
  assert_int_equal(dsp_kda_conv(&cd, &s, proj, P, conv_w, NULL, &cs, y, D), DSP_OK);
  for (int64_t i = 0; i < (int64_t)T * D; i++) tmp[i] = dsp_bf16_to_f32(y[i]);
  check_out("oracle conv", tmp, conv64, (int64_t)T * D);
  for (int n = 0; n < N; n++) assert_memory_equal(cpool + slots[n] * SS, convst + n * SS, sizeof(dsp_bf16) * (size_t)SS);
  /* 2. gate and beta from their column blocks */
  assert_int_equal(dsp_kda_gate(T, HV, K, (dsp_kda_in_bf16){proj + offf, P, K}, A_log, dt_bias, &gc, g), DSP_OK);
  assert_int_equal(dsp_kda_beta(T, HV, proj + offb, P, 1, beta), DSP_OK);
  double wg = 0, wb = 0;
  for (int64_t i = 0; i < (int64_t)T * HV * K; i++) wg = fmax(wg, fabs(g[i] - g64[i]) / fmax(fabs(g64[i]), 1.0));
  for (int64_t i = 0; i < (int64_t)T * HV; i++) wb = fmax(wb, fabs(beta[i] - beta64[i]) / beta64[i]);
  double gmin = 0, gmed = 0;
  for (int64_t i = 0; i < (int64_t)T * HV * K; i++) gmin = fmin(gmin, g64[i]), gmed += g64[i];
  print_message("    %-34s g max rel %.2e, beta max rel %.2e (g64 min %.3g, mean %.3g)\n", "oracle gate, beta", wg, wb, gmin,
                gmed / ((double)T * HV * K));
  assert_true(wg <= TOL_GATE_REL && wb <= TOL_GATE_REL);
  /* 3. both forms from the oracle's own conv output, g and beta */
  for (int form = 0; form < 2; form++) {
    LOAD_POOLS();
    dsp_kda_io io = {{conv_py, D, K}, {conv_py + H * K, D, K}, {conv_py + 2 * H * K, D, V}, g32, b32, {o, HV * V, V}};
    assert_int_equal(form ? dsp_kda_chunked(&d, NULL, &s, &io, &st, ws, nws) : dsp_kda_recurrent(&d, NULL, &s, &io, &st, ws, nws),
                     DSP_OK);
    for (int64_t i = 0; i < (int64_t)T * HV * V; i++) tmp[i] = dsp_bf16_to_f32(o[i]);
    check_out(form ? "oracle chunked" : "oracle recurrent", tmp, o64, (int64_t)T * HV * V);
    for (int n = 0; n < N; n++) memcpy(tmp + n * nS, spool + slots[n] * nS, sizeof(float) * (size_t)nS);
    check_state(form ? "oracle chunked" : "oracle recurrent", tmp, S64, N * nS);
  }
  /* 4. the norm of the oracle's rounded o, gate z read in place */
  for (int64_t i = 0; i < (int64_t)T * HV * V; i++) o[i] = dsp_f32_to_bf16((float)o64[i]);
  assert_int_equal(dsp_kda_gated_rmsnorm(T, HV, V, (dsp_kda_in_bf16){o, HV * V, V}, (dsp_kda_in_bf16){proj + offz, P, V},
                                         onorm, eps, (dsp_kda_out_bf16){yn, HV * V, V}),
                   DSP_OK);
  for (int64_t i = 0; i < (int64_t)T * HV * V; i++) tmp[i] = dsp_bf16_to_f32(yn[i]);
  check_out("oracle gated rmsnorm", tmp, norm64, (int64_t)T * HV * V);
  /* 5. the whole chain from the projections; then the gate applied twice, or in
   * the other form, must fail where the single gate passes */
  double e2e[3];
  for (int variant = 0; variant < 3; variant++) {
    LOAD_POOLS();
    assert_int_equal(dsp_kda_conv(&cd, &s, proj, P, conv_w, NULL, &cs, y, D), DSP_OK);
    dsp_kda_gate_cfg gv = gc;
    if (variant == 2) {
      gv.form = lb ? DSP_KDA_GATE_SOFTPLUS : DSP_KDA_GATE_LOWER_BOUND;
      gv.lower_bound = -5.0f;
    }
    assert_int_equal(dsp_kda_gate(T, HV, K, (dsp_kda_in_bf16){proj + offf, P, K}, A_log, dt_bias, &gv, g), DSP_OK);
    if (variant == 1) {
      dsp_bf16 *gb = xmalloc(sizeof(dsp_bf16) * (size_t)T * HV * K);
      for (int64_t i = 0; i < (int64_t)T * HV * K; i++) gb[i] = dsp_f32_to_bf16(g[i]);
      assert_int_equal(dsp_kda_gate(T, HV, K, (dsp_kda_in_bf16){gb, HV * K, K}, A_log, dt_bias, &gc, g), DSP_OK);
      free(gb);
    }
    assert_int_equal(dsp_kda_beta(T, HV, proj + offb, P, 1, beta), DSP_OK);
    dsp_kda_io io = {{y, D, K}, {y + H * K, D, K}, {y + 2 * H * K, D, V}, g, beta, {o, HV * V, V}};
    assert_int_equal(dsp_kda_chunked(&d, NULL, &s, &io, &st, ws, nws), DSP_OK);
    assert_int_equal(dsp_kda_gated_rmsnorm(T, HV, V, (dsp_kda_in_bf16){o, HV * V, V}, (dsp_kda_in_bf16){proj + offz, P, V},
                                           onorm, eps, (dsp_kda_out_bf16){o, HV * V, V}),
                     DSP_OK);
    for (int64_t i = 0; i < (int64_t)T * HV * V; i++) tmp[i] = dsp_bf16_to_f32(o[i]);
    e2e[variant] = compare(tmp, e2e64, (int64_t)T * HV * V, 1).rms;
  }
  print_message("    %-34s rms %.2e (gate twice %.2e, other form %.2e)\n", "oracle layer chain", e2e[0], e2e[1], e2e[2]);
  assert_true(e2e[0] <= TOL_E2E_RMS);
  assert_true(e2e[1] > 10 * TOL_E2E_RMS && e2e[2] > 10 * TOL_E2E_RMS);
#undef LOAD_POOLS
  free(cpool);
  free(spool);
  free(y);
  free(o);
  free(yn);
  free(g);
  free(beta);
  free(tmp);
  free(ws);
}

static const char *oracle_script;
static int oracle_explicit;

static void test_oracle_layer(void **st) {
  (void)st;
  if (!oracle_script || access(oracle_script, R_OK) != 0) {
    if (oracle_explicit) fail_msg("oracle script %s not readable", oracle_script ? oracle_script : "(null)");
    print_message("    no oracle script (pass tests/oracle/kda_ref.py as argv[1]): skipped\n");
    skip();
  }
  char path[] = "/tmp/dspark_kda_fixture_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "python3 '%s' --emit '%s'", oracle_script, path);
  int rc = system(cmd);
  if (rc != 0) {
    unlink(path);
    fail_msg("'%s' failed (%d)", cmd, rc);
  }
  int ok = fx_load(path);
  unlink(path);
  assert_int_equal(ok, 0);
  oracle_case("A."); /* softplus gate, K 64 */
  oracle_case("B."); /* lower-bound gate, K 128, GVA */
  oracle_case("C."); /* mild softplus gate (g median -3.1e-3), K 128, 150 tokens */
  oracle_case("D."); /* strong lower-bound gate (most g at -5), K 64, GVA, 133 tokens */
  oracle_case("E."); /* strong softplus gate (g median -16, down to -72), K 64, 200 tokens */
  for (int i = 0; i < fx_n; i++) free((void *)fx[i].data);
  free(fx_buf);
  fx_buf = NULL;
  fx_n = 0;
}

static int report(void **st) {
  (void)st;
  print_message("kda: worst state rms %.2e (tol %.0e), out excess %.2e (tol %.0e), out rms %.2e (tol %.0e), "
                "chunked-vs-recurrent state rms %.2e\n",
                worst_state_rms, TOL_STATE_RMS, worst_out_excess, TOL_OUT_EXCESS, worst_out_rms, TOL_OUT_RMS,
                worst_chunk_vs_rec);
  return 0;
}

int main(int argc, char **argv) {
  oracle_script = argc > 1 ? argv[1] : getenv("DSPARK_KDA_ORACLE");
  oracle_explicit = oracle_script != NULL;
  if (!oracle_script) oracle_script = "tests/oracle/kda_ref.py";
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gate_forms),          cmocka_unit_test(test_beta_strided),
      cmocka_unit_test(test_gate_once),           cmocka_unit_test(test_norm_strided),
      cmocka_unit_test(test_conv_prefill_ref),    cmocka_unit_test(test_conv_decode_verify), cmocka_unit_test(test_conv_isa), cmocka_unit_test(test_gate_isa),
      cmocka_unit_test(test_recurrent_ref),       cmocka_unit_test(test_recurrent_isa),       cmocka_unit_test(test_chunked_ref),
      cmocka_unit_test(test_chunked_vs_recurrent), cmocka_unit_test(test_value_tile),
      cmocka_unit_test(test_varlen_equals_alone), cmocka_unit_test(test_prefill_then_decode),
      cmocka_unit_test(test_verify_accept),       cmocka_unit_test(test_padding_and_fresh_state),
      cmocka_unit_test(test_bad_arguments),       cmocka_unit_test(test_oracle_layer),
  };
  return cmocka_run_group_tests(tests, NULL, report);
}
