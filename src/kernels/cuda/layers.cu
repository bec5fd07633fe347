/* The models' layers on the GPU (layers.h). */
#include "kernels/cuda/layers.h"

#include <math.h>

#include "core/philox.h"
#include "kernels/cuda/common/devmath.cuh"

__device__ __forceinline__ uint16_t *at(const dsp_cu_view &v, int64_t r, int64_t h, int64_t d) {
  return (uint16_t *)v.data + r * v.s_row + h * v.s_head + d * v.s_dim;
}

__global__ void k_embed(dsp_cu_view table, const int32_t *ids, dsp_cu_view out) {
  const int64_t t = blockIdx.x, id = ids[t];
  for (int64_t c = threadIdx.x; c < out.dim; c += blockDim.x) *at(out, t, 0, c) = *at(table, id, 0, c);
}

extern "C" void dsp_cu_embed(const dsp_cu_view *table, const int32_t *ids, int64_t t, const dsp_cu_view *out,
                             cudaStream_t s) {
  if (t > 0) k_embed<<<(unsigned)t, 256, 0, s>>>(*table, ids, *out);
}

/* Rows of D < RMS_WIDE: one warp per row (of rows x heads). Wider rows (the
 * hidden states): one block of RMS_THREADS per row, else a decode step's one
 * row runs on one warp for tens of microseconds. The choice depends on D
 * alone, so a row's bits do not depend on how many rows the call has. */
#define RMS_WIDE 1024
#define RMS_THREADS 256
__device__ __forceinline__ void rms_row(const dsp_cu_view &x, const uint16_t *w, float eps, const dsp_cu_view &out,
                                        int64_t r, int64_t h, float ss, int first, int step) {
  const int64_t D = x.dim;
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)D), eps)));
  for (int64_t d = first; d < D; d += step) {
    const float xn = dsp_dev_round_bf16(__fmul_rn(dsp_dev_bf16_val(*at(x, r, h, d)), inv));
    *at(out, r, h, d) = dsp_dev_bf16_bits(__fmul_rn(dsp_dev_bf16_val(w[d]), xn));
  }
}

__global__ void k_rmsnorm(dsp_cu_view x, const uint16_t *w, float eps, dsp_cu_view out) {
  const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= x.rows * x.heads) return;
  const int lane = threadIdx.x % 32;
  const int64_t r = row / x.heads, h = row % x.heads, D = x.dim;
  float ss = 0.0f;
  for (int64_t d = lane; d < D; d += 32) {
    const float v = dsp_dev_bf16_val(*at(x, r, h, d));
    ss = __fmaf_rn(v, v, ss);
  }
  rms_row(x, w, eps, out, r, h, dsp_dev_warp_sum(ss), lane, 32);
}

/* Thread i sums d = i, i + 256, ... in order; the warps' butterflies; the 8 warps in order. */
__global__ void __launch_bounds__(RMS_THREADS) k_rmsnorm_wide(dsp_cu_view x, const uint16_t *w, float eps,
                                                             dsp_cu_view out) {
  __shared__ float red[RMS_THREADS / 32];
  const int64_t row = blockIdx.x, r = row / x.heads, h = row % x.heads, D = x.dim;
  const int tid = threadIdx.x;
  float ss = 0.0f;
  for (int64_t d = tid; d < D; d += RMS_THREADS) {
    const float v = dsp_dev_bf16_val(*at(x, r, h, d));
    ss = __fmaf_rn(v, v, ss);
  }
  ss = dsp_dev_warp_sum(ss);
  if (tid % 32 == 0) red[tid / 32] = ss;
  __syncthreads();
  ss = red[0];
  for (int i = 1; i < RMS_THREADS / 32; i++) ss = __fadd_rn(ss, red[i]);
  rms_row(x, w, eps, out, r, h, ss, tid, RMS_THREADS);
}

