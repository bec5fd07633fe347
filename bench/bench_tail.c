/* Benchmark of the Markov tail kernels alone (cuda/markov.h), one GPU: gamma
 * steps in one persistent launch over random W2, W1 and base, each kernel and
 * L2 option timed with CUDA events (medians), the tokens checked equal across
 * all of them, and for ring kernels 4-5 a per-step breakdown from their
 * in-kernel trace (where a step's time goes: work, the spread of the blocks'
 * finishing times, waits for data, and the grid barrier split into the keys'
 * merge, the arrival, learning the winners and the E gather). Before each
 * timed launch a 256 MB buffer is written, as the LM head's stream would, so
 * L2 holds no W2 except what a policy kept.
 * --warm 1 leaves the 256 MB write out (L2 keeps what the last launch left);
 * --graph 1 replays the launch and its memset as a CUDA graph, as the
 * head does (no trace then).
 * --heat 1 runs, instead of the write, the LM head's product (cuda/lm_head.h,
 * batch x gamma rows, hidden 7168, this vocabulary) before each launch: the
 * tail then starts where it does in the head, at the clock the power
 * controller leaves after that product, with L2 full of its data.
 * --lm C picks that product's algorithm (cuda/lm_head.h choices; default 2, the
 * head's: the own wgmma kernel, which triggers the tail's launch at each
 * block's last tile; 0: cuBLASLt's pinned algorithm, which triggers at exit).
 * --only I runs variant I (0-based, of the table's order) after the register
 * kernel (the tokens' reference) and no other.
 * --pdl 1 (implies --heat 1) then times the LM head's product and ring kernel
 * 5's tail (2 resident chunks, keep 3/8) back to back, reading the product as
 * base, the tail launched plainly or programmatically (PDL: it may start as the
 * product ends) in alternate repetitions, and traces one launch of each.
 * The barrier, the claims and the keys share one allocation, cleared by one
 * memset per launch, as in the head.
 * usage: bench_tail [--batch 32] [--gamma 7] [--vocab 163840] [--reps 30] [--warm 0] [--graph 0] [--heat 0]
 *                   [--only -1] [--pdl 0] [--lm 2] */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cuda_util.h"
#include "support/markov_bench.h"
#include "core/status.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/markov.h"

typedef struct {
  const char *name;
  int ring, keep8, serpentine, setaside, trace, stages, packed, resident, pause;
} variant;

