/* KDA short convolution: depthwise, causal, kernel W (4), SiLU, over a varlen
 * batch (prefill, verify) or one token per sequence (decode), with a conv state
 * per slot holding the last W-1 inputs. Per output element, fp32: acc = bias
 * (or 0), then acc += w[j] * x[t-W+1+j] for j = 0..W-1, then y = bf16(acc / (1 +
 * expf(-acc))). Inputs are bf16 and the state stores them as they came, so a
 * state round trip is exact and decode gives the bits of a longer prefill. */
#include <math.h>

#include "core/bf16.h"
#include "core/status.h"
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/expf.h"
#include "kernels/cpu/expf_avx512.h"
#include "kernels/cpu/kda.h"
#include "kernels/cpu/kernel.h"

enum { CONV_CB = 64 }; /* channels per task: the window stays in registers/L1 */

/* One token's outputs for channels 0 .. nc - 1 of a task, 16 lanes at a time:
 * the scalar loop's operations lane by lane (separate multiplies and adds, the
 * kernels' expf, an IEEE division, dsp_f32_to_bf16). wt: the task's weights
 * as [W][CONV_CB]. */
DSP_AVX512 static void conv_token_avx512(const float wt[][CONV_CB], const float *bias, float win[][CONV_CB],
                                         int32_t head, int32_t W1, const dsp_bf16 *xr, dsp_bf16 *yr, int32_t nc) {
  for (int32_t c = 0; c < nc; c += 16) {
    const __mmask16 m = dsp_avx512_lanes(nc - c);
    __m512 acc = bias ? _mm512_maskz_loadu_ps(m, bias + c) : _mm512_setzero_ps();
    for (int32_t j = 0; j < W1; j++)
      acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(wt[j] + c), _mm512_loadu_ps(win[(head + j) % W1] + c)));
    const __m512 xv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, xr + c)), 16));
    acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(wt[W1] + c), xv));
    const __m512 e = dsp_avx512_expf(_mm512_xor_ps(acc, _mm512_set1_ps(-0.0f)));
    _mm256_mask_storeu_epi16(yr + c, m, dsp_avx512_to_bf16(_mm512_div_ps(acc, _mm512_add_ps(_mm512_set1_ps(1.0f), e))));
  }
}

/* Writes the window (ring, oldest at head) to a state slot for channels c0..c0+nc. */
static void put_state(dsp_bf16 *dst, int32_t D, int32_t W1, float win[][CONV_CB], int32_t head, int32_t c0,
                      int32_t nc) {
  for (int32_t r = 0; r < W1; r++) {
    const float *src = win[(head + r) % W1];
    for (int32_t c = 0; c < nc; c++) dst[(int64_t)r * D + c0 + c] = dsp_f32_to_bf16(src[c]); /* exact: bf16 values */
  }
}

dsp_status dsp_kda_conv(const dsp_kda_conv_dims *cd, const dsp_kda_seqs *s, const dsp_bf16 *x,
                        int64_t x_tok, const float *weight, const float *bias,
                        dsp_kda_conv_state *cs, dsp_bf16 *y, int64_t y_tok) {
  if (!cd || !s || !weight) return dsp_fail(DSP_ERR_ARG, "kda conv: NULL argument");
  const int32_t D = cd->channels, W = cd->width, W1 = W - 1;
  if (D <= 0 || W < 1 || W > DSP_KDA_MAX_WIDTH)
    return dsp_fail(DSP_ERR_SHAPE, "kda conv: %d channels, width %d (1..%d)", (int)D, (int)W, DSP_KDA_MAX_WIDTH);
  if (W1 > 0 && (!cs || !cs->data)) return dsp_fail(DSP_ERR_ARG, "kda conv: width %d needs a conv state", (int)W);
  if (W1 > 0 && cs->slot_stride < (int64_t)W1 * D)
    return dsp_fail(DSP_ERR_SHAPE, "kda conv: state slot stride %lld below (W-1)*D = %lld", (long long)cs->slot_stride,
                    (long long)W1 * D);
  int64_t T;
  DSP_TRY(dsp_kda_seqs_check(s, W1 > 0 ? cs->num_slots : INT32_MAX, &T));
  if (T > 0 && (!x || !y)) return dsp_fail(DSP_ERR_ARG, "kda conv: NULL input or output");
  if (x_tok < D || y_tok < D) return dsp_fail(DSP_ERR_SHAPE, "kda conv: token strides below %d channels", (int)D);

  const int32_t nb = (D + CONV_CB - 1) / CONV_CB;
  const int64_t tasks = (int64_t)s->num_seqs * nb;
  const int vec = dsp_cpu_isa_current() == DSP_CPU_ISA_AVX512;
#pragma omp parallel for schedule(static) if (T * D >= 16384)
  for (int64_t task = 0; task < tasks; task++) {
    const int32_t n = (int32_t)(task / nb), c0 = (int32_t)(task % nb) * CONV_CB;
    const int32_t nc = D - c0 < CONV_CB ? D - c0 : CONV_CB;
    const int32_t slot = s->slot[n];
    if (slot < 0) continue; /* padding: inert */
    const int64_t t0 = s->cu_seqlens ? s->cu_seqlens[n] : n, t1 = s->cu_seqlens ? s->cu_seqlens[n + 1] : n + 1;
    const int has = !s->has_state || s->has_state[n];
    float win[DSP_KDA_MAX_WIDTH - 1][CONV_CB] = {{0}}, wt[DSP_KDA_MAX_WIDTH][CONV_CB] = {{0}};
    int32_t head = 0; /* ring index of the oldest input */
    for (int32_t j = 0; vec && j < W; j++)
      for (int32_t c = 0; c < nc; c++) wt[j][c] = weight[(int64_t)(c0 + c) * W + j];
    for (int32_t r = 0; r < W1; r++) {
      const dsp_bf16 *src = cs->data + (int64_t)slot * cs->slot_stride + (int64_t)r * D + c0;
      for (int32_t c = 0; c < nc; c++) win[r][c] = has ? dsp_bf16_to_f32(src[c]) : 0.0f;
    }
    for (int64_t t = t0; t < t1; t++) {
      const dsp_bf16 *xr = x + t * x_tok + c0;
      dsp_bf16 *yr = y + t * y_tok + c0;
      if (vec) conv_token_avx512((const float(*)[CONV_CB])wt, bias ? bias + c0 : NULL, win, head, W1, xr, yr, nc);
      for (int32_t c = 0; !vec && c < nc; c++) {
        const float *w = weight + (int64_t)(c0 + c) * W;
        float acc = bias ? bias[c0 + c] : 0.0f;
        for (int32_t j = 0; j < W1; j++) acc += w[j] * win[(head + j) % W1][c];
        acc += w[W1] * dsp_bf16_to_f32(xr[c]);
        yr[c] = dsp_f32_to_bf16(acc / (1.0f + dsp_cpu_expf(-acc)));
      }
      if (W1 > 0) {
        for (int32_t c = 0; c < nc; c++) win[head][c] = dsp_bf16_to_f32(xr[c]);
        head = (head + 1) % W1;
        if (s->token_slot && s->token_slot[t] >= 0)
          put_state(cs->data + (int64_t)s->token_slot[t] * cs->slot_stride, D, W1, win, head, c0, nc);
      }
    }
    if (W1 > 0 && s->write_final)
      put_state(cs->data + (int64_t)slot * cs->slot_stride, D, W1, win, head, c0, nc);
  }
  return DSP_OK;
}
