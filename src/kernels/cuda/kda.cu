/* Kimi Delta Attention on the GPU (kda.h). */
#include "kernels/cuda/kda.h"

#include <math.h>

#include "kernels/cuda/common/check.h"
#include "kernels/cuda/common/devmath.cuh"
#include "kernels/cuda/kda_dev.cuh"

/* ---- short conv + SiLU --------------------------------------------------------------
 * The input at time tau of a sequence starting at t0: x's row when tau >= t0,
 * else conv-state row W-1 - (t0 - tau) (zeros without a state). */
__device__ __forceinline__ uint16_t conv_in(const uint16_t *x, int64_t x_tok, const uint16_t *old, int32_t D,
                                            int32_t W1, int64_t t0, int64_t tau, int32_t c, bool has) {
  if (tau >= t0) return x[tau * x_tok + c];
  return has ? old[(int64_t)(W1 - (t0 - tau)) * D + c] : (uint16_t)0;
}

/* Grid (token, channel block): the token's batch entries are read once per
 * thread and serve its CONV_CPT channels (no 64-bit index division). */
#define CONV_CPT 4
__global__ void k_conv_out(int32_t D, int32_t W, dsp_cu_kda_seqs s, const uint16_t *x, int64_t x_tok,
                           const float *weight, const float *bias, const uint16_t *state, int64_t slot_stride,
                           uint16_t *y, int64_t y_tok) {
  const int64_t t = blockIdx.x;
  const int32_t n = s.tok_seq[t], slot = s.slot[n], W1 = W - 1;
  if (slot < 0) return;
  int64_t t0, t1;
  kda_seq_span(s, n, t0, t1);
  const bool has = !s.has || s.has[n];
  const uint16_t *old = W1 > 0 ? state + (int64_t)slot * slot_stride : NULL;
  for (int32_t r = 0; r < CONV_CPT; r++) {
    const int32_t c = (blockIdx.y * CONV_CPT + r) * blockDim.x + threadIdx.x;
    if (c >= D) break;
    uint16_t win[KDA_MAX_WIDTH];
    for (int32_t j = 0; j < W1; j++) win[j] = conv_in(x, x_tok, old, D, W1, t0, t - W1 + j, c, has);
    win[W1] = x[t * x_tok + c];
    y[t * y_tok + c] = dsp_dev_bf16_bits(kda_conv_silu(win, weight + (int64_t)c * W, W, bias ? bias[c] : 0.0f));
  }
}

/* The same outputs for a width W known at compile time: a thread keeps one channel's weights and its window in
 * registers over CONV_TT consecutive tokens (k_conv_out reloads W inputs and W weights a token, its window in
 * local memory), rebuilding the window where the sequence changes. The same sums in the same order. */
#define CONV_TT 16
template <int W>
__global__ void k_conv_rows(int32_t D, dsp_cu_kda_seqs s, const uint16_t *x, int64_t x_tok, const float *weight,
                            const float *bias, const uint16_t *state, int64_t slot_stride, uint16_t *y, int64_t y_tok) {
  constexpr int W1 = W - 1;
  const int32_t c = (int32_t)(blockIdx.y * blockDim.x + threadIdx.x);
  if (c >= D) return;
  float w[W];
#pragma unroll
  for (int j = 0; j < W; j++) w[j] = weight[(int64_t)c * W + j];
  const float b = bias ? bias[c] : 0.0f;
  const int64_t tb = (int64_t)blockIdx.x * CONV_TT, te = tb + CONV_TT < s.tokens ? tb + CONV_TT : s.tokens;
  uint16_t win[W];
  int32_t prev = -1;
  for (int64_t t = tb; t < te; t++) {
    const int32_t n = s.tok_seq[t], slot = s.slot[n];
    if (slot < 0) {
      prev = -1;
      continue;
    }
    if (n != prev) { /* the window's older inputs from x or the sequence's conv state */
      int64_t t0, t1;
      kda_seq_span(s, n, t0, t1);
      const bool has = !s.has || s.has[n];
      const uint16_t *old = W1 > 0 ? state + (int64_t)slot * slot_stride : NULL;
#pragma unroll
      for (int j = 0; j < W1; j++) win[j] = conv_in(x, x_tok, old, D, W1, t0, t - W1 + j, c, has);
      prev = n;
    } else {
#pragma unroll
      for (int j = 0; j < W1; j++) win[j] = win[j + 1];
    }
    win[W1] = x[t * x_tok + c];
    y[t * y_tok + c] = dsp_dev_bf16_bits(kda_conv_silu(win, w, W, b)); /* W constant: inlined, win in registers */
  }
}

