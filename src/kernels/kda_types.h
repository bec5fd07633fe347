/* The types of Kimi Delta Attention's operations, shared by the CPU kernels
 * (kernels/cpu/kda.h, which states each kernel's numerics), the backend ops
 * (backend/ops.h) and the KDA layer (model/kda_layer.c). */
#ifndef DSP_KERNELS_KDA_TYPES_H
#define DSP_KERNELS_KDA_TYPES_H
#include <stddef.h>
#include <stdint.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DSP_KDA_CHUNK 64       /* tokens per chunk of the chunked form (fla's chunk_kda) */
#define DSP_KDA_VALUE_TILE 64  /* the CPU chunked form's default value columns per tile (CUDA's is 32) */
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

/* A batch staged once (backend/ops.h, dsp_op_kda_stage) and read by every KDA
 * op call of that batch, one per layer, and by graphs replaying them: the
 * batch's arrays copied into backend memory with two maps made once, each
 * token's sequence and each sequence's first chunk of DSP_KDA_CHUNK tokens. */
typedef struct {
  dsp_kda_seqs seqs;          /* the batch, its arrays in backend memory (num_seqs, write_final as given) */
  const int32_t *tok_seq;     /* [tokens]: the sequence of each token */
  const int32_t *chunk_first; /* [num_seqs + 1]: sequence n's chunks are [chunk_first[n], chunk_first[n+1]) */
  int64_t tokens, chunks;
  int32_t num_slots;          /* the state pools it was checked against */
} dsp_kda_staged;

typedef enum { DSP_KDA_GATE_SOFTPLUS = 0, DSP_KDA_GATE_LOWER_BOUND = 1 } dsp_kda_gate_form;
typedef struct {
  dsp_kda_gate_form form;
  float lower_bound; /* LOWER_BOUND only: finite, < 0 */
} dsp_kda_gate_cfg;

typedef struct {
  int32_t channels; /* D */
  int32_t width;    /* W, 1..DSP_KDA_MAX_WIDTH */
} dsp_kda_conv_dims;

typedef struct {
  float scale;        /* q scale; 0 means K^-0.5 */
  int32_t qk_raw;     /* 0 (Kimi): L2-normalise q and k; 1: use them as given */
  int32_t value_tile; /* value columns per tile, never changing a result; 0 means the backend's default:
                         64 on the CPU (DSP_KDA_VALUE_TILE), 32 for CUDA's chunked form */
} dsp_kda_opts;       /* NULL means all defaults */

typedef struct {
  dsp_kda_in_bf16 q, k; /* [T, H, K] */
  dsp_kda_in_bf16 v;    /* [T, HV, V] */
  const float *g;       /* [T][HV][K], from dsp_kda_gate */
  const float *beta;    /* [T][HV], from dsp_kda_beta */
  dsp_kda_out_bf16 o;   /* [T, HV, V] */
} dsp_kda_io;

#ifdef __cplusplus
}
#endif
#endif
