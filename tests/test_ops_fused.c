/* The op-parity harness's fused operations: add_rmsnorm and attn_in against
 * the operations they fuse, called one after another on the same backend.
 * The contract is bit-identity (NaN by NaN-ness is not needed: the inputs are
 * finite), and the residual sum against this file's own fp32 add. On the CPU
 * the fused calls are the composition itself (the backend has no fused
 * form), so there the test checks the plumbing and the argument checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/ops.h"
#include "dspark.h"
#include "test_ops.h"

/* Its own stream of values, so that adding these cases leaves the inputs of the harness's later tests (drawn
   from the shared stream) as they were. */
static uint64_t g_fz = 0x2545F4914F6CDD1Dull;
static uint16_t fz_val(void) {
  g_fz ^= g_fz << 13, g_fz ^= g_fz >> 7, g_fz ^= g_fz << 17;
  return f32_to_bf((float)((double)(g_fz >> 11) / 9007199254740992.0 * 2 - 1));
}

static dsp_tensor vec(void *d, int64_t n) {
  const int64_t sh[1] = {n};
  return dsp_tensor_view(d, DSP_BF16, 1, sh);
}

static dsp_tensor rows2(void *d, int64_t r, int64_t c, int64_t ld) {
  dsp_tensor v = dsp_tensor_2d(d, DSP_BF16, r, c);
  v.stride[0] = ld;
  return v;
}

static long count_diff(const uint16_t *a, const uint16_t *b, size_t n) {
  long d = 0;
  for (size_t i = 0; i < n; i++) d += a[i] != b[i];
  return d;
}

/* x' and h of one add_rmsnorm call (fused 1) or of add then rmsnorm (fused 0). */
static void run_add_norm(int fused, const uint16_t *x, const uint16_t *y, const uint16_t *w, int64_t M, int64_t D,
                         int64_t ld, uint16_t *xo, uint16_t *ho) {
  const size_t bytes = (size_t)(M * ld) * 2;
  void *dx = dev_put(g_be, x, bytes), *dy = dev_put(g_be, y, bytes), *dh = dev_put(g_be, y, bytes);
  void *dw = dev_put(g_be, w, (size_t)D * 2);
  dsp_tensor xv = rows2(dx, M, D, ld), yv = rows2(dy, M, D, ld), hv = rows2(dh, M, D, ld), wv = vec(dw, D);
  dsp_status s = fused ? dsp_op_add_rmsnorm(g_be, 0, &xv, &yv, &wv, 1e-6f, &hv) : dsp_op_add(g_be, 0, &xv, &yv, &xv);
  if (s == DSP_OK && !fused) s = dsp_op_rmsnorm(g_be, 0, &xv, &wv, 1e-6f, &hv);
  if (s != DSP_OK) fail_msg("add_rmsnorm (fused %d): %s", fused, dsp_error_message());
  dev_get(g_be, xo, dx, bytes);
  dev_get(g_be, ho, dh, bytes);
  void *all[] = {dx, dy, dh, dw};
  for (int i = 0; i < 4; i++) dsp_op_release(g_be, 0, all[i]);
}

static void t_add_rmsnorm(void) {
  /* CUDA's paths: one warp per row holding its values (D <= 256) or looping (300), one block per row holding
     (1000 is below the block width, 1024 .. 8192) or looping (8448); padded rows stay */
  const struct { int64_t m, d, ld; } cs[] = {{1, 4096, 4096}, {5, 4096, 4104}, {3, 1000, 1000}, {7, 1536, 1536},
                                             {4, 64, 72},     {2, 8448, 8448}, {6, 300, 312},   {2, 8192, 8200}};
  long bad = 0;
  for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
    const int64_t M = cs[c].m, D = cs[c].d, ld = cs[c].ld;
    const size_t n = (size_t)(M * ld);
    uint16_t *x = malloc(n * 2), *y = malloc(n * 2), *w = malloc((size_t)D * 2);
    uint16_t *xf = malloc(n * 2), *hf = malloc(n * 2), *xc = malloc(n * 2), *hc = malloc(n * 2);
    for (size_t i = 0; i < n; i++) x[i] = fz_val(), y[i] = fz_val();
    for (int64_t i = 0; i < D; i++) w[i] = fz_val();
    run_add_norm(1, x, y, w, M, D, ld, xf, hf);
    run_add_norm(0, x, y, w, M, D, ld, xc, hc);
    long sum_bad = 0;
    for (int64_t r = 0; r < M; r++)
      for (int64_t d = 0; d < ld; d++) {
        const size_t i = (size_t)(r * ld + d);
        sum_bad += xf[i] != (d < D ? f32_to_bf(bf(x[i]) + bf(y[i])) : x[i]);
      }
    const long dx = count_diff(xf, xc, n), dh = count_diff(hf, hc, n);
    if (dx || dh || sum_bad)
      print_message("  add_rmsnorm [%lld, %lld]: %ld sums and %ld normed values differ from add then rmsnorm, "
                    "%ld sums from bf16(x + y)\n", (long long)M, (long long)D, dx, dh, sum_bad);
    bad += dx + dh + sum_bad;
    g_compared += (long long)(3 * n);
    free(x), free(y), free(w), free(xf), free(hf), free(xc), free(hc);
  }
  if (bad) fail_msg("add_rmsnorm: %ld values differ", bad);
}

