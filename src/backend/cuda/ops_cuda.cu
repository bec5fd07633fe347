/* The CUDA backend's operations: device memory on each device's stream, weights
 * with their GEMM, and the Markov step through the register kernel. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "core/env.h"
#include "core/select.h"
#include "core/status.h"
}
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/ops_cuda.h"
#include "comm/comm.h"
#include "kernels/cuda/common/check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/layers.h"
#include "kernels/cuda/spec_accept.h"
#include "kernels/cuda/markov.h"

#define MAX_CHECKED 64 /* the M values a cuBLASLt weight has been checked for */

struct dsp_weight {
  int device, strict;
  int64_t n, k;
  uint16_t *d;           /* [n][k] */
  dsp_cuda_gemm *g;
  int64_t checked[MAX_CHECKED];
  int nchecked;
};

extern "C" dsp_status dsp_cuda_op_alloc(dsp_backend *be, int dev, size_t bytes, void **out) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  const cudaError_t e = cudaMalloc(out, bytes ? bytes : 256);
  if (e != cudaSuccess) {
    *out = NULL;
    cudaGetLastError();
    return dsp_fail(DSP_ERR_NOMEM, "%s:%d: cudaMalloc(%zu bytes): %s", __FILE__, __LINE__, bytes, cudaGetErrorString(e));
  }
  return DSP_OK;
}

extern "C" void dsp_cuda_op_release(dsp_backend *be, int dev, void *p) {
  cudaSetDevice(be->device[dev]);
  cudaFree(p);
  cudaGetLastError();
}

extern "C" dsp_status dsp_cuda_op_upload(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  DSP_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, dsp_cuda_stream(be, dev)));
  DSP_CUDA_TRY(cudaStreamSynchronize(dsp_cuda_stream(be, dev))); /* the host buffer may change right after */
  return DSP_OK;
}

extern "C" dsp_status dsp_cuda_op_download(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  DSP_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, dsp_cuda_stream(be, dev)));
  DSP_CUDA_TRY(cudaStreamSynchronize(dsp_cuda_stream(be, dev)));
  return DSP_OK;
}

extern "C" dsp_status dsp_cuda_op_copy(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  DSP_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, dsp_cuda_stream(be, dev)));
  return DSP_OK;
}

extern "C" dsp_status dsp_cuda_op_sync(dsp_backend *be, int dev) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  DSP_CUDA_TRY(cudaStreamSynchronize(dsp_cuda_stream(be, dev)));
  return DSP_OK;
}

extern "C" dsp_status dsp_cuda_op_weight_create(dsp_backend *be, int dev, const dsp_tensor *host, int strict,
                                                dsp_weight **out) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  dsp_weight *w = (dsp_weight *)calloc(1, sizeof *w);
  if (!w) return dsp_fail(DSP_ERR_NOMEM, "cuda weight: out of memory");
  w->device = be->device[dev];
  w->strict = strict < 0 ? dsp_env_get()->cuda_strict : strict != 0;
  w->n = host->shape[0];
  w->k = host->shape[1];
  dsp_status s = DSP_OK;
  if (cudaMalloc((void **)&w->d, (size_t)(w->n * w->k) * 2) != cudaSuccess) {
    cudaGetLastError();
    s = dsp_fail(DSP_ERR_NOMEM, "cuda weight: no device memory for [%lld, %lld]", (long long)w->n, (long long)w->k);
  }
  /* on the backend's stream and complete on return: a plain cudaMemcpy2D from
     pageable memory may return before its DMA lands, and the backend's
     non-blocking stream would not wait for the legacy stream's copy */
  cudaStream_t st = dsp_cuda_stream(be, dev);
  if (s == DSP_OK && (cudaMemcpy2DAsync(w->d, (size_t)w->k * 2, host->data, (size_t)host->stride[0] * 2,
                                        (size_t)w->k * 2, (size_t)w->n, cudaMemcpyHostToDevice, st) != cudaSuccess ||
                      cudaStreamSynchronize(st) != cudaSuccess))
    s = dsp_fail(DSP_ERR_DEVICE, "%s:%d: cuda weight upload: %s", __FILE__, __LINE__,
                 cudaGetErrorString(cudaGetLastError()));
  if (s == DSP_OK) s = dsp_cuda_gemm_create(w->n, w->k, w->strict, DSP_GEMM_WGMMA_SPLIT, &w->g);
  if (s != DSP_OK) {
    dsp_cuda_op_weight_free(be, w);
    return s;
  }
  *out = w;
  return DSP_OK;
}

