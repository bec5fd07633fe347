/* The CUDA Markov head against the contracts: semantics table (rounding ties,
 * +-inf, NaN, first-id ties, vocabulary tails and padding), exact-grid parity
 * with a scalar reference, strict mode bitwise on random inputs, batch/bucket
 * and shard invariance, fresh inputs on every replay, every execution plan
 * (persistent, per-step, eager, NCCL collectives on one rank) bit-identical.
 * Exits 77 (skipped) when no CUDA device is visible. Optional argument: a
 * cmocka test-name filter (used for the compute-sanitizer runs), or
 * --contended: the whole suite while a second process keeps the GPU busy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cuda/markov_cuda.h"
#include "kernels/cuda/common/device.h"
#include "core/env.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_wgmma.h"
#include "kernels/cuda/markov.h"
#include "support/cuda_head_time.h"
#include "support/gemm_parts.h"
#include "test_cuda_ref.h"

static dsp_markov_config cfg_base(int64_t V, int64_t Vp, int64_t H, int64_t R, int64_t G, int32_t maxb) {
  dsp_markov_config c;
  memset(&c, 0, sizeof c);
  c.vocab = V;
  c.vocab_padded = Vp;
  c.hidden = H;
  c.rank = R;
  c.gamma = G;
  c.max_batch = maxb;
  c.path = DSP_PATH_AUTO;
  c.contract = DSP_CONTRACT_BF16;
  c.broadcast = 1;
  return c;
}

/* The mid-size shape: 2504 units of 16 rows, so warps own several units
 * (pipelining, serpentine order and L2 prefetch all run); odd tail 40000..40063. */
static dsp_markov_config cfg_mid(void) { return cfg_base(40000, 40064, 64, 64, 4, 8); }

static dsp_cuda_head *make_head(tr_model *m, const dsp_cuda_tuning *t) {
  dsp_markov_weights w = tr_weights(m);
  dsp_cuda_head *h = NULL;
  dsp_status s = dsp_cuda_head_create(&m->cfg, NULL, &w, 0, t, &h);
  if (s != DSP_OK) print_error("create: %s: %s\n", dsp_status_name(s), dsp_error_message());
  assert_int_equal(s, DSP_OK);
  return h;
}

typedef struct {
  int64_t *tok;
  void *lg;
} run_out;

static size_t logit_bytes(const dsp_markov_config *c, int B) {
  return (size_t)(B * c->gamma * c->vocab) * (c->contract == DSP_CONTRACT_FP32_ADD ? 4 : 2);
}

/* One proposal; logits when want_logits (which selects the sampling graph). */
static run_out run(dsp_cuda_head *h, const dsp_markov_config *c, tr_inputs *in, int with_temp, int want_logits) {
  run_out r;
  r.tok = calloc((size_t)(in->B * c->gamma), sizeof(int64_t));
  r.lg = want_logits ? malloc(logit_bytes(c, in->B)) : NULL;
  if (r.lg) memset(r.lg, 0xAB, logit_bytes(c, in->B)); /* poison: every element must be written */
  dsp_markov_inputs hi = tr_head_inputs(in, with_temp);
  dsp_tensor lv = tr_logits_view(r.lg, in->B, c);
  dsp_markov_outputs out = {.tokens = r.tok, .logits = want_logits ? &lv : NULL};
  dsp_status s = dsp_cuda_head_propose(h, &hi, &out);
  if (s != DSP_OK) print_error("propose: %s: %s\n", dsp_status_name(s), dsp_error_message());
  assert_int_equal(s, DSP_OK);
  return r;
}

static void run_free(run_out *r) {
  free(r->tok);
  free(r->lg);
}

static long tokens_diff(const int64_t *a, const int64_t *b, size_t n, const char *what) {
  long d = 0;
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i]) {
      if (!d) print_message("%s: first token mismatch at %zu: %lld vs %lld\n", what, i, (long long)a[i], (long long)b[i]);
      d++;
    }
  return d;
}

/* GPU result vs the scalar reference: tokens always, logits when asked. */
static void expect_reference(dsp_cuda_head *h, tr_model *m, tr_inputs *in, int with_temp, int want_logits,
                             const char *what) {
  const dsp_markov_config *c = &m->cfg;
  run_out r = run(h, c, in, with_temp, want_logits);
  int64_t *rt = calloc((size_t)(in->B * c->gamma), sizeof(int64_t));
  void *rl = want_logits ? malloc(logit_bytes(c, in->B)) : NULL;
  tr_reference(m, in, with_temp, rt, rl);
  assert_int_equal(tokens_diff(r.tok, rt, (size_t)(in->B * c->gamma), what), 0);
  if (want_logits) {
    long d = tr_logits_diff(r.lg, rl, (size_t)(in->B * c->gamma * c->vocab), c->contract == DSP_CONTRACT_FP32_ADD);
    if (d) print_message("%s: %ld logits differ from the reference\n", what, d);
    assert_int_equal(d, 0);
  }
  free(rt);
  free(rl);
  run_free(&r);
}

static void set_temps(tr_inputs *in) {
  static const float t[] = {0.0f, 0.7f, 1.0f, 2.5f, 0.3f, 0.0f, 1.5f, 0.9f};
  for (int b = 0; b < in->B; b++) in->temp[b] = t[b % 8];
}

/* ---- exact-grid parity ------------------------------------------------------- */
static void t_grid_greedy(void **st) {
  (void)st;
  dsp_markov_config c = cfg_mid();
  tr_model m;
  tr_model_make(&m, &c, 1, 11);
  dsp_cuda_head *h = make_head(&m, NULL);
  print_message("%s\n%s\n", dsp_cuda_head_report(h), dsp_cuda_head_detail(h));
  tr_inputs in;
  tr_inputs_make(&in, &c, 5, 1, 12);
  expect_reference(h, &m, &in, 0, 0, "grid greedy");
  expect_reference(h, &m, &in, 0, 1, "grid greedy + logits");
  tr_inputs_free(&in);
  dsp_cuda_head_free(h);
  tr_model_free(&m);
}

static void t_grid_sampling(void **st) {
  (void)st;
  dsp_markov_config c = cfg_mid();
  tr_model m;
  tr_model_make(&m, &c, 1, 21);
  dsp_cuda_head *h = make_head(&m, NULL);
  tr_inputs in;
  tr_inputs_make(&in, &c, 7, 1, 22);
  set_temps(&in);
  expect_reference(h, &m, &in, 1, 0, "grid sampling");
  expect_reference(h, &m, &in, 1, 1, "grid sampling + logits");
  dsp_cuda_head_free(h);
  /* the tail drawing its own noise (the default) and reading it from the buffer drawn before it
     (DSPARK_CUDA_NOISE=1) against the same reference, persistent and per step */
  for (int v = 0; v < 4; v++) {
    dsp_cuda_tuning t;
    dsp_cuda_tuning_default(&t);
    t.noise = v & 1;
    t.per_step = v >> 1;
    h = make_head(&m, &t);
    expect_reference(h, &m, &in, 1, 1,
                     v & 1 ? "grid sampling, noise drawn before" : "grid sampling, noise in the tail");
    dsp_cuda_head_free(h);
  }
  tr_inputs_free(&in);
  tr_model_free(&m);
}

