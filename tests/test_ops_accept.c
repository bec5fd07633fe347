/* dsp_op_accept (speculative sampling's acceptance) against the contract of
 * docs/CONTRACTS.md ("Verification"), written here: p and q rows over a
 * temperature, each draft accepted while u x q(d) < p(d), the residual draw
 * over chunked sums. The kernels' expf (kernels/cpu/expf.h, checked against
 * libm by test_cpu_expf) is the one primitive taken from the library. The
 * contract fixes every bit, so results are compared exactly: the CPU's and
 * CUDA's against this reference, and CUDA's against the CPU's. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/ops.h"
#include "kernels/cpu/expf.h"
#include "test_ops.h"

enum { CHUNK = 1024 };

static double ref_uniform(uint64_t seed, int64_t pos, uint32_t purpose) {
  return ((double)ref_philox0(seed, (uint64_t)purpose | (1ull << 32), (uint64_t)pos) + 0.5) / 4294967296.0;
}

/* e_v = expf(fp32(l_v) / T - m) and z = eight partial sums over v mod 8, added in order */
static double ref_row(const uint16_t *l, int64_t V, float T, float *e) {
  float m = -INFINITY;
  for (int64_t v = 0; v < V; v++) {
    e[v] = bf(l[v]) / T;
    if (e[v] > m) m = e[v];
  }
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, z = 0.0;
  for (int64_t v = 0; v < V; v++) {
    e[v] = dsp_cpu_expf(e[v] - m);
    s[v % 8] += (double)e[v];
  }
  for (int k = 0; k < 8; k++) z += s[k];
  return z;
}

static double ref_mass(const double *w, int64_t V, double *cs) {
  double mass = 0.0;
  for (int64_t c = 0; c * CHUNK < V; c++) {
    cs[c] = 0.0;
    for (int64_t v = c * CHUNK; v < V && v < (c + 1) * CHUNK; v++) cs[c] += w[v];
    mass += cs[c];
  }
  return mass;
}

static int32_t ref_draw(const uint16_t *lp, const uint16_t *lq, int64_t V, float T, double u) {
  float *ep = malloc((size_t)V * 4), *eq = malloc((size_t)V * 4);
  double *w = malloc((size_t)V * 8), *cs = malloc((size_t)(V / CHUNK + 1) * 8);
  assert_true(ep && eq && w && cs);
  const double zp = ref_row(lp, V, T, ep), zq = ref_row(lq, V, T, eq);
  for (int64_t v = 0; v < V; v++) {
    const double d = (double)ep[v] / zp - (double)eq[v] / zq;
    w[v] = d > 0.0 ? d : 0.0;
  }
  double mass = ref_mass(w, V, cs);
  if (!(mass > 1e-12)) {
    for (int64_t v = 0; v < V; v++) w[v] = (double)ep[v] / zp;
    mass = ref_mass(w, V, cs);
  }
  const double target = u * mass;
  int32_t got = -1;
  double R = 0.0;
  for (int64_t c = 0; got < 0 && c * CHUNK < V; c++) {
    if (R + cs[c] > target) {
      double P = 0.0;
      for (int64_t v = c * CHUNK; got < 0 && v < V && v < (c + 1) * CHUNK; v++) {
        P += w[v];
        if (R + P > target && w[v] > 0.0) got = (int32_t)v;
      }
      break;
    }
    R += cs[c];
  }
  for (int64_t v = V - 1; got < 0 && v >= 0; v--)
    if (w[v] > 0.0) got = (int32_t)v;
  free(ep), free(eq), free(w), free(cs);
  return got < 0 ? 0 : got;
}

typedef struct {
  int64_t V;
  int32_t nseq, G;
  float T, scale, noise; /* logits scale * U(-1, 1); q = p + noise * U(-1, 1) */
  int forced;            /* every branch by construction, whatever the random stream gives (below) */
} acc_case;