/* k_conv_rows for two adjacent channels a thread, where both sit in one aligned 4-byte word of x and of y (D, the
 * token strides and the bases even): one load and one store a token for the pair, the token's sequence, slot and
 * addresses once for both. The kernel is bound by its instruction issue (the silu's expf in double, as the contract
 * has it, for every element), so per-element bookkeeping is what there is to save. The same sums in the same order.
 * Kept apart from k_conv_rows: one template for both ran the prefill 0.4% slower (bench/RESULTS.md). */
template <int W>
__global__ void k_conv_pairs(int32_t D, dsp_cu_kda_seqs s, const uint16_t *x, int64_t x_tok, const float *weight,
                             const float *bias, const uint16_t *state, int64_t slot_stride, uint16_t *y, int64_t y_tok) {
  constexpr int W1 = W - 1;
  const int32_t c = 2 * (int32_t)(blockIdx.y * blockDim.x + threadIdx.x);
  if (c >= D) return;
  float w0[W], w1[W];
#pragma unroll
  for (int j = 0; j < W; j++) {
    w0[j] = weight[(int64_t)c * W + j];
    w1[j] = weight[(int64_t)(c + 1) * W + j];
  }
  const float b0 = bias ? bias[c] : 0.0f, b1 = bias ? bias[c + 1] : 0.0f;
  const int64_t tb = (int64_t)blockIdx.x * CONV_TT, te = tb + CONV_TT < s.tokens ? tb + CONV_TT : s.tokens;
  uint16_t v0[W], v1[W];
  int32_t prev = -1;
  for (int64_t t = tb; t < te; t++) {
    const int32_t n = s.tok_seq[t], slot = s.slot[n];
    if (slot < 0) {
      prev = -1;
      continue;
    }
    if (n != prev) { /* the window's older inputs from x or the sequence's conv state */
      int64_t t0, t1;
      kda_seq_span(s, n, t0, t1);
      const bool has = !s.has || s.has[n];
      const uint16_t *old = W1 > 0 ? state + (int64_t)slot * slot_stride : NULL;
#pragma unroll
      for (int j = 0; j < W1; j++) {
        v0[j] = conv_in(x, x_tok, old, D, W1, t0, t - W1 + j, c, has);
        v1[j] = conv_in(x, x_tok, old, D, W1, t0, t - W1 + j, c + 1, has);
      }
      prev = n;
    } else {
#pragma unroll
      for (int j = 0; j < W1; j++) {
        v0[j] = v0[j + 1];
        v1[j] = v1[j + 1];
      }
    }
    const uint32_t in = *reinterpret_cast<const uint32_t *>(x + t * x_tok + c);
    v0[W1] = (uint16_t)(in & 0xffffu);
    v1[W1] = (uint16_t)(in >> 16);
    const uint32_t lo = dsp_dev_bf16_bits(kda_conv_silu(v0, w0, W, b0)), hi = dsp_dev_bf16_bits(kda_conv_silu(v1, w1, W, b1));
    *reinterpret_cast<uint32_t *>(y + t * y_tok + c) = lo | hi << 16;
  }
}

/* One token per sequence (cu NULL: decode, or a verify of one token): output
 * and new window in one pass, thread per (sequence, channel); the sums are
 * k_conv_out's, the window k_conv_state's. */