extern "C" void dsp_cuda_op_weight_free(dsp_backend *be, dsp_weight *w) {
  (void)be;
  cudaSetDevice(w->device);
  dsp_cuda_gemm_free(w->g);
  cudaFree(w->d);
  cudaGetLastError();
  free(w);
}

extern "C" const char *dsp_cuda_op_weight_describe(const dsp_weight *w) { return dsp_cuda_gemm_describe(w->g); }

extern "C" dsp_status dsp_cuda_op_weight_slice(dsp_backend *be, dsp_weight *w, int32_t slices, int32_t *taken) {
  (void)be;
  int ok = 0;
  DSP_CUDA_TRY(cudaSetDevice(w->device));
  DSP_TRY(dsp_cuda_gemm_slice(w->g, (int)slices, &ok));
  *taken = ok ? slices : 1;
  return DSP_OK;
}

extern "C" dsp_status dsp_cuda_op_gemm(dsp_backend *be, int dev, const dsp_tensor *a, const dsp_weight *w,
                                       dsp_tensor *c) {
  if (a->shape[1] != w->k || c->shape[1] != w->n)
    return dsp_fail(DSP_ERR_SHAPE, "op gemm: a [%lld, %lld], w [%lld, %lld], c [%lld, %lld]", (long long)a->shape[0],
                    (long long)a->shape[1], (long long)w->n, (long long)w->k, (long long)c->shape[0],
                    (long long)c->shape[1]);
  const int64_t m = a->shape[0];
  dsp_weight *mw = (dsp_weight *)w; /* the cache of checked M values */
  int seen = 0;
  for (int i = 0; i < mw->nchecked && !seen; i++) seen = mw->checked[i] == m;
  if (!seen) {
    DSP_TRY(dsp_cuda_gemm_prepare(mw->g, m));
    if (mw->nchecked < MAX_CHECKED) mw->checked[mw->nchecked++] = m;
  }
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  cudaStream_t s = dsp_cuda_stream(be, dev);
  if (c->dtype == DSP_F32)
    return dsp_cuda_gemm_run_f32(mw->g, a->data, a->stride[0], w->d, (float *)c->data, m, c->stride[0], s);
  return dsp_cuda_gemm_run(mw->g, a->data, a->stride[0], w->d, c->data, m, c->stride[0], s);
}

/* NCCL goes on device dev's stream, behind the product that wrote x; one rank has nothing to add (its
 * communicator may be a host one, whose memmove would not see device memory). */
extern "C" dsp_status dsp_cuda_op_memory_used(dsp_backend *be, int dev, size_t *bytes) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  size_t free_b = 0, total = 0;
  DSP_CUDA_TRY(cudaMemGetInfo(&free_b, &total));
  *bytes = total - free_b;
  return DSP_OK;
}

extern "C" dsp_status dsp_cuda_op_allreduce(dsp_backend *be, int dev, dsp_comm *comm, dsp_tensor *x) {
  if (dsp_comm_size(comm) == 1) return DSP_OK;
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  DSP_TRY(dsp_comm_set_stream(comm, dsp_cuda_stream(be, dev)));
  return dsp_comm_allreduce(comm, x->data, x->data, (size_t)(x->shape[0] * x->shape[1]), DSP_F32, DSP_REDUCE_SUM);
}

/* One step as a one-step tail of the register kernel: E as W1 rows with the
 * identity as anchors, base and W2 laid out as the kernel reads them; logits
 * come from the sampling instance (every T = 0: greedy selection). Scratch is
 * made per call: this op serves the harness, the head keeps its own buffers. */