typedef struct {
  int64_t T, hq, hk, D, ld, N;
} ai_case;

/* The qkv rows and both caches after one attn_in call (fused 1) or the six operations it fuses (fused 0). */
static void run_attn_in(int fused, const ai_case *c, const uint16_t *qkv, const uint16_t *qn, const uint16_t *kn,
                        const int32_t *pos, const uint16_t *cs, const uint16_t *sn, int64_t P, const int64_t *idx,
                        const uint16_t *cache0, uint16_t *qkv_out, uint16_t *kc_out, uint16_t *vc_out) {
  const int64_t T = c->T, D = c->D, W = c->hk * D;
  const size_t qb = (size_t)(T * c->ld) * 2, cb = (size_t)(c->N * W) * 2, tb = (size_t)(P * D / 2) * 2;
  void *dq = dev_put(g_be, qkv, qb), *dkc = dev_put(g_be, cache0, cb), *dvc = dev_put(g_be, cache0, cb);
  void *dqn = dev_put(g_be, qn, (size_t)D * 2), *dkn = dev_put(g_be, kn, (size_t)D * 2);
  void *dp = dev_put(g_be, pos, (size_t)T * 4), *dc = dev_put(g_be, cs, tb), *ds = dev_put(g_be, sn, tb);
  void *di = dev_put(g_be, idx, (size_t)T * 8);
  dsp_tensor q = {.data = dq, .dtype = DSP_BF16, .ndim = 3, .shape = {T, c->hq, D}, .stride = {c->ld, D, 1}};
  dsp_tensor k = q;
  k.data = (uint16_t *)dq + c->hq * D, k.shape[1] = c->hk;
  dsp_tensor v = rows2((uint16_t *)dq + (c->hq + c->hk) * D, T, W, c->ld), kf = rows2(k.data, T, W, c->ld);
  dsp_tensor kc = rows2(dkc, c->N, W, W), vc = rows2(dvc, c->N, W, W), qnv = vec(dqn, D), knv = vec(dkn, D);
  dsp_tensor cv = dsp_tensor_2d(dc, DSP_BF16, P, D / 2), sv = dsp_tensor_2d(ds, DSP_BF16, P, D / 2);
  dsp_status s;
  if (fused) {
    const dsp_op_attn_in_args a = {.q = &q, .k = &k, .v = &v, .q_norm = &qnv, .k_norm = &knv, .eps = 1e-6f,
                                   .pos = dp, .cos = &cv, .sin = &sv, .idx = di, .k_cache = &kc, .v_cache = &vc};
    s = dsp_op_attn_in(g_be, 0, &a);
  } else {
    s = dsp_op_rmsnorm(g_be, 0, &q, &qnv, 1e-6f, &q);
    if (s == DSP_OK) s = dsp_op_rmsnorm(g_be, 0, &k, &knv, 1e-6f, &k);
    if (s == DSP_OK) s = dsp_op_rope(g_be, 0, &q, dp, &cv, &sv);
    if (s == DSP_OK) s = dsp_op_rope(g_be, 0, &k, dp, &cv, &sv);
    if (s == DSP_OK) s = dsp_op_scatter_rows(g_be, 0, &kf, di, &kc);
    if (s == DSP_OK) s = dsp_op_scatter_rows(g_be, 0, &v, di, &vc);
  }
  if (s != DSP_OK) fail_msg("attn_in (fused %d): %s", fused, dsp_error_message());
  dev_get(g_be, qkv_out, dq, qb);
  dev_get(g_be, kc_out, dkc, cb);
  dev_get(g_be, vc_out, dvc, cb);
  void *all[] = {dq, dkc, dvc, dqn, dkn, dp, dc, ds, di};
  for (int i = 0; i < 9; i++) dsp_op_release(g_be, 0, all[i]);
}