static void t_fp32_add(void **st) {
  (void)st;
  dsp_markov_config c = cfg_mid();
  c.contract = DSP_CONTRACT_FP32_ADD;
  tr_model m;
  tr_model_make(&m, &c, 1, 31);
  dsp_cuda_head *h = make_head(&m, NULL);
  tr_inputs in;
  tr_inputs_make(&in, &c, 3, 1, 32);
  expect_reference(h, &m, &in, 0, 1, "fp32-add greedy");
  set_temps(&in);
  expect_reference(h, &m, &in, 1, 1, "fp32-add sampling");
  tr_inputs_free(&in);
  dsp_cuda_head_free(h);
  tr_model_free(&m);
}

/* ---- strided host views ------------------------------------------------------ */
static void t_strided(void **st) {
  (void)st;
  dsp_markov_config c = cfg_base(3000, 3008, 64, 48, 3, 4);
  tr_model m;
  tr_model_make(&m, &c, 1, 41);
  const int64_t Vp = c.vocab_padded, H = c.hidden, R = c.rank;
  /* lm with padded rows, W1 column-major, W2 with padded rows */
  uint16_t *lm = calloc((size_t)(Vp * (H + 8)), 2), *w1 = calloc((size_t)(Vp * R), 2),
           *w2 = calloc((size_t)(Vp * (R + 16)), 2);
  for (int64_t v = 0; v < Vp; v++) {
    for (int64_t h = 0; h < H; h++) lm[v * (H + 8) + h] = m.lm[v * H + h];
    for (int64_t r = 0; r < R; r++) {
      w1[r * Vp + v] = m.w1[v * R + r];
      w2[v * (R + 16) + r] = m.w2[v * R + r];
    }
  }
  dsp_markov_weights w = tr_weights(&m);
  w.lm_local.data = lm;
  w.lm_local.stride[0] = H + 8;
  w.w1.data = w1;
  w.w1.stride[0] = 1;
  w.w1.stride[1] = Vp;
  w.w2_full.data = w2;
  w.w2_full.stride[0] = R + 16;
  w.w2_local = w.w2_full;
  dsp_cuda_head *h = NULL;
  assert_int_equal(dsp_cuda_head_create(&c, NULL, &w, 0, NULL, &h), DSP_OK);

  tr_inputs in;
  tr_inputs_make(&in, &c, 3, 1, 42);
  /* hidden inside a wider buffer ([B][G][2H], view of the first H) */
  uint16_t *wide = calloc((size_t)(3 * c.gamma * 2 * H), 2);
  for (int b = 0; b < 3; b++)
    for (int64_t k = 0; k < c.gamma; k++)
      for (int64_t x = 0; x < H; x++) wide[(b * c.gamma + k) * 2 * H + x] = in.hidden[(b * c.gamma + k) * H + x];
  in.view.data = wide;
  in.view.stride[0] = c.gamma * 2 * H;
  in.view.stride[1] = 2 * H;
  expect_reference(h, &m, &in, 0, 1, "strided hidden rows");
  /* last dimension strided: every other element */
  in.view.stride[2] = 2;
  in.view.stride[1] = 2 * H;
  in.view.stride[0] = c.gamma * 2 * H;
  for (int b = 0; b < 3; b++)
    for (int64_t k = 0; k < c.gamma; k++)
      for (int64_t x = 0; x < H; x++) wide[(b * c.gamma + k) * 2 * H + 2 * x] = in.hidden[(b * c.gamma + k) * H + x];
  expect_reference(h, &m, &in, 0, 1, "strided hidden elements");
  in.view.data = in.hidden;
  free(wide);
  tr_inputs_free(&in);
  dsp_cuda_head_free(h);
  free(lm);
  free(w1);
  free(w2);
  tr_model_free(&m);
}

/* ---- rounding ties, pinned by hand from contracts 1-3 ------------------------- */
/* hidden = e0 + e1 and e = W1[0] = e0 + e1, so base_v = bf16(lm[v][0] + lm[v][1])
 * and bias_v = bf16(w2[v][0] + w2[v][1]); one step. */
static void ties_model(tr_model *m, dsp_contract contract) {
  dsp_markov_config c = cfg_base(64, 64, 64, 64, 1, 4);
  c.contract = contract;
  tr_model_make(m, &c, 1, 1);
  memset(m->lm, 0, 64 * 64 * 2);
  memset(m->w1, 0, 64 * 64 * 2);
  memset(m->w2, 0, 64 * 64 * 2);
  m->w1[0] = m->w1[1] = tr_bits(1.0f);
  const float p7 = ldexpf(1, -7), p8 = ldexpf(1, -8), p6 = ldexpf(1, -6);
  struct { int v; float a, b, c, d; } t[] = {
      {1, 1.0f, p8, 0, 0},            /* base 1+2^-8: tie -> even 1.0 (0x3F80) */
      {2, 1.0f + p7, p8, 0, 0},       /* base 1+3*2^-8: tie -> even 0x3F82 */
      {3, 0, 0, 1.0f, p8},            /* bias tie -> 0x3F80 */
      {4, 0, 0, -(1.0f + p7), -p8},   /* bias -(1+3*2^-8) -> 0xBF82 */
      {5, 1.0f, 0, p8, 0},            /* logit 1+2^-8: tie -> 0x3F80 */
      {6, 1.0f + p7, 0, p8, 0},       /* logit tie -> 0x3F82 */
      {7, 3.0f, 0, p7, 0},            /* logit 3+2^-7: tie -> even 3.0 (0x4040) */
      {8, 3.0f + p6, 0, p7, 0},       /* logit 3+3*2^-7: tie -> even 0x4042 */
      {9, 1.0f, 0, 3 * ldexpf(1, -9), 0}, /* 1+1.5*2^-8: above the tie -> 0x3F81 */
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    m->lm[t[i].v * 64 + 0] = tr_bits(t[i].a);
    m->lm[t[i].v * 64 + 1] = tr_bits(t[i].b);
    m->w2[t[i].v * 64 + 0] = tr_bits(t[i].c);
    m->w2[t[i].v * 64 + 1] = tr_bits(t[i].d);
  }
}

static void ties_inputs(tr_inputs *in, const dsp_markov_config *c) {
  tr_inputs_make(in, c, 1, 1, 2);
  memset(in->hidden, 0, (size_t)(c->gamma * c->hidden) * 2);
  in->hidden[0] = in->hidden[1] = tr_bits(1.0f);
  in->anchor[0] = 0;
}