__global__ void k_conv_decode(int32_t D, int32_t W, dsp_cu_kda_seqs s, const uint16_t *x, int64_t x_tok,
                              const float *weight, const float *bias, uint16_t *state, int64_t slot_stride,
                              uint16_t *y, int64_t y_tok) {
  const int32_t n = blockIdx.x, slot = s.slot[n], W1 = W - 1;
  if (slot < 0) return;
  const bool has = !s.has || s.has[n];
  const int64_t t = n;
  uint16_t *own = state + (int64_t)slot * slot_stride;
  const int32_t ts = s.token_slot ? s.token_slot[t] : -1;
  for (int32_t r = 0; r < CONV_CPT; r++) {
    const int32_t c = (blockIdx.y * CONV_CPT + r) * blockDim.x + threadIdx.x;
    if (c >= D) break;
    uint16_t win[KDA_MAX_WIDTH];
    for (int32_t j = 0; j < W1; j++) win[j] = has ? own[(int64_t)j * D + c] : (uint16_t)0;
    win[W1] = x[t * x_tok + c];
    y[t * y_tok + c] = dsp_dev_bf16_bits(kda_conv_silu(win, weight + (int64_t)c * W, W, bias ? bias[c] : 0.0f));
    if (ts >= 0)
      for (int32_t j = 0; j < W1; j++) state[(int64_t)ts * slot_stride + (int64_t)j * D + c] = win[j + 1];
    if (s.write_final)
      for (int32_t j = 0; j < W1; j++) own[(int64_t)j * D + c] = win[j + 1];
  }
}

/* The window after token t (inputs t-W1+1 .. t, oldest first) into dst. Row r
 * reads input t-W1+1+r: when dst is the sequence's own slot, that is old row
 * r + (t - t0 + 1) > r, not yet overwritten (rows go in ascending order). */
__device__ __forceinline__ void conv_put(uint16_t *dst, const uint16_t *x, int64_t x_tok, const uint16_t *old,
                                         int32_t D, int32_t W1, int64_t t0, int64_t t, int32_t c, bool has) {
  for (int32_t r = 0; r < W1; r++) dst[(int64_t)r * D + c] = conv_in(x, x_tok, old, D, W1, t0, t - W1 + 1 + r, c, has);
}

/* One thread per (sequence, channel), after k_conv_out has read the old states. */
__global__ void k_conv_state(int32_t D, int32_t W, dsp_cu_kda_seqs s, const uint16_t *x, int64_t x_tok,
                             uint16_t *state, int64_t slot_stride) {
  const int32_t n = blockIdx.y, c = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x), W1 = W - 1;
  if (c >= D) return;
  const int32_t slot = s.slot[n];
  if (slot < 0) return;
  int64_t t0, t1;
  kda_seq_span(s, n, t0, t1);
  const bool has = !s.has || s.has[n];
  uint16_t *own = state + (int64_t)slot * slot_stride;
  if (s.token_slot)
    for (int64_t t = t0; t < t1; t++)
      if (s.token_slot[t] >= 0)
        conv_put(state + (int64_t)s.token_slot[t] * slot_stride, x, x_tok, own, D, W1, t0, t, c, has);
  if (s.write_final) conv_put(own, x, x_tok, own, D, W1, t0, t1 - 1, c, has);
}

