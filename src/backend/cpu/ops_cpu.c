/* The CPU backend's operations: host memory, packed weights, the CPU kernels. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "backend/cpu/ops_cpu.h"
#include "core/bf16.h"
#include "core/philox.h"
#include "core/select.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/threads.h"
#include <omp.h>

#include "kernels/cpu/amx.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/layers.h"
#include "kernels/cpu/markov_step.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/sample.h"
#include "kernels/cpu/spec_accept.h"

/* Exactly one of p (the fmaf chain's panels) and amx (AMX tiles) at creation;
 * a Markov step on an AMX weight packs the chain's panels once (its contract
 * is the chain). */
struct dsp_weight {
  dsp_cpu_packed *p;
  dsp_cpu_amx *amx;
  char desc[80];
};

dsp_status dsp_cpu_op_alloc(dsp_backend *be, int dev, size_t bytes, void **out) {
  (void)be, (void)dev;
  size_t n = (bytes + 63) / 64 * 64;
  *out = aligned_alloc(64, n ? n : 64);
  if (!*out) return dsp_fail(DSP_ERR_NOMEM, "cpu: cannot allocate %zu bytes", bytes);
  return DSP_OK;
}

void dsp_cpu_op_release(dsp_backend *be, int dev, void *p) {
  (void)be, (void)dev;
  free(p);
}

/* Copies of 1 MiB or more without overlap run on the device's threads: on a 2-core VM one thread streams a half
 * to four fifths of what two do (bench/RESULTS.md, forty-sixth session). */
#define COPY_PAR_MIN ((size_t)1 << 20)

dsp_status dsp_cpu_op_copy(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes) {
  (void)be, (void)dev;
  char *d = dst;
  const char *s = src;
  const uintptr_t di = (uintptr_t)dst, si = (uintptr_t)src;
  if (bytes < COPY_PAR_MIN || omp_get_max_threads() < 2 || (di < si + bytes && si < di + bytes)) {
    memmove(dst, src, bytes);
    return DSP_OK;
  }
#pragma omp parallel
  {
    const size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
    const size_t b0 = bytes * id / nt / 64 * 64, b1 = id + 1 == nt ? bytes : bytes * (id + 1) / nt / 64 * 64;
    memcpy(d + b0, s + b0, b1 - b0);
  }
  return DSP_OK;
}

dsp_status dsp_cpu_op_memory_used(dsp_backend *be, int dev, size_t *bytes) {
  (void)be, (void)dev;
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u)) return dsp_fail(DSP_ERR_IO, "op memory_used: getrusage failed");
  *bytes = (size_t)u.ru_maxrss * 1024; /* Linux reports kilobytes */
  return DSP_OK;
}

dsp_status dsp_cpu_op_sync(dsp_backend *be, int dev) {
  (void)be, (void)dev;
  return DSP_OK;
}

/* strict 1: the fmaf chain; else AMX tiles where dsp_cpu_amx_chosen(). */
dsp_status dsp_cpu_op_weight_create(dsp_backend *be, int dev, const dsp_tensor *host, int strict, dsp_weight **out) {
  (void)be, (void)dev;
  dsp_weight *w = calloc(1, sizeof *w);
  if (!w) return dsp_fail(DSP_ERR_NOMEM, "cpu: out of memory");
  const int amx = strict != 1 && dsp_cpu_amx_chosen();
  dsp_status s = amx ? dsp_cpu_amx_pack(host, &w->amx) : dsp_cpu_pack(host, &w->p);
  if (s != DSP_OK) {
    free(w);
    return s;
  }
  if (amx) snprintf(w->desc, sizeof w->desc, "amx tiles (tdpbf16ps order, the fmaf chain where guarded)");
  else snprintf(w->desc, sizeof w->desc, "%s panels (fmaf chain)", dsp_cpu_kernel_name());
  *out = w;
  return DSP_OK;
}

