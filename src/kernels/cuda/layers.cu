/* The models' layers on the GPU (layers.h). */
#include "kernels/cuda/layers.h"

#include <math.h>

#include "core/philox.h"
#include "kernels/cuda/common/devmath.cuh"
#include "kernels/cuda/common/launch.cuh"
#include "kernels/cuda/common/sync.cuh"

__device__ __forceinline__ uint16_t *at(const dsp_cu_view &v, int64_t r, int64_t h, int64_t d) {
  return (uint16_t *)v.data + r * v.s_row + h * v.s_head + d * v.s_dim;
}

/* Row copies (embed, gather, scatter): a thread issues all its loads before its stores. One load and store per
 * value in a loop waited on each load in turn (the store might alias the next load), about 13 us for a row of
 * 4096 on an H100. Contiguous 16-byte aligned rows move as uint4, up to COPY_HOLD per thread at once. */
#define COPY_HOLD 4
__device__ __forceinline__ void copy_row(uint16_t *dst, int64_t ds, const uint16_t *src, int64_t ss, int64_t n) {
  const int64_t step = blockDim.x;
  if (ds == 1 && ss == 1 && n % 8 == 0 && ((uintptr_t)dst & 15u) == 0 && ((uintptr_t)src & 15u) == 0) {
    const uint4 *s4 = (const uint4 *)src;
    uint4 *d4 = (uint4 *)dst, v[COPY_HOLD];
    for (int64_t c0 = threadIdx.x; c0 < n / 8; c0 += COPY_HOLD * step) {
#pragma unroll
      for (int j = 0; j < COPY_HOLD; j++)
        if (c0 + j * step < n / 8) v[j] = s4[c0 + j * step];
#pragma unroll
      for (int j = 0; j < COPY_HOLD; j++)
        if (c0 + j * step < n / 8) d4[c0 + j * step] = v[j];
    }
    return;
  }
  uint16_t v[4 * COPY_HOLD];
  for (int64_t c0 = threadIdx.x; c0 < n; c0 += 4 * COPY_HOLD * step) {
#pragma unroll
    for (int j = 0; j < 4 * COPY_HOLD; j++)
      if (c0 + j * step < n) v[j] = src[(c0 + j * step) * ss];
#pragma unroll
    for (int j = 0; j < 4 * COPY_HOLD; j++)
      if (c0 + j * step < n) dst[(c0 + j * step) * ds] = v[j];
  }
}

__global__ void k_embed(dsp_cu_view table, const int32_t *ids, dsp_cu_view out) {
  dsp_dev_launch_dependents();
  dsp_dev_grid_wait();
  const int64_t t = blockIdx.x, id = ids[t];
  copy_row(at(out, t, 0, 0), out.s_dim, at(table, id, 0, 0), table.s_dim, out.dim);
}

extern "C" void dsp_cu_embed(const dsp_cu_view *table, const int32_t *ids, int64_t t, const dsp_cu_view *out,
                             cudaStream_t s) {
  if (t > 0) dsp_launch(k_embed, dim3((unsigned)t), dim3(256), 0, s, *table, ids, *out);
}

/* Rows of D < RMS_WIDE: one warp per row (of rows x heads), each lane
 * holding its values in registers (up to RMS_LANE_HOLD; wider rows loop).
 * Wider rows (the hidden states): one block of RMS_THREADS per row, which
 * stages the row and the weight in shared memory with 16-byte loads (rows up
 * to RMS_STAGE_MAX) so that a decode step's one row costs a few memory
 * latencies, not one per value. The choice depends on D alone, so a row's
 * bits do not depend on how many rows the call has. ADD first makes x =
 * bf16(x + y) (the residual add) and normalizes the sum. */
#define RMS_WIDE 1024
#define RMS_THREADS 256
#define RMS_LANE_HOLD 8
#define RMS_STAGE_MAX 12288 /* x and w staged: 4 D bytes of shared memory, within the default 48 KB */

/* Lane `lane` of a warp holds x at d = lane + 32 j (the residual sum with ADD, x written back); returns its
 * sum of squares in j order. */