extern "C" dsp_status dsp_cu_kda_conv(int32_t D, int32_t W, const dsp_cu_kda_seqs *s, const uint16_t *x,
                                      int64_t x_tok, const float *weight, const float *bias, uint16_t *state,
                                      int64_t slot_stride, uint16_t *y, int64_t y_tok, cudaStream_t st) {
  if (W < 1 || W > KDA_MAX_WIDTH) return dsp_fail(DSP_ERR_SHAPE, "cuda kda conv: width %d", (int)W);
  const unsigned cblocks = (unsigned)((D + 256 * CONV_CPT - 1) / (256 * CONV_CPT));
  if (!s->cu && s->num_seqs > 0) { /* one token per sequence */
    k_conv_decode<<<dim3((unsigned)s->num_seqs, cblocks), 256, 0, st>>>(D, W, *s, x, x_tok, weight, bias, state,
                                                                       slot_stride, y, y_tok);
    DSP_CUDA_TRY_LAUNCH();
    return DSP_OK;
  }
  if (s->tokens > 0 && W == 4) { /* Kimi-Linear's width */
    const bool pairs = D % 2 == 0 && x_tok % 2 == 0 && y_tok % 2 == 0 && (uintptr_t)x % 4 == 0 && (uintptr_t)y % 4 == 0;
    const unsigned rb = (unsigned)((D + (pairs ? 511 : 255)) / (pairs ? 512 : 256));
    const dim3 grid((unsigned)((s->tokens + CONV_TT - 1) / CONV_TT), rb);
    if (rb > 65535 || (s->tokens + CONV_TT - 1) / CONV_TT > INT32_MAX)
      return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda kda conv: %d channels of %lld tokens", (int)D, (long long)s->tokens);
    if (pairs)
      k_conv_pairs<4><<<grid, 256, 0, st>>>(D, *s, x, x_tok, weight, bias, state, slot_stride, y, y_tok);
    else
      k_conv_rows<4><<<grid, 256, 0, st>>>(D, *s, x, x_tok, weight, bias, state, slot_stride, y, y_tok);
    DSP_CUDA_TRY_LAUNCH();
  } else if (s->tokens > 0) {
    if (cblocks > 65535) return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda kda conv: %d channels", (int)D);
    k_conv_out<<<dim3((unsigned)s->tokens, cblocks), 256, 0, st>>>(D, W, *s, x, x_tok, weight, bias, state, slot_stride,
                                                                  y, y_tok);
    DSP_CUDA_TRY_LAUNCH();
  }
  if (W > 1 && s->num_seqs > 0) {
    if (s->num_seqs > 65535) return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda kda conv: %d sequences", (int)s->num_seqs);
    k_conv_state<<<dim3(dsp_dev_blocks_for(D, 128), (unsigned)s->num_seqs), 128, 0, st>>>(D, W, *s, x, x_tok, state,
                                                                                  slot_stride);
    DSP_CUDA_TRY_LAUNCH();
  }
  return DSP_OK;
}

/* ---- gate and beta -----------------------------------------------------------------
 * A thread takes one of the HV*K values over GATE_TT consecutive tokens: the head's exp(A_log), the value's
 * dt_bias, its index arithmetic and its addresses once, not per element (the kernel is bound by its instruction
 * issue, the contract's expf and log1pf being in double), and the inputs all requested before the first output.
 * Each element's operations are those of kda_gate_value, in the same order. */
#define GATE_TT 8
__global__ void k_gate(int64_t T, int32_t HV, int32_t K, const uint16_t *f, int64_t f_tok, int64_t f_head,
                       const float *A_log, const float *dt_bias, float bound, float *g) {
  const int32_t e = (int32_t)(blockIdx.y * blockDim.x + threadIdx.x);
  if (e >= HV * K) return;
  const int32_t h = e / K, d = e - h * K;
  const int64_t tb = (int64_t)blockIdx.x * GATE_TT, row = (int64_t)HV * K;
  const int32_t nt = (int32_t)(tb + GATE_TT < T ? GATE_TT : T - tb);
  const uint16_t *fp = f + tb * f_tok + h * f_head + d;
  uint16_t in[GATE_TT];
#pragma unroll
  for (int i = 0; i < GATE_TT; i++) in[i] = i < nt ? fp[i * f_tok] : (uint16_t)0;
  const float a = A_log ? dsp_dev_expf(A_log[h]) : 1.0f, b = dt_bias ? dt_bias[e] : 0.0f;
  float *gp = g + tb * row + e;
#pragma unroll
  for (int i = 0; i < GATE_TT; i++) {
    if (i >= nt) break;
    float x = dsp_dev_bf16_val(in[i]);
    if (dt_bias) x = __fadd_rn(x, b);
    gp[i * row] = kda_gate_value(x, a, bound);
  }
}