static void t_rounding_ties(void **st) {
  (void)st;
  tr_model m;
  ties_model(&m, DSP_CONTRACT_BF16);
  dsp_cuda_head *h = make_head(&m, NULL);
  tr_inputs in;
  ties_inputs(&in, &m.cfg);
  run_out r = run(h, &m.cfg, &in, 0, 0);
  assert_int_equal(r.tok[0], 8); /* the fast path sees the same ties */
  run_free(&r);
  r = run(h, &m.cfg, &in, 0, 1);
  const uint16_t *l = r.lg;
  const uint16_t want[10] = {0, 0x3F80, 0x3F82, 0x3F80, 0xBF82, 0x3F80, 0x3F82, 0x4040, 0x4042, 0x3F81};
  for (int v = 0; v < 10; v++) {
    if (l[v] != want[v]) print_message("id %d: logit %#06x, want %#06x\n", v, l[v], want[v]);
    assert_int_equal(l[v], want[v]);
  }
  for (int v = 10; v < 64; v++) assert_int_equal(l[v], 0);
  assert_int_equal(r.tok[0], 8); /* 0x4042 = 3.03125 is the largest */
  run_free(&r);
  dsp_cuda_head_free(h);
  tr_model_free(&m);

  /* fp32-add keeps the sum: 1+2^-8 and 3+2^-7 exactly */
  ties_model(&m, DSP_CONTRACT_FP32_ADD);
  h = make_head(&m, NULL);
  r = run(h, &m.cfg, &in, 0, 1);
  const float *f = r.lg;
  assert_true(f[5] == 1.0f + ldexpf(1, -8));
  assert_true(f[7] == 3.0f + ldexpf(1, -7));
  assert_true(f[8] == 3.0f + ldexpf(1, -6) + ldexpf(1, -7));
  assert_true(f[2] == tr_val(0x3F82)); /* base is rounded to bf16 by contract 2 either way */
  assert_int_equal(r.tok[0], 8);
  run_free(&r);
  dsp_cuda_head_free(h);
  tr_inputs_free(&in);
  tr_model_free(&m);
}

/* ---- vocabulary tails and padding --------------------------------------------- */
static void t_vocab_padding(void **st) {
  (void)st;
  /* odd V: the last unit has one real column; padding rows are NaN, which would
   * beat everything if a padding id were ever selectable */
  dsp_markov_config c = cfg_base(999, 1024, 64, 64, 3, 8);
  tr_model m;
  tr_model_make(&m, &c, 1, 51);
  for (int64_t v = c.vocab; v < c.vocab_padded; v++) m.lm[v * c.hidden] = 0x7FC0;
  dsp_cuda_head *h = make_head(&m, NULL);
  tr_inputs in;
  tr_inputs_make(&in, &c, 6, 1, 52);
  expect_reference(h, &m, &in, 0, 0, "padding rows are never selected (fast path)");
  expect_reference(h, &m, &in, 0, 1, "padding rows are never selected");
  set_temps(&in);
  expect_reference(h, &m, &in, 1, 1, "padding rows, sampling");
  tr_inputs_free(&in);
  dsp_cuda_head_free(h);
  tr_model_free(&m);

  /* a vocabulary of one: every token is 0 */
  c = cfg_base(1, 16, 64, 32, 2, 2);
  tr_model_make(&m, &c, 1, 53);
  h = make_head(&m, NULL);
  tr_inputs_make(&in, &c, 2, 1, 54);
  expect_reference(h, &m, &in, 0, 0, "V = 1 (fast path)");
  expect_reference(h, &m, &in, 0, 1, "V = 1");
  tr_inputs_free(&in);
  dsp_cuda_head_free(h);
  tr_model_free(&m);
}

/* ---- +-inf, NaN, all -inf, first-id ties --------------------------------------- */
/* hidden = e0 and W2 = 0 except where noted: logit_v = bf16(lm[v][0]). */
static void special_case(const float *vals, int nan_w2_id, int64_t want, const char *what) {
  dsp_markov_config c = cfg_base(64, 64, 64, 64, 2, 4);
  tr_model m;
  tr_model_make(&m, &c, 1, 61);
  memset(m.lm, 0, 64 * 64 * 2);
  memset(m.w2, 0, 64 * 64 * 2);
  for (int v = 0; v < 64; v++) m.lm[v * 64] = tr_bits(vals[v]);
  if (nan_w2_id >= 0) m.w2[nan_w2_id * 64 + 7] = 0x7FC0;
  dsp_cuda_tuning t;
  dsp_cuda_tuning_default(&t);
  t.buckets = "4";
  dsp_cuda_head *h = make_head(&m, &t);
  tr_inputs in;
  tr_inputs_make(&in, &c, 2, 1, 62);
  memset(in.hidden, 0, (size_t)(2 * c.gamma * c.hidden) * 2);
  for (int b = 0; b < 2; b++)
    for (int k = 0; k < 2; k++) in.hidden[(b * 2 + k) * 64] = tr_bits(1.0f);
  in.temp[0] = 0.0f;
  in.temp[1] = 0.5f;
  { /* greedy without logits: the fast bf16x2 epilogue */
    run_out r = run(h, &c, &in, 0, 0);
    for (int i = 0; i < 4; i++) {
      if (r.tok[i] != want) print_message("%s (greedy, fast path): token %lld, want %lld\n", what,
                                          (long long)r.tok[i], (long long)want);
      assert_int_equal(r.tok[i], want);
    }
    run_free(&r);
  }
  for (int smp = 0; smp < 2; smp++) {
    run_out r = run(h, &c, &in, smp, 1);
    /* greedy: both rows; sampling: row 0 (T = 0) - row 1's draw is checked against the reference below */
    for (int i = 0; i < (smp ? 2 : 4); i++) {
      if (r.tok[i] != want) print_message("%s (%s): token %lld, want %lld\n", what, smp ? "sampling" : "greedy",
                                          (long long)r.tok[i], (long long)want);
      assert_int_equal(r.tok[i], want);
    }
    const uint16_t *l = r.lg;
    for (int v = 0; v < 64; v++) {
      float x = vals[v];
      uint16_t expect = x != x || v == nan_w2_id ? 0x7FC0 : tr_bits(x + 0.0f);
      assert_int_equal(l[v], expect); /* step 0 of row 0; NaN canonical as on the CPU */
    }
    run_free(&r);
  }
  expect_reference(h, &m, &in, 1, 1, what);
  tr_inputs_free(&in);
  dsp_cuda_head_free(h);
  tr_model_free(&m);
}

static void t_specials(void **st) {
  (void)st;
  float v[64];
  for (int i = 0; i < 64; i++) v[i] = 1.0f;
  v[7] = NAN, v[3] = NAN, v[1] = INFINITY;
  special_case(v, -1, 3, "first NaN wins over +inf");
  for (int i = 0; i < 64; i++) v[i] = (float)(i % 5) - 2.0f;
  v[20] = INFINITY, v[10] = INFINITY;
  special_case(v, -1, 10, "first +inf wins");
  for (int i = 0; i < 64; i++) v[i] = -INFINITY;
  special_case(v, -1, 0, "all -inf gives id 0");
  for (int i = 0; i < 64; i++) v[i] = -(float)i;
  v[60] = 2.0f, v[50] = 2.0f, v[45] = 2.0f;
  special_case(v, -1, 45, "equal maxima go to the lowest id");
  for (int i = 0; i < 64; i++) v[i] = (float)i;
  special_case(v, 5, 5, "a NaN bias wins");
  for (int i = 0; i < 64; i++) v[i] = -1.0f - (float)i;
  v[40] = 0.0f, v[30] = -0.0f;
  special_case(v, -1, 30, "-0 equals +0");
}

/* ---- inputs replaced between replays ------------------------------------------ */
static void t_inputs_change(void **st) {
  (void)st;
  dsp_markov_config c = cfg_mid();
  tr_model m;
  tr_model_make(&m, &c, 1, 71);
  dsp_cuda_head *h = make_head(&m, NULL);
  tr_inputs a, b;
  tr_inputs_make(&a, &c, 5, 1, 72);
  tr_inputs_make(&b, &c, 7, 1, 73); /* same bucket (8), different rows */
  set_temps(&a);
  set_temps(&b);
  for (int smp = 0; smp < 2; smp++) {
    expect_reference(h, &m, &a, smp, smp, "inputs A");
    expect_reference(h, &m, &b, smp, smp, "inputs B");
    expect_reference(h, &m, &a, smp, smp, "inputs A again");
  }
  tr_inputs_free(&a);
  tr_inputs_free(&b);
  dsp_cuda_head_free(h);
  tr_model_free(&m);
}

