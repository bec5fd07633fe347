/* Device pieces shared by the KDA kernels (kda.cu, kda_decode.cu,
 * kda_chunked.cu), so the separate and the fused kernels compute each value by
 * one expression: the batch's spans, the gate, the conv window, the q/k root
 * and one token of the register-state recurrence. */
#ifndef DSP_KERNELS_CUDA_KDA_DEV_CUH
#define DSP_KERNELS_CUDA_KDA_DEV_CUH
#include <math.h>

#include "core/log1pf.h"
#include "kernels/cuda/common/devmath.cuh"
#include "kernels/cuda/common/expf.cuh"
#include "kernels/cuda/kda.h"

#define KDA_MAX_WIDTH 8 /* kernels/kda_types.h's DSP_KDA_MAX_WIDTH */

/* The recurrence's arguments (one layer's call). */
struct kda_rec_args {
  int32_t H, HV, K, V, tile, qk_raw;
  float scale;
  dsp_cu_kda_seqs s;
  dsp_cu_kda_in q, k, v;
  const float *g, *beta;
  uint16_t *o;
  int64_t o_tok, o_head;
  float *state;
  int64_t slot_stride;
};

__device__ __forceinline__ void kda_seq_span(const dsp_cu_kda_seqs &s, int32_t n, int64_t &t0, int64_t &t1) {
  t0 = s.cu ? s.cu[n] : n;
  t1 = s.cu ? s.cu[n + 1] : n + 1;
}

/* g from the bf16 input x (dt_bias already added): each form on its own,
 * never the sigmoid of a softplus; a = exp(A_log). */
__device__ __forceinline__ float kda_gate_value(float x, float a, float bound) {
  const float sp = x > 20.0f ? x : dsp_log1pf(dsp_dev_expf(x));
  return bound < 0.0f ? __fmul_rn(bound, 1.0f / (1.0f + dsp_dev_expf(-__fmul_rn(a, x)))) : -__fmul_rn(a, sp);
}

/* silu(conv) of one channel's window win[0..W-1] (oldest first), weights w[W],
 * before the bf16 rounding: bias, then w[j] win[j] in j order. */
__device__ __forceinline__ float kda_conv_silu(const uint16_t *win, const float *w, int32_t W, float bias) {
  float acc = bias;
  for (int32_t j = 0; j < W; j++) acc = __fadd_rn(acc, __fmul_rn(w[j], dsp_dev_bf16_val(win[j])));
  return acc / (1.0f + dsp_dev_expf(-acc));
}

/* sqrt(sum x^2 + 1e-6) with the sum in d order, one thread. */
__device__ __forceinline__ float kda_l2_root(const float *x, int32_t K) {
  float ss = 0.0f;
  for (int32_t i = 0; i < K; i++) ss = __fadd_rn(ss, __fmul_rn(x[i], x[i]));
  return sqrtf(__fadd_rn(ss, 1e-6f));
}

/* q and k (K values each, shared memory, widened from bf16) L2-normalised in
 * place, q then times scale; raw: scale q only. Sums of squares in d order,
 * q's by thread 0 and k's by thread 32 (or thread 0 in a block of one warp).
 * Every thread of the block calls it; it ends with a barrier. */
__device__ __forceinline__ void kda_qk_normalise(float *q, float *k, float *root, int32_t K, int32_t raw, float scale) {
  if (!raw && (threadIdx.x == 0 || threadIdx.x == 32)) {
    if (threadIdx.x == 0) root[0] = kda_l2_root(q, K);
    if (threadIdx.x == 32 || blockDim.x <= 32) root[1] = kda_l2_root(k, K);
  }
  __syncthreads();
  for (int32_t i = threadIdx.x; i < K; i += blockDim.x) {
    q[i] = raw ? __fmul_rn(q[i], scale) : __fmul_rn(q[i] / root[0], scale);
    k[i] = raw ? k[i] : k[i] / root[1]; /* (x / r) * 1.0f is x / r */
  }
  __syncthreads();
}

/* sum_d x[d] S[d] over a column of NH parts in d order: part 0 sums its KH
 * rows, part 1 goes on from part 0's partial sum (handed over in hand[j]);
 * the result is valid on the last part. Every thread calls it. */
template <int KH, int NH>
__device__ __forceinline__ float kda_reg_dot(const float *x, const float (&S)[KH], int32_t part, int32_t j,
                                             float *hand) {
  float acc = 0.0f;
  if (part == 0) {
#pragma unroll
    for (int32_t i = 0; i < KH; i++) acc = __fadd_rn(acc, __fmul_rn(x[i], S[i]));
  }
  if (NH > 1) {
    if (part == 0) hand[j] = acc;
    __syncthreads();
    if (part == 1) {
      acc = hand[j];
#pragma unroll
      for (int32_t i = 0; i < KH; i++) acc = __fadd_rn(acc, __fmul_rn(x[KH + i], S[i]));
    }
  }
  return acc;
}

/* One token on a register state column: part p (of NH, 1 or 2) holds rows
 * p*KH .. p*KH + KH-1 of column j. Decay, a = k^T S, u = beta (v - a) from
 * the last part (through ub[j]), S += k u, then o = q^T S, valid on the last
 * part. Every thread of the block calls it. */
template <int KH, int NH>
__device__ __forceinline__ float kda_reg_token(float (&S)[KH], const float *q, const float *k, const float *eg,
                                               int32_t part, int32_t j, float *hand, float *ub, float beta, float v) {
  const int32_t r0 = part * KH;
#pragma unroll
  for (int32_t i = 0; i < KH; i++) S[i] = __fmul_rn(S[i], eg[r0 + i]);
  const float a = kda_reg_dot<KH, NH>(k, S, part, j, hand);
  float u = part == NH - 1 ? __fmul_rn(beta, __fsub_rn(v, a)) : 0.0f;
  if (NH > 1) {
    if (part == NH - 1) ub[j] = u;
    __syncthreads();
    u = ub[j];
  }
#pragma unroll
  for (int32_t i = 0; i < KH; i++) S[i] = __fadd_rn(S[i], __fmul_rn(k[r0 + i], u));
  if (NH > 1) __syncthreads(); /* every part has read ub and hand before hand is reused */
  return kda_reg_dot<KH, NH>(q, S, part, j, hand);
}

#endif
