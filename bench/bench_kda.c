/* bench_kda: the KDA op (backend/ops.h, dsp_op_kda) at Kimi-Linear's heads,
 * 32 of 128 x 128 with conv 4: decode at batch B (one token per sequence,
 * the recurrent form) and a chunked prefill of P tokens at batch 1. The batch
 * is staged once; ms per call eagerly and, where the backend has graphs,
 * replayed from a CUDA graph; against the floor: state and activation bytes
 * over the copy rate measured in the same process. The peer is
 * bench/fla_peer_kda.py (flash-linear-attention), run in the same device call.
 *
 * --dump FILE writes a checked case for the peer to compare with: a prefill of
 * 1024 tokens (chunked) from a random state and conv window, then one decode
 * step, their inputs and outputs (y, the state after each call) in one
 * safetensors file; `fla_peer_kda.py --compare FILE` runs fla on the same
 * inputs and prints the differences.
 *
 * usage: bench_kda [--backend cpu|cuda] [--decode 1,32,256] [--prefill 4096,16384]
 *                  [--tile 0|16|32|64] [--reps R] [--dump FILE] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "bench_util.h"
#include "dspark.h"
#include "support/rates.h"
#include "tool_common.h"

#define TRY(x) DSP_BENCH_TRY(x)

enum { H = 32, K = 128, W = 4, HK = H * K, D = 3 * HK, DUMP_T = 1024 };

/* Backend copies of one layer's inputs for T tokens and a pool of S slots. */
typedef struct {
  void *qkv, *f, *b, *z, *y, *cw, *al, *dt, *nw, *st, *cs, *ws, *sg;
  size_t ws_bytes, sg_bytes;
  int64_t T;
  int32_t S;
} kda_bufs;

static void *put(dsp_backend *be, const void *h, size_t n) {
  void *d = NULL;
  TRY(dsp_op_alloc(be, 0, n, &d));
  if (h) TRY(dsp_op_upload(be, 0, d, h, n));
  return d;
}

/* Uniform fp32 values in [lo, hi), a pure function of (seed, index). */
static void fill_f32(float *p, size_t n, uint64_t seed, float lo, float hi) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    p[i] = lo + (hi - lo) * (float)(x >> 40) / 16777216.0f;
  }
}

/* Host inputs: activations of T tokens, the weights, S slots of random states. */
typedef struct {
  uint16_t *qkv, *f, *b, *z, *cs;
  float *cw, *al, *dt, *nw, *st;
} kda_host;

static void host_make(kda_host *h, int64_t T, int32_t S) {
  h->qkv = malloc((size_t)(T * D) * 2), h->f = malloc((size_t)(T * HK) * 2);
  h->b = malloc((size_t)(T * H) * 2), h->z = malloc((size_t)(T * HK) * 2);
  h->cs = malloc((size_t)S * (W - 1) * D * 2);
  h->cw = malloc((size_t)D * W * 4), h->al = malloc(H * 4), h->dt = malloc(HK * 4), h->nw = malloc(K * 4);
  h->st = malloc((size_t)S * H * K * K * 4);
  if (!h->qkv || !h->f || !h->b || !h->z || !h->cs || !h->cw || !h->al || !h->dt || !h->nw || !h->st) {
    fprintf(stderr, "bench_kda: out of host memory\n");
    exit(1);
  }
  fill(h->qkv, (size_t)(T * D), 1, 1.0f); /* Kimi-like ranges: mild to strong decays */
  fill(h->f, (size_t)(T * HK), 2, 3.0f);
  fill(h->b, (size_t)(T * H), 3, 2.0f);
  fill(h->z, (size_t)(T * HK), 4, 2.0f);
  fill(h->cs, (size_t)S * (W - 1) * D, 5, 1.0f);
  fill_f32(h->cw, (size_t)D * W, 6, -0.6f, 0.6f);
  fill_f32(h->al, H, 7, -1.5f, 1.5f);
  fill_f32(h->dt, HK, 8, -1.0f, 1.0f);
  fill_f32(h->nw, K, 9, 0.5f, 1.5f);
  fill_f32(h->st, (size_t)S * H * K * K, 10, -0.1f, 0.1f);
}

static void host_free(kda_host *h) {
  free(h->qkv), free(h->f), free(h->b), free(h->z), free(h->cs);
  free(h->cw), free(h->al), free(h->dt), free(h->nw), free(h->st);
}

