/* The backend's insides: the ops table each backend fills, and the handle the
 * components hold. Components (src/model) reach kernels only through these
 * entries; only src/backend/<kind>/ includes kernel headers. */
#ifndef DSP_BACKEND_BACKEND_H
#define DSP_BACKEND_BACKEND_H
#include "dspark.h"
#include "backend/ops.h"
#include "backend/markov_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DSP_BACKEND_MAX_DEVICES 64

/* One device's executor of the Markov head (backend-specific). */
typedef struct dsp_markov_exec dsp_markov_exec;

/* The head's batch bucket for a proposal captured with the draft's layers:
 * its index and size, and its static hidden input [gamma][rows][ld] BF16 on
 * the device (rows: size padded for the kernels; columns past the hidden
 * size stay zero). */
typedef struct {
  int32_t index, size, rows;
  void *hidden;
  int64_t ld;
} dsp_markov_fused;

typedef struct {
  /* The Markov head on device `dev` (0 .. devices-1) for the plan's TP rank,
   * its weights w (host views, checked against the plan). Collective over
   * the device's TP communicator. */
  dsp_status (*markov_create)(dsp_backend *be, int dev, const dsp_markov_plan *plan, const dsp_markov_weights *w,
                              dsp_markov_exec **out);
  /* Inputs and outputs are checked by the caller. */
  dsp_status (*markov_propose)(dsp_markov_exec *x, const dsp_markov_inputs *in, dsp_markov_outputs *out);
  /* NULL where a live head cannot change its greedy path. */
  dsp_status (*markov_set_path)(dsp_markov_exec *x, const dsp_markov_plan *plan);
  /* Kernel choices and checks, for DSPARK_VERBOSE=1 (may be ""). */
  const char *(*markov_detail)(const dsp_markov_exec *x);
  void (*markov_last_timing)(const dsp_markov_exec *x, double *lm_ms, double *tail_ms);
  void (*markov_free)(dsp_markov_exec *x);
  /* Releases the backend's own state (not the shared fields below). */
  void (*free)(dsp_backend *be);
  /* The operations of backend/ops.h (arguments checked there). */
  dsp_status (*alloc)(dsp_backend *be, int dev, size_t bytes, void **out);
  void (*release)(dsp_backend *be, int dev, void *p);
  dsp_status (*upload)(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes);
  dsp_status (*download)(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes);
  dsp_status (*copy)(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes);
  dsp_status (*sync)(dsp_backend *be, int dev);
  dsp_status (*weight_create)(dsp_backend *be, int dev, const dsp_tensor *host, int strict, dsp_weight **out);
  void (*weight_free)(dsp_backend *be, dsp_weight *w);
  const char *(*weight_describe)(const dsp_weight *w);
  dsp_status (*gemm)(dsp_backend *be, int dev, const dsp_tensor *a, const dsp_weight *w, dsp_tensor *c);
  dsp_status (*markov_step)(dsp_backend *be, int dev, const dsp_op_markov_args *a);
  dsp_status (*embed)(dsp_backend *be, int dev, const dsp_tensor *table, const int32_t *ids, int64_t t,
                      dsp_tensor *out);
  dsp_status (*rmsnorm)(dsp_backend *be, int dev, const dsp_tensor *x, const dsp_tensor *w, float eps,
                        dsp_tensor *out);
  dsp_status (*rope)(dsp_backend *be, int dev, dsp_tensor *x, const int32_t *pos, const dsp_tensor *cos,
                     const dsp_tensor *sin);
  dsp_status (*add)(dsp_backend *be, int dev, const dsp_tensor *a, const dsp_tensor *b, dsp_tensor *out);
  dsp_status (*silu_mul)(dsp_backend *be, int dev, const dsp_tensor *g, const dsp_tensor *u, dsp_tensor *out);
  dsp_status (*scatter_rows)(dsp_backend *be, int dev, const dsp_tensor *src, const int64_t *idx, dsp_tensor *dst);
  dsp_status (*attention)(dsp_backend *be, int dev, const dsp_op_attention_args *a);
  dsp_status (*round_add)(dsp_backend *be, int dev, const dsp_tensor *x, const dsp_tensor *p, dsp_tensor *out);
  dsp_status (*select)(dsp_backend *be, int dev, const dsp_op_select_args *a);
  dsp_status (*gather_rows)(dsp_backend *be, int dev, const dsp_tensor *src, const int64_t *idx, dsp_tensor *dst);
  dsp_status (*host_alloc)(dsp_backend *be, int dev, size_t bytes, void **out);
  void (*host_release)(dsp_backend *be, int dev, void *p);
  dsp_status (*upload_async)(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes);
  dsp_status (*download_async)(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes);
  /* NULL where the backend has no graphs */
  dsp_status (*capture_begin)(dsp_backend *be, int dev);
  dsp_status (*capture_end)(dsp_backend *be, int dev, dsp_op_graph **out);
  dsp_status (*replay)(dsp_backend *be, int dev, dsp_op_graph *g);
  void (*graph_free)(dsp_backend *be, dsp_op_graph *g);
  /* The Markov head inside a captured proposal (NULL where the backend has no
   * graphs; TP 1): the bucket serving `batch`; staging of the anchors,
   * temperatures, seeds and positions (not hidden) before a replay; the head's
   * work enqueued on device dev's stream after the hidden input is written
   * there (capturable: its inputs are read from the staging, tokens and, with
   * sampling, logits land in pinned memory); after the stream's sync, the
   * tokens (and logits) into out. */
  dsp_status (*markov_fused_bucket)(dsp_markov_exec *x, int32_t batch, dsp_markov_fused *out);
  void (*markov_fused_stage)(dsp_markov_exec *x, const dsp_markov_inputs *in);
  dsp_status (*markov_fused_enqueue)(dsp_backend *be, int dev, dsp_markov_exec *x, int32_t batch, int sampling);
  dsp_status (*markov_fused_collect)(dsp_markov_exec *x, const dsp_markov_inputs *in, dsp_markov_outputs *out);
  /* Kimi Delta Attention (ops.h; NULL where the backend has no KDA kernels yet) */
  dsp_status (*kda_workspace)(dsp_backend *be, const dsp_kda_dims *d, int32_t conv_width, int64_t max_tokens,
                              size_t *bytes);
  dsp_status (*kda)(dsp_backend *be, int dev, const dsp_op_kda_args *a);
  dsp_status (*kda_copy)(dsp_backend *be, int dev, const dsp_kda_dims *d, const dsp_kda_conv_dims *cd,
                         dsp_kda_state *st, dsp_kda_conv_state *cs, int32_t src, int32_t dst);
  /* Fused forms of compositions (ops.h; NULL: ops.c composes them). attn_in sets *done = 0 where it
   * leaves a call to the composition. */
  dsp_status (*add_rmsnorm)(dsp_backend *be, int dev, dsp_tensor *x, const dsp_tensor *y, const dsp_tensor *w,
                            float eps, dsp_tensor *out);
  dsp_status (*attn_in)(dsp_backend *be, int dev, const dsp_op_attn_in_args *a, int *done);
  /* Speculative sampling's acceptance (ops.h) */
  dsp_status (*accept_workspace)(dsp_backend *be, int64_t vocab, int32_t max_seqs, int32_t gamma, size_t *ws_bytes,
                                 size_t *hs_bytes);
  dsp_status (*accept)(dsp_backend *be, int dev, const dsp_op_accept_args *a);
  /* Where the head's last sampled proposal of `batch` sequences left its corrected logits in device memory:
   * step k of sequence b at row k x rows + b of ld elements (NULL, or DSP_ERR_UNSUPPORTED, where they are not
   * kept there). */
  dsp_status (*markov_logits)(const dsp_markov_exec *x, int32_t batch, const void **data, int64_t *ld,
                              int32_t *rows);
  /* The in-place fp32 sum of x over comm, in order with device dev's work (ops.h; NULL: the comm called
   * directly, for host memory) */
  dsp_status (*allreduce)(dsp_backend *be, int dev, dsp_comm *comm, dsp_tensor *x);
  /* Called once on the thread of each device after the first before its first job (device 0 runs on the
   * caller's thread, which the backend sets up at creation; NULL: nothing to set up) */
  void (*thread_enter)(dsp_backend *be, int dev);
  /* Memory in use (ops.h; NULL: not known) */
  dsp_status (*memory_used)(dsp_backend *be, int dev, size_t *bytes);
  /* A row-parallel weight's K slices (ops.h; NULL: one sum over K) */
  dsp_status (*weight_slice)(dsp_backend *be, dsp_weight *w, int32_t slices, int32_t *taken);
} dsp_backend_ops;

