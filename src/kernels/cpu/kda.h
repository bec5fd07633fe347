/* Kimi Delta Attention (KDA): the CPU kernels of one KDA layer, between its
 * projections and o_proj. Per value head, with a recurrent state S [K, V] in
 * fp32, for each token t:
 *   S = diag(exp(g_t)) S;  u = beta_t (v_t - S^T k_t);  S = S + k_t u^T;
 *   o_t = S^T (q_t * scale)            (the output reads the updated state)
 * q and k are L2-normalised per head first (eps 1e-6); g_t [K] is the log decay
 * made once by dsp_kda_gate (the recurrence never applies a gate itself).
 *
 * Every function takes raw pointers with element strides, so views into a
 * merged projection's output are read in place; the innermost dimension (one
 * head's K or V values) is contiguous. Nothing is allocated per call: kernels
 * that need scratch take a caller workspace sized by a *_workspace_size query.
 * A sequence's results never depend on the other sequences in its batch, on
 * the thread count or on the value tile. Bad arguments return a status with a
 * message (dsp_error_message); the kernels assume inputs that are finite. */
#ifndef DSP_KERNELS_CPU_KDA_H
#define DSP_KERNELS_CPU_KDA_H
#include <stddef.h>
#include <stdint.h>

#include "kernels/kda_types.h"
#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks a layer's dims (H > 0, HV a multiple of H, K in 1..256, V in 1..1024). */
dsp_status dsp_kda_dims_check(const dsp_kda_dims *d);

/* Checks a batch against a slot pool of num_slots and returns its token count
 * in *tokens (the backends share this check). */
dsp_status dsp_kda_seqs_check(const dsp_kda_seqs *s, int32_t num_slots, int64_t *tokens);

/* ---- the recurrence's inputs and the two forms: kda_types.h; here the kernels ---- */

/* ---- gate: g = the log decay, fp32 [T][HV][K] contiguous -------------------
 * x = f + dt_bias[h*K + d] (fp32), a = exp(A_log[h]); then, exactly one of
 *   SOFTPLUS:    g = -(a * softplus(x)),  softplus(x) = x > 20 ? x : log1p(exp(x))
 *   LOWER_BOUND: g = lower_bound * sigmoid(a * x)       (Kimi-K3: lower_bound -5)
 * A_log NULL means a = 1; dt_bias NULL means no bias. exp is the kernels'
 * expf (expf.h), log1p dspark's log1pf (core/log1pf.h), as in every KDA
 * kernel here, so that CUDA can compute the same bits. */
dsp_status dsp_kda_gate(int64_t T, int32_t HV, int32_t K, dsp_kda_in_bf16 f, const float *A_log,
                        const float *dt_bias, const dsp_kda_gate_cfg *cfg, float *g);

/* ---- beta = sigmoid(b), read from a strided bf16 view, fp32 [T][HV] contiguous.
 * b(t, h) at b[t*b_tok + h*b_head]. */
dsp_status dsp_kda_beta(int64_t T, int32_t HV, const dsp_bf16 *b, int64_t b_tok, int64_t b_head,
                        float *beta);

/* ---- depthwise causal short conv + SiLU, varlen prefill, verify or decode ----
 * y[t][c] = bf16(silu(acc)), acc = bias[c] (or 0) + sum_{j=0}^{W-1} weight[c*W + j] *
 * x[t-W+1+j][c] in fp32, j ascending, inputs before the sequence start taken from
 * its conv state (or zeros). weight [D][W] fp32 (checkpoint [D, 1, W]); bias [D]
 * or NULL. x(t, c) at x[t*x_tok + c], y likewise (y must not alias x). One call
 * can cover q|k|v of a merged projection with their weights concatenated.
 * The same code serves prefill (cu_seqlens), verify and decode (cu_seqlens NULL,
 * the state updated in place with write_final), so a token's bits never depend
 * on the kind of call. */
dsp_status dsp_kda_conv(const dsp_kda_conv_dims *cd, const dsp_kda_seqs *s, const dsp_bf16 *x,
                        int64_t x_tok, const float *weight, const float *bias,
                        dsp_kda_conv_state *cs, dsp_bf16 *y, int64_t y_tok);