/* --pdl: see the header. Returns 1 when the two launches' tokens differ. */
static int pdl_pairs(dsp_cuda_gemm *lm, const uint16_t *lm_a, const uint16_t *lm_w, uint16_t *lm_out, const uint16_t *w1,
                     const uint16_t *w2p, const int32_t *anc, int32_t *tokens, unsigned long long *keys,
                     unsigned *barrier, unsigned long long *trace, size_t sync_b, int rows, long V, int bq, long G,
                     int sms, int reps, cudaStream_t st) {
  dsp_mk_args a;
  memset(&a, 0, sizeof a);
  a.w2 = NULL, a.w2p = w2p, a.w1 = w1, a.base = lm_out, a.vr = rows, a.vocab = V, a.ld = rows, a.seg_rows = rows;
  a.nseg = 1, a.bq = bq, a.anchor = anc, a.tokens = tokens, a.keys = keys, a.barrier = barrier;
  a.k_begin = 0, a.k_end = (int32_t)G, a.persistent = 1, a.serpentine = 1, a.prefetch = 4, a.keep8 = 3;
  a.resident = 2;
  size_t smem;
  int occ;
  CKD(dsp_cuda_markov_prepare(bq, 0, 0, 1, &smem, &occ, &a.stages));
  const int64_t M = G * bq;
  float *ms[2] = {malloc((size_t)reps * sizeof(float)), malloc((size_t)reps * sizeof(float))};
  float *dif = malloc((size_t)reps * sizeof(float));
  int32_t *tok[2] = {malloc((size_t)M * 4), malloc((size_t)M * 4)};
  unsigned long long *tr = malloc((size_t)sms * G * DSP_MK_TRACE * 8);
  cudaEvent_t *ev = malloc((size_t)(reps + 3) * 4 * sizeof *ev);
  for (int i = 0; i < (reps + 3) * 4; i++) CK(cudaEventCreate(&ev[i]));
  /* reps alternate plain / PDL; the memset comes before the product, as in the head */
  for (int r = -3; r < reps; r++)
    for (int p = 0; p < 2; p++) {
      dsp_mk_launch l = {0, 0, 5, sms, 1, p};
      cudaEvent_t *e = ev + ((size_t)(r + 3) * 2 + p) * 2;
      CK(cudaMemsetAsync(barrier, 0, sync_b, st));
      CK(cudaEventRecord(e[0], st));
      CKD(dsp_cuda_gemm_run(lm, lm_a, 7168, lm_w, lm_out, M, rows, st));
      CKD(l.ring ? dsp_bench_ring_launch(&a, &l, st) : dsp_cuda_markov_launch(&a, &l, st));
      CK(cudaEventRecord(e[1], st));
    }
  CK(cudaStreamSynchronize(st));
  for (int r = 0; r < reps; r++) {
    for (int p = 0; p < 2; p++) CK(cudaEventElapsedTime(&ms[p][r], ev[((size_t)(r + 3) * 2 + p) * 2],
                                                        ev[((size_t)(r + 3) * 2 + p) * 2 + 1]));
    dif[r] = (ms[0][r] - ms[1][r]) * 1e3f;
  }
  printf("LM head + ring 5 tail, %d alternating pairs: plain %.3f ms, PDL %.3f ms, plain - PDL per pair: median %.2f us\n",
         reps, median(ms[0], reps), median(ms[1], reps), median(dif, reps));
  /* one traced launch of each: when step 0's consumers started (relative to the earliest block), its work */
  for (int p = 0; p < 2; p++) {
    dsp_mk_launch l = {0, 0, 5, sms, 1, p};
    a.trace = trace;
    CK(cudaMemsetAsync(trace, 0, (size_t)sms * G * DSP_MK_TRACE * 8, st));
    CK(cudaMemsetAsync(barrier, 0, sync_b, st));
    CKD(dsp_cuda_gemm_run(lm, lm_a, 7168, lm_w, lm_out, M, rows, st));
    CKD(l.ring ? dsp_bench_ring_launch(&a, &l, st) : dsp_cuda_markov_launch(&a, &l, st));
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(tok[p], tokens, (size_t)M * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(tr, trace, (size_t)sms * G * DSP_MK_TRACE * 8, cudaMemcpyDeviceToHost));
    unsigned long long s0 = ~0ull, s1 = 0, e1 = 0;
    float *w = malloc((size_t)sms * sizeof *w);
    for (int b = 0; b < sms; b++) {
      const unsigned long long *t = tr + (size_t)b * G * DSP_MK_TRACE;
      if (t[0] < s0) s0 = t[0];
      if (t[0] > s1) s1 = t[0];
      if (t[1] > e1) e1 = t[1];
      w[b] = (float)(t[1] - t[0]) / 1e3f;
    }
    int early = 0; /* blocks placed well before the last one (on SMs the product left early) */
    for (int b = 0; b < sms; b++) early += tr[(size_t)b * G * DSP_MK_TRACE] + 5000 < s1;
    printf("  %s: step 0 starts spread over %.2f us (%d blocks > 5 us before the last), work med %.2f us, first "
           "start -> last end %.2f us\n",
           p ? "PDL  " : "plain", (double)(s1 - s0) / 1e3, early, median(w, sms), (double)(e1 - s0) / 1e3);
    free(w);
  }
  long diff = 0;
  for (int64_t j = 0; j < M; j++) diff += tok[0][j] != tok[1][j];
  printf("  tokens: %ld of %lld differ between the plain and the PDL launch\n", diff, (long long)M);
  return diff != 0;
}

