/* dspark: a C runtime for DSpark speculative decoding.
 * The one public header: status codes, tensor views, and the entry points of
 * each component. Handles are opaque; every function that can fail because of
 * what the caller gave it returns a dsp_status, and dsp_error_message() holds
 * the readable reason (file, tensor, what is wrong) for the calling thread. */
#ifndef DSPARK_H
#define DSPARK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ------------------------------------------------------------- */
typedef enum {
  DSP_OK = 0,
  DSP_ERR_ARG,         /* an argument is out of its domain */
  DSP_ERR_IO,          /* a file could not be opened, read, mapped or written */
  DSP_ERR_FORMAT,      /* a file is malformed (header, JSON, offsets) */
  DSP_ERR_DTYPE,       /* a tensor has a dtype we do not accept here */
  DSP_ERR_SHAPE,       /* shapes disagree */
  DSP_ERR_RANGE,       /* an index or value is out of range (token id, temperature) */
  DSP_ERR_MISSING,     /* a required tensor or key is absent */
  DSP_ERR_NOMEM,       /* an allocation failed or an arena is full */
  DSP_ERR_COMM,        /* a collective failed, or another rank reported an error */
  DSP_ERR_DEVICE,      /* a device is missing or a device call failed */
  DSP_ERR_UNSUPPORTED  /* valid, but this build or layout cannot do it */
} dsp_status;

const char *dsp_status_name(dsp_status s);
/* The last error's message for this thread ("" after success). */
const char *dsp_error_message(void);

/* ---- tensors ------------------------------------------------------------- */
typedef enum { DSP_BF16 = 0, DSP_F32, DSP_I64, DSP_I32, DSP_F16, DSP_DTYPE_COUNT } dsp_dtype;
#define DSP_MAX_DIMS 4

/* A view: data pointer, dtype, shape and strides in elements. Views need not be
 * contiguous; every kernel that takes one honours its strides. */
typedef struct {
  void *data;
  dsp_dtype dtype;
  int32_t ndim;
  int64_t shape[DSP_MAX_DIMS];
  int64_t stride[DSP_MAX_DIMS];
} dsp_tensor;

typedef uint16_t dsp_bf16;

size_t dsp_dtype_size(dsp_dtype t);
const char *dsp_dtype_name(dsp_dtype t);


/* ---- the Markov head (DESIGN §1-§3) ----------------------------------------
 * Vocabulary rows are split over TP ranks: rank r of P owns global rows
 * [r*Vr, (r+1)*Vr) with Vr = ceil(Vp / P); rows >= Vp are internal padding and
 * rows >= V (the real vocabulary) are never selected. */
typedef enum { DSP_PATH_AUTO = 0, DSP_PATH_ORIGINAL, DSP_PATH_SHARDED, DSP_PATH_REPLICATED } dsp_path;
typedef enum { DSP_CONTRACT_BF16 = 0, DSP_CONTRACT_FP32_ADD } dsp_contract;

typedef struct {
  int64_t vocab;        /* V: real vocabulary size (ids >= V never win) */
  int64_t vocab_padded; /* Vp: rows in the weight files (Vp >= V) */
  int64_t hidden;       /* H */
  int64_t rank;         /* R: Markov rank */
  int64_t gamma;        /* drafted tokens per proposal */
  int32_t max_batch;    /* largest B a proposal may have */
  dsp_path path;        /* AUTO = sharded where eligible, else original */
  dsp_contract contract;
  int32_t broadcast;    /* per-step broadcast of tokens from rank 0 (default 1) */
} dsp_head_config;

/* One rank's weights as host views (bf16). lm_local / w2_local: this rank's
 * rows [r*Vr, min((r+1)*Vr, Vp)); w1: all Vp rows (replicated); w2_full: all Vp
 * rows, needed by the original and replicated paths (may be NULL for sharded). */
typedef struct {
  dsp_tensor lm_local, w1, w2_local, w2_full;
  int has_w2_full;
} dsp_head_weights;

typedef struct {
  int32_t batch;              /* B <= max_batch */
  const dsp_tensor *hidden;   /* [B, gamma, H] BF16 view */
  const int64_t *anchor;      /* [B] */
  const float *temperature;   /* [B] or NULL (all greedy); 0 = greedy row */
  const uint64_t *seed;       /* [B] or NULL (0) */
  const int64_t *position;    /* [B] or NULL (0): the anchor's absolute position */
} dsp_head_inputs;

typedef struct {
  int64_t *tokens;            /* [B * gamma] */
  /* Optional [B, gamma, V] view (BF16, or F32 for fp32-add): corrected logits.
   * Filled on every rank when given; sampled batches compute them anyway. */
  dsp_tensor *logits;
} dsp_head_outputs;

typedef struct dsp_head dsp_head;
typedef struct dsp_comm dsp_comm;

/* Rank's global row range for a TP split. */
void dsp_head_rows(int64_t vocab_padded, int size, int rank, int64_t *row0, int64_t *rows_per_rank,
                   int64_t *rows_real);
dsp_status dsp_head_create(const dsp_head_config *cfg, dsp_comm *comm, const dsp_head_weights *w,
                           dsp_head **out);
dsp_status dsp_head_propose(dsp_head *h, const dsp_head_inputs *in, dsp_head_outputs *out);
/* The one start-up line, e.g. "dspark: markov head greedy: W2 sharded over TP4,
 * bf16 local top-1; sampling: full logits". */
const char *dsp_head_report(const dsp_head *h);
dsp_path dsp_head_greedy_path(const dsp_head *h);
/* Switch the greedy path of a live head (benchmarks alternate paths on one set
 * of weights). ORIGINAL and REPLICATED need w2_full; an ineligible SHARDED
 * request falls back to ORIGINAL, as at creation. */
dsp_status dsp_head_set_path(dsp_head *h, dsp_path p);
const char *dsp_path_name(dsp_path p);
/* Wall-clock parts of the last proposal on this rank: LM-head product (with the
 * base all-gather where the path has one) and the gamma Markov steps. */
void dsp_head_last_timing(const dsp_head *h, double *lm_ms, double *tail_ms);
void dsp_head_free(dsp_head *h);
/* Validates a proposal's inputs against a config (anchor range, temperature). */
dsp_status dsp_head_check_inputs(const dsp_head_config *cfg, const dsp_head_inputs *in);

#ifdef __cplusplus
}
#endif
#endif /* DSPARK_H */