static void bufs_make(dsp_backend *be, const kda_host *h, int64_t T, int32_t S, kda_bufs *u) {
  const dsp_kda_dims dims = {H, H, K, K};
  u->T = T, u->S = S;
  u->qkv = put(be, h->qkv, (size_t)(T * D) * 2), u->f = put(be, h->f, (size_t)(T * HK) * 2);
  u->b = put(be, h->b, (size_t)(T * H) * 2), u->z = put(be, h->z, (size_t)(T * HK) * 2);
  u->y = put(be, NULL, (size_t)(T * HK) * 2), u->cw = put(be, h->cw, (size_t)D * W * 4);
  u->al = put(be, h->al, H * 4), u->dt = put(be, h->dt, HK * 4), u->nw = put(be, h->nw, K * 4);
  u->st = put(be, h->st, (size_t)S * H * K * K * 4), u->cs = put(be, h->cs, (size_t)S * (W - 1) * D * 2);
  TRY(dsp_op_kda_workspace(be, &dims, W, T, &u->ws_bytes));
  TRY(dsp_op_kda_stage_bytes(S, T, &u->sg_bytes));
  u->ws = put(be, NULL, u->ws_bytes), u->sg = put(be, NULL, u->sg_bytes);
}

static void bufs_free(dsp_backend *be, kda_bufs *u) {
  void *all[] = {u->qkv, u->f, u->b, u->z, u->y, u->cw, u->al, u->dt, u->nw, u->st, u->cs, u->ws, u->sg};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dsp_op_release(be, 0, all[i]);
}

/* The op's arguments over u for a staged batch; states and views as the layer lays them out. */
static dsp_op_kda_args args_of(kda_bufs *u, int form, int32_t tile, const dsp_kda_staged *sg, dsp_kda_state *sv,
                               dsp_kda_conv_state *cv) {
  *sv = (dsp_kda_state){u->st, (int64_t)H * K * K, u->S};
  *cv = (dsp_kda_conv_state){u->cs, (int64_t)(W - 1) * D, u->S};
  return (dsp_op_kda_args){.dims = {H, H, K, K}, .conv_width = W, .form = form, .staged = sg, .value_tile = tile,
                           .qkv = u->qkv, .qkv_tok = D, .conv_w = u->cw, .f = u->f, .f_tok = HK, .A_log = u->al,
                           .dt_bias = u->dt, .gate = {DSP_KDA_GATE_SOFTPLUS, 0}, .b = u->b, .b_tok = H, .z = u->z,
                           .z_tok = HK, .norm_w = u->nw, .eps = 1e-5f, .state = sv, .conv_state = cv, .y = u->y,
                           .y_tok = HK, .ws = u->ws, .ws_bytes = u->ws_bytes};
}

static double time_ms(dsp_backend *be, dsp_op_kda_args *a, dsp_op_graph *g, int reps) {
  double t[5];
  for (int r = 0; r < 6; r++) {
    TRY(dsp_op_sync(be, 0));
    const double t0 = dsp_bench_now_ms();
    for (int i = 0; i < reps; i++) TRY(g ? dsp_op_replay(be, 0, g) : dsp_op_kda(be, 0, a));
    TRY(dsp_op_sync(be, 0));
    if (r) t[r - 1] = (dsp_bench_now_ms() - t0) / reps; /* the first group warms up */
  }
  return dsp_bench_median(t, 5);
}