template <int HOLD, int ADD>
__device__ __forceinline__ float rms_load(const dsp_cu_view &x, const dsp_cu_view &y, int64_t r, int64_t h, int lane,
                                          float v[HOLD]) {
  const int64_t D = x.dim;
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < HOLD; j++) {
    const int64_t d = lane + (int64_t)32 * j;
    v[j] = 0.0f;
    if (d < D) {
      v[j] = dsp_dev_bf16_val(*at(x, r, h, d));
      if (ADD) v[j] = dsp_dev_round_bf16(__fadd_rn(v[j], dsp_dev_bf16_val(*at(y, r, 0, d))));
    }
  }
#pragma unroll
  for (int j = 0; j < HOLD; j++) {
    const int64_t d = lane + (int64_t)32 * j;
    if (d < D) {
      if (ADD) *at(x, r, h, d) = dsp_dev_bf16_bits(v[j]);
      ss = __fmaf_rn(v[j], v[j], ss);
    }
  }
  return ss;
}

__device__ __forceinline__ float rms_inv(float ss, int64_t D, float eps) {
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)D), eps)));
}

__device__ __forceinline__ uint16_t rms_out(float x, float inv, uint16_t w) {
  return dsp_dev_bf16_bits(__fmul_rn(dsp_dev_bf16_val(w), dsp_dev_round_bf16(__fmul_rn(x, inv))));
}

/* One value of x, the residual sum with ADD (written back). */
template <int ADD>
__device__ __forceinline__ uint16_t rms_take(const dsp_cu_view &x, const dsp_cu_view &y, int64_t r, int64_t h,
                                             int64_t d) {
  uint16_t v = *at(x, r, h, d);
  if (ADD) {
    v = dsp_dev_bf16_bits(__fadd_rn(dsp_dev_bf16_val(v), dsp_dev_bf16_val(*at(y, r, 0, d))));
    *at(x, r, h, d) = v;
  }
  return v;
}

/* Lane l sums d = l, l + 32, ... in order, then the butterfly. */
template <int ADD>
__global__ void k_rmsnorm(dsp_cu_view x, dsp_cu_view y, const uint16_t *w, float eps, dsp_cu_view out) {
  dsp_dev_launch_dependents();
  dsp_dev_grid_wait();
  const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= x.rows * x.heads) return;
  const int lane = threadIdx.x % 32;
  const int64_t r = row / x.heads, h = row % x.heads, D = x.dim;
  if (D <= 32 * RMS_LANE_HOLD) {
    float v[RMS_LANE_HOLD];
    const float inv = rms_inv(dsp_dev_warp_sum(rms_load<RMS_LANE_HOLD, ADD>(x, y, r, h, lane, v)), D, eps);
#pragma unroll
    for (int j = 0; j < RMS_LANE_HOLD; j++)
      if (lane + 32 * j < D) *at(out, r, h, lane + 32 * j) = rms_out(v[j], inv, w[lane + 32 * j]);
    return;
  }
  float ss = 0.0f;
  for (int64_t d = lane; d < D; d += 32) {
    const float v = dsp_dev_bf16_val(rms_take<ADD>(x, y, r, h, d));
    ss = __fmaf_rn(v, v, ss);
  }
  const float inv = rms_inv(dsp_dev_warp_sum(ss), D, eps);
  for (int64_t d = lane; d < D; d += 32) *at(out, r, h, d) = rms_out(dsp_dev_bf16_val(*at(x, r, h, d)), inv, w[d]);
}