extern "C" dsp_status dsp_cu_kda_gate(int64_t T, int32_t HV, int32_t K, const uint16_t *f, int64_t f_tok,
                                      int64_t f_head, const float *A_log, const float *dt_bias, float lower_bound,
                                      float *g, cudaStream_t st) {
  if (T * HV * K == 0) return DSP_OK;
  const unsigned gb = (unsigned)(((int64_t)HV * K + 255) / 256);
  const int64_t tblocks = (T + GATE_TT - 1) / GATE_TT;
  if (tblocks > INT32_MAX || gb > 65535) return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda kda gate: %lld tokens of %d", (long long)T, (int)(HV * K));
  k_gate<<<dim3((unsigned)tblocks, gb), 256, 0, st>>>(T, HV, K, f, f_tok, f_head, A_log, dt_bias, lower_bound, g);
  DSP_CUDA_TRY_LAUNCH();
  return DSP_OK;
}

__global__ void k_beta(int64_t T, int32_t HV, const uint16_t *b, int64_t b_tok, int64_t b_head, float *beta) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= T * HV) return;
  const int64_t t = i / HV, h = i % HV;
  beta[i] = 1.0f / (1.0f + dsp_dev_expf(-dsp_dev_bf16_val(b[t * b_tok + h * b_head])));
}

extern "C" dsp_status dsp_cu_kda_beta(int64_t T, int32_t HV, const uint16_t *b, int64_t b_tok, int64_t b_head,
                                      float *beta, cudaStream_t st) {
  if (T * HV == 0) return DSP_OK;
  k_beta<<<dsp_dev_blocks_for(T * HV, 256), 256, 0, st>>>(T, HV, b, b_tok, b_head, beta);
  DSP_CUDA_TRY_LAUNCH();
  return DSP_OK;
}

/* ---- the recurrence ------------------------------------------------------------------
 * Block (sequence, value head, tile of value columns); thread j owns column
 * v0 + j of the state, kept in shared memory S[K][tile] (column j's values in
 * bank j). Per token: q, k and exp(g) into shared memory, the two sums of
 * squares by one thread each (d in order), then each column's k^T S and q^T S
 * in d order, as the CPU. */
__device__ __forceinline__ int32_t hv_of(int32_t hv, int32_t HV, int32_t H) { return hv / (HV / H); }