/* Runs the op on backend be over host rows tl [rows][tld], ql [rows][qld]. */
static void run_accept(dsp_backend *be, const acc_case *c, const uint16_t *tl, size_t tbytes, const uint16_t *ql,
                       size_t qbytes, dsp_op_accept_args *a) {
  void *dt = dev_put(be, tl, tbytes), *dq = dev_put(be, ql, qbytes);
  size_t ws = 0, hs = 0;
  assert_int_equal(dsp_op_accept_workspace(be, c->V, c->nseq, c->G, &ws, &hs), DSP_OK);
  void *dw = dev_put(be, NULL, ws), *dh = NULL;
  if (hs) assert_int_equal(dsp_op_host_alloc(be, 0, hs, &dh), DSP_OK);
  a->tlog = dt, a->qlog = dq, a->ws = dw, a->ws_bytes = ws, a->hs = dh, a->hs_bytes = hs;
  if (dsp_op_accept(be, 0, a) != DSP_OK) fail_msg("accept: %s", dsp_error_message());
  dsp_op_release(be, 0, dt), dsp_op_release(be, 0, dq), dsp_op_release(be, 0, dw);
  if (dh) dsp_op_host_release(be, 0, dh);
}

void t_accept(void **st) {
  (void)st;
  static const acc_case cases[] = {
      {3001, 3, 4, 0.8f, 4.0f, 0.3f, 0}, {20000, 2, 3, 1.0f, 6.0f, 0.2f, 0}, {1024, 5, 2, 0.5f, 3.0f, 1.0f, 0},
      {8199, 2, 6, 1.7f, 8.0f, 0.1f, 0}, {151936, 2, 3, 0.8f, 10.0f, 0.5f, 0}, {4096, 3, 3, 1.0f, 4.0f, 0.3f, 1},
  };
  long accepted = 0, drawn = 0, full = 0;
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const acc_case *c = &cases[ci];
    const int64_t V = c->V, S = c->nseq, G = c->G, tld = V + 5, qld = V + 3;
    const size_t tbytes = (size_t)(S * (G + 1) * tld) * 2, qbytes = (size_t)(G * S * qld) * 2;
    uint16_t *tl = malloc(tbytes), *ql = malloc(qbytes);
    int64_t *toff = malloc((size_t)(S * G) * 8), *qoff = malloc((size_t)(S * G) * 8);
    int64_t *drafts = malloc((size_t)(S * G) * 8), *pos = malloc((size_t)S * 8);
    int32_t *nd = malloc((size_t)S * 4), *acc = malloc((size_t)S * 4), *res = malloc((size_t)S * 4);
    int32_t *acc_c = malloc((size_t)S * 4), *res_c = malloc((size_t)S * 4);
    float *temp = malloc((size_t)S * 4);
    uint64_t *seed = malloc((size_t)S * 8);
    assert_true(tl && ql && toff && qoff && drafts && pos && nd && acc && res && acc_c && res_c && temp && seed);
    memset(tl, 0xff, tbytes), memset(ql, 0xff, qbytes); /* NaN between the rows: read only what is named */
    for (int64_t r = 0; r < S; r++) {
      nd[r] = r == 1 ? 0 : (int32_t)(G - (r % 2)); /* a sequence without drafts, and short ones */
      pos[r] = 17 + (int64_t)(rnd() % 5000);
      seed[r] = rnd();
      temp[r] = c->T;
      for (int64_t i = 0; i < G; i++) {
        uint16_t *p = tl + (r * (G + 1) + i) * tld, *q = ql + (i * S + r) * qld;
        toff[r * G + i] = (r * (G + 1) + i) * tld;
        qoff[r * G + i] = (i * S + r) * qld;
        int64_t best = 0;
        for (int64_t v = 0; v < V; v++) {
          const float x = c->scale * bf(rand_val());
          p[v] = f32_to_bf(x);
          q[v] = f32_to_bf(x + c->noise * bf(rand_val()));
          if (bf(q[v]) > bf(q[best])) best = v;
        }
        drafts[r * G + i] = rnd() % 3 ? best : (int64_t)(rnd() % (uint64_t)V); /* q's likeliest, or any id */
        /* forced: sequence 0 has q = p (every draft accepted); sequence 2's slot 0 too, then at slot 1 the
           draft is q's likeliest by far and p's least likely (rejected but for a uniform below 1e-6) */
        if (c->forced && (r == 0 || (r == 2 && i == 0))) memcpy(q, p, (size_t)V * 2);
        if (c->forced && r == 2 && i == 1) {
          drafts[r * G + i] = best;
          p[best] = f32_to_bf(-4.0f * c->scale), q[best] = f32_to_bf(4.0f * c->scale);
        }
      }
    }
    /* a NaN logit in the first case's first p row: that slot rejects, its residual is all NaN or zero, the
       fallback to p is NaN too, and the draw's last resort (the last id of w > 0; none: id 0) decides */
    if (ci == 0) tl[toff[0] + 7] = 0x7fc0;
    dsp_op_accept_args a = {.vocab = V, .nseq = (int32_t)S, .gamma = (int32_t)G, .toff = toff, .qoff = qoff,
                            .drafts = drafts, .pos = pos, .ndraft = nd, .temp = temp, .seed = seed,
                            .accepted = acc, .residual = res};
    run_accept(g_be, c, tl, tbytes, ql, qbytes, &a);
    if (g_cpu) {
      dsp_op_accept_args b = a;
      b.accepted = acc_c, b.residual = res_c;
      run_accept(g_cpu, c, tl, tbytes, ql, qbytes, &b);
    }
    float *e = malloc((size_t)V * 4);
    assert_non_null(e);
    for (int64_t r = 0; r < S; r++) {
      int32_t i = 0, want = -1;
      for (; i < nd[r]; i++) {
        const int64_t j = r * G + i, d = drafts[j];
        const double zp = ref_row(tl + toff[j], V, c->T, e), pd = (double)e[d] / zp;
        const double zq = ref_row(ql + qoff[j], V, c->T, e), qd = (double)e[d] / zq;
        if (!(ref_uniform(seed[r], pos[r] + i, 1) * qd < pd)) break;
      }
      if (i < nd[r])
        want = ref_draw(tl + toff[r * G + i], ql + qoff[r * G + i], V, c->T, ref_uniform(seed[r], pos[r] + i, 2));
      if (acc[r] != i || res[r] != want)
        fail_msg("accept V %lld case %zu sequence %lld: accepted %d, residual %d; the contract's %d, %d", (long long)V,
                 ci, (long long)r, acc[r], res[r], i, want);
      if (c->forced && ((r == 0 && (acc[r] != nd[r] || res[r] != -1)) || (r == 2 && (acc[r] != 1 || res[r] < 0))))
        fail_msg("accept, forced case, sequence %lld: accepted %d, residual %d", (long long)r, acc[r], res[r]);
      if (ci == 0 && r == 0 && (acc[r] != 0 || res[r] != 0))
        fail_msg("accept: a NaN logit in the first p row gave accepted %d, residual %d; expected 0, 0", acc[r], res[r]);
      if (g_cpu && (acc_c[r] != acc[r] || res_c[r] != res[r]))
        fail_msg("accept V %lld sequence %lld: CUDA %d, %d; the CPU %d, %d", (long long)V, (long long)r, acc[r], res[r],
                 acc_c[r], res_c[r]);
      accepted += i, drawn += i < nd[r], full += nd[r] > 0 && i == nd[r];
      g_compared += 2;
    }
    free(e), free(tl), free(ql), free(toff), free(qoff), free(drafts), free(pos), free(nd), free(acc), free(res);
    free(acc_c), free(res_c), free(temp), free(seed);
  }
  /* the inputs must reach every branch: accepted drafts, rejections and full accepts */
  if (!accepted || !drawn || !full)
    fail_msg("accept: the cases accepted %ld drafts, drew %ld residuals, fully accepted %ld times", accepted, drawn, full);
  printf("accept: %ld drafts accepted, %ld residual draws, %ld full accepts, all the contract's\n", accepted, drawn, full);
}

