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

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DSP_KDA_CHUNK 64       /* tokens per chunk of the chunked form (fla's chunk_kda) */
#define DSP_KDA_VALUE_TILE 64  /* default value columns per tile of the chunked form */
#define DSP_KDA_MAX_WIDTH 8    /* largest short-conv kernel (Kimi-Linear: 4) */
#define DSP_KDA_L2_EPS 1e-6f   /* q/k L2 norm: x / sqrt(sum x^2 + eps) */

/* The heads of one layer (on one TP rank: its local heads). */
typedef struct {
  int32_t num_heads;   /* H: query/key heads */
  int32_t num_v_heads; /* HV: value heads, a multiple of H; value head hv reads q/k head hv / (HV/H) */
  int32_t head_k;      /* K: key dim, 1..256 */
  int32_t head_v;      /* V: value dim, 1..1024 */
} dsp_kda_dims;

/* Strided views of [T, heads, dim]: element (t, h, d) at data[t*tok + h*head + d]. */
typedef struct { const dsp_bf16 *data; int64_t tok, head; } dsp_kda_in_bf16;
typedef struct { dsp_bf16 *data; int64_t tok, head; } dsp_kda_out_bf16;

/* Recurrent states of one layer: slot s at data + s*slot_stride, laid out
 * [HV][K][V] fp32 (fla's default K-major layout). Slot 0 is an ordinary slot. */
typedef struct {
  float *data;
  int64_t slot_stride; /* >= HV*K*V */
  int32_t num_slots;
} dsp_kda_state;

/* Short-conv states: slot s at data + s*slot_stride, laid out [W-1][D] bf16: the
 * last W-1 inputs of the sequence, row 0 the oldest (vLLM's physical layout). */
typedef struct {
  dsp_bf16 *data;
  int64_t slot_stride; /* >= (W-1)*D */
  int32_t num_slots;
} dsp_kda_conv_state;

/* A batch of sequences, shared by the conv and the recurrence (the two state
 * pools of a layer use the same slot numbers).
 * Sequence n owns tokens [cu_seqlens[n], cu_seqlens[n+1]); cu_seqlens NULL means
 * one token per sequence (decode: token n belongs to sequence n).
 * slot[n] < 0 marks a padding sequence: skipped, its outputs and states untouched.
 * Its state is read from slot[n] at the start (zeros, without reading, where
 * has_state[n] == 0) and, with write_final, the state after its last token is
 * written back to slot[n]. token_slot (optional, one entry per token) keeps the
 * state after token i in token_slot[i] (< 0: not kept), so a verifier can take
 * the state after any accepted length without re-running. Within one call the
 * slots written must differ from each other and from every other sequence's
 * slot[n] (each sequence may write its own). */
typedef struct {
  int32_t num_seqs;
  const int32_t *cu_seqlens; /* [num_seqs + 1], cu[0] == 0, non-decreasing; or NULL */
  const int32_t *slot;       /* [num_seqs] */
  const uint8_t *has_state;  /* [num_seqs], or NULL: every sequence has a state */
  int32_t write_final;       /* 1: write the final state to slot[n] */
  const int32_t *token_slot; /* [total tokens], or NULL */
} dsp_kda_seqs;

/* Checks a layer's dims (H > 0, HV a multiple of H, K in 1..256, V in 1..1024). */
dsp_status dsp_kda_dims_check(const dsp_kda_dims *d);

/* Checks a batch against a slot pool of num_slots and returns its token count
 * in *tokens (the backends share this check). */
dsp_status dsp_kda_seqs_check(const dsp_kda_seqs *s, int32_t num_slots, int64_t *tokens);

/* ---- gate: g = the log decay, fp32 [T][HV][K] contiguous -------------------
 * x = f + dt_bias[h*K + d] (fp32), a = exp(A_log[h]); then, exactly one of
 *   SOFTPLUS:    g = -(a * softplus(x)),  softplus(x) = x > 20 ? x : log1p(exp(x))
 *   LOWER_BOUND: g = lower_bound * sigmoid(a * x)       (Kimi-K3: lower_bound -5)
 * A_log NULL means a = 1; dt_bias NULL means no bias. */
typedef enum { DSP_KDA_GATE_SOFTPLUS = 0, DSP_KDA_GATE_LOWER_BOUND = 1 } dsp_kda_gate_form;
typedef struct {
  dsp_kda_gate_form form;
  float lower_bound; /* LOWER_BOUND only: finite, < 0 */
} dsp_kda_gate_cfg;

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
typedef struct {
  int32_t channels; /* D */
  int32_t width;    /* W, 1..DSP_KDA_MAX_WIDTH */
} dsp_kda_conv_dims;

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

/* ---- the recurrence ---------------------------------------------------------- */
typedef struct {
  float scale;        /* q scale; 0 means K^-0.5 */
  int32_t qk_raw;     /* 0 (Kimi): L2-normalise q and k; 1: use them as given */
  int32_t value_tile; /* chunked form: value columns per tile; 0 means DSP_KDA_VALUE_TILE */
} dsp_kda_opts;       /* NULL means all defaults */

typedef struct {
  dsp_kda_in_bf16 q, k; /* [T, H, K] */
  dsp_kda_in_bf16 v;    /* [T, HV, V] */
  const float *g;       /* [T][HV][K], from dsp_kda_gate */
  const float *beta;    /* [T][HV], from dsp_kda_beta */
  dsp_kda_out_bf16 o;   /* [T, HV, V] */
} dsp_kda_io;

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