/* ---- bucket padding is inert, rows are batch-invariant ------------------------- */
static void slice_inputs(const tr_inputs *src, int b, tr_inputs *dst) {
  *dst = *src;
  dst->B = 1;
  dst->hidden = NULL;
  dst->view.data = (uint16_t *)src->view.data + b * src->view.stride[0];
  dst->view.shape[0] = 1;
  dst->anchor[0] = src->anchor[b];
  dst->temp[0] = src->temp[b];
  dst->seed[0] = src->seed[b];
  dst->pos[0] = src->pos[b];
}

static void t_bucket_padding(void **st) {
  (void)st;
  dsp_markov_config c = cfg_mid();
  c.max_batch = 40;
  tr_model m;
  tr_model_make(&m, &c, 0, 81); /* random: invariance must hold bit for bit */
  /* bucket 4 (padded to 16 rows, one batch tile) vs bucket 40 (48 rows, the
   * four-tile kernel instance) */
  dsp_cuda_tuning t4, t8;
  dsp_cuda_tuning_default(&t4);
  dsp_cuda_tuning_default(&t8);
  t4.buckets = "4,40";
  t8.buckets = "40";
  dsp_cuda_head *h4 = make_head(&m, &t4), *h8 = make_head(&m, &t8);
  tr_inputs in;
  tr_inputs_make(&in, &c, 3, 0, 82);
  set_temps(&in);
  const size_t G = (size_t)c.gamma, V = (size_t)c.vocab;
  for (int smp = 0; smp < 2; smp++) {
    run_out r4 = run(h4, &c, &in, smp, 1), r8 = run(h8, &c, &in, smp, 1);
    assert_int_equal(tokens_diff(r4.tok, r8.tok, 3 * G, "bucket 4 vs 40"), 0);
    assert_int_equal(tr_logits_diff(r4.lg, r8.lg, 3 * G * V, 0), 0);
    for (int b = 0; b < 3; b++) {
      tr_inputs one;
      slice_inputs(&in, b, &one);
      run_out r1 = run(h4, &c, &one, smp, 1);
      assert_int_equal(tokens_diff(r1.tok, r4.tok + b * G, G, "row alone vs in batch"), 0);
      assert_int_equal(tr_logits_diff(r1.lg, (uint16_t *)r4.lg + b * G * V, G * V, 0), 0);
      run_free(&r1);
    }
    run_free(&r4);
    run_free(&r8);
  }
  tr_inputs_free(&in);
  dsp_cuda_head_free(h4);
  dsp_cuda_head_free(h8);
  tr_model_free(&m);
}

/* ---- strict mode: bitwise = the CPU order on random inputs ---------------------- */
static void t_strict(void **st) {
  (void)st;
  for (int contract = 0; contract < 2; contract++) {
    dsp_markov_config c = cfg_mid();
    c.contract = contract ? DSP_CONTRACT_FP32_ADD : DSP_CONTRACT_BF16;
    tr_model m;
    tr_model_make(&m, &c, 0, 91 + contract);
    dsp_cuda_tuning t;
    dsp_cuda_tuning_default(&t);
    t.strict = 1;
    dsp_cuda_head *h = make_head(&m, &t);
    if (!contract) print_message("%s\n%s\n", dsp_cuda_head_report(h), dsp_cuda_head_detail(h));
    tr_inputs in;
    tr_inputs_make(&in, &c, 5, 0, 93);
    expect_reference(h, &m, &in, 0, 1, "strict greedy, random inputs");
    set_temps(&in);
    expect_reference(h, &m, &in, 1, 1, "strict sampling, random inputs");
    tr_inputs_free(&in);
    dsp_cuda_head_free(h);
    tr_model_free(&m);
  }
}

/* ---- tensor cores vs the CPU order on random inputs: how often, not whether ---- */
static void t_random_rate(void **st) {
  (void)st;
  dsp_markov_config c = cfg_mid();
  tr_model m;
  tr_model_make(&m, &c, 0, 101);
  dsp_cuda_head *h = make_head(&m, NULL);
  tr_inputs in;
  tr_inputs_make(&in, &c, 8, 0, 102);
  run_out r = run(h, &c, &in, 0, 1);
  const size_t n = (size_t)(8 * c.gamma * c.vocab);
  int64_t *rt = calloc((size_t)(8 * c.gamma), sizeof(int64_t));
  uint16_t *rl = malloc(n * 2);
  tr_reference(&m, &in, 0, rt, rl);
  /* compare step 0 only: later steps may follow a different token */
  long diff = 0, ulp1 = 0, cmp = 0;
  for (int b = 0; b < 8; b++)
    for (int64_t v = 0; v < c.vocab; v++) {
      size_t i = (size_t)((b * c.gamma) * c.vocab + v);
      uint16_t x = ((uint16_t *)r.lg)[i], y = rl[i];
      cmp++;
      if (x != y) {
        diff++;
        ulp1 += (x > y ? x - y : y - x) == 1;
      }
    }
  long tokd = 0;
  for (int b = 0; b < 8; b++) tokd += r.tok[b * c.gamma] != rt[b * c.gamma];
  /* the greedy graph's fast epilogue against the sampling graph's exact one: same tokens */
  run_out rf = run(h, &c, &in, 0, 0);
  assert_int_equal(tokens_diff(rf.tok, r.tok, (size_t)(8 * c.gamma), "fast vs exact epilogue"), 0);
  run_free(&rf);
  print_message("tensor cores vs CPU order (random inputs, step 0): %ld of %ld logits differ (%.4f%%), %ld of them "
                "by one bf16 ulp; %ld of 8 first tokens differ\n",
                diff, cmp, 100.0 * (double)diff / (double)cmp, ulp1, tokd);
  assert_true(diff * 20 < cmp); /* a last-bit effect, not a wrong product */
  free(rt);
  free(rl);
  run_free(&r);
  tr_inputs_free(&in);
  dsp_cuda_head_free(h);
  tr_model_free(&m);
}

/* ---- every execution plan gives the same bits ----------------------------------- */
static void compare_heads(dsp_cuda_head *ref, dsp_cuda_head *h, const dsp_markov_config *c, tr_inputs *in,
                          const char *what) {
  for (int smp = 0; smp < 2; smp++) {
    run_out a = run(ref, c, in, smp, 0), b = run(h, c, in, smp, 0);
    assert_int_equal(tokens_diff(a.tok, b.tok, (size_t)(in->B * c->gamma), what), 0);
    run_free(&a);
    run_free(&b);
    a = run(ref, c, in, smp, 1);
    b = run(h, c, in, smp, 1);
    assert_int_equal(tokens_diff(a.tok, b.tok, (size_t)(in->B * c->gamma), what), 0);
    long d = tr_logits_diff(a.lg, b.lg, (size_t)(in->B * c->gamma * c->vocab), c->contract == DSP_CONTRACT_FP32_ADD);
    if (d) print_message("%s: %ld logits differ\n", what, d);
    assert_int_equal(d, 0);
    run_free(&a);
    run_free(&b);
  }
}