__device__ __forceinline__ bool rms_a16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Thread i sums d = i, i + 256, ... in order; the warps' butterflies; the 8 warps in order. */
template <int ADD>
__global__ void __launch_bounds__(RMS_THREADS) k_rmsnorm_wide(dsp_cu_view x, dsp_cu_view y, const uint16_t *w,
                                                             float eps, dsp_cu_view out) {
  dsp_dev_launch_dependents();
  dsp_dev_grid_wait();
  extern __shared__ uint16_t rms_s[]; /* [D] x (the sum with ADD), [D] w; none past RMS_STAGE_MAX */
  __shared__ float red[RMS_THREADS / 32];
  const int64_t row = blockIdx.x, r = row / x.heads, h = row % x.heads, D = x.dim;
  const int tid = threadIdx.x;
  const bool staged = D <= RMS_STAGE_MAX;
  uint16_t *xs = rms_s, *ws = rms_s + D, *xr = at(x, r, h, 0), *orow = at(out, r, h, 0);
  const uint16_t *yr = ADD ? at(y, r, 0, 0) : xr;
  const bool vec = staged && D % 8 == 0 && x.s_dim == 1 && out.s_dim == 1 && (!ADD || y.s_dim == 1) &&
                   rms_a16(xr) && rms_a16(yr) && rms_a16(orow) && rms_a16(w);
  if (vec) {
#pragma unroll 2
    for (int64_t e = 8 * tid; e < D; e += 8 * RMS_THREADS) {
      uint4 xv = *(const uint4 *)(xr + e);
      const uint4 wv = *(const uint4 *)(w + e);
      if (ADD) {
        const uint4 yv = *(const uint4 *)(yr + e);
        uint16_t *a = (uint16_t *)&xv;
        const uint16_t *b = (const uint16_t *)&yv;
#pragma unroll
        for (int i = 0; i < 8; i++) a[i] = dsp_dev_bf16_bits(__fadd_rn(dsp_dev_bf16_val(a[i]), dsp_dev_bf16_val(b[i])));
        *(uint4 *)(xr + e) = xv;
      }
      *(uint4 *)(xs + e) = xv;
      *(uint4 *)(ws + e) = wv;
    }
  } else if (staged) {
    for (int64_t d = tid; d < D; d += RMS_THREADS) xs[d] = rms_take<ADD>(x, y, r, h, d), ws[d] = w[d];
  }
  if (staged) __syncthreads();
  float ss = 0.0f;
  for (int64_t d = tid; d < D; d += RMS_THREADS) {
    const float v = dsp_dev_bf16_val(staged ? xs[d] : rms_take<ADD>(x, y, r, h, d));
    ss = __fmaf_rn(v, v, ss);
  }
  ss = dsp_dev_warp_sum(ss);
  if (tid % 32 == 0) red[tid / 32] = ss;
  __syncthreads();
  ss = red[0];
  for (int i = 1; i < RMS_THREADS / 32; i++) ss = __fadd_rn(ss, red[i]);
  const float inv = rms_inv(ss, D, eps);
  if (vec) {
#pragma unroll 2
    for (int64_t e = 8 * tid; e < D; e += 8 * RMS_THREADS) {
      const uint4 xv = *(const uint4 *)(xs + e), wv = *(const uint4 *)(ws + e);
      uint4 ov;
      const uint16_t *a = (const uint16_t *)&xv, *b = (const uint16_t *)&wv;
      uint16_t *o = (uint16_t *)&ov;
#pragma unroll
      for (int i = 0; i < 8; i++) o[i] = rms_out(dsp_dev_bf16_val(a[i]), inv, b[i]);
      *(uint4 *)(orow + e) = ov;
    }
  } else {
    for (int64_t d = tid; d < D; d += RMS_THREADS)
      *at(out, r, h, d) = rms_out(dsp_dev_bf16_val(staged ? xs[d] : *at(x, r, h, d)), inv, staged ? ws[d] : w[d]);
  }
}

template <int ADD>
static void launch_rmsnorm(const dsp_cu_view *x, const dsp_cu_view *y, const uint16_t *w, float eps,
                           const dsp_cu_view *out, cudaStream_t s) {
  const int64_t rows = x->rows * x->heads;
  if (rows <= 0) return;
  if (x->dim >= RMS_WIDE)
    dsp_launch(k_rmsnorm_wide<ADD>, dim3((unsigned)rows), dim3(RMS_THREADS),
               x->dim <= RMS_STAGE_MAX ? (size_t)x->dim * 4 : 0, s, *x, *y, w, eps, *out);
  else dsp_launch(k_rmsnorm<ADD>, dim3(dsp_dev_blocks_for(rows, 8)), dim3(256), 0, s, *x, *y, w, eps, *out);
}

extern "C" void dsp_cu_rmsnorm(const dsp_cu_view *x, const uint16_t *w, float eps, const dsp_cu_view *out,
                               cudaStream_t s) {
  launch_rmsnorm<0>(x, x, w, eps, out, s);
}