static void t_attn_in(void) {
  /* head dims the fused CUDA kernel takes (32: its RoPE pairs in two lanes; 64, 128, 256) and one it leaves to
     the composition (80); a decode row, a verify's rows, GQA 4:1, 2:1 and 1:1, rows padded past the projection */
  const ai_case cs[] = {{1, 32, 8, 128, 6144, 9}, {9, 8, 2, 128, 1544, 40}, {5, 3, 3, 64, 600, 11},
                        {3, 4, 1, 256, 1544, 7},  {4, 6, 2, 80, 800, 13},   {8, 8, 4, 32, 520, 17}};
  const int64_t P = 50;
  long bad = 0;
  for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
    const ai_case *k = &cs[c];
    const int64_t T = k->T, D = k->D, W = k->hk * D, hf = D / 2;
    const size_t qn_ = (size_t)(T * k->ld), cn = (size_t)(k->N * W);
    uint16_t *qkv = malloc(qn_ * 2), *qo = malloc(qn_ * 2), *qc = malloc(qn_ * 2);
    uint16_t *cache0 = malloc(cn * 2), *kf = malloc(cn * 2), *vf = malloc(cn * 2), *kcc = malloc(cn * 2),
             *vcc = malloc(cn * 2);
    uint16_t *qn = malloc((size_t)D * 2), *kn = malloc((size_t)D * 2), *co = malloc((size_t)(P * hf) * 2),
             *si = malloc((size_t)(P * hf) * 2);
    int32_t *pos = malloc((size_t)T * 4);
    int64_t *idx = malloc((size_t)T * 8);
    for (size_t i = 0; i < qn_; i++) qkv[i] = fz_val();
    for (size_t i = 0; i < cn; i++) cache0[i] = 0xbeef; /* rows not written must stay */
    for (int64_t i = 0; i < D; i++) qn[i] = fz_val(), kn[i] = fz_val();
    for (int64_t i = 0; i < P * hf; i++) co[i] = fz_val(), si[i] = fz_val();
    /* distinct cache rows (3 is prime to every N here, and T <= N) */
    for (int64_t t = 0; t < T; t++) pos[t] = (int32_t)((t * 13 + 7) % P), idx[t] = (t * 3 + 1) % k->N;
    run_attn_in(1, k, qkv, qn, kn, pos, co, si, P, idx, cache0, qo, kf, vf);
    run_attn_in(0, k, qkv, qn, kn, pos, co, si, P, idx, cache0, qc, kcc, vcc);
    const long dq = count_diff(qo, qc, qn_), dk = count_diff(kf, kcc, cn), dv = count_diff(vf, vcc, cn);
    long moved = 0; /* the composition did change q: the comparison is not of two untouched buffers */
    for (size_t i = 0; i < qn_; i++) moved += qc[i] != qkv[i];
    if (dq || dk || dv || !moved)
      print_message("  attn_in T %lld, %lld/%lld heads of %lld: %ld q/k/v values, %ld k cache and %ld v cache "
                    "values differ from the six operations (%ld changed)\n", (long long)T, (long long)k->hq,
                    (long long)k->hk, (long long)D, dq, dk, dv, moved);
    bad += dq + dk + dv + !moved;
    g_compared += (long long)(qn_ + 2 * cn);
    free(qkv), free(qo), free(qc), free(cache0), free(kf), free(vf), free(kcc), free(vcc);
    free(qn), free(kn), free(co), free(si), free(pos), free(idx);
  }
  if (bad) fail_msg("attn_in: %ld values differ", bad);
}

void t_fused_layers(void) {
  t_add_rmsnorm();
  t_attn_in();
}
