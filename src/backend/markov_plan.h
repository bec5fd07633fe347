/* The Markov head's plan, shared by every backend: the validated config, this
 * TP rank's vocabulary rows, the greedy path and its eligibility, the checks
 * of weights and outputs, which collectives a variant needs, the sizes of the
 * per-proposal buffers, and the start-up line. Executors (src/backend/<kind>/)
 * run what the plan says. */
#ifndef DSP_BACKEND_MARKOV_PLAN_H
#define DSP_BACKEND_MARKOV_PLAN_H
#include <stddef.h>
#include <stdint.h>

#include "dspark.h"

/* The CUDA head's largest batch (DSP_MK_MAXBQ of kernels/cuda/markov.h, asserted equal there). */
#define DSP_MARKOV_CUDA_MAX_BATCH 128

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  dsp_markov_config cfg;   /* validated */
  int32_t tp_size, tp_rank;
  int64_t row0, vr, rows_real; /* global rows [row0, row0 + rows_real) of this rank, vr per rank */
  int has_full;            /* every rank holds all of W2 (given, or TP 1) */
  dsp_path greedy_path;    /* resolved: never AUTO */
  int sharded_fallback;    /* sharded was asked for (or AUTO) and is not eligible */
} dsp_markov_plan;

/* What one variant (greedy or sampling) of a proposal does over TP > 1. */
typedef struct {
  int full;          /* all-gather base; every rank multiplies all of W2 */
  int exchange;      /* sharded: all-gather one (value, id) per row and rank each step */
  int bcast;         /* broadcast each step's tokens from rank 0 */
  int gather_logits; /* sharded sampling: all-gather the local logits */
} dsp_markov_steps;

/* The sizes of a proposal's buffers for max_batch, with the backend's padding
 * of vocabulary rows per rank and of the batch. Every product is checked. */
typedef struct {
  int64_t row_pad;     /* vr rounded up to row_align */
  int64_t batch_pad;   /* max_batch rounded up to batch_align */
  int64_t m;           /* gamma * batch_pad: rows of one proposal's base */
  int64_t segs;        /* segments of a full-vocabulary product (tp_size) */
  size_t logit;        /* bytes per logit: 2 (bf16) or 4 (fp32-add) */
  size_t base_local;   /* [m][row_pad] bf16 */
  size_t base_all;     /* [segs][m][row_pad] bf16; 0 when no path gathers base */
  size_t logits_local; /* [m][row_pad] logits */
  size_t logits_all;   /* [segs][m][row_pad] logits */
  size_t logits_full;  /* [batch_pad][vocab] logits: one step over the whole vocabulary */
  size_t hidden;       /* [m][hidden_pad] bf16 staged inputs */
} dsp_markov_layout;

/* Validates cfg and makes rank tp_rank's plan (w->has_w2_full tells has_full). */
dsp_status dsp_markov_plan_make(const dsp_markov_config *cfg, int32_t tp_size, int32_t tp_rank, int has_w2_full,
                                dsp_markov_plan *p);
/* Resolves a requested greedy path (AUTO: sharded where eligible). */
dsp_status dsp_markov_plan_set_path(dsp_markov_plan *p, dsp_path requested);
dsp_status dsp_markov_plan_check_weights(const dsp_markov_plan *p, const dsp_markov_weights *w);
dsp_status dsp_markov_plan_check_outputs(const dsp_markov_plan *p, const dsp_markov_inputs *in,
                                         const dsp_markov_outputs *out);
/* 1 when any row samples (T > 0). */
int dsp_markov_any_sampled(const dsp_markov_inputs *in);
/* collectives: the ranks exchange (tp_size > 1; a one-rank test may force it). */
dsp_markov_steps dsp_markov_plan_steps(const dsp_markov_plan *p, int sampling, int collectives);
dsp_status dsp_markov_plan_layout(const dsp_markov_plan *p, int64_t row_align, int64_t batch_align,
                                  int64_t hidden_align, dsp_markov_layout *l);
/* The one start-up line, e.g. "dspark: markov head (cpu) greedy: W2 sharded
 * over TP4, bf16 local top-1, broadcast on; sampling: full logits". */
void dsp_markov_plan_line(const dsp_markov_plan *p, const char *backend, char *buf, size_t n);
/* Real vocabulary rows among global rows [r0, r0 + n). */
static inline int64_t dsp_markov_valid_rows(const dsp_markov_plan *p, int64_t r0, int64_t n) {
  int64_t v = p->cfg.vocab - r0;
  return v < 0 ? 0 : (v > n ? n : v);
}
static inline dsp_dtype dsp_markov_logit_dtype(const dsp_markov_plan *p) {
  return p->cfg.contract == DSP_CONTRACT_FP32_ADD ? DSP_F32 : DSP_BF16;
}

#ifdef __cplusplus
}
#endif
#endif