int main(int argc, char **argv) {
  long B = 32, G = 7, V = 163840, reps = 30, warm = 0, graph = 0, heat = 0, only = -1, pdl = 0, lmc = DSP_GEMM_WGMMA;
  for (int i = 1; i + 1 < argc; i += 2) {
    long *d = !strcmp(argv[i], "--batch") ? &B : !strcmp(argv[i], "--gamma") ? &G : !strcmp(argv[i], "--vocab") ? &V
              : !strcmp(argv[i], "--reps") ? &reps : !strcmp(argv[i], "--warm") ? &warm
              : !strcmp(argv[i], "--graph") ? &graph : !strcmp(argv[i], "--heat") ? &heat
              : !strcmp(argv[i], "--only") ? &only : !strcmp(argv[i], "--pdl") ? &pdl
              : !strcmp(argv[i], "--lm") ? &lmc : NULL;
    if (!d) {
      fprintf(stderr, "bench_tail: unknown option %s\n", argv[i]);
      return 2;
    }
    *d = atol(argv[i + 1]);
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("bench_tail: no CUDA device\n");
    return 77;
  }
  if (pdl) heat = 1;
  if (B < 1 || B > DSP_MK_MAXBQ || G < 1 || G > 64 || V < 16 || reps < 1 || reps > 1000) {
    fprintf(stderr, "bench_tail: batch 1..%d, gamma 1..64, vocab >= 16, reps 1..1000\n", DSP_MK_MAXBQ);
    return 2;
  }
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int bq = (int)((B + 15) / 16 * 16), rows = (int)((V + 15) / 16 * 16), sms = prop.multiProcessorCount;
  const size_t nw = (size_t)rows * DSP_MK_RP, nb = (size_t)G * bq * rows;
  uint16_t *h = malloc((nw > nb ? nw : nb) * 2);
  int32_t *anc = malloc((size_t)bq * 4);
  if (!h || !anc) return 1;
  uint16_t *w2, *w1, *base;
  int32_t *d_anc, *tokens;
  unsigned long long *keys, *trace;
  unsigned *barrier;
  void *flush;
  const size_t flush_bytes = (size_t)256 << 20;
  CK(cudaMalloc((void **)&w2, nw * 2));
  CK(cudaMalloc((void **)&w1, nw * 2));
  CK(cudaMalloc((void **)&base, nb * 2));
  CK(cudaMalloc((void **)&d_anc, (size_t)bq * 4));
  CK(cudaMalloc((void **)&tokens, (size_t)(G * bq) * 4));
  /* [barrier, claims: 1 + G u32, padded to 16 bytes][keys: G x bq] */
  const size_t sync0 = ((size_t)(1 + G) * 4 + 15) & ~(size_t)15, sync_b = sync0 + (size_t)(G * bq) * 8;
  CK(cudaMalloc((void **)&barrier, sync_b));
  keys = (unsigned long long *)((char *)barrier + sync0);
  CK(cudaMalloc((void **)&trace, (size_t)sms * G * DSP_MK_TRACE * 8));
  CK(cudaMalloc(&flush, flush_bytes));
  uint16_t *w2p;
  CK(cudaMalloc((void **)&w2p, dsp_cuda_markov_packed_elems(rows) * 2));
  fill(h, nw, 3, 1.0f / 16.0f * 1.7f); /* W2 rows past V stay random: their ids are not real, never selected */
  CK(cudaMemcpy(w2, h, nw * 2, cudaMemcpyHostToDevice));
  CKD(dsp_cuda_markov_pack_w2(w2, rows, w2p, 0));
  /* --heat: the LM head's product, as the head runs it before the tail */
  const int64_t HID = 7168, LM_M = G * B;
  dsp_cuda_gemm *lm = NULL;
  uint16_t *lm_w = NULL, *lm_a = NULL, *lm_out = NULL;
  if (heat) {
    CK(cudaMalloc((void **)&lm_w, (size_t)rows * HID * 2));
    CK(cudaMalloc((void **)&lm_a, (size_t)LM_M * HID * 2));
    CK(cudaMalloc((void **)&lm_out, (size_t)LM_M * rows * 2));
    uint16_t *hl = malloc((size_t)HID * 65536 * 2);
    if (!hl) return 1;
    for (int64_t r0 = 0; r0 < rows; r0 += 65536) { /* random, like real weights: zeros draw less power */
      const int64_t n = rows - r0 < 65536 ? rows - r0 : 65536;
      fill(hl, (size_t)(n * HID), 10 + (uint64_t)r0, 0.02f);
      CK(cudaMemcpy(lm_w + r0 * HID, hl, (size_t)(n * HID) * 2, cudaMemcpyHostToDevice));
    }
    fill(hl, (size_t)(LM_M * HID), 9, 1.7f);
    CK(cudaMemcpy(lm_a, hl, (size_t)(LM_M * HID) * 2, cudaMemcpyHostToDevice));
    free(hl);
    CKD(dsp_cuda_gemm_create(rows, HID, 0, (int)lmc, &lm));
    printf("LM head product: %s\n", dsp_cuda_gemm_describe(lm));
    CKD(dsp_cuda_gemm_prepare(lm, LM_M));
  }
  fill(h, nw, 2, 1.7f);
  CK(cudaMemcpy(w1, h, nw * 2, cudaMemcpyHostToDevice));
  fill(h, nb, 4, 3.0f);
  CK(cudaMemcpy(base, h, nb * 2, cudaMemcpyHostToDevice));
  for (int b = 0; b < bq; b++) anc[b] = (int32_t)((b * 7919 + 17) % V);
  CK(cudaMemcpy(d_anc, anc, (size_t)bq * 4, cudaMemcpyHostToDevice));

  size_t smem;
  int occ, stages;
  CKD(dsp_cuda_markov_prepare(bq, 0, 0, 0, &smem, &occ, &stages));
  CKD(dsp_cuda_markov_prepare(bq, 0, 0, 1, &smem, &occ, &stages));
  printf("device %s, %d SMs, L2 %d MiB (persisting max %d MiB); batch %d, gamma %ld, vocab %ld; ring stages %d; "
         "%ld reps per variant, %s, %s\n",
         prop.name, sms, prop.l2CacheSize >> 20, prop.persistingL2CacheMaxSize >> 20, bq, G, V, stages, reps,
         heat ? "the LM head's product before each" : warm ? "warm L2 (no write between launches)"
                                                      : "a 256 MB write before each",
         graph ? "graph replays" : "stream launches");

  const variant vs[] = {
      {"register", 0, 0, 1, 0, 0, 0, 0, 0, 0},
      {"ring 4", 4, 0, 1, 0, 0, 0, 0, 0, 0},
      {"ring 4, keep 3/8", 4, 3, 1, 0, 0, 0, 0, 0, 0},
      {"ring 4, packed W2, keep 3/8", 4, 3, 1, 0, 1, 0, 1, 0, 0},
      {"ring 5 (wgmma), keep 3/8", 5, 3, 1, 0, 1, 0, 1, 0, 0},
      {"ring 5, other warpgroup split", 6, 3, 1, 0, 0, 0, 1, 0, 0},
      {"ring 5, 1 resident chunk/wg", 5, 3, 1, 0, 0, 0, 1, 1, 0},
      {"ring 5, 2 resident chunks/wg", 5, 3, 1, 0, 1, 0, 1, 2, 0},
      {"ring 5, 2 resident, keep 4/8", 5, 4, 1, 0, 1, 0, 1, 2, 0},
      {"ring 5, 2 resident, keep 5/8", 5, 5, 1, 0, 1, 0, 1, 2, 0},
      {"ring 5, 2 resident, 4 stages", 5, 3, 1, 0, 1, 4, 1, 2, 0},
      {"ring 5, 2 resident, keep 2/8", 5, 2, 1, 0, 1, 0, 1, 2, 0},
      {"ring 5, 2 resident, pause refills", 5, 3, 1, 0, 1, 0, 1, 2, 1},
      {"ring 5, 2 res., pause, L2 set-aside", 5, 3, 1, 1, 1, 0, 1, 2, 1},
      {"ring 4, packed W2, keep 3/8, pause", 4, 3, 1, 0, 1, 0, 1, 0, 1},
  };
  const int nv = (int)(sizeof vs / sizeof vs[0]);
  if (only >= nv) {
    fprintf(stderr, "bench_tail: --only %ld: the variants are 0..%d\n", only, nv - 1);
    return 2;
  }
  int32_t *ref = malloc((size_t)(G * bq) * 4), *got = malloc((size_t)(G * bq) * 4);
  unsigned long long *tr = malloc((size_t)sms * G * DSP_MK_TRACE * 8);
  float *ms = malloc((size_t)reps * sizeof *ms);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  /* one event pair per launch and one synchronisation per variant: the host
     queues ahead, so no launch waits for the host's submission */
  cudaEvent_t *ev = malloc((size_t)(reps + 4) * 2 * sizeof *ev);
  for (long i = 0; i < (reps + 4) * 2; i++) CK(cudaEventCreate(&ev[i]));
  const double step_bytes = (double)rows * DSP_MK_RP * 2 + (double)bq * rows * 2;
  int bad = 0;
  for (int i = 0; i < nv; i++) {
    if (only >= 0 && i != 0 && i != only) continue;
    const variant *v = &vs[i];
    CK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, v->setaside ? (size_t)prop.persistingL2CacheMaxSize : 0));
    dsp_mk_args a;
    memset(&a, 0, sizeof a);
    a.w2 = w2, a.w1 = w1, a.base = base, a.vr = rows, a.vocab = V, a.ld = rows, a.seg_rows = rows, a.nseg = 1;
    a.bq = bq, a.anchor = d_anc, a.tokens = tokens, a.keys = keys, a.barrier = barrier;
    a.k_begin = 0, a.k_end = (int32_t)G, a.persistent = 1, a.serpentine = v->serpentine, a.prefetch = 4;
    a.stages = v->stages ? v->stages : stages, a.keep8 = v->keep8, a.w2p = v->packed ? w2p : NULL;
    a.resident = v->resident;
    a.pause = v->pause;
    dsp_mk_launch l = {0, 0, v->ring, sms, 1, 0};
    cudaGraphExec_t ge = NULL;
    if (graph) {
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
      CK(cudaMemsetAsync(barrier, 0, sync_b, st));
      CKD(l.ring ? dsp_bench_ring_launch(&a, &l, st) : dsp_cuda_markov_launch(&a, &l, st));
      CK(cudaStreamEndCapture(st, &g));
      CK(cudaGraphInstantiate(&ge, g, 0));
      CK(cudaGraphDestroy(g));
    }
    const int traced = v->trace && !graph;
    for (int r = -3; r < (int)reps + traced; r++) {
      a.trace = r == (int)reps ? trace : NULL;
      if (a.trace) CK(cudaMemsetAsync(trace, 0, (size_t)sms * G * DSP_MK_TRACE * 8, st)); /* a step may leave fields unset */
      if (heat)
        CKD(dsp_cuda_gemm_run(lm, lm_a, 7168, lm_w, lm_out, LM_M, rows, st));
      else if (!warm)
        CK(cudaMemsetAsync(flush, r & 0xFF, flush_bytes, st));
      CK(cudaEventRecord(ev[2 * (r + 3)], st));
      if (ge) {
        CK(cudaGraphLaunch(ge, st));
      } else {
        CK(cudaMemsetAsync(barrier, 0, sync_b, st));
        CKD(l.ring ? dsp_bench_ring_launch(&a, &l, st) : dsp_cuda_markov_launch(&a, &l, st));
      }
      CK(cudaEventRecord(ev[2 * (r + 3) + 1], st));
    }
    CK(cudaStreamSynchronize(st));
    for (int r = 0; r < (int)reps; r++) CK(cudaEventElapsedTime(&ms[r], ev[2 * (r + 3)], ev[2 * (r + 3) + 1]));
    CK(cudaMemcpy(got, tokens, (size_t)(G * bq) * 4, cudaMemcpyDeviceToHost));
    long diff = 0;
    if (i == 0) memcpy(ref, got, (size_t)(G * bq) * 4);
    for (long j = 0; j < G * bq; j++) diff += got[j] != ref[j];
    bad |= diff != 0;
    const double m = median(ms, (int)reps);
    printf("%-30s %8.3f ms  %6.2f us/step  %5.2f TB/s  tokens differing from the register kernel: %ld\n", v->name,
           m, m * 1e3 / G, G * step_bytes / (m * 1e-3) / 1e12, diff);
    if (ge) CK(cudaGraphExecDestroy(ge));
    if (!traced) continue;
    CK(cudaMemcpy(tr, trace, (size_t)sms * G * DSP_MK_TRACE * 8, cudaMemcpyDeviceToHost));
    float *x = malloc((size_t)sms * sizeof *x);
    printf("  step | work us med/max | last block ends after med (us) | barrier us (last end -> first/last go) | "
           "full-wait %% | chunks min/max | producer empty-wait %% | last end -> last merged, last arrived, "
           "winners known first/last (us)\n");
    unsigned long long prev_go = 0;
    for (long k = 0; k < G; k++) {
      unsigned long long max_end = 0, min_go = ~0ull, max_go = 0, max_merged = 0, max_out = 0, min_known = ~0ull,
                         max_known = 0;
      long cmin = 1 << 30, cmax = 0;
      for (int b = 0; b < sms; b++) {
        const unsigned long long *t = tr + ((size_t)b * G + k) * DSP_MK_TRACE;
        if (t[1] > max_end) max_end = t[1];
        if (t[2] < min_go) min_go = t[2];
        if (t[2] > max_go) max_go = t[2];
        if (t[8] > max_merged) max_merged = t[8];
        if (t[9] > max_out) max_out = t[9];
        if (t[10] && t[10] < min_known) min_known = t[10];
        if (t[10] > max_known) max_known = t[10];
        if ((long)t[6] < cmin) cmin = (long)t[6];
        if ((long)t[6] > cmax) cmax = (long)t[6];
      }
      double wmed, wmax = 0, endmed, fw, pw;
      for (int b = 0; b < sms; b++) {
        const unsigned long long *t = tr + ((size_t)b * G + k) * DSP_MK_TRACE;
        x[b] = (float)(t[1] - t[0]) / 1e3f;
        if (x[b] > wmax) wmax = x[b];
      }
      wmed = median(x, sms);
      for (int b = 0; b < sms; b++) x[b] = (float)(max_end - tr[((size_t)b * G + k) * DSP_MK_TRACE + 1]) / 1e3f;
      endmed = median(x, sms);
      for (int b = 0; b < sms; b++) {
        const unsigned long long *t = tr + ((size_t)b * G + k) * DSP_MK_TRACE;
        x[b] = t[3] ? 100.0f * (float)t[5] / (float)t[3] : 0.0f;
      }
      fw = median(x, sms);
      for (int b = 0; b < sms; b++) {
        const unsigned long long *t = tr + ((size_t)b * G + k) * DSP_MK_TRACE;
        x[b] = t[3] ? 100.0f * (float)t[7] / (float)(t[3] + t[4]) : 0.0f;
      }
      pw = median(x, sms);
      const double rel = (double)max_end;
      const int mid = k + 1 < G; /* the last step has no barrier */
      printf("  %4ld | %6.2f / %6.2f | %6.2f | %6.2f / %6.2f | %5.1f | %3ld / %3ld | %5.1f | %5.2f, %5.2f, %5.2f / %5.2f\n",
             k, wmed, wmax, endmed, ((double)min_go - rel) / 1e3, ((double)max_go - rel) / 1e3, fw, cmin, cmax, pw,
             ((double)max_merged - rel) / 1e3, mid ? ((double)max_out - rel) / 1e3 : 0.0,
             mid ? ((double)min_known - rel) / 1e3 : 0.0, mid ? ((double)max_known - rel) / 1e3 : 0.0);
      if (k) printf("         step go-to-go %.2f us\n", (double)(max_go - prev_go) / 1e3);
      prev_go = max_go;
    }
    free(x);
  }
  CK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0));
  printf("parity: %s\n", bad ? "TOKENS DIFFER" : "all variants gave the register kernel's tokens");
  if (pdl && B == bq) bad |= pdl_pairs(lm, lm_a, lm_w, lm_out, w1, w2p, d_anc, tokens, keys, barrier, trace, sync_b,
                                       rows, V, bq, G, sms, (int)reps, st);
  return bad;
}
