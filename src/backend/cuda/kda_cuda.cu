/* The KDA operation on CUDA (backend/ops.h, dsp_op_kda): the kernels of
 * kernels/cuda/kda.h in the layer's order on the device's stream, over one
 * workspace carved per call. A batch staged by dsp_op_kda_stage is read where
 * it lies (nothing but kernels enqueued: capturable); host arrays are staged
 * into the workspace first. */
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
  float *g, *beta, *scratch, *carry;
  void *stage;
  size_t stage_bytes;
  int64_t cap; /* chunks of scratch: one window of the chunked form */
} kda_ws;

/* Chunks per window: a long prefill's first 128 (8192 tokens) at most, so the
 * scratch stays near 0.6 GB at Kimi-Linear's heads; later windows reuse it. */
static int64_t chunk_cap(int64_t T) {
  const int64_t c = (T + DSP_KDA_CHUNK - 1) / DSP_KDA_CHUNK + 8;
  return c < 128 ? c : 128;
}

/* The workspace for T tokens of nseq sequences (core/layout.h), from base
 * rounded up to the layout's alignment (base NULL: sizes only); *bytes: what it needs. */
static dsp_status carve(const dsp_kda_dims *d, int64_t T, int64_t nseq, void *base, kda_ws *w, size_t *bytes) {
  const int64_t D = 2 * (int64_t)d->num_heads * d->head_k + (int64_t)d->num_v_heads * d->head_v;
  const int64_t HV = d->num_v_heads;
  kda_ws tmp;
  if (!w) w = &tmp;
  w->cap = d->head_k <= DSP_CU_KDA_CHUNK_MAX_K ? chunk_cap(T) : 0;
  size_t b[7];
  DSP_TRY(dsp_layout_bytes(T, D, 1, 2, "op kda (cuda) conv", &b[0]));
  DSP_TRY(dsp_layout_bytes(T, HV, d->head_v, 2, "op kda (cuda) o", &b[1]));
  DSP_TRY(dsp_layout_bytes(T, HV, d->head_k, 4, "op kda (cuda) g", &b[2]));
  DSP_TRY(dsp_layout_bytes(T, HV, 1, 4, "op kda (cuda) beta", &b[3]));
  DSP_TRY(dsp_op_kda_stage_bytes((int32_t)(nseq < INT32_MAX ? nseq : INT32_MAX), T, &b[4]));
  DSP_TRY(dsp_layout_bytes(w->cap, (int64_t)dsp_cu_kda_chunk_floats(d->num_v_heads, d->head_k, d->head_v), 1, 4,
                           "op kda (cuda) chunk scratch", &b[5]));
  DSP_TRY(dsp_layout_bytes(w->cap ? 2 * HV : 0, d->head_k, d->head_v, 4, "op kda (cuda) carried state", &b[6]));
  w->stage_bytes = b[4];
  const dsp_layout_entry e[7] = {{(void **)&w->conv, b[0]}, {(void **)&w->o, b[1]},       {(void **)&w->g, b[2]},
                                 {(void **)&w->beta, b[3]}, {&w->stage, b[4]},            {(void **)&w->scratch, b[5]},
                                 {(void **)&w->carry, b[6]}};
  DSP_TRY(dsp_layout_total(e, 7, bytes));
  *bytes += DSP_LAYOUT_ALIGN - 1;
  if (base) dsp_layout_carve(dsp_layout_align(base), e, 7);
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
  if (a->staged) T = a->staged->tokens;
  else DSP_TRY(dsp_kda_seqs_check(a->seqs, a->state->num_slots, &T));
  if (T == 0) return DSP_OK;
  DSP_TRY(check_conv(a, D));
  if (!a->qkv || !a->f || !a->b || !a->z || !a->y || !a->conv_w || !a->norm_w)
    return dsp_fail(DSP_ERR_ARG, "op kda (cuda): NULL qkv, f, b, z, y, conv weight or norm weight");
  const int32_t nseq = a->staged ? a->staged->seqs.num_seqs : a->seqs->num_seqs;
  kda_ws w;
  size_t need = 0;
  DSP_TRY(carve(d, T, nseq, a->ws, &w, &need)); /* pointers used only if it fits */
  if (need > a->ws_bytes)
    return dsp_fail(DSP_ERR_NOMEM, "op kda (cuda): a workspace of %zu bytes is too small for %lld tokens in %d sequences",
                    a->ws_bytes, (long long)T, (int)nseq);
  DSP_CUDA_TRY(cudaSetDevice(be->device[dev]));
  cudaStream_t s = dsp_cuda_stream(be, dev);
  dsp_kda_staged own;
  const dsp_kda_staged *sg = a->staged;
  if (!sg) { /* a batch of host arrays: staged here, for this call only */
    DSP_TRY(dsp_op_kda_stage(be, dev, a->seqs, a->state->num_slots, w.stage, w.stage_bytes, &own));
    sg = &own;
  }
  const dsp_kda_seqs *ss = &sg->seqs;
  const int chunked = a->form == DSP_KDA_CHUNKED && w.cap > 0;
  if (chunked && ss->token_slot)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "op kda (cuda): per-token states are the recurrent form's");
  const dsp_cu_kda_seqs cs = {ss->num_seqs, T,           sg->chunks, ss->cu_seqlens, ss->slot, ss->has_state,
                              ss->token_slot, sg->tok_seq, sg->chunk_first, ss->write_final};
  const int32_t W = a->conv_width;
  const float bound = a->gate.form == DSP_KDA_GATE_LOWER_BOUND ? a->gate.lower_bound : 0.0f;
  const float scale = (float)(1.0 / sqrt((double)K));
  /* A decode batch in one kernel wherever it fits: faster than the separate
   * kernels at every batch measured (1 to 256 sequences of 32 heads, bench/
   * RESULTS.md). The bits are the same either way. */
  if (a->form == DSP_KDA_RECURRENT && !ss->cu_seqlens && dsp_cu_kda_decode_fits(H, HV, K, V, W)) {
    const dsp_cu_kda_decode_args da = {H, K, W, a->qkv, a->qkv_tok, a->conv_w, W > 1 ? a->conv_state->data : NULL,
                                       W > 1 ? a->conv_state->slot_stride : 0, a->f, a->f_tok, a->A_log, a->dt_bias,
                                       bound, a->b, a->b_tok, a->z, a->z_tok, a->norm_w, a->eps, scale,
                                       a->state->data, a->state->slot_stride, a->y, a->y_tok};
    return dsp_cu_kda_decode(&cs, &da, s);
  }
  DSP_TRY(dsp_cu_kda_conv(D, W, &cs, a->qkv, a->qkv_tok, a->conv_w, NULL, W > 1 ? a->conv_state->data : NULL,
                          W > 1 ? a->conv_state->slot_stride : 0, w.conv, D, s));
  DSP_TRY(dsp_cu_kda_gate(T, HV, K, a->f, a->f_tok, K, a->A_log, a->dt_bias, bound, w.g, s));
  DSP_TRY(dsp_cu_kda_beta(T, HV, a->b, a->b_tok, 1, w.beta, s));
  const dsp_cu_kda_in q = {w.conv, D, K}, k = {w.conv + (int64_t)H * K, D, K}, v = {w.conv + 2 * (int64_t)H * K, D, V};
  if (chunked) { /* window by window of w.cap chunks; a window 0 even without chunks (empty sequences) */
    for (int64_t c = 0, win = 0; c == 0 || c < sg->chunks; c += w.cap, win++) {
      const int64_t hi = c + w.cap < sg->chunks ? c + w.cap : sg->chunks;
      DSP_TRY(dsp_cu_kda_chunked(H, HV, K, V, scale, 0, &cs, c, hi, (int32_t)win, q, k, v, w.g, w.beta, w.o,
                                 (int64_t)HV * V, V, a->state->data, a->state->slot_stride, w.scratch, w.carry,
                                 a->value_tile, s));
    }
  } else { /* the recurrent form (and the chunked one for K above the chunked kernel's) */
    DSP_TRY(dsp_cu_kda_recurrent(H, HV, K, V, scale, 0, &cs, q, k, v, w.g, w.beta, w.o, (int64_t)HV * V, V,
                                 a->state->data, a->state->slot_stride, a->value_tile, s));
  }
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