extern "C" void dsp_cu_rmsnorm(const dsp_cu_view *x, const uint16_t *w, float eps, const dsp_cu_view *out,
                               cudaStream_t s) {
  const int64_t rows = x->rows * x->heads;
  if (rows <= 0) return;
  if (x->dim >= RMS_WIDE) k_rmsnorm_wide<<<(unsigned)rows, RMS_THREADS, 0, s>>>(*x, w, eps, *out);
  else k_rmsnorm<<<dsp_dev_blocks_for(rows, 8), 256, 0, s>>>(*x, w, eps, *out);
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

/* Element-wise kernels over [rows, dim] (heads = 1). */
template <int OP>
__global__ void k_elem(dsp_cu_view a, dsp_cu_view b, const float *p, int64_t ps, dsp_cu_view out) {
  const int64_t n = a.rows * a.dim;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / a.dim, c = e % a.dim;
    const float x = dsp_dev_bf16_val(*at(a, r, 0, c));
    float y;
    if (OP == 0) { /* add */
      y = __fadd_rn(x, dsp_dev_bf16_val(*at(b, r, 0, c)));
    } else if (OP == 1) { /* silu(g) * u */
      const float sg = dsp_dev_round_bf16(__fdiv_rn(x, __fadd_rn(1.0f, expf(-x))));
      y = __fmul_rn(sg, dsp_dev_bf16_val(*at(b, r, 0, c)));
    } else { /* x + bf16(p) */
      y = __fadd_rn(x, dsp_dev_round_bf16(p[r * ps + c]));
    }
    *at(out, r, 0, c) = dsp_dev_bf16_bits(y);
  }
}

template <int OP>
static void launch_elem(const dsp_cu_view *a, const dsp_cu_view *b, const float *p, int64_t ps, const dsp_cu_view *out,
                        cudaStream_t s) {
  const int64_t n = a->rows * a->dim;
  if (n <= 0) return;
  const unsigned g = dsp_dev_blocks_for(n, 256) < 8192 ? dsp_dev_blocks_for(n, 256) : 8192;
  k_elem<OP><<<g, 256, 0, s>>>(*a, b ? *b : *a, p, ps, *out);
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
  for (int64_t c = threadIdx.x; c < src.dim; c += blockDim.x) *at(dst, r, 0, c) = *at(src, t, 0, c);
}

extern "C" void dsp_cu_scatter_rows(const dsp_cu_view *src, const int64_t *idx, const dsp_cu_view *dst,
                                    cudaStream_t s) {
  if (src->rows > 0) k_scatter<<<(unsigned)src->rows, 128, 0, s>>>(*src, idx, *dst);
}

__global__ void k_gather(dsp_cu_view src, const int64_t *idx, dsp_cu_view dst) {
  const int64_t t = blockIdx.x, r = idx[t];
  for (int64_t c = threadIdx.x; c < dst.dim; c += blockDim.x) *at(dst, t, 0, c) = *at(src, r, 0, c);
}

extern "C" void dsp_cu_gather_rows(const dsp_cu_view *src, const int64_t *idx, const dsp_cu_view *dst,
                                   cudaStream_t s) {
  if (dst->rows > 0) k_gather<<<(unsigned)dst->rows, 128, 0, s>>>(*src, idx, *dst);
}

/* One block per row; the best key by a max over threads. */
__global__ void k_select(const uint16_t *logits, int64_t ls, int64_t n_valid, int64_t id0, const float *t_row,
                         const uint64_t *seed_row, const int64_t *pos, unsigned long long *keys) {
  __shared__ unsigned long long best[256];
  const int64_t r = blockIdx.x;
  const float T = t_row ? t_row[r] : 0.0f;
  unsigned long long k = 0;
  for (int64_t v = threadIdx.x; v < n_valid; v += blockDim.x) {
    float x = dsp_dev_bf16_val(logits[r * ls + v]);
    if (T > 0.0f) x = __fadd_rn(__fdiv_rn(x, T), dsp_gumbel(seed_row[r], pos[r], id0 + v));
    const unsigned long long c = dsp_dev_key(x, (uint32_t)(id0 + v));
    k = c > k ? c : k;
  }
  best[threadIdx.x] = k;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if ((int)threadIdx.x < o && best[threadIdx.x + o] > best[threadIdx.x]) best[threadIdx.x] = best[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) keys[r] = best[0];
}

extern "C" void dsp_cu_select(const uint16_t *logits, int64_t R, int64_t ls, int64_t n_valid, int64_t id0,
                              const float *t_row, const uint64_t *seed_row, const int64_t *pos,
                              unsigned long long *keys, cudaStream_t s) {
  if (R > 0) k_select<<<(unsigned)R, 256, 0, s>>>(logits, ls, n_valid, id0, t_row, seed_row, pos, keys);
}
