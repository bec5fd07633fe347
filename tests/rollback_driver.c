/* Randomized rollback check of the target's KV cache and the draft's context
 * cache through the public API: rounds of propose / verify with forced
 * acceptance patterns (a random number of the verified tokens kept, then a
 * random bonus), and at checkpoints both caches against ones built from
 * scratch over the committed text in another slot: the accepted rows'
 * logits and the draft's next proposal must be the same bits.
 *
 * usage: rollback_driver TARGET_DIR DRAFT_DIR ROUNDS SEED
 * Prints the rounds and rows compared; exits 1 at the first difference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dspark.h"

#define TRY(x)                                                                     \
  do {                                                                             \
    dsp_status s_ = (x);                                                           \
    if (s_ != DSP_OK) {                                                            \
      fprintf(stderr, "rollback_driver: %s: %s\n", #x, dsp_error_message());       \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

static uint64_t g_rng;
static uint32_t rnd(uint32_t n) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(g_rng >> 33) % n;
}

enum { CHUNK = 64, MAXLEN = 6144 };

typedef struct {
  dsp_target *t;
  dsp_draft *d;
  int64_t V, H, G;
  int32_t ntaps;
  dsp_bf16 *taps, *logits, *qlog;
  int64_t *next, *drafts;
} ctx;

/* Runs tokens[0..n) through slot `slot` of both models from scratch, in chunks. */
static void rebuild(ctx *c, int32_t slot, const int32_t *tokens, int64_t n) {
  TRY(dsp_target_truncate(c->t, slot, 0));
  TRY(dsp_draft_truncate(c->d, slot, 0));
  for (int64_t p = 0; p < n; p += CHUNK) {
    const int32_t k = (int32_t)(n - p < CHUNK ? n - p : CHUNK), zero = 0;
    dsp_target_batch b = {.nseq = 1, .slot = &slot, .count = &k, .tokens = tokens + p, .last_only = 1};
    int64_t sh[3] = {c->ntaps, k, c->H};
    dsp_tensor tv = dsp_tensor_view(c->taps, DSP_BF16, 3, sh);
    dsp_target_outputs o = {.next = c->next, .taps = &tv};
    TRY(dsp_target_forward(c->t, &b, &o));
    dsp_draft_batch db = {.nseq = 1, .slot = &slot, .ctx = &tv, .ctx_row0 = &zero, .ctx_count = &k, .append_only = 1};
    dsp_draft_outputs dout = {0};
    TRY(dsp_draft_propose(c->d, &db, &dout));
  }
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: rollback_driver TARGET_DIR DRAFT_DIR ROUNDS SEED\n");
    return 2;
  }
  const long rounds = strtol(argv[3], NULL, 10);
  g_rng = strtoull(argv[4], NULL, 10) * 2654435761ull + 1;
  dsp_comm *comm;
  TRY(dsp_comm_auto_create(&comm));
  dsp_backend *be;
  dsp_backend_config bc = {.kind = DSP_BACKEND_CPU, .comm = comm};
  TRY(dsp_backend_create(&bc, &be));
  dsp_draft_info di;
  TRY(dsp_draft_read_info(argv[2], &di));
  dsp_target_options to = {.max_seqs = 2, .max_len = MAXLEN, .max_tokens = CHUNK, .taps = di.taps, .ntaps = di.ntaps};
  ctx c = {.ntaps = di.ntaps};
  TRY(dsp_target_load(be, argv[1], &to, &c.t));
  dsp_draft_options dop = {.max_seqs = 2, .max_len = MAXLEN, .max_ctx = CHUNK};
  TRY(dsp_draft_load(be, argv[2], c.t, &dop, &c.d));
  c.V = dsp_target_info_of(c.t)->vocab;
  c.H = dsp_target_info_of(c.t)->hidden;
  c.G = dsp_draft_info_of(c.d)->gamma;
  c.taps = malloc((size_t)(c.ntaps * CHUNK * c.H) * 2);
  c.logits = malloc((size_t)(CHUNK * c.V) * 2);
  dsp_bf16 *fresh = malloc((size_t)(CHUNK * c.V) * 2), *qlog2 = malloc((size_t)(c.G * c.V) * 2);
  c.qlog = malloc((size_t)(c.G * c.V) * 2);
  c.next = malloc(CHUNK * 8);
  c.drafts = malloc((size_t)c.G * 8);
  int64_t *drafts2 = malloc((size_t)c.G * 8);
  int32_t *text = malloc(MAXLEN * 4), *blk = malloc((size_t)(c.G + 1) * 4);
  /* a prompt, then rounds */
  int64_t n = 5;
  for (int64_t i = 0; i < n; i++) text[i] = (int32_t)rnd((uint32_t)c.V);
  rebuild(&c, 0, text, n);
  int32_t x = (int32_t)rnd((uint32_t)c.V), row0 = 0, pending = 0, slot = 0, one = 1;
  long compared = 0, checks = 0, r;
  for (r = 0; r < rounds && n + c.G + 2 < MAXLEN; r++) {
    /* propose from the incremental context */
    int64_t qsh[3] = {1, c.G, c.V};
    dsp_tensor qv = dsp_tensor_view(c.qlog, DSP_BF16, 3, qsh);
    int64_t tsh[3] = {c.ntaps, CHUNK, c.H};
    dsp_tensor tv = dsp_tensor_view(c.taps, DSP_BF16, 3, tsh);
    dsp_draft_batch db = {.nseq = 1, .slot = &slot, .ctx = &tv, .ctx_row0 = &row0, .ctx_count = &pending, .anchor = &x};
    dsp_draft_outputs dout = {.tokens = c.drafts, .logits = &qv};
    TRY(dsp_draft_propose(c.d, &db, &dout));
    const int check = r % 97 == 96 || r == rounds - 1;
    if (check) { /* the draft's context against one built at once: the same proposal */
      rebuild(&c, 1, text, n);
      int32_t s1 = 1, zero = 0;
      dsp_tensor qv2 = dsp_tensor_view(qlog2, DSP_BF16, 3, qsh);
      dsp_draft_batch db2 = {.nseq = 1, .slot = &s1, .ctx = &tv, .ctx_row0 = &zero, .ctx_count = &zero, .anchor = &x};
      dsp_draft_outputs d2 = {.tokens = drafts2, .logits = &qv2};
      TRY(dsp_draft_propose(c.d, &db2, &d2));
      if (memcmp(drafts2, c.drafts, (size_t)c.G * 8) || memcmp(qlog2, c.qlog, (size_t)(c.G * c.V) * 2)) {
        fprintf(stderr, "rollback_driver: round %ld: the draft's proposal after %lld committed tokens differs from "
                        "one over a context built at once\n", r, (long long)n);
        return 1;
      }
      compared += c.G;
    }
    /* verify [x, k drafts (the draft's own, or random ones)] and keep a random prefix */
    const int32_t k = (int32_t)rnd((uint32_t)c.G + 1), keep = (int32_t)rnd((uint32_t)k + 1);
    blk[0] = x;
    for (int32_t i = 0; i < k; i++) blk[1 + i] = rnd(4) ? (int32_t)c.drafts[i] : (int32_t)rnd((uint32_t)c.V);
    const int32_t cnt = k + 1;
    dsp_target_batch vb = {.nseq = 1, .slot = &slot, .count = &cnt, .tokens = blk};
    int64_t vsh[3] = {c.ntaps, cnt, c.H};
    dsp_tensor vt = dsp_tensor_view(c.taps, DSP_BF16, 3, vsh);
    vt.stride[0] = CHUNK * c.H;
    dsp_tensor lv = dsp_tensor_2d(c.logits, DSP_BF16, cnt, c.V);
    dsp_target_outputs vo = {.next = c.next, .taps = &vt, .logits = &lv};
    TRY(dsp_target_forward(c.t, &vb, &vo));
    TRY(dsp_target_truncate(c.t, 0, n + 1 + keep));
    for (int32_t i = 0; i <= keep; i++) text[n + i] = blk[i];
    if (check) { /* the target's kept rows against a run from scratch over the committed text */
      const int64_t m = n + 1 + keep;
      int32_t s1 = 1;
      TRY(dsp_target_truncate(c.t, 1, 0));
      for (int64_t p = 0; p < m; p += CHUNK) {
        const int32_t kk = (int32_t)(m - p < CHUNK ? m - p : CHUNK);
        dsp_target_batch fb = {.nseq = 1, .slot = &s1, .count = &kk, .tokens = text + p};
        dsp_tensor fl = dsp_tensor_2d(fresh, DSP_BF16, kk, c.V);
        dsp_target_outputs fo = {.next = c.next, .logits = &fl};
        TRY(dsp_target_forward(c.t, &fb, &fo));
        for (int64_t q = p; q < p + kk; q++)
          if (q >= n && memcmp(fresh + (q - p) * c.V, c.logits + (q - n) * c.V, (size_t)c.V * 2)) {
            fprintf(stderr, "rollback_driver: round %ld: position %lld's logits differ from a run from scratch\n", r,
                    (long long)q);
            return 1;
          }
      }
      compared += keep + 1;
      checks++;
    }
    row0 = 0;
    pending = keep + 1; /* the anchor and the kept tokens: the draft's next context rows */
    n += keep + 1;
    x = (int32_t)rnd((uint32_t)c.V);
    (void)one;
  }
  if (dsp_comm_rank(comm) == 0)
    printf("rollback_driver: %ld rounds, %lld committed tokens, %ld checkpoints, %ld rows compared, 0 differ\n", r,
           (long long)n, checks, compared);
  free(c.taps), free(c.logits), free(fresh), free(qlog2), free(c.qlog), free(c.next), free(c.drafts), free(drafts2);
  free(text), free(blk);
  dsp_draft_free(c.d);
  dsp_target_free(c.t);
  dsp_backend_free(be);
  dsp_comm_free(comm);
  return 0;
}