/* ---- gated output RMSNorm ---------------------------------------------------
 * Per (token, value head) row of V values: r = 1/sqrt(sum(x^2)/V + eps), sum in
 * fp32 with d ascending; y = bf16(((x * r) * weight[d]) * sigmoid(z)). One weight
 * [V] (fp32) for all heads. y may alias x (same view). */
dsp_status dsp_kda_gated_rmsnorm(int64_t T, int32_t HV, int32_t V, dsp_kda_in_bf16 x,
                                 dsp_kda_in_bf16 z, const float *weight, float eps,
                                 dsp_kda_out_bf16 y);

/* The token-by-token form: decode (one token per sequence), speculative
 * verification (k+1 tokens per sequence, token_slot keeping each state) and any
 * prefill. fp32 throughout; q, k, v widened exactly from bf16; o rounded once.
 * Per token and value head, in this order: q, k normalised (the row's sum of
 * squares in order, then x / sqrt(ss + 1e-6), q then times scale);
 * S[d][:] *= expf(g[d]) and a[v] = sum_d k[d] S[d][v] (d ascending);
 * u = beta * (v - a); S[d][:] += k[d] * u; o[v] = sum_d q[d] S[d][v] (d ascending).
 * Value columns are independent, so no tiling changes a bit. */
size_t dsp_kda_recurrent_workspace_size(const dsp_kda_dims *d, int32_t threads);
dsp_status dsp_kda_recurrent(const dsp_kda_dims *d, const dsp_kda_opts *opt, const dsp_kda_seqs *s,
                             const dsp_kda_io *io, dsp_kda_state *st, void *ws, size_t ws_bytes);

/* The chunked form for prefill (varlen): chunks of DSP_KDA_CHUNK tokens from each
 * sequence's start, the WY representation / UT transform inside a chunk as fla's
 * chunk_kda computes it (tests/oracle/kda_ref.py, chunked(), has the algebra).
 * Equal to the recurrence within rounding, not bit for bit. token_slot must be
 * NULL. The value tile only changes the loop order over independent columns:
 * results are bit-identical for every tile. */
int32_t dsp_kda_chunked_value_tile(const dsp_kda_dims *d, const dsp_kda_opts *opt);
size_t dsp_kda_chunked_workspace_size(const dsp_kda_dims *d, const dsp_kda_opts *opt,
                                      int32_t threads);
dsp_status dsp_kda_chunked(const dsp_kda_dims *d, const dsp_kda_opts *opt, const dsp_kda_seqs *s,
                           const dsp_kda_io *io, dsp_kda_state *st, void *ws, size_t ws_bytes);

/* Workspace queries: threads <= 0 means omp_get_max_threads(). A kernel runs on
 * as many threads as its workspace holds (at most omp_get_max_threads()); a
 * workspace too small for one thread is DSP_ERR_NOMEM. */

/* ---- state copies (accepting a verified prefix: copy token_slot[cu[n]+a-1] to
 * slot[n], or re-point the slot table instead) ---------------------------------- */
dsp_status dsp_kda_state_copy(const dsp_kda_dims *d, dsp_kda_state *st, int32_t src, int32_t dst);
dsp_status dsp_kda_conv_state_copy(const dsp_kda_conv_dims *cd, dsp_kda_conv_state *cs, int32_t src,
                                   int32_t dst);

/* Shared by the two recurrence forms: checks dims, batch, io and state, and
 * returns the token count in *T; who names the caller in the message. */
dsp_status dsp_kda_io_check(const char *who, const dsp_kda_dims *d, const dsp_kda_seqs *s,
                            const dsp_kda_io *io, const dsp_kda_state *st, int64_t *T);

/* Shared by the kernel files: aligns ws up to 64 bytes into *base and returns
 * how many per-thread regions of per_thread bytes (a multiple of 64) fit, at
 * most omp_get_max_threads(); 0 when not one fits. */
int32_t dsp_kda_ws_threads(void *ws, size_t ws_bytes, size_t per_thread, char **base);

/* Shared by the two recurrence forms so they normalise identically: out[i] =
 * (x[i] / sqrt(sum x^2 + 1e-6)) * scale, or x[i] * scale when raw. */
void dsp_kda_qk_row(const dsp_bf16 *x, int32_t n, int32_t raw, float scale, float *out);

#ifdef __cplusplus
}
#endif
#endif
