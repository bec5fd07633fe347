/* The Markov head's CUDA executor: weights on the device, a pool of captured CUDA
 * graphs (one greedy and one sampling graph per batch bucket, sharing that
 * bucket's static input buffers), and the plans of the three greedy paths and
 * the sampling variant (DESIGN §3, §4).
 *
 * One proposal, as enqueued (and captured) on the head's stream:
 *   base = lm_head(hidden_static)          [gamma][bq][vrp] bf16 (kernels/cuda/gemm.h)
 *   (original/replicated/sampling over TP>1) all-gather base -> [P] segments
 *   keys, barrier = 0
 *   tail: one persistent launch for all gamma steps where no per-step
 *         collective is needed; else per step: step launch, (sharded) all-gather
 *         of one 64-bit key per row, select, (broadcast) tokens from rank 0.
 * The host copies inputs into the bucket's static buffers before the replay and
 * copies tokens (and logits) out after it. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "comm/comm.h"
#include "core/clock.h"
#include "core/env.h"
#include "core/status.h"
}
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/markov_cuda.h"
#include "kernels/cuda/common/check.h"
#include "kernels/cuda/common/device.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/markov.h"
#include "backend/markov_plan.h"

static_assert(DSP_MK_MAXBQ == DSP_MARKOV_CUDA_MAX_BATCH, "dsp_markov_max_batch must report the kernels' batch limit");

#define HP_ALIGN 64    /* hidden padded with zeros to a multiple of 64 columns */
#define ROW_ALIGN 16   /* vocabulary rows per rank padded to a multiple of 16 */
#define MAX_BUCKETS 32
#define DEFAULT_PREFETCH 4
#define DEFAULT_L2KEEP 3 /* ring kernel 4: 3/8 of W2 evict_last (the best of bench_tail's settings) */
#define DEFAULT_RESIDENT 2 /* ring kernel 5: W2 chunks per warpgroup kept in registers (cuda/markov.h) */

typedef struct {
  int size, bq;          /* bucket batch size, padded to a multiple of 16 */
  uint16_t *hidden;      /* [gamma][bq][hp] */
  unsigned char *meta;   /* anchor i32[bq] | temperature f32[bq] | seed u64[bq] | position i64[bq] */
  int grid[2];           /* tail blocks: greedy, sampling */
  int stages[2];         /* ring stages (ring kernel): greedy, sampling */
  cudaGraphExec_t full[2];
} cu_bucket;

/* What a variant does on this head. */
typedef struct {
  int full;          /* all-gathered base, every rank's W2 segments */
  int per_step;      /* one launch per step (a per-step collective or a forced choice) */
  int exchange;      /* sharded: all-gather of the per-row keys each step */
  int bcast;         /* broadcast each step's tokens from rank 0 */
  int gather_logits; /* sharded sampling: all-gather the local logits at the end */
} cu_plan;

struct dsp_markov_exec {
  dsp_markov_plan plan; /* the shared plan: paths, rows, checks, the start-up line */
  dsp_markov_config cfg;
  dsp_cuda_tuning tune; /* resolved: no -1 left */
  int device, rank, P, multi;
  dsp_comm *comm, *own_comm;
  int64_t hp, row0, vr, vrp, rows_real;
  int has_full;
  int strict, ring, coop, sms; /* ring: 0 register kernel, 4-5 ring kernels 4-5 (markov_dyn.cuh) */
  int pdl;               /* the persistent tail starts while the LM head's product finishes (PDL) */
  float t_kernel[3];     /* tail ms of the register kernel and ring kernels 4, 5 when chosen by timing (0: not timed) */
  long long wg_compared, wg_differ; /* ring kernel 5's check here (dsp_cuda_markov_wgmma_check); -1: could not run */
  int wg_ok;             /* the check passed on every rank: ring kernel 5 may run */
  cudaStream_t stream;
  dsp_cuda_gemm *lm;
  uint16_t *d_lm, *d_w1, *d_w2_local, *d_w2_full;
  int w2_local_owned;               /* d_w2_local is its own allocation (not a segment of d_w2_full) */
  uint16_t *d_w2p_local, *d_w2p_full; /* W2 packed for ring kernel 4 (cuda/markov.h); NULL in strict mode */
  uint16_t *d_base_local, *d_base_all;
  void *d_logits;
  float *d_noise; /* sampling's Gumbel noise in d_logits' layout (tune.noise), else NULL */
  unsigned long long *d_keys, *d_keys_all;
  int32_t *d_tokens;
  unsigned int *d_barrier;
  uint16_t *h_hidden;
  unsigned char *h_meta;
  int32_t *h_tokens;
  void *h_logits;
  cu_bucket bk[MAX_BUCKETS];
  int nb, bq_max;
  size_t bytes_buffers, bytes_graphs;
  double t_propose_ms;  /* wall clock of the last proposal, copies included */
  int ngraphs;
  char buckets_str[160];
  char report[512];
  char detail[2048];
};

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static size_t logit_size(const dsp_cuda_head *h) { return h->cfg.contract == DSP_CONTRACT_FP32_ADD ? 4 : 2; }
static int64_t gamma_of(const dsp_cuda_head *h) { return h->cfg.gamma; }
static size_t sync_bytes(const dsp_cuda_head *h) { return (size_t)round_up((1 + gamma_of(h)) * 4, 16); }

extern "C" void dsp_cuda_tuning_default(dsp_cuda_tuning *t) {
  memset(t, 0, sizeof *t);
  t->strict = -1;
  t->graphs = -1;
  t->buckets = NULL;
  t->per_step = 0;
  t->force_collectives = 0;
  t->prefetch = -1;
  t->serpentine = -1;
  t->kernel = -1;
  t->l2keep = -1;
  t->resident = -1;
  t->lm_choice = 0;
  t->pdl = -1;
  t->noise = -1;
}

static dsp_status dev_alloc(dsp_cuda_head *h, void **p, size_t bytes) {
  *p = NULL;
  if (bytes == 0) bytes = 256;
  cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess) {
    *p = NULL;
    cudaGetLastError();
    return dsp_fail(DSP_ERR_NOMEM, "%s:%d: cudaMalloc(%zu bytes): %s", __FILE__, __LINE__, bytes,
                    cudaGetErrorString(e));
  }
  h->bytes_buffers += bytes;
  /* on the head's stream: it does not wait for the legacy default stream */
  DSP_CUDA_TRY(cudaMemsetAsync(*p, 0, bytes, h->stream));
  return DSP_OK;
}

static dsp_status host_alloc(void **p, size_t bytes) {
  *p = NULL;
  cudaError_t e = cudaMallocHost(p, bytes ? bytes : 256);
  if (e != cudaSuccess) {
    *p = NULL;
    cudaGetLastError();
    return dsp_fail(DSP_ERR_NOMEM, "%s:%d: cudaMallocHost(%zu bytes): %s", __FILE__, __LINE__, bytes,
                    cudaGetErrorString(e));
  }
  memset(*p, 0, bytes ? bytes : 256);
  return DSP_OK;
}

/* Buckets from the list: the entries below max_batch, then the first entry at or
 * above it (max_batch itself when there is none, or when that entry would pad
 * past the kernel's largest batch). Sorted, unique. */