extern "C" dsp_status dsp_cuda_op_markov_step(dsp_backend *be, int dev, const dsp_op_markov_args *a) {
  const int64_t B = a->e->shape[0], R = a->e->shape[1], N = a->w2->n;
  if (a->w2->k != R || a->base->shape[0] != B || a->base->shape[1] < a->n_valid || a->n_valid > N || a->n_valid < 0)
    return dsp_fail(DSP_ERR_SHAPE, "op markov step: e [%lld, %lld], w2 [%lld, %lld], base [%lld, %lld], n_valid %lld",
                    (long long)B, (long long)R, (long long)N, (long long)a->w2->k, (long long)a->base->shape[0],
                    (long long)a->base->shape[1], (long long)a->n_valid);
  if (R > DSP_MK_RP || B < 1 || B > DSP_MK_MAXBQ || N >= (1ll << 31))
    return dsp_fail(DSP_ERR_UNSUPPORTED, "op markov step: R %lld > %d, B %lld outside [1, %d] or N too large",
                    (long long)R, DSP_MK_RP, (long long)B, DSP_MK_MAXBQ);
  const int sampling = a->logits != NULL;
  const int bq = (int)((B + 15) / 16 * 16);
  const int64_t ld = (N + 15) / 16 * 16;
  const size_t es = a->fp32_add ? 4 : 2;
  cudaStream_t s = dsp_cuda_stream(be, dev);
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  const size_t b_w1 = (size_t)bq * DSP_MK_RP * 2, b_w2 = (size_t)ld * DSP_MK_RP * 2, b_base = (size_t)bq * ld * 2,
               b_lg = (size_t)bq * ld * es, b_meta = (size_t)bq * 24, b_keys = (size_t)bq * 12 + 64;
  char *buf = NULL;
  DSP_CUDA_TRY(cudaMalloc((void **)&buf, b_w1 + b_w2 + b_base + b_lg + b_meta + b_keys + 6 * 256));
  char *p = buf;
  auto take = [&](size_t n) { char *r = p; p += (n + 255) / 256 * 256; return r; };
  uint16_t *w1 = (uint16_t *)take(b_w1), *w2 = (uint16_t *)take(b_w2), *base = (uint16_t *)take(b_base);
  void *lg = take(b_lg);
  unsigned char *meta = (unsigned char *)take(b_meta);
  unsigned long long *keys = (unsigned long long *)take(b_keys);
  int32_t *anchor = (int32_t *)meta;
  unsigned long long *hk = (unsigned long long *)malloc((size_t)bq * 8);
  int32_t *ha = (int32_t *)malloc((size_t)bq * 4);
  dsp_status st = hk && ha ? DSP_OK : dsp_fail(DSP_ERR_NOMEM, "op markov step: out of memory");
  for (int b = 0; ha && b < bq; b++) ha[b] = b < B ? b : 0;
  auto ck = [&](cudaError_t e, int line) {
    if (st == DSP_OK && e != cudaSuccess)
      st = dsp_fail(DSP_ERR_DEVICE, "%s:%d: op markov step: %s", __FILE__, line, cudaGetErrorString(e));
  };
  ck(cudaMemsetAsync(buf, 0, (size_t)(p - buf), s), __LINE__);
  ck(cudaMemcpy2DAsync(w1, DSP_MK_RP * 2, a->e->data, (size_t)a->e->stride[0] * 2, (size_t)R * 2, (size_t)B,
                       cudaMemcpyDeviceToDevice, s), __LINE__);
  ck(cudaMemcpy2DAsync(w2, DSP_MK_RP * 2, a->w2->d, (size_t)R * 2, (size_t)R * 2, (size_t)N, cudaMemcpyDeviceToDevice, s),
     __LINE__);
  if (a->n_valid > 0)
    ck(cudaMemcpy2DAsync(base, (size_t)ld * 2, a->base->data, (size_t)a->base->stride[0] * 2, (size_t)a->n_valid * 2,
                         (size_t)B, cudaMemcpyDeviceToDevice, s), __LINE__);
  if (st == DSP_OK) ck(cudaMemcpyAsync(anchor, ha, (size_t)bq * 4, cudaMemcpyHostToDevice, s), __LINE__);
  dsp_mk_args m;
  memset(&m, 0, sizeof m);
  m.w2 = w2;
  m.w1 = w1;
  m.base = base;
  m.logits = sampling ? lg : NULL;
  m.vr = a->n_valid;
  m.vocab = a->n_valid;
  m.ld = (int32_t)ld;
  m.seg_rows = (int32_t)ld;
  m.nseg = 1;
  m.bq = bq;
  m.fp32_add = a->fp32_add;
  m.anchor = anchor;
  m.temp = (const float *)(meta + 4 * (size_t)bq);
  m.seed = (const uint64_t *)(meta + 8 * (size_t)bq);
  m.pos = (const int64_t *)(meta + 16 * (size_t)bq);
  m.keys = keys;
  m.tokens = (int32_t *)(keys + bq);
  m.barrier = (unsigned int *)((char *)keys + (size_t)bq * 12 + 16);
  m.k_begin = 0;
  m.k_end = 1;
  int sms = 0;
  size_t smem = 0;
  int occ = 0, stages = 0;
  if (st == DSP_OK) ck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, be->device[dev]), __LINE__);
  if (st == DSP_OK) st = dsp_cuda_markov_prepare(bq, sampling, a->w2->strict, 0, &smem, &occ, &stages);
  dsp_mk_launch l = {sampling, a->w2->strict, 0, sms, 0, 0};
  if (st == DSP_OK && a->n_valid > 0) st = dsp_cuda_markov_launch(&m, &l, s);
  if (st == DSP_OK) ck(cudaMemcpyAsync(hk, keys, (size_t)bq * 8, cudaMemcpyDeviceToHost, s), __LINE__);
  if (st == DSP_OK && sampling && a->n_valid > 0)
    ck(cudaMemcpy2DAsync(a->logits->data, (size_t)a->logits->stride[0] * es, lg, (size_t)ld * es,
                         (size_t)a->n_valid * es, (size_t)B, cudaMemcpyDeviceToDevice, s), __LINE__);
  if (st == DSP_OK) ck(cudaStreamSynchronize(s), __LINE__);
  for (int64_t b = 0; st == DSP_OK && b < B; b++) {
    a->best_val[b] = hk[b] ? dsp_select_key_value(hk[b]) : -INFINITY;
    a->best_id[b] = hk[b] ? a->id0 + (int64_t)(~(uint32_t)hk[b]) : INT64_MAX;
  }
  cudaFree(buf);
  free(hk);
  free(ha);
  return st;
}

