/* spec_accept.h: four kernels on the stream. (1) Every verified slot's p and q rows: the max of fp32(l) / T,
 * then tiles of e = expf(x - m) in shared memory (two buffers: the next one made while this one is summed)
 * summed by eight lanes (partial l over ids = l mod 8, in order) into z, and e[d] / z. (2) Per sequence the accept decisions. (3) The rejected slot's residual w in chunks
 * of DSP_ACCEPT_CHUNK ids, each chunk's sum by one thread in id order. (4) The mass, the fallback to p, the
 * crossing chunk and the id in it. Every sum is the host's, in the host's order (kernels/cpu/spec_accept.h). */
#include <math.h>

#include "core/philox.h"
#include "kernels/cpu/spec_accept.h"
#include "kernels/cuda/common/expf.cuh"
#include "kernels/cuda/spec_accept.h"

enum { THREADS = 256, TILE = 4096, CPB = 4 /* chunks per block in (3) */ };

typedef struct {
  double z, pr; /* the row's sum and e[d] / z */
  float m;
  int32_t pad;
} acc_row;

static __host__ __device__ int64_t chunks_of(int64_t V) { return (V + DSP_ACCEPT_CHUNK - 1) / DSP_ACCEPT_CHUNK; }
static size_t up16(size_t b) { return (b + 15) & ~(size_t)15; }

extern "C" size_t dsp_cu_accept_ws_bytes(int64_t V, int32_t S, int32_t G) {
  const size_t SG = (size_t)S * (size_t)G;
  return up16(SG * sizeof(dsp_cu_accept_slot)) + up16((size_t)S * sizeof(dsp_cu_accept_seq)) +
         up16((size_t)S * 8) + up16(2 * SG * sizeof(acc_row)) + up16((size_t)S * 4) +
         (size_t)S * (size_t)chunks_of(V) * 8;
}

extern "C" dsp_cu_accept_layout dsp_cu_accept_layout_of(void *ws, int64_t V, int32_t S, int32_t G) {
  (void)V;
  const size_t SG = (size_t)S * (size_t)G;
  char *p = (char *)ws;
  dsp_cu_accept_layout L;
  L.slots = (dsp_cu_accept_slot *)p;
  p += up16(SG * sizeof(dsp_cu_accept_slot));
  L.seqs = (dsp_cu_accept_seq *)p;
  p += up16((size_t)S * sizeof(dsp_cu_accept_seq));
  L.out = (int32_t *)p;
  p += up16((size_t)S * 8);
  L.scratch = p;
  return L;
}

__device__ __forceinline__ float bf(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* e_v of a row: expf(fp32(l_v) / T - m), the divisions and the subtraction rounded as the host's */
__device__ __forceinline__ float e_of(const uint16_t *l, int64_t v, float T, float m) {
  return dsp_dev_expf(__fsub_rn(__fdiv_rn(bf(l[v]), T), m));
}

/* 8 bf16 of a 16-byte load as floats */
__device__ __forceinline__ void unpack8(uint4 u, float *f) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; i++) f[2 * i] = bf((uint16_t)(w[i] & 0xffffu)), f[2 * i + 1] = bf((uint16_t)(w[i] >> 16));
}

/* dst[k] = e of id t0 + k, k < n, by threads tid, tid + nth, ...: 16-byte loads where the row allows
 * (t0 is a multiple of 8), so that enough bytes are in flight per SM */
__device__ __forceinline__ void fill_tile(const uint16_t *l, int64_t t0, int n, float T, float m, float *dst, int tid,
                                          int nth, bool vec) {
  int k0 = 0;
  if (vec) {
    const uint4 *l4 = (const uint4 *)(l + t0);
    for (int q = tid; q < n / 8; q += nth) {
      float f[8];
      unpack8(l4[q], f);
#pragma unroll
      for (int i = 0; i < 8; i++) dst[8 * q + i] = dsp_dev_expf(__fsub_rn(__fdiv_rn(f[i], T), m));
    }
    k0 = n / 8 * 8;
  }
  for (int k = k0 + tid; k < n; k += nth) dst[k] = e_of(l, t0 + k, T, m);
}