typedef struct {
  dsp_backend *be;
  dsp_op_accept_args a;
} accept_call;
static dsp_status run_accept_call(void *p) {
  accept_call *c = p;
  return dsp_op_accept(c->be, 0, &c->a);
}

/* The op's time at Qwen3's vocabulary and gamma 7 against its floor: every verified slot's p and q rows read
 * once (the kernels read them twice, and a rejected slot's twice more). */
void perf_accept(double bw) {
  printf("%-44s %10s %10s %8s\n", "accept (V 151936, gamma 7)", "ms", "floor ms", "x floor");
  const int64_t V = 151936, G = 7;
  const int32_t batches[] = {1, 32};
  for (size_t bi = 0; bi < 2; bi++) {
    const int32_t S = batches[bi];
    const size_t rows = (size_t)(S * G), bytes = rows * (size_t)V * 2;
    uint16_t *h = malloc(bytes), *hq = malloc(bytes);
    int64_t *toff = malloc(rows * 8), *qoff = malloc(rows * 8), *drafts = malloc(rows * 8), *pos = malloc((size_t)S * 8);
    int32_t *nd = malloc((size_t)S * 4), *acc = malloc((size_t)S * 4), *res = malloc((size_t)S * 4);
    float *temp = malloc((size_t)S * 4);
    uint64_t *seed = malloc((size_t)S * 8);
    assert_true(h && hq && toff && qoff && drafts && pos && nd && acc && res && temp && seed);
    for (size_t i = 0; i < rows * (size_t)V; i++) h[i] = f32_to_bf(8.0f * bf(rand_val())), hq[i] = f32_to_bf(8.0f * bf(rand_val()));
    for (int32_t r = 0; r < S; r++) {
      nd[r] = (int32_t)G, pos[r] = 1024, seed[r] = (uint64_t)r + 1, temp[r] = 0.8f;
      for (int64_t i = 0; i < G; i++) {
        toff[r * G + i] = (r * G + i) * V, qoff[r * G + i] = (i * S + r) * V;
        drafts[r * G + i] = (int64_t)(rnd() % (uint64_t)V);
      }
    }
    accept_call c = {.be = g_be};
    c.a = (dsp_op_accept_args){.vocab = V, .nseq = S, .gamma = (int32_t)G, .toff = toff, .qoff = qoff,
                               .drafts = drafts, .pos = pos, .ndraft = nd, .temp = temp, .seed = seed,
                               .accepted = acc, .residual = res};
    void *dt = dev_put(g_be, h, bytes), *dq = dev_put(g_be, hq, bytes); /* p and q apart: rejections and draws */
    size_t ws = 0, hs = 0;
    assert_int_equal(dsp_op_accept_workspace(g_be, V, S, (int32_t)G, &ws, &hs), DSP_OK);
    void *dw = dev_put(g_be, NULL, ws), *dh = NULL;
    if (hs) assert_int_equal(dsp_op_host_alloc(g_be, 0, hs, &dh), DSP_OK);
    c.a.tlog = dt, c.a.qlog = dq, c.a.ws = dw, c.a.ws_bytes = ws, c.a.hs = dh, c.a.hs_bytes = hs;
    const double t = median_time(run_accept_call, &c, g_cuda ? 20 : 2), floor = 2.0 * (double)bytes / bw;
    printf("%-44s %10.4f %10.4f %8.2f\n", S == 1 ? "accept, batch 1" : "accept, batch 32", t * 1e3, floor * 1e3,
           t / floor);
    dsp_op_release(g_be, 0, dt), dsp_op_release(g_be, 0, dq), dsp_op_release(g_be, 0, dw);
    if (dh) dsp_op_host_release(g_be, 0, dh);
    free(h), free(hq), free(toff), free(qoff), free(drafts), free(pos), free(nd), free(acc), free(res), free(temp), free(seed);
  }
}