static dsp_status parse_buckets(const char *s, int max_batch, int *out, int *n) {
  int v[MAX_BUCKETS * 2], nv = 0;
  const char *p = s;
  while (*p) {
    char *end;
    long x = strtol(p, &end, 10);
    if (end == p || x < 1 || x > 1 << 20 || nv == MAX_BUCKETS * 2)
      return dsp_fail(DSP_ERR_ARG, "DSPARK_BUCKETS '%s': want a comma-separated list of positive batch sizes", s);
    v[nv++] = (int)x;
    p = end;
    if (*p == ',') p++;
    else if (*p) return dsp_fail(DSP_ERR_ARG, "DSPARK_BUCKETS '%s': unexpected '%c'", s, *p);
  }
  for (int i = 1; i < nv; i++) /* insertion sort: a handful of entries */
    for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
      int t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  *n = 0;
  int top = 0;
  for (int i = 0; i < nv; i++) {
    if (*n && out[*n - 1] == v[i]) continue;
    if (v[i] < max_batch) {
      out[(*n)++] = v[i];
    } else {
      top = v[i];
      break;
    }
  }
  if (!top || round_up(top, 16) > DSP_MK_MAXBQ) top = max_batch;
  if (*n == MAX_BUCKETS) (*n)--;
  out[(*n)++] = top;
  return DSP_OK;
}

/* Rows [r0, r0 + rows) x cols of a host view (any strides) into a device
 * matrix with row stride dst_ld elements. */
/* Host rows into device rows on `stream`, complete on return: a plain
 * cudaMemcpy2D from pageable memory may return before its DMA lands, and the
 * head's non-blocking stream would not wait for it. */
static dsp_status upload_rows(uint16_t *dst, int64_t dst_ld, const dsp_tensor *t, int64_t r0, int64_t rows,
                              int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return DSP_OK;
  if (t->stride[1] == 1 && t->stride[0] >= cols) {
    const uint16_t *src = (const uint16_t *)t->data + r0 * t->stride[0];
    DSP_CUDA_TRY(cudaMemcpy2DAsync(dst, (size_t)dst_ld * 2, src, (size_t)t->stride[0] * 2, (size_t)cols * 2,
                                   (size_t)rows, cudaMemcpyHostToDevice, stream));
    DSP_CUDA_TRY(cudaStreamSynchronize(stream));
    return DSP_OK;
  }
  int64_t chunk = (64 << 20) / (cols * 2);
  if (chunk < 1) chunk = 1;
  if (chunk > rows) chunk = rows;
  uint16_t *buf = (uint16_t *)malloc((size_t)(chunk * cols) * 2);
  if (!buf) return dsp_fail(DSP_ERR_NOMEM, "cuda markov head: no host memory to pack a strided weight");
  dsp_status s = DSP_OK;
  for (int64_t r = 0; r < rows && s == DSP_OK; r += chunk) {
    int64_t n = rows - r < chunk ? rows - r : chunk;
    for (int64_t i = 0; i < n; i++)
      for (int64_t c = 0; c < cols; c++)
        buf[i * cols + c] = ((const uint16_t *)t->data)[(r0 + r + i) * t->stride[0] + c * t->stride[1]];
    cudaError_t e = cudaMemcpy2DAsync(dst + r * dst_ld, (size_t)dst_ld * 2, buf, (size_t)cols * 2, (size_t)cols * 2,
                                      (size_t)n, cudaMemcpyHostToDevice, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream); /* buf is refilled next */
    if (e != cudaSuccess)
      s = dsp_fail(DSP_ERR_DEVICE, "%s:%d: cudaMemcpy2D: %s", __FILE__, __LINE__, cudaGetErrorString(e));
  }
  free(buf);
  return s;
}

static cu_plan plan_of(const dsp_cuda_head *h, int sampling) {
  const dsp_markov_steps st = dsp_markov_plan_steps(&h->plan, sampling, h->multi);
  cu_plan p;
  memset(&p, 0, sizeof p);
  p.full = st.full;
  p.exchange = st.exchange;
  p.bcast = st.bcast;
  p.gather_logits = st.gather_logits;
  p.per_step = h->tune.per_step || st.exchange || st.bcast;
  return p;
}

/* Enqueues one proposal (or only its tail) on stream s (the head's, or a
 * fused proposal's). */
static dsp_status enqueue_on(dsp_cuda_head *h, cu_bucket *bk, int sampling, int tail_only, cudaStream_t s) {
  const int bq = bk->bq;
  const int64_t G = gamma_of(h), M = G * bq;
  const size_t es = logit_size(h);
  const cu_plan p = plan_of(h, sampling);
  if (h->comm) DSP_TRY(dsp_comm_set_stream(h->comm, s)); /* a shared communicator: ours while we enqueue */
  dsp_mk_args a;
  memset(&a, 0, sizeof a);
  if (p.full) {
    a.w2 = h->d_w2_full;
    a.w2p = h->d_w2p_full;
    a.base = h->d_base_all;
    a.nseg = h->P;
    a.seg_rank0 = 0;
    a.seg_stride = M * h->vrp;
  } else {
    a.w2 = h->d_w2_local;
    a.w2p = h->d_w2p_local;
    a.base = h->d_base_local;
    a.nseg = 1;
    a.seg_rank0 = h->rank;
    a.seg_stride = 0;
  }
  a.w1 = h->d_w1;
  a.vr = h->vr;
  a.vocab = h->cfg.vocab;
  a.ld = (int32_t)h->vrp;
  a.seg_rows = (int32_t)h->vrp;
  a.bq = bq;
  a.fp32_add = h->cfg.contract == DSP_CONTRACT_FP32_ADD;
  a.anchor = (const int32_t *)bk->meta;
  a.temp = (const float *)(bk->meta + 4 * (size_t)bq);
  a.seed = (const uint64_t *)(bk->meta + 8 * (size_t)bq);
  a.pos = (const int64_t *)(bk->meta + 16 * (size_t)bq);
  a.tokens = h->d_tokens;
  a.keys = h->d_keys;
  a.barrier = h->d_barrier;
  a.serpentine = h->tune.serpentine;
  a.keep8 = h->tune.l2keep;
  a.resident = h->tune.resident;
  a.prefetch = h->tune.prefetch;
  a.stages = bk->stages[sampling];
  /* ring kernel 5 with one warpgroup per chunk (greedy, bq <= 32): no copy of the next step
     until the block's arrival at the grid barrier (faster there; slower above bq 32 and for
     ring kernel 4: bench/RESULTS.md) */
  a.pause = !sampling && bq <= 32 && h->ring == 5 && !a.fp32_add;
  if (sampling)
    a.logits = (p.full || !h->multi) ? h->d_logits : (char *)h->d_logits + (size_t)h->rank * (size_t)(M * h->vrp) * es;
  if (sampling && h->d_noise) { /* drawn before the memset and the product: the tail follows the product (PDL) */
    DSP_TRY(dsp_cuda_markov_noise(&a, (int32_t)G, h->d_noise, s));
    a.noise = h->d_noise;
  }
  /* one memset node clears the barrier, the claim counters and the keys (they share an allocation);
     before the LM head's product, so that the tail's launch follows the product directly (PDL) */
  DSP_CUDA_TRY(cudaMemsetAsync(h->d_barrier, 0, sync_bytes(h) + (size_t)(G * bq) * sizeof(unsigned long long), s));
  if (!tail_only) {
    DSP_TRY(dsp_cuda_gemm_run(h->lm, bk->hidden, h->hp, h->d_lm, h->d_base_local, M, h->vrp, s));
    if (p.full) DSP_TRY(dsp_comm_allgather(h->comm, h->d_base_local, h->d_base_all, (size_t)(M * h->vrp) * 2));
  }

  dsp_mk_launch l = {sampling, h->strict, h->ring, bk->grid[sampling], h->coop, 0};
  /* PDL only where the product is the kernel right before (no collective in between) */
  l.pdl = h->pdl && !tail_only && !p.full && !p.per_step;
  if (!p.per_step) {
    a.k_begin = 0;
    a.k_end = (int32_t)G;
    a.persistent = 1;
    DSP_TRY(dsp_cuda_markov_launch(&a, &l, s));
  } else {
    l.cooperative = 0;
    for (int64_t k = 0; k < G; k++) {
      a.k_begin = (int32_t)k;
      a.k_end = (int32_t)k + 1;
      a.persistent = 0;
      DSP_TRY(dsp_cuda_markov_launch(&a, &l, s));
      int32_t *tok = h->d_tokens + k * bq;
      if (p.exchange) {
        DSP_TRY(dsp_comm_allgather(h->comm, h->d_keys + k * bq, h->d_keys_all, (size_t)bq * 8));
        DSP_TRY(dsp_cuda_markov_select(h->d_keys_all, h->P, bq, tok, s));
      } else {
        DSP_TRY(dsp_cuda_markov_select(h->d_keys + k * bq, 1, bq, tok, s));
      }
      if (p.bcast) DSP_TRY(dsp_comm_bcast(h->comm, tok, (size_t)bq * 4, 0));
    }
  }
  if (p.gather_logits)
    DSP_TRY(dsp_comm_allgather(h->comm, a.logits, h->d_logits, (size_t)(M * h->vrp) * es));
  return DSP_OK;
}