extern "C" void dsp_cu_add_rmsnorm(const dsp_cu_view *x, const dsp_cu_view *y, const uint16_t *w, float eps,
                                   const dsp_cu_view *out, cudaStream_t s) {
  launch_rmsnorm<1>(x, y, w, eps, out, s);
}

__global__ void k_rope(dsp_cu_view x, const int32_t *pos, const uint16_t *cos, const uint16_t *sin) {
  const int64_t half = x.dim / 2, n = x.rows * x.heads * half;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = e % half, rh = e / half, r = rh / x.heads, h = rh % x.heads;
    const int64_t p = pos[r];
    uint16_t *pa = at(x, r, h, i), *pb = at(x, r, h, i + half);
    const float a = dsp_dev_bf16_val(*pa), b = dsp_dev_bf16_val(*pb);
    const float c = dsp_dev_bf16_val(cos[p * half + i]), sn = dsp_dev_bf16_val(sin[p * half + i]);
    *pa = dsp_dev_bf16_bits(__fsub_rn(dsp_dev_round_bf16(__fmul_rn(a, c)), dsp_dev_round_bf16(__fmul_rn(b, sn))));
    *pb = dsp_dev_bf16_bits(__fadd_rn(dsp_dev_round_bf16(__fmul_rn(b, c)), dsp_dev_round_bf16(__fmul_rn(a, sn))));
  }
}

extern "C" void dsp_cu_rope(const dsp_cu_view *x, const int32_t *pos, const uint16_t *cos, const uint16_t *sin,
                            cudaStream_t s) {
  const int64_t n = x->rows * x->heads * (x->dim / 2);
  if (n > 0) k_rope<<<dsp_dev_blocks_for(n, 256) < 4096 ? dsp_dev_blocks_for(n, 256) : 4096, 256, 0, s>>>(*x, pos, cos, sin);
}

/* A decoder layer's attention inputs in one launch: one warp per (row, head)
 * of q, k and v. q and k heads: k_rmsnorm's lane order, then RoPE on the
 * lane's own pairs (d and d + D/2 are its registers j and j + NV/2; at D 32
 * lanes l and l + 16, exchanged by a shuffle), stored in place, k also into
 * its cache row; v heads are copied to theirs. NV = D / 32 values per lane.
 * The bits are those of rmsnorm, rope and scatter_rows called one after
 * another. */
template <int NV>
__global__ void k_attn_in(dsp_cu_attn_in_args a) {
  dsp_dev_launch_dependents();
  dsp_dev_grid_wait();
  const int64_t hq = a.q.heads, hkv = a.k.heads, per = hq + 2 * hkv, D = 32 * NV;
  const int64_t gw = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (gw >= a.q.rows * per) return;
  const int lane = threadIdx.x % 32;
  const int64_t t = gw / per, j = gw % per, crow = a.idx[t];
  float v[NV];
  if (j >= hq + hkv) { /* a v head: straight into the cache */
    const int64_t c0 = (j - hq - hkv) * D;
#pragma unroll
    for (int e = 0; e < NV; e++) v[e] = dsp_dev_bf16_val(*at(a.v, t, 0, c0 + lane + 32 * e));
#pragma unroll
    for (int e = 0; e < NV; e++) *at(a.v_cache, crow, 0, c0 + lane + 32 * e) = dsp_dev_bf16_bits(v[e]);
    return;
  }
  const bool isq = j < hq;
  const dsp_cu_view &x = isq ? a.q : a.k;
  const int64_t h = isq ? j : j - hq;
  const uint16_t *w = isq ? a.q_norm : a.k_norm;
  const int64_t p = a.pos[t], half = D / 2;
  const float ss = rms_load<NV, 0>(x, x, t, h, lane, v);
  const float inv = rms_inv(dsp_dev_warp_sum(ss), D, a.eps);
#pragma unroll
  for (int e = 0; e < NV; e++) v[e] = dsp_dev_bf16_val(rms_out(v[e], inv, w[lane + 32 * e]));
  if (NV == 1) { /* lane l < 16 holds d = l, lane l + 16 its partner d + 16 */
    const float o = __shfl_xor_sync(0xffffffffu, v[0], 16);
    const int64_t i = lane & 15;
    const float c = dsp_dev_bf16_val(a.cos[p * half + i]), sn = dsp_dev_bf16_val(a.sin[p * half + i]);
    v[0] = lane < 16 ? __fsub_rn(dsp_dev_round_bf16(__fmul_rn(v[0], c)), dsp_dev_round_bf16(__fmul_rn(o, sn)))
                     : __fadd_rn(dsp_dev_round_bf16(__fmul_rn(v[0], c)), dsp_dev_round_bf16(__fmul_rn(o, sn)));
  }
#pragma unroll
  for (int e = 0; e < NV / 2; e++) {
    const int64_t i = lane + 32 * e;
    const float c = dsp_dev_bf16_val(a.cos[p * half + i]), sn = dsp_dev_bf16_val(a.sin[p * half + i]);
    const float lo = v[e], hi = v[e + NV / 2];
    v[e] = __fsub_rn(dsp_dev_round_bf16(__fmul_rn(lo, c)), dsp_dev_round_bf16(__fmul_rn(hi, sn)));
    v[e + NV / 2] = __fadd_rn(dsp_dev_round_bf16(__fmul_rn(hi, c)), dsp_dev_round_bf16(__fmul_rn(lo, sn)));
  }
#pragma unroll
  for (int e = 0; e < NV; e++) {
    const uint16_t b = dsp_dev_bf16_bits(v[e]);
    *at(x, t, h, lane + 32 * e) = b;
    if (!isq) *at(a.k_cache, crow, 0, h * D + lane + 32 * e) = b;
  }
}