__global__ void __launch_bounds__(THREADS) rows_kernel(const uint16_t *tl, const uint16_t *ql, int64_t V, int G,
                                                       const dsp_cu_accept_slot *slots,
                                                       const dsp_cu_accept_seq *seqs, acc_row *rows) {
  const int b = blockIdx.x, j = b >> 1, which = b & 1, r = j / G, i = j % G;
  const dsp_cu_accept_seq sq = seqs[r];
  if (i >= sq.ndraft) return;
  const dsp_cu_accept_slot sl = slots[j];
  const uint16_t *l = which ? ql + sl.qoff : tl + sl.toff;
  const float T = sq.temp;
  __shared__ float e[2 * TILE];
  __shared__ float red[THREADS / 32];
  float m = -INFINITY; /* a NaN is never larger */
  const bool vec = ((uintptr_t)l & 15) == 0;
  int64_t v0 = 0;
  if (vec) {
    const uint4 *l4 = (const uint4 *)l;
#pragma unroll 4
    for (int64_t q = threadIdx.x; q < V / 8; q += THREADS) {
      float f[8];
      unpack8(l4[q], f);
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const float x = __fdiv_rn(f[i], T);
        m = x > m ? x : m;
      }
    }
    v0 = V / 8 * 8;
  }
  for (int64_t v = v0 + threadIdx.x; v < V; v += THREADS) {
    const float x = __fdiv_rn(bf(l[v]), T);
    m = x > m ? x : m;
  }
  for (int o = 16; o; o >>= 1) {
    const float y = __shfl_xor_sync(0xffffffffu, m, o);
    m = y > m ? y : m;
  }
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
  __syncthreads();
  m = red[0];
  for (int w = 1; w < THREADS / 32; w++) m = red[w] > m ? red[w] : m;
  /* tiles in two buffers: warps 1.. compute tile t + 1 while warp 0's lanes 0 .. 7 sum tile t (the sums'
     chains, a dependent double add per id, are the kernel's critical path) */
  double s = 0.0; /* lanes 0 .. 7: partial threadIdx.x */
  const int64_t ntiles = (V + TILE - 1) / TILE;
  fill_tile(l, 0, V < TILE ? (int)V : TILE, T, m, e, threadIdx.x, THREADS, vec);
  __syncthreads();
  for (int64_t t = 0; t < ntiles; t++) {
    const float *cur = e + (t & 1) * TILE;
    if (threadIdx.x < 8) {
      const int n = V - t * TILE < TILE ? (int)(V - t * TILE) : TILE; /* TILE is a multiple of 8: k = v mod 8 */
      int k = threadIdx.x;
      for (; k + 8 * 15 < n; k += 8 * 16) { /* 16 loads in flight ahead of their adds */
        float x[16];
#pragma unroll
        for (int u = 0; u < 16; u++) x[u] = cur[k + 8 * u];
#pragma unroll
        for (int u = 0; u < 16; u++) s = __dadd_rn(s, (double)x[u]);
      }
      for (; k < n; k += 8) s = __dadd_rn(s, (double)cur[k]);
    } else if (threadIdx.x >= 32 && t + 1 < ntiles) {
      float *nxt = e + ((t + 1) & 1) * TILE;
      const int64_t t0 = (t + 1) * TILE;
      const int n = V - t0 < TILE ? (int)(V - t0) : TILE;
      fill_tile(l, t0, n, T, m, nxt, threadIdx.x - 32, THREADS - 32, vec);
    }
    __syncthreads();
  }
  if (threadIdx.x < 32) {
    double z = 0.0;
    for (int p = 0; p < 8; p++) z = __dadd_rn(z, __shfl_sync(0xffffffffu, s, p));
    if (threadIdx.x == 0) {
      acc_row o;
      o.z = z;
      o.pr = __ddiv_rn((double)e_of(l, sl.draft, T, m), z);
      o.m = m;
      o.pad = 0;
      rows[b] = o;
    }
  }
}