static void t_plans(void **st) {
  (void)st;
  dsp_markov_config c = cfg_mid();
  tr_model m;
  tr_model_make(&m, &c, 0, 111);
  dsp_cuda_head *ref = make_head(&m, NULL);
  tr_inputs in;
  tr_inputs_make(&in, &c, 6, 0, 112);
  set_temps(&in);
  /* the reference runs the default: the kernel chosen by timing, one persistent launch, graphs */
  /* cfg_mid has 626 chunks of 64 rows, so ring kernel 5 (bq 16: one warpgroup per chunk)
   * keeps 4 chunks per block of 132 resident by default, and the odd tail stays dynamic */
  /* nopdl: the tail launched after the LM head's product has ended (the default starts it as the product ends) */
  struct { const char *name; int kernel, per_step, graphs, prefetch, serpentine, l2keep, resident, nopdl; } v[] = {
      {"register kernel", DSP_TAIL_REGISTER, 0, -1, -1, -1, 0, -1, 0},
      {"register kernel, per-step", DSP_TAIL_REGISTER, 1, -1, -1, -1, 0, -1, 0},
      {"register kernel, no L2 prefetch, no serpentine", DSP_TAIL_REGISTER, 0, -1, 0, 0, 0, -1, 0},
      {"register kernel, deep prefetch", DSP_TAIL_REGISTER, 0, -1, 12, 1, 0, -1, 0},
      {"ring", DSP_TAIL_RING, 0, -1, -1, -1, 0, -1, 0},
      {"ring, per-step kernels", DSP_TAIL_RING, 1, -1, -1, -1, 0, -1, 0},
      {"ring, no serpentine, eager", DSP_TAIL_RING, 0, 0, -1, 0, 0, -1, 0},
      {"ring, L2 keep 3/8", DSP_TAIL_RING, 0, -1, -1, -1, 3, -1, 0},
      {"ring, L2 keep 8/8, per-step", DSP_TAIL_RING, 1, -1, -1, -1, 8, -1, 0},
      {"ring-wgmma (2 resident chunks per warpgroup)", DSP_TAIL_RING_WGMMA, 0, -1, -1, -1, 0, -1, 0},
      {"ring-wgmma, per-step kernels", DSP_TAIL_RING_WGMMA, 1, -1, -1, -1, 0, -1, 0},
      {"ring-wgmma, no serpentine, eager, no L2 hints", DSP_TAIL_RING_WGMMA, 0, 0, -1, 0, 0, -1, 0},
      {"ring-wgmma, no resident chunks", DSP_TAIL_RING_WGMMA, 0, -1, -1, -1, 0, 0, 0},
      {"ring-wgmma, 1 resident chunk per warpgroup", DSP_TAIL_RING_WGMMA, 0, -1, -1, -1, 0, 1, 0},
      {"register kernel, no PDL", DSP_TAIL_REGISTER, 0, -1, -1, -1, 0, -1, 1},
      {"ring-wgmma, no PDL", DSP_TAIL_RING_WGMMA, 0, -1, -1, -1, 0, -1, 1},
      {"ring, no PDL, eager", DSP_TAIL_RING, 0, 0, -1, -1, 0, -1, 1},
  };
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    dsp_cuda_tuning t;
    dsp_cuda_tuning_default(&t);
    t.kernel = v[i].kernel;
    t.per_step = v[i].per_step;
    t.graphs = v[i].graphs;
    t.prefetch = v[i].prefetch;
    t.serpentine = v[i].serpentine;
    t.l2keep = v[i].l2keep ? v[i].l2keep : -1;
    t.resident = v[i].resident;
    t.pdl = v[i].nopdl ? 0 : -1;
    dsp_cuda_head *h = make_head(&m, &t);
    compare_heads(ref, h, &c, &in, v[i].name);
    dsp_cuda_head_free(h);
  }
  tr_inputs_free(&in);
  dsp_cuda_head_free(ref);
  tr_model_free(&m);
}

/* ---- ring kernel 5's resident chunks against the register kernel (small enough
 * for compute-sanitizer: one head each) ----------------------------------------- */
static void t_resident(void **st) {
  (void)st;
  dsp_markov_config c = cfg_mid(); /* 626 chunks: 528 resident at 2 per warpgroup on 132 SMs */
  tr_model m;
  tr_model_make(&m, &c, 0, 151);
  dsp_cuda_tuning t;
  dsp_cuda_tuning_default(&t);
  t.kernel = DSP_TAIL_REGISTER;
  dsp_cuda_head *ref = make_head(&m, &t);
  t.kernel = DSP_TAIL_RING_WGMMA;
  t.resident = 2;
  dsp_cuda_head *h = make_head(&m, &t);
  assert_non_null(strstr(dsp_cuda_head_detail(h), "2 W2 chunks resident"));
  tr_inputs in;
  tr_inputs_make(&in, &c, 8, 0, 152);
  set_temps(&in);
  compare_heads(ref, h, &c, &in, "ring-wgmma with resident chunks vs the register kernel");
  tr_inputs_free(&in);
  dsp_cuda_head_free(h);
  dsp_cuda_head_free(ref);
  tr_model_free(&m);
}

/* ---- ring kernel 5's precondition: wgmma sums exactly as mma.sync ------------- */
static void t_wgmma_check(void **st) {
  (void)st;
  const int bqs[] = {16, 32, 64, 128};
  for (int i = 0; i < 4; i++) {
    long long compared = -1, differ = -1;
    const dsp_status s = dsp_cuda_markov_wgmma_check(bqs[i], 264, &compared, &differ);
    if (s != DSP_OK) print_error("wgmma check: %s\n", dsp_error_message());
    assert_int_equal(s, DSP_OK);
    print_message("wgmma check, batch %d: %lld products, %lld differ from mma.sync\n", bqs[i], compared, differ);
    /* shared-memory products for every batch; up to 64 also the register-A products */
    assert_int_equal(compared, 264LL * 64 * bqs[i] * (bqs[i] <= 64 ? 2 : 1));
    assert_int_equal(differ, 0);
  }
  long long c, d;
  assert_int_equal(dsp_cuda_markov_wgmma_check(48, 1, &c, &d), DSP_ERR_ARG);
}

/* ---- the multi-rank plans with NCCL collectives, on one rank -------------------- */
static void t_nccl_one_rank(void **st) {
  (void)st;
  dsp_markov_config c = cfg_mid();
  tr_model m;
  tr_model_make(&m, &c, 0, 121);
  dsp_cuda_head *ref = make_head(&m, NULL);
  tr_inputs in;
  tr_inputs_make(&in, &c, 4, 0, 122);
  set_temps(&in);
  const dsp_path paths[] = {DSP_PATH_ORIGINAL, DSP_PATH_SHARDED, DSP_PATH_REPLICATED};
  for (int p = 0; p < 3; p++)
    for (int bc = 0; bc < 2; bc++)
      for (int full = 0; full < 2; full++) {
        if (!full && paths[p] != DSP_PATH_SHARDED) continue;
        tr_model mm = m;
        mm.cfg.path = paths[p];
        mm.cfg.broadcast = bc;
        dsp_markov_weights w = tr_weights(&mm);
        w.has_w2_full = full;
        dsp_cuda_tuning t;
        dsp_cuda_tuning_default(&t);
        t.force_collectives = 1;
        dsp_cuda_head *h = NULL;
        dsp_status s = dsp_cuda_head_create(&mm.cfg, NULL, &w, 0, &t, &h);
        if (s != DSP_OK) print_error("nccl create: %s\n", dsp_error_message());
        assert_int_equal(s, DSP_OK);
        char what[128];
        snprintf(what, sizeof what, "NCCL one rank, path %d, broadcast %d, full W2 %d", p, bc, full);
        if (p == 0 && bc) print_message("%s\n%s\n", dsp_cuda_head_report(h), dsp_cuda_head_detail(h));
        compare_heads(ref, h, &c, &in, what);
        dsp_cuda_head_free(h);
      }
  tr_inputs_free(&in);
  dsp_cuda_head_free(ref);
  tr_model_free(&m);
}