extern "C" int dsp_cu_attn_in(const dsp_cu_attn_in_args *a, cudaStream_t s) {
  const int64_t D = a->q.dim, warps = a->q.rows * (a->q.heads + 2 * a->k.heads);
  if (a->k.dim != D || (D % 64 && D != 32) || D > 256) return 0;
  if (warps <= 0) return 1;
  const unsigned g = dsp_dev_blocks_for(warps, 8);
  if (D == 32) dsp_launch(k_attn_in<1>, dim3(g), dim3(256), 0, s, *a);
  else if (D == 64) dsp_launch(k_attn_in<2>, dim3(g), dim3(256), 0, s, *a);
  else if (D == 128) dsp_launch(k_attn_in<4>, dim3(g), dim3(256), 0, s, *a);
  else if (D == 192) dsp_launch(k_attn_in<6>, dim3(g), dim3(256), 0, s, *a);
  else dsp_launch(k_attn_in<8>, dim3(g), dim3(256), 0, s, *a);
  return 1;
}

/* Element-wise kernels over [rows, dim] (heads = 1): one element's value, for both forms below. */
template <int OP>
__device__ __forceinline__ uint16_t elem_op(float x, float yb, float pv) {
  float y;
  if (OP == 0) { /* add */
    y = __fadd_rn(x, yb);
  } else if (OP == 1) { /* silu(g) * u */
    const float sg = dsp_dev_round_bf16(__fdiv_rn(x, __fadd_rn(1.0f, expf(-x))));
    y = __fmul_rn(sg, yb);
  } else { /* x + bf16(p) */
    y = __fadd_rn(x, dsp_dev_round_bf16(pv));
  }
  return dsp_dev_bf16_bits(y);
}

template <int OP>
__global__ void k_elem(dsp_cu_view a, dsp_cu_view b, const float *p, int64_t ps, dsp_cu_view out) {
  dsp_dev_launch_dependents();
  dsp_dev_grid_wait();
  const int64_t n = a.rows * a.dim;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / a.dim, c = e % a.dim;
    *at(out, r, 0, c) = elem_op<OP>(dsp_dev_bf16_val(*at(a, r, 0, c)), OP == 2 ? 0.0f : dsp_dev_bf16_val(*at(b, r, 0, c)),
                                    OP == 2 ? p[r * ps + c] : 0.0f);
  }
}

/* Eight elements a thread in 16-byte accesses, where every view is contiguous along dim (elem_vec): the generic
 * form's 64-bit division per element made silu_mul over 1024 rows cost 2.7x its bytes (bench/RESULTS.md). */
