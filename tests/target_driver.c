/* A test driver of the target model through the public API: teacher-forced
 * runs of a batch of sequences split into calls by a schedule, writing every
 * position's logits, selected ids and taps (rank 0).
 *
 * usage: target_driver MODEL_DIR IN.safetensors OUT.safetensors [--backend cpu|cuda] [--tp N]
 *   IN: tokens [B, L] I64 (row b's first lengths[b] are real), lengths [B] I64,
 *       chunks [C] I64 (call c brings min(chunks[c], left) tokens of every
 *       unfinished sequence; the last chunk repeats), optional taps [n] I64,
 *       optional slots [B] I64 (default 0..B-1), optional truncate [B] I64
 *       (after the run, each slot is cut to that length and its tokens from
 *       there are run again in one call: the logits written are the rerun's),
 *       optional tokens2 [B, L] I64 (the rerun's tokens from the cut on; default
 *       tokens), optional temperature [B] F32 and seed [B] I64 (selection by
 *       Gumbel-max), optional last_only [1] I64 (only each call's last row of
 *       every sequence selects; the other positions' outputs stay zero),
 *       optional max_len [1] I64 (the cache's length; default L)
 *   OUT: logits [B, L, V] BF16, next [B, L] I64, taps [n, B, L, H] BF16 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dspark.h"

#define TRY(x)                                                                     \
  do {                                                                             \
    dsp_status s_ = (x);                                                           \
    if (s_ != DSP_OK) {                                                            \
      fprintf(stderr, "target_driver: %s: %s\n", #x, dsp_error_message());         \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

/* A copy of tensor `name` of dtype dt (NULL when absent and not required);
 * its element count in *n and its first dimension in *rows. */
static void *read_t(dsp_st_file *f, const char *name, dsp_dtype dt, int64_t *n, int64_t *rows, int required) {
  dsp_dtype got;
  int32_t nd;
  int64_t sh[DSP_MAX_DIMS];
  *n = 0;
  if (dsp_st_info(f, name, &got, &nd, sh) != DSP_OK) {
    if (!required) return NULL;
    fprintf(stderr, "target_driver: %s\n", dsp_error_message());
    exit(1);
  }
  if (got != dt || nd < 1) {
    fprintf(stderr, "target_driver: input '%s' has the wrong dtype or no dimensions\n", name);
    exit(1);
  }
  int64_t e = 1;
  for (int32_t i = 0; i < nd; i++) e *= sh[i];
  void *p = malloc((size_t)(e ? e : 1) * dsp_dtype_size(dt));
  TRY(dsp_st_read_rows(f, name, 0, sh[0], p));
  *n = e;
  if (rows) *rows = sh[0];
  return p;
}