dsp_status dsp_cpu_op_weight_slice(dsp_backend *be, dsp_weight *w, int32_t slices, int32_t *taken) {
  (void)be;
  DSP_TRY(w->amx ? dsp_cpu_amx_slice(w->amx, slices) : dsp_cpu_packed_slice(w->p, slices));
  *taken = slices;
  const size_t n = strlen(w->desc);
  if (slices > 1 && !strstr(w->desc, " slices"))
    snprintf(w->desc + n, sizeof w->desc - n, ", %d K slices", (int)slices);
  return DSP_OK;
}

void dsp_cpu_op_weight_free(dsp_backend *be, dsp_weight *w) {
  (void)be;
  dsp_cpu_packed_free(w->p);
  dsp_cpu_amx_free(w->amx);
  free(w);
}

const char *dsp_cpu_op_weight_describe(const dsp_weight *w) { return w->desc; }

dsp_status dsp_cpu_op_gemm(dsp_backend *be, int dev, const dsp_tensor *a, const dsp_weight *w, dsp_tensor *c) {
  (void)be, (void)dev;
  return w->amx ? dsp_cpu_amx_matmul_nt(a, w->amx, c, 0) : dsp_cpu_matmul_nt(a, w->p, c, 0);
}

/* The chain's panels of an AMX weight, made on first use. */
static dsp_status chain_panels(dsp_weight *w) {
  if (w->p) return DSP_OK;
  const int64_t n = w->amx->n, k = w->amx->k;
  uint16_t *rows = malloc((size_t)(n * k) * 2);
  if (!rows) return dsp_fail(DSP_ERR_NOMEM, "cpu: cannot unpack a %lld x %lld weight", (long long)n, (long long)k);
  dsp_cpu_amx_unpack(w->amx, rows);
  dsp_tensor t = dsp_tensor_2d(rows, DSP_BF16, n, k);
  dsp_status s = dsp_cpu_pack(&t, &w->p);
  free(rows);
  return s;
}

dsp_status dsp_cpu_op_markov_step(dsp_backend *be, int dev, const dsp_op_markov_args *a) {
  (void)be, (void)dev;
  DSP_TRY(chain_panels((dsp_weight *)a->w2));
  dsp_cpu_markov_args m = {.e = a->e, .w2 = a->w2->p, .base = a->base, .fp32_add = a->fp32_add, .id0 = a->id0,
                           .n_valid = a->n_valid, .best_val = a->best_val, .best_id = a->best_id,
                           .logits = a->logits};
  return dsp_cpu_markov_step(&m, 0);
}

/* ---- the models' layers -------------------------------------------------------- */
dsp_status dsp_cpu_op_embed(dsp_backend *be, int dev, const dsp_tensor *table, const int32_t *ids, int64_t t,
                            dsp_tensor *out) {
  (void)be, (void)dev;
  for (int64_t i = 0; i < t; i++)
    if (ids[i] < 0 || ids[i] >= table->shape[0])
      return dsp_fail(DSP_ERR_RANGE, "op embed: token id %d outside [0, %lld)", ids[i], (long long)table->shape[0]);
  dsp_cpu_embed(table, ids, t, out);
  return DSP_OK;
}

dsp_status dsp_cpu_op_rmsnorm(dsp_backend *be, int dev, const dsp_tensor *x, const dsp_tensor *w, float eps,
                              dsp_tensor *out) {
  (void)be, (void)dev;
  dsp_cpu_rmsnorm(x, (const dsp_bf16 *)w->data, eps, out);
  return DSP_OK;
}

dsp_status dsp_cpu_op_rope(dsp_backend *be, int dev, dsp_tensor *x, const int32_t *pos, const dsp_tensor *cos,
                           const dsp_tensor *sin) {
  (void)be, (void)dev;
  for (int64_t t = 0; t < x->shape[0]; t++)
    if (pos[t] < 0 || pos[t] >= cos->shape[0])
      return dsp_fail(DSP_ERR_RANGE, "op rope: position %d outside the table [0, %lld)", pos[t], (long long)cos->shape[0]);
  dsp_cpu_rope(x, pos, (const dsp_bf16 *)cos->data, (const dsp_bf16 *)sin->data, cos->shape[1]);
  return DSP_OK;
}

