/* bench_target: the Qwen3 target through the public API, call by call:
 *   decode  one new token per sequence over a context of C positions,
 *   verify  8 new tokens per sequence over C (a DSpark block of 7 + anchor),
 *   prefill one sequence of P tokens,
 * each in ms per call (median of the repeats; every call truncates the slots
 * back to C, so the context stays the same), against its floor: weight and
 * KV-cache bytes over the copy bandwidth, or flops over the bf16 product rate
 * where that is larger, both measured in the same process. Prompts are
 * synthetic ids (prompt b, position i: (i * 7919 + b * 104729 + 13) % vocab),
 * the same a peer (bench/hf_peer_target.py) runs.
 *
 * usage: bench_target --model DIR [--backend cpu|cuda] [--context C] [--prefill P]
 *                     [--batch 1,32] [--reps R] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/ops.h"
#include "dspark.h"
#include "support/ceilings.h"
#include "tool_common.h"

#define TRY(x)                                                                           \
  do {                                                                                   \
    if ((x) != DSP_OK) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, dsp_error_message());   \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + 1e-6 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return v[n / 2];
}

/* Copy bandwidth (bytes read + written per second) through the backend's own copy op. */
static double copy_rate(dsp_backend *be) {
  const size_t n = (size_t)1 << 30;
  void *a, *b;
  TRY(dsp_op_alloc(be, 0, n, &a));
  TRY(dsp_op_alloc(be, 0, n, &b));
  TRY(dsp_op_copy(be, 0, b, a, n));
  TRY(dsp_op_sync(be, 0));
  double best = 1e30;
  for (int g = 0; g < 5; g++) {
    const double t0 = now_ms();
    for (int r = 0; r < 4; r++) TRY(dsp_op_copy(be, 0, b, a, n));
    TRY(dsp_op_sync(be, 0));
    const double ms = (now_ms() - t0) / 4;
    best = ms < best ? ms : best;
  }
  dsp_op_release(be, 0, a);
  dsp_op_release(be, 0, b);
  return 2.0 * (double)n / (best * 1e-3);
}

/* bf16 product rate (flop/s) of the backend's GEMM on an m x n x k product. */
static double product_rate(dsp_backend *be, int64_t m, int64_t n, int64_t k) {
  dsp_bf16 *w = calloc((size_t)(n * k), 2);
  for (int64_t i = 0; i < n * k; i++) w[i] = (dsp_bf16)(0x3C00 + (i * 37 % 128));
  dsp_weight *wt;
  dsp_tensor wv = dsp_tensor_2d(w, DSP_BF16, n, k);
  TRY(dsp_op_weight_create(be, 0, &wv, 0, &wt));
  void *a, *c;
  TRY(dsp_op_alloc(be, 0, (size_t)(m * k) * 2, &a));
  TRY(dsp_op_alloc(be, 0, (size_t)(m * n) * 2, &c));
  TRY(dsp_op_upload(be, 0, a, w, (size_t)(m * k) * 2 < (size_t)(n * k) * 2 ? (size_t)(m * k) * 2 : (size_t)(n * k) * 2));
  dsp_tensor av = dsp_tensor_2d(a, DSP_BF16, m, k), cv = dsp_tensor_2d(c, DSP_BF16, m, n);
  TRY(dsp_op_gemm(be, 0, &av, wt, &cv));
  TRY(dsp_op_sync(be, 0));
  double best = 1e30;
  for (int g = 0; g < 5; g++) {
    const double t0 = now_ms();
    for (int r = 0; r < 3; r++) TRY(dsp_op_gemm(be, 0, &av, wt, &cv));
    TRY(dsp_op_sync(be, 0));
    const double ms = (now_ms() - t0) / 3;
    best = ms < best ? ms : best;
  }
  dsp_op_release(be, 0, a);
  dsp_op_release(be, 0, c);
  dsp_op_weight_free(be, wt);
  free(w);
  return 2.0 * (double)m * (double)n * (double)k / (best * 1e-3);
}

