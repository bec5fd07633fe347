/* The KDA op for one token per sequence in one kernel (kda.h,
 * dsp_cu_kda_decode): block (sequence, head) does the head's conv + SiLU, its
 * gate and beta, the recurrence with the state in registers and the gated
 * norm of its output row. Every value is computed by the same expression, in
 * the same order, as the separate kernels (k_conv_decode, k_gate, k_beta,
 * k_recurrent_reg, k_norm), so the bits are theirs; only the launches and the
 * round trips of q, k, v, g, beta and o through global memory go. */
#include "kernels/cuda/kda.h"

#include <math.h>

#include "kernels/cuda/common/check.h"
#include "kernels/cuda/common/devmath.cuh"
#include "kernels/cuda/kda_dev.cuh"

/* K == V; NH = K / 64 parts of 64 state rows per value column (k_recurrent_reg's).
 * WC: the conv width when fixed at compile time (0: a.W), so that the windows
 * sit in registers and every channel's loads are issued before any is used. */
template <int K, int WC>
__global__ void __launch_bounds__(K *(K / 64)) k_decode(dsp_cu_kda_seqs s, dsp_cu_kda_decode_args a) {
  constexpr int NH = K / 64, KH = 64, V = K, NTH = V * NH;
  __shared__ float q[K], k[K], vv[V], eg[K], o[V], root[2], hand[V], ub[V], bsh, rn;
  const int32_t n = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, part = tid / V, j = tid % V;
  const int32_t slot = s.slot[n];
  if (slot < 0) return;
  const bool has = !s.has || s.has[n];
  const int64_t t = n;
  const int32_t H = a.H, W = WC > 0 ? WC : a.W, W1 = W - 1, ts = s.token_slot ? s.token_slot[t] : -1;
  const int64_t D = 2 * (int64_t)H * K + (int64_t)H * V, KV = (int64_t)K * V, r0 = (int64_t)part * KH;
  float *own = a.state + (int64_t)slot * a.slot_stride + h * KV;
  float S[KH]; /* loads first: they run under the conv and the gate */
#pragma unroll
  for (int32_t i = 0; i < KH; i++) S[i] = has ? own[(r0 + i) * V + j] : 0.0f;

  /* conv + SiLU of the head's q, k and v channels, and their new windows */
  uint16_t *cown = W1 > 0 ? a.conv_state + (int64_t)slot * a.conv_stride : NULL;
  constexpr int NE = 2 * K + V, ROUNDS = (NE + NTH - 1) / NTH, WB = WC > 0 ? WC : KDA_MAX_WIDTH;
  /* every input this block reads is requested before any is used: the
   * windows and weights of each channel, then the gate's and beta's inputs.
   * The gate's d runs from the last thread down, onto the threads with fewer
   * conv channels. */
  uint16_t win[ROUNDS][WB];
  float cw[ROUNDS][WB];
  int64_t ch[ROUNDS];
#pragma unroll
  for (int32_t r = 0; r < ROUNDS; r++) {
    const int32_t e = tid + r * NTH;
    ch[r] = e < K ? (int64_t)h * K + e : e < 2 * K ? (int64_t)H * K + h * K + (e - K) : 2 * (int64_t)H * K + h * V + (e - 2 * K);
    if (NE % NTH && e >= NE) continue;
#pragma unroll
    for (int32_t w = 0; w < W1; w++) win[r][w] = has ? cown[w * D + ch[r]] : (uint16_t)0;
    win[r][W1] = a.qkv[t * a.qkv_tok + ch[r]];
#pragma unroll
    for (int32_t w = 0; w < W; w++) cw[r][w] = a.conv_w[ch[r] * W + w];
  }
  const int32_t dg = NTH - 1 - tid;
  float gx = 0.0f;
  if (dg < K) {
    gx = dsp_dev_bf16_val(a.f[t * a.f_tok + (int64_t)h * K + dg]);
    if (a.dt_bias) gx = __fadd_rn(gx, a.dt_bias[(int64_t)h * K + dg]);
  }
  const float braw = tid == NTH - 1 ? dsp_dev_bf16_val(a.b[t * a.b_tok + h]) : 0.0f;
  const float alog = a.A_log ? a.A_log[h] : 0.0f;
  const uint16_t zr = tid < V ? a.z[t * a.z_tok + (int64_t)h * V + tid] : (uint16_t)0; /* the norm's gate */
#pragma unroll
  for (int32_t r = 0; r < ROUNDS; r++) {
    const int32_t e = tid + r * NTH;
    if (NE % NTH && e >= NE) continue;
    const float y = dsp_dev_round_bf16(kda_conv_silu(win[r], cw[r], W, 0.0f));
    if (e < K) q[e] = y;
    else if (e < 2 * K) k[e - K] = y;
    else vv[e - 2 * K] = y;
    if (ts >= 0)
#pragma unroll
      for (int32_t w = 0; w < W1; w++) a.conv_state[(int64_t)ts * a.conv_stride + w * D + ch[r]] = win[r][w + 1];
    if (s.write_final)
#pragma unroll
      for (int32_t w = 0; w < W1; w++) cown[w * D + ch[r]] = win[r][w + 1];
  }
  /* the gate (k_gate's form), exp of it, and beta */
  if (dg < K) eg[dg] = dsp_dev_expf(kda_gate_value(gx, a.A_log ? dsp_dev_expf(alog) : 1.0f, a.bound));
  if (tid == NTH - 1) bsh = 1.0f / (1.0f + dsp_dev_expf(-braw));
  __syncthreads();
  kda_qk_normalise(q, k, root, K, 0, a.scale);

  /* the recurrence (k_recurrent_reg's chains) */
  const float acc = kda_reg_token<KH, NH>(S, q, k, eg, part, j, hand, ub, bsh, vv[j]);
  if (part == NH - 1) o[j] = dsp_dev_round_bf16(acc);
  if (ts >= 0) {
    float *dst = a.state + (int64_t)ts * a.slot_stride + h * KV;
#pragma unroll
    for (int32_t i = 0; i < KH; i++) dst[(r0 + i) * V + j] = S[i];
  }
  if (s.write_final)
#pragma unroll
    for (int32_t i = 0; i < KH; i++) own[(r0 + i) * V + j] = S[i];
  __syncthreads();

  /* the gated norm (k_norm's: lane l sums d = l, l + 32, ..., then the butterfly) */
  if (tid < 32) {
    float ss = 0.0f;
    for (int32_t d = tid; d < V; d += 32) ss = __fadd_rn(ss, __fmul_rn(o[d], o[d]));
    ss = dsp_dev_warp_sum(ss);
    if (tid == 0) rn = 1.0f / sqrtf(__fadd_rn(ss / (float)V, a.eps));
  }
  __syncthreads();
  if (tid < V) {
    const float sg = 1.0f / (1.0f + dsp_dev_expf(-dsp_dev_bf16_val(zr)));
    a.y[t * a.y_tok + (int64_t)h * V + tid] =
        dsp_dev_bf16_bits(__fmul_rn(__fmul_rn(__fmul_rn(o[tid], rn), a.norm_w[tid]), sg));
  }
}

