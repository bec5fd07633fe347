/* The chunked form's work for one (sequence, value head), included once by
 * each of kda_chunked.c (the baseline build) and kda_chunked_avx512.c (the
 * same source for AVX-512). ISO C contracts nothing, so both builds give the
 * same bits. The algebra and its numerics are kda_chunked.c's. The includer
 * defines:
 *   KDA_FN               the functions' attributes;
 *   KDA_SFX(name)        their names;
 *   KDA_SFX(exp_sub)     out[d] = expf(a[d] - b[d]) (b NULL: expf(a[d])), the
 *                        kernels' expf (expf.h, one definition for both);
 *   KDA_SFX(acc_rows)    out[j] += c[r cs] rows[r rs + j] for r = 0, 1, ...
 *                        in order, each product rounded before its add. */
#include <math.h>
#include <string.h>

#include "core/bf16.h"
#include "kernels/cpu/kda.h"

enum { C = DSP_KDA_CHUNK, BLK = 16 };

static inline size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Per-thread scratch, in floats, each piece a multiple of 16 (64 bytes). */
typedef struct { float *S, *Q, *Kn, *Gc, *Wm, *KQ, *KP, *QP, *A, *Aqk, *Tb, *beta, *eglast, *Vt, *U, *O, *E; } scratch;

static inline size_t scratch_floats(int32_t K, int32_t V, int32_t bv) {
  return up16((size_t)K * V) + 5 * up16((size_t)C * K) + 2 * up16((size_t)BLK * K) + 3 * up16((size_t)C * C) +
         up16(C) + 2 * up16((size_t)K) + 3 * up16((size_t)C * bv);
}

static inline scratch carve(float *p, int32_t K, int32_t V, int32_t bv) {
  scratch s;
  float **parts[] = {&s.S, &s.Q, &s.Kn, &s.Gc, &s.Wm, &s.KQ, &s.KP, &s.QP, &s.A, &s.Aqk, &s.Tb, &s.beta, &s.eglast, &s.Vt, &s.U, &s.O, &s.E};
  size_t sizes[] = {(size_t)K * V, (size_t)C * K, (size_t)C * K, (size_t)C * K, (size_t)C * K, (size_t)C * K,
                    (size_t)BLK * K, (size_t)BLK * K, (size_t)C * C, (size_t)C * C, (size_t)C * C, C, (size_t)K,
                    (size_t)C * bv, (size_t)C * bv, (size_t)C * bv, (size_t)K};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    *parts[i] = p;
    p += up16(sizes[i]);
  }
  return s;
}

/* A, Aqk [n x n] (row stride C) of one chunk, by 16-row blocks. */
KDA_FN void KDA_SFX(chunk_scores)(const scratch *w, int32_t n, int32_t K) {
  memset(w->A, 0, sizeof(float) * C * C);
  memset(w->Aqk, 0, sizeof(float) * C * C);
  for (int32_t b0 = 0; b0 < n; b0 += BLK) {
    const int32_t b1 = b0 + BLK < n ? b0 + BLK : n;
    if (b0 > 0) { /* rows of this block against all earlier rows, through row b0 */
      const float *Gr = w->Gc + (size_t)b0 * K;
      for (int32_t i = b0; i < b1; i++) {
        KDA_SFX(exp_sub)(w->E, w->Gc + (size_t)i * K, Gr, K);
        for (int32_t d = 0; d < K; d++) {
          w->KP[(size_t)(i - b0) * K + d] = w->Kn[(size_t)i * K + d] * w->E[d];
          w->QP[(size_t)(i - b0) * K + d] = w->Q[(size_t)i * K + d] * w->E[d];
        }
      }
      /* KQ transposed [d][j], so the sums over d run with j as the vector lane */
      for (int32_t j = 0; j < b0; j++) {
        KDA_SFX(exp_sub)(w->E, Gr, w->Gc + (size_t)j * K, K);
        for (int32_t d = 0; d < K; d++) w->KQ[(size_t)d * C + j] = w->Kn[(size_t)j * K + d] * w->E[d];
      }
      for (int32_t i = b0; i < b1; i++) {
        const float *kp = w->KP + (size_t)(i - b0) * K, *qp = w->QP + (size_t)(i - b0) * K;
        float *Ai = w->A + i * C, *Qi = w->Aqk + i * C;
        KDA_SFX(acc_rows)(Ai, kp, 1, w->KQ, C, K, b0);
        KDA_SFX(acc_rows)(Qi, qp, 1, w->KQ, C, K, b0);
      }
    }
    for (int32_t i = b0; i < b1; i++) /* pairs inside the block: expf of the difference */
      for (int32_t j = b0; j <= i; j++) {
        const float *ki = w->Kn + (size_t)i * K, *kj = w->Kn + (size_t)j * K, *qi = w->Q + (size_t)i * K;
        const float *gi = w->Gc + (size_t)i * K, *gj = w->Gc + (size_t)j * K;
        float a = 0.0f, aq = 0.0f;
        KDA_SFX(exp_sub)(w->E, gi, gj, K);
        for (int32_t d = 0; d < K; d++) {
          a += (ki[d] * kj[d]) * w->E[d];
          aq += (qi[d] * kj[d]) * w->E[d];
        }
        if (j < i) w->A[i * C + j] = a;
        w->Aqk[i * C + j] = aq;
      }
  }
}

