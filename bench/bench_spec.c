/* bench_spec: a speculative round against plain decoding, through the public
 * API, in one process: for each batch, prompts of C synthetic ids, then
 *   plain    dsp_generate, N new tokens: ms per decode step;
 *   rounds   dsp_speculate, N new tokens: ms per round (propose + verify +
 *            accept + roll back + context append), split into the draft's
 *            proposal and the target's verification of gamma + 1 tokens;
 * each against its floor (weight, Markov W2 and KV bytes over the measured
 * copy bandwidth, or flops over the measured bf16 GEMM rate where larger),
 * and the speedups they project at the DSpark paper's Qwen3-8B acceptance
 * lengths (a round's cost does not depend on how much of it is accepted):
 * speedup(A) = A * decode step / round. With random weights nearly every
 * draft is rejected, so every round is a full one.
 *
 * --temperature T samples (seed 1) in both: the round then also pays the
 * acceptance's softmaxes of the target's and the draft's rows (on the device
 * where both models are one CUDA device's, else on the host); with --verify
 * exact it compares the drafts with the target's own draws instead.
 *
 * Under mpirun or with --tp N the floors are one TP rank's share (1/TP of the
 * weights, KV and flops) over its own measured rates, and rank 0 prints; the
 * all-reduce and the (value, id) exchange are also timed alone, and every
 * rank's memory in use is printed at the end.
 *
 * usage: bench_spec --model TARGET --draft DRAFT [--backend cpu|cuda [--tp N]] [--context C]
 *                   [--new N] [--batch 1,32] [--temperature T [--verify rejection|exact]]
 *                   [--path auto|original|sharded|replicated] [--broadcast on|off]
 *   (--path and --broadcast: the draft's Markov head, as `dspark head` takes them) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dspark.h"
#include "support/rates.h"
#include "tool_common.h"

#define TRY(x) DSP_BENCH_TRY(x)

#define tok dsp_bench_token

static double floor_ms(double bytes, double flops, double bw, double rate) {
  const double a = bytes / bw * 1e3, b = flops / rate * 1e3;
  return a > b ? a : b;
}

int main(int argc, char **argv) {
  const char *model = NULL, *draft = NULL, *batches = "1,32";
  int64_t C = 1024, N = 64;
  float temp = 0.0f;
  dsp_path path = DSP_PATH_AUTO;
  int broadcast = 1, verify = DSP_VERIFY_REJECTION, block_gamma = 0;
  int64_t gamma = 0;
  dsp_tool_backend bk;
  dsp_tool_backend_init(&bk);
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int used = 1, br;
    if (!strcmp(o, "--model") && v) model = v;
    else if (!strcmp(o, "--draft") && v) draft = v;
    else if (!strcmp(o, "--context") && v) { if (dsp_tool_parse_i64(o, v, 1, 1 << 20, &C)) return 2; }
    else if (!strcmp(o, "--new") && v) { if (dsp_tool_parse_i64(o, v, 2, 1 << 16, &N)) return 2; }
    else if (!strcmp(o, "--batch") && v) batches = v;
    else if (!strcmp(o, "--temperature") && v) {
      char *end;
      temp = strtof(v, &end);
      if (end == v || *end || !(temp >= 0.0f && temp <= 100.0f)) {
        fprintf(stderr, "bench_spec: --temperature wants a number in [0, 100], got '%s'\n", v);
        return 2;
      }
    }
    else if (!strcmp(o, "--gamma") && v) { if (dsp_tool_parse_i64(o, v, 1, 64, &gamma)) return 2; }
    else if (!strcmp(o, "--draft-block") && v && (!strcmp(v, "full") || !strcmp(v, "gamma")))
      block_gamma = !strcmp(v, "gamma");
    else if (!strcmp(o, "--path") && v) { if (dsp_tool_parse_path(v, &path)) return 2; }
    else if (!strcmp(o, "--broadcast") && v) { if (dsp_tool_parse_onoff(o, v, &broadcast)) return 2; }
    else if (!strcmp(o, "--verify") && v && (!strcmp(v, "rejection") || !strcmp(v, "exact")))
      verify = strcmp(v, "exact") ? DSP_VERIFY_REJECTION : DSP_VERIFY_EXACT;
    else if ((used = 0, br = dsp_tool_backend_option(&bk, o, v, &used)) != 1) { if (br < 0) return 2; }
    else {
      fprintf(stderr, "usage: bench_spec --model TARGET --draft DRAFT [--backend cpu|cuda [--tp N]] [--context C] "
                      "[--new N] [--batch 1,32] [--gamma N [--draft-block full|gamma]] "
                      "[--temperature T [--verify rejection|exact]] "
                      "[--path auto|original|sharded|replicated] "
                      "[--broadcast on|off]\n");
      return 2;
    }
    i += used;
  }
  if (!model || !draft) {
    fprintf(stderr, "bench_spec: --model and --draft are required\n");
    return 2;
  }
  int32_t bs[16], bmax;
  int nb;
  if (dsp_bench_batches(batches, bs, 16, &nb, &bmax)) {
    fprintf(stderr, "bench_spec: bad --batch '%s'\n", batches);
    return 2;
  }
  dsp_comm *comm;
  TRY(dsp_comm_auto_create(&comm));
  dsp_backend *be;
  TRY(dsp_tool_backend_create(&bk, comm, &be));
  dsp_draft_info di;
  TRY(dsp_draft_read_info(draft, &di));
  if (gamma > di.block_size) {
    fprintf(stderr, "bench_spec: --gamma %lld is above the draft's block_size %lld\n", (long long)gamma,
            (long long)di.block_size);
    return 2;
  }
  /* G drafted (and verified) tokens a round; Gb rows in the draft's block */
  const int32_t G = (int32_t)(gamma ? gamma : di.block_size), Gb = block_gamma ? G : (int32_t)di.block_size;
  const int32_t K = (int32_t)di.block_size, chunk = 2048;
  dsp_target_options o = {.max_seqs = bmax, .max_len = (int32_t)(C + N + K + 2),
                          .max_tokens = chunk > bmax * (G + 1) ? chunk : bmax * (G + 1), .taps = di.taps,
                          .ntaps = di.ntaps};
  dsp_target *t;
  TRY(dsp_target_load(be, model, &o, &t));
  dsp_draft_options dop = {.max_seqs = bmax, .max_len = (int32_t)(C + N + K + 2), .max_ctx = o.max_tokens,
                           .gamma = G, .block_gamma = block_gamma, .path = path, .no_broadcast = !broadcast};
  dsp_draft *d;
  TRY(dsp_draft_load(be, draft, t, &dop, &d));
  /* under TP every rank times the same calls; rank 0 prints, and the floors are one rank's share (1/TP of the
   * weights, the KV heads and the flops) over this rank's measured rates */
  const int root = dsp_comm_rank(comm) == 0;
  const double tp = (double)dsp_backend_tp_size(be);
  if (root) fprintf(stderr, "%s\n%s\n", dsp_target_report(t), dsp_draft_report(d));
  const dsp_target_info *in = dsp_target_info_of(t);
  const double H = (double)in->hidden, D = (double)in->head_dim, I = (double)in->intermediate, V = (double)in->vocab;
  const double per_layer = H * (in->heads + 2.0 * in->kv_heads) * D + in->heads * D * H + 3.0 * H * I;
  const double tparams = (double)in->layers * per_layer + V * H;
  const double R = (double)di.markov_rank, L = (double)di.layers;
  /* a proposal reads the draft's layers, its fc (new context rows only: small), the LM head once for the
   * block's base logits and W2 once per drafted token */
  const double dbytes = 2.0 * (L * per_layer + V * H + G * V * R);
  /* one rank's rates (CPU ranks in one process: measured on device 0's share of the threads) */
  const double bw = dsp_bench_copy_rate(be);
  const double rate = dsp_bench_product_rate(be, bk.kind == DSP_BACKEND_CUDA ? 8192 : 512, 4096, 4096);
  if (root) {
    printf("# bench_spec: %s + %s (%s, TP %.0f): target %.2f G parameters in products, draft %lld layers, gamma %d in "
           "blocks of %d rows, Markov rank %lld; context %lld, %lld new tokens, temperature %g%s; %s %.0f GB/s, bf16 "
           "products %.1f "
           "TFLOP/s%s\n", model, draft, bk.kind == DSP_BACKEND_CUDA ? "cuda" : "cpu", tp, tparams / 1e9,
           (long long)di.layers, G, Gb, (long long)di.markov_rank, (long long)C, (long long)N, (double)temp,
           temp > 0 ? (verify == DSP_VERIFY_EXACT ? " (exact verification)" : " (rejection)") : "",
           bk.kind == DSP_BACKEND_CUDA ? "copy" : "read", bw / 1e9,
           rate / 1e12, tp > 1 ? " (rank 0's; floors per rank)" : "");
    printf("# backend: %s\n", dsp_backend_describe(be)); /* the kernels the figures come from (AMX or the chain) */
    printf("| batch | call | ms | floor ms | of floor |\n|---|---|---|---|---|\n");
  }
  int32_t **pr = malloc((size_t)bmax * sizeof *pr), *len = malloc((size_t)bmax * 4);
  for (int32_t b = 0; b < bmax; b++) {
    pr[b] = malloc((size_t)C * 4);
    len[b] = (int32_t)C;
    for (int64_t i = 0; i < C; i++) pr[b][i] = tok(i, b, in->vocab);
  }
  const double kv_pos = 2.0 * 2.0 * (double)in->layers * in->kv_heads * D;
  const double dkv_pos = 2.0 * 2.0 * L * in->kv_heads * D;
  char proj[1024];
  int pn = 0;
  for (int bi = 0; bi < nb; bi++) {
    const int32_t B = bs[bi];
    dsp_generate_options go = {.max_new = (int32_t)N, .ignore_eos = 1, .temperature = temp, .seed = 1};
    dsp_spec_options so = {.gen = go, .gamma = G, .verify = verify};
    dsp_generate_stats ps, ss;
    for (int rep = 0; rep < 2; rep++) /* the first run captures the graphs */
      TRY(dsp_generate(t, B, (const int32_t *const *)pr, len, &go, NULL, NULL, NULL, &ps));
    for (int rep = 0; rep < 2; rep++)
      TRY(dsp_speculate(t, d, B, (const int32_t *const *)pr, len, &so, NULL, NULL, NULL, NULL, &ss));
    const double step = ps.decode_ms / (double)ps.decode_calls;
    const double calls = (double)ss.decode_calls;
    const double round = ss.decode_ms / calls, dr = ss.draft_ms / calls, vr = ss.verify_ms / calls;
    const double ctx = (double)B * (double)(C + N / 2);
    const double f_dec = floor_ms((2.0 * tparams + kv_pos * ctx) / tp, 2.0 * tparams * B / tp, bw, rate);
    const double f_ver = floor_ms((2.0 * tparams + kv_pos * ctx) / tp, 2.0 * tparams * B * (G + 1) / tp, bw, rate);
    const double f_dr = floor_ms((dbytes + dkv_pos * ctx) / tp, 2.0 * (L * per_layer * Gb + V * H * G) * B / tp, bw,
                                 rate);
    if (root) {
      printf("| %d | plain decode step | %.3f | %.3f | %.2fx |\n", B, step, f_dec, step / f_dec);
      printf("| %d | draft proposal (%d tokens) | %.3f | %.3f | %.2fx |\n", B, G, dr, f_dr, dr / f_dr);
      printf("| %d | verify (%d tokens) | %.3f | %.3f | %.2fx |\n", B, G + 1, vr, f_ver, vr / f_ver);
      printf("| %d | round (+ %.3f ms accept, roll back, append) | %.3f | %.3f | %.2fx |\n", B, round - dr - vr,
             round, f_dr + f_ver, round / (f_dr + f_ver));
      fflush(stdout);
    }
    if (tp > 1) { /* the collectives alone, at the sizes a step and a verify move */
      const double ar1 = dsp_bench_allreduce_ms(be, (int64_t)B * in->hidden);
      const double arv = dsp_bench_allreduce_ms(be, (int64_t)B * (G + 1) * in->hidden);
      const double ex1 = dsp_bench_exchange_ms(be, B), exv = dsp_bench_exchange_ms(be, (int64_t)B * (G + 1));
      if (root) {
        printf("| %d | all-reduce of a decode step's partials (%d x %lld fp32; %lld a step) | %.4f | - | - |\n", B, B,
               (long long)in->hidden, 2LL * in->layers, ar1);
        printf("| %d | all-reduce of a verify's partials (%d x %lld fp32) | %.4f | - | - |\n", B, B * (G + 1),
               (long long)in->hidden, arv);
        printf("| %d | (value, id) exchange among processes, %d and %d rows | %.4f, %.4f | - | - |\n", B, B,
               B * (G + 1), ex1, exv);
        fflush(stdout);
      }
    }
    const double amax = G + 1.0; /* a round commits at most gamma + 1 tokens */
    const double a1 = 6.17 < amax ? 6.17 : amax, a2 = 3.21 < amax ? 3.21 : amax, a3 = 5.5 < amax ? 5.5 : amax;
    pn += snprintf(proj + pn, sizeof proj - (size_t)pn,
                   "| %d | %.2f (%.2f) | %.2fx | %.2fx | %.2fx | %.2fx |\n", B,
                   (double)(ss.accepted + ss.rounds) / (double)ss.rounds, round / step, a1 * step / round,
                   a2 * step / round, a3 * step / round, a3 * f_dec / (f_dr + f_ver));
  }
  if (root)
    printf("\nprojected speedups (acceptance lengths: the DSpark paper's Qwen3-8B, gamma 7: GSM8K 6.17, Arena-Hard "
         "3.21; and 5.5; each at most gamma + 1)\n| batch | measured acceptance (round / step) | at 6.17 | at 3.21 "
         "| at 5.5 | at 5.5, floors "
         "|\n|---|---|---|---|---|---|\n%s",
         proj);
  double mem[64];
  dsp_bench_memory(be, mem);
  if (root) {
    printf("\nmemory in use per TP rank (%s), GB:",
           bk.kind == DSP_BACKEND_CUDA ? "the GPU's" : "the process's peak, the rate measurement's buffers included");
    for (int r = 0; r < (int)tp; r++) printf(" %.2f", mem[r] / 1e9);
    printf("\n");
  }
  for (int32_t b = 0; b < bmax; b++) free(pr[b]);
  free(pr), free(len);
  dsp_draft_free(d);
  dsp_target_free(t);
  dsp_backend_free(be);
  dsp_comm_free(comm);
  return 0;
}