/* ---- the models' layers (kernels/cuda/layers.h) --------------------------------- */
static dsp_cu_view cu_view(const dsp_tensor *t) {
  dsp_cu_view v;
  v.data = t->data;
  if (t->ndim == 3) {
    v.rows = t->shape[0], v.heads = t->shape[1], v.dim = t->shape[2];
    v.s_row = t->stride[0], v.s_head = t->stride[1], v.s_dim = t->stride[2];
  } else {
    v.rows = t->shape[0], v.heads = 1, v.dim = t->ndim == 2 ? t->shape[1] : 1;
    v.s_row = t->stride[0], v.s_head = 0, v.s_dim = t->ndim == 2 ? t->stride[1] : 1;
  }
  return v;
}

static dsp_status launched(dsp_backend *be, int dev, const char *op, int line) {
  (void)be, (void)dev;
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return dsp_fail(DSP_ERR_DEVICE, "%s:%d: op %s: %s", __FILE__, line, op, cudaGetErrorString(e));
  return DSP_OK;
}
#define LAUNCHED(op) launched(be, dev, op, __LINE__)

extern "C" dsp_status dsp_cuda_op_embed(dsp_backend *be, int dev, const dsp_tensor *table, const int32_t *ids,
                                        int64_t t, dsp_tensor *out) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  const dsp_cu_view tv = cu_view(table), ov = cu_view(out);
  dsp_cu_embed(&tv, ids, t, &ov, dsp_cuda_stream(be, dev));
  return LAUNCHED("embed");
}

