/* KDA, the token-by-token form: decode, speculative verification and any
 * prefill, one task per (sequence, value head). fp32 state in a per-thread
 * workspace copy; per token the order in kda.h: normalise q, k; decay each state
 * row and accumulate k^T S (d ascending); u = beta (v - k^T S); add k u^T and
 * accumulate q^T S (d ascending); round o to bf16 once. Value columns are
 * independent, so the AVX-512 path (16 columns in the lanes, each lane the
 * scalar path's chain of separate multiplies and adds) is bit-identical to the
 * scalar one, which stays for other CPUs. */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/bf16.h"
#include "core/status.h"
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/expf.h"
#include "kernels/cpu/kda.h"
#include "kernels/cpu/kernel.h"

static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

static size_t per_thread_bytes(const dsp_kda_dims *d) {
  size_t K = (size_t)d->head_k, V = (size_t)d->head_v;
  return (up16(K * V) + 3 * up16(K) + 2 * up16(V)) * sizeof(float); /* a multiple of 64 */
}

size_t dsp_kda_recurrent_workspace_size(const dsp_kda_dims *d, int32_t threads) {
  if (dsp_kda_dims_check(d) != DSP_OK) return 0;
  if (threads <= 0) threads = omp_get_max_threads();
  return (size_t)threads * per_thread_bytes(d) + 64;
}

/* One token of one head on the state S [K][V]; a gets q^T S of the updated state. */
static void token_scalar(float *S, int32_t K, int32_t V, const float *eg, const float *k, const float *q, float b,
                         const dsp_bf16 *vr, float *a, float *u) {
  for (int32_t j = 0; j < V; j++) a[j] = 0.0f;
  for (int32_t i = 0; i < K; i++) { /* decay, then k^T S of the decayed state */
    float *row = S + (int64_t)i * V;
    const float e = eg[i], ki = k[i];
    for (int32_t j = 0; j < V; j++) {
      row[j] *= e;
      a[j] += ki * row[j];
    }
  }
  for (int32_t j = 0; j < V; j++) {
    u[j] = b * (dsp_bf16_to_f32(vr[j]) - a[j]);
    a[j] = 0.0f;
  }
  for (int32_t i = 0; i < K; i++) { /* rank-1 update, then q^T S of the updated state */
    float *row = S + (int64_t)i * V;
    const float ki = k[i], qi = q[i];
    for (int32_t j = 0; j < V; j++) {
      row[j] += ki * u[j];
      a[j] += qi * row[j];
    }
  }
}

/* The same per column, 64 columns (four vectors, masked at the tail) at a time. */
DSP_AVX512 static void token_avx512(float *S, int32_t K, int32_t V, const float *eg, const float *k, const float *q,
                                    float b, const dsp_bf16 *vr, float *a) {
  for (int32_t j0 = 0; j0 < V; j0 += 64) {
    __mmask16 m[4];
    for (int w = 0; w < 4; w++) m[w] = dsp_avx512_lanes(V - j0 - 16 * w);
    __m512 acc[4], uu[4];
    for (int w = 0; w < 4; w++) acc[w] = _mm512_setzero_ps();
    for (int32_t i = 0; i < K; i++) {
      float *row = S + (int64_t)i * V + j0;
      const __m512 e = _mm512_set1_ps(eg[i]), ki = _mm512_set1_ps(k[i]);
      for (int w = 0; w < 4; w++) {
        const __m512 r = _mm512_mul_ps(_mm512_maskz_loadu_ps(m[w], row + 16 * w), e);
        _mm512_mask_storeu_ps(row + 16 * w, m[w], r);
        acc[w] = _mm512_add_ps(acc[w], _mm512_mul_ps(ki, r));
      }
    }
    const __m512 bb = _mm512_set1_ps(b);
    for (int w = 0; w < 4; w++) {
      const __m256i raw = _mm256_maskz_loadu_epi16(m[w], vr + j0 + 16 * w);
      const __m512 vv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
      uu[w] = _mm512_mul_ps(bb, _mm512_sub_ps(vv, acc[w]));
      acc[w] = _mm512_setzero_ps();
    }
    for (int32_t i = 0; i < K; i++) {
      float *row = S + (int64_t)i * V + j0;
      const __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
      for (int w = 0; w < 4; w++) {
        const __m512 r = _mm512_add_ps(_mm512_maskz_loadu_ps(m[w], row + 16 * w), _mm512_mul_ps(ki, uu[w]));
        _mm512_mask_storeu_ps(row + 16 * w, m[w], r);
        acc[w] = _mm512_add_ps(acc[w], _mm512_mul_ps(qi, r));
      }
    }
    for (int w = 0; w < 4; w++) _mm512_mask_storeu_ps(a + j0 + 16 * w, m[w], acc[w]);
  }
}

