/* Shared by the CUDA head tests: synthetic models and inputs, and a plain
 * scalar reference written from the contracts (DESIGN §2), not from the
 * library's code:
 *   product:  acc = +0; acc = fmaf(x[k], w[k], acc) for k = 0..K-1; bf16_rne(acc)
 *             (the CPU backend's documented order; on exact-grid inputs every
 *             order gives this value)
 *   step:     bias = bf16(sum_r W2[v,r] e[r]); logit = bf16(base + bias) or,
 *             fp32-add, base + bias in fp32
 *   select:   torch.argmax order over v < V (NaN first, then larger, then lower
 *             id; -0 == +0); sampled rows take argmax(float(logit / T) + g)
 *             with g = -log(-log(u)), u from Philox4x32-10 keyed by the seed,
 *             the counter (id, position + 1 + k) (DESIGN §2 item 5; the keying
 *             as docs/CONTRACTS.md fixes it), all written here
 * Written NaNs are the canonical quiet NaN (0x7FC0 / 0x7FC00000), as the CPU
 * backend writes them. */
#ifndef DSP_TEST_CUDA_REF_H
#define DSP_TEST_CUDA_REF_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dspark.h"

/* Philox4x32-10 (Salmon et al., SC'11): ten rounds, key bumped by the Weyl constants. */
static inline void tr_philox(uint32_t c[4], uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    const uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
    const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
    c[1] = (uint32_t)p1;
    c[3] = (uint32_t)p0;
    c[0] = n0;
    c[2] = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}
/* g = -log(-log(u)) in double, rounded once; u = (word0 + 0.5) / 2^32. */
static inline float tr_gumbel(uint64_t seed, int64_t pos, int64_t id) {
  uint32_t c[4] = {(uint32_t)(uint64_t)id, (uint32_t)((uint64_t)id >> 32), (uint32_t)(uint64_t)pos,
                   (uint32_t)((uint64_t)pos >> 32)};
  tr_philox(c, (uint32_t)seed, (uint32_t)(seed >> 32));
  const double u = ((double)c[0] + 0.5) / 4294967296.0;
  return (float)(-log(-log(u)));
}
/* 1 when (av, ai) comes first in torch.argmax's order. */
static inline int tr_better(float av, int64_t ai, float bv, int64_t bi) {
  if (isnan(av) || isnan(bv)) return isnan(av) && (!isnan(bv) || ai < bi);
  if (av != bv) return av > bv;
  return ai < bi;
}