static dsp_status enqueue(dsp_cuda_head *h, cu_bucket *bk, int sampling, int tail_only) {
  return enqueue_on(h, bk, sampling, tail_only, h->stream);
}

static dsp_status capture(dsp_cuda_head *h, cu_bucket *bk, int sampling, int tail_only, cudaGraphExec_t *out) {
  cudaGraph_t g = NULL;
  DSP_CUDA_TRY(cudaStreamBeginCapture(h->stream, cudaStreamCaptureModeRelaxed));
  dsp_status s = enqueue(h, bk, sampling, tail_only);
  cudaError_t e = cudaStreamEndCapture(h->stream, &g);
  if (s == DSP_OK && e != cudaSuccess)
    s = dsp_fail(DSP_ERR_DEVICE, "%s:%d: cudaStreamEndCapture (bucket %d, %s): %s", __FILE__, __LINE__, bk->size,
                 sampling ? "sampling" : "greedy", cudaGetErrorString(e));
  if (s == DSP_OK) {
    e = cudaGraphInstantiate(out, g, 0);
    if (e != cudaSuccess)
      s = dsp_fail(DSP_ERR_DEVICE, "%s:%d: cudaGraphInstantiate (bucket %d): %s", __FILE__, __LINE__, bk->size,
                   cudaGetErrorString(e));
  }
  if (g) cudaGraphDestroy(g);
  cudaGetLastError();
  return s;
}

static void make_report(dsp_cuda_head *h) {
  char dev[256] = "GPU";
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, h->device) == cudaSuccess) snprintf(dev, sizeof dev, "%s", prop.name);
  cu_plan pg = plan_of(h, 0);
  char ring5[320];
  snprintf(ring5, sizeof ring5,
           "shared-memory ring kernel 5 (ring kernel 4's producer, wgmma consumers: up to 32 rows the two warpgroups "
           "take the chunks in turn, %d W2 chunks resident in each one's registers; two halves of every chunk above; "
           "greedy buckets of 16, 32, 64 or 128 rows, other launches ring kernel 4)",
           h->tune.resident);
  dsp_markov_plan_line(&h->plan, "cuda", h->report, sizeof h->report);
  size_t mem_buffers = 0, mem_graphs = 0;
  dsp_cuda_head_memory(h, &mem_buffers, &mem_graphs);
  snprintf(h->detail, sizeof h->detail,
           "%s, buckets %s (%d graphs%s, %.1f MiB graph memory, %.1f MiB weights and buffers), LM head %s, Markov "
           "tail %s, %s (%d blocks), products %s",
           dev, h->buckets_str, h->ngraphs, h->ngraphs ? "" : ": DSPARK_GRAPHS=0, eager",
           (double)mem_graphs / (1 << 20), (double)mem_buffers / (1 << 20), dsp_cuda_gemm_describe(h->lm),
           pg.per_step ? "per-step kernels"
           : h->pdl    ? (h->coop ? "one persistent cooperative kernel launched as the LM head's product ends (PDL)"
                                  : "one persistent kernel (plain launch) launched as the LM head's product ends (PDL)")
                       : (h->coop ? "one persistent cooperative kernel" : "one persistent kernel (plain launch)"),
           h->ring == 5 ? ring5
           : h->ring == 4 ? "shared-memory ring kernel 4 (chunks claimed dynamically; packed W2 by one bulk copy and base "
                          "rows by tensor boxes per chunk; 1 producer thread + 8 consumer warps)"
                        : "register-streaming kernel (8 warps, L2 prefetch)",
           h->nb ? h->bk[h->nb - 1].grid[0] : 0,
           h->strict ? "strict fmaf chain (bitwise = CPU)"
           : h->ring == 5 ? "tensor cores (wgmma and mma.sync bf16, fp32 accumulate)"
                          : "tensor cores (mma.sync bf16, fp32 accumulate)");
  if (h->t_kernel[0] > 0 && h->t_kernel[1] > 0) {
    size_t n = strlen(h->detail);
    snprintf(h->detail + n, sizeof h->detail - n,
             "; tail kernel chosen by timing: register %.3f ms, ring 4 %.3f ms, ring 5 %.3f ms",
             (double)h->t_kernel[0], (double)h->t_kernel[1], (double)h->t_kernel[2]);
  }
  if (h->wg_compared) {
    size_t n = strlen(h->detail);
    if (h->wg_compared < 0)
      snprintf(h->detail + n, sizeof h->detail - n, "; ring kernel 5 not run (its wgmma check could not run here)");
    else
      snprintf(h->detail + n, sizeof h->detail - n, "; wgmma check: %lld of %lld products differ from mma.sync%s",
               h->wg_differ, h->wg_compared,
               h->wg_ok ? "" : h->wg_differ ? " (ring kernel 5 not used)" : " (failed on another rank: ring kernel 5 not used)");
  }
}

