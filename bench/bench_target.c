/* bench_target: the Qwen3 target through the public API, call by call:
 *   decode  one new token per sequence over a context of C positions,
 *   verify  8 new tokens per sequence over C (a DSpark block of 7 + anchor),
 *   prefill one sequence of P tokens,
 * each in ms per call (median of the repeats; every call truncates the slots
 * back to C, so the context stays the same), against its floor: weight and
 * KV-cache bytes over the copy bandwidth, or flops over the bf16 product rate
 * where that is larger, both measured in the same process. Prompts are
 * synthetic ids (prompt b, position i: (i * 7919 + b * 104729 + 13) % vocab),
 * the same a peer (bench/hf_peer_target.py) runs. Under mpirun or with --tp N
 * the floors are one TP rank's share (1/TP of the weights, KV and flops) over
 * its own measured rates, and rank 0 prints.
 *
 * usage: bench_target --model DIR [--backend cpu|cuda [--tp N]] [--context C] [--prefill P]
 *                     [--batch 1,32] [--reps R] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "dspark.h"
#include "support/rates.h"
#include "tool_common.h"

#define TRY(x) DSP_BENCH_TRY(x)

#define tok dsp_bench_token

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
  int32_t bs[16], bmax;
  int nb;
  if (dsp_bench_batches(batches, bs, 16, &nb, &bmax)) {
    fprintf(stderr, "bench_target: bad --batch '%s'\n", batches);
    return 2;
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
  /* under TP every rank times the same calls; rank 0 prints, and the floors are one rank's share (1/TP of the
   * weights, the KV heads and the flops) over this rank's measured rates */
  const int root = dsp_comm_rank(comm) == 0;
  const double tp = (double)dsp_backend_tp_size(be);
  if (root) fprintf(stderr, "%s\n", dsp_target_report(t));
  const double H = (double)in->hidden, D = (double)in->head_dim, I = (double)in->intermediate;
  const double per_layer = H * (in->heads + 2.0 * in->kv_heads) * D + in->heads * D * H + 3.0 * H * I;
  const double params = (double)in->layers * per_layer + (double)in->vocab * H; /* the embedding is a gather */
  /* one rank's rates (CPU ranks in one process: measured on device 0's share of the threads) */
  const double bw = dsp_bench_copy_rate(be);
  const double rate = dsp_bench_product_rate(be, bk.kind == DSP_BACKEND_CUDA ? 8192 : 512, 4096, 4096);
  const double kv_per_pos = 2.0 * 2.0 * (double)in->layers * in->kv_heads * D;
  if (root) {
    printf("# bench_target: %s (%s, TP %.0f), %.2f G parameters in products; %s %.0f GB/s, bf16 products %.1f "
           "TFLOP/s%s\n", model, bk.kind == DSP_BACKEND_CUDA ? "cuda" : "cpu", tp, params / 1e9,
           bk.kind == DSP_BACKEND_CUDA ? "copy" : "read", bw / 1e9, rate / 1e12,
           tp > 1 ? " (rank 0's; floors per rank)" : "");
    printf("# backend: %s\n", dsp_backend_describe(be)); /* the kernels the figures come from (AMX or the chain) */
    printf("| call | batch | context | ms per call | floor ms | of floor | tokens/s |\n|---|---|---|---|---|---|---|\n");
  }
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
        const double t0 = dsp_bench_now_ms();
        TRY(dsp_target_forward(t, &b, &out));
        const double dt = dsp_bench_now_ms() - t0;
        if (r >= 0) ms[r] = dt;
        for (int32_t s = 0; s < B; s++) TRY(dsp_target_truncate(t, s, C));
      }
      const double m = dsp_bench_median(ms, (int)R);
      const double bytes = (2.0 * params + kv_per_pos * (double)B * (double)(C + n)) / tp;
      const double flops = (2.0 * params * B * n + 4.0 * in->layers * in->heads * D * (double)B * n * (C + n)) / tp;
      const double fl = bytes / bw * 1e3 > flops / rate * 1e3 ? bytes / bw * 1e3 : flops / rate * 1e3;
      if (root)
        printf("| %s | %d | %lld | %.3f | %.3f | %.2fx | %.0f |\n", kind ? "verify 8" : "decode", B, (long long)C, m,
               fl, m / fl, (double)B * n / (m * 1e-3));
      fflush(stdout);
    }
  }
  /* prefill of one sequence of P tokens, in calls of the chunk */
  for (int64_t r = -1; r < 3; r++) {
    int32_t s = 0;
    TRY(dsp_target_truncate(t, 0, 0));
    const double t0 = dsp_bench_now_ms();
    for (int64_t p0 = 0; p0 < P; p0 += chunk) {
      const int32_t n = (int32_t)(P - p0 < chunk ? P - p0 : chunk);
      for (int32_t i = 0; i < n; i++) toks[i] = tok(p0 + i, 0, in->vocab);
      dsp_target_batch b = {.nseq = 1, .slot = &s, .count = &n, .tokens = toks, .last_only = 1};
      dsp_target_outputs out = {.next = next};
      TRY(dsp_target_forward(t, &b, &out));
    }
    if (r >= 0) ms[r] = dsp_bench_now_ms() - t0;
  }
  const double m = dsp_bench_median(ms, 3);
  const double flops =
      (2.0 * (params - (double)in->vocab * H) * P + 2.0 * in->layers * in->heads * D * (double)P * P) / tp;
  if (root) {
    printf("| prefill | 1 | %lld | %.3f | %.3f | %.2fx | %.0f |\n", (long long)P, m, flops / rate * 1e3,
           m / (flops / rate * 1e3), (double)P / (m * 1e-3));
    printf("(prefill: %.1f%% of the measured bf16 product rate)\n", 100.0 * flops / (m * 1e-3) / rate);
  }
  free(slot), free(count), free(toks), free(next), free(ms);
  dsp_target_free(t);
  dsp_backend_free(be);
  dsp_comm_free(comm);
  return 0;
}
