/* The CPU backend's operations (the ops table of backend/backend.h). */
#ifndef DSP_BACKEND_CPU_OPS_CPU_H
#define DSP_BACKEND_CPU_OPS_CPU_H
#include "backend/backend.h"

dsp_status dsp_cpu_backend_impl(dsp_backend *be);
void dsp_cpu_backend_free(dsp_backend *be);
/* Several devices' TP communicators (a "threads" group), freed with the backend. */
dsp_status dsp_cpu_backend_own_tp(dsp_backend *be);
/* OpenMP threads of each device: the process's share of the host over its devices. */
int dsp_cpu_threads_per_device(const dsp_backend *be);
dsp_status dsp_cpu_op_alloc(dsp_backend *be, int dev, size_t bytes, void **out);
void dsp_cpu_op_release(dsp_backend *be, int dev, void *p);
/* upload and download alike: host to host */
dsp_status dsp_cpu_op_copy(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes);
dsp_status dsp_cpu_op_sync(dsp_backend *be, int dev);
/* The process's peak resident set. */
dsp_status dsp_cpu_op_memory_used(dsp_backend *be, int dev, size_t *bytes);
dsp_status dsp_cpu_op_weight_create(dsp_backend *be, int dev, const dsp_tensor *host, int strict, dsp_weight **out);
void dsp_cpu_op_weight_free(dsp_backend *be, dsp_weight *w);
dsp_status dsp_cpu_op_weight_slice(dsp_backend *be, dsp_weight *w, int32_t slices, int32_t *taken);
const char *dsp_cpu_op_weight_describe(const dsp_weight *w);
dsp_status dsp_cpu_op_gemm(dsp_backend *be, int dev, const dsp_tensor *a, const dsp_weight *w, dsp_tensor *c);
dsp_status dsp_cpu_op_markov_step(dsp_backend *be, int dev, const dsp_op_markov_args *a);
dsp_status dsp_cpu_op_embed(dsp_backend *be, int dev, const dsp_tensor *table, const int32_t *ids, int64_t t,
                            dsp_tensor *out);
dsp_status dsp_cpu_op_rmsnorm(dsp_backend *be, int dev, const dsp_tensor *x, const dsp_tensor *w, float eps,
                              dsp_tensor *out);
dsp_status dsp_cpu_op_rope(dsp_backend *be, int dev, dsp_tensor *x, const int32_t *pos, const dsp_tensor *cos,
                           const dsp_tensor *sin);
dsp_status dsp_cpu_op_add(dsp_backend *be, int dev, const dsp_tensor *a, const dsp_tensor *b, dsp_tensor *out);
dsp_status dsp_cpu_op_silu_mul(dsp_backend *be, int dev, const dsp_tensor *g, const dsp_tensor *u, dsp_tensor *out);
dsp_status dsp_cpu_op_scatter_rows(dsp_backend *be, int dev, const dsp_tensor *src, const int64_t *idx,
                                   dsp_tensor *dst);
dsp_status dsp_cpu_op_attention(dsp_backend *be, int dev, const dsp_op_attention_args *a);
dsp_status dsp_cpu_op_round_add(dsp_backend *be, int dev, const dsp_tensor *x, const dsp_tensor *p, dsp_tensor *out);
dsp_status dsp_cpu_op_select(dsp_backend *be, int dev, const dsp_op_select_args *a);
dsp_status dsp_cpu_op_gather_rows(dsp_backend *be, int dev, const dsp_tensor *src, const int64_t *idx, dsp_tensor *dst);
dsp_status dsp_cpu_op_kda_workspace(dsp_backend *be, const dsp_kda_dims *d, int32_t conv_width, int64_t max_tokens,
                                    size_t *bytes);
dsp_status dsp_cpu_op_kda(dsp_backend *be, int dev, const dsp_op_kda_args *a);
dsp_status dsp_cpu_op_kda_copy(dsp_backend *be, int dev, const dsp_kda_dims *d, const dsp_kda_conv_dims *cd,
                               dsp_kda_state *st, dsp_kda_conv_state *cs, int32_t src, int32_t dst);

dsp_status dsp_cpu_op_accept_workspace(dsp_backend *be, int64_t vocab, int32_t max_seqs, int32_t gamma,
                                       size_t *ws_bytes, size_t *hs_bytes);
dsp_status dsp_cpu_op_accept(dsp_backend *be, int dev, const dsp_op_accept_args *a);

#endif