extern "C" dsp_status dsp_cuda_op_rmsnorm(dsp_backend *be, int dev, const dsp_tensor *x, const dsp_tensor *w, float eps,
                                          dsp_tensor *out) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  const dsp_cu_view xv = cu_view(x), ov = cu_view(out);
  dsp_cu_rmsnorm(&xv, (const uint16_t *)w->data, eps, &ov, dsp_cuda_stream(be, dev));
  return LAUNCHED("rmsnorm");
}

extern "C" dsp_status dsp_cuda_op_rope(dsp_backend *be, int dev, dsp_tensor *x, const int32_t *pos,
                                       const dsp_tensor *cos, const dsp_tensor *sin) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  const dsp_cu_view xv = cu_view(x);
  dsp_cu_rope(&xv, pos, (const uint16_t *)cos->data, (const uint16_t *)sin->data, dsp_cuda_stream(be, dev));
  return LAUNCHED("rope");
}

extern "C" dsp_status dsp_cuda_op_add(dsp_backend *be, int dev, const dsp_tensor *a, const dsp_tensor *b,
                                      dsp_tensor *out) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  const dsp_cu_view av = cu_view(a), bv = cu_view(b), ov = cu_view(out);
  dsp_cu_add(&av, &bv, &ov, dsp_cuda_stream(be, dev));
  return LAUNCHED("add");
}

extern "C" dsp_status dsp_cuda_op_silu_mul(dsp_backend *be, int dev, const dsp_tensor *g, const dsp_tensor *u,
                                           dsp_tensor *out) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  const dsp_cu_view gv = cu_view(g), uv = cu_view(u), ov = cu_view(out);
  dsp_cu_silu_mul(&gv, &uv, &ov, dsp_cuda_stream(be, dev));
  return LAUNCHED("silu_mul");
}

extern "C" dsp_status dsp_cuda_op_scatter_rows(dsp_backend *be, int dev, const dsp_tensor *src, const int64_t *idx,
                                               dsp_tensor *dst) {
  if (src->dtype != DSP_BF16) return dsp_fail(DSP_ERR_UNSUPPORTED, "op scatter_rows: BF16 rows only on CUDA");
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  const dsp_cu_view sv = cu_view(src), dv = cu_view(dst);
  dsp_cu_scatter_rows(&sv, idx, &dv, dsp_cuda_stream(be, dev));
  return LAUNCHED("scatter_rows");
}

