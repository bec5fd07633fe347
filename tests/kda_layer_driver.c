/* A test driver of the KDA layer through the public API: sequences of hidden
 * states run through one Kimi-Linear KDA layer in calls given by a schedule,
 * writing every token's output (rank 0).
 *
 * usage: kda_layer_driver MODEL_DIR IN.safetensors OUT.safetensors [--backend cpu|cuda] [--plan] [--tp N]
 *   IN: x [T, hidden] BF16 (sequence 0's tokens, then sequence 1's, ...),
 *       lengths [B] I64, layer [1] I64 (0-based), chunks [C] I64 (call c brings
 *       min(chunks[c], left) tokens of every unfinished sequence; the last chunk
 *       repeats), optional forms [C] I64 (0 chunked, 1 recurrent; default 0;
 *       the last repeats), optional slots [B] I64 (default 0 .. B-1);
 *       optional verification after the schedule: vx [V, hidden] BF16 with
 *       vlens [B] I64 (each sequence's tokens, one kept recurrent call), accept
 *       [B] I64 (the prefix each keeps), cx [C, hidden] BF16 with clens [B] I64
 *       (one recurrent call from there)
 *   OUT: y [T, hidden] BF16; with verification also vy [V, hidden], cy [C, hidden]
 * --plan: every call's batch staged once (dsp_kda_plan) and run by two handles of the layer, whose outputs
 * must be the same bits (as two layers of one model sharing the plan) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dspark.h"

#define TRY(x)                                                                    \
  do {                                                                            \
    dsp_status s_ = (x);                                                          \
    if (s_ != DSP_OK) {                                                           \
      fprintf(stderr, "kda_layer_driver: %s\n", dsp_error_message());             \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

static void *read_t(dsp_st_file *f, const char *name, dsp_dtype dt, int64_t *n, int64_t *cols, int required) {
  dsp_dtype got;
  int32_t nd;
  int64_t sh[DSP_MAX_DIMS];
  *n = 0;
  if (dsp_st_info(f, name, &got, &nd, sh) != DSP_OK) {
    if (!required) return NULL;
    fprintf(stderr, "kda_layer_driver: %s\n", dsp_error_message());
    exit(1);
  }
  if (got != dt || nd < 1 || nd > 2) {
    fprintf(stderr, "kda_layer_driver: input '%s' has the wrong dtype or rank\n", name);
    exit(1);
  }
  const int64_t e = sh[0] * (nd > 1 ? sh[1] : 1);
  void *p = malloc((size_t)(e ? e : 1) * dsp_dtype_size(dt));
  TRY(dsp_st_read_rows(f, name, 0, sh[0], p));
  *n = sh[0];
  if (cols) *cols = nd > 1 ? sh[1] : 1;
  return p;
}

typedef struct {
  dsp_kda_layer *L, *L2; /* L2 and plan: --plan */
  dsp_kda_plan *plan;
  dsp_bf16 *y2;          /* L2's outputs */
} runner;

/* One call: directly, or staged once and run by both handles (their outputs compared). */
static void run(const runner *r, const dsp_kda_batch *kb, const dsp_tensor *xv, dsp_tensor *yv) {
  if (!r->plan) {
    TRY(dsp_kda_layer_forward(r->L, kb, xv, yv));
    return;
  }
  TRY(dsp_kda_plan_stage(r->plan, kb));
  TRY(dsp_kda_layer_forward_plan(r->L, r->plan, xv, yv));
  dsp_tensor y2 = dsp_tensor_2d(r->y2, DSP_BF16, yv->shape[0], yv->shape[1]);
  TRY(dsp_kda_layer_forward_plan(r->L2, r->plan, xv, &y2));
  if (memcmp(y2.data, yv->data, (size_t)(yv->shape[0] * yv->shape[1]) * 2)) {
    fprintf(stderr, "kda_layer_driver: two layers on one plan gave different outputs\n");
    exit(1);
  }
}