extern "C" void dsp_cuda_head_free(dsp_cuda_head *h) {
  if (!h) return;
  cudaSetDevice(h->device);
  if (h->stream) cudaStreamSynchronize(h->stream);
  for (int i = 0; i < h->nb; i++) {
    cu_bucket *b = &h->bk[i];
    for (int v = 0; v < 2; v++) {
      if (b->full[v]) cudaGraphExecDestroy(b->full[v]);
    }
    cudaFree(b->hidden);
    cudaFree(b->meta);
  }
  void *dev[] = {h->d_lm, h->d_w1, h->w2_local_owned && h->d_w2_local != h->d_w2_full ? h->d_w2_local : NULL,
                 h->d_w2_full, h->d_w2p_local, h->d_w2p_full == h->d_w2p_local ? NULL : h->d_w2p_full,
                 h->d_base_local, h->d_base_all, h->d_logits, h->d_noise, h->d_keys_all, h->d_tokens, h->d_barrier};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
    if (dev[i]) cudaFree(dev[i]);
  void *host[] = {h->h_hidden, h->h_meta, h->h_tokens, h->h_logits};
  for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
    if (host[i]) cudaFreeHost(host[i]);
  dsp_cuda_gemm_free(h->lm);
  if (h->stream) cudaStreamDestroy(h->stream);
  dsp_comm_free(h->own_comm);
  cudaGetLastError();
  free(h);
}

static dsp_status setup_comm(dsp_cuda_head *h, dsp_comm *comm) {
  int size = comm ? dsp_comm_size(comm) : 1;
  int is_nccl = comm && !strcmp(dsp_comm_kind(comm), "nccl");
  if (is_nccl) {
    h->comm = comm;
  } else if (size > 1) {
    DSP_TRY(dsp_comm_nccl_create(comm, h->device, &h->own_comm));
    h->comm = h->own_comm;
  } else if (h->tune.force_collectives) {
    DSP_TRY(dsp_comm_nccl_create_group(1, &h->device, &h->own_comm));
    h->comm = h->own_comm;
  }
  h->P = h->comm ? dsp_comm_size(h->comm) : 1;
  h->rank = h->comm ? dsp_comm_rank(h->comm) : 0;
  h->multi = h->P > 1 || (h->tune.force_collectives && h->comm);
  if (h->comm) DSP_TRY(dsp_comm_set_stream(h->comm, h->stream));
  return DSP_OK;
}

static dsp_status upload_weights(dsp_cuda_head *h, const dsp_markov_weights *w) {
  const int64_t H = h->cfg.hidden, R = h->cfg.rank, Vp = h->cfg.vocab_padded;
  DSP_TRY(dev_alloc(h, (void **)&h->d_lm, (size_t)(h->vrp * h->hp) * 2));
  DSP_TRY(upload_rows(h->d_lm, h->hp, &w->lm_local, 0, h->rows_real, H, h->stream));
  DSP_TRY(dev_alloc(h, (void **)&h->d_w1, (size_t)Vp * DSP_MK_RP * 2));
  DSP_TRY(upload_rows(h->d_w1, DSP_MK_RP, &w->w1, 0, Vp, R, h->stream));
  if (h->multi && h->has_full) {
    /* every rank's W2 segment, each padded to vrp rows: the full-vocabulary product */
    DSP_TRY(dev_alloc(h, (void **)&h->d_w2_full, (size_t)(h->P * h->vrp) * DSP_MK_RP * 2));
    for (int s = 0; s < h->P; s++) {
      int64_t r0, vr, real;
      dsp_markov_rows(Vp, h->P, s, &r0, &vr, &real);
      DSP_TRY(upload_rows(h->d_w2_full + (size_t)(s * h->vrp) * DSP_MK_RP, DSP_MK_RP, &w->w2_full, r0, real, R,
                          h->stream));
    }
    h->d_w2_local = h->d_w2_full + (size_t)(h->rank * h->vrp) * DSP_MK_RP;
  } else {
    DSP_TRY(dev_alloc(h, (void **)&h->d_w2_local, (size_t)h->vrp * DSP_MK_RP * 2));
    h->w2_local_owned = 1;
    if (w->has_w2_full)
      DSP_TRY(upload_rows(h->d_w2_local, DSP_MK_RP, &w->w2_full, h->row0, h->rows_real, R, h->stream));
    else
      DSP_TRY(upload_rows(h->d_w2_local, DSP_MK_RP, &w->w2_local, 0, h->rows_real, R, h->stream));
    if (!h->multi) h->d_w2_full = h->d_w2_local;
  }
  if (h->strict || h->tune.kernel == DSP_TAIL_REGISTER) return DSP_OK; /* no ring kernel to feed */
  /* ring kernels 4-5 read W2 packed by chunks: the local rows, and the full rows when they differ */
  DSP_TRY(dev_alloc(h, (void **)&h->d_w2p_local, dsp_cuda_markov_packed_elems(h->vrp) * 2));
  DSP_TRY(dsp_cuda_markov_pack_w2(h->d_w2_local, h->vrp, h->d_w2p_local, h->stream));
  h->d_w2p_full = h->d_w2p_local;
  if (h->multi && h->has_full) { /* (rank 0's local rows start the full rows: same pointer, other extent) */
    const int64_t rows = (int64_t)h->P * h->vrp;
    DSP_TRY(dev_alloc(h, (void **)&h->d_w2p_full, dsp_cuda_markov_packed_elems(rows) * 2));
    DSP_TRY(dsp_cuda_markov_pack_w2(h->d_w2_full, rows, h->d_w2p_full, h->stream));
  }
  DSP_CUDA_TRY(cudaStreamSynchronize(h->stream));
  return DSP_OK;
}

static dsp_status alloc_buffers(dsp_cuda_head *h) {
  const int64_t G = gamma_of(h), Mmax = G * h->bq_max;
  const int64_t segs = h->multi ? h->P : 1;
  DSP_TRY(dev_alloc(h, (void **)&h->d_base_local, (size_t)(Mmax * h->vrp) * 2));
  if (h->multi && h->has_full) DSP_TRY(dev_alloc(h, (void **)&h->d_base_all, (size_t)(h->P * Mmax * h->vrp) * 2));
  DSP_TRY(dev_alloc(h, &h->d_logits, (size_t)(segs * Mmax * h->vrp) * logit_size(h)));
  if (h->tune.noise) DSP_TRY(dev_alloc(h, (void **)&h->d_noise, (size_t)(segs * Mmax * h->vrp) * 4));
  /* [barrier, claims: 1 + gamma u32, padded to 16 bytes][keys: gamma x bq u64] */
  DSP_TRY(dev_alloc(h, (void **)&h->d_barrier, sync_bytes(h) + (size_t)Mmax * 8));
  h->d_keys = (unsigned long long *)((char *)h->d_barrier + sync_bytes(h));
  DSP_TRY(dev_alloc(h, (void **)&h->d_keys_all, (size_t)(h->P * h->bq_max) * 8));
  DSP_TRY(dev_alloc(h, (void **)&h->d_tokens, (size_t)Mmax * 4));
  for (int i = 0; i < h->nb; i++) {
    cu_bucket *b = &h->bk[i];
    DSP_TRY(dev_alloc(h, (void **)&b->hidden, (size_t)(G * b->bq * h->hp) * 2));
    DSP_TRY(dev_alloc(h, (void **)&b->meta, (size_t)b->bq * 24));
  }
  DSP_TRY(host_alloc((void **)&h->h_hidden, (size_t)(Mmax * h->hp) * 2));
  DSP_TRY(host_alloc((void **)&h->h_meta, (size_t)h->bq_max * 24));
  DSP_TRY(host_alloc((void **)&h->h_tokens, (size_t)Mmax * 4));
  return DSP_OK;
}