dsp_status dsp_cpu_op_add(dsp_backend *be, int dev, const dsp_tensor *a, const dsp_tensor *b, dsp_tensor *out) {
  (void)be, (void)dev;
  dsp_cpu_add(a, b, out);
  return DSP_OK;
}

dsp_status dsp_cpu_op_silu_mul(dsp_backend *be, int dev, const dsp_tensor *g, const dsp_tensor *u, dsp_tensor *out) {
  (void)be, (void)dev;
  dsp_cpu_silu_mul(g, u, out);
  return DSP_OK;
}

dsp_status dsp_cpu_op_scatter_rows(dsp_backend *be, int dev, const dsp_tensor *src, const int64_t *idx,
                                   dsp_tensor *dst) {
  (void)be, (void)dev;
  for (int64_t t = 0; t < src->shape[0]; t++)
    if (idx[t] < 0 || idx[t] >= dst->shape[0])
      return dsp_fail(DSP_ERR_RANGE, "op scatter_rows: row %lld outside [0, %lld)", (long long)idx[t],
                      (long long)dst->shape[0]);
  dsp_cpu_scatter_rows(src, idx, dst);
  return DSP_OK;
}

/* The backend's own state: each device's attention scratch grows to the
 * largest cache seen, once; the TP communicators of several devices. */
typedef struct {
  float *att[DSP_BACKEND_MAX_DEVICES];
  size_t att_floats[DSP_BACKEND_MAX_DEVICES];
  int own_tp;
} cpu_impl;

void dsp_cpu_backend_free(dsp_backend *be) {
  cpu_impl *m = be->impl;
  for (int i = 0; m && i < DSP_BACKEND_MAX_DEVICES; i++) free(m->att[i]);
  if (m && m->own_tp)
    for (int i = 0; i < be->ndev; i++) dsp_comm_free(be->tp[i]);
  free(m);
  be->impl = NULL;
}

dsp_status dsp_cpu_backend_impl(dsp_backend *be) {
  be->impl = calloc(1, sizeof(cpu_impl));
  return be->impl ? DSP_OK : dsp_fail(DSP_ERR_NOMEM, "backend cpu: out of memory");
}

dsp_status dsp_cpu_backend_own_tp(dsp_backend *be) {
  cpu_impl *m = be->impl;
  DSP_TRY(dsp_comm_threads_create_group(be->ndev, be->tp));
  m->own_tp = 1;
  return DSP_OK;
}

int dsp_cpu_threads_per_device(const dsp_backend *be) {
  const int n = dsp_threads_default() / (be->ndev > 0 ? be->ndev : 1);
  return n > 0 ? n : 1;
}

dsp_status dsp_cpu_op_attention(dsp_backend *be, int dev, const dsp_op_attention_args *a) {
  cpu_impl *m = be->impl;
  const size_t need = dsp_cpu_attention_scratch(a->max_len, a->q->shape[1], a->kv_heads, a->q->shape[2],
                                                omp_get_max_threads());
  if (need > m->att_floats[dev]) {
    free(m->att[dev]);
    m->att[dev] = aligned_alloc(64, (need * 4 + 63) / 64 * 64);
    m->att_floats[dev] = m->att[dev] ? need : 0;
    if (!m->att[dev]) return dsp_fail(DSP_ERR_NOMEM, "op attention: no scratch for %zu floats", need);
  }
  dsp_cpu_attention_args c = {.q = a->q, .k = a->k, .v = a->v, .slots = a->slots, .max_len = a->max_len,
                              .kv_heads = a->kv_heads,
                              .kv_stride = a->kv_stride ? a->kv_stride : a->kv_heads * a->q->shape[2],
                              .row_slot = a->row_slot, .row_keys = a->row_keys,
                              .scale = a->scale, .out = a->out, .scratch = m->att[dev]};
  dsp_cpu_attention(&c);
  return DSP_OK;
}

