/* bench_head: the Markov head's paths on synthetic weights, alone or under mpirun.
 * Each path replays the same changing inputs; rounds alternate between paths
 * (in an order shuffled anew each round);
 * each figure is the median over rounds of the per-round median of the
 * maximum-over-ranks time per proposal. Floors come from the copy bandwidth and
 * product rate measured in the same run (as `dspark info` measures them), for
 * the work the whole machine does (all ranks share its cores). Under the table:
 * the parity count (tokens compared against the first proposal on the same
 * inputs, whichever path ran it; mismatches). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "bench_util.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/markov_head_impl.h"
#include "support/ceilings.h"
#include "support/synth.h"
#ifdef DSPARK_HAVE_CUDA
#include "support/collectives_time.h"
#include "support/cuda_head_time.h"
#endif
#include "tool_common.h"

#define NSETS 4 /* input sets rotated through the replays */
#define MAXP 3

typedef struct {
  int64_t batch, gamma, vocab, rank, hidden, rounds, replays;
  int json, broadcast, npaths;
  dsp_path paths[MAXP];
  dsp_contract contract;
  dsp_tool_backend backend;
} bench_args;

typedef dsp_markov_head head_t;

static void bench_usage(FILE *f) {
  fprintf(f, "usage: bench_head [--batch 32] [--gamma 7] [--vocab 163840] [--rank 256] [--hidden 7168]\n"
             "                  [--rounds 5] [--replays 40] [--paths original,sharded,replicated]\n"
             "                  [--broadcast on|off] [--contract bf16|fp32-add] [--backend cpu|cuda] [--json]\n");
}

static int parse_paths(const char *v, bench_args *a) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s", v);
  a->npaths = 0;
  for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
    dsp_path p;
    if (a->npaths == MAXP || dsp_tool_parse_path(t, &p) || p == DSP_PATH_AUTO) return -1;
    a->paths[a->npaths++] = p;
  }
  return a->npaths ? 0 : -1;
}

static int parse_bench_args(int argc, char **argv, bench_args *a) {
  *a = (bench_args){.batch = 32, .gamma = 7, .vocab = 163840, .rank = 256, .hidden = 7168, .rounds = 5,
                    .replays = 40, .broadcast = 1, .npaths = 3,
                    .paths = {DSP_PATH_ORIGINAL, DSP_PATH_SHARDED, DSP_PATH_REPLICATED}};
  dsp_tool_backend_init(&a->backend);
  struct { const char *name; int64_t *dst, lo, hi; } num[] = {
      {"--batch", &a->batch, 1, 4096},        {"--gamma", &a->gamma, 1, 64},
      {"--vocab", &a->vocab, 1, 1 << 24},     {"--rank", &a->rank, 1, 8192},
      {"--hidden", &a->hidden, 1, 65536},     {"--rounds", &a->rounds, 1, 1000},
      {"--replays", &a->replays, 1, 100000}};
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int used = 1, found = 0, br;
    for (size_t j = 0; j < sizeof num / sizeof num[0] && !found; j++)
      if (!strcmp(o, num[j].name)) {
        found = 1;
        if (!v || dsp_tool_parse_i64(o, v, num[j].lo, num[j].hi, num[j].dst)) return -1;
      }
    if (found) {}
    else if (!strcmp(o, "--json")) { a->json = 1; used = 0; }
    else if (!strcmp(o, "--paths") && v) { if (parse_paths(v, a)) return -1; }
    else if (!strcmp(o, "--broadcast") && v) { if (dsp_tool_parse_onoff(o, v, &a->broadcast)) return -1; }
    else if (!strcmp(o, "--contract") && v) { if (dsp_tool_parse_contract(v, &a->contract)) return -1; }
    else if ((used = 0, br = dsp_tool_backend_option(&a->backend, o, v, &used)) != 1) { if (br < 0) return -1; }
    else {
      fprintf(stderr, "bench_head: unknown or incomplete option '%s'\n", o);
      return -1;
    }
    i += used;
  }
  return 0;
}

typedef struct {
  dsp_bf16 *hidden[NSETS];
  int64_t *anchor[NSETS];
  dsp_tensor view[NSETS];
} input_sets;

