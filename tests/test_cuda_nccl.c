/* Parity of the CUDA head over NCCL: one process drives P GPUs (a thread per
 * rank, dsp_comm_nccl_create_group) for P = 1 (a communicator of one rank: the
 * NCCL paths on a one-GPU machine), 2, 3, 4 (3 forces padded shards); every
 * path (original, sharded with and without the full W2, replicated) and
 * broadcast setting must give the single-GPU tokens and logits bit for bit,
 * greedy and sampling. Then the F32 all-reduce over every P the machine has:
 * by the halving tree over ranks (x0 + (x1 + x2) for three; one rank's own
 * values at P = 1), at several counts, in place, and captured in a graph after
 * dsp_comm_reserve. Exits 77 (skipped) without a CUDA device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>

#include "comm/comm.h"
#include "backend/cuda/markov_cuda.h"
#include "kernels/cuda/common/device.h"
#include "test_cuda_ref.h"

#define MAXP 8

typedef struct {
  tr_model *m;
  dsp_comm *comm;
  int rank, P, full;
  tr_inputs *in;
  int64_t *tok[2];
  void *lg;
  dsp_status s;
  char err[512];
} rank_job;

static void *rank_main(void *arg) {
  rank_job *j = arg;
  const dsp_markov_config *c = &j->m->cfg;
  int64_t r0, vr, real;
  dsp_markov_rows(c->vocab_padded, j->P, j->rank, &r0, &vr, &real);
  dsp_markov_weights w = tr_weights(j->m);
  w.lm_local = tr_view2(j->m->lm + r0 * c->hidden, real, c->hidden);
  w.w2_local = tr_view2(j->m->w2 + r0 * c->rank, real, c->rank);
  w.has_w2_full = j->full;
  dsp_cuda_head *h = NULL;
  j->s = dsp_cuda_head_create(c, j->comm, &w, j->rank, NULL, &h);
  for (int smp = 0; smp < 2 && j->s == DSP_OK; smp++) {
    dsp_markov_inputs hi = tr_head_inputs(j->in, smp);
    dsp_tensor lv = tr_logits_view(j->lg, j->in->B, c);
    dsp_markov_outputs out = {.tokens = j->tok[smp], .logits = smp ? &lv : NULL};
    j->s = dsp_cuda_head_propose(h, &hi, &out);
  }
  if (j->s != DSP_OK) snprintf(j->err, sizeof j->err, "%s", dsp_error_message());
  if (h && j->rank == 0) printf("  %s\n", dsp_cuda_head_report(h));
  dsp_cuda_head_free(h);
  return NULL;
}

static void t_parity(void **st) {
  (void)st;
  const int n = dsp_cuda_device_count();
  dsp_markov_config c;
  memset(&c, 0, sizeof c);
  c.vocab = 40000;
  c.vocab_padded = 40064;
  c.hidden = 64;
  c.rank = 64;
  c.gamma = 4;
  c.max_batch = 8;
  tr_model m;
  tr_model_make(&m, &c, 0, 7);
  tr_inputs in;
  tr_inputs_make(&in, &c, 5, 0, 8);
  for (int b = 0; b < 5; b++) in.temp[b] = b % 2 ? 0.8f : 0.0f;
  const size_t nt = (size_t)(5 * c.gamma), nl = nt * (size_t)c.vocab;

  /* the single-GPU answer */
  int64_t *ref_tok[2] = {calloc(nt, 8), calloc(nt, 8)};
  uint16_t *ref_lg = calloc(nl, 2);
  {
    dsp_markov_weights w = tr_weights(&m);
    dsp_cuda_head *h = NULL;
    assert_int_equal(dsp_cuda_head_create(&c, NULL, &w, 0, NULL, &h), DSP_OK);
    for (int smp = 0; smp < 2; smp++) {
      dsp_markov_inputs hi = tr_head_inputs(&in, smp);
      dsp_tensor lv = tr_logits_view(ref_lg, 5, &c);
      dsp_markov_outputs out = {.tokens = ref_tok[smp], .logits = smp ? &lv : NULL};
      assert_int_equal(dsp_cuda_head_propose(h, &hi, &out), DSP_OK);
    }
    dsp_cuda_head_free(h);
  }
  long long compared = 0, mismatched = 0;
  for (int P = 1; P <= (n < 4 ? n : 4); P++) {
    int devs[MAXP];
    for (int r = 0; r < P; r++) devs[r] = r;
    const dsp_path paths[] = {DSP_PATH_ORIGINAL, DSP_PATH_SHARDED, DSP_PATH_REPLICATED};
    for (int p = 0; p < 3; p++)
      for (int bc = 0; bc < 2; bc++)
        for (int full = 1; full >= 0; full--) {
          if (!full && paths[p] != DSP_PATH_SHARDED) continue;
          dsp_comm *comms[MAXP];
          assert_int_equal(dsp_comm_nccl_create_group(P, devs, comms), DSP_OK);
          tr_model mm = m;
          mm.cfg.path = paths[p];
          mm.cfg.broadcast = bc;
          rank_job jobs[MAXP];
          pthread_t th[MAXP];
          printf("TP%d path %d broadcast %d full W2 %d\n", P, p, bc, full);
          for (int r = 0; r < P; r++) {
            memset(&jobs[r], 0, sizeof jobs[r]);
            jobs[r] = (rank_job){.m = &mm, .comm = comms[r], .rank = r, .P = P, .full = full, .in = &in};
            jobs[r].tok[0] = calloc(nt, 8);
            jobs[r].tok[1] = calloc(nt, 8);
            jobs[r].lg = calloc(nl, 2);
            pthread_create(&th[r], NULL, rank_main, &jobs[r]);
          }
          for (int r = 0; r < P; r++) pthread_join(th[r], NULL);
          for (int r = 0; r < P; r++) {
            if (jobs[r].s != DSP_OK) print_error("rank %d: %s\n", r, jobs[r].err);
            assert_int_equal(jobs[r].s, DSP_OK);
            for (int smp = 0; smp < 2; smp++)
              for (size_t i = 0; i < nt; i++) mismatched += jobs[r].tok[smp][i] != ref_tok[smp][i];
            mismatched += tr_logits_diff(jobs[r].lg, ref_lg, nl, 0);
            compared += (long long)(2 * nt + nl);
            free(jobs[r].tok[0]);
            free(jobs[r].tok[1]);
            free(jobs[r].lg);
            dsp_comm_free(comms[r]);
          }
        }
  }
  printf("NCCL parity: %lld values compared against one GPU, %lld mismatches\n", compared, mismatched);
  assert_int_equal(mismatched, 0);
  free(ref_tok[0]);
  free(ref_tok[1]);
  free(ref_lg);
  tr_inputs_free(&in);
  tr_model_free(&m);
}