__global__ void k_recurrent(kda_rec_args a) {
  extern __shared__ float sm[];
  const int32_t n = blockIdx.x, hv = blockIdx.y, j = threadIdx.x, tile = a.tile, K = a.K, V = a.V;
  const int32_t v = (int32_t)blockIdx.z * tile + j, h = hv / (a.HV / a.H);
  const bool active = j < tile && v < V;
  const int32_t slot = a.s.slot[n];
  if (slot < 0) return; /* padding: the whole block leaves */
  int64_t t0, t1;
  kda_seq_span(a.s, n, t0, t1);
  const bool has = !a.s.has || a.s.has[n];
  float *S = sm, *q = S + (size_t)K * tile, *k = q + K, *eg = k + K, *root = eg + K;
  const int64_t KV = (int64_t)K * V, head_off = (int64_t)hv * KV;
  float *own = a.state + (int64_t)slot * a.slot_stride + head_off;
  if (j < tile) /* threads past the tile would write into the next row */
    for (int32_t i = 0; i < K; i++) S[i * tile + j] = active && has ? own[(int64_t)i * V + v] : 0.0f;
  for (int64_t t = t0; t < t1; t++) {
    __syncthreads(); /* the previous token's q, k and exp(g) are no longer read */
    const uint16_t *qr = a.q.data + t * a.q.tok + h * a.q.head, *kr = a.k.data + t * a.k.tok + h * a.k.head;
    const float *gr = a.g + (t * a.HV + hv) * K;
    for (int32_t i = j; i < K; i += blockDim.x) {
      q[i] = dsp_dev_bf16_val(qr[i]);
      k[i] = dsp_dev_bf16_val(kr[i]);
      eg[i] = dsp_dev_expf(gr[i]);
    }
    __syncthreads();
    kda_qk_normalise(q, k, root, K, a.qk_raw, a.scale);
    if (!active) continue;
    float acc = 0.0f;
    for (int32_t i = 0; i < K; i++) { /* decay, then k^T S of the decayed state */
      const float x = __fmul_rn(S[i * tile + j], eg[i]);
      S[i * tile + j] = x;
      acc = __fadd_rn(acc, __fmul_rn(k[i], x));
    }
    const float u = __fmul_rn(a.beta[t * a.HV + hv], __fsub_rn(dsp_dev_bf16_val(a.v.data[t * a.v.tok + hv * a.v.head + v]), acc));
    acc = 0.0f;
    for (int32_t i = 0; i < K; i++) { /* rank-1 update, then q^T S of the updated state */
      const float x = __fadd_rn(S[i * tile + j], __fmul_rn(k[i], u));
      S[i * tile + j] = x;
      acc = __fadd_rn(acc, __fmul_rn(q[i], x));
    }
    a.o[t * a.o_tok + hv * a.o_head + v] = dsp_dev_bf16_bits(acc);
    if (a.s.token_slot && a.s.token_slot[t] >= 0) {
      float *dst = a.state + (int64_t)a.s.token_slot[t] * a.slot_stride + head_off;
      for (int32_t i = 0; i < K; i++) dst[(int64_t)i * V + v] = S[i * tile + j];
    }
  }
  if (a.s.write_final && active)
    for (int32_t i = 0; i < K; i++) own[(int64_t)i * V + v] = S[i * tile + j];
}

/* The same recurrence with the state in registers: NH threads per value
 * column, part p holding rows p*KH .. p*KH + KH-1, so the state is read and
 * written once per call with every load of a column in flight at once. Each
 * sum over d is one chain in d order, as k_recurrent's: part 0 sums its rows,
 * part 1 goes on from part 0's partial sum (handed over in shared memory). */