dsp_status dsp_kda_recurrent(const dsp_kda_dims *d, const dsp_kda_opts *opt, const dsp_kda_seqs *s,
                             const dsp_kda_io *io, dsp_kda_state *st, void *ws, size_t ws_bytes) {
  int64_t T;
  DSP_TRY(dsp_kda_io_check("kda recurrent", d, s, io, st, &T));
  const size_t per = per_thread_bytes(d);
  char *base;
  const int32_t nt = dsp_kda_ws_threads(ws, ws_bytes, per, &base);
  if (nt < 1) return dsp_fail(DSP_ERR_NOMEM, "kda recurrent: workspace of %zu bytes, one thread needs %zu", ws_bytes, per + 64);

  const int32_t H = d->num_heads, HV = d->num_v_heads, K = d->head_k, V = d->head_v, G = HV / H;
  const float scale = opt && opt->scale != 0.0f ? opt->scale : (float)(1.0 / sqrt((double)K));
  const int32_t raw = opt ? opt->qk_raw : 0;
  const int64_t tasks = (int64_t)s->num_seqs * HV, KV = (int64_t)K * V;
  const int avx512 = dsp_cpu_isa_current() == DSP_CPU_ISA_AVX512;

#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t task = 0; task < tasks; task++) {
    const int32_t n = (int32_t)(task / HV), hv = (int32_t)(task % HV), h = hv / G;
    const int32_t slot = s->slot[n];
    if (slot < 0) continue; /* padding: inert */
    float *S = (float *)(base + (size_t)omp_get_thread_num() * per);
    float *q = S + up16((size_t)KV), *k = q + up16((size_t)K), *eg = k + up16((size_t)K);
    float *a = eg + up16((size_t)K), *u = a + up16((size_t)V);
    const int64_t t0 = s->cu_seqlens ? s->cu_seqlens[n] : n, t1 = s->cu_seqlens ? s->cu_seqlens[n + 1] : n + 1;
    if (!s->has_state || s->has_state[n])
      memcpy(S, st->data + (int64_t)slot * st->slot_stride + hv * KV, (size_t)KV * sizeof(float));
    else
      memset(S, 0, (size_t)KV * sizeof(float));
    for (int64_t t = t0; t < t1; t++) {
      dsp_kda_qk_row(io->q.data + t * io->q.tok + h * io->q.head, K, raw, scale, q);
      dsp_kda_qk_row(io->k.data + t * io->k.tok + h * io->k.head, K, raw, 1.0f, k);
      const float *g = io->g + (t * HV + hv) * K;
      for (int32_t i = 0; i < K; i++) eg[i] = dsp_cpu_expf(g[i]);
      const float b = io->beta[t * HV + hv];
      const dsp_bf16 *vr = io->v.data + t * io->v.tok + hv * io->v.head;
      if (avx512)
        token_avx512(S, K, V, eg, k, q, b, vr, a);
      else
        token_scalar(S, K, V, eg, k, q, b, vr, a, u);
      dsp_bf16 *orow = io->o.data + t * io->o.tok + hv * io->o.head;
      for (int32_t j = 0; j < V; j++) orow[j] = dsp_f32_to_bf16(a[j]);
      if (s->token_slot && s->token_slot[t] >= 0)
        memcpy(st->data + (int64_t)s->token_slot[t] * st->slot_stride + hv * KV, S, (size_t)KV * sizeof(float));
    }
    if (s->write_final) memcpy(st->data + (int64_t)slot * st->slot_stride + hv * KV, S, (size_t)KV * sizeof(float));
  }
  return DSP_OK;
}