int main(int argc, char **argv) {
  int32_t devices = 1; /* --tp N (the last arguments): N TP ranks in this process */
  if (argc > 5 && !strcmp(argv[argc - 2], "--tp")) {
    devices = atoi(argv[argc - 1]);
    argc -= 2;
  }
  const int plan = argc > 4 && !strcmp(argv[argc - 1], "--plan");
  if (plan) argc--;
  const int backend_arg = argc == 6 && !strcmp(argv[4], "--backend");
  if (argc != 4 && !(backend_arg && (!strcmp(argv[5], "cpu") || !strcmp(argv[5], "cuda")))) {
    fprintf(stderr, "usage: kda_layer_driver MODEL_DIR IN.safetensors OUT.safetensors [--backend cpu|cuda] [--plan] [--tp N]\n");
    return 2;
  }
  const dsp_backend_kind kind = backend_arg && !strcmp(argv[5], "cuda") ? DSP_BACKEND_CUDA : DSP_BACKEND_CPU;
  dsp_comm *comm;
  TRY(dsp_comm_auto_create(&comm));
  dsp_st_file *in;
  TRY(dsp_st_open(argv[2], &in));
  int64_t T, Hd, B, nl, C, nf = 0, ns = 0;
  dsp_bf16 *x = read_t(in, "x", DSP_BF16, &T, &Hd, 1);
  int64_t *lens = read_t(in, "lengths", DSP_I64, &B, NULL, 1), *layer = read_t(in, "layer", DSP_I64, &nl, NULL, 1);
  int64_t *chunks = read_t(in, "chunks", DSP_I64, &C, NULL, 1), *forms = read_t(in, "forms", DSP_I64, &nf, NULL, 0);
  int64_t *slots = read_t(in, "slots", DSP_I64, &ns, NULL, 0);
  int64_t nv = 0, nc = 0, nvl = 0, ncl = 0, na = 0, hv = 0, hc = 0;
  dsp_bf16 *vx = read_t(in, "vx", DSP_BF16, &nv, &hv, 0), *cxx = read_t(in, "cx", DSP_BF16, &nc, &hc, 0);
  int64_t *vlens = read_t(in, "vlens", DSP_I64, &nvl, NULL, 0), *clens = read_t(in, "clens", DSP_I64, &ncl, NULL, 0);
  int64_t *acc = read_t(in, "accept", DSP_I64, &na, NULL, 0);
  const int verify = vx && cxx && vlens && clens && acc;
  if ((vx || cxx || vlens || clens || acc) &&
      (!verify || nvl != B || ncl != B || na != B || hv != Hd || hc != Hd)) {
    fprintf(stderr, "kda_layer_driver: verification needs vx, vlens, accept, cx and clens for every sequence\n");
    return 1;
  }
  int64_t vmax = 0, cap = T > nv ? T : nv;
  cap = cap > nc ? cap : nc;
  for (int64_t b = 0; verify && b < B; b++) vmax = vlens[b] > vmax ? vlens[b] : vmax;
  int64_t sum = 0, maxslot = B - 1;
  for (int64_t b = 0; b < B; b++) sum += lens[b];
  for (int64_t b = 0; b < ns; b++) maxslot = slots[b] > maxslot ? slots[b] : maxslot;
  if (sum != T || C < 1 || (ns && ns != B)) {
    fprintf(stderr, "kda_layer_driver: lengths must add up to x's rows, chunks must be given\n");
    return 1;
  }
  dsp_backend_config bc = {.kind = kind, .comm = comm, .devices = devices};
  dsp_backend *be;
  TRY(dsp_backend_create(&bc, &be));
  dsp_kda_layer_options o = {.layer = (int32_t)layer[0], .max_seqs = (int32_t)maxslot + 1, .max_tokens = (int32_t)cap,
                             .verify = (int32_t)vmax};
  dsp_kda_layer *L;
  TRY(dsp_kda_layer_load(be, argv[1], &o, &L));
  if (dsp_comm_rank(comm) == 0) fprintf(stderr, "%s\n", dsp_kda_layer_report(L));
  runner rn = {.L = L};
  if (plan) {
    TRY(dsp_kda_layer_load(be, argv[1], &o, &rn.L2));
    TRY(dsp_kda_plan_create(be, &o, &rn.plan));
    rn.y2 = malloc((size_t)(cap * Hd) * 2);
  }
  dsp_bf16 *y = calloc((size_t)(T * Hd), 2), *cx = malloc((size_t)(cap * Hd) * 2), *cy = malloc((size_t)(cap * Hd) * 2);
  int64_t *done = calloc((size_t)B, 8), *start = malloc((size_t)B * 8);
  int32_t *slot = malloc((size_t)B * 4), *count = malloc((size_t)B * 4), *which = malloc((size_t)B * 4);
  uint8_t *fresh = malloc((size_t)B);
  for (int64_t b = 0, at = 0; b < B; at += lens[b], b++) start[b] = at;
  for (int64_t c = 0;; c++) {
    const int64_t ch = chunks[c < C ? c : C - 1];
    int32_t n = 0;
    int64_t t = 0;
    for (int64_t b = 0; b < B; b++) {
      if (done[b] >= lens[b]) continue;
      const int64_t k = lens[b] - done[b] < ch ? lens[b] - done[b] : ch;
      memcpy(cx + t * Hd, x + (start[b] + done[b]) * Hd, (size_t)(k * Hd) * 2);
      slot[n] = ns ? (int32_t)slots[b] : (int32_t)b, count[n] = (int32_t)k, fresh[n] = done[b] == 0;
      which[n++] = (int32_t)b;
      t += k;
    }
    if (!n) break;
    dsp_kda_batch kb = {.nseq = n, .slot = slot, .count = count, .fresh = fresh,
                        .form = nf ? (int)forms[c < nf ? c : nf - 1] : DSP_KDA_CHUNKED};
    dsp_tensor xv = dsp_tensor_2d(cx, DSP_BF16, t, Hd), yv = dsp_tensor_2d(cy, DSP_BF16, t, Hd);
    run(&rn, &kb, &xv, &yv);
    for (int32_t i = 0, r = 0; i < n; r += count[i], i++) {
      const int64_t b = which[i];
      memcpy(y + (start[b] + done[b]) * Hd, cy + (int64_t)r * Hd, (size_t)(count[i] * Hd) * 2);
      done[b] += count[i];
    }
  }
  dsp_bf16 *vy = verify ? malloc((size_t)(nv * Hd) * 2) : NULL, *cyy = verify ? malloc((size_t)(nc * Hd) * 2) : NULL;
  if (verify) { /* one kept call, each sequence's accepted prefix, one call from there */
    int32_t n = 0;
    for (int64_t b = 0; b < B; b++) slot[n] = ns ? (int32_t)slots[b] : (int32_t)b, count[n] = (int32_t)vlens[b], n++;
    dsp_kda_batch kb = {.nseq = n, .slot = slot, .count = count, .form = DSP_KDA_RECURRENT, .keep = 1};
    dsp_tensor xv = dsp_tensor_2d(vx, DSP_BF16, nv, Hd), yv = dsp_tensor_2d(vy, DSP_BF16, nv, Hd);
    run(&rn, &kb, &xv, &yv);
    for (int64_t b = 0; b < B; b++) TRY(dsp_kda_layer_accept(L, slot[b], (int32_t)acc[b]));
    for (int64_t b = 0; rn.L2 && b < B; b++) TRY(dsp_kda_layer_accept(rn.L2, slot[b], (int32_t)acc[b]));
    for (int64_t b = 0; b < B; b++) count[b] = (int32_t)clens[b];
    kb.keep = 0;
    xv = dsp_tensor_2d(cxx, DSP_BF16, nc, Hd), yv = dsp_tensor_2d(cyy, DSP_BF16, nc, Hd);
    run(&rn, &kb, &xv, &yv);
  }
  if (dsp_comm_rank(comm) == 0) {
    dsp_st_writer *w;
    TRY(dsp_st_writer_create(argv[3], &w));
    dsp_tensor yt = dsp_tensor_2d(y, DSP_BF16, T, Hd);
    TRY(dsp_st_writer_add(w, "y", &yt));
    if (verify) {
      dsp_tensor a = dsp_tensor_2d(vy, DSP_BF16, nv, Hd), c2 = dsp_tensor_2d(cyy, DSP_BF16, nc, Hd);
      TRY(dsp_st_writer_add(w, "vy", &a));
      TRY(dsp_st_writer_add(w, "cy", &c2));
    }
    TRY(dsp_st_writer_finish(w));
  }
  free(x), free(lens), free(layer), free(chunks), free(forms), free(slots), free(y), free(cx), free(cy);
  free(done), free(start), free(slot), free(count), free(which), free(fresh);
  free(vx), free(cxx), free(vlens), free(clens), free(acc), free(vy), free(cyy);
  dsp_kda_plan_free(rn.plan);
  dsp_kda_layer_free(rn.L2);
  free(rn.y2);
  dsp_kda_layer_free(L);
  dsp_backend_free(be);
  dsp_st_close(in);
  dsp_comm_free(comm);
  return 0;
}