/* Tb = (I + diag(beta) A)^-1 diag(beta), [n x n] lower triangular. */
KDA_FN void KDA_SFX(chunk_ut)(const scratch *w, int32_t n) {
  float *T = w->Tb;
  memset(T, 0, sizeof(float) * C * C);
  for (int32_t i = 0; i < n; i++) {
    float *L = w->A + i * C;
    for (int32_t m = 0; m < i; m++) L[m] = w->beta[i] * L[m];
    /* row i accumulates L_im T_m over m ascending: for each j the terms m = j..i-1 */
    float *Ti = T + i * C;
    for (int32_t m = 0; m < i; m++) {
      const float l = L[m], *Tm = T + m * C;
      for (int32_t j = 0; j <= m; j++) Ti[j] += l * Tm[j];
    }
    for (int32_t j = 0; j < i; j++) Ti[j] = -Ti[j];
    Ti[i] = 1.0f;
  }
  for (int32_t i = 0; i < n; i++)
    for (int32_t j = 0; j <= i; j++) T[i * C + j] *= w->beta[j];
}

/* Task `task` = (sequence, value head) of a chunked call, on scratch `thread` of base. */
KDA_FN void KDA_SFX(chunk_task)(const dsp_kda_dims *d, int32_t bv, float scale, int32_t raw, const dsp_kda_seqs *s,
                                const dsp_kda_io *io, dsp_kda_state *st, char *base, size_t per, int thread,
                                int64_t task) {
  const int32_t HV = d->num_v_heads, K = d->head_k, V = d->head_v, G = HV / d->num_heads;
  const int64_t KV = (int64_t)K * V;
  const int32_t n = (int32_t)(task / HV), hv = (int32_t)(task % HV), h = hv / G;
  const int32_t slot = s->slot[n];
  if (slot < 0) return; /* padding: inert */
  const scratch w = carve((float *)(base + (size_t)thread * per), K, V, bv);
  const int64_t t0 = s->cu_seqlens ? s->cu_seqlens[n] : n, t1 = s->cu_seqlens ? s->cu_seqlens[n + 1] : n + 1;
  float *S = w.S;
  if (!s->has_state || s->has_state[n])
    memcpy(S, st->data + (int64_t)slot * st->slot_stride + hv * KV, (size_t)KV * sizeof(float));
  else
    memset(S, 0, (size_t)KV * sizeof(float));

  for (int64_t c0 = t0; c0 < t1; c0 += C) {
    const int32_t nc = (int32_t)(t1 - c0 < C ? t1 - c0 : C);
    for (int32_t i = 0; i < nc; i++) {
      const int64_t t = c0 + i;
      dsp_kda_qk_row(io->q.data + t * io->q.tok + h * io->q.head, K, raw, scale, w.Q + (size_t)i * K);
      dsp_kda_qk_row(io->k.data + t * io->k.tok + h * io->k.head, K, raw, 1.0f, w.Kn + (size_t)i * K);
      const float *g = io->g + (t * HV + hv) * K;
      float *Gi = w.Gc + (size_t)i * K;
      for (int32_t e = 0; e < K; e++) Gi[e] = i ? Gi[e - K] + g[e] : g[e];
      w.beta[i] = io->beta[t * HV + hv];
    }
    KDA_SFX(chunk_scores)(&w, nc, K);
    KDA_SFX(chunk_ut)(&w, nc);
    /* w = Tb (k exp(G)): k exp(G) into KQ (free now), then the row sums. */
    for (int32_t j = 0; j < nc; j++) {
      KDA_SFX(exp_sub)(w.E, w.Gc + (size_t)j * K, NULL, K);
      for (int32_t e = 0; e < K; e++) w.KQ[(size_t)j * K + e] = w.Kn[(size_t)j * K + e] * w.E[e];
    }
    for (int32_t i = 0; i < nc; i++) {
      float *wr = w.Wm + (size_t)i * K;
      memset(wr, 0, sizeof(float) * (size_t)K);
      KDA_SFX(acc_rows)(wr, w.Tb + i * C, 1, w.KQ, K, i + 1, K);
    }
    /* In place: Q becomes q exp(G), Kn becomes k exp(G_last - G). */
    const float *Gl = w.Gc + (size_t)(nc - 1) * K;
    KDA_SFX(exp_sub)(w.eglast, Gl, NULL, K);
    for (int32_t i = 0; i < nc; i++) {
      KDA_SFX(exp_sub)(w.E, w.Gc + (size_t)i * K, NULL, K);
      for (int32_t e = 0; e < K; e++) w.Q[(size_t)i * K + e] *= w.E[e];
      KDA_SFX(exp_sub)(w.E, Gl, w.Gc + (size_t)i * K, K);
      for (int32_t e = 0; e < K; e++) w.Kn[(size_t)i * K + e] *= w.E[e];
    }

    for (int32_t v0 = 0; v0 < V; v0 += bv) {
      const int32_t nv = V - v0 < bv ? V - v0 : bv;
      for (int32_t i = 0; i < nc; i++) {
        const dsp_bf16 *vr = io->v.data + (c0 + i) * io->v.tok + hv * io->v.head + v0;
        for (int32_t j = 0; j < nv; j++) w.Vt[(size_t)i * bv + j] = dsp_bf16_to_f32(vr[j]);
      }
      /* U = Tb v - w S (the O rows hold w S for a moment). */
      for (int32_t i = 0; i < nc; i++) {
        float *ur = w.U + (size_t)i * bv, *xs = w.O + (size_t)i * bv;
        for (int32_t j = 0; j < nv; j++) ur[j] = xs[j] = 0.0f;
        KDA_SFX(acc_rows)(ur, w.Tb + i * C, 1, w.Vt, bv, i + 1, nv);
        KDA_SFX(acc_rows)(xs, w.Wm + (size_t)i * K, 1, S + v0, V, K, nv);
        for (int32_t j = 0; j < nv; j++) ur[j] = ur[j] - xs[j];
      }
      /* o = (q exp(G)) S + Aqk U (the Vt rows hold the second sum). */
      for (int32_t i = 0; i < nc; i++) {
        float *oi = w.O + (size_t)i * bv, *oa = w.Vt + (size_t)i * bv;
        for (int32_t j = 0; j < nv; j++) oi[j] = oa[j] = 0.0f;
        KDA_SFX(acc_rows)(oi, w.Q + (size_t)i * K, 1, S + v0, V, K, nv);
        KDA_SFX(acc_rows)(oa, w.Aqk + i * C, 1, w.U, bv, i + 1, nv);
        dsp_bf16 *orow = io->o.data + (c0 + i) * io->o.tok + hv * io->o.head + v0;
        for (int32_t j = 0; j < nv; j++) orow[j] = dsp_f32_to_bf16(oi[j] + oa[j]);
      }
      /* S' = exp(G_last) S + KG^T U, row by row of S (O row 0 holds the sum). */
      float *acc = w.O;
      for (int32_t e = 0; e < K; e++) {
        for (int32_t j = 0; j < nv; j++) acc[j] = 0.0f;
        KDA_SFX(acc_rows)(acc, w.Kn + e, K, w.U, bv, nc, nv);
        float *sr = S + (int64_t)e * V + v0;
        const float eg = w.eglast[e];
        for (int32_t j = 0; j < nv; j++) sr[j] = eg * sr[j] + acc[j];
      }
    }
  }
  if (s->write_final) memcpy(st->data + (int64_t)slot * st->slot_stride + hv * KV, S, (size_t)KV * sizeof(float));
}