template <int KH, int NH, int VC>
__global__ void __launch_bounds__(64 * NH) k_recurrent_reg(kda_rec_args a) {
  constexpr int K = KH * NH;
  __shared__ float q[K], k[K], eg[K], root[2], hand[64], ub[64];
  const int32_t tw = (a.tile + 31) / 32 * 32; /* threads per part */
  const int32_t V = VC > 0 ? VC : a.V; /* a fixed V makes the state's row offsets immediates */
  const int32_t part = threadIdx.x / tw, j = threadIdx.x % tw, tile = a.tile;
  const int32_t v = (int32_t)blockIdx.z * tile + j, h = hv_of(blockIdx.y, a.HV, a.H), hv = blockIdx.y;
  const bool active = j < tile && v < V;
  const int32_t slot = a.s.slot[blockIdx.x];
  if (slot < 0) return;
  int64_t t0, t1;
  kda_seq_span(a.s, blockIdx.x, t0, t1);
  const bool has = !a.s.has || a.s.has[blockIdx.x];
  const int64_t head_off = (int64_t)hv * K * V, r0 = (int64_t)part * KH;
  float *own = a.state + (int64_t)slot * a.slot_stride + head_off;
  float S[KH];
#pragma unroll
  for (int32_t i = 0; i < KH; i++) S[i] = active && has ? own[(r0 + i) * V + v] : 0.0f;
  for (int64_t t = t0; t < t1; t++) {
    __syncthreads();
    const uint16_t *qr = a.q.data + t * a.q.tok + h * a.q.head, *kr = a.k.data + t * a.k.tok + h * a.k.head;
    const float *gr = a.g + (t * a.HV + hv) * K;
    for (int32_t i = threadIdx.x; i < K; i += blockDim.x) {
      q[i] = dsp_dev_bf16_val(qr[i]);
      k[i] = dsp_dev_bf16_val(kr[i]);
      eg[i] = dsp_dev_expf(gr[i]);
    }
    __syncthreads();
    kda_qk_normalise(q, k, root, K, a.qk_raw, a.scale);
    const bool last = part == NH - 1 && active;
    const float acc = kda_reg_token<KH, NH>(S, q, k, eg, part, j, hand, ub, last ? a.beta[t * a.HV + hv] : 0.0f,
                                            last ? dsp_dev_bf16_val(a.v.data[t * a.v.tok + hv * a.v.head + v]) : 0.0f);
    if (part == NH - 1 && active) a.o[t * a.o_tok + hv * a.o_head + v] = dsp_dev_bf16_bits(acc);
    if (active && a.s.token_slot && a.s.token_slot[t] >= 0) {
      float *dst = a.state + (int64_t)a.s.token_slot[t] * a.slot_stride + head_off;
#pragma unroll
      for (int32_t i = 0; i < KH; i++) dst[(r0 + i) * V + v] = S[i];
    }
  }
  if (a.s.write_final && active)
#pragma unroll
    for (int32_t i = 0; i < KH; i++) own[(r0 + i) * V + v] = S[i];
}

#define REC_SMEM_MAX (200 * 1024)

static size_t rec_smem(int32_t K, int32_t tile) { return ((size_t)K * tile + 3 * (size_t)K + 2) * sizeof(float); }