static dsp_status make_inputs(const bench_args *a, input_sets *in) {
  for (int s = 0; s < NSETS; s++) {
    size_t n = (size_t)(a->batch * a->gamma * a->hidden);
    in->hidden[s] = malloc(n * 2);
    in->anchor[s] = malloc((size_t)a->batch * 8);
    if (!in->hidden[s] || !in->anchor[s]) return dsp_fail(DSP_ERR_NOMEM, "bench: out of memory for inputs");
    dsp_synth_fill(in->hidden[s], a->batch * a->gamma, a->hidden, 0, 1000 + (uint64_t)s, 1.0f);
    for (int64_t b = 0; b < a->batch; b++) in->anchor[s][b] = (b * 7919 + s * 104729 + 17) % a->vocab;
    int64_t sh[3] = {a->batch, a->gamma, a->hidden};
    in->view[s] = dsp_tensor_view(in->hidden[s], DSP_BF16, 3, sh);
  }
  return DSP_OK;
}

static void free_inputs(input_sets *in) {
  for (int s = 0; s < NSETS; s++) {
    free(in->hidden[s]);
    free(in->anchor[s]);
  }
}

/* CUDA heads: median ms of the full proposal and of the Markov tail over
 * `replays` graph replays (CUDA events); with several GPUs the slowest one's. */
typedef struct {
  head_t *h;
  int32_t batch;
  int sampling, replays;
  float full[DSP_BACKEND_MAX_DEVICES], tail[DSP_BACKEND_MAX_DEVICES];
} time_job;

static dsp_status time_one(void *ctx, int dev) {
#ifdef DSPARK_HAVE_CUDA
  time_job *j = ctx;
  return dsp_bench_cuda_head_time(j->h->x[dev], j->batch, j->sampling, j->replays, &j->full[dev], &j->tail[dev]);
#else
  (void)ctx, (void)dev;
  return dsp_fail(DSP_ERR_UNSUPPORTED, "graph-replay timing is for the CUDA head");
#endif
}

static dsp_status head_time(head_t *h, int32_t batch, int sampling, int replays, float *full_ms, float *tail_ms) {
  time_job j = {.h = h, .batch = batch, .sampling = sampling, .replays = replays};
  DSP_TRY(dsp_backend_each(h->be, time_one, &j));
  *full_ms = *tail_ms = 0;
  for (int i = 0; i < h->n; i++) {
    if (j.full[i] > *full_ms) *full_ms = j.full[i];
    if (j.tail[i] > *tail_ms) *tail_ms = j.tail[i];
  }
  return DSP_OK;
}

typedef struct {
  double ms, lm_ms, tail_ms;
} path_result;

/* The bench proper, after weights exist. Returns per-path medians. */
/* heads[p] runs paths[p]: one CPU head switched between paths, or one CUDA
 * head per path (a CUDA head's path is captured in its graphs). CPU figures are
 * wall-clock per proposal; CUDA figures are CUDA-event medians over graph
 * replays of the proposal and of the Markov tail alone, after one proposal
 * that loads the round's input set (and gives the parity check its tokens). */