static int32_t tok(int64_t i, int64_t b, int64_t V) { return (int32_t)((i * 7919 + b * 104729 + 13) % V); }

int main(int argc, char **argv) {
  const char *model = NULL, *batches = "1,32";
  int64_t C = 1024, P = 2048, R = 20;
  dsp_tool_backend bk;
  dsp_tool_backend_init(&bk);
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int used = 1, br;
    if (!strcmp(o, "--model") && v) model = v;
    else if (!strcmp(o, "--context") && v) { if (dsp_tool_parse_i64(o, v, 1, 1 << 20, &C)) return 2; }
    else if (!strcmp(o, "--prefill") && v) { if (dsp_tool_parse_i64(o, v, 1, 1 << 20, &P)) return 2; }
    else if (!strcmp(o, "--reps") && v) { if (dsp_tool_parse_i64(o, v, 3, 10000, &R)) return 2; }
    else if (!strcmp(o, "--batch") && v) batches = v;
    else if ((used = 0, br = dsp_tool_backend_option(&bk, o, v, &used)) != 1) { if (br < 0) return 2; }
    else {
      fprintf(stderr, "usage: bench_target --model DIR [--backend cpu|cuda] [--context C] [--prefill P] "
                      "[--batch 1,32] [--reps R]\n");
      return 2;
    }
    i += used;
  }
  if (!model) {
    fprintf(stderr, "bench_target: --model is required\n");
    return 2;
  }
  int32_t bs[16], nb = 0, bmax = 1;
  for (const char *p = batches; *p && nb < 16;) {
    bs[nb] = (int32_t)strtol(p, (char **)&p, 10);
    bmax = bs[nb] > bmax ? bs[nb] : bmax;
    nb++;
    if (*p == ',') p++;
  }
  dsp_comm *comm;
  TRY(dsp_comm_auto_create(&comm));
  dsp_backend *be;
  TRY(dsp_tool_backend_create(&bk, comm, &be));
  const int32_t chunk = 2048;
  dsp_target_options o = {.max_seqs = bmax, .max_len = (int32_t)((C + 8 > P ? C + 8 : P)),
                          .max_tokens = chunk > 8 * bmax ? chunk : 8 * bmax};
  dsp_target *t;
  TRY(dsp_target_load(be, model, &o, &t));
  const dsp_target_info *in = dsp_target_info_of(t);
  fprintf(stderr, "%s\n", dsp_target_report(t));
  const double H = (double)in->hidden, D = (double)in->head_dim, I = (double)in->intermediate;
  const double per_layer = H * (in->heads + 2.0 * in->kv_heads) * D + in->heads * D * H + 3.0 * H * I;
  const double params = (double)in->layers * per_layer + (double)in->vocab * H; /* the embedding is a gather */
  const double bw = copy_rate(be);
  const double rate = product_rate(be, bk.kind == DSP_BACKEND_CUDA ? 8192 : 512, 4096, 4096);
  const double kv_per_pos = 2.0 * 2.0 * (double)in->layers * in->kv_heads * D;
  printf("# bench_target: %s (%s), %.2f G parameters in products; copy %.0f GB/s, bf16 products %.1f TFLOP/s\n",
         model, bk.kind == DSP_BACKEND_CUDA ? "cuda" : "cpu", params / 1e9, bw / 1e9, rate / 1e12);
  printf("| call | batch | context | ms per call | floor ms | of floor | tokens/s |\n|---|---|---|---|---|---|---|\n");
  int32_t *slot = malloc((size_t)bmax * 4), *count = malloc((size_t)bmax * 4);
  int32_t *toks = malloc((size_t)(chunk > 8 * bmax ? chunk : 8 * bmax) * 4);
  int64_t *next = malloc((size_t)(chunk > 8 * bmax ? chunk : 8 * bmax) * 8);
  double *ms = malloc((size_t)R * sizeof *ms);
  for (int bi = 0; bi < nb; bi++) {
    const int32_t B = bs[bi];
    /* the contexts, in chunks */
    for (int32_t s = 0; s < B; s++) {
      TRY(dsp_target_truncate(t, s, 0));
      for (int64_t p0 = 0; p0 < C; p0 += chunk) {
        const int32_t n = (int32_t)(C - p0 < chunk ? C - p0 : chunk);
        for (int32_t i = 0; i < n; i++) toks[i] = tok(p0 + i, s, in->vocab);
        dsp_target_batch b = {.nseq = 1, .slot = &s, .count = &n, .tokens = toks, .last_only = 1};
        dsp_target_outputs out = {.next = next};
        TRY(dsp_target_forward(t, &b, &out));
      }
    }
    for (int kind = 0; kind < 2; kind++) {
      const int32_t n = kind ? 8 : 1;
      for (int32_t s = 0; s < B; s++) {
        slot[s] = s, count[s] = n;
        for (int32_t i = 0; i < n; i++) toks[s * n + i] = tok(C + i, s, in->vocab);
      }
      dsp_target_batch b = {.nseq = B, .slot = slot, .count = count, .tokens = toks};
      dsp_target_outputs out = {.next = next};
      for (int64_t r = -2; r < R; r++) { /* two warm-up calls (the first captures the graph) */
        const double t0 = now_ms();
        TRY(dsp_target_forward(t, &b, &out));
        const double dt = now_ms() - t0;
        if (r >= 0) ms[r] = dt;
        for (int32_t s = 0; s < B; s++) TRY(dsp_target_truncate(t, s, C));
      }
      const double m = median(ms, (int)R);
      const double bytes = 2.0 * params + kv_per_pos * (double)B * (double)(C + n);
      const double flops = 2.0 * params * B * n + 4.0 * in->layers * in->heads * D * (double)B * n * (C + n);
      const double fl = bytes / bw * 1e3 > flops / rate * 1e3 ? bytes / bw * 1e3 : flops / rate * 1e3;
      printf("| %s | %d | %lld | %.3f | %.3f | %.2fx | %.0f |\n", kind ? "verify 8" : "decode", B, (long long)C, m, fl,
             m / fl, (double)B * n / (m * 1e-3));
      fflush(stdout);
    }
  }
  /* prefill of one sequence of P tokens, in calls of the chunk */
  for (int64_t r = -1; r < 3; r++) {
    int32_t s = 0;
    TRY(dsp_target_truncate(t, 0, 0));
    const double t0 = now_ms();
    for (int64_t p0 = 0; p0 < P; p0 += chunk) {
      const int32_t n = (int32_t)(P - p0 < chunk ? P - p0 : chunk);
      for (int32_t i = 0; i < n; i++) toks[i] = tok(p0 + i, 0, in->vocab);
      dsp_target_batch b = {.nseq = 1, .slot = &s, .count = &n, .tokens = toks, .last_only = 1};
      dsp_target_outputs out = {.next = next};
      TRY(dsp_target_forward(t, &b, &out));
    }
    if (r >= 0) ms[r] = now_ms() - t0;
  }
  const double m = median(ms, 3);
  const double flops = 2.0 * (params - (double)in->vocab * H) * P + 2.0 * in->layers * in->heads * D * (double)P * P;
  printf("| prefill | 1 | %lld | %.3f | %.3f | %.2fx | %.0f |\n", (long long)P, m, flops / rate * 1e3,
         m / (flops / rate * 1e3), (double)P / (m * 1e-3));
  printf("(prefill: %.1f%% of the measured bf16 product rate)\n", 100.0 * flops / (m * 1e-3) / rate);
  free(slot), free(count), free(toks), free(next), free(ms);
  dsp_target_free(t);
  dsp_backend_free(be);
  dsp_comm_free(comm);
  return 0;
}
