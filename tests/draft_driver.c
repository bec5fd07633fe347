/* A test driver of the DSpark draft through the public API: the target runs
 * each sequence's tokens once (with the draft's taps), then proposal j of
 * sequence b is made at position starts[b][j]: the draft's context first
 * gets the target's taps of the positions it lacks (so later proposals
 * append a few rows, as in speculative decoding), the anchor is
 * tokens[b][start]. All sequences propose together in each round j.
 *
 * usage: draft_driver TARGET_DIR DRAFT_DIR IN.safetensors OUT.safetensors [--backend cpu|cuda] [--tp N]
 *   IN: tokens [B, L] I64, lengths [B] I64, starts [B, J] I64 (increasing per
 *       row, start < length), optional temperature [B] F32, seed [B] I64,
 *       gamma [1] I64, slots [B] I64, tokens_only [1] I64 (no logits asked: the
 *       head's greedy variant where every temperature is 0; logits written 0)
 *   OUT: tokens [B, J, gamma] I64, logits [B, J, gamma, V] BF16,
 *        confidence [B, J, gamma] F32 (when the draft has the head) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dspark.h"

#define TRY(x)                                                                   \
  do {                                                                           \
    dsp_status s_ = (x);                                                         \
    if (s_ != DSP_OK) {                                                          \
      fprintf(stderr, "draft_driver: %s: %s\n", #x, dsp_error_message());        \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

static void *read_t(dsp_st_file *f, const char *name, dsp_dtype dt, int64_t *n, int64_t shape[2], int required) {
  dsp_dtype got;
  int32_t nd;
  int64_t sh[DSP_MAX_DIMS] = {0};
  *n = 0;
  if (dsp_st_info(f, name, &got, &nd, sh) != DSP_OK) {
    if (!required) return NULL;
    fprintf(stderr, "draft_driver: %s\n", dsp_error_message());
    exit(1);
  }
  if (got != dt || nd < 1) {
    fprintf(stderr, "draft_driver: input '%s' has the wrong dtype\n", name);
    exit(1);
  }
  int64_t e = 1;
  for (int32_t i = 0; i < nd; i++) e *= sh[i];
  void *p = malloc((size_t)(e ? e : 1) * dsp_dtype_size(dt));
  TRY(dsp_st_read_rows(f, name, 0, sh[0], p));
  *n = e;
  if (shape) shape[0] = sh[0], shape[1] = nd > 1 ? sh[1] : 1;
  return p;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: draft_driver TARGET_DIR DRAFT_DIR IN.safetensors OUT.safetensors [--backend cpu|cuda] [--tp N]\n");
    return 2;
  }
  const dsp_backend_kind kind =
      argc > 6 && !strcmp(argv[5], "--backend") && !strcmp(argv[6], "cuda") ? DSP_BACKEND_CUDA : DSP_BACKEND_CPU;
  dsp_comm *comm;
  TRY(dsp_comm_auto_create(&comm));
  dsp_st_file *in;
  TRY(dsp_st_open(argv[3], &in));
  int64_t n, tsh[2], ssh[2];
  int64_t *toks = read_t(in, "tokens", DSP_I64, &n, tsh, 1), *lens = read_t(in, "lengths", DSP_I64, &n, NULL, 1);
  int64_t *starts = read_t(in, "starts", DSP_I64, &n, ssh, 1);
  float *temp = read_t(in, "temperature", DSP_F32, &n, NULL, 0);
  int64_t *seed = read_t(in, "seed", DSP_I64, &n, NULL, 0), *g = read_t(in, "gamma", DSP_I64, &n, NULL, 0);
  int64_t *slots = read_t(in, "slots", DSP_I64, &n, NULL, 0);
  int64_t *tonly = read_t(in, "tokens_only", DSP_I64, &n, NULL, 0);
  int64_t *bgam = read_t(in, "block_gamma", DSP_I64, &n, NULL, 0);
  int64_t *rows = read_t(in, "rows", DSP_I64, &n, NULL, 0); /* each call's block rows (dsp_draft_batch.rows) */
  const int64_t B = tsh[0], L = tsh[1], J = ssh[1];
  dsp_backend *be;
  int32_t devices = 1; /* --tp N: N TP ranks in this process */
  for (int i = 5; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--tp")) devices = atoi(argv[i + 1]);
  dsp_backend_config bc = {.kind = kind, .comm = comm, .devices = devices};
  TRY(dsp_backend_create(&bc, &be));
  /* the target taps what the draft reads */
  dsp_draft_info di;
  TRY(dsp_draft_read_info(argv[2], &di));
  const int32_t *taps = di.taps, ntaps = di.ntaps;
  dsp_target_options to = {.max_seqs = (int32_t)B, .max_len = (int32_t)L, .max_tokens = (int32_t)L, .taps = taps,
                            .ntaps = ntaps};
  dsp_target *t;
  TRY(dsp_target_load(be, argv[1], &to, &t));
  const int64_t H = dsp_target_info_of(t)->hidden, V = dsp_target_info_of(t)->vocab;
  /* every sequence's taps, [ntaps, B * L, H] */
  dsp_bf16 *all = calloc((size_t)(ntaps * B * L * H), 2), *one = malloc((size_t)(ntaps * L * H) * 2);
  int32_t *ids = malloc((size_t)L * 4);
  for (int64_t b = 0; b < B; b++) {
    for (int64_t i = 0; i < lens[b]; i++) ids[i] = (int32_t)toks[b * L + i];
    int32_t sl = (int32_t)b, cnt = (int32_t)lens[b];
    dsp_target_batch tb = {.nseq = 1, .slot = &sl, .count = &cnt, .tokens = ids, .last_only = 1};
    int64_t sh[3] = {ntaps, lens[b], H};
    dsp_tensor tv = dsp_tensor_view(one, DSP_BF16, 3, sh);
    int64_t nx;
    dsp_target_outputs tout = {.next = &nx, .taps = &tv};
    TRY(dsp_target_forward(t, &tb, &tout));
    for (int64_t j = 0; j < ntaps; j++)
      memcpy(all + (j * B * L + b * L) * H, one + j * lens[b] * H, (size_t)(lens[b] * H) * 2);
  }
  dsp_draft_options o = {.max_seqs = (int32_t)(B + 2), .max_len = (int32_t)(L + 16), .max_ctx = (int32_t)(B * L),
                         .gamma = g ? (int32_t)g[0] : 0, .block_gamma = bgam ? (int32_t)bgam[0] : 0};
  dsp_draft *d;
  TRY(dsp_draft_load(be, argv[2], t, &o, &d));
  if (dsp_comm_rank(comm) == 0) fprintf(stderr, "%s\n", dsp_draft_report(d));
  const int64_t G = dsp_draft_info_of(d)->gamma;
  const int conf = dsp_draft_info_of(d)->confidence;
  int64_t *otok = calloc((size_t)(B * J * G), 8);
  dsp_bf16 *olog = calloc((size_t)(B * J * G * V), 2);
  float *oconf = calloc((size_t)(B * J * G), 4);
  int32_t *slot = malloc((size_t)B * 4), *row0 = malloc((size_t)B * 4), *count = malloc((size_t)B * 4);
  int32_t *anchor = malloc((size_t)B * 4);
  float *ctemp = malloc((size_t)B * 4);
  uint64_t *cseed = malloc((size_t)B * 8);
  int64_t *tk = malloc((size_t)(B * G) * 8);
  dsp_bf16 *lg = calloc((size_t)(B * G * V), 2);
  float *cf2 = malloc((size_t)(B * G) * 4);
  int64_t csh[3] = {ntaps, B * L, H};
  dsp_tensor ctxv = dsp_tensor_view(all, DSP_BF16, 3, csh);
  for (int64_t j = 0; j < J; j++) {
    for (int64_t b = 0; b < B; b++) {
      const int32_t sl = slots ? (int32_t)slots[b] : (int32_t)b;
      const int64_t have = dsp_draft_length(d, sl), st = starts[b * J + j];
      slot[b] = sl;
      row0[b] = (int32_t)(b * L + have);
      count[b] = (int32_t)(st - have);
      anchor[b] = (int32_t)toks[b * L + st];
      ctemp[b] = temp ? temp[b] : 0.0f;
      cseed[b] = seed ? (uint64_t)seed[b] : 0;
    }
    dsp_draft_batch db = {.nseq = (int32_t)B, .slot = slot, .ctx = &ctxv, .ctx_row0 = row0, .ctx_count = count,
                          .anchor = anchor, .temperature = temp ? ctemp : NULL, .seed = seed ? cseed : NULL,
                          .rows = rows ? (int32_t)rows[0] : 0};
    int64_t lsh[3] = {B, G, V};
    dsp_tensor lv = dsp_tensor_view(lg, DSP_BF16, 3, lsh);
    dsp_draft_outputs dout = {.tokens = tk, .logits = tonly && tonly[0] ? NULL : &lv,
                              .confidence = conf ? cf2 : NULL};
    TRY(dsp_draft_propose(d, &db, &dout));
    for (int64_t b = 0; b < B; b++) {
      memcpy(otok + (b * J + j) * G, tk + b * G, (size_t)G * 8);
      memcpy(olog + ((b * J + j) * G) * V, lg + b * G * V, (size_t)(G * V) * 2);
      if (conf) memcpy(oconf + (b * J + j) * G, cf2 + b * G, (size_t)G * 4);
    }
  }
  if (dsp_comm_rank(comm) == 0) {
    dsp_st_writer *w;
    TRY(dsp_st_writer_create(argv[4], &w));
    int64_t s3[3] = {B, J, G}, s4[4] = {B, J, G, V};
    dsp_tensor a = dsp_tensor_view(otok, DSP_I64, 3, s3), l4 = dsp_tensor_view(olog, DSP_BF16, 4, s4);
    TRY(dsp_st_writer_add(w, "tokens", &a));
    TRY(dsp_st_writer_add(w, "logits", &l4));
    if (conf) {
      dsp_tensor c3 = dsp_tensor_view(oconf, DSP_F32, 3, s3);
      TRY(dsp_st_writer_add(w, "confidence", &c3));
    }
    TRY(dsp_st_writer_finish(w));
  }
  free(all), free(one), free(ids), free(otok), free(olog), free(oconf), free(slot), free(row0), free(count);
  free(anchor), free(ctemp), free(cseed), free(tk), free(lg), free(cf2), free(toks), free(lens), free(starts);
  free(temp), free(seed), free(g), free(slots), free(tonly), free(bgam), free(rows);
  if (dsp_comm_rank(comm) == 0) fprintf(stderr, "draft_driver: %d captured proposals\n", (int)dsp_draft_graphs(d));
  dsp_draft_free(d);
  dsp_target_free(t);
  dsp_backend_free(be);
  dsp_st_close(in);
  dsp_comm_free(comm);
  return 0;
}
