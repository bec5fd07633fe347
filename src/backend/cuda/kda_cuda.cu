/* The KDA operation on CUDA (backend/ops.h, dsp_op_kda): the kernels of
 * kernels/cuda/kda.h in the layer's order on the device's stream, over one
 * workspace carved per call. The batch's host arrays are copied into the
 * workspace first, and the token -> sequence map made there once for the call. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

extern "C" {
#include "core/layout.h"
#include "core/status.h"
#include "kernels/cpu/kda.h"
}
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/ops_cuda.h"
#include "kernels/cuda/common/check.h"
#include "kernels/cuda/kda.h"

typedef struct {
  uint16_t *conv, *o;
  float *g, *beta;
  int32_t *cu, *slot, *token_slot, *tok_seq;
  uint8_t *has;
} kda_ws;

/* The workspace for T tokens of nseq sequences (core/layout.h), from base
 * rounded up to the layout's alignment (base NULL: sizes only); *bytes: what it needs. */
static dsp_status carve(const dsp_kda_dims *d, int64_t T, int64_t nseq, void *base, kda_ws *w, size_t *bytes) {
  const int64_t D = 2 * (int64_t)d->num_heads * d->head_k + (int64_t)d->num_v_heads * d->head_v;
  const int64_t HV = d->num_v_heads;
  kda_ws tmp;
  if (!w) w = &tmp;
  size_t b[9];
  DSP_TRY(dsp_layout_bytes(T, D, 1, 2, "op kda (cuda) conv", &b[0]));
  DSP_TRY(dsp_layout_bytes(T, HV, d->head_v, 2, "op kda (cuda) o", &b[1]));
  DSP_TRY(dsp_layout_bytes(T, HV, d->head_k, 4, "op kda (cuda) g", &b[2]));
  DSP_TRY(dsp_layout_bytes(T, HV, 1, 4, "op kda (cuda) beta", &b[3]));
  DSP_TRY(dsp_layout_bytes(nseq + 1, 1, 1, 4, "op kda (cuda) cu_seqlens", &b[4]));
  DSP_TRY(dsp_layout_bytes(nseq, 1, 1, 4, "op kda (cuda) slots", &b[5]));
  DSP_TRY(dsp_layout_bytes(T, 1, 1, 4, "op kda (cuda) token slots", &b[6]));
  b[7] = b[6];
  b[8] = (size_t)nseq;
  const dsp_layout_entry e[9] = {{(void **)&w->conv, b[0]},       {(void **)&w->o, b[1]},       {(void **)&w->g, b[2]},
                                 {(void **)&w->beta, b[3]},       {(void **)&w->cu, b[4]},      {(void **)&w->slot, b[5]},
                                 {(void **)&w->token_slot, b[6]}, {(void **)&w->tok_seq, b[7]}, {(void **)&w->has, b[8]}};
  DSP_TRY(dsp_layout_total(e, 9, bytes));
  *bytes += DSP_LAYOUT_ALIGN - 1;
  if (base) dsp_layout_carve(dsp_layout_align(base), e, 9);
  return DSP_OK;
}

/* Sized for max_tokens tokens in as many sequences (a call with more sequences
 * than the workspace's tokens is refused). */
extern "C" dsp_status dsp_cuda_op_kda_workspace(dsp_backend *be, const dsp_kda_dims *d, int32_t conv_width,
                                                int64_t max_tokens, size_t *bytes) {
  (void)be, (void)conv_width;
  DSP_TRY(dsp_kda_dims_check(d));
  return carve(d, max_tokens, max_tokens, NULL, NULL, bytes);
}