static dsp_status run_rounds(const bench_args *a, dsp_comm *comm, head_t **heads, input_sets *in,
                             path_result *res, long long *compared, long long *mismatched) {
  size_t nt = (size_t)(a->batch * a->gamma);
  int64_t *tokens = malloc(nt * 8), *ref = malloc(NSETS * nt * 8);
  double *rt = malloc(sizeof(double) * (size_t)a->replays * 3);
  double *per_round = malloc(sizeof(double) * (size_t)a->rounds * MAXP * 3);
  if (!tokens || !ref || !rt || !per_round) return dsp_fail(DSP_ERR_NOMEM, "bench: out of memory");
  int have_ref[NSETS] = {0};
  dsp_status s = DSP_OK;
  uint64_t sh = 0x9E3779B97F4A7C15ull; /* the same seed on every rank: the same order */
  for (int64_t r = 0; r < a->rounds && s == DSP_OK; r++) {
    /* each round runs the paths in a freshly shuffled order, so no path always
     * follows the same one (what ran before sets the clock a GPU's power
     * controller leaves; a fixed order favoured whichever path came first) */
    int order[MAXP];
    for (int q = 0; q < a->npaths; q++) order[q] = q;
    for (int q = a->npaths - 1; q > 0; q--) {
      sh ^= sh << 13, sh ^= sh >> 7, sh ^= sh << 17;
      const int j = (int)(sh % (uint64_t)(q + 1)), x = order[q];
      order[q] = order[j];
      order[j] = x;
    }
    for (int q = 0; q < a->npaths && s == DSP_OK; q++) {
      const int p = order[q];
      head_t *head = heads[p];
      int cuda = a->backend.kind == DSP_BACKEND_CUDA;
      s = cuda ? DSP_OK : dsp_markov_head_set_path(head, a->paths[p]);
      /* one untimed proposal so each round starts warm on this path */
      int set0 = cuda ? (int)(r % NSETS) : 0;
      dsp_markov_inputs hin = {.batch = (int32_t)a->batch, .hidden = &in->view[set0], .anchor = in->anchor[set0]};
      dsp_markov_outputs hout = {.tokens = tokens};
      if (s == DSP_OK) s = dsp_markov_head_propose(head, &hin, &hout);
      if (s == DSP_OK && cuda) {
        if (!have_ref[set0]) {
          memcpy(ref + set0 * nt, tokens, nt * 8);
          have_ref[set0] = 1;
        } else {
          for (size_t j = 0; j < nt; j++) *mismatched += tokens[j] != ref[set0 * nt + j];
          *compared += (long long)nt;
        }
        float t[2];
        s = head_time(head, (int32_t)a->batch, 0, (int)a->replays, &t[0], &t[1]);
        if (s == DSP_OK) s = dsp_comm_allreduce(comm, t, t, 2, DSP_F32, DSP_REDUCE_MAX);
        per_round[(0 * MAXP + p) * a->rounds + r] = t[0];
        per_round[(1 * MAXP + p) * a->rounds + r] = t[0] - t[1];
        per_round[(2 * MAXP + p) * a->rounds + r] = t[1];
        continue;
      }
      for (int64_t i = 0; i < a->replays && s == DSP_OK; i++) {
        int set = (int)(i % NSETS);
        hin.hidden = &in->view[set];
        hin.anchor = in->anchor[set];
        s = dsp_comm_barrier(comm);
        double t0 = dsp_bench_now_ms();
        if (s == DSP_OK) s = dsp_markov_head_propose(head, &hin, &hout);
        double lm = 0, tail = 0;
        float t[3] = {(float)(dsp_bench_now_ms() - t0), 0, 0};
        dsp_markov_head_last_timing(head, &lm, &tail);
        t[1] = (float)lm;
        t[2] = (float)tail;
        if (s == DSP_OK) s = dsp_comm_allreduce(comm, t, t, 3, DSP_F32, DSP_REDUCE_MAX);
        rt[i] = t[0];
        rt[a->replays + i] = t[1];
        rt[2 * a->replays + i] = t[2];
        if (!have_ref[set]) {
          memcpy(ref + set * nt, tokens, nt * 8);
          have_ref[set] = 1;
        } else {
          for (size_t j = 0; j < nt; j++) *mismatched += tokens[j] != ref[set * nt + j];
          *compared += (long long)nt;
        }
      }
      for (int c = 0; c < 3 && s == DSP_OK; c++)
        per_round[(c * MAXP + p) * a->rounds + r] = dsp_bench_median(rt + c * a->replays, (int)a->replays);
    }
  }
  for (int p = 0; p < a->npaths && s == DSP_OK; p++) {
    res[p].ms = dsp_bench_median(per_round + (0 * MAXP + p) * a->rounds, (int)a->rounds);
    res[p].lm_ms = dsp_bench_median(per_round + (1 * MAXP + p) * a->rounds, (int)a->rounds);
    res[p].tail_ms = dsp_bench_median(per_round + (2 * MAXP + p) * a->rounds, (int)a->rounds);
  }
  free(tokens);
  free(ref);
  free(rt);
  free(per_round);
  return s;
}

/* Bytes and flops of one proposal for the whole machine (every rank's work). */
typedef struct {
  double lm_bytes, lm_flops, step_bytes, step_flops;
} work;

static work path_work(const bench_args *a, int P, dsp_path path) {
  double M = (double)(a->batch * a->gamma), V = (double)a->vocab, H = (double)a->hidden, R = (double)a->rank;
  double B = (double)a->batch, full = path == DSP_PATH_SHARDED ? 1.0 : (double)P; /* full W2 on every rank */
  work w;
  w.lm_bytes = V * H * 2 + (double)P * M * H * 2 + M * V * 2 * (path == DSP_PATH_SHARDED ? 1.0 : (double)P + 1);
  w.lm_flops = 2 * M * H * V;
  w.step_bytes = full * (V * R * 2 + B * V * 2);
  w.step_flops = full * 2 * B * R * V;
  return w;
}