dsp_status dsp_cpu_op_gather_rows(dsp_backend *be, int dev, const dsp_tensor *src, const int64_t *idx, dsp_tensor *dst) {
  (void)be, (void)dev;
  for (int64_t t = 0; t < dst->shape[0]; t++)
    if (idx[t] < 0 || idx[t] >= src->shape[0])
      return dsp_fail(DSP_ERR_RANGE, "op gather_rows: index %lld outside [0, %lld)", (long long)idx[t],
                      (long long)src->shape[0]);
  dsp_cpu_gather_rows(src, idx, dst);
  return DSP_OK;
}

dsp_status dsp_cpu_op_round_add(dsp_backend *be, int dev, const dsp_tensor *x, const dsp_tensor *p, dsp_tensor *out) {
  (void)be, (void)dev;
  for (int64_t i = 0; i < x->shape[0]; i++) {
    const dsp_bf16 *xr = (const dsp_bf16 *)x->data + i * x->stride[0];
    const float *pr = (const float *)p->data + i * p->stride[0];
    dsp_bf16 *o = (dsp_bf16 *)out->data + i * out->stride[0];
    for (int64_t j = 0; j < x->shape[1]; j++)
      o[j * out->stride[1]] =
          dsp_f32_to_bf16(dsp_bf16_to_f32(xr[j * x->stride[1]]) + dsp_round_bf16(pr[j * p->stride[1]]));
  }
  return DSP_OK;
}

dsp_status dsp_cpu_op_select(dsp_backend *be, int dev, const dsp_op_select_args *a) {
  (void)be, (void)dev;
  const dsp_tensor *l = a->logits;
  for (int64_t r = 0; r < l->shape[0]; r++) {
    const float T = a->t_row ? a->t_row[r] : 0.0f;
    const dsp_bf16 *p = (const dsp_bf16 *)l->data + r * l->stride[0];
    /* the noise is keyed by the global id, so a shard's draw is the full-vocabulary draw */
    uint64_t best = 0;
    if (l->stride[1] == 1 && dsp_cpu_select_row(p, 0, a->n_valid, T, T > 0.0f ? a->seed_row[r] : 0,
                                                T > 0.0f ? a->pos[r] : 0, a->id0, &a->keys[r]))
      continue; /* the loop below, 16 or 8 ids at a time */
    for (int64_t v = 0; v < a->n_valid; v++) {
      float x = dsp_bf16_to_f32(p[v]);
      if (T > 0.0f) {
        volatile float q = x / T; /* one rounding, never fused with the add */
        x = q + dsp_gumbel(a->seed_row[r], a->pos[r], a->id0 + v);
      }
      const uint64_t k = dsp_select_key(x, (uint32_t)(a->id0 + v));
      best = k > best ? k : best;
    }
    a->keys[r] = best;
  }
  return DSP_OK;
}

dsp_status dsp_cpu_op_accept_workspace(dsp_backend *be, int64_t vocab, int32_t max_seqs, int32_t gamma,
                                       size_t *ws_bytes, size_t *hs_bytes) {
  (void)be;
  *ws_bytes = dsp_cpu_accept_bytes(vocab, max_seqs, gamma, omp_get_max_threads());
  *hs_bytes = 0;
  return DSP_OK;
}

dsp_status dsp_cpu_op_accept(dsp_backend *be, int dev, const dsp_op_accept_args *a) {
  (void)be, (void)dev;
  int nt = omp_get_max_threads(); /* as many as the workspace holds */
  while (nt > 1 && dsp_cpu_accept_bytes(a->vocab, a->nseq, a->gamma, nt) > a->ws_bytes) nt--;
  dsp_cpu_accept(a, nt);
  return DSP_OK;
}