/* ---- the LM head alone: batch and shard invariance of the pinned algorithm ------ */
static void t_lm_invariance(void **st) {
  (void)st;
  const int64_t K = 512, N = 4096, M = 896;
  tr_seed(131);
  uint16_t *a = malloc((size_t)(M * K) * 2), *w = malloc((size_t)(N * K) * 2);
  for (int64_t i = 0; i < M * K; i++) a[i] = tr_bits(tr_unit());
  for (int64_t i = 0; i < N * K; i++) w[i] = tr_bits(tr_unit() * 0.1f);
  void *da, *dw, *o1, *o2, *o3;
  assert_int_equal(cudaMalloc(&da, (size_t)(M * K) * 2), cudaSuccess);
  assert_int_equal(cudaMalloc(&dw, (size_t)(N * K) * 2), cudaSuccess);
  assert_int_equal(cudaMalloc(&o1, (size_t)(M * N) * 2), cudaSuccess);
  assert_int_equal(cudaMalloc(&o2, (size_t)(M * N) * 2), cudaSuccess);
  assert_int_equal(cudaMalloc(&o3, (size_t)(M * N) * 2), cudaSuccess);
  cudaMemcpy(da, a, (size_t)(M * K) * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dw, w, (size_t)(N * K) * 2, cudaMemcpyHostToDevice);
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  const int sm90 = major == 9 && minor == 0;
  for (int choice = DSP_GEMM_PINNED; choice <= DSP_GEMM_WGMMA_SINGLE; choice++) {
    uint16_t *h1, *h2, *h3;
    dsp_cuda_gemm *full = NULL, *shard = NULL;
    assert_int_equal(dsp_cuda_gemm_create(N, K, 0, choice, &full), DSP_OK);
    assert_int_equal(dsp_cuda_gemm_create(1024, K, 0, choice, &shard), DSP_OK);
    print_message("LM head: %s\n", dsp_cuda_gemm_describe(full));
    if (choice == DSP_GEMM_PINNED) assert_non_null(strstr(dsp_cuda_gemm_describe(full), "cublasLt"));
    if (choice >= DSP_GEMM_WGMMA && sm90) /* the own kernel must be the one tested (its tile check passed) */
      assert_non_null(strstr(dsp_cuda_gemm_describe(full), "own wgmma"));
    if (choice == DSP_GEMM_WGMMA_SINGLE && sm90) assert_non_null(strstr(dsp_cuda_gemm_describe(full), "single blocks"));
    assert_int_equal(dsp_cuda_gemm_prepare(full, M), DSP_OK);
    assert_int_equal(dsp_cuda_gemm_prepare(full, 112), DSP_OK);
    assert_int_equal(dsp_cuda_gemm_prepare(shard, M), DSP_OK);
    assert_int_equal(dsp_cuda_gemm_run(full, da, K, dw, o1, M, N, 0), DSP_OK);
    assert_int_equal(dsp_cuda_gemm_run(full, da, K, dw, o2, 112, N, 0), DSP_OK);
    assert_int_equal(dsp_cuda_gemm_run(shard, da, K, (uint16_t *)dw + 2048 * K, o3, M, 1024, 0), DSP_OK);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    h1 = malloc((size_t)(M * N) * 2);
    h2 = malloc((size_t)(112 * N) * 2);
    h3 = malloc((size_t)(M * 1024) * 2);
    cudaMemcpy(h1, o1, (size_t)(M * N) * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(h2, o2, (size_t)(112 * N) * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(h3, o3, (size_t)(M * 1024) * 2, cudaMemcpyDeviceToHost);
    assert_memory_equal(h1, h2, (size_t)(112 * N) * 2); /* rows of M = 112 inside M = 896 */
    long shard_diff = 0, cpu_diff = 0;
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < 1024; j++) shard_diff += h3[i * 1024 + j] != h1[i * N + 2048 + j];
    for (int64_t i = 0; i < 64; i++)
      for (int64_t j = 0; j < N; j++) {
        float acc = 0.0f;
        for (int64_t k = 0; k < K; k++) acc = fmaf(tr_val(a[i * K + k]), tr_val(w[j * K + k]), acc);
        cpu_diff += tr_bits(acc) != h1[i * N + j];
      }
    print_message("LM head: shard [2048, 3072) vs full: %ld differ; vs CPU order (64 rows): %ld of %lld differ\n",
                  shard_diff, cpu_diff, (long long)(64 * N));
    assert_int_equal(shard_diff, 0);
    assert_true(cpu_diff * 20 < 64 * N);
    dsp_cuda_gemm_free(full);
    dsp_cuda_gemm_free(shard);
    free(h1);
    free(h2);
    free(h3);
  }
  cudaFree(da);
  cudaFree(dw);
  cudaFree(o1);
  cudaFree(o2);
  cudaFree(o3);
  free(a);
  free(w);
}

/* ---- the own wgmma kernel: random operands for its tests ------------------------- */

/* a [M][K] (unit scale) and w [N][K] (scale 0.1), random from `seed`, on the host. */
static void own_operands(int64_t M, int64_t N, int64_t K, uint64_t seed, uint16_t **a, uint16_t **w) {
  tr_seed(seed);
  *a = malloc((size_t)(M * K) * 2);
  *w = malloc((size_t)(N * K) * 2);
  assert_non_null(*a);
  assert_non_null(*w);
  for (int64_t i = 0; i < M * K; i++) (*a)[i] = tr_bits(tr_unit());
  for (int64_t i = 0; i < N * K; i++) (*w)[i] = tr_bits(tr_unit() * 0.1f);
}

/* A device copy of n bf16 values. */
static void *own_upload(const uint16_t *h, int64_t n) {
  void *d = NULL;
  assert_int_equal(cudaMalloc(&d, (size_t)n * 2), cudaSuccess);
  assert_int_equal(cudaMemcpy(d, h, (size_t)n * 2, cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

/* The own kernel's benchmark parts (lm_wgmma.h, dsp_cuda_gemm_wg_part): the data-movement parts store zeros
 * over the whole product and nothing past it; the tensor-core part stores over the same region; bad
 * arguments are refused with a message. */
static void t_lm_parts(void **st) {
  (void)st;
  if (!dsp_cuda_gemm_wg_supported(512)) {
    print_message("own wgmma LM kernel: not supported on this device (sm_90a only), nothing to test\n");
    return;
  }
  const int64_t K = 512, N = 872, LDO = 888, M = 200;
  const size_t ob = (size_t)(M * LDO) * 2;
  uint16_t *a, *w, *h = malloc(ob);
  own_operands(M, N, K, 911, &a, &w);
  void *da = own_upload(a, M * K), *dw = own_upload(w, N * K), *o;
  assert_int_equal(cudaMalloc(&o, ob), cudaSuccess);
  for (int part = 1; part <= 4; part++) {
    assert_int_equal(cudaMemset(o, 0xEE, ob), cudaSuccess);
    assert_int_equal(dsp_bench_gemm_wg_part(da, dw, o, M, N, K, LDO, part, 0), DSP_OK);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(h, o, ob, cudaMemcpyDeviceToHost);
    long inside_untouched = 0, inside_nonzero = 0, pad_touched = 0;
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < LDO; j++) {
        const uint16_t v = h[i * LDO + j];
        if (j >= N) pad_touched += v != 0xEEEE;
        else inside_untouched += v == 0xEEEE, inside_nonzero += v != 0;
      }
    assert_int_equal(pad_touched, 0);
    assert_int_equal(inside_untouched, 0);
    if (part >= 2) assert_int_equal(inside_nonzero, 0); /* nothing multiplied: zeros */
  }
  assert_int_equal(dsp_bench_gemm_wg_part(da, dw, o, M, N, K, LDO, 5, 0), DSP_ERR_ARG);
  assert_non_null(strstr(dsp_error_message(), "part"));
  assert_int_equal(dsp_bench_gemm_wg_part(da, dw, o, 225, N, K, LDO, 1, 0), DSP_ERR_UNSUPPORTED);
  assert_int_equal(dsp_bench_gemm_wg_part(da, dw, o, M, N, 500, LDO, 1, 0), DSP_ERR_UNSUPPORTED);
  cudaFree(da);
  cudaFree(dw);
  cudaFree(o);
  free(a);
  free(w);
  free(h);
}

/* ---- the own wgmma kernel at the edges: vocabulary and token tails, a strided
 * output, and agreement with the pinned cuBLASLt product --------------------------- */
static void t_lm_own_edges(void **st) {
  (void)st;
  if (!dsp_cuda_gemm_wg_supported(512)) {
    print_message("own wgmma LM kernel: not supported on this device (sm_90a only), nothing to test\n");
    return;
  }
  const int64_t K = 512, N = 872, LDO = 888, M = 450; /* 872 = 6 x 128 + 104: an odd tile count; 450 = 2 x 224 + 2 */
  uint16_t *a, *w;
  own_operands(M, N, K, 733, &a, &w);
  a[3 * K + 5] = 0x7FC0;      /* NaN operand: row 3 is NaN everywhere */
  w[17 * K + 9] = 0x7F80;     /* +inf weight: column 17 is +-inf or NaN */
  const size_t ob = (size_t)(M * LDO) * 2;
  void *da = own_upload(a, M * K), *dw = own_upload(w, N * K), *o;
  assert_int_equal(cudaMalloc(&o, ob), cudaSuccess);
  uint16_t *h[4];
  const int64_t ms[4] = {M, 7, 100, M};
  for (int r = 0; r < 4; r++) { /* clusters of two, named (not the default, which may change); the last: single blocks */
    h[r] = malloc(ob);
    assert_int_equal(cudaMemset(o, 0xEE, ob), cudaSuccess);
    assert_int_equal(dsp_cuda_gemm_wg_run(da, K, dw, o, ms[r], N, K, LDO, 0, r == 3 ? 1 : 2, 0, 0, 0), DSP_OK);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(h[r], o, ob, cudaMemcpyDeviceToHost);
  }
  /* padding columns [N, LDO) and rows past M stay untouched */
  long pad_touched = 0;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = N; j < LDO; j++) pad_touched += h[0][i * LDO + j] != 0xEEEE;
  for (int64_t i = 7; i < M; i++)
    for (int64_t j = 0; j < LDO; j++) pad_touched += h[1][i * LDO + j] != 0xEEEE;
  assert_int_equal(pad_touched, 0);
  /* M = 7 (token tile 112) and M = 100 are the first rows of M = 450 (tile 224) */
  assert_memory_equal(h[1], h[0], (size_t)(7 * LDO) * 2);
  assert_memory_equal(h[2], h[0], (size_t)(100 * LDO) * 2);
  assert_memory_equal(h[3], h[0], ob); /* clusters change which block computes a row, not its bits */
  /* against the CPU's chain: specials exact, others within the tensor-core note */
  long cpu_diff = 0, special_bad = 0;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; k++) acc = fmaf(tr_val(a[i * K + k]), tr_val(w[j * K + k]), acc);
      const uint16_t got = h[0][i * LDO + j], want = tr_bits(acc);
      if (i == 3 || j == 17)
        special_bad += got != want; /* NaN canonical 0x7FC0, inf as inf */
      else
        cpu_diff += got != want;
    }
  print_message("own wgmma LM kernel: M %lld N %lld: vs CPU order %ld of %lld differ; specials wrong %ld\n",
                (long long)M, (long long)N, cpu_diff, (long long)(M * N), special_bad);
  assert_int_equal(special_bad, 0);
  assert_true(cpu_diff * 20 < M * N);
  /* the pinned cuBLASLt product of the same problem: how often the two differ (reported) */
  dsp_cuda_gemm *lt = NULL;
  assert_int_equal(dsp_cuda_gemm_create(N, K, 0, DSP_GEMM_PINNED, &lt), DSP_OK);
  assert_int_equal(dsp_cuda_gemm_prepare(lt, M), DSP_OK);
  assert_int_equal(dsp_cuda_gemm_run(lt, da, K, dw, o, M, LDO, 0), DSP_OK);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  uint16_t *hl = malloc(ob);
  cudaMemcpy(hl, o, ob, cudaMemcpyDeviceToHost);
  long lt_diff = 0;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++)
      if (i != 3 && j != 17) lt_diff += hl[i * LDO + j] != h[0][i * LDO + j];
  print_message("own wgmma LM kernel vs %s: %ld of %lld finite values differ\n", dsp_cuda_gemm_describe(lt), lt_diff,
                (long long)((M - 1) * (N - 1)));
  dsp_cuda_gemm_free(lt);
  /* refused shapes are statuses */
  assert_int_equal(dsp_cuda_gemm_wg_run(da, 520, dw, o, M, N, 520, LDO, 0, 0, 0, 0, 0), DSP_ERR_UNSUPPORTED);
  assert_int_equal(dsp_cuda_gemm_wg_run(da, K, dw, o, M, N, K, LDO, 96, 0, 0, 0, 0), DSP_ERR_ARG);
  assert_int_equal(dsp_cuda_gemm_wg_run(da, K, dw, o, M, N, K, LDO, 0, 3, 0, 0, 0), DSP_ERR_ARG);
  assert_int_equal(dsp_cuda_gemm_wg_supported(520), 0);
  for (int r = 0; r < 4; r++) free(h[r]);
  free(hl);
  cudaFree(da);
  cudaFree(dw);
  cudaFree(o);
  free(a);
  free(w);
}