/* accepted while u x q(d) < p(d); rej[r]: the rejected slot, or -1 */
__global__ void decide_kernel(int32_t S, int G, const dsp_cu_accept_seq *seqs, const acc_row *rows, int32_t *out,
                              int32_t *rej) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= S) return;
  const dsp_cu_accept_seq sq = seqs[r];
  int i = 0;
  while (i < sq.ndraft) {
    const int j = r * G + i;
    const double u = dsp_philox_uniform(sq.seed, sq.pos + i, DSP_ACCEPT_PURPOSE);
    if (!(__dmul_rn(u, rows[2 * j + 1].pr) < rows[2 * j].pr)) break;
    i++;
  }
  out[2 * r] = i;
  out[2 * r + 1] = -1;
  rej[r] = i < sq.ndraft ? i : -1;
}

typedef struct {
  const uint16_t *lp, *lq;
  float T, mp, mq;
  double zp, zq;
} resid;

__device__ __forceinline__ resid resid_of(const uint16_t *tl, const uint16_t *ql, int G, int r, int i,
                                          const dsp_cu_accept_slot *slots, const dsp_cu_accept_seq *seqs,
                                          const acc_row *rows) {
  const int j = r * G + i;
  resid x;
  x.lp = tl + slots[j].toff, x.lq = ql + slots[j].qoff;
  x.T = seqs[r].temp;
  x.mp = rows[2 * j].m, x.zp = rows[2 * j].z;
  x.mq = rows[2 * j + 1].m, x.zq = rows[2 * j + 1].z;
  return x;
}

/* w_v = max(p_v - q_v, 0), or p_v in the fallback */
__device__ __forceinline__ double w_of(const resid &x, int64_t v, int only_p) {
  const double p = __ddiv_rn((double)e_of(x.lp, v, x.T, x.mp), x.zp);
  if (only_p) return p;
  const double d = __dsub_rn(p, __ddiv_rn((double)e_of(x.lq, v, x.T, x.mq), x.zq));
  return d > 0.0 ? d : 0.0;
}

__global__ void __launch_bounds__(THREADS) chunks_kernel(const uint16_t *tl, const uint16_t *ql, int64_t V, int G,
                                                         const dsp_cu_accept_slot *slots,
                                                         const dsp_cu_accept_seq *seqs, const acc_row *rows,
                                                         const int32_t *rej, double *cs) {
  const int r = blockIdx.y, i = rej[r];
  if (i < 0) return;
  const resid x = resid_of(tl, ql, G, r, i, slots, seqs, rows);
  const int64_t nch = chunks_of(V), c0 = (int64_t)blockIdx.x * CPB;
  const int64_t v0 = c0 * DSP_ACCEPT_CHUNK, v1 = V < v0 + CPB * DSP_ACCEPT_CHUNK ? V : v0 + CPB * DSP_ACCEPT_CHUNK;
  __shared__ double w[CPB * DSP_ACCEPT_CHUNK];
  for (int64_t v = v0 + threadIdx.x; v < v1; v += THREADS) w[v - v0] = w_of(x, v, 0);
  __syncthreads();
  const int64_t c = c0 + threadIdx.x;
  if (threadIdx.x < CPB && c < nch) {
    const int64_t e = V < (c + 1) * DSP_ACCEPT_CHUNK ? V : (c + 1) * DSP_ACCEPT_CHUNK;
    double s = 0.0;
#pragma unroll 16
    for (int64_t v = c * DSP_ACCEPT_CHUNK; v < e; v++) s = __dadd_rn(s, w[v - v0]);
    cs[(int64_t)r * nch + c] = s;
  }
}