extern "C" dsp_status dsp_cuda_op_attention(dsp_backend *be, int dev, const dsp_op_attention_args *a) {
  const int64_t D = a->q->shape[2];
  int optin = 0, sms = 0;
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  DSP_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, be->device[dev]));
  DSP_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, be->device[dev]));
  const size_t limit = (size_t)optin - 2048; /* the kernels' static shared memory (up to 1.6 KB) */
  dsp_cu_attention_args c;
  memset(&c, 0, sizeof c);
  c.q = cu_view(a->q);
  c.k = (const uint16_t *)a->k;
  c.v = (const uint16_t *)a->v;
  c.slots = a->slots;
  c.max_len = a->max_len;
  c.kv_heads = a->kv_heads;
  c.kv_stride = a->kv_stride ? a->kv_stride : a->kv_heads * D;
  c.row_slot = a->row_slot;
  c.row_keys = a->row_keys;
  c.scale = a->scale;
  c.out = cu_view(a->out);
  if (a->out->ndim == 2) { /* [T, Hq * D] as heads of D */
    c.out.heads = c.q.heads, c.out.dim = D, c.out.s_head = D * a->out->stride[1], c.out.s_dim = a->out->stride[1];
  }
  /* the form depends on the setting and the shapes only, never on the call's rows (batch invariance) */
  const int tce = dsp_env_get()->cuda_attention_tc, rows = dsp_env_get()->cuda_attention_rows;
  /* the tensor-core bits come from either kernel: the many-row one takes long runs (a launch choice) where the
     one-row kernel holds the cache (with tc-long in a cluster's blocks); caches past that go to the fp32 form, or
     with tc-long to the many-row kernel, for every call (a property of the shape: a row's bits never depend on
     its call) */
  dsp_cu_attention_args one = c;
  const int tc_ok = tce && dsp_cu_attention_tc_config(&one, a->row_group, sms, limit, rows == 2,
                                                    dsp_env_get()->cuda_attention_q);
  int pf = 0;
  /* a batch's hinted short runs: the many-row kernel where the stored-scores one would run its blocks one an SM (a
     cache capacity past about 2700 at head dim 128, group 4) or split a run over blocks (a draft block of 7 rows
     past about 1300); at batch 32 on an H100 the stored-scores kernel ran 1.4-2.4x slower than the many-row one
     there, and 1.15-1.25x faster below */
  const int sh = dsp_env_get()->cuda_attention_short;
  const int short_runs = sh == 2 || (sh == 0 && tc_ok && a->row_group > 1 &&
                                     (one.per_sm < 2 || a->row_group % one.rows_per_block));
  if (tc_ok && rows >= 1) pf = dsp_cu_attention_pf_config(&c, a->row_group, sms, limit, short_runs ? 2 : 0);
  else if (tce && !tc_ok && rows == 2) pf = dsp_cu_attention_pf_config(&c, a->row_group, sms, limit, 1);
  if (tc_ok && !pf) c = one;
  const int tc = tc_ok || pf;
  if (!tc && !dsp_cu_attention_config(&c, a->row_group, sms, limit))
    return dsp_fail(DSP_ERR_UNSUPPORTED,
                    "op attention: head dim %lld (CUDA runs up to 256) or a cache of %lld positions "
                    "(CUDA holds at most %lld) is not supported",
                    (long long)D, (long long)a->max_len, (long long)((limit - 36 * (size_t)D) / 2));
  dsp_cuda_impl *m = (dsp_cuda_impl *)be->impl;
  if (m->att_smem[dev] != limit) {
    DSP_CUDA_TRY(dsp_cu_attention_prepare(limit));
    DSP_CUDA_TRY(dsp_cu_attention_tc_prepare(limit));
    DSP_CUDA_TRY(dsp_cu_attention_pf_prepare(limit));
    m->att_smem[dev] = limit;
  }
  static int told[3][257]; /* verbose: each kernel and head dim named once per process (tests check which ran) */
  if (dsp_env_get()->verbose && !__atomic_exchange_n(&told[tc + pf][D], 1, __ATOMIC_RELAXED))
    fprintf(stderr, "dspark: attention: %s form (head dim %lld)%s\n", tc ? "tensor-core" : "fp32", (long long)D,
            pf ? ", many-row kernel" : "");
  static int told_q;
  if (dsp_env_get()->verbose && tc && !pf && !c.q_reg && !__atomic_exchange_n(&told_q, 1, __ATOMIC_RELAXED))
    fprintf(stderr, "dspark: attention: two m-tiles with q in shared memory\n");
  if (pf) dsp_cu_attention_pf(&c, dsp_cuda_stream(be, dev));
  else if (tc) dsp_cu_attention_tc(&c, dsp_cuda_stream(be, dev));
  else dsp_cu_attention(&c, dsp_cuda_stream(be, dev));
  return LAUNCHED("attention");
}

extern "C" dsp_status dsp_cuda_op_gather_rows(dsp_backend *be, int dev, const dsp_tensor *src, const int64_t *idx,
                                              dsp_tensor *dst) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  const dsp_cu_view sv = cu_view(src), dv = cu_view(dst);
  dsp_cu_gather_rows(&sv, idx, &dv, dsp_cuda_stream(be, dev));
  return LAUNCHED("gather_rows");
}

