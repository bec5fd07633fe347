/* KDA, the chunked form (fla's chunk_kda): prefill over a varlen batch, chunks of
 * 64 tokens from each sequence's start, one task per (sequence, value head).
 * Inside a chunk of n tokens, G_i = sum_{s<=i} g_s from the chunk start, S the
 * state before it (the algebra: tests/oracle/kda_ref.py, chunked()):
 *   A_ij   = sum_d k_i k_j exp(G_i - G_j)  (j < i),   Aqk_ij likewise with q_i (j <= i)
 *   T      = (I + diag(beta) A)^-1                   forward substitution (UT transform)
 *   w      = T diag(beta) (k exp(G)),  u = T diag(beta) v     (WY representation)
 *   U      = u - w S;  o = (q exp(G)) S + Aqk U;  S' = exp(G_last) S + (k exp(G_last - G))^T U
 * Numerics, all fp32, every sum in ascending index order, expf the kernels' (expf.h):
 * - q, k normalised by dsp_kda_qk_row (as the recurrence); G by running sums.
 * - exp(G_i - G_j) never overflows: as fla, 16-row blocks; a pair in one block
 *   takes expf of the difference, a pair across blocks the product of
 *   exp(G_i - G_r) and exp(G_r - G_j), r the block's first row, both <= 1.
 * - the terms of A are (k_i k_j) e, of Aqk (q_i k_j) e; L = beta_i A_ij is
 *   rounded, then T_ij = -sum_{m=j}^{i-1} L_im T_mj, then Tb_ij = T_ij beta_j.
 * - U = (sum_m Tb_im v_m) - (sum_d w_id S_d); o = bf16((q exp(G)) S + Aqk U);
 *   S' = exp(G_last) S + (sum_m KG_m U_m), each product rounded before the add.
 * Value columns are independent: the tile only reorders loops, never a sum. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/bf16.h"
#include "core/status.h"
#include "kernels/cpu/expf.h"
#include "kernels/cpu/kda.h"
#include "kernels/cpu/kda_chunked_avx512.h"
#include "kernels/cpu/kernel.h"

#define KDA_FN static
#define KDA_SFX(name) name##_base
/* out[d] = expf(a[d] - b[d]) (b NULL: expf(a[d])), the kernels' expf */
static void exp_sub_base(float *out, const float *a, const float *b, int32_t n) {
  for (int32_t d = 0; d < n; d++) out[d] = dsp_cpu_expf(b ? a[d] - b[d] : a[d]);
}
/* out[j] += c[r cs] rows[r rs + j], r = 0 .. m-1 in order, j < n */
static void acc_rows_base(float *out, const float *c, int64_t cs, const float *rows, int64_t rs, int32_t m, int32_t n) {
  for (int32_t r = 0; r < m; r++) {
    const float cr = c[r * cs], *row = rows + r * rs;
    for (int32_t j = 0; j < n; j++) out[j] += cr * row[j];
  }
}
#include "kernels/cpu/kda_chunked_body.h"

int32_t dsp_kda_chunked_value_tile(const dsp_kda_dims *d, const dsp_kda_opts *opt) {
  if (!d || d->head_v <= 0 || (opt && opt->value_tile < 0)) return 0;
  int32_t bv = opt && opt->value_tile > 0 ? opt->value_tile : DSP_KDA_VALUE_TILE; /* explicit wins */
  return bv < d->head_v ? bv : d->head_v;
}

size_t dsp_kda_chunked_workspace_size(const dsp_kda_dims *d, const dsp_kda_opts *opt, int32_t threads) {
  if (dsp_kda_dims_check(d) != DSP_OK) return 0;
  const int32_t bv = dsp_kda_chunked_value_tile(d, opt);
  if (bv < 1) return 0;
  if (threads <= 0) threads = omp_get_max_threads();
  return (size_t)threads * scratch_floats(d->head_k, d->head_v, bv) * sizeof(float) + 64;
}

dsp_status dsp_kda_chunked(const dsp_kda_dims *d, const dsp_kda_opts *opt, const dsp_kda_seqs *s,
                           const dsp_kda_io *io, dsp_kda_state *st, void *ws, size_t ws_bytes) {
  int64_t T;
  DSP_TRY(dsp_kda_io_check("kda chunked", d, s, io, st, &T));
  if (s->token_slot) return dsp_fail(DSP_ERR_UNSUPPORTED, "kda chunked: per-token states are the recurrent form's");
  const int32_t bv = dsp_kda_chunked_value_tile(d, opt);
  if (bv < 1) return dsp_fail(DSP_ERR_ARG, "kda chunked: value tile %d", opt ? (int)opt->value_tile : 0);
  const int32_t K = d->head_k, V = d->head_v;
  const size_t per = scratch_floats(K, V, bv) * sizeof(float);
  char *base;
  const int32_t nt = dsp_kda_ws_threads(ws, ws_bytes, per, &base);
  if (nt < 1) return dsp_fail(DSP_ERR_NOMEM, "kda chunked: workspace of %zu bytes, one thread needs %zu", ws_bytes, per + 64);
  const float scale = opt && opt->scale != 0.0f ? opt->scale : (float)(1.0 / sqrt((double)K));
  const int32_t raw = opt ? opt->qk_raw : 0;
  const int64_t tasks = (int64_t)s->num_seqs * d->num_v_heads;
  const int avx512 = dsp_cpu_isa_current() == DSP_CPU_ISA_AVX512;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t task = 0; task < tasks; task++) {
    if (avx512) dsp_kda_chunk_task_avx512(d, bv, scale, raw, s, io, st, base, per, omp_get_thread_num(), task);
    else chunk_task_base(d, bv, scale, raw, s, io, st, base, per, omp_get_thread_num(), task);
  }
  return DSP_OK;
}
