/* The full-size multi-rank case: under mpirun -np 32 at B 32, gamma 7,
 * V 163840, R 256, H 7168 (the default; argv can shrink it), five replays with
 * changed inputs: every rank's tokens are identical across the original,
 * sharded and replicated paths, and identical on every rank. Prints the
 * comparisons made and the peak resident memory per rank. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cmocka.h>

#include "dspark.h"
#include "support/synth.h"

static int64_t g_B = 32, g_G = 7, g_V = 163840, g_R = 256, g_H = 7168;
#define REPLAYS 5

/* This process's one TP rank: its synthetic weights. */
static dsp_status synth_weights(void *ctx, int32_t size, int32_t rank, dsp_markov_weights *w) {
  (void)size, (void)rank;
  *w = ((dsp_synth_weights *)ctx)->w;
  return DSP_OK;
}

static void test_paths_agree(void **st) {
  (void)st;
  dsp_comm *c;
  assert_int_equal(dsp_comm_mpi_create(&c), DSP_OK);
  dsp_backend *be;
  dsp_backend_config bc = {.kind = DSP_BACKEND_CPU, .comm = c};
  assert_int_equal(dsp_backend_create(&bc, &be), DSP_OK);
  int rank = dsp_comm_rank(c), P = dsp_comm_size(c);
  dsp_markov_config cfg = {.vocab = g_V, .vocab_padded = g_V, .hidden = g_H, .rank = g_R, .gamma = g_G,
                         .max_batch = (int32_t)g_B, .path = DSP_PATH_AUTO, .broadcast = 1};
  dsp_synth_weights sw;
  assert_int_equal(dsp_synth_weights_create(&cfg, P, rank, 1, 7, &sw), DSP_OK);
  dsp_markov_head *h;
  assert_int_equal(dsp_markov_head_create(be, &cfg, synth_weights, &sw, &h), DSP_OK);
  /* the head holds its own copies of the weights */
  dsp_synth_weights_free(&sw);
  if (rank == 0) printf("%s\n", dsp_markov_head_report(h));
  assert_int_equal(dsp_markov_head_greedy_path(h), P <= g_V ? DSP_PATH_SHARDED : DSP_PATH_ORIGINAL);

  size_t nt = (size_t)(g_B * g_G);
  dsp_bf16 *hid = malloc(nt * (size_t)g_H * 2);
  int64_t *anchor = malloc((size_t)g_B * 8), *tok[3], *all = malloc(nt * 8 * (size_t)P);
  for (int p = 0; p < 3; p++) tok[p] = malloc(nt * 8);
  assert_non_null(hid);
  assert_non_null(all);
  static const dsp_path paths[3] = {DSP_PATH_ORIGINAL, DSP_PATH_SHARDED, DSP_PATH_REPLICATED};
  long long compared = 0, mismatched = 0, rank_mismatch = 0, distinct_ok = 1;
  for (int r = 0; r < REPLAYS; r++) {
    dsp_synth_fill(hid, (int64_t)nt, g_H, 0, 500 + (uint64_t)r, 1.0f); /* changed inputs each replay */
    for (int64_t b = 0; b < g_B; b++) anchor[b] = (b * 4099 + r * 65537 + 3) % g_V;
    int64_t sh[3] = {g_B, g_G, g_H};
    dsp_tensor hv = dsp_tensor_view(hid, DSP_BF16, 3, sh);
    dsp_markov_inputs in = {.batch = (int32_t)g_B, .hidden = &hv, .anchor = anchor};
    for (int p = 0; p < 3; p++) {
      assert_int_equal(dsp_markov_head_set_path(h, paths[p]), DSP_OK);
      dsp_markov_outputs out = {.tokens = tok[p]};
      assert_int_equal(dsp_markov_head_propose(h, &in, &out), DSP_OK);
    }
    for (int p = 1; p < 3; p++)
      for (size_t i = 0; i < nt; i++) {
        compared++;
        mismatched += tok[p][i] != tok[0][i];
      }
    /* every rank holds the same tokens */
    assert_int_equal(dsp_comm_allgather(c, tok[1], all, nt * 8), DSP_OK);
    for (int q = 0; q < P; q++) rank_mismatch += memcmp(all + (size_t)q * nt, tok[1], nt * 8) != 0;
    /* the proposals are not degenerate: rows differ */
    distinct_ok &= tok[0][0] != tok[0][nt - 1] || tok[0][1] != tok[0][nt - 2];
  }
  int64_t sums[4] = {compared, mismatched, rank_mismatch, distinct_ok ? 0 : 1};
  assert_int_equal(dsp_comm_allreduce(c, sums, sums, 4, DSP_I64, DSP_REDUCE_SUM), DSP_OK);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  int64_t rss[2] = {(int64_t)ru.ru_maxrss, (int64_t)ru.ru_maxrss};
  assert_int_equal(dsp_comm_allreduce(c, &rss[0], &rss[0], 1, DSP_I64, DSP_REDUCE_MAX), DSP_OK);
  assert_int_equal(dsp_comm_allreduce(c, &rss[1], &rss[1], 1, DSP_I64, DSP_REDUCE_SUM), DSP_OK);
  if (rank == 0) {
    printf("full-size parity: TP%d, B %lld, gamma %lld, V %lld, R %lld, H %lld, %d replays\n", P, (long long)g_B,
           (long long)g_G, (long long)g_V, (long long)g_R, (long long)g_H, REPLAYS);
    printf("  %lld token ids per rank per path; %lld comparisons against the original path over all ranks "
           "(sharded and replicated), %lld mismatches; ranks disagreeing: %lld\n",
           (long long)(REPLAYS * nt), (long long)sums[0], (long long)sums[1], (long long)sums[2]);
    printf("  peak resident memory per rank: max %.1f MiB, mean %.1f MiB\n", rss[0] / 1024.0,
           rss[1] / 1024.0 / P);
  }
  assert_int_equal(sums[0], (int64_t)P * 2 * REPLAYS * (int64_t)nt);
  assert_int_equal(sums[1], 0);
  assert_int_equal(sums[2], 0);
  assert_int_equal(sums[3], 0);
  for (int p = 0; p < 3; p++) free(tok[p]);
  free(hid);
  free(anchor);
  free(all);
  dsp_markov_head_free(h);
  dsp_backend_free(be);
  dsp_comm_free(c);
}

int main(int argc, char **argv) {
  if (argc == 6) {
    g_B = atoll(argv[1]); g_G = atoll(argv[2]); g_V = atoll(argv[3]); g_R = atoll(argv[4]); g_H = atoll(argv[5]);
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_paths_agree)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