/* Kernel instances, launch sizes and the LM-head algorithm for every bucket. */
static dsp_status prepare_kernels(dsp_cuda_head *h) {
  DSP_CUDA_TRY(cudaDeviceGetAttribute(&h->sms, cudaDevAttrMultiProcessorCount, h->device));
  DSP_TRY(dsp_cuda_gemm_create(h->vrp, h->hp, h->strict, h->tune.lm_choice == 0   ? DSP_GEMM_WGMMA
                                                       : h->tune.lm_choice == 4 ? DSP_GEMM_WGMMA_SINGLE
                                                                                : DSP_GEMM_PINNED,
                              &h->lm));
  for (int i = 0; i < h->nb; i++) {
    cu_bucket *b = &h->bk[i];
    DSP_TRY(dsp_cuda_gemm_prepare(h->lm, gamma_of(h) * b->bq));
    for (int v = 0; v < 2; v++) {
      /* both kernels when the choice is left to timing (register first, so the ring's
       * stage count stays); one block per SM: every block resident at once, as the grid
       * barrier needs */
      for (int ring = 0; ring < 2; ring++) {
        if (ring ? !(h->ring || h->tune.kernel == DSP_TAIL_AUTO) : h->ring) continue;
        size_t smem = 0;
        int occ = 0, stages = 0;
        DSP_TRY(dsp_cuda_markov_prepare(b->bq, v, h->strict, ring, &smem, &occ, &stages));
        if (occ < 1)
          return dsp_fail(DSP_ERR_DEVICE, "cuda markov head: the step kernel (batch %d, %zu bytes of shared memory) "
                                          "cannot run on this device", b->bq, smem);
        if (ring) b->stages[v] = stages;
      }
      b->grid[v] = h->sms;
    }
  }
  return DSP_OK;
}

/* Ring kernel 5 may run (forced, or a candidate): check at every bucket's
 * batch that its wgmma products give mma.sync's bits on this device; where
 * any differ (on any rank) or the check cannot run, ring kernel 5 is not used. */