extern "C" int dsp_cu_kda_decode_fits(int32_t H, int32_t HV, int32_t K, int32_t V, int32_t W) {
  return H == HV && K == V && (K == 64 || K == 128) && W >= 1 && W <= KDA_MAX_WIDTH && H <= 65535;
}

extern "C" dsp_status dsp_cu_kda_decode(const dsp_cu_kda_seqs *s, const dsp_cu_kda_decode_args *a, cudaStream_t st) {
  if (!dsp_cu_kda_decode_fits(a->H, a->H, a->K, a->K, a->W) || s->cu)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda kda decode: H %d, K %d, width %d, %s", (int)a->H, (int)a->K, (int)a->W,
                    s->cu ? "several tokens per sequence" : "one token per sequence");
  if (s->num_seqs < 1) return DSP_OK;
  const dim3 grid((unsigned)s->num_seqs, (unsigned)a->H);
  if (a->K == 64 && a->W == 4) k_decode<64, 4><<<grid, 64, 0, st>>>(*s, *a);
  else if (a->K == 64) k_decode<64, 0><<<grid, 64, 0, st>>>(*s, *a);
  else if (a->W == 4) k_decode<128, 4><<<grid, 256, 0, st>>>(*s, *a);
  else k_decode<128, 0><<<grid, 256, 0, st>>>(*s, *a);
  DSP_CUDA_TRY_LAUNCH();
  return DSP_OK;
}
