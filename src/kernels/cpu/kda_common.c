/* KDA: what the kernels share — the batch check, the q/k row preparation, the
 * workspace split and the state copies. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/bf16.h"
#include "core/status.h"
#include "kernels/cpu/kda.h"

dsp_status dsp_kda_dims_check(const dsp_kda_dims *d) {
  if (!d) return dsp_fail(DSP_ERR_ARG, "kda: NULL dims");
  if (d->num_heads <= 0 || d->num_v_heads <= 0 || d->num_v_heads % d->num_heads != 0)
    return dsp_fail(DSP_ERR_SHAPE, "kda: %d value heads is not a multiple of %d heads", (int)d->num_v_heads,
                    (int)d->num_heads);
  if (d->head_k < 1 || d->head_k > 256 || d->head_v < 1 || d->head_v > 1024)
    return dsp_fail(DSP_ERR_SHAPE, "kda: head dims K %d (1..256), V %d (1..1024)", (int)d->head_k, (int)d->head_v);
  return DSP_OK;
}

dsp_status dsp_kda_seqs_check(const dsp_kda_seqs *s, int32_t num_slots, int64_t *tokens) {
  if (!s || !tokens) return dsp_fail(DSP_ERR_ARG, "kda: NULL batch");
  if (s->num_seqs < 0) return dsp_fail(DSP_ERR_ARG, "kda: %d sequences", (int)s->num_seqs);
  if (s->num_seqs > 0 && !s->slot) return dsp_fail(DSP_ERR_ARG, "kda: NULL slot table");
  int64_t T = s->num_seqs;
  if (s->cu_seqlens) {
    if (s->cu_seqlens[0] != 0) return dsp_fail(DSP_ERR_ARG, "kda: cu_seqlens[0] = %d, not 0", (int)s->cu_seqlens[0]);
    for (int32_t n = 0; n < s->num_seqs; n++)
      if (s->cu_seqlens[n + 1] < s->cu_seqlens[n])
        return dsp_fail(DSP_ERR_ARG, "kda: cu_seqlens decreases at sequence %d", (int)n);
    T = s->cu_seqlens[s->num_seqs];
  }
  for (int32_t n = 0; n < s->num_seqs; n++)
    if (s->slot[n] >= num_slots)
      return dsp_fail(DSP_ERR_RANGE, "kda: sequence %d: slot %d of %d", (int)n, (int)s->slot[n], (int)num_slots);
  if (s->token_slot)
    for (int64_t i = 0; i < T; i++)
      if (s->token_slot[i] >= num_slots)
        return dsp_fail(DSP_ERR_RANGE, "kda: token %lld: slot %d of %d", (long long)i, (int)s->token_slot[i],
                        (int)num_slots);
  *tokens = T;
  return DSP_OK;
}

dsp_status dsp_kda_io_check(const char *who, const dsp_kda_dims *d, const dsp_kda_seqs *s, const dsp_kda_io *io,
                           const dsp_kda_state *st, int64_t *T) {
  DSP_TRY(dsp_kda_dims_check(d));
  if (!io || !st || !st->data) return dsp_fail(DSP_ERR_ARG, "%s: NULL io or state", who);
  if (st->slot_stride < (int64_t)d->num_v_heads * d->head_k * d->head_v)
    return dsp_fail(DSP_ERR_SHAPE, "%s: state slot stride %lld below HV*K*V", who, (long long)st->slot_stride);
  DSP_TRY(dsp_kda_seqs_check(s, st->num_slots, T));
  if (*T > 0 && (!io->q.data || !io->k.data || !io->v.data || !io->g || !io->beta || !io->o.data))
    return dsp_fail(DSP_ERR_ARG, "%s: NULL q, k, v, g, beta or o", who);
  return DSP_OK;
}

void dsp_kda_qk_row(const dsp_bf16 *x, int32_t n, int32_t raw, float scale, float *out) {
  if (raw) {
    for (int32_t i = 0; i < n; i++) out[i] = dsp_bf16_to_f32(x[i]) * scale;
    return;
  }
  float ss = 0.0f;
  for (int32_t i = 0; i < n; i++) {
    float v = dsp_bf16_to_f32(x[i]);
    ss += v * v;
  }
  /* fla divides by the root (l2norm_fwd multiplies by its reciprocal; the fused
   * recurrent kernel divides); we divide, then scale. */
  float r = sqrtf(ss + DSP_KDA_L2_EPS);
  for (int32_t i = 0; i < n; i++) out[i] = (dsp_bf16_to_f32(x[i]) / r) * scale;
}

int32_t dsp_kda_ws_threads(void *ws, size_t ws_bytes, size_t per_thread, char **base) {
  *base = NULL;
  if (!ws || per_thread == 0) return 0;
  uintptr_t p = (uintptr_t)ws, a = (p + 63u) & ~(uintptr_t)63u;
  if (ws_bytes < (size_t)(a - p) + per_thread) return 0;
  size_t n = (ws_bytes - (size_t)(a - p)) / per_thread;
  size_t maxt = (size_t)omp_get_max_threads();
  *base = (char *)a;
  return (int32_t)(n < maxt ? n : maxt);
}

dsp_status dsp_kda_state_copy(const dsp_kda_dims *d, dsp_kda_state *st, int32_t src, int32_t dst) {
  if (!d || !st || !st->data) return dsp_fail(DSP_ERR_ARG, "kda state copy: NULL argument");
  if (src < 0 || dst < 0 || src >= st->num_slots || dst >= st->num_slots)
    return dsp_fail(DSP_ERR_RANGE, "kda state copy: slots %d -> %d of %d", (int)src, (int)dst, (int)st->num_slots);
  size_t n = (size_t)d->num_v_heads * (size_t)d->head_k * (size_t)d->head_v;
  if ((int64_t)n > st->slot_stride) return dsp_fail(DSP_ERR_SHAPE, "kda state copy: slot stride below HV*K*V");
  if (src != dst) memcpy(st->data + (int64_t)dst * st->slot_stride, st->data + (int64_t)src * st->slot_stride, n * 4);
  return DSP_OK;
}

dsp_status dsp_kda_conv_state_copy(const dsp_kda_conv_dims *cd, dsp_kda_conv_state *cs, int32_t src,
                                   int32_t dst) {
  if (!cd || !cs || !cs->data) return dsp_fail(DSP_ERR_ARG, "kda conv state copy: NULL argument");
  if (src < 0 || dst < 0 || src >= cs->num_slots || dst >= cs->num_slots)
    return dsp_fail(DSP_ERR_RANGE, "kda conv state copy: slots %d -> %d of %d", (int)src, (int)dst,
                    (int)cs->num_slots);
  size_t n = (size_t)(cd->width - 1) * (size_t)cd->channels;
  if ((int64_t)n > cs->slot_stride) return dsp_fail(DSP_ERR_SHAPE, "kda conv state copy: slot stride below (W-1)*D");
  if (src != dst && n)
    memcpy(cs->data + (int64_t)dst * cs->slot_stride, cs->data + (int64_t)src * cs->slot_stride, n * 2);
  return DSP_OK;
}