extern "C" dsp_status dsp_cuda_op_round_add(dsp_backend *be, int dev, const dsp_tensor *x, const dsp_tensor *p,
                                            dsp_tensor *out) {
  if (p->stride[1] != 1) return dsp_fail(DSP_ERR_UNSUPPORTED, "op round_add: partials with unit column stride only");
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  const dsp_cu_view xv = cu_view(x), ov = cu_view(out);
  dsp_cu_round_add(&xv, (const float *)p->data, p->stride[0], &ov, dsp_cuda_stream(be, dev));
  return LAUNCHED("round_add");
}

extern "C" dsp_status dsp_cuda_op_add_rmsnorm(dsp_backend *be, int dev, dsp_tensor *x, const dsp_tensor *y,
                                              const dsp_tensor *w, float eps, dsp_tensor *out) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  const dsp_cu_view xv = cu_view(x), yv = cu_view(y), ov = cu_view(out);
  dsp_cu_add_rmsnorm(&xv, &yv, (const uint16_t *)w->data, eps, &ov, dsp_cuda_stream(be, dev));
  return LAUNCHED("add_rmsnorm");
}

extern "C" dsp_status dsp_cuda_op_attn_in(dsp_backend *be, int dev, const dsp_op_attn_in_args *a, int *done) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  dsp_cu_attn_in_args c;
  c.q = cu_view(a->q), c.k = cu_view(a->k), c.v = cu_view(a->v);
  c.q_norm = (const uint16_t *)a->q_norm->data, c.k_norm = (const uint16_t *)a->k_norm->data, c.eps = a->eps;
  c.pos = a->pos, c.cos = (const uint16_t *)a->cos->data, c.sin = (const uint16_t *)a->sin->data;
  c.idx = a->idx, c.k_cache = cu_view(a->k_cache), c.v_cache = cu_view(a->v_cache);
  *done = dsp_cu_attn_in(&c, dsp_cuda_stream(be, dev));
  return *done ? LAUNCHED("attn_in") : DSP_OK;
}

extern "C" dsp_status dsp_cuda_op_select(dsp_backend *be, int dev, const dsp_op_select_args *a) {
  const int64_t R = a->logits->shape[0];
  cudaStream_t s = dsp_cuda_stream(be, dev);
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  DSP_CUDA_TRY(dsp_cu_select((const uint16_t *)a->logits->data, R, a->logits->stride[0], a->n_valid, a->id0,
                             a->t_row, a->seed_row, a->pos, (unsigned long long *)a->keys, s));
  return DSP_OK;
}

/* ---- speculative sampling's acceptance --------------------------------------------- */
extern "C" dsp_status dsp_cuda_op_accept_workspace(dsp_backend *be, int64_t vocab, int32_t max_seqs, int32_t gamma,
                                                   size_t *ws_bytes, size_t *hs_bytes) {
  (void)be;
  *ws_bytes = *hs_bytes = dsp_cu_accept_ws_bytes(vocab, max_seqs, gamma); /* hs mirrors ws's metadata and out */
  return DSP_OK;
}

/* The slots' metadata up, the kernels, each sequence's (accepted, residual) down. */
extern "C" dsp_status dsp_cuda_op_accept(dsp_backend *be, int dev, const dsp_op_accept_args *a) {
  const int32_t S = a->nseq, G = a->gamma;
  cudaStream_t s = dsp_cuda_stream(be, dev);
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  const dsp_cu_accept_layout H = dsp_cu_accept_layout_of(a->hs, a->vocab, S, G);
  const dsp_cu_accept_layout D = dsp_cu_accept_layout_of(a->ws, a->vocab, S, G);
  for (int32_t r = 0; r < S; r++) {
    H.seqs[r] = {a->seed[r], a->pos[r], a->temp[r], a->ndraft[r]};
    for (int32_t i = 0; i < G; i++) {
      const int64_t j = (int64_t)r * G + i;
      H.slots[j] = i < a->ndraft[r] ? dsp_cu_accept_slot{a->toff[j], a->qoff[j], a->drafts[j]}
                                    : dsp_cu_accept_slot{0, 0, 0};
    }
  }
  DSP_CUDA_TRY(cudaMemcpyAsync(a->ws, a->hs, (size_t)((char *)H.out - (char *)a->hs), cudaMemcpyHostToDevice, s));
  DSP_CUDA_TRY(dsp_cu_accept((const uint16_t *)a->tlog, (const uint16_t *)a->qlog, a->vocab, S, G, &D, s));
  DSP_CUDA_TRY(cudaMemcpyAsync(H.out, D.out, (size_t)S * 8, cudaMemcpyDeviceToHost, s));
  DSP_CUDA_TRY(cudaStreamSynchronize(s));
  for (int32_t r = 0; r < S; r++) a->accepted[r] = H.out[2 * r], a->residual[r] = H.out[2 * r + 1];
  return DSP_OK;
}