static dsp_status wg_check(dsp_cuda_head *h) {
  if (h->strict || (h->tune.kernel != DSP_TAIL_AUTO && h->tune.kernel != DSP_TAIL_RING_WGMMA)) return DSP_OK;
  float bad = 0.0f;
  for (int i = 0; i < h->nb; i++) {
    const int bq = h->bk[i].bq;
    if (bq != 16 && bq != 32 && bq != 64 && bq != 128) continue;
    int seen = 0;
    for (int j = 0; j < i; j++) seen |= h->bk[j].bq == bq;
    if (seen) continue;
    long long c = 0, d = 0;
    if (dsp_cuda_markov_wgmma_check(bq, 2 * h->sms, &c, &d) != DSP_OK) {
      cudaGetLastError();
      h->wg_compared = -1;
      break;
    }
    h->wg_compared += c;
    h->wg_differ += d;
  }
  if (h->wg_compared <= 0 || h->wg_differ) bad = 1.0f;
  if (h->multi) DSP_TRY(dsp_comm_allreduce(h->comm, &bad, &bad, 1, DSP_F32, DSP_REDUCE_SUM));
  h->wg_ok = bad == 0.0f;
  if (!h->wg_ok && h->ring == 5) h->ring = 4;
  return DSP_OK;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* DSPARK_CUDA_TAIL=auto. Ring kernel 5 wherever its check passed (on every
 * rank) and the greedy tail is one persistent launch, untimed: inside the
 * proposal, after the LM head, it was the faster tail in every measurement,
 * although alone it times behind ring kernel 4 (bench/RESULTS.md). Otherwise
 * (per-step launches) time the Markov tail of the largest bucket with each
 * kernel (they compute the same bits, kernels/cuda/markov.h) and keep the
 * faster. Every rank runs the same sequence and the times are summed over the
 * communicator, so all ranks pick the same kernel. */
static dsp_status choose_kernel(dsp_cuda_head *h) {
  if (h->strict || h->tune.kernel != DSP_TAIL_AUTO) return DSP_OK;
  cu_bucket *bk = &h->bk[h->nb - 1];
  if (h->wg_ok && !plan_of(h, 0).per_step) {
    h->ring = 5;
    if (enqueue(h, bk, 0, 1) == DSP_OK) return DSP_OK; /* it launches: the tensor-map encoder is there */
    cudaGetLastError();
    dsp_error_clear();
  }
  static const int rings[3] = {0, 4, 5}; /* the candidates: register kernel, ring kernels 4 and 5 */
  cudaEvent_t e0 = NULL, e1 = NULL;
  DSP_CUDA_TRY(cudaEventCreate(&e0));
  DSP_CUDA_TRY(cudaEventCreate(&e1));
  dsp_status s = DSP_OK;
  /* rounds alternating between the candidates, medians: the clock drifts (power
   * cap) over a sequence of launches. Each timed tail starts from an L2 that
   * holds base, as after the LM head, not the previous tail's W2 (which would
   * rank the kernels differently) */
  enum { ROUNDS = 5 };
  const size_t base_bytes = (size_t)(gamma_of(h) * bk->bq * h->vrp) * 2;
  float tr[3][ROUNDS];
  int live[3] = {1, 1, h->wg_ok}; /* ring kernel 5 only where its check passed */
  for (int r = 0; r < ROUNDS && s == DSP_OK; r++)
    for (int c = 0; c < 3 && s == DSP_OK; c++) {
      tr[c][r] = 1e30f;
      if (!live[c]) continue;
      h->ring = rings[c];
      if (r == 0) {
        s = enqueue(h, bk, 0, 1); /* warm-up */
        if (s != DSP_OK && c == 1) { /* rings 4-5 need the driver's tensor-map encoder: without it, no candidates */
          cudaGetLastError();
          live[1] = live[2] = 0;
          s = DSP_OK;
          continue;
        }
      }
      /* as in a proposal, the tail starts after the LM head wrote base: writing the
       * base buffer (not yet holding anything) leaves L2 as that does */
      if (s == DSP_OK && (cudaMemsetAsync(h->d_base_local, 0, base_bytes, h->stream) != cudaSuccess ||
                          cudaEventRecord(e0, h->stream) != cudaSuccess))
        s = DSP_ERR_DEVICE;
      if (s == DSP_OK) s = enqueue(h, bk, 0, 1);
      if (s == DSP_OK && (cudaEventRecord(e1, h->stream) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
                          cudaEventElapsedTime(&tr[c][r], e0, e1) != cudaSuccess))
        s = dsp_fail(DSP_ERR_DEVICE, "%s:%d: timing the tail kernels (candidate %d): %s", __FILE__, __LINE__, c,
                     cudaGetErrorString(cudaGetLastError()));
    }
  for (int c = 0; c < 3 && s == DSP_OK; c++) { /* median of the rounds */
    qsort(tr[c], ROUNDS, sizeof tr[c][0], cmp_float);
    h->t_kernel[c] = live[c] ? tr[c][ROUNDS / 2] : 1e30f;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  DSP_TRY(s);
  if (h->multi) DSP_TRY(dsp_comm_allreduce(h->comm, h->t_kernel, h->t_kernel, 3, DSP_F32, DSP_REDUCE_SUM));
  int best = 0;
  for (int c = 1; c < 3; c++)
    if (h->t_kernel[c] < h->t_kernel[best]) best = c;
  h->ring = rings[best];
  return DSP_OK;
}

static dsp_status capture_all(dsp_cuda_head *h) {
  size_t free0 = 0, free1 = 0, total = 0;
  DSP_CUDA_TRY(cudaStreamSynchronize(h->stream));
  DSP_CUDA_TRY(cudaMemGetInfo(&free0, &total));
  for (int i = 0; i < h->nb; i++)
    for (int v = 0; v < 2; v++) {
      DSP_TRY(dsp_cuda_head_capture(h, h->bk[i].size, v, 0, &h->bk[i].full[v]));
      h->ngraphs++;
    }
  /* one replay each, so lazily created resources are in the measurement */
  for (int i = 0; i < h->nb; i++)
    for (int v = 0; v < 2; v++) DSP_CUDA_TRY(cudaGraphLaunch(h->bk[i].full[v], h->stream));
  DSP_CUDA_TRY(cudaStreamSynchronize(h->stream));
  DSP_CUDA_TRY(cudaMemGetInfo(&free1, &total));
  h->bytes_graphs = free0 > free1 ? free0 - free1 : 0;
  return DSP_OK;
}

static dsp_status create_body(dsp_cuda_head *h, dsp_comm *comm, const dsp_markov_weights *w) {
  const dsp_markov_config *cfg = &h->cfg;
  DSP_CUDA_TRY(cudaSetDevice(h->device));
  DSP_CUDA_TRY(cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking));
  DSP_TRY(setup_comm(h, comm));
  /* the shared plan: rows, path and its eligibility, weight checks */
  DSP_TRY(dsp_markov_plan_make(cfg, h->P, h->rank, w->has_w2_full, &h->plan));
  DSP_TRY(dsp_markov_plan_check_weights(&h->plan, w));
  h->row0 = h->plan.row0;
  h->vr = h->plan.vr;
  h->rows_real = h->plan.rows_real;
  h->has_full = h->plan.has_full;
  h->vrp = round_up(h->vr, ROW_ALIGN);
  h->hp = round_up(cfg->hidden, HP_ALIGN);

  int sizes[MAX_BUCKETS], n = 0;
  DSP_TRY(parse_buckets(h->tune.buckets, cfg->max_batch, sizes, &n));
  h->nb = n;
  size_t used = 0;
  h->buckets_str[0] = 0;
  for (int i = 0; i < n; i++) {
    h->bk[i].size = sizes[i];
    h->bk[i].bq = (int)round_up(sizes[i], 16);
    if (h->bk[i].bq > h->bq_max) h->bq_max = h->bk[i].bq;
    used += (size_t)snprintf(h->buckets_str + used, sizeof h->buckets_str - used, "%s%d", i ? "," : "", sizes[i]);
    if (used >= sizeof h->buckets_str) used = sizeof h->buckets_str - 1;
  }
  DSP_TRY(upload_weights(h, w));
  DSP_TRY(alloc_buffers(h));
  if (h->comm) { /* connect NCCL before any capture */
    DSP_TRY(dsp_comm_allgather(h->comm, h->d_keys, h->d_keys_all, 8));
    DSP_TRY(dsp_comm_bcast(h->comm, h->d_tokens, 4, 0));
    DSP_CUDA_TRY(cudaStreamSynchronize(h->stream));
  }
  DSP_TRY(prepare_kernels(h));
  if (h->tune.graphs) {
    h->coop = dsp_cuda_markov_coop_capturable(h->stream);
  } else {
    DSP_CUDA_TRY(cudaDeviceGetAttribute(&h->coop, cudaDevAttrCooperativeLaunch, h->device));
  }
  /* PDL needs the LM head's product right before the tail: one rank only (with several, an
     all-gather or per-step launches come between) */
  h->pdl = h->tune.pdl && !h->strict && !h->multi && dsp_cuda_markov_pdl_capturable(h->stream, h->coop);
  DSP_TRY(wg_check(h));
  DSP_TRY(choose_kernel(h));
  if (h->tune.graphs) DSP_TRY(capture_all(h));
  DSP_CUDA_TRY(cudaStreamSynchronize(h->stream));
  make_report(h);
  return DSP_OK;
}

extern "C" dsp_status dsp_cuda_head_create(const dsp_markov_config *cfg, dsp_comm *comm, const dsp_markov_weights *w,
                                           int device, const dsp_cuda_tuning *t, dsp_cuda_head **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "cuda markov head: NULL output handle");
  *out = NULL;
  if (!cfg || !w) return dsp_fail(DSP_ERR_ARG, "cuda markov head: NULL config or weights");
  DSP_TRY(dsp_settings_check());
  if (cfg->vocab < 1 || cfg->vocab_padded < cfg->vocab || cfg->hidden < 1 || cfg->rank < 1 || cfg->gamma < 1 ||
      cfg->max_batch < 1)
    return dsp_fail(DSP_ERR_ARG, "cuda markov head: bad config (V %lld, Vp %lld, H %lld, R %lld, gamma %lld, batch %d)",
                    (long long)cfg->vocab, (long long)cfg->vocab_padded, (long long)cfg->hidden, (long long)cfg->rank,
                    (long long)cfg->gamma, cfg->max_batch);
  if (cfg->rank > DSP_MK_RP)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda markov head: Markov rank %lld > %d is not supported",
                    (long long)cfg->rank, DSP_MK_RP);
  if (cfg->max_batch > DSP_MK_MAXBQ)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda markov head: max_batch %d > %d is not supported", cfg->max_batch,
                    DSP_MK_MAXBQ);
  if (cfg->vocab_padded >= (1ll << 31) || cfg->gamma > 4096)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda markov head: vocabulary %lld >= 2^31 or gamma %lld > 4096",
                    (long long)cfg->vocab_padded, (long long)cfg->gamma);
  int n = dsp_cuda_device_count();
  if (n == 0) return dsp_fail(DSP_ERR_DEVICE, "cuda markov head: no CUDA device");
  if (device < 0 || device >= n)
    return dsp_fail(DSP_ERR_DEVICE, "cuda markov head: device %d outside the %d visible CUDA devices", device, n);

  dsp_cuda_head *h = (dsp_cuda_head *)calloc(1, sizeof *h);
  if (!h) return dsp_fail(DSP_ERR_NOMEM, "cuda markov head: out of memory");
  h->cfg = *cfg;
  h->device = device;
  dsp_cuda_tuning_default(&h->tune);
  if (t) h->tune = *t;
  const dsp_env *env = dsp_env_get();
  if (h->tune.strict < 0) h->tune.strict = env->cuda_strict != 0;
  if (h->tune.graphs < 0) h->tune.graphs = env->graphs != 0;
  if (!h->tune.buckets) h->tune.buckets = env->buckets;
  if (h->tune.prefetch < 0) h->tune.prefetch = DEFAULT_PREFETCH;
  if (h->tune.serpentine < 0) h->tune.serpentine = 1;
  if (h->tune.pdl < 0) h->tune.pdl = 1;
  if (h->tune.noise < 0) h->tune.noise = env->cuda_noise != 0;
  if (h->tune.kernel < 0) h->tune.kernel = env->cuda_tail;
  if (h->tune.kernel > DSP_TAIL_RING_WGMMA) {
    const int k = h->tune.kernel;
    free(h);
    return dsp_fail(DSP_ERR_ARG, "cuda markov head: tail kernel %d is not a dsp_tail_kernel", k);
  }
  if (h->tune.l2keep < 0) h->tune.l2keep = DEFAULT_L2KEEP;
  if (h->tune.resident < 0) h->tune.resident = DEFAULT_RESIDENT;
  h->strict = h->tune.strict;
  h->ring = h->strict                                ? 0
            : h->tune.kernel == DSP_TAIL_RING       ? 4
            : h->tune.kernel == DSP_TAIL_RING_WGMMA ? 5
                                                    : 0;
  dsp_status s = create_body(h, comm, w);
  h->tune.buckets = NULL; /* the caller's string need not outlive create */
  if (s != DSP_OK) {
    dsp_cuda_head_free(h);
    return s;
  }
  *out = h;
  return DSP_OK;
}

