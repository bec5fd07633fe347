#include "support/layer_time.h"

#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "core/clock.h"
#include "core/status.h"

enum { LT_H = 4096, LT_QKV = 6144, LT_I = 12288, LT_MAXL = 16 };

/* Columns c0 .. c0 + n - 1 of a 2-D view (rows keep their stride). */
static dsp_tensor lt_cols(dsp_tensor t, int64_t c0, int64_t n) {
  t.data = (char *)t.data + c0 * (int64_t)dsp_dtype_size(t.dtype);
  t.shape[1] = n;
  return t;
}

/* bf16 values of one binade 2^(e - 127) with random sign and mantissa: weights at 2^-7 keep a chain of layers near
 * 1 (as the products' bits do not matter here, only that they stay finite). */
static void lt_fill(uint16_t *p, size_t n, uint64_t salt, unsigned e) {
  for (size_t i = 0; i < n; i++) {
    uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ salt;
    h ^= h >> 31, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 29;
    p[i] = (uint16_t)(((h & 1) << 15) | (e << 7) | ((h >> 16) & 0x7F));
  }
}

typedef struct {
  dsp_backend *be;
  int layers;
  dsp_weight *w[LT_MAXL][4]; /* o, gate/up, down, qkv */
  dsp_tensor x, h, o, gu, act, qkv, post, in;
  void *mem[8];
  int nmem;
} lt_model;

static void lt_free(lt_model *L) {
  for (int l = 0; l < L->layers; l++)
    for (int j = 0; j < 4; j++)
      if (L->w[l][j]) dsp_op_weight_free(L->be, L->w[l][j]);
  for (int i = 0; i < L->nmem; i++) dsp_op_release(L->be, 0, L->mem[i]);
}

static dsp_status lt_alloc(lt_model *L, dsp_tensor *t, int64_t rows, int64_t cols, const uint16_t *init) {
  void *m = NULL;
  DSP_TRY(dsp_op_alloc(L->be, 0, (size_t)(rows * cols) * 2, &m));
  L->mem[L->nmem++] = m;
  *t = dsp_tensor_2d(m, DSP_BF16, rows, cols);
  return init ? dsp_op_upload(L->be, 0, m, init, (size_t)(rows * cols) * 2) : DSP_OK;
}

/* One layer as the model runs it (full) or its products alone; the next layer's o reads qkv's first H columns
 * in place of the attention's output. */
static dsp_status lt_layer(lt_model *L, int l, int full) {
  dsp_backend *be = L->be;
  dsp_tensor attn = lt_cols(L->qkv, 0, LT_H), x = L->x, h = L->h, o = L->o, gu = L->gu, act = L->act, qkv = L->qkv;
  DSP_TRY(dsp_op_gemm(be, 0, &attn, L->w[l][0], &o));
  if (full) DSP_TRY(dsp_op_add_rmsnorm(be, 0, &x, &o, &L->post, 1e-6f, &h));
  DSP_TRY(dsp_op_gemm(be, 0, full ? &h : &o, L->w[l][1], &gu));
  dsp_tensor g = lt_cols(gu, 0, LT_I), u = lt_cols(gu, LT_I, LT_I);
  if (full) DSP_TRY(dsp_op_silu_mul(be, 0, &g, &u, &act));
  DSP_TRY(dsp_op_gemm(be, 0, full ? &act : &g, L->w[l][2], &o));
  if (full) DSP_TRY(dsp_op_add_rmsnorm(be, 0, &x, &o, &L->in, 1e-6f, &h));
  return dsp_op_gemm(be, 0, full ? &h : &o, L->w[l][3], &qkv);
}