template <int OP>
__global__ void k_elem8(dsp_cu_view a, dsp_cu_view b, const float *p, int64_t ps, dsp_cu_view out) {
  dsp_dev_launch_dependents();
  dsp_dev_grid_wait();
  const uint32_t cv = (uint32_t)(a.dim / 8), nv = (uint32_t)a.rows * cv;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += gridDim.x * blockDim.x) {
    const uint32_t r = i / cv, c = (i - r * cv) * 8;
    const uint4 xa = *(const uint4 *)at(a, r, 0, c);
    uint4 xb = make_uint4(0, 0, 0, 0);
    if (OP != 2) xb = *(const uint4 *)at(b, r, 0, c);
    float pv[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (OP == 2) {
      const float4 p0 = *(const float4 *)(p + (int64_t)r * ps + c), p1 = *(const float4 *)(p + (int64_t)r * ps + c + 4);
      pv[0] = p0.x, pv[1] = p0.y, pv[2] = p0.z, pv[3] = p0.w, pv[4] = p1.x, pv[5] = p1.y, pv[6] = p1.z, pv[7] = p1.w;
    }
    const uint32_t wa[4] = {xa.x, xa.y, xa.z, xa.w}, wb[4] = {xb.x, xb.y, xb.z, xb.w};
    uint32_t wo[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const uint16_t lo = elem_op<OP>(dsp_dev_bf16_val((uint16_t)(wa[j] & 0xffffu)),
                                      dsp_dev_bf16_val((uint16_t)(wb[j] & 0xffffu)), pv[2 * j]);
      const uint16_t hi = elem_op<OP>(dsp_dev_bf16_val((uint16_t)(wa[j] >> 16)), dsp_dev_bf16_val((uint16_t)(wb[j] >> 16)),
                                      pv[2 * j + 1]);
      wo[j] = (uint32_t)lo | (uint32_t)hi << 16;
    }
    *(uint4 *)at(out, r, 0, c) = make_uint4(wo[0], wo[1], wo[2], wo[3]);
  }
}

/* Every view contiguous along dim in 16-byte pieces (and p in two 16-byte pieces), the vectors' count an int. */
static int elem_vec(const dsp_cu_view *a, const dsp_cu_view *b, const float *p, int64_t ps, const dsp_cu_view *out) {
  const dsp_cu_view *v[3] = {a, b ? b : a, out};
  if (a->dim % 8 || a->rows * (a->dim / 8) > INT32_MAX) return 0;
  for (int i = 0; i < 3; i++)
    if (v[i]->s_dim != 1 || v[i]->s_row % 8 || ((uintptr_t)v[i]->data & 15)) return 0;
  return !p || (ps % 4 == 0 && !((uintptr_t)p & 15));
}

template <int OP>
static void launch_elem(const dsp_cu_view *a, const dsp_cu_view *b, const float *p, int64_t ps, const dsp_cu_view *out,
                        cudaStream_t s) {
  const int64_t n = a->rows * a->dim;
  if (n <= 0) return;
  const int vec = elem_vec(a, b, p, ps, out);
  const unsigned g0 = dsp_dev_blocks_for(vec ? n / 8 : n, 256), g = g0 < 8192 ? g0 : 8192;
  if (vec) dsp_launch(k_elem8<OP>, dim3(g), dim3(256), 0, s, *a, b ? *b : *a, p, ps, *out);
  else dsp_launch(k_elem<OP>, dim3(g), dim3(256), 0, s, *a, b ? *b : *a, p, ps, *out);
}

extern "C" void dsp_cu_add(const dsp_cu_view *a, const dsp_cu_view *b, const dsp_cu_view *out, cudaStream_t s) {
  launch_elem<0>(a, b, NULL, 0, out, s);
}
extern "C" void dsp_cu_silu_mul(const dsp_cu_view *g, const dsp_cu_view *u, const dsp_cu_view *out, cudaStream_t s) {
  launch_elem<1>(g, u, NULL, 0, out, s);
}
extern "C" void dsp_cu_round_add(const dsp_cu_view *x, const float *p, int64_t ps, const dsp_cu_view *out,
                                 cudaStream_t s) {
  launch_elem<2>(x, NULL, p, ps, out, s);
}

__global__ void k_scatter(dsp_cu_view src, const int64_t *idx, dsp_cu_view dst) {
  const int64_t t = blockIdx.x, r = idx[t];
  copy_row(at(dst, r, 0, 0), dst.s_dim, at(src, t, 0, 0), src.s_dim, src.dim);
}

