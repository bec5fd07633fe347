/* Kimi Delta Attention on the GPU: the kernels of one KDA layer between its
 * projections and o_proj, with the numerics of src/kernels/cpu/kda.h (the same
 * operations, rounding points and per-element orders; products and sums are
 * plain fp32 operations, never contracted into fma, as the CPU's are; expf
 * and log1pf the CPU's functions, common/expf.cuh and core/log1pf.h, so gate,
 * beta, SiLU and the decay are the CPU's bits and so are the recurrent form's
 * states). Where they differ from the CPU: the output norm sums x^2 with lane
 * l of a warp taking d = l, l+32, ... in order, then an xor butterfly (the CPU
 * sums d in order), which can move an output by a bf16 ulp.
 * Everything else is the CPU's order: q/k sums of squares, k^T S and q^T S in
 * d order, one thread per value column. No result depends on the other
 * sequences of a call, on its slot, on how a sequence's tokens are split over
 * calls, on the strides of a view or on the value tile.
 * The chunked form (kda_chunked.cu) is fla's chunk_kda in fp32 with the CPU's
 * chunked arithmetic (its q/k roots, expf and sum orders, no fma): over the
 * op harness's 32 input draws its states and outputs were the CPU's chunked
 * form's bits; the contract keeps a tolerance (tests/test_ops_kda.c).
 * Device pointers; strides in elements; every call enqueues on s. */
#ifndef DSP_KERNELS_CUDA_KDA_H
#define DSP_KERNELS_CUDA_KDA_H
#include <cuda_runtime.h>
#include <stdint.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A staged batch (kernels/kda_types.h's dsp_kda_staged) as the kernels read it. */
typedef struct {
  int32_t num_seqs;
  int64_t tokens, chunks;
  const int32_t *cu;          /* [num_seqs + 1], or NULL: token n is sequence n's only one */
  const int32_t *slot;        /* [num_seqs]; < 0: padding, untouched */
  const uint8_t *has;         /* [num_seqs], or NULL: every sequence has a state */
  const int32_t *token_slot;  /* [tokens], or NULL */
  const int32_t *tok_seq;     /* [tokens]: each token's sequence */
  const int32_t *chunk_first; /* [num_seqs + 1]: each sequence's first chunk of 64 tokens */
  int32_t write_final;
} dsp_cu_kda_seqs;

/* Short conv + SiLU over D channels of width W (kda.h's dsp_kda_conv); the conv
 * state [slot][W-1][D] bf16 at state + slot * slot_stride. */
dsp_status dsp_cu_kda_conv(int32_t D, int32_t W, const dsp_cu_kda_seqs *s, const uint16_t *x, int64_t x_tok,
                           const float *weight, const float *bias, uint16_t *state, int64_t slot_stride, uint16_t *y,
                           int64_t y_tok, cudaStream_t st);

/* g [T][HV][K] fp32 (dsp_kda_gate); lower_bound < 0 selects that form, 0 softplus. */
dsp_status dsp_cu_kda_gate(int64_t T, int32_t HV, int32_t K, const uint16_t *f, int64_t f_tok, int64_t f_head,
                           const float *A_log, const float *dt_bias, float lower_bound, float *g, cudaStream_t st);

/* beta [T][HV] fp32 = sigmoid(b) from a strided bf16 view (dsp_kda_beta). */
dsp_status dsp_cu_kda_beta(int64_t T, int32_t HV, const uint16_t *b, int64_t b_tok, int64_t b_head, float *beta,
                           cudaStream_t st);

/* A strided bf16 view [T, heads, dim]: element (t, h, d) at data[t*tok + h*head + d]. */
typedef struct {
  const uint16_t *data;
  int64_t tok, head;
} dsp_cu_kda_in;

/* The recurrence (dsp_kda_recurrent): H q/k heads, HV value heads, dims K, V;
 * states [slot][HV][K][V] fp32; o written through (o_data, o_tok, o_head).
 * tile: value columns per block (1..V; <= 0: min(V, 64)); never changes a bit.
 * For K of 64 and 128 each thread keeps its state column in registers. */
dsp_status dsp_cu_kda_recurrent(int32_t H, int32_t HV, int32_t K, int32_t V, float scale, int32_t qk_raw,
                                const dsp_cu_kda_seqs *s, dsp_cu_kda_in q, dsp_cu_kda_in k, dsp_cu_kda_in v,
                                const float *g, const float *beta, uint16_t *o_data, int64_t o_tok, int64_t o_head,
                                float *state, int64_t slot_stride, int32_t tile, cudaStream_t st);

/* The chunked form over chunks [c_lo, c_hi) of the batch (a window; the op
 * runs the windows in order): scratch holds dsp_cu_kda_chunk_floats per chunk
 * of the window, carry 2 * HV*K*V floats (the state of a sequence that goes on
 * into the next window). K <= DSP_CU_KDA_CHUNK_MAX_K; tile: value columns per
 * block of the state pass (16, 32 or 64; <= 0: 32), never changing a bit. */
#define DSP_CU_KDA_CHUNK_MAX_K 128
size_t dsp_cu_kda_chunk_floats(int32_t HV, int32_t K, int32_t V);
dsp_status dsp_cu_kda_chunked(int32_t H, int32_t HV, int32_t K, int32_t V, float scale, int32_t qk_raw,
                              const dsp_cu_kda_seqs *s, int64_t c_lo, int64_t c_hi, int32_t window,
                              dsp_cu_kda_in q, dsp_cu_kda_in k, dsp_cu_kda_in v, const float *g, const float *beta,
                              uint16_t *o_data, int64_t o_tok, int64_t o_head, float *state, int64_t slot_stride,
                              float *scratch, float *carry, int32_t tile, cudaStream_t st);

/* The whole op for one token per sequence (cu NULL) in one kernel
 * (kda_decode.cu), with the bits of the kernels above in turn: conv + SiLU
 * (no bias), gate, beta, the recurrence (q, k L2-normalised), the gated norm.
 * Where dsp_cu_kda_decode_fits: H == HV, K == V of 64 or 128. */
typedef struct {
  int32_t H, K, W; /* heads, head dim (K == V), conv width */
  const uint16_t *qkv;
  int64_t qkv_tok;
  const float *conv_w; /* [2 H K + H K][W] */
  uint16_t *conv_state;
  int64_t conv_stride;
  const uint16_t *f;
  int64_t f_tok;
  const float *A_log, *dt_bias;
  float bound; /* < 0: the lower-bound gate, 0: softplus */
  const uint16_t *b;
  int64_t b_tok;
  const uint16_t *z;
  int64_t z_tok;
  const float *norm_w;
  float eps, scale;
  float *state;
  int64_t slot_stride;
  uint16_t *y;
  int64_t y_tok;
} dsp_cu_kda_decode_args;
int dsp_cu_kda_decode_fits(int32_t H, int32_t HV, int32_t K, int32_t V, int32_t W);
dsp_status dsp_cu_kda_decode(const dsp_cu_kda_seqs *s, const dsp_cu_kda_decode_args *a, cudaStream_t st);

/* The gated output RMSNorm (dsp_kda_gated_rmsnorm; y may be x). */
dsp_status dsp_cu_kda_norm(int64_t T, int32_t HV, int32_t V, dsp_cu_kda_in x, dsp_cu_kda_in z, const float *weight,
                           float eps, uint16_t *y_data, int64_t y_tok, int64_t y_head, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
