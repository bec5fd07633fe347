/* spec_accept.h's host acceptance: slots in waves over the threads, each
 * sequence stopping at its first rejection, then the residual draws. */
#include "kernels/cpu/spec_accept.h"

#include <omp.h>

#include "core/philox.h"
#include "kernels/cpu/softmax_row.h"

static int64_t chunks_of(int64_t V) { return (V + DSP_ACCEPT_CHUNK - 1) / DSP_ACCEPT_CHUNK; }

/* ws: pd, qd [S G] double, then per thread w [V], cs [chunks] double, ep, eq [V] float; then task [2 S G] int32 */
static size_t thread_bytes(int64_t V) { return (size_t)(V + chunks_of(V)) * 8 + (size_t)V * 8; }

size_t dsp_cpu_accept_bytes(int64_t vocab, int32_t max_seqs, int32_t gamma, int nthreads) {
  const size_t SG = (size_t)max_seqs * (size_t)gamma;
  return SG * 16 + (size_t)nthreads * thread_bytes(vocab) + SG * 8;
}

typedef struct {
  double *pd, *qd;
  int32_t *task;
  char *th0;
} layout;

static layout layout_of(const dsp_op_accept_args *a, int nthreads) {
  const size_t SG = (size_t)a->nseq * (size_t)a->gamma;
  layout L;
  L.pd = a->ws;
  L.qd = L.pd + SG;
  L.th0 = (char *)(L.qd + SG);
  L.task = (int32_t *)(L.th0 + (size_t)nthreads * thread_bytes(a->vocab));
  return L;
}

/* p (which 0) or q (1) of sequence r's slot i into e; returns z. */
static double pq_row(const dsp_op_accept_args *a, int which, int32_t r, int32_t i, float *e) {
  const int64_t j = (int64_t)r * a->gamma + i;
  const dsp_bf16 *l = which ? a->qlog + a->qoff[j] : a->tlog + a->toff[j];
  return dsp_cpu_softmax_row(l, a->vocab, a->temp[r], e);
}

/* The chunk sums cs of w, and their sum in order. */
static double chunked_mass(const double *w, int64_t V, double *cs) {
  double mass = 0.0;
  for (int64_t c = 0; c < chunks_of(V); c++) {
    const int64_t v1 = (c + 1) * DSP_ACCEPT_CHUNK < V ? (c + 1) * DSP_ACCEPT_CHUNK : V;
    double s = 0.0;
    for (int64_t v = c * DSP_ACCEPT_CHUNK; v < v1; v++) s += w[v];
    cs[c] = s;
    mass += s;
  }
  return mass;
}

/* The first id whose R + P_v passes u x mass (spec_accept.h); where rounding leaves none, the last id of w > 0. */
static int64_t chunked_inverse(const double *w, int64_t V, const double *cs, double mass, double u) {
  const double target = u * mass;
  double R = 0.0;
  for (int64_t c = 0; c < chunks_of(V); c++) {
    const double Rn = R + cs[c];
    if (Rn > target) {
      const int64_t v1 = (c + 1) * DSP_ACCEPT_CHUNK < V ? (c + 1) * DSP_ACCEPT_CHUNK : V;
      double P = 0.0;
      for (int64_t v = c * DSP_ACCEPT_CHUNK; v < v1; v++) {
        P += w[v];
        if (R + P > target && w[v] > 0.0) return v;
      }
      break;
    }
    R = Rn;
  }
  for (int64_t v = V - 1; v >= 0; v--)
    if (w[v] > 0.0) return v;
  return 0;
}

/* The residual draw of sequence r rejected at slot i, in thread scratch th. */
static int32_t draw(const dsp_op_accept_args *a, char *th, int32_t r, int32_t i) {
  const int64_t V = a->vocab;
  double *w = (double *)th, *cs = w + V;
  float *ep = (float *)(cs + chunks_of(V)), *eq = ep + V;
  const double zp = pq_row(a, 0, r, i, ep), zq = pq_row(a, 1, r, i, eq);
  for (int64_t v = 0; v < V; v++) {
    const double x = (double)ep[v] / zp - (double)eq[v] / zq;
    w[v] = x > 0.0 ? x : 0.0;
  }
  double mass = chunked_mass(w, V, cs);
  if (!(mass > 1e-12)) { /* p and q agree: the draw is p's */
    for (int64_t v = 0; v < V; v++) w[v] = (double)ep[v] / zp;
    mass = chunked_mass(w, V, cs);
  }
  const double u = dsp_philox_uniform(a->seed[r], a->pos[r] + i, DSP_RESIDUAL_PURPOSE);
  return (int32_t)chunked_inverse(w, V, cs, mass, u);
}

/* Draft i of sequence r is accepted when u x q(d_i) < p(d_i). Slot by slot in waves, each wave's p and q rows
 * spread over the threads, a wave taking as many slots ahead per open sequence as leave no thread idle (each
 * row's sums are fixed, so neither the split nor the slots ahead change a result). residual: -2 undecided, -3
 * rejected (its draw follows), -1 all accepted. */
void dsp_cpu_accept(const dsp_op_accept_args *a, int nthreads) {
  const int32_t G = a->gamma;
  const int64_t V = a->vocab;
  const layout L = layout_of(a, nthreads);
  int32_t open = 0;
  for (int32_t r = 0; r < a->nseq; r++) {
    a->accepted[r] = 0;
    a->residual[r] = a->ndraft[r] > 0 ? -2 : -1;
    open += a->residual[r] == -2;
  }
  while (open > 0) {
    const int32_t w = nthreads > 2 * open ? nthreads / (2 * open) : 1;
    int32_t nt = 0;
    for (int32_t r = 0; r < a->nseq; r++)
      for (int32_t i = a->accepted[r]; a->residual[r] == -2 && i < a->accepted[r] + w && i < a->ndraft[r]; i++)
        L.task[nt++] = 2 * (r * G + i), L.task[nt++] = 2 * (r * G + i) + 1;
#pragma omp parallel for schedule(dynamic) num_threads(nthreads) if (nt > 1 && V >= 4096)
    for (int32_t t = 0; t < nt; t++) {
      const int32_t j = L.task[t] / 2, which = L.task[t] % 2;
      float *e = (float *)(L.th0 + (size_t)omp_get_thread_num() * thread_bytes(V)); /* the thread's w, as floats */
      const double z = pq_row(a, which, j / G, j % G, e);
      (which ? L.qd : L.pd)[j] = (double)e[a->drafts[j]] / z;
    }
    open = 0;
    for (int32_t r = 0; r < a->nseq; r++) {
      if (a->residual[r] != -2) continue;
      const int32_t k = a->ndraft[r], lim = a->accepted[r] + w < k ? a->accepted[r] + w : k;
      int32_t i = a->accepted[r];
      while (i < lim && dsp_philox_uniform(a->seed[r], a->pos[r] + i, DSP_ACCEPT_PURPOSE) * L.qd[r * G + i] <
                            L.pd[r * G + i])
        i++;
      a->accepted[r] = i;
      if (i < lim) a->residual[r] = -3;
      else if (i == k) a->residual[r] = -1;
      else open++;
    }
  }
  int32_t nrej = 0;
  for (int32_t r = 0; r < a->nseq; r++) nrej += a->residual[r] == -3;
#pragma omp parallel for schedule(dynamic) num_threads(nthreads) if (nrej > 1 && V >= 4096)
  for (int32_t r = 0; r < a->nseq; r++)
    if (a->residual[r] == -3)
      a->residual[r] = draw(a, L.th0 + (size_t)omp_get_thread_num() * thread_bytes(V), r, a->accepted[r]);
}