/* ---- errors are statuses, not crashes ------------------------------------------- */
static void t_errors(void **st) {
  (void)st;
  dsp_markov_config c = cfg_base(100, 112, 64, 32, 2, 4);
  tr_model m;
  tr_model_make(&m, &c, 1, 141);
  dsp_markov_weights w = tr_weights(&m);
  dsp_cuda_head *h = NULL;
  dsp_markov_config bad = c;
  bad.rank = 300;
  assert_int_equal(dsp_cuda_head_create(&bad, NULL, &w, 0, NULL, &h), DSP_ERR_UNSUPPORTED);
  bad = c;
  bad.max_batch = 200;
  assert_int_equal(dsp_cuda_head_create(&bad, NULL, &w, 0, NULL, &h), DSP_ERR_UNSUPPORTED);
  assert_int_equal(dsp_cuda_head_create(&c, NULL, &w, 4096, NULL, &h), DSP_ERR_DEVICE);
  dsp_markov_weights bw = w;
  bw.lm_local.shape[0] = 111;
  assert_int_equal(dsp_cuda_head_create(&c, NULL, &bw, 0, NULL, &h), DSP_ERR_SHAPE);
  bw = w;
  bw.w1.dtype = DSP_F32;
  assert_int_equal(dsp_cuda_head_create(&c, NULL, &bw, 0, NULL, &h), DSP_ERR_DTYPE);
  const int refused[3] = {4, 7, 100}; /* past the last dsp_tail_kernel */
  for (int i = 0; i < 3; i++) {
    dsp_cuda_tuning t;
    dsp_cuda_tuning_default(&t);
    t.kernel = refused[i];
    assert_int_equal(dsp_cuda_head_create(&c, NULL, &w, 0, &t, &h), DSP_ERR_ARG);
  }
  assert_null(h);
  assert_int_equal(dsp_cuda_head_create(&c, NULL, &w, 0, NULL, &h), DSP_OK);
  tr_inputs in;
  tr_inputs_make(&in, &c, 2, 1, 142);
  int64_t tok[8];
  dsp_markov_inputs hi = tr_head_inputs(&in, 0);
  dsp_markov_outputs out = {.tokens = tok, .logits = NULL};
  in.anchor[1] = c.vocab;
  assert_int_equal(dsp_cuda_head_propose(h, &hi, &out), DSP_ERR_RANGE);
  in.anchor[1] = 0;
  float lg[2 * 2 * 100];
  dsp_tensor lv = tr_logits_view(lg, 2, &c);
  lv.dtype = DSP_F32; /* the bf16 contract writes BF16 */
  out.logits = &lv;
  assert_int_equal(dsp_cuda_head_propose(h, &hi, &out), DSP_ERR_SHAPE);
  out.logits = NULL;
  hi.batch = 5;
  assert_int_equal(dsp_cuda_head_propose(h, &hi, &out), DSP_ERR_SHAPE);
  hi.batch = 2;
  assert_int_equal(dsp_cuda_head_propose(h, &hi, &out), DSP_OK);
  float full_ms = 0, tail_ms = 0;
  assert_int_equal(dsp_bench_cuda_head_time(h, 2, 0, 5, &full_ms, &tail_ms), DSP_OK);
  assert_true(full_ms > 0 && tail_ms > 0);
  assert_int_equal(dsp_bench_cuda_head_time(h, 2, 1, 5, &full_ms, &tail_ms), DSP_OK);
  tr_inputs_free(&in);
  dsp_cuda_head_free(h);
  tr_model_free(&m);
}

