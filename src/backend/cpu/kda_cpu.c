/* The KDA operation on the CPU (backend/ops.h, dsp_op_kda): the kernels of
 * kernels/cpu/kda.h in a layer's order, over one workspace carved per call. */
#include <stdint.h>

#include "backend/cpu/ops_cpu.h"
#include "core/layout.h"
#include "core/status.h"
#include "kernels/cpu/kda.h"

typedef struct {
  dsp_bf16 *conv, *o;
  float *g, *beta;
  void *ws;
  size_t ws_bytes;
} kda_ws;

static size_t kernel_ws(const dsp_kda_dims *d) {
  const size_t r = dsp_kda_recurrent_workspace_size(d, 0), c = dsp_kda_chunked_workspace_size(d, NULL, 0);
  return r > c ? r : c;
}

/* The workspace for T tokens (core/layout.h), from base rounded up to the
 * layout's alignment (base NULL: sizes only); *bytes: what it needs. */
static dsp_status carve(const dsp_kda_dims *d, int64_t T, void *base, kda_ws *w, size_t *bytes) {
  const int64_t D = 2 * (int64_t)d->num_heads * d->head_k + (int64_t)d->num_v_heads * d->head_v;
  const int64_t HV = d->num_v_heads;
  kda_ws tmp;
  if (!w) w = &tmp;
  w->ws_bytes = kernel_ws(d);
  size_t b[4];
  DSP_TRY(dsp_layout_bytes(T, D, 1, 2, "op kda conv", &b[0]));
  DSP_TRY(dsp_layout_bytes(T, HV, d->head_v, 2, "op kda o", &b[1]));
  DSP_TRY(dsp_layout_bytes(T, HV, d->head_k, 4, "op kda g", &b[2]));
  DSP_TRY(dsp_layout_bytes(T, HV, 1, 4, "op kda beta", &b[3]));
  const dsp_layout_entry e[5] = {{(void **)&w->conv, b[0]}, {(void **)&w->o, b[1]}, {(void **)&w->g, b[2]},
                                 {(void **)&w->beta, b[3]}, {&w->ws, w->ws_bytes}};
  DSP_TRY(dsp_layout_total(e, 5, bytes));
  *bytes += DSP_LAYOUT_ALIGN - 1;
  if (base) dsp_layout_carve(dsp_layout_align(base), e, 5);
  return DSP_OK;
}

dsp_status dsp_cpu_op_kda_workspace(dsp_backend *be, const dsp_kda_dims *d, int32_t conv_width, int64_t max_tokens,
                                    size_t *bytes) {
  (void)be;
  DSP_TRY(dsp_kda_dims_check(d));
  (void)conv_width;
  return carve(d, max_tokens, NULL, NULL, bytes);
}

dsp_status dsp_cpu_op_kda(dsp_backend *be, int dev, const dsp_op_kda_args *a) {
  (void)be, (void)dev;
  const dsp_kda_dims *d = &a->dims;
  DSP_TRY(dsp_kda_dims_check(d));
  int64_t T = 0;
  const dsp_kda_seqs *sq = a->staged ? &a->staged->seqs : a->seqs; /* a staged batch lives in host memory here */
  DSP_TRY(dsp_kda_seqs_check(sq, a->state->num_slots, &T));
  if (T == 0) return DSP_OK;
  kda_ws w;
  size_t need = 0;
  DSP_TRY(carve(d, T, a->ws, &w, &need)); /* pointers used only if it fits */
  if (need > a->ws_bytes)
    return dsp_fail(DSP_ERR_NOMEM, "op kda: a workspace of %zu bytes is too small for %lld tokens", a->ws_bytes,
                    (long long)T);
  const int32_t H = d->num_heads, HV = d->num_v_heads, K = d->head_k, V = d->head_v;
  const int32_t D = 2 * H * K + HV * V;
  const dsp_kda_conv_dims cd = {.channels = D, .width = a->conv_width};
  DSP_TRY(dsp_kda_conv(&cd, sq, a->qkv, a->qkv_tok, a->conv_w, NULL, a->conv_state, w.conv, D));
  DSP_TRY(dsp_kda_gate(T, HV, K, (dsp_kda_in_bf16){a->f, a->f_tok, K}, a->A_log, a->dt_bias, &a->gate, w.g));
  DSP_TRY(dsp_kda_beta(T, HV, a->b, a->b_tok, 1, w.beta));
  const dsp_kda_io io = {.q = {w.conv, D, K}, .k = {w.conv + (int64_t)H * K, D, K},
                         .v = {w.conv + 2 * (int64_t)H * K, D, V}, .g = w.g, .beta = w.beta,
                         .o = {w.o, (int64_t)HV * V, V}};
  const dsp_kda_opts opt = {.value_tile = a->value_tile}; /* the workspace holds the largest, 64 */
  if (a->form == DSP_KDA_CHUNKED) DSP_TRY(dsp_kda_chunked(d, &opt, sq, &io, a->state, w.ws, w.ws_bytes));
  else DSP_TRY(dsp_kda_recurrent(d, NULL, sq, &io, a->state, w.ws, w.ws_bytes));
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