static int64_t *read_i64(dsp_st_file *f, const char *name, int64_t *n, int required) {
  return read_t(f, name, DSP_I64, n, NULL, required);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: target_driver MODEL_DIR IN.safetensors OUT.safetensors [--backend cpu|cuda] [--tp N]\n");
    return 2;
  }
  dsp_backend_kind kind = argc > 5 && !strcmp(argv[4], "--backend") && !strcmp(argv[5], "cuda") ? DSP_BACKEND_CUDA
                                                                                                 : DSP_BACKEND_CPU;
  dsp_comm *comm;
  TRY(dsp_comm_auto_create(&comm));
  const int rank = dsp_comm_rank(comm);
  dsp_st_file *in;
  TRY(dsp_st_open(argv[2], &in));
  int64_t ntk, B;
  int64_t *toks = read_t(in, "tokens", DSP_I64, &ntk, &B, 1);
  const int64_t L = ntk / B;
  int64_t nl, nc, ntap, nslot, ntr;
  int64_t *len = read_i64(in, "lengths", &nl, 1), *chunks = read_i64(in, "chunks", &nc, 1);
  int64_t *taps64 = read_i64(in, "taps", &ntap, 0), *slots = read_i64(in, "slots", &nslot, 0);
  int64_t *trunc = read_i64(in, "truncate", &ntr, 0);
  int64_t ntemp, ntok2;
  float *temp = read_t(in, "temperature", DSP_F32, &ntemp, NULL, 0);
  int64_t nseed, nlo;
  int64_t *seed = read_i64(in, "seed", &nseed, 0), *lo = read_i64(in, "last_only", &nlo, 0);
  const int last_only = lo && lo[0];
  int64_t nml;
  int64_t *ml = read_i64(in, "max_len", &nml, 0);
  int64_t *tok2 = read_i64(in, "tokens2", &ntok2, 0);
  int32_t taps[64];
  for (int64_t i = 0; i < ntap; i++) taps[i] = (int32_t)taps64[i];
  dsp_backend *be;
  int32_t devices = 1; /* --tp N: N TP ranks in this process */
  for (int i = 4; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--tp")) devices = atoi(argv[i + 1]);
  dsp_backend_config bc = {.kind = kind, .comm = comm, .devices = devices};
  TRY(dsp_backend_create(&bc, &be));
  dsp_target_options o = {.max_seqs = (int32_t)(B + 2), .max_len = (int32_t)(ml ? ml[0] : L), .max_tokens = (int32_t)(B * L),
                          .taps = taps, .ntaps = (int32_t)ntap};
  dsp_target *t;
  TRY(dsp_target_load(be, argv[1], &o, &t));
  if (rank == 0) fprintf(stderr, "%s\n", dsp_target_report(t));
  const int64_t V = dsp_target_info_of(t)->vocab, H = dsp_target_info_of(t)->hidden;
  dsp_bf16 *logits = calloc((size_t)(B * L * V), 2), *tap_out = calloc((size_t)((ntap ? ntap : 1) * B * L * H), 2);
  int64_t *next = calloc((size_t)(B * L), 8);
  int32_t *ctok = malloc((size_t)(B * L) * 4), *cslot = malloc((size_t)B * 4), *ccount = malloc((size_t)B * 4);
  int64_t *done = calloc((size_t)B, 8), *rowb = malloc((size_t)(B * L) * 8), *rowp = malloc((size_t)(B * L) * 8);
  float *ctemp = malloc((size_t)B * 4);
  uint64_t *cseed = malloc((size_t)B * 8);
  dsp_bf16 *lg = malloc((size_t)(B * L * V) * 2), *tp = malloc((size_t)((ntap ? ntap : 1) * B * L * H) * 2);
  int64_t *nx = malloc((size_t)(B * L) * 8);
  for (int64_t c = 0, phase = 0; phase < 2; c++) {
    /* phase 0: the schedule; phase 1: after truncation, the rest in one call */
    int32_t ns = 0, nt = 0, nsel = 0;
    for (int64_t b = 0; b < B; b++) {
      const int64_t left = len[b] - done[b];
      if (left <= 0) continue;
      const int64_t k = phase ? left : (chunks[c < nc ? c : nc - 1] < left ? chunks[c < nc ? c : nc - 1] : left);
      cslot[ns] = (int32_t)(slots ? slots[b] : b);
      ccount[ns] = (int32_t)k;
      ctemp[ns] = temp ? temp[b] : 0.0f;
      cseed[ns] = seed ? (uint64_t)seed[b] : 0;
      for (int64_t i = 0; i < k; i++) {
        ctok[nt] = (int32_t)(phase && tok2 ? tok2 : toks)[b * L + done[b] + i];
        nt++;
        if (!last_only || i == k - 1) {
          rowb[nsel] = b;
          rowp[nsel] = done[b] + i;
          nsel++;
        }
      }
      done[b] += k;
      ns++;
    }
    if (ns == 0) {
      if (phase == 0 && trunc) {
        for (int64_t b = 0; b < B; b++) {
          TRY(dsp_target_truncate(t, (int32_t)(slots ? slots[b] : b), trunc[b]));
          done[b] = trunc[b];
        }
        phase = 1;
        c = -1;
        continue;
      }
      break;
    }
    dsp_target_batch bt = {.nseq = ns, .slot = cslot, .count = ccount, .tokens = ctok,
                           .last_only = last_only, .temperature = temp ? ctemp : NULL, .seed = seed ? cseed : NULL};
    dsp_tensor lv = dsp_tensor_2d(lg, DSP_BF16, nsel, V);
    int64_t tsh[3] = {ntap, nt, H};
    dsp_tensor tv = dsp_tensor_view(tp, DSP_BF16, 3, tsh);
    dsp_target_outputs out = {.next = nx, .logits = &lv, .taps = ntap ? &tv : NULL};
    TRY(dsp_target_forward(t, &bt, &out));
    for (int32_t r = 0; r < nsel; r++) {
      const int64_t b = rowb[r], p = rowp[r];
      memcpy(logits + (size_t)((b * L + p) * V), lg + (size_t)r * (size_t)V, (size_t)V * 2);
      next[b * L + p] = nx[r];
    }
    /* taps cover every new token, in batch order */
    for (int64_t b = 0, r = 0; b < B; b++) {
      int64_t k = 0;
      for (int32_t q = 0; q < ns; q++)
        if (cslot[q] == (int32_t)(slots ? slots[b] : b)) k = ccount[q];
      for (int64_t j = 0; j < k; j++, r++)
        for (int64_t i = 0; i < ntap; i++)
          memcpy(tap_out + (size_t)(((i * B + b) * L + done[b] - k + j) * H), tp + (size_t)((i * nt + r) * H),
                 (size_t)H * 2);
    }
    if (phase == 1) break;
  }
  if (rank == 0) {
    dsp_st_writer *w;
    TRY(dsp_st_writer_create(argv[3], &w));
    int64_t ls[3] = {B, L, V}, ns2[2] = {B, L}, ts[4] = {ntap, B, L, H};
    dsp_tensor a = dsp_tensor_view(logits, DSP_BF16, 3, ls), n2 = dsp_tensor_view(next, DSP_I64, 2, ns2);
    TRY(dsp_st_writer_add(w, "logits", &a));
    TRY(dsp_st_writer_add(w, "next", &n2));
    if (ntap) {
      dsp_tensor tv = dsp_tensor_view(tap_out, DSP_BF16, 4, ts);
      TRY(dsp_st_writer_add(w, "taps", &tv));
    }
    TRY(dsp_st_writer_finish(w));
  }
  free(logits), free(tap_out), free(next), free(ctok), free(cslot), free(ccount), free(done), free(rowb), free(rowp);
  free(ctemp), free(cseed), free(lg), free(tp), free(nx), free(len), free(chunks), free(taps64), free(slots), free(trunc);
  free(seed), free(lo), free(ml), free(toks), free(tok2), free(temp);
  dsp_target_free(t);
  dsp_backend_free(be);
  dsp_st_close(in);
  dsp_comm_free(comm);
  return 0;
}