static cu_bucket *bucket_for(dsp_cuda_head *h, int32_t batch) {
  for (int i = 0; i < h->nb; i++)
    if (h->bk[i].size >= batch) return &h->bk[i];
  return NULL;
}

/* Anchors, temperatures, seeds and positions into the pinned staging buffer
 * in the bucket's layout, padding rows inert (anchor 0, T 0, seed 0, position 0). */
static void stage_meta(dsp_cuda_head *h, const cu_bucket *bk, const dsp_markov_inputs *in) {
  const int bq = bk->bq, B = in->batch;
  int32_t *anchor = (int32_t *)h->h_meta;
  float *temp = (float *)(h->h_meta + 4 * (size_t)bq);
  uint64_t *seed = (uint64_t *)(h->h_meta + 8 * (size_t)bq);
  int64_t *pos = (int64_t *)(h->h_meta + 16 * (size_t)bq);
  for (int b = 0; b < bq; b++) {
    const int real = b < B;
    anchor[b] = real ? (int32_t)in->anchor[b] : 0;
    temp[b] = real && in->temperature ? in->temperature[b] : 0.0f;
    seed[b] = real && in->seed ? in->seed[b] : 0;
    pos[b] = real && in->position ? in->position[b] : 0;
  }
}

/* The inputs into the pinned staging buffers in the bucket's layout, padding
 * rows inert (hidden 0 and stage_meta's). */
static void stage_inputs(dsp_cuda_head *h, const cu_bucket *bk, const dsp_markov_inputs *in) {
  const int bq = bk->bq, B = in->batch;
  const int64_t G = gamma_of(h), H = h->cfg.hidden, hp = h->hp;
  const dsp_tensor *x = in->hidden;
  for (int64_t k = 0; k < G; k++)
    for (int b = 0; b < bq; b++) {
      uint16_t *dst = h->h_hidden + (size_t)((k * bq + b) * hp);
      if (b >= B) {
        memset(dst, 0, (size_t)hp * 2);
        continue;
      }
      const uint16_t *src = (const uint16_t *)x->data + b * x->stride[0] + k * x->stride[1];
      if (x->stride[2] == 1) {
        memcpy(dst, src, (size_t)H * 2);
      } else {
        for (int64_t c = 0; c < H; c++) dst[c] = src[c * x->stride[2]];
      }
      memset(dst + H, 0, (size_t)(hp - H) * 2);
    }
  stage_meta(h, bk, in);
}

/* Device logits [segs][gamma][bq][vrp] -> the caller's [B, gamma, V] view. */
static void scatter_logits(const dsp_cuda_head *h, const cu_bucket *bk, int B, const dsp_tensor *out) {
  const int bq = bk->bq;
  const int64_t G = gamma_of(h), V = h->cfg.vocab;
  const size_t es = logit_size(h);
  const int segs = h->multi ? h->P : 1;
  for (int s = 0; s < segs; s++) {
    const int64_t v0 = (int64_t)s * h->vr;
    int64_t n = V - v0 < h->vr ? V - v0 : h->vr;
    if (n <= 0) continue;
    for (int b = 0; b < B; b++)
      for (int64_t k = 0; k < G; k++) {
        const char *src = (const char *)h->h_logits + (size_t)((((int64_t)s * G + k) * bq + b) * h->vrp) * es;
        char *dst = (char *)out->data + (size_t)(b * out->stride[0] + k * out->stride[1] + v0 * out->stride[2]) * es;
        if (out->stride[2] == 1) {
          memcpy(dst, src, (size_t)n * es);
        } else {
          for (int64_t j = 0; j < n; j++) memcpy(dst + (size_t)(j * out->stride[2]) * es, src + (size_t)j * es, es);
        }
      }
  }
}

/* The pinned tokens (and logits) of the last proposal into out. */
static void collect(const dsp_cuda_head *h, const cu_bucket *bk, int32_t B, dsp_markov_outputs *out) {
  const int64_t G = gamma_of(h);
  for (int32_t b = 0; b < B; b++)
    for (int64_t k = 0; k < G; k++) {
      int32_t t = h->h_tokens[k * bk->bq + b];
      DSP_ASSERT(t >= 0 && t < h->cfg.vocab);
      out->tokens[(size_t)b * (size_t)G + (size_t)k] = t;
    }
  if (out->logits) scatter_logits(h, bk, B, out->logits);
}

static dsp_status run_variant(dsp_cuda_head *h, cu_bucket *bk, int sampling) {
  if (h->tune.graphs) {
    DSP_CUDA_TRY(cudaGraphLaunch(bk->full[sampling], dsp_cuda_head_stream(h)));
    return DSP_OK;
  }
  return enqueue(h, bk, sampling, 0);
}

extern "C" dsp_status dsp_cuda_head_propose(dsp_cuda_head *h, const dsp_markov_inputs *in, dsp_markov_outputs *out) {
  if (!h || !in || !out) return dsp_fail(DSP_ERR_ARG, "cuda markov head: NULL argument");
  DSP_TRY(dsp_markov_check_inputs(&h->cfg, in));
  DSP_TRY(dsp_markov_plan_check_outputs(&h->plan, in, out));
  const double t0 = dsp_now_ms();
  const int32_t B = in->batch;
  const int64_t G = gamma_of(h);
  cu_bucket *bk = bucket_for(h, B);
  DSP_ASSERT(bk != NULL); /* the largest bucket covers max_batch */
  int sampling = out->logits != NULL;
  for (int32_t b = 0; in->temperature && b < B; b++) sampling |= in->temperature[b] > 0.0f;
  const int bq = bk->bq;
  const size_t es = logit_size(h);
  const int segs = h->multi ? h->P : 1;
  const size_t lbytes = (size_t)(segs * G * bq * h->vrp) * es;
  if (sampling && out->logits && !h->h_logits)
    DSP_TRY(host_alloc(&h->h_logits, (size_t)(segs * G * h->bq_max * h->vrp) * es));

  DSP_CUDA_TRY(cudaSetDevice(h->device));
  stage_inputs(h, bk, in);
  DSP_CUDA_TRY(cudaMemcpyAsync(bk->hidden, h->h_hidden, (size_t)(G * bq * h->hp) * 2, cudaMemcpyHostToDevice,
                               h->stream));
  DSP_CUDA_TRY(cudaMemcpyAsync(bk->meta, h->h_meta, (size_t)bq * 24, cudaMemcpyHostToDevice, h->stream));
  DSP_TRY(dsp_cuda_head_replay(h, B, sampling));
  DSP_CUDA_TRY(cudaMemcpyAsync(h->h_tokens, h->d_tokens, (size_t)(G * bq) * 4, cudaMemcpyDeviceToHost, h->stream));
  if (out->logits)
    DSP_CUDA_TRY(cudaMemcpyAsync(h->h_logits, h->d_logits, lbytes, cudaMemcpyDeviceToHost, h->stream));
  DSP_CUDA_TRY(cudaStreamSynchronize(h->stream));
  collect(h, bk, B, out);
  h->t_propose_ms = dsp_now_ms() - t0;
  return DSP_OK;
}