static dsp_status check_conv(const dsp_op_kda_args *a, int32_t D) {
  const int32_t W = a->conv_width;
  if (W < 1 || W > DSP_KDA_MAX_WIDTH)
    return dsp_fail(DSP_ERR_SHAPE, "op kda (cuda): conv width %d (1..%d)", (int)W, DSP_KDA_MAX_WIDTH);
  if (W > 1 && (!a->conv_state || !a->conv_state->data))
    return dsp_fail(DSP_ERR_ARG, "op kda (cuda): width %d needs a conv state", (int)W);
  if (W > 1 && a->conv_state->slot_stride < (int64_t)(W - 1) * D)
    return dsp_fail(DSP_ERR_SHAPE, "op kda (cuda): conv state slot stride %lld below (W-1)*D = %lld",
                    (long long)a->conv_state->slot_stride, (long long)(W - 1) * D);
  if (W > 1 && a->conv_state->num_slots < a->state->num_slots)
    return dsp_fail(DSP_ERR_SHAPE, "op kda (cuda): %d conv state slots for %d recurrent ones",
                    (int)a->conv_state->num_slots, (int)a->state->num_slots);
  if (a->qkv_tok < D) return dsp_fail(DSP_ERR_SHAPE, "op kda (cuda): qkv token stride below %d channels", (int)D);
  const dsp_kda_gate_cfg *gc = &a->gate;
  if (gc->form != DSP_KDA_GATE_SOFTPLUS && gc->form != DSP_KDA_GATE_LOWER_BOUND)
    return dsp_fail(DSP_ERR_ARG, "op kda (cuda): unknown gate form %d", (int)gc->form);
  if (gc->form == DSP_KDA_GATE_LOWER_BOUND && !(isfinite(gc->lower_bound) && gc->lower_bound < 0.0f))
    return dsp_fail(DSP_ERR_ARG, "op kda (cuda): gate lower bound %g is not finite and negative",
                    (double)gc->lower_bound);
  if (!(a->eps >= 0.0f) || !isfinite(a->eps)) return dsp_fail(DSP_ERR_ARG, "op kda (cuda): norm eps %g", (double)a->eps);
  return DSP_OK;
}

extern "C" dsp_status dsp_cuda_op_kda(dsp_backend *be, int dev, const dsp_op_kda_args *a) {
  const dsp_kda_dims *d = &a->dims;
  const int32_t H = d->num_heads, HV = d->num_v_heads, K = d->head_k, V = d->head_v;
  const int32_t D = 2 * H * K + HV * V;
  int64_t T = 0;
  DSP_TRY(dsp_kda_dims_check(d));
  if (!a->state || !a->state->data) return dsp_fail(DSP_ERR_ARG, "op kda (cuda): NULL state");
  if (a->state->slot_stride < (int64_t)HV * K * V)
    return dsp_fail(DSP_ERR_SHAPE, "op kda (cuda): state slot stride %lld below HV*K*V", (long long)a->state->slot_stride);
  DSP_TRY(dsp_kda_seqs_check(a->seqs, a->state->num_slots, &T));
  if (T == 0) return DSP_OK;
  DSP_TRY(check_conv(a, D));
  if (!a->qkv || !a->f || !a->b || !a->z || !a->y || !a->conv_w || !a->norm_w)
    return dsp_fail(DSP_ERR_ARG, "op kda (cuda): NULL qkv, f, b, z, y, conv weight or norm weight");
  const dsp_kda_seqs *hs = a->seqs;
  kda_ws w;
  size_t need = 0;
  DSP_TRY(carve(d, T, hs->num_seqs, a->ws, &w, &need)); /* pointers used only if it fits */
  if (need > a->ws_bytes)
    return dsp_fail(DSP_ERR_NOMEM, "op kda (cuda): a workspace of %zu bytes is too small for %lld tokens in %d sequences",
                    a->ws_bytes, (long long)T, (int)hs->num_seqs);
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  cudaStream_t s = dsp_cuda_stream(be, dev);
  const size_t ns = (size_t)hs->num_seqs;
  /* the batch's host arrays, read by the copies before this returns (pageable sources are staged) */
  if (hs->cu_seqlens) DSP_CUDA_TRY(cudaMemcpyAsync(w.cu, hs->cu_seqlens, (ns + 1) * 4, cudaMemcpyHostToDevice, s));
  DSP_CUDA_TRY(cudaMemcpyAsync(w.slot, hs->slot, ns * 4, cudaMemcpyHostToDevice, s));
  if (hs->has_state) DSP_CUDA_TRY(cudaMemcpyAsync(w.has, hs->has_state, ns, cudaMemcpyHostToDevice, s));
  if (hs->token_slot)
    DSP_CUDA_TRY(cudaMemcpyAsync(w.token_slot, hs->token_slot, (size_t)T * 4, cudaMemcpyHostToDevice, s));
  const dsp_cu_kda_seqs cs = {hs->num_seqs,
                              T,
                              hs->cu_seqlens ? w.cu : NULL,
                              w.slot,
                              hs->has_state ? w.has : NULL,
                              hs->token_slot ? w.token_slot : NULL,
                              w.tok_seq,
                              hs->write_final};
  DSP_TRY(dsp_cu_kda_token_seqs(&cs, w.tok_seq, s));
  const int32_t W = a->conv_width;
  DSP_TRY(dsp_cu_kda_conv(D, W, &cs, a->qkv, a->qkv_tok, a->conv_w, NULL, W > 1 ? a->conv_state->data : NULL,
                          W > 1 ? a->conv_state->slot_stride : 0, w.conv, D, s));
  const float bound = a->gate.form == DSP_KDA_GATE_LOWER_BOUND ? a->gate.lower_bound : 0.0f;
  DSP_TRY(dsp_cu_kda_gate(T, HV, K, a->f, a->f_tok, K, a->A_log, a->dt_bias, bound, w.g, s));
  DSP_TRY(dsp_cu_kda_beta(T, HV, a->b, a->b_tok, 1, w.beta, s));
  const dsp_cu_kda_in q = {w.conv, D, K}, k = {w.conv + (int64_t)H * K, D, K}, v = {w.conv + 2 * (int64_t)H * K, D, V};
  const float scale = (float)(1.0 / sqrt((double)K));
  /* both forms run the token-by-token kernel (kernels/cuda/kda.h) */
  DSP_TRY(dsp_cu_kda_recurrent(H, HV, K, V, scale, 0, &cs, q, k, v, w.g, w.beta, w.o, (int64_t)HV * V, V,
                               a->state->data, a->state->slot_stride, 0, s));
  const dsp_cu_kda_in o = {w.o, (int64_t)HV * V, V}, z = {a->z, a->z_tok, V};
  return dsp_cu_kda_norm(T, HV, V, o, z, a->norm_w, a->eps, a->y, a->y_tok, V, s);
}

