/* The DSpark draft's insides, shared by its loader (dspark_load.c) and its
 * proposal (dspark.c). Per device: the draft layers (decoder.h), the context
 * projection, one stacked context cache for all layers, buffers sized at load. */
#ifndef DSP_MODEL_DSPARK_IMPL_H
#define DSP_MODEL_DSPARK_IMPL_H
#include "backend/backend.h"
#include "io/hf_config.h"
#include "io/hf_dir.h"
#include "model/decoder.h"

/* A proposal's per-row metadata (device block and staging, laid out alike). */
typedef struct {
  int64_t *crows, *brows;           /* [max_ctx] context rows' cache rows; [max_rows] block rows' */
  int32_t *cpos, *bpos, *bids;      /* [max_ctx] context positions; [max_rows] block positions, ids */
  int32_t *bslot, *bkeys;           /* [max_rows] the slot a block row reads, the keys it sees */
  int64_t *hidx;                    /* [max_head] a captured proposal's head row k * rows + b <- block row b K + k */
  int64_t *csrc;                    /* [max_ctx] context rows read from the target's taps: its row there */
} dr_meta;

#define DR_GRAPHS 32 /* captured proposals: one per head bucket, greedy and sampling */

typedef struct {
  int dev;
  int32_t tp_rank;
  dsp_comm *comm;
  dsp_dec_shape s;
  dsp_dec_layer *layer;
  dsp_weight *fc;                   /* [H, ntaps * H] (replicated) */
  dsp_weight *ctx_kv;               /* [2 L Wk, H]: every layer's k rows, then every layer's v rows (this rank's heads) */
  dsp_tensor hidden_norm, final_norm, rope_cos, rope_sin;
  dsp_tensor *k_norms;              /* [L] the layers' k_norm vectors (views of layer[l].w.k_norm) */
  dsp_bf16 *k_cache, *v_cache;      /* [(max_seqs + 1) * max_len][L * Wk]: layer l at column l * Wk */
  dsp_tensor feats, ctx, ckv;       /* [max_ctx, ntaps H], [max_ctx, H], [max_ctx, 2 L Wk] */
  dsp_dec_act a;                    /* [rows_cap * gamma] block rows */
  dr_meta dm, hm;
  void *h_meta;
  size_t meta_bytes;
  dsp_bf16 *h_feats;                /* staging of feats */
  dsp_op_graph *graph[DR_GRAPHS][8]; /* the captured proposals (CUDA, TP 1): [bucket][sampling + 2 ctx_target
                                        + 4 confidence] */
  void *mem[40];
  int nmem;
} dr_dev;

struct dsp_draft {
  dsp_backend *be;
  const dsp_target *target;
  dsp_hf_config cfg;
  dsp_draft_options opt;
  dsp_draft_info info;
  int64_t blk;                      /* rows of a block: block_size, or gamma (opt.block_gamma) */
  int32_t tp;
  dr_dev d[DSP_BACKEND_MAX_DEVICES];
  int nd;
  dsp_hf_dir *dir;                  /* kept open: W1 rows and the confidence head are read on the host */
  dsp_hf_dir *tdir;                 /* the target's, for its LM head (the Markov head's weights) */
  dsp_markov_head *head;
  dsp_tensor w1;                    /* [V, R] host view (confidence features) */
  dsp_bf16 *conf_w;                 /* [H (+ R)] host, or NULL */
  float conf_b;
  int64_t *len;                     /* [max_seqs] context positions per slot */
  dsp_bf16 *h_hidden;               /* [max_seqs * blk, H] pinned: the block's final states (head, confidence) */
  int graphs;                       /* proposals are captured per head bucket (CUDA, one device, TP 1, DSPARK_GRAPHS) */
  int32_t rows_cap;                 /* sequences the block's buffers hold: max_seqs, or with graphs the head's bucket
                                       for it (a captured proposal's padded rows) */
  int64_t ctx_cap;                  /* context rows the buffers hold: max_ctx, and a padded bucket's block + 1 each */
  dsp_markov_fused fb;              /* this call's bucket when captured */
  int fused, sampling, ctx_target;  /* this call runs captured; its variant; its context from the target */
  int want_conf;                    /* this call returns confidences: the block's states come to the host */
  int64_t *anchor64, *pos64;        /* [max_seqs] */
  int64_t nctx, nrows;              /* this call's context rows and block rows */
  int64_t bcall;                    /* this call's rows a block: blk, or the batch's rows */
  int64_t nreal;                    /* its block rows of real sequences (before a bucket's padding rows) */
  int32_t ngraphs;                  /* proposals captured */
  char report[2304]; /* its line and the head's report */
};

size_t dr_meta_layout(void *base, int64_t max_ctx, int64_t max_rows, int64_t max_head, dr_meta *m);

/* Where the last sampled proposal of `batch` sequences left the head's corrected logits in backend memory (one
 * device, TP 1, BF16): slot k of sequence b at row k x rows + b of ld elements; DSP_ERR_UNSUPPORTED elsewhere. */
dsp_status dsp_draft_device_logits(const dsp_draft *dr, int32_t batch, const void **data, int64_t *ld,
                                   int32_t *rows);

#endif