struct dsp_backend {
  const dsp_backend_ops *ops;
  dsp_backend_kind kind;
  dsp_comm *comm;                          /* the processes (borrowed, or own_comm) */
  dsp_comm *own_comm;                      /* a self communicator made when none was given */
  int32_t ndev;                            /* devices this process drives (1 on the CPU) */
  int device[DSP_BACKEND_MAX_DEVICES];     /* CUDA device ids */
  dsp_comm *tp[DSP_BACKEND_MAX_DEVICES];   /* each device's TP communicator (the CPU's: comm) */
  int32_t tp_size, tp_rank0;
  struct dsp_dev_pool *pool;               /* the devices' threads (each.c), started by the first call */
  void *impl;
  char desc[256];
};

dsp_status dsp_backend_cpu_init(dsp_backend *be, const dsp_backend_config *cfg);
/* DSP_ERR_UNSUPPORTED in a build without CUDA. */
dsp_status dsp_backend_cuda_init(dsp_backend *be, const dsp_backend_config *cfg);
/* Visible CUDA devices (0 in a build without CUDA). */
int dsp_backend_cuda_devices(void);

/* Runs fn(ctx, dev) for every device of the backend, each on its own thread
 * when there are several (their collectives need all of them running), and
 * returns the first failure with its device named. Device 0 runs on the
 * caller's thread; the others' threads live as long as the backend, so a
 * device's thread-local state (the CPU's OpenMP team) is set up once. Not
 * reentrant: fn must not call it again. */
dsp_status dsp_backend_each(dsp_backend *be, dsp_status (*fn)(void *ctx, int dev), void *ctx);
/* Ends the devices' threads (dsp_backend_free calls it). */
void dsp_backend_each_stop(dsp_backend *be);

#ifdef __cplusplus
}
#endif
#endif
