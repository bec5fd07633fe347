/* The KDA operation on the CPU (backend/ops.h, dsp_op_kda): the kernels of
 * kernels/cpu/kda.h in a layer's order, over one workspace carved per call. */
#include <stdint.h>

#include "backend/cpu/ops_cpu.h"
#include "core/status.h"
#include "kernels/cpu/kda.h"

typedef struct {
  dsp_bf16 *conv, *o;
  float *g, *beta;
  void *ws;
  size_t ws_bytes;
} kda_ws;

static size_t up64(size_t n) { return (n + 63) / 64 * 64; }

static size_t kernel_ws(const dsp_kda_dims *d) {
  const size_t r = dsp_kda_recurrent_workspace_size(d, 0), c = dsp_kda_chunked_workspace_size(d, NULL, 0);
  return r > c ? r : c;
}

/* Carves ws for T tokens (base NULL: sizes only); returns the bytes it needs. */
static size_t carve(const dsp_kda_dims *d, int64_t T, void *base, kda_ws *w) {
  const int64_t D = 2 * (int64_t)d->num_heads * d->head_k + (int64_t)d->num_v_heads * d->head_v;
  const size_t sizes[4] = {up64((size_t)(T * D) * 2), up64((size_t)(T * d->num_v_heads * d->head_v) * 2),
                           up64((size_t)(T * d->num_v_heads * d->head_k) * 4), up64((size_t)(T * d->num_v_heads) * 4)};
  char *p = base ? (char *)(((uintptr_t)base + 63) & ~(uintptr_t)63) : NULL;
  void *at[4];
  size_t off = 0;
  for (int i = 0; i < 4; i++) {
    at[i] = p ? p + off : NULL;
    off += sizes[i];
  }
  const size_t k = kernel_ws(d);
  if (w) {
    w->conv = at[0], w->o = at[1], w->g = at[2], w->beta = at[3];
    w->ws = p ? p + off : NULL;
    w->ws_bytes = k;
  }
  return 63 + off + k;
}

dsp_status dsp_cpu_op_kda_workspace(dsp_backend *be, const dsp_kda_dims *d, int32_t conv_width, int64_t max_tokens,
                                    size_t *bytes) {
  (void)be;
  DSP_TRY(dsp_kda_dims_check(d));
  (void)conv_width;
  *bytes = carve(d, max_tokens, NULL, NULL);
  return DSP_OK;
}

dsp_status dsp_cpu_op_kda(dsp_backend *be, int dev, const dsp_op_kda_args *a) {
  (void)be, (void)dev;
  const dsp_kda_dims *d = &a->dims;
  DSP_TRY(dsp_kda_dims_check(d));
  int64_t T = 0;
  DSP_TRY(dsp_kda_seqs_check(a->seqs, a->state->num_slots, &T));
  if (T == 0) return DSP_OK;
  kda_ws w;
  if (carve(d, T, a->ws, &w) > a->ws_bytes)
    return dsp_fail(DSP_ERR_NOMEM, "op kda: a workspace of %zu bytes is too small for %lld tokens", a->ws_bytes,
                    (long long)T);
  const int32_t H = d->num_heads, HV = d->num_v_heads, K = d->head_k, V = d->head_v;
  const int32_t D = 2 * H * K + HV * V;
  const dsp_kda_conv_dims cd = {.channels = D, .width = a->conv_width};
  DSP_TRY(dsp_kda_conv(&cd, a->seqs, a->qkv, a->qkv_tok, a->conv_w, NULL, a->conv_state, w.conv, D));
  DSP_TRY(dsp_kda_gate(T, HV, K, (dsp_kda_in_bf16){a->f, a->f_tok, K}, a->A_log, a->dt_bias, &a->gate, w.g));
  DSP_TRY(dsp_kda_beta(T, HV, a->b, a->b_tok, 1, w.beta));
  const dsp_kda_io io = {.q = {w.conv, D, K}, .k = {w.conv + (int64_t)H * K, D, K},
                         .v = {w.conv + 2 * (int64_t)H * K, D, V}, .g = w.g, .beta = w.beta,
                         .o = {w.o, (int64_t)HV * V, V}};
  if (a->form == DSP_KDA_CHUNKED) DSP_TRY(dsp_kda_chunked(d, NULL, a->seqs, &io, a->state, w.ws, w.ws_bytes));
  else DSP_TRY(dsp_kda_recurrent(d, NULL, a->seqs, &io, a->state, w.ws, w.ws_bytes));
  return dsp_kda_gated_rmsnorm(T, HV, V, (dsp_kda_in_bf16){w.o, (int64_t)HV * V, V},
                               (dsp_kda_in_bf16){a->z, a->z_tok, V}, a->norm_w, a->eps,
                               (dsp_kda_out_bf16){a->y, a->y_tok, V});
}

dsp_status dsp_cpu_op_kda_copy(dsp_backend *be, int dev, const dsp_kda_dims *d, const dsp_kda_conv_dims *cd,
                               dsp_kda_state *st, dsp_kda_conv_state *cs, int32_t src, int32_t dst) {
  (void)be, (void)dev;
  DSP_TRY(dsp_kda_state_copy(d, st, src, dst));
  return dsp_kda_conv_state_copy(cd, cs, src, dst);
}
