#ifndef DSP_DECODE_GAMMA_AUTO_H
#define DSP_DECODE_GAMMA_AUTO_H
#include <stdint.h>

#include "comm/comm.h"
#include "dspark.h"

/* gamma "auto" (greedy only; src/decode/speculative.c runs it): the verify's cost as alpha + beta x tokens per
 * call, a least-squares fit over every round so far from the slowest rank's time sums (a max is exact: every rank
 * gets the same model, so all choose alike), made after the first two rounds (which verify 1 and 0 drafts: two
 * cheap sizes), after each round from the AUTO_CALIB calibration rounds to round AUTO_FULL, then every AUTO_FULL
 * rounds and after any round that ran a size for the first time, frozen between fits. Rounds 2 and 3 verify G / 2
 * and G drafts only where that could pay even if every slot after the first were accepted (where the target is
 * bound by its arithmetic, as a CPU at a batch of 16, it cannot, and those rounds would cost most). Each other
 * round verifies the k that maximizes the tokens it is expected to commit over its time, from the acceptance
 * counted so far; every AUTO_FULL rounds a probe verifies all G (the deep slots' acceptance keeps being measured)
 * or, while no drafts pay, every 4 AUTO_FULL rounds one draft by a quarter of the batch (part: those sequences
 * draft, the others decode; the part rotates over the batch, and its proposal time stays out of the model's, which
 * is the whole batch's), or G where the optimistic bound says drafting might pay again. k = 0 is a decode step (the
 * draft is not called; its context rows wait). It is chosen only once AUTO_TRIED proposals have been checked: a
 * round without drafts measures no acceptance, so a few unlucky first rounds must not settle it. With rows (the
 * draft loaded with block_gamma: each round's block has as many rows as it drafts) a proposal's cost is fitted the
 * same way, as d0 + d1 x rows, over the proposals of the whole batch. Costs are not linear in the rows (a CPU's
 * products run rows in tiles of a few), so the model adds to each line the residual measured at that size (a
 * verify's tokens below DSP_GAMMA_AUTO_NT, a block's rows): the median of the size's last DSP_GAMMA_AUTO_RING times
 * (up to three preempted rounds of eight do not price a size out), from the slowest rank, shrunk toward the line by
 * one pseudo-sample; the first two rounds (cold) are left out. A size never run is priced at the nearest size run
 * below it where that is under its line (a cost never falls with the size: one round then measures it). After the
 * calibration, rounds verify each count of drafts not yet run, from 1 to G, where it could pay by the same bound
 * (every size measured warm once). Every AUTO_NEAR rounds (none a probe) verify one draft more or one fewer than
 * the choice, in turn, so that the sizes beside it stay measured. */
#define DSP_GAMMA_AUTO_NT 64
#define DSP_GAMMA_AUTO_ROWS 65
#define DSP_GAMMA_AUTO_RING 8
typedef struct {
  int on, rows, rounds, nprop, nappend, last; /* last: the k chosen in the last round that was not a probe */
  int32_t part;                          /* this round's probe by part of the batch: its sequences (0: all) */
  double sn, snn, st, snt, draft, append; /* least-squares sums over (tokens, verify ms); draft ms summed */
  double skk, sk, skt, sprop;             /* with rows: sums over (rows, ms of the proposal call alone) */
  double alpha, beta, tdraft, tappend;     /* the frozen model */
  double d1;                               /* with rows: ms a block row (tdraft is then the fit's intercept) */
  double p0;                               /* with rows: the proposal call's own intercept (its residuals' line) */
  int32_t near, sweep;                     /* the rounds that explored beside the choice; the last size swept */
  float vt[DSP_GAMMA_AUTO_NT][DSP_GAMMA_AUTO_RING], pt[DSP_GAMMA_AUTO_ROWS][DSP_GAMMA_AUTO_RING]; /* last times */
  int32_t vn[DSP_GAMMA_AUTO_NT], pn[DSP_GAMMA_AUTO_ROWS]; /* times seen per size (alike on every rank) */
  float vres[DSP_GAMMA_AUTO_NT], pres[DSP_GAMMA_AUTO_ROWS]; /* the frozen model's residuals */
} dsp_gamma_auto;

/* The drafts to verify this round (all sequences alike) of at most G, given ns sequences; 0: no proposal. */
int32_t dsp_gamma_auto_k(dsp_gamma_auto *a, int32_t G, int32_t ns, const dsp_generate_stats *st);
/* One round's times into the fit (k: the drafts it verified, 0 when it proposed none; part: the sequences that
 * proposed in a probe by part of the batch, else 0; draft_ms with the waiting context rows appended before the
 * proposal, prop_ms the proposal call alone); at the fitting rounds, the model from the slowest rank's sums
 * (collective over comm). */
dsp_status dsp_gamma_auto_learn(dsp_gamma_auto *a, dsp_comm *comm, int32_t nt, int32_t k, int32_t part,
                                double verify_ms, double draft_ms, double prop_ms);

#endif
