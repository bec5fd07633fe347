/* gamma auto's model and choice (gamma_auto.h). */
#include "decode/gamma_auto.h"

#include <string.h>

#include "core/status.h"

enum { AUTO_CALIB = 4, AUTO_FULL = 16, AUTO_TRIED = 32, AUTO_NEAR = 32 };

/* A proposal of the batch drafting k tokens (its block of k rows with rows). */
static double draft_ms(const dsp_gamma_auto *a, int32_t k) {
  return a->tdraft + a->d1 * (double)k + (a->rows && k < DSP_GAMMA_AUTO_ROWS ? a->pres[k] : 0.0);
}

/* A verify of nt tokens: the line plus the residual measured at nt. */
static double verify_cost(const dsp_gamma_auto *a, int64_t nt) {
  return a->alpha + a->beta * (double)nt + (nt < DSP_GAMMA_AUTO_NT ? a->vres[nt] : 0.0);
}

/* Whether k drafts could commit tokens faster than decode steps (ms0 each) if every slot after the first were
 * accepted (the first at its acceptance so far): the bound that gates the costly rounds. */
static int may_pay(const dsp_gamma_auto *a, int32_t k, int32_t ns, const dsp_generate_stats *st, double ms0) {
  const double a0 = ((double)st->kept[0] + 1.0) / ((double)st->tried[0] + 2.0);
  return (1.0 + a0 * (double)k) * ms0 > draft_ms(a, k) + verify_cost(a, (int64_t)ns * (k + 1));
}

static int deep_may_pay(const dsp_gamma_auto *a, int32_t G, int32_t ns, const dsp_generate_stats *st, double ms0) {
  for (int32_t k = 2; k <= G; k++)
    if (may_pay(a, k, ns, st, ms0)) return 1;
  return 0;
}

int32_t dsp_gamma_auto_k(dsp_gamma_auto *a, int32_t G, int32_t ns, const dsp_generate_stats *st) {
  a->part = 0;
  if (a->rounds < 2) return a->rounds == 0 ? 1 : 0;
  const double ms0 = a->tappend + verify_cost(a, ns);
  if (a->rounds < AUTO_CALIB) return deep_may_pay(a, G, ns, st, ms0) ? (a->rounds == 2 ? (G + 1) / 2 : G) : 0;
  /* the sweep: each size not yet run once, where it may pay */
  for (int32_t k = a->sweep + 1; k <= G && k < DSP_GAMMA_AUTO_ROWS; k++)
    if ((int64_t)ns * (k + 1) < DSP_GAMMA_AUTO_NT && !a->vn[ns * (k + 1)] && may_pay(a, k, ns, st, ms0))
      return a->last = a->sweep = k;
  a->sweep = G;
  /* the probe; while decode steps pay best a full one costs more than it can find, so it runs a quarter as
     often and verifies one draft (the first slot's acceptance refreshed) unless drafting might pay again */
  if (a->rounds % AUTO_FULL == 0 && a->last > 0) return G;
  if (a->rounds % (4 * AUTO_FULL) == 0) {
    if (deep_may_pay(a, G, ns, st, ms0)) return G;
    a->part = (ns + 3) / 4; /* a quarter of the batch refreshes the first slot's acceptance; the rest decodes */
    return 1;
  }
  /* the prior of a slot: the acceptance pooled over all slots tried, weighted as two tries */
  double kept = 0.0, tried = 0.0;
  for (int32_t i = 0; i < G && i < 64; i++) kept += (double)st->kept[i], tried += (double)st->tried[i];
  const double p0 = (kept + 1.0) / (tried + 2.0);
  int32_t best = 0;
  double best_rate = st->tried[0] >= AUTO_TRIED ? 1.0 / (ms0 > 1e-6 ? ms0 : 1e-6) : -1.0;
  double reach = 1.0, expect = 1.0; /* the bonus always commits */
  for (int32_t k = 1; k <= G; k++) {
    /* slot k - 1's acceptance given its prefix */
    const double ak = k - 1 < 64 ? ((double)st->kept[k - 1] + 2.0 * p0) / ((double)st->tried[k - 1] + 2.0) : p0;
    reach *= ak;
    expect += reach;
    const double ms = draft_ms(a, k) + verify_cost(a, (int64_t)ns * (k + 1));
    const double rate = expect / (ms > 1e-6 ? ms : 1e-6);
    if (rate > best_rate) best_rate = rate, best = k;
  }
  a->last = best;
  if (best > 0 && a->rounds % AUTO_NEAR == AUTO_NEAR / 4) { /* beside the choice, one side then the other */
    const int32_t side = a->near++ % 2 ? -1 : 1;
    int32_t k = best + side;
    if (k < 1 || k > G) k = best - side; /* the edge: the other side */
    return k >= 1 && k <= G ? k : best;
  }
  return best;
}

/* A time into its size's ring. */
static void add_size(float *ring, int32_t *n, double ms) { ring[(*n)++ % DSP_GAMMA_AUTO_RING] = (float)ms; }

/* The median of a size's last times (n seen; up to DSP_GAMMA_AUTO_RING in its ring). */
static double median(const float *ring, int32_t n) {
  const int32_t m = n < DSP_GAMMA_AUTO_RING ? n : DSP_GAMMA_AUTO_RING;
  float v[DSP_GAMMA_AUTO_RING];
  memcpy(v, ring, (size_t)m * sizeof *v);
  for (int32_t i = 1; i < m; i++) /* insertion sort of at most DSP_GAMMA_AUTO_RING */
    for (int32_t j = i; j > 0 && v[j] < v[j - 1]; j--) {
      const float t = v[j];
      v[j] = v[j - 1], v[j - 1] = t;
    }
  return m % 2 ? v[m / 2] : 0.5 * ((double)v[m / 2 - 1] + v[m / 2]);
}