extern "C" dsp_status dsp_cu_kda_recurrent(int32_t H, int32_t HV, int32_t K, int32_t V, float scale, int32_t qk_raw,
                                           const dsp_cu_kda_seqs *s, dsp_cu_kda_in q, dsp_cu_kda_in k,
                                           dsp_cu_kda_in v, const float *g, const float *beta, uint16_t *o_data,
                                           int64_t o_tok, int64_t o_head, float *state, int64_t slot_stride,
                                           int32_t tile, cudaStream_t st) {
  if (s->num_seqs < 1) return DSP_OK;
  if (tile <= 0) tile = V < 64 ? V : 64;
  if (tile > V) tile = V;
  const bool reg = (K == 64 || K == 128) && tile <= 64; /* registers: 64 rows of a column per thread */
  if (!reg) {
    while (tile > 1 && rec_smem(K, tile) > REC_SMEM_MAX) tile /= 2;
    if (tile > 1024) tile = 1024;
  }
  const kda_rec_args a = {H, HV, K, V, tile, qk_raw, scale, *s, q, k, v, g, beta, o_data, o_tok, o_head, state, slot_stride};
  const dim3 grid((unsigned)s->num_seqs, (unsigned)HV, (unsigned)((V + tile - 1) / tile));
  if (reg) {
    const unsigned tw = (unsigned)((tile + 31) / 32 * 32);
    if (K == 64 && V == 64) k_recurrent_reg<64, 1, 64><<<grid, tw, 0, st>>>(a);
    else if (K == 64) k_recurrent_reg<64, 1, 0><<<grid, tw, 0, st>>>(a);
    else if (V == 128) k_recurrent_reg<64, 2, 128><<<grid, 2 * tw, 0, st>>>(a);
    else k_recurrent_reg<64, 2, 0><<<grid, 2 * tw, 0, st>>>(a);
    DSP_CUDA_TRY_LAUNCH();
    return DSP_OK;
  }
  const size_t smem = rec_smem(K, tile);
  /* per call: the attribute belongs to the current device */
  DSP_CUDA_TRY(cudaFuncSetAttribute(k_recurrent, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  k_recurrent<<<grid, (unsigned)((tile + 31) / 32 * 32), smem, st>>>(a);
  DSP_CUDA_TRY_LAUNCH();
  return DSP_OK;
}

/* ---- gated output RMSNorm: one warp per (token, value head) row --------------------
 * Lane l takes d = l, l + 32, ... in that order for its partial sum, then the butterfly. With NV = V / 32 known
 * (NV > 0) a lane requests all its x and z values before the sum and keeps x in registers for the outputs; NV 0
 * loops over any V. The same operations in the same order either way. */
template <int NV>
__global__ void k_norm(int64_t T, int32_t HV, int32_t V, dsp_cu_kda_in x, dsp_cu_kda_in z, const float *w, float eps,
                       uint16_t *y, int64_t y_tok, int64_t y_head) {
  const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= T * HV) return;
  const int64_t t = row / HV, h = row % HV;
  const uint16_t *xr = x.data + t * x.tok + h * x.head, *zr = z.data + t * z.tok + h * z.head;
  uint16_t *yr = y + t * y_tok + h * y_head;
  float ss = 0.0f;
  if constexpr (NV > 0) {
    float xv[NV];
    uint16_t zv[NV];
#pragma unroll
    for (int i = 0; i < NV; i++) {
      xv[i] = dsp_dev_bf16_val(xr[lane + 32 * i]);
      zv[i] = zr[lane + 32 * i];
    }
#pragma unroll
    for (int i = 0; i < NV; i++) ss = __fadd_rn(ss, __fmul_rn(xv[i], xv[i]));
    ss = dsp_dev_warp_sum(ss); /* every lane has read its x before any lane writes y (y may be x) */
    const float r = 1.0f / sqrtf(__fadd_rn(ss / (float)V, eps));
#pragma unroll
    for (int i = 0; i < NV; i++) {
      const int d = lane + 32 * i;
      const float sg = 1.0f / (1.0f + dsp_dev_expf(-dsp_dev_bf16_val(zv[i])));
      yr[d] = dsp_dev_bf16_bits(__fmul_rn(__fmul_rn(__fmul_rn(xv[i], r), w[d]), sg));
    }
  } else {
    for (int32_t d = lane; d < V; d += 32) {
      const float e = dsp_dev_bf16_val(xr[d]);
      ss = __fadd_rn(ss, __fmul_rn(e, e));
    }
    ss = dsp_dev_warp_sum(ss); /* every lane has read its x before any lane writes y (y may be x) */
    const float r = 1.0f / sqrtf(__fadd_rn(ss / (float)V, eps));
    for (int32_t d = lane; d < V; d += 32) {
      const float sg = 1.0f / (1.0f + dsp_dev_expf(-dsp_dev_bf16_val(zr[d])));
      yr[d] = dsp_dev_bf16_bits(__fmul_rn(__fmul_rn(__fmul_rn(dsp_dev_bf16_val(xr[d]), r), w[d]), sg));
    }
  }
}

extern "C" dsp_status dsp_cu_kda_norm(int64_t T, int32_t HV, int32_t V, dsp_cu_kda_in x, dsp_cu_kda_in z,
                                      const float *weight, float eps, uint16_t *y_data, int64_t y_tok, int64_t y_head,
                                      cudaStream_t st) {
  if (T * HV == 0) return DSP_OK;
  const dim3 grid = dsp_dev_blocks_for(T * HV, 8);
  if (V == 64) k_norm<2><<<grid, 256, 0, st>>>(T, HV, V, x, z, weight, eps, y_data, y_tok, y_head);
  else if (V == 128) k_norm<4><<<grid, 256, 0, st>>>(T, HV, V, x, z, weight, eps, y_data, y_tok, y_head);
  else k_norm<0><<<grid, 256, 0, st>>>(T, HV, V, x, z, weight, eps, y_data, y_tok, y_head);
  DSP_CUDA_TRY_LAUNCH();
  return DSP_OK;
}