extern "C" const char *dsp_cuda_head_report(const dsp_cuda_head *h) { return h->report; }

extern "C" void dsp_cuda_head_memory(const dsp_cuda_head *h, size_t *buffers, size_t *graphs) {
  *buffers = h->bytes_buffers;
  *graphs = h->bytes_graphs;
}

extern "C" const char *dsp_cuda_head_detail(const dsp_cuda_head *h) { return h->detail; }

extern "C" cudaStream_t dsp_cuda_head_stream(const dsp_cuda_head *h) { return h->stream; }

/* batch: any size up to the largest bucket's (which may exceed max_batch). */
static cu_bucket *bucket_checked(dsp_cuda_head *h, int32_t batch) {
  cu_bucket *bk = batch >= 1 ? bucket_for(h, batch) : NULL;
  if (!bk) dsp_fail(DSP_ERR_ARG, "cuda markov head: batch %d outside [1, %d]", batch, h->bk[h->nb - 1].size);
  return bk;
}

extern "C" dsp_status dsp_cuda_head_capture(dsp_cuda_head *h, int32_t batch, int sampling, int tail_only,
                                            cudaGraphExec_t *out) {
  *out = NULL;
  cu_bucket *bk = bucket_checked(h, batch);
  if (!bk) return DSP_ERR_ARG;
  DSP_CUDA_TRY(cudaSetDevice(h->device));
  return capture(h, bk, sampling != 0, tail_only, out);
}

extern "C" dsp_status dsp_cuda_head_replay(dsp_cuda_head *h, int32_t batch, int sampling) {
  cu_bucket *bk = bucket_checked(h, batch);
  if (!bk) return DSP_ERR_ARG;
  DSP_CUDA_TRY(cudaSetDevice(h->device));
  return run_variant(h, bk, sampling != 0);
}

/* ---- the head inside a captured proposal (backend.h, markov_fused_*) ------------- */
extern "C" dsp_status dsp_cuda_markov_fused_bucket(dsp_markov_exec *h, int32_t batch, dsp_markov_fused *out) {
  if (h->multi || h->comm)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda markov head: a fused proposal runs on one rank only");
  cu_bucket *bk = bucket_checked(h, batch);
  if (!bk) return DSP_ERR_ARG;
  out->index = (int32_t)(bk - h->bk);
  out->size = bk->size;
  out->rows = bk->bq;
  out->hidden = bk->hidden;
  out->ld = h->hp;
  return DSP_OK;
}

extern "C" void dsp_cuda_markov_fused_stage(dsp_markov_exec *h, const dsp_markov_inputs *in) {
  cu_bucket *bk = bucket_for(h, in->batch);
  if (bk) stage_meta(h, bk, in);
}

/* On the backend's stream: the staged inputs in, the proposal, the tokens
 * (and with sampling the bucket's rows of logits) out to pinned memory. */
extern "C" dsp_status dsp_cuda_markov_fused_enqueue(dsp_backend *be, int dev, dsp_markov_exec *h, int32_t batch,
                                                    int sampling) {
  cu_bucket *bk = bucket_checked(h, batch);
  if (!bk) return DSP_ERR_ARG;
  cudaStream_t s = dsp_cuda_stream(be, dev);
  const int64_t G = gamma_of(h);
  const size_t es = logit_size(h), row = (size_t)h->vrp * es;
  if (sampling && !h->h_logits) DSP_TRY(host_alloc(&h->h_logits, (size_t)(G * h->bq_max) * row));
  DSP_CUDA_TRY(cudaSetDevice(h->device));
  DSP_CUDA_TRY(cudaMemcpyAsync(bk->meta, h->h_meta, (size_t)bk->bq * 24, cudaMemcpyHostToDevice, s));
  DSP_TRY(enqueue_on(h, bk, sampling != 0, 0, s));
  DSP_CUDA_TRY(cudaMemcpyAsync(h->h_tokens, h->d_tokens, (size_t)(G * bk->bq) * 4, cudaMemcpyDeviceToHost, s));
  return DSP_OK; /* the logits stay on the device until a collect asks for them */
}

extern "C" dsp_status dsp_cuda_markov_fused_collect(dsp_markov_exec *h, const dsp_markov_inputs *in,
                                                    dsp_markov_outputs *out) {
  cu_bucket *bk = bucket_checked(h, in->batch);
  if (!bk) return DSP_ERR_ARG;
  if (out->logits && !h->h_logits)
    return dsp_fail(DSP_ERR_ARG, "cuda markov head: logits asked of a greedy fused proposal");
  if (out->logits) { /* the bucket's rows of each step, not its padding to 16 */
    const size_t row = (size_t)h->vrp * logit_size(h);
    DSP_CUDA_TRY(cudaSetDevice(h->device));
    DSP_CUDA_TRY(cudaMemcpy2D(h->h_logits, (size_t)bk->bq * row, h->d_logits, (size_t)bk->bq * row,
                              (size_t)bk->size * row, (size_t)gamma_of(h), cudaMemcpyDeviceToHost));
  }
  collect(h, bk, in->batch, out);
  return DSP_OK;
}

/* Where the last sampled proposal of `batch` sequences left its corrected logits: step k of sequence b at row
 * k x rows + b of [ld] elements (TP 1, BF16 logits only). */
extern "C" dsp_status dsp_cuda_markov_logits(const dsp_markov_exec *h, int32_t batch, const void **data,
                                             int64_t *ld, int32_t *rows) {
  if (h->multi || logit_size(h) != 2)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda markov head: device logits are for one rank's BF16 logits");
  const cu_bucket *bk = batch >= 1 ? bucket_for((dsp_cuda_head *)h, batch) : NULL;
  if (!bk || !h->d_logits) return dsp_fail(DSP_ERR_ARG, "cuda markov head: no logits for a batch of %d", batch);
  *data = h->d_logits;
  *ld = h->vrp;
  *rows = bk->bq;
  return DSP_OK;
}

/* ---- the backend ops ---------------------------------------------------------- */
extern "C" dsp_status dsp_cuda_markov_create(dsp_backend *be, int dev, const dsp_markov_plan *plan,
                                             const dsp_markov_weights *w, dsp_markov_exec **out) {
  return dsp_cuda_head_create(&plan->cfg, be->tp[dev], w, be->device[dev], NULL, out);
}

extern "C" dsp_status dsp_cuda_markov_propose(dsp_markov_exec *x, const dsp_markov_inputs *in,
                                              dsp_markov_outputs *out) {
  return dsp_cuda_head_propose(x, in, out);
}

extern "C" const char *dsp_cuda_markov_detail(const dsp_markov_exec *x) { return x->detail; }

extern "C" void dsp_cuda_markov_last_timing(const dsp_markov_exec *x, double *lm_ms, double *tail_ms) {
  *lm_ms = x->t_propose_ms;
  *tail_ms = 0;
}

extern "C" void dsp_cuda_markov_free(dsp_markov_exec *x) { dsp_cuda_head_free(x); }