/* One row: B sequences of L tokens each (L 1: decode). */
static void row(dsp_backend *be, int32_t B, int32_t L, int32_t tile, int reps, double bw) {
  const int64_t T = (int64_t)B * L;
  kda_host h;
  host_make(&h, T, B);
  kda_bufs u;
  bufs_make(be, &h, T, B, &u);
  int32_t *cu = malloc((size_t)(B + 1) * 4), *slot = malloc((size_t)B * 4);
  for (int32_t n = 0; n <= B; n++) cu[n] = n * L;
  for (int32_t n = 0; n < B; n++) slot[n] = n;
  const dsp_kda_seqs sq = {B, L > 1 ? cu : NULL, slot, NULL, 1, NULL};
  dsp_kda_staged sg;
  TRY(dsp_op_kda_stage(be, 0, &sq, B, u.sg, u.sg_bytes, &sg));
  dsp_kda_state sv;
  dsp_kda_conv_state cv;
  const int form = L > 1 ? DSP_KDA_CHUNKED : DSP_KDA_RECURRENT;
  dsp_op_kda_args a = args_of(&u, form, tile, &sg, &sv, &cv);
  const int r = L > 1 ? (reps + 4) / 5 : reps;
  const double te = time_ms(be, &a, NULL, r);
  double tg = 0;
  if (dsp_op_has_graphs(be)) {
    dsp_op_graph *g = NULL;
    TRY(dsp_op_capture_begin(be, 0));
    const dsp_status s = dsp_op_kda(be, 0, &a);
    TRY(dsp_op_capture_end(be, 0, &g));
    TRY(s);
    tg = time_ms(be, &a, g, r);
    dsp_op_graph_free(be, g);
  }
  /* states read and written, conv states likewise, activations read (qkv, f, b, z) and written (y) */
  const double bytes = (double)B * (2.0 * H * K * K * 4 + 2.0 * (W - 1) * D * 2) + (double)T * (D + 2 * HK + H + HK) * 2;
  char name[64];
  if (L > 1) snprintf(name, sizeof name, "prefill, batch %d of %d tokens", B, L);
  else snprintf(name, sizeof name, "decode, batch %d", B);
  const double fl = bytes / bw * 1e3, best = tg > 0 ? tg : te;
  char gs[32] = "—";
  if (tg > 0) snprintf(gs, sizeof gs, "%.4f", tg);
  printf("| %s | %.4f | %s | %.4f | %.2f |\n", name, te, gs, fl, best / fl);
  bufs_free(be, &u);
  host_free(&h);
  free(cu), free(slot);
}

static void add(dsp_st_writer *w, const char *name, void *data, dsp_dtype dt, int64_t rows, int64_t cols) {
  const dsp_tensor t = dsp_tensor_2d(data, dt, rows, cols);
  TRY(dsp_st_writer_add(w, name, &t));
}

/* The checked case: DUMP_T prefill tokens then one decode token, slot 0 with a state. */
static void dump(dsp_backend *be, const char *path, int32_t tile) {
  const int64_t T = DUMP_T + 1, S = (int64_t)H * K * K;
  kda_host h;
  host_make(&h, T, 1);
  kda_bufs u;
  bufs_make(be, &h, T, 1, &u);
  float *st = malloc((size_t)S * 3 * 4);
  uint16_t *y = malloc((size_t)(T * HK) * 2);
  if (!st || !y) {
    fprintf(stderr, "bench_kda: out of host memory\n");
    exit(1);
  }
  memcpy(st, h.st, (size_t)S * 4);
  int32_t cu[2] = {0, DUMP_T}, slot = 0;
  dsp_kda_state sv;
  dsp_kda_conv_state cv;
  for (int call = 0; call < 2; call++) { /* the prefill, then the decode token read at row DUMP_T */
    const dsp_kda_seqs sq = {1, call ? NULL : cu, &slot, NULL, 1, NULL};
    dsp_kda_staged sg;
    TRY(dsp_op_kda_stage(be, 0, &sq, 1, u.sg, u.sg_bytes, &sg));
    dsp_op_kda_args a = args_of(&u, call ? DSP_KDA_RECURRENT : DSP_KDA_CHUNKED, tile, &sg, &sv, &cv);
    if (call) { /* views at the decode token's row */
      a.qkv = (uint16_t *)u.qkv + (int64_t)DUMP_T * D, a.f = (uint16_t *)u.f + (int64_t)DUMP_T * HK;
      a.b = (uint16_t *)u.b + (int64_t)DUMP_T * H, a.z = (uint16_t *)u.z + (int64_t)DUMP_T * HK;
      a.y = (uint16_t *)u.y + (int64_t)DUMP_T * HK;
    }
    TRY(dsp_op_kda(be, 0, &a));
    TRY(dsp_op_sync(be, 0));
    TRY(dsp_op_download(be, 0, st + (size_t)(call + 1) * S, u.st, (size_t)S * 4));
  }
  TRY(dsp_op_download(be, 0, y, u.y, (size_t)(T * HK) * 2));
  dsp_st_writer *w;
  TRY(dsp_st_writer_create(path, &w));
  add(w, "qkv", h.qkv, DSP_BF16, T, D), add(w, "f", h.f, DSP_BF16, T, HK), add(w, "b", h.b, DSP_BF16, T, H);
  add(w, "z", h.z, DSP_BF16, T, HK), add(w, "conv_state", h.cs, DSP_BF16, W - 1, D);
  add(w, "conv_w", h.cw, DSP_F32, D, W), add(w, "A_log", h.al, DSP_F32, 1, H), add(w, "dt_bias", h.dt, DSP_F32, 1, HK);
  add(w, "norm_w", h.nw, DSP_F32, 1, K), add(w, "state0", st, DSP_F32, H, K * K);
  add(w, "state_prefill", st + S, DSP_F32, H, K * K), add(w, "state_decode", st + 2 * S, DSP_F32, H, K * K);
  add(w, "y", y, DSP_BF16, T, HK);
  char v[32];
  snprintf(v, sizeof v, "%d", (int)DUMP_T);
  TRY(dsp_st_writer_meta(w, "prefill_tokens", v));
  snprintf(v, sizeof v, "%d", (int)H);
  TRY(dsp_st_writer_meta(w, "heads", v));
  snprintf(v, sizeof v, "%d", (int)K);
  TRY(dsp_st_writer_meta(w, "head_dim", v));
  TRY(dsp_st_writer_meta(w, "eps", "1e-5"));
  TRY(dsp_st_writer_finish(w));
  printf("# wrote %s: %d prefill tokens then one decode token, inputs and outputs\n", path, (int)DUMP_T);
  bufs_free(be, &u);
  host_free(&h);
  free(st), free(y);
}