__global__ void __launch_bounds__(THREADS) finish_kernel(const uint16_t *tl, const uint16_t *ql, int64_t V, int G,
                                                         const dsp_cu_accept_slot *slots,
                                                         const dsp_cu_accept_seq *seqs, const acc_row *rows,
                                                         const int32_t *rej, double *cs_all, int32_t *out) {
  const int r = blockIdx.x, i = rej[r];
  if (i < 0) return;
  const resid x = resid_of(tl, ql, G, r, i, slots, seqs, rows);
  const int64_t nch = chunks_of(V);
  double *cs = cs_all + (int64_t)r * nch;
  __shared__ double w[DSP_ACCEPT_CHUNK];
  __shared__ double s_mass, s_R;
  __shared__ int64_t s_c;
  __shared__ int s_p;
  if (threadIdx.x == 0) {
    double mass = 0.0;
#pragma unroll 8
    for (int64_t c = 0; c < nch; c++) mass = __dadd_rn(mass, cs[c]);
    s_mass = mass;
    s_p = !(mass > 1e-12); /* p and q agree: the draw is p's */
  }
  __syncthreads();
  const int only_p = s_p;
  if (only_p) { /* rare: the chunk sums again, here */
    for (int64_t c = threadIdx.x; c < nch; c += THREADS) {
      const int64_t e = V < (c + 1) * DSP_ACCEPT_CHUNK ? V : (c + 1) * DSP_ACCEPT_CHUNK;
      double s = 0.0;
      for (int64_t v = c * DSP_ACCEPT_CHUNK; v < e; v++) s = __dadd_rn(s, w_of(x, v, 1));
      cs[c] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      double mass = 0.0;
      for (int64_t c = 0; c < nch; c++) mass = __dadd_rn(mass, cs[c]);
      s_mass = mass;
    }
    __syncthreads();
  }
  const double target = __dmul_rn(dsp_philox_uniform(seqs[r].seed, seqs[r].pos + i, DSP_RESIDUAL_PURPOSE), s_mass);
  if (threadIdx.x == 0) {
    double R = 0.0;
    int64_t cf = -1;
    for (int64_t c = 0; c < nch; c++) {
      const double Rn = __dadd_rn(R, cs[c]);
      if (Rn > target) {
        cf = c;
        break;
      }
      R = Rn;
    }
    s_c = cf, s_R = R;
  }
  __syncthreads();
  const int64_t cf = s_c;
  if (cf >= 0) {
    const int64_t v0 = cf * DSP_ACCEPT_CHUNK, v1 = V < v0 + DSP_ACCEPT_CHUNK ? V : v0 + DSP_ACCEPT_CHUNK;
    for (int64_t v = v0 + threadIdx.x; v < v1; v += THREADS) w[v - v0] = w_of(x, v, only_p);
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  if (cf >= 0) {
    const int64_t v0 = cf * DSP_ACCEPT_CHUNK, v1 = V < v0 + DSP_ACCEPT_CHUNK ? V : v0 + DSP_ACCEPT_CHUNK;
    const double R = s_R;
    double P = 0.0;
    for (int64_t v = v0; v < v1; v++) {
      P = __dadd_rn(P, w[v - v0]);
      if (__dadd_rn(R, P) > target && w[v - v0] > 0.0) {
        out[2 * r + 1] = (int32_t)v;
        return;
      }
    }
  }
  for (int64_t v = V - 1; v >= 0; v--) /* rounding left no crossing: the last id of w > 0 */
    if (w_of(x, v, only_p) > 0.0) {
      out[2 * r + 1] = (int32_t)v;
      return;
    }
  out[2 * r + 1] = 0;
}

extern "C" cudaError_t dsp_cu_accept(const uint16_t *tlog, const uint16_t *qlog, int64_t V, int32_t S, int32_t G,
                                     const dsp_cu_accept_layout *L, cudaStream_t s) {
  const size_t SG = (size_t)S * (size_t)G;
  acc_row *rows = (acc_row *)L->scratch;
  int32_t *rej = (int32_t *)((char *)L->scratch + up16(2 * SG * sizeof(acc_row)));
  double *cs = (double *)((char *)rej + up16((size_t)S * 4));
  rows_kernel<<<(unsigned)(2 * SG), THREADS, 0, s>>>(tlog, qlog, V, G, L->slots, L->seqs, rows);
  decide_kernel<<<(unsigned)((S + 127) / 128), 128, 0, s>>>(S, G, L->seqs, rows, L->out, rej);
  const int64_t nch = chunks_of(V);
  chunks_kernel<<<dim3((unsigned)((nch + CPB - 1) / CPB), (unsigned)S), THREADS, 0, s>>>(tlog, qlog, V, G, L->slots,
                                                                                       L->seqs, rows, rej, cs);
  finish_kernel<<<(unsigned)S, THREADS, 0, s>>>(tlog, qlog, V, G, L->slots, L->seqs, rows, rej, cs, L->out);
  return cudaGetLastError();
}