/* ---- staging and graphs ---------------------------------------------------------- */
extern "C" dsp_status dsp_cuda_op_host_alloc(dsp_backend *be, int dev, size_t bytes, void **out) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  const cudaError_t e = cudaMallocHost(out, bytes ? bytes : 64);
  if (e != cudaSuccess) {
    *out = NULL;
    cudaGetLastError();
    return dsp_fail(DSP_ERR_NOMEM, "%s:%d: cudaMallocHost(%zu bytes): %s", __FILE__, __LINE__, bytes,
                    cudaGetErrorString(e));
  }
  return DSP_OK;
}

extern "C" void dsp_cuda_op_host_release(dsp_backend *be, int dev, void *p) {
  cudaSetDevice(be->device[dev]);
  cudaFreeHost(p);
  cudaGetLastError();
}

extern "C" dsp_status dsp_cuda_op_upload_async(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  DSP_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, dsp_cuda_stream(be, dev)));
  return DSP_OK;
}

extern "C" dsp_status dsp_cuda_op_download_async(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  DSP_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, dsp_cuda_stream(be, dev)));
  return DSP_OK;
}

struct dsp_op_graph {
  int device;
  cudaGraph_t g;
  cudaGraphExec_t x;
};

extern "C" dsp_status dsp_cuda_op_capture_begin(dsp_backend *be, int dev) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  DSP_CUDA_TRY(cudaStreamBeginCapture(dsp_cuda_stream(be, dev), cudaStreamCaptureModeThreadLocal));
  return DSP_OK;
}

extern "C" dsp_status dsp_cuda_op_capture_end(dsp_backend *be, int dev, dsp_op_graph **out) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  cudaGraph_t g = NULL;
  const cudaError_t e = cudaStreamEndCapture(dsp_cuda_stream(be, dev), &g);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (g) cudaGraphDestroy(g);
    return dsp_fail(DSP_ERR_DEVICE, "%s:%d: capture: %s", __FILE__, __LINE__, cudaGetErrorString(e));
  }
  dsp_op_graph *r = (dsp_op_graph *)calloc(1, sizeof *r);
  if (!r) {
    cudaGraphDestroy(g);
    return dsp_fail(DSP_ERR_NOMEM, "capture: out of memory");
  }
  r->device = be->device[dev];
  r->g = g;
  const cudaError_t ie = cudaGraphInstantiate(&r->x, g, 0);
  if (ie != cudaSuccess) {
    cudaGetLastError();
    cudaGraphDestroy(g);
    free(r);
    return dsp_fail(DSP_ERR_DEVICE, "%s:%d: graph instantiate: %s", __FILE__, __LINE__, cudaGetErrorString(ie));
  }
  *out = r;
  return DSP_OK;
}

extern "C" dsp_status dsp_cuda_op_replay(dsp_backend *be, int dev, dsp_op_graph *g) {
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  DSP_CUDA_TRY(cudaGraphLaunch(g->x, dsp_cuda_stream(be, dev)));
  return DSP_OK;
}

extern "C" void dsp_cuda_op_graph_free(dsp_backend *be, dsp_op_graph *g) {
  (void)be;
  cudaSetDevice(g->device);
  cudaGraphExecDestroy(g->x);
  cudaGraphDestroy(g->g);
  cudaGetLastError();
  free(g);
}