static dsp_status lt_time(lt_model *L, int full, int reps, double *us) {
  dsp_status s = DSP_OK;
  /* once outside the capture, so that whatever an op sets up at its first call is in place */
  for (int l = 0; l < L->layers && s == DSP_OK; l++) s = lt_layer(L, l, full);
  if (s == DSP_OK) s = dsp_op_sync(L->be, 0);
  DSP_TRY(s);
  DSP_TRY(dsp_op_capture_begin(L->be, 0));
  for (int l = 0; l < L->layers && s == DSP_OK; l++) s = lt_layer(L, l, full);
  dsp_op_graph *g = NULL;
  const dsp_status e = dsp_op_capture_end(L->be, 0, &g);
  if (s != DSP_OK && e == DSP_OK) dsp_op_graph_free(L->be, g);
  DSP_TRY(s);
  DSP_TRY(e);
  for (int i = 0; s == DSP_OK && i < 3; i++) s = dsp_op_replay(L->be, 0, g);
  if (s == DSP_OK) s = dsp_op_sync(L->be, 0);
  const double t0 = dsp_now_ms();
  for (int i = 0; s == DSP_OK && i < reps; i++) s = dsp_op_replay(L->be, 0, g);
  if (s == DSP_OK) s = dsp_op_sync(L->be, 0);
  *us = (dsp_now_ms() - t0) * 1e3 / ((double)reps * L->layers);
  dsp_op_graph_free(L->be, g);
  return s;
}

dsp_status dsp_bench_layer_parts(dsp_backend *be, int64_t m, int layers, int reps, dsp_bench_layer_times *t) {
  if (!dsp_op_has_graphs(be)) return dsp_fail(DSP_ERR_UNSUPPORTED, "layer parts: the backend has no graphs");
  if (m < 1 || m > 32 || layers < 1 || layers > LT_MAXL || reps < 1)
    return dsp_fail(DSP_ERR_ARG, "layer parts: 1..32 rows, 1..%d layers, reps >= 1", LT_MAXL);
  const int64_t shp[4][2] = {{LT_H, LT_H}, {2 * LT_I, LT_H}, {LT_H, LT_I}, {LT_QKV, LT_H}};
  lt_model L;
  memset(&L, 0, sizeof L);
  L.be = be, L.layers = layers;
  uint16_t *host = malloc((size_t)(2 * LT_I * LT_H) * 2); /* the largest weight */
  dsp_status s = host ? DSP_OK : dsp_fail(DSP_ERR_NOMEM, "layer parts: out of host memory");
  t->bytes = 0;
  for (int j = 0; j < 4 && s == DSP_OK; j++) {
    const size_t n = (size_t)(shp[j][0] * shp[j][1]);
    lt_fill(host, n, 0x1234u + (uint64_t)j, 120u);
    const dsp_tensor hv = dsp_tensor_2d(host, DSP_BF16, shp[j][0], shp[j][1]);
    for (int l = 0; l < layers && s == DSP_OK; l++) s = dsp_op_weight_create(be, 0, &hv, 0, &L.w[l][j]);
    t->bytes += (double)n * 2.0;
  }
  if (s == DSP_OK) {
    lt_fill(host, (size_t)(32 * LT_I * 2), 0x77u, 127u); /* activations near 1, norm weights too */
    const struct {
      dsp_tensor *t;
      int64_t rows, cols;
    } act[] = {{&L.x, m, LT_H}, {&L.h, m, LT_H},     {&L.o, m, LT_H},  {&L.gu, m, 2 * LT_I},
               {&L.act, m, LT_I}, {&L.qkv, m, LT_QKV}, {&L.post, 1, LT_H}, {&L.in, 1, LT_H}};
    for (size_t i = 0; i < sizeof act / sizeof act[0] && s == DSP_OK; i++)
      s = lt_alloc(&L, act[i].t, act[i].rows, act[i].cols, host);
    L.post = dsp_tensor_view(L.post.data, DSP_BF16, 1, (const int64_t[]){LT_H});
    L.in = dsp_tensor_view(L.in.data, DSP_BF16, 1, (const int64_t[]){LT_H});
  }
  free(host);
  /* alternated, three medians' middle each */
  double f[3] = {0, 0, 0}, p[3] = {0, 0, 0};
  for (int r = 0; r < 3 && s == DSP_OK; r++) {
    s = lt_time(&L, 1, reps, &f[r]);
    if (s == DSP_OK) s = lt_time(&L, 0, reps, &p[r]);
  }
  lt_free(&L);
  DSP_TRY(s);
  for (int i = 0; i < 2; i++)
    for (int j = i + 1; j < 3; j++) {
      if (f[j] < f[i]) { const double x = f[i]; f[i] = f[j]; f[j] = x; }
      if (p[j] < p[i]) { const double x = p[i]; p[i] = p[j]; p[j] = x; }
    }
  t->full_us = f[1], t->products_us = p[1];
  return DSP_OK;
}