extern "C" dsp_status dsp_cuda_op_kda_copy(dsp_backend *be, int dev, const dsp_kda_dims *d,
                                           const dsp_kda_conv_dims *cd, dsp_kda_state *st, dsp_kda_conv_state *cs,
                                           int32_t src, int32_t dst) {
  if (!d || !cd || !st || !st->data) return dsp_fail(DSP_ERR_ARG, "op kda copy (cuda): NULL argument");
  if (src < 0 || dst < 0 || src >= st->num_slots || dst >= st->num_slots)
    return dsp_fail(DSP_ERR_RANGE, "op kda copy (cuda): slots %d -> %d of %d", (int)src, (int)dst,
                    (int)st->num_slots);
  const size_t n = (size_t)d->num_v_heads * (size_t)d->head_k * (size_t)d->head_v;
  const size_t nc = (size_t)(cd->width - 1) * (size_t)cd->channels;
  if ((int64_t)n > st->slot_stride) return dsp_fail(DSP_ERR_SHAPE, "op kda copy (cuda): slot stride below HV*K*V");
  if (nc && (!cs || !cs->data || (int64_t)nc > cs->slot_stride || dst >= cs->num_slots || src >= cs->num_slots))
    return dsp_fail(DSP_ERR_SHAPE, "op kda copy (cuda): conv state missing, its slot stride below (W-1)*D or slot "
                                   "out of range");
  if (src == dst) return DSP_OK;
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  cudaStream_t s = dsp_cuda_stream(be, dev);
  DSP_CUDA_TRY(cudaMemcpyAsync(st->data + (int64_t)dst * st->slot_stride, st->data + (int64_t)src * st->slot_stride,
                               n * 4, cudaMemcpyDeviceToDevice, s));
  if (nc)
    DSP_CUDA_TRY(cudaMemcpyAsync(cs->data + (int64_t)dst * cs->slot_stride, cs->data + (int64_t)src * cs->slot_stride,
                                 nc * 2, cudaMemcpyDeviceToDevice, s));
  return DSP_OK;
}
