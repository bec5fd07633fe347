/* The Qwen3 target's insides, shared by its loader (qwen3_load.c) and its
 * forward (qwen3.c). One dev_state per device of the backend: that TP rank's
 * slices of the weights, its KV cache and its activation buffers, all sized at
 * load time (a forward allocates nothing). */
#ifndef DSP_MODEL_QWEN3_IMPL_H
#define DSP_MODEL_QWEN3_IMPL_H
#include "backend/backend.h"
#include "core/select.h"
#include "io/hf_config.h"
#include "model/decoder.h"

typedef struct {
  dsp_dec_layer w;
  dsp_bf16 *k_cache, *v_cache;          /* [max_seqs + 1][max_len][Hkv local][D]: the last slot takes padding rows */
} qw_layer;

/* A call's per-row metadata, one block in backend memory and one in staging
 * (host memory the device reads), laid out alike so one copy moves it. */
typedef struct {
  int32_t *ids, *pos, *rslot, *rkeys; /* [rows]: token, position, cache slot read, keys seen */
  int64_t *rows;                      /* [rows] the cache row its K/V go to */
  int64_t *selidx, *selpos;           /* [sel] the row a selection reads, the position it draws */
  float *trow;                        /* [sel] temperature */
  uint64_t *seedrow;                  /* [sel] noise key */
} qw_meta;

/* Decode and verify run as CUDA graphs per bucket of rows (greedy, sampling). */
#define QW_BUCKETS 14

typedef struct {
  int dev;                   /* index among the backend's devices */
  int32_t tp_rank;
  dsp_comm *comm;            /* the TP communicator of this device */
  dsp_dec_shape s;           /* this rank's share: heads, kv heads, MLP columns */
  int64_t vr, v0, vreal;     /* LM-head rows per rank, this rank's first, its real rows */
  qw_layer *layer;
  dsp_tensor embed;          /* device [V, H] (replicated) */
  dsp_weight *lm;            /* [vr rows, H] */
  dsp_tensor final_norm, rope_cos, rope_sin;
  /* activations, max_tokens rows */
  dsp_dec_act a;
  dsp_tensor logits, taps;
  /* per-call metadata and the selections' keys, in backend memory and in staging */
  qw_meta dm, hm;
  void *h_meta;
  size_t meta_bytes;
  uint64_t *d_keys, *h_keys;
  dsp_op_graph *graph[QW_BUCKETS][4]; /* [bucket][sampling + 2 (several rows per sequence: verify)] */
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
  /* host side of a forward, sized at load */
  uint64_t *keys, *keys_all;   /* [max_tokens], [procs][max_tokens]: the best key of each selecting row */
  dsp_bf16 *h_logits;          /* [tp][max_tokens][vr] local logits gathered */
  int32_t buckets[QW_BUCKETS], nbuckets; /* graph row counts (none on the CPU or with DSPARK_GRAPHS=0) */
  char dir[4096];              /* the checkpoint directory (the draft reads its LM head) */
  const dsp_target_batch *batch;
  int64_t ntok, nsel;          /* new tokens, selecting rows of this call */
  int64_t mrows, srows;        /* rows and selecting rows run (padded up to a bucket in a graph) */
  int bucket, sampling;        /* the graph of this call (-1: none), and its variant */
  int group;                   /* the most rows one sequence brings (attention's row-group hint) */
  int want_logits;
  char report[512];
};

/* Lays out a metadata block of T rows at base (NULL: sizes only); its bytes. */
size_t qw_meta_layout(void *base, int64_t T, qw_meta *m);

#endif