extern "C" void dsp_cu_scatter_rows(const dsp_cu_view *src, const int64_t *idx, const dsp_cu_view *dst,
                                    cudaStream_t s) {
  if (src->rows > 0) k_scatter<<<(unsigned)src->rows, 128, 0, s>>>(*src, idx, *dst);
}

__global__ void k_gather(dsp_cu_view src, const int64_t *idx, dsp_cu_view dst) {
  dsp_dev_launch_dependents();
  dsp_dev_grid_wait();
  const int64_t t = blockIdx.x, r = idx[t];
  copy_row(at(dst, t, 0, 0), dst.s_dim, at(src, r, 0, 0), src.s_dim, dst.dim);
}

extern "C" void dsp_cu_gather_rows(const dsp_cu_view *src, const int64_t *idx, const dsp_cu_view *dst,
                                   cudaStream_t s) {
  if (dst->rows > 0) dsp_launch(k_gather, dim3((unsigned)dst->rows), dim3(128), 0, s, *src, idx, *dst);
}

/* Row r's columns split over gridDim.x blocks in contiguous ranges; each block's best key by a max over its
 * threads, then an atomicMax onto keys[r] (zeroed first): a max of keys is the same in any order, so the split
 * changes no bit. One block per row was latency-bound at 150k columns (0.14 ms on an H200). */
#define SEL_THREADS 256
#define SEL_BLOCKS 64
__global__ void k_select(const uint16_t *logits, int64_t ls, int64_t n_valid, int64_t id0, const float *t_row,
                         const uint64_t *seed_row, const int64_t *pos, unsigned long long *keys) {
  __shared__ unsigned long long best[SEL_THREADS / 32];
  const int64_t r = blockIdx.y, per = (n_valid + gridDim.x - 1) / gridDim.x, v0 = (int64_t)blockIdx.x * per;
  const int64_t v1 = v0 + per < n_valid ? v0 + per : n_valid;
  const float T = t_row ? t_row[r] : 0.0f;
  const uint16_t *row = logits + r * ls;
  unsigned long long k = 0;
#pragma unroll 8
  for (int64_t v = v0 + threadIdx.x; v < v1; v += SEL_THREADS) {
    float x = dsp_dev_bf16_val(row[v]);
    if (T > 0.0f) x = __fadd_rn(__fdiv_rn(x, T), dsp_gumbel(seed_row[r], pos[r], id0 + v));
    const unsigned long long c = dsp_dev_key(x, (uint32_t)(id0 + v));
    k = c > k ? c : k;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long y = __shfl_xor_sync(0xffffffffu, k, o);
    k = y > k ? y : k;
  }
  if ((threadIdx.x & 31) == 0) best[threadIdx.x >> 5] = k;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < SEL_THREADS / 32; w++) k = best[w] > k ? best[w] : k;
    if (k) atomicMax(keys + r, k);
  }
}

extern "C" cudaError_t dsp_cu_select(const uint16_t *logits, int64_t R, int64_t ls, int64_t n_valid, int64_t id0,
                                     const float *t_row, const uint64_t *seed_row, const int64_t *pos,
                                     unsigned long long *keys, cudaStream_t s) {
  if (R <= 0) return cudaSuccess;
  const cudaError_t e = cudaMemsetAsync(keys, 0, (size_t)R * sizeof *keys, s);
  if (e != cudaSuccess || n_valid <= 0) return e;
  int64_t nb = (n_valid + 8 * SEL_THREADS - 1) / (8 * SEL_THREADS);
  nb = nb < SEL_BLOCKS ? nb : SEL_BLOCKS;
  for (int64_t r0 = 0; r0 < R; r0 += 65535) { /* gridDim.y's limit */
    const int64_t n = R - r0 < 65535 ? R - r0 : 65535;
    k_select<<<dim3((unsigned)nb, (unsigned)n), SEL_THREADS, 0, s>>>(
        logits + r0 * ls, ls, n_valid, id0, t_row ? t_row + r0 : NULL, seed_row ? seed_row + r0 : NULL,
        pos ? pos + r0 : NULL, keys + r0);
  }
  return cudaGetLastError();
}