/* The residuals of the sizes' medians from a line (c0 + c1 x size), shrunk by one pseudo-sample at the line; a
 * size never run: the nearest size run below it, where that is under its line. */
static void residuals(float *res, const float (*ring)[DSP_GAMMA_AUTO_RING], const int32_t *n, int32_t sizes,
                      double c0, double c1) {
  double below = -1.0;
  for (int32_t i = 0; i < sizes; i++) {
    const double line = c0 + c1 * i;
    if (n[i] > 0) {
      const int32_t m = n[i] < DSP_GAMMA_AUTO_RING ? n[i] : DSP_GAMMA_AUTO_RING;
      res[i] = (float)((median(ring[i], n[i]) - line) * m / (m + 1.0));
      below = line + res[i];
    } else {
      res[i] = below >= 0.0 && below < line ? (float)(below - line) : 0.0f;
    }
  }
}

dsp_status dsp_gamma_auto_learn(dsp_gamma_auto *a, dsp_comm *comm, int32_t nt, int32_t k, int32_t part,
                                double verify_ms, double draft_ms, double prop_ms) {
  /* a size run for the first time refits the model at once (its price was a guess); the counts are alike on
     every rank, so all refit together */
  int fresh = 0;
  if (a->rounds >= 2 && nt < DSP_GAMMA_AUTO_NT) {
    fresh |= a->vn[nt] == 0;
    add_size(a->vt[nt], &a->vn[nt], verify_ms);
  }
  if (a->rounds >= 2 && k > 0 && !part && k < DSP_GAMMA_AUTO_ROWS) {
    fresh |= a->rows && a->pn[k] == 0;
    add_size(a->pt[k], &a->pn[k], prop_ms);
  }
  a->sn += nt, a->snn += (double)nt * nt, a->st += verify_ms, a->snt += nt * verify_ms;
  if (k > 0 && !part) { /* tdraft: a proposal of the whole batch */
    a->draft += draft_ms, a->nprop++;
    a->sk += k, a->skk += (double)k * k, a->skt += k * prop_ms, a->sprop += prop_ms;
  } else if (k == 0) {
    a->append += draft_ms, a->nappend++;
  }
  ++a->rounds;
  if (!fresh && a->rounds != 2 &&
      (a->rounds < AUTO_CALIB || (a->rounds > AUTO_FULL && a->rounds % AUTO_FULL != 1)))
    return DSP_OK;
  /* the sums and every ring slot from the slowest rank (the slots were filled in the same rounds on all) */
  enum { NR = DSP_GAMMA_AUTO_RING, NV = 6 + (DSP_GAMMA_AUTO_NT + DSP_GAMMA_AUTO_ROWS) * NR };
  float v[NV], sum[NV];
  const float head[6] = {(float)a->st, (float)a->snt, (float)a->draft, (float)a->append, (float)a->skt,
                         (float)a->sprop};
  memcpy(v, head, sizeof head);
  memcpy(v + 6, a->vt, sizeof a->vt);
  memcpy(v + 6 + DSP_GAMMA_AUTO_NT * NR, a->pt, sizeof a->pt);
  DSP_TRY(dsp_comm_allreduce(comm, v, sum, NV, DSP_F32, DSP_REDUCE_MAX));
  const double n = a->rounds, st = sum[0], snt = sum[1];
  const double den = n * a->snn - a->sn * a->sn;
  a->beta = den > 0.0 ? (n * snt - a->sn * st) / den : 0.0;
  if (a->beta < 0.0) a->beta = 0.0; /* noise: a verify never gets cheaper with more tokens */
  a->alpha = (st - a->beta * a->sn) / n;
  a->tdraft = a->nprop ? sum[2] / a->nprop : 0.0;
  const double dden = a->nprop * a->skk - a->sk * a->sk;
  a->p0 = a->nprop ? (double)sum[5] / a->nprop : 0.0; /* one block size so far: its mean */
  if (a->rows && dden > 0.0) { /* the proposals ran blocks of at least two sizes: the slope from the proposal
                                  calls alone (a round's waiting context rows, appended before them, do not grow
                                  with its rows; the first round's are the prompt's), the intercept from the rounds */
    a->d1 = (a->nprop * (double)sum[4] - a->sk * (double)sum[5]) / dden;
    if (a->d1 < 0.0) a->d1 = 0.0; /* noise: a block never gets cheaper with more rows */
    a->tdraft = ((double)sum[2] - a->d1 * a->sk) / a->nprop;
    if (a->tdraft < 0.0) a->tdraft = 0.0, a->d1 = (double)sum[2] / a->sk; /* noise: through the origin */
    a->p0 = ((double)sum[5] - a->d1 * a->sk) / a->nprop;
  }
  a->tappend = a->nappend ? sum[3] / a->nappend : 0.0;
  residuals(a->vres, (const float(*)[NR])(sum + 6), a->vn, DSP_GAMMA_AUTO_NT, a->alpha, a->beta);
  if (a->rows)
    residuals(a->pres, (const float(*)[NR])(sum + 6 + DSP_GAMMA_AUTO_NT * NR), a->pn, DSP_GAMMA_AUTO_ROWS, a->p0,
              a->d1);
  return DSP_OK;
}