static uint64_t tr_state = 0x9E3779B97F4A7C15ull;
static inline void tr_seed(uint64_t s) { tr_state = s * 0x9E3779B97F4A7C15ull + 1; }
static inline uint64_t tr_next(void) { /* splitmix64 */
  uint64_t z = (tr_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline int tr_int(int lo, int hi) { return lo + (int)(tr_next() % (uint64_t)(hi - lo + 1)); }
static inline float tr_unit(void) { return (float)((double)(tr_next() >> 11) / 9007199254740992.0) * 2.0f - 1.0f; }

static inline uint16_t tr_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline float tr_val(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline float tr_round(float f) { return tr_val(tr_bits(f)); }
static inline float tr_canon(float f) {
  if (f != f) {
    uint32_t u = 0x7FC00000u;
    memcpy(&f, &u, 4);
  }
  return f;
}

/* An exact-grid value: a small integer times 2^-e (every product and every
 * partial sum of the test sizes is exact in fp32). Otherwise uniform in
 * [-scale, scale) rounded to bf16. */
static inline uint16_t tr_draw(int grid, int range, int e, float scale) {
  if (grid) return tr_bits(ldexpf((float)tr_int(-range, range), -e));
  return tr_bits(tr_unit() * scale);
}

typedef struct {
  dsp_markov_config cfg;
  uint16_t *lm, *w1, *w2; /* [Vp][H], [Vp][R], [Vp][R] */
} tr_model;

static inline void tr_model_make(tr_model *m, const dsp_markov_config *cfg, int grid, uint64_t seed) {
  m->cfg = *cfg;
  const int64_t Vp = cfg->vocab_padded, H = cfg->hidden, R = cfg->rank;
  m->lm = malloc((size_t)(Vp * H) * 2);
  m->w1 = malloc((size_t)(Vp * R) * 2);
  m->w2 = malloc((size_t)(Vp * R) * 2);
  tr_seed(seed);
  for (int64_t i = 0; i < Vp * H; i++) m->lm[i] = tr_draw(grid, 4, 3, 0.25f);
  for (int64_t i = 0; i < Vp * R; i++) m->w1[i] = tr_draw(grid, 4, 2, 1.0f);
  for (int64_t i = 0; i < Vp * R; i++) m->w2[i] = tr_draw(grid, 4, 3, 0.125f);
}

static inline void tr_model_free(tr_model *m) {
  free(m->lm);
  free(m->w1);
  free(m->w2);
}

static inline dsp_tensor tr_view2(void *p, int64_t rows, int64_t cols) {
  dsp_tensor t;
  memset(&t, 0, sizeof t);
  t.data = p;
  t.dtype = DSP_BF16;
  t.ndim = 2;
  t.shape[0] = rows;
  t.shape[1] = cols;
  t.stride[0] = cols;
  t.stride[1] = 1;
  return t;
}

/* Single-rank weights: everything is local. */
static inline dsp_markov_weights tr_weights(tr_model *m) {
  dsp_markov_weights w;
  memset(&w, 0, sizeof w);
  const int64_t Vp = m->cfg.vocab_padded;
  w.lm_local = tr_view2(m->lm, Vp, m->cfg.hidden);
  w.w1 = tr_view2(m->w1, Vp, m->cfg.rank);
  w.w2_local = tr_view2(m->w2, Vp, m->cfg.rank);
  w.w2_full = w.w2_local;
  w.has_w2_full = 1;
  return w;
}

#define TR_MAXB 128
typedef struct {
  int B;
  int64_t G, H;
  uint16_t *hidden; /* [B][G][H] */
  dsp_tensor view;
  int64_t anchor[TR_MAXB];
  float temp[TR_MAXB];
  uint64_t seed[TR_MAXB];
  int64_t pos[TR_MAXB];
} tr_inputs;

static inline void tr_inputs_make(tr_inputs *in, const dsp_markov_config *cfg, int B, int grid, uint64_t seed) {
  memset(in, 0, sizeof *in);
  in->B = B;
  in->G = cfg->gamma;
  in->H = cfg->hidden;
  in->hidden = malloc((size_t)(B * in->G * in->H) * 2);
  tr_seed(seed);
  for (int64_t i = 0; i < B * in->G * in->H; i++) in->hidden[i] = tr_draw(grid, 3, 2, 1.0f);
  for (int b = 0; b < B; b++) {
    in->anchor[b] = (int64_t)(tr_next() % (uint64_t)cfg->vocab);
    in->seed[b] = tr_next();
    in->pos[b] = (int64_t)(tr_next() % 100000);
  }
  memset(&in->view, 0, sizeof in->view);
  in->view.data = in->hidden;
  in->view.dtype = DSP_BF16;
  in->view.ndim = 3;
  in->view.shape[0] = B;
  in->view.shape[1] = in->G;
  in->view.shape[2] = in->H;
  in->view.stride[0] = in->G * in->H;
  in->view.stride[1] = in->H;
  in->view.stride[2] = 1;
}

static inline void tr_inputs_free(tr_inputs *in) { free(in->hidden); }

static inline dsp_markov_inputs tr_head_inputs(tr_inputs *in, int with_temp) {
  dsp_markov_inputs hi;
  memset(&hi, 0, sizeof hi);
  hi.batch = in->B;
  hi.hidden = &in->view;
  hi.anchor = in->anchor;
  hi.temperature = with_temp ? in->temp : NULL;
  hi.seed = in->seed;
  hi.position = in->pos;
  return hi;
}

/* hidden element (b, k, h) of an input set (through its view's strides). */
static inline float tr_hidden(const tr_inputs *in, int b, int64_t k, int64_t h) {
  const dsp_tensor *v = &in->view;
  return tr_val(((const uint16_t *)v->data)[b * v->stride[0] + k * v->stride[1] + h * v->stride[2]]);
}

/* The reference proposal: tokens [B][G]; logits [B][G][V] (bf16 bits or fp32)
 * when non-NULL. */
static inline void tr_reference(const tr_model *m, const tr_inputs *in, int with_temp, int64_t *tokens, void *logits) {
  const dsp_markov_config *c = &m->cfg;
  const int64_t V = c->vocab, H = c->hidden, R = c->rank, G = c->gamma;
  const int fp32 = c->contract == DSP_CONTRACT_FP32_ADD;
  float *base = malloc((size_t)V * sizeof(float));
  for (int b = 0; b < in->B; b++) {
    int64_t prev = in->anchor[b];
    for (int64_t k = 0; k < G; k++) {
      for (int64_t v = 0; v < V; v++) {
        float acc = 0.0f;
        for (int64_t h = 0; h < H; h++) acc = fmaf(tr_hidden(in, b, k, h), tr_val(m->lm[v * H + h]), acc);
        base[v] = tr_round(acc);
      }
      const float T = with_temp ? in->temp[b] : 0.0f;
      float best_v = -INFINITY;
      int64_t best_i = INT64_MAX;
      for (int64_t v = 0; v < V; v++) {
        float acc = 0.0f;
        for (int64_t r = 0; r < R; r++) acc = fmaf(tr_val(m->w1[prev * R + r]), tr_val(m->w2[v * R + r]), acc);
        const float bias = tr_round(acc);
        volatile float s = base[v] + bias;
        const float logit = fp32 ? tr_canon(s) : tr_round(s);
        if (logits) {
          const size_t at = (size_t)((b * G + k) * V + v);
          if (fp32)
            ((float *)logits)[at] = logit;
          else
            ((uint16_t *)logits)[at] = tr_bits(logit);
        }
        float score = logit;
        if (T > 0.0f) {
          volatile float q = logit / T;
          score = q + tr_gumbel(in->seed[b], in->pos[b] + 1 + k, v);
        }
        if (tr_better(score, v, best_v, best_i)) {
          best_v = score;
          best_i = v;
        }
      }
      tokens[b * G + k] = best_i;
      prev = best_i;
    }
  }
  free(base);
}

/* Logits equal bit for bit, except that any NaN equals any NaN. Returns the
 * number of differing elements. */
static inline long tr_logits_diff(const void *a, const void *b, size_t n, int fp32) {
  long d = 0;
  for (size_t i = 0; i < n; i++) {
    if (fp32) {
      float x = ((const float *)a)[i], y = ((const float *)b)[i];
      uint32_t ux, uy;
      memcpy(&ux, &x, 4);
      memcpy(&uy, &y, 4);
      d += !((x != x && y != y) || ux == uy);
    } else {
      uint16_t x = ((const uint16_t *)a)[i], y = ((const uint16_t *)b)[i];
      int nx = (x & 0x7FFF) > 0x7F80, ny = (y & 0x7FFF) > 0x7F80;
      d += !((nx && ny) || x == y);
    }
  }
  return d;
}

static inline dsp_tensor tr_logits_view(void *p, int B, const dsp_markov_config *c) {
  dsp_tensor t;
  memset(&t, 0, sizeof t);
  t.data = p;
  t.dtype = c->contract == DSP_CONTRACT_FP32_ADD ? DSP_F32 : DSP_BF16;
  t.ndim = 3;
  t.shape[0] = B;
  t.shape[1] = c->gamma;
  t.shape[2] = c->vocab;
  t.stride[0] = c->gamma * c->vocab;
  t.stride[1] = c->vocab;
  t.stride[2] = 1;
  return t;
}

#endif