int main(int argc, char **argv) {
  const char *decodes = "1,32,256", *prefills = "4096,16384", *path = NULL;
  int64_t R = 20, tile = 0;
  dsp_tool_backend bk;
  dsp_tool_backend_init(&bk);
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int used = 1, br;
    if (!strcmp(o, "--decode") && v) decodes = v;
    else if (!strcmp(o, "--prefill") && v) prefills = v;
    else if (!strcmp(o, "--dump") && v) path = v;
    else if (!strcmp(o, "--reps") && v) { if (dsp_tool_parse_i64(o, v, 1, 10000, &R)) return 2; }
    else if (!strcmp(o, "--tile") && v) { if (dsp_tool_parse_i64(o, v, 0, 64, &tile)) return 2; }
    else if ((used = 0, br = dsp_tool_backend_option(&bk, o, v, &used)) != 1) { if (br < 0) return 2; }
    else {
      fprintf(stderr, "usage: bench_kda [--backend cpu|cuda] [--decode 1,32,256] [--prefill 4096,16384] "
                      "[--tile 0|16|32|64] [--reps R] [--dump FILE]\n");
      return 2;
    }
    i += used;
  }
  int32_t db[16], pb[16], dmax, pmax;
  int nd = 0, np = 0;
  if ((*decodes && dsp_bench_batches(decodes, db, 16, &nd, &dmax)) ||
      (*prefills && dsp_bench_batches(prefills, pb, 16, &np, &pmax))) {
    fprintf(stderr, "bench_kda: bad --decode '%s' or --prefill '%s'\n", decodes, prefills);
    return 2;
  }
  if (tile != 0 && tile != 16 && tile != 32 && tile != 64) {
    fprintf(stderr, "bench_kda: --tile %lld: 0, 16, 32 or 64\n", (long long)tile);
    return 2;
  }
  dsp_comm *comm;
  TRY(dsp_comm_auto_create(&comm));
  dsp_backend *be;
  TRY(dsp_tool_backend_create(&bk, comm, &be));
  const double bw = dsp_bench_copy_rate(be);
  printf("# bench_kda on %s: %s %.0f GB/s; KDA op, %d heads of %d x %d, conv %d, batch staged once\n",
         dsp_backend_describe(be), bk.kind == DSP_BACKEND_CUDA ? "copy" : "read", bw * 1e-9, H, K, K, W);
  printf("| call | ms (eager) | ms (graph) | floor ms | x floor |\n|---|---|---|---|---|\n");
  for (int i = 0; i < nd; i++) row(be, db[i], 1, (int32_t)tile, (int)R, bw);
  for (int i = 0; i < np; i++) row(be, 1, pb[i], (int32_t)tile, (int)R, bw);
  if (path) dump(be, path, (int32_t)tile);
  dsp_backend_free(be);
  dsp_comm_free(comm);
  return 0;
}