static double floor_ms(double bytes, double flops, double gbps, double gflops) {
  double a = bytes / (gbps * 1e9), b = flops / (gflops * 1e9);
  return (a > b ? a : b) * 1e3;
}

static void print_table(const bench_args *a, int P, const char *report, const path_result *res, double gbps,
                        double gflops, long long compared, long long mismatched) {
  double orig = 0;
  for (int p = 0; p < a->npaths; p++)
    if (a->paths[p] == DSP_PATH_ORIGINAL) orig = res[p].ms;
  if (a->json) {
    printf("{\"tp\": %d, \"batch\": %lld, \"gamma\": %lld, \"vocab\": %lld, \"rank\": %lld, \"hidden\": %lld, "
           "\"broadcast\": %s, \"copy_gbps\": %.2f, \"product_gflops\": %.2f, \"paths\": {",
           P, (long long)a->batch, (long long)a->gamma, (long long)a->vocab, (long long)a->rank,
           (long long)a->hidden, a->broadcast ? "true" : "false", gbps, gflops);
    for (int p = 0; p < a->npaths; p++) {
      work w = path_work(a, P, a->paths[p]);
      printf("%s\"%s\": {\"ms\": %.4f, \"lm_ms\": %.4f, \"tail_ms\": %.4f, \"floor_ms\": %.4f}", p ? ", " : "",
             dsp_path_name(a->paths[p]), res[p].ms, res[p].lm_ms, res[p].tail_ms,
             floor_ms(w.lm_bytes, w.lm_flops, gbps, gflops) +
                 (double)a->gamma * floor_ms(w.step_bytes, w.step_flops, gbps, gflops));
    }
    printf("}, \"tokens_compared\": %lld, \"mismatches\": %lld}\n", compared, mismatched);
    return;
  }
  printf("%s\n", report);
  printf("bench head: TP%d, batch %lld, gamma %lld, vocab %lld, rank %lld, hidden %lld; %lld rounds x %lld replays; "
         "per-step broadcast %s\n",
         P, (long long)a->batch, (long long)a->gamma, (long long)a->vocab, (long long)a->rank, (long long)a->hidden,
         (long long)a->rounds, (long long)a->replays, a->broadcast ? "on" : "off");
  printf("ceilings measured now: copy %.1f GB/s, bf16 product %.1f GFLOP/s (whole machine)\n", gbps, gflops);
  printf("%-11s %11s %8s %10s %10s %10s %10s %9s %9s\n", "path", "ms/propose", "vs orig", "LM ms", "LM floor",
         "step ms", "step floor", "step/flr", "GFLOP/s");
  for (int p = 0; p < a->npaths; p++) {
    work w = path_work(a, P, a->paths[p]);
    double lf = floor_ms(w.lm_bytes, w.lm_flops, gbps, gflops);
    double sf = floor_ms(w.step_bytes, w.step_flops, gbps, gflops);
    double step = res[p].tail_ms / (double)a->gamma;
    printf("%-11s %11.3f %8.2f %10.3f %10.3f %10.3f %10.3f %9.2f %9.1f\n", dsp_path_name(a->paths[p]), res[p].ms,
           orig > 0 ? res[p].ms / orig : 0.0, res[p].lm_ms, lf, step, sf, sf > 0 ? step / sf : 0.0,
           step > 0 ? w.step_flops / (step * 1e6) : 0.0);
  }
  printf("parity: %lld tokens compared against the first proposal on the same inputs, %lld mismatches\n", compared,
         mismatched);
}

/* The CUDA table: CUDA-event medians; the floors and the PyTorch peer are
 * bench_cuda_head's and bench/torch_peer.py's (scripts/device_check.sh). */