/* Inputs where another order of the sum rounds differently: mixed signs and 48 binades. */
static float order_in(int r, size_t i) {
  uint32_t h = (uint32_t)(r * 2654435761u) ^ (uint32_t)(i * 40503u + 0x9e3779b9u);
  h ^= h >> 15, h *= 0x2c1b3c6du, h ^= h >> 12;
  const float m = 1.0f + (float)(h % 1000u) / 1000.0f;
  return ldexpf((h & 0x80000000u) ? -m : m, (int)((h >> 8) % 48u) - 24);
}

/* The halving tree over ranks [lo, hi): [lo, mid) + [mid, hi), mid = lo + (hi - lo) / 2. */
static float tree_want(int lo, int hi, size_t i) {
  if (hi - lo == 1) return order_in(lo, i);
  const int mid = lo + (hi - lo) / 2;
  volatile float l = tree_want(lo, mid, i), r = tree_want(mid, hi, i);
  return l + r;
}

typedef struct {
  dsp_comm *comm;
  int rank, P;
  size_t count;
  int graph;
  size_t differ;
  dsp_status s;
  char err[512];
} sum_job;

static void *sum_main(void *arg) {
  sum_job *j = arg;
  cudaSetDevice(j->rank);
  cudaStream_t st = NULL;
  float *d = NULL, *h = malloc(j->count * sizeof *h + 4);
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  j->s = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess &&
                 cudaMalloc((void **)&d, j->count * 4 + 4) == cudaSuccess && h
             ? DSP_OK
             : dsp_fail(DSP_ERR_DEVICE, "rank %d: no stream or buffers", j->rank);
  for (size_t i = 0; i < j->count && h; i++) h[i] = order_in(j->rank, i);
  if (j->s == DSP_OK && cudaMemcpy(d, h, j->count * 4, cudaMemcpyHostToDevice) != cudaSuccess)
    j->s = dsp_fail(DSP_ERR_DEVICE, "upload");
  if (j->s == DSP_OK) j->s = dsp_comm_set_stream(j->comm, st);
  if (j->s == DSP_OK && j->graph) {
    j->s = dsp_comm_reserve(j->comm, j->count);
    if (j->s == DSP_OK && cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
      j->s = dsp_fail(DSP_ERR_DEVICE, "capture");
    if (j->s == DSP_OK) j->s = dsp_comm_allreduce(j->comm, d, d, j->count, DSP_F32, DSP_REDUCE_SUM);
    if (cudaStreamEndCapture(st, &g) != cudaSuccess && j->s == DSP_OK) j->s = dsp_fail(DSP_ERR_DEVICE, "end capture");
    if (j->s == DSP_OK && (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess || cudaGraphLaunch(ge, st) != cudaSuccess))
      j->s = dsp_fail(DSP_ERR_DEVICE, "graph");
  } else if (j->s == DSP_OK) {
    j->s = dsp_comm_allreduce(j->comm, d, d, j->count, DSP_F32, DSP_REDUCE_SUM);
  }
  if (j->s == DSP_OK && (cudaStreamSynchronize(st) != cudaSuccess ||
                         cudaMemcpy(h, d, j->count * 4, cudaMemcpyDeviceToHost) != cudaSuccess))
    j->s = dsp_fail(DSP_ERR_DEVICE, "download");
  for (size_t i = 0; j->s == DSP_OK && i < j->count; i++) {
    volatile float want = tree_want(0, j->P, i);
    j->differ += memcmp(&h[i], (const void *)&want, 4) != 0;
  }
  if (j->s != DSP_OK) snprintf(j->err, sizeof j->err, "%s", dsp_error_message());
  if (ge) cudaGraphExecDestroy(ge);
  if (g) cudaGraphDestroy(g);
  cudaFree(d);
  if (st) cudaStreamDestroy(st);
  free(h);
  return NULL;
}

static void t_sum_order(void **st) {
  (void)st;
  const int n = dsp_cuda_device_count() < MAXP ? dsp_cuda_device_count() : MAXP;
  static const size_t counts[] = {7, 1000, 300001};
  for (int P = 1; P <= n; P++)
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
      for (int graph = 0; graph < 2; graph++) {
        int dev[MAXP];
        dsp_comm *comms[MAXP];
        for (int r = 0; r < P; r++) dev[r] = r;
        assert_int_equal(dsp_comm_nccl_create_group(P, dev, comms), DSP_OK);
        sum_job jobs[MAXP];
        pthread_t th[MAXP];
        for (int r = 0; r < P; r++) {
          jobs[r] = (sum_job){.comm = comms[r], .rank = r, .P = P, .count = counts[k], .graph = graph};
          assert_int_equal(pthread_create(&th[r], NULL, sum_main, &jobs[r]), 0);
        }
        for (int r = 0; r < P; r++) pthread_join(th[r], NULL);
        for (int r = 0; r < P; r++) {
          if (jobs[r].s != DSP_OK) fail_msg("P %d, %zu floats, graph %d, rank %d: %s", P, counts[k], graph, r, jobs[r].err);
          if (jobs[r].differ)
            fail_msg("P %d, %zu floats, graph %d, rank %d: %zu sums not in the tree's order", P, counts[k], graph, r,
                     jobs[r].differ);
          dsp_comm_free(comms[r]);
        }
        printf("  F32 all-reduce over %d GPUs, %zu floats%s: in the tree's order\n", P, counts[k],
               graph ? ", in a graph" : "");
      }
}

int main(void) {
  int n = dsp_cuda_device_count();
  if (n < 1) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(t_parity), cmocka_unit_test(t_sum_order)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
