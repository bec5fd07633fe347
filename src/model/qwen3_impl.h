/* The Qwen3 target's insides, shared by its loader (qwen3_load.c) and its
 * forward (qwen3.c). One dev_state per device of the backend: that TP rank's
 * slices of the weights, its KV cache and its activation buffers, all sized at
 * load time (a forward allocates nothing). */
#ifndef DSP_MODEL_QWEN3_IMPL_H
#define DSP_MODEL_QWEN3_IMPL_H
#include "backend/backend.h"
#include "core/select.h"
#include "io/hf_config.h"

typedef struct {
  dsp_weight *qkv, *o, *gate_up, *down; /* [Hq+2Hkv local x D, H], [H, Hq local x D], [2 I local, H], [H, I local] */
  dsp_tensor in_norm, post_norm, q_norm, k_norm; /* device [H], [H], [D], [D] */
  dsp_bf16 *k_cache, *v_cache;          /* [slots][max_len][Hkv local][D] */
} qw_layer;

typedef struct {
  int dev;                   /* index among the backend's devices */
  int32_t tp_rank;
  dsp_comm *comm;            /* the TP communicator of this device */
  int64_t hq, hkv, inter;    /* local heads, kv heads, MLP columns */
  int64_t vr, v0, vreal;     /* LM-head rows per rank, this rank's first, its real rows */
  qw_layer *layer;
  dsp_tensor embed;          /* device [V, H] (replicated) */
  dsp_weight *lm;            /* [vr rows, H] */
  dsp_tensor final_norm, rope_cos, rope_sin;
  /* activations, max_tokens rows */
  dsp_tensor x, h, qkv, attn, o, gu, act, part, logits, taps;
  /* per-call metadata in backend memory */
  int32_t *d_ids, *d_pos, *d_slot, *d_qstart, *d_qcount, *d_klen;
  int64_t *d_rows;
  void *mem[32];             /* what free releases */
  int nmem;
} qw_dev;

struct dsp_target {
  dsp_backend *be;
  dsp_target_info info;
  dsp_hf_config cfg;
  dsp_target_options opt;
  int32_t taps[64];
  int32_t tp;
  qw_dev d[DSP_BACKEND_MAX_DEVICES];
  int nd;
  int64_t *len;              /* [max_seqs] cached positions per slot */
  /* host staging of a forward, sized at load */
  int32_t *h_pos, *h_qstart, *h_klen, *h_rowseq, *h_selrow;
  int64_t *h_rows, *h_selpos;
  float *h_bv;                 /* [nd][max_tokens] each device's local best values */
  int64_t *h_bi;               /* [nd][max_tokens] and ids */
  dsp_pair *pairs, *pairs_all; /* [max_tokens], [procs][max_tokens] */
  dsp_bf16 *h_logits;          /* [tp][max_tokens][vr] local logits gathered */
  const dsp_target_batch *batch;
  int64_t ntok, nsel;          /* new tokens, selecting rows of this call */
  int want_logits;
  char report[512];
};

#endif