static void print_table_cuda(const bench_args *a, int P, const char *report, const path_result *res,
                             long long compared, long long mismatched) {
  double orig = 0;
  for (int p = 0; p < a->npaths; p++)
    if (a->paths[p] == DSP_PATH_ORIGINAL) orig = res[p].ms;
  int tp = P * a->backend.tp;
  if (a->json) {
    printf("{\"backend\": \"cuda\", \"tp\": %d, \"processes\": %d, \"broadcast\": %s, \"paths\": {", tp, P,
           a->broadcast ? "true" : "false");
    for (int p = 0; p < a->npaths; p++)
      printf("%s\"%s\": {\"ms\": %.4f, \"lm_ms\": %.4f, \"tail_ms\": %.4f}", p ? ", " : "",
             dsp_path_name(a->paths[p]), res[p].ms, res[p].lm_ms, res[p].tail_ms);
    printf("}, \"tokens_compared\": %lld, \"mismatches\": %lld}\n", compared, mismatched);
    return;
  }
  printf("%s\n", report);
  printf("bench head (cuda): TP%d (%d process%s), batch %lld, gamma %lld, vocab %lld, rank %lld, hidden %lld; "
         "%lld rounds x %lld graph replays; per-step broadcast %s; max over ranks of CUDA-event medians\n",
         tp, P, P > 1 ? "es" : "", (long long)a->batch, (long long)a->gamma, (long long)a->vocab,
         (long long)a->rank, (long long)a->hidden, (long long)a->rounds, (long long)a->replays,
         a->broadcast ? "on" : "off");
  printf("%-11s %11s %8s %12s %10s %10s\n", "path", "ms/propose", "vs orig", "LM+gather ms", "tail ms", "step ms");
  for (int p = 0; p < a->npaths; p++)
    printf("%-11s %11.4f %8.2f %12.4f %10.4f %10.4f\n", dsp_path_name(a->paths[p]), res[p].ms,
           orig > 0 ? res[p].ms / orig : 0.0, res[p].lm_ms, res[p].tail_ms, res[p].tail_ms / (double)a->gamma);
  printf("parity: %lld tokens compared against the first proposal on the same inputs (a proposal per round and "
         "path), %lld mismatches\n",
         compared, mismatched);
}

/* CUDA extras: the sampling variant's times, and under mpirun one small
 * all-gather (a (value, id) key per batch row) and one token broadcast alone. */
static dsp_status cuda_extras(const bench_args *a, dsp_comm *comm, head_t *h, const char *report) {
  (void)report;
  float t[2];
  DSP_TRY(head_time(h, (int32_t)a->batch, 1, (int)a->replays, &t[0], &t[1]));
  DSP_TRY(dsp_comm_allreduce(comm, t, t, 2, DSP_F32, DSP_REDUCE_MAX));
  if (dsp_comm_rank(comm) == 0 && !a->json)
    printf("sampling variant (%s head): %.4f ms per proposal, tail %.4f ms\n", dsp_path_name(a->paths[0]), t[0],
           t[1]);
#ifdef DSPARK_HAVE_CUDA
  if (dsp_comm_size(comm) > 1) {
    dsp_comm *nc;
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int dev = lr ? atoi(lr) % dsp_backend_cuda_devices() : 0;
    DSP_TRY(dsp_comm_nccl_create(comm, dev, &nc));
    float us[2];
    dsp_status s = dsp_cuda_time_collectives(nc, (size_t)a->batch * 8, (size_t)a->batch * 8, 200, &us[0], &us[1]);
    dsp_comm_free(nc);
    DSP_TRY(s);
    DSP_TRY(dsp_comm_allreduce(comm, us, us, 2, DSP_F32, DSP_REDUCE_MAX));
    if (dsp_comm_rank(comm) == 0 && !a->json)
      printf("collectives alone (NCCL, TP%d): all-gather of %lld B per rank %.1f us, broadcast of %lld B %.1f us\n",
             dsp_comm_size(comm), (long long)a->batch * 8, us[0], (long long)a->batch * 8, us[1]);
  }
#endif
  return DSP_OK;
}

/* --tp N: every rank's synthetic weights, made on demand and kept until the end. */
typedef struct {
  dsp_markov_config cfg;
  int full, n;
  dsp_synth_weights *sets;
} synth_ctx;

static dsp_status synth_rank(void *ctx, int32_t size, int32_t rank, dsp_markov_weights *w) {
  synth_ctx *c = ctx;
  if (!c->sets && !(c->sets = calloc((size_t)size, sizeof *c->sets)))
    return dsp_fail(DSP_ERR_NOMEM, "bench: out of memory");
  c->n = size;
  /* heads for several paths ask again: reuse the rank's set */
  if (!c->sets[rank].w1) DSP_TRY(dsp_synth_weights_create(&c->cfg, size, rank, c->full, 42, &c->sets[rank]));
  *w = c->sets[rank].w;
  return DSP_OK;
}

static void synth_ctx_free(synth_ctx *c) {
  for (int i = 0; c->sets && i < c->n; i++) dsp_synth_weights_free(&c->sets[i]);
  free(c->sets);
}