/* The second process of --contended: 8192^3 products back to back until its
 * parent is gone. The GPU then time-slices between the two contexts, which
 * delays our copies and kernels against each other: work enqueued on a stream
 * that does not wait for a copy reads stale memory (a head once uploaded its
 * weights on the legacy stream and packed them on its own before they landed). */
static void contend(pid_t parent) {
  const int64_t n = 8192;
  dsp_cuda_gemm *g = NULL;
  void *a = NULL, *o = NULL;
  if (dsp_cuda_device_count() == 0) _exit(77); /* no GPU: the parent skips */
  if (dsp_cuda_gemm_create(n, n, 0, DSP_GEMM_WGMMA, &g) != DSP_OK || dsp_cuda_gemm_prepare(g, n) != DSP_OK ||
      cudaMalloc(&a, (size_t)(n * n) * 2) != cudaSuccess || cudaMalloc(&o, (size_t)(n * n) * 2) != cudaSuccess ||
      cudaMemset(a, 0, (size_t)(n * n) * 2) != cudaSuccess) {
    fprintf(stderr, "load process: %s\n", dsp_error_message());
    _exit(2);
  }
  while (getppid() == parent) {
    if (dsp_cuda_gemm_run(g, a, n, a, o, n, n, 0) != DSP_OK || cudaDeviceSynchronize() != cudaSuccess) _exit(3);
  }
  _exit(0);
}

int main(int argc, char **argv) {
  pid_t load = -1;
  int load_done = 0; /* the load process has ended and been reaped */
  if (argc > 1 && !strcmp(argv[1], "--contended")) { /* before this process touches CUDA: fork is unsafe after */
    const pid_t self = getpid();
    load = fork();
    if (load == 0) contend(self);
    if (load < 0) {
      perror("fork");
      return 1;
    }
    argc = 1;
    for (int i = 0; i < 40 && !load_done; i++) { /* its products start (or, without a GPU, it ends) */
      load_done = waitpid(load, NULL, WNOHANG) == load;
      if (!load_done) usleep(50000);
    }
  }
  if (dsp_cuda_device_count() == 0) {
    if (load > 0 && !load_done) kill(load, SIGKILL), waitpid(load, NULL, 0);
    dsp_markov_config c = cfg_base(16, 16, 64, 32, 1, 1);
    tr_model m;
    tr_model_make(&m, &c, 1, 1);
    dsp_markov_weights w = tr_weights(&m);
    dsp_cuda_head *h = NULL;
    dsp_status s = dsp_cuda_head_create(&c, NULL, &w, 0, NULL, &h);
    tr_model_free(&m);
    if (s != DSP_ERR_DEVICE || h) {
      fprintf(stderr, "no CUDA device, yet create returned %s\n", dsp_status_name(s));
      return 1;
    }
    printf("no CUDA device (create says: %s): skipped\n", dsp_error_message());
    return 77;
  }
  if (argc > 1) cmocka_set_test_filter(argv[1]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(t_grid_greedy),   cmocka_unit_test(t_grid_sampling), cmocka_unit_test(t_fp32_add),
      cmocka_unit_test(t_strided),       cmocka_unit_test(t_rounding_ties), cmocka_unit_test(t_vocab_padding),
      cmocka_unit_test(t_specials),      cmocka_unit_test(t_inputs_change), cmocka_unit_test(t_bucket_padding),
      cmocka_unit_test(t_strict),        cmocka_unit_test(t_random_rate),   cmocka_unit_test(t_plans),
      cmocka_unit_test(t_nccl_one_rank), cmocka_unit_test(t_lm_invariance), cmocka_unit_test(t_lm_own_edges), cmocka_unit_test(t_lm_parts),
      cmocka_unit_test(t_errors),
      cmocka_unit_test(t_wgmma_check),
      cmocka_unit_test(t_resident),
  };
  const int failed = cmocka_run_group_tests(tests, NULL, NULL);
  if (load > 0) { /* the suite ran contended only if the load is still running */
    int status = 0;
    const pid_t done = load_done ? load : waitpid(load, &status, WNOHANG);
    if (!load_done) kill(load, SIGKILL), waitpid(load, NULL, 0);
    if (done != 0) {
      fprintf(stderr, "--contended: the load process ended early (status %d): the suite did not run contended\n",
              status);
      return 1;
    }
    printf("--contended: the load process ran throughout\n");
  }
  return failed;
}