static dsp_status bench_main(const bench_args *a, dsp_comm *comm, int *mism) {
  int rank = dsp_comm_rank(comm), P = dsp_comm_size(comm);
  dsp_markov_config cfg = {.vocab = a->vocab, .vocab_padded = a->vocab, .hidden = a->hidden, .rank = a->rank,
                         .gamma = a->gamma, .max_batch = (int32_t)a->batch, .path = DSP_PATH_AUTO,
                         .contract = a->contract, .broadcast = a->broadcast};
  int full = 0;
  for (int p = 0; p < a->npaths; p++) full |= a->paths[p] != DSP_PATH_SHARDED;
  /* Ceilings first, before the weights fill memory: every rank measures at once
   * with its share of the threads, and the sum is what the machine gives this
   * layout of ranks (a rank waiting in a collective would spin and skew a
   * measurement made by rank 0 alone). */
  float ceil[2] = {0, 0};
  if (a->backend.kind == DSP_BACKEND_CUDA) {
    cfg.path = a->paths[0]; /* one CUDA head per path; the first is paths[0] */
  } else {
    ceil[0] = (float)dsp_cpu_measure_copy_gbps();
    ceil[1] = (float)dsp_cpu_measure_product_gflops(224, 7168, 16384, 0);
    DSP_TRY(dsp_comm_allreduce(comm, ceil, ceil, 2, DSP_F32, DSP_REDUCE_SUM));
  }
  head_t *head = NULL;
  input_sets in = {0};
  dsp_backend *be = NULL;
  dsp_status s = dsp_tool_backend_create(&a->backend, comm, &be);
  if (s == DSP_OK) s = dsp_comm_agree(comm, make_inputs(a, &in));
  synth_ctx sc = {.cfg = cfg, .full = full};
  head_t *heads[MAXP] = {NULL};
  if (s == DSP_OK) s = dsp_markov_head_create(be, &cfg, synth_rank, &sc, &head);
  for (int p = 0; p < a->npaths && s == DSP_OK; p++) {
    heads[p] = head;
    if (a->backend.kind != DSP_BACKEND_CUDA || p == 0) continue;
    dsp_markov_config c = cfg;
    c.path = a->paths[p];
    s = dsp_markov_head_create(be, &c, synth_rank, &sc, &heads[p]);
  }
  char report[1536] = "";
  if (s == DSP_OK) snprintf(report, sizeof report, "%s", dsp_markov_head_report(head));
  path_result res[MAXP] = {{0}};
  long long compared = 0, mismatched = 0;
  if (s == DSP_OK) s = dsp_comm_agree(comm, run_rounds(a, comm, heads, &in, res, &compared, &mismatched));
  if (s == DSP_OK) {
    int64_t c[2] = {compared, mismatched};
    s = dsp_comm_allreduce(comm, c, c, 2, DSP_I64, DSP_REDUCE_SUM);
    if (s == DSP_OK && a->backend.kind == DSP_BACKEND_CUDA) s = cuda_extras(a, comm, heads[0], report);
    if (s == DSP_OK && rank == 0 && a->backend.kind == DSP_BACKEND_CUDA)
      print_table_cuda(a, P, report, res, (long long)c[0], (long long)c[1]);
    else if (s == DSP_OK && rank == 0)
      print_table(a, P, report, res, ceil[0], ceil[1], (long long)c[0], (long long)c[1]);
    *mism = c[1] != 0;
  }
  for (int p = 1; p < a->npaths; p++)
    if (heads[p] != head) dsp_markov_head_free(heads[p]);
  dsp_markov_head_free(head);
  synth_ctx_free(&sc);
  free_inputs(&in);
  dsp_backend_free(be);
  return s;
}

int main(int argc, char **argv) {
  bench_args a;
  if (parse_bench_args(argc, argv, &a)) {
    bench_usage(stderr);
    return 2;
  }
  if (dsp_settings_check() != DSP_OK) {
    fprintf(stderr, "bench_head: error: %s\n", dsp_error_message());
    return 2;
  }
  dsp_comm *comm;
  if (dsp_comm_auto_create(&comm) != DSP_OK) {
    fprintf(stderr, "bench_head: error: %s\n", dsp_error_message());
    return 1;
  }
  int mism = 0;
  dsp_status s = bench_main(&a, comm, &mism);
  if (s != DSP_OK && dsp_comm_rank(comm) == 0) fprintf(stderr, "bench_head: error: %s\n", dsp_error_message());
  dsp_comm_free(comm);
  return s != DSP_OK ? 1 : (mism ? 3 : 0);
}
