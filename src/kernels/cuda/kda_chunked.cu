/* KDA's chunked form on the GPU (kda.h, dsp_cu_kda_chunked): fla's chunk_kda
 * in fp32, in two passes over a window of chunks of 64 tokens.
 *
 * Pass 1, one block per (chunk, value head), all chunks at once: q and k
 * normalised (warp sums), G the running sum of g inside the chunk, the scores
 *   A_ij = sum_d k_i k_j exp(G_i - G_j) (j < i), Aqk_ij likewise with q_i (j <= i)
 * by 16-row blocks as the CPU (a pair across blocks as the product of two
 * factors <= 1, a pair inside one by expf of the difference), the UT transform
 * Tb = (I + diag(beta) A)^-1 diag(beta) by forward substitution, and into the
 * chunk's scratch: W = Tb (k exp(G)), Ur = Tb v, Qg = q exp(G),
 * KG = k exp(G_last - G), Aqk and exp(G_last).
 * Pass 2, one block per (sequence, value head, tile of value columns), over
 * the sequence's chunks in order, the state tile in shared memory:
 *   U = Ur - W S;  o = Qg S + Aqk U;  S = exp(G_last) S + KG^T U.
 * Each output element's sum runs in a fixed order (d or m ascending, with
 * fma) that depends on neither the tile nor the batch. */
#include "kernels/cuda/kda.h"

#include <math.h>

#include "kernels/cuda/common/check.h"
#include "kernels/cuda/common/devmath.cuh"
#include "kernels/cuda/kda_dev.cuh"

enum { C = 64, BLK = 16, NT = 256, LOADS = 8 };

/* Scratch of one (chunk, head), in floats: W, Qg, KG [C][K]; Ur [C][V]; Aqk [C][C]; eg [K]. */
struct chunk_scr {
  float *W, *Qg, *KG, *Ur, *Aqk, *eg;
};

__host__ __device__ static inline size_t per_head_floats(int32_t K, int32_t V) {
  return ((size_t)3 * C * K + (size_t)C * V + (size_t)C * C + (size_t)K + 3) & ~(size_t)3;
}

__device__ static inline chunk_scr scr_at(float *scratch, int64_t cl, int32_t HV, int32_t hv, int32_t K, int32_t V) {
  float *p = scratch + ((size_t)cl * HV + hv) * per_head_floats(K, V);
  chunk_scr s;
  s.W = p, s.Qg = p + (size_t)C * K, s.KG = p + (size_t)2 * C * K, s.Ur = p + (size_t)3 * C * K;
  s.Aqk = s.Ur + (size_t)C * V, s.eg = s.Aqk + (size_t)C * C;
  return s;
}

extern "C" size_t dsp_cu_kda_chunk_floats(int32_t HV, int32_t K, int32_t V) { return (size_t)HV * per_head_floats(K, V); }

struct chunk_args {
  kda_rec_args r; /* tile unused */
  int32_t window;
  int64_t c_lo, c_hi;
  float *scratch, *carry;
};

/* The sequence holding chunk c: the last n with chunk_first[n] <= c. */
__device__ static inline int32_t seq_of_chunk(const dsp_cu_kda_seqs &s, int64_t c) {
  int32_t lo = 0, hi = s.num_seqs - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) >> 1;
    if (s.chunk_first[mid] <= c) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

__device__ static inline void chunk_span(const dsp_cu_kda_seqs &s, int32_t n, int64_t c, int64_t &c0, int32_t &nc) {
  int64_t t0, t1;
  kda_seq_span(s, n, t0, t1);
  c0 = t0 + (c - s.chunk_first[n]) * C;
  nc = (int32_t)(t1 - c0 < C ? t1 - c0 : C);
}

/* ---- pass 1 ---------------------------------------------------------------------------
 * Shared memory, transposed so that lanes walk j: G and Kn [K][C+1], A (then
 * Tb) [C][C+1], three 16-row panels [K][BLK+1]. */
template <int KT> /* K, or 0: K from the arguments (the index divisions by K are shifts otherwise) */
__global__ void __launch_bounds__(NT) k_chunk_intra(chunk_args a) {
  extern __shared__ float sm[];
  const int32_t K = KT > 0 ? KT : a.r.K, V = a.r.V, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t c = a.c_lo + blockIdx.x;
  const int32_t hv = blockIdx.y, h = hv / (a.r.HV / a.r.H);
  const int32_t n = seq_of_chunk(a.r.s, c);
  if (a.r.s.slot[n] < 0) return;
  int64_t c0;
  int32_t nc;
  chunk_span(a.r.s, n, c, c0, nc);
  const int32_t CP = C + 1, BP = BLK + 1;
  float *G = sm, *Kn = G + (size_t)K * CP, *A = Kn + (size_t)K * CP, *P0 = A + (size_t)C * CP;
  float *P1 = P0 + (size_t)K * BP, *P2 = P1 + (size_t)K * BP, *rq = P2 + (size_t)K * BP, *bt = rq + C;
  const chunk_scr out = scr_at(a.scratch, blockIdx.x, a.r.HV, hv, K, V);

  /* q row i normalised and scaled, element d */
#define QN(i, d) (dsp_dev_bf16_val(a.r.q.data[(c0 + (i)) * a.r.q.tok + h * a.r.q.head + (d)]) / rq[i] * a.r.scale)
  /* Element e = i * K + d of the chunk, i < nc, LOADS loads in flight per
   * thread (a loop of global loads into shared memory otherwise waits on each). */
#define BULK(n, LOAD, STORE)                                                 \
  for (int32_t e0 = tid; e0 < (n); e0 += LOADS * NT) {                       \
    float x_[LOADS];                                                         \
    _Pragma("unroll") for (int u_ = 0; u_ < LOADS; u_++) {                   \
      const int32_t e = e0 + u_ * NT, i = e / K, d = e - i * K;              \
      (void)d;                                                               \
      x_[u_] = e < (n) ? (LOAD) : 0.0f;                                      \
    }                                                                        \
    _Pragma("unroll") for (int u_ = 0; u_ < LOADS; u_++) {                   \
      const int32_t e = e0 + u_ * NT, i = e / K, d = e - i * K;              \
      const float x = x_[u_];                                                \
      if (e < (n)) STORE;                                                    \
    }                                                                        \
  }
  /* raw k into Kn, raw q into G for a moment; then the roots, warp per row */
  BULK(nc * K, dsp_dev_bf16_val(a.r.k.data[(c0 + i) * a.r.k.tok + h * a.r.k.head + d]), Kn[d * CP + i] = x)
  BULK(nc * K, dsp_dev_bf16_val(a.r.q.data[(c0 + i) * a.r.q.tok + h * a.r.q.head + d]), G[d * CP + i] = x)
  __syncthreads();
  for (int32_t i = warp; i < nc; i += NT / 32) {
    float sq = 0.0f, sk = 0.0f;
    for (int32_t d = lane; d < K; d += 32) {
      const float x = G[d * CP + i], y = Kn[d * CP + i];
      sq = fmaf(x, x, sq), sk = fmaf(y, y, sk);
    }
    sq = dsp_dev_warp_sum(sq), sk = dsp_dev_warp_sum(sk);
    const float rk = a.r.qk_raw ? 1.0f : sqrtf(sk + 1e-6f);
    if (lane == 0) rq[i] = a.r.qk_raw ? 1.0f : sqrtf(sq + 1e-6f);
    for (int32_t d = lane; d < K; d += 32) Kn[d * CP + i] = Kn[d * CP + i] / rk;
    if (lane == 0) bt[i] = a.r.beta[(c0 + i) * a.r.HV + hv];
  }
  __syncthreads();
  BULK(nc * K, a.r.g[((c0 + i) * a.r.HV + hv) * K + d], G[d * CP + i] = x)
  __syncthreads();
  for (int32_t d = tid; d < K; d += NT) { /* running sums of g */
    float run = 0.0f;
    for (int32_t i = 0; i < nc; i++) {
      run += G[d * CP + i];
      G[d * CP + i] = run;
    }
  }
  __syncthreads();

  /* scores by 16-row blocks; thread (il, jl) of a 16 x 16 block pair */
  const int32_t il = tid >> 4, jl = tid & 15;
  for (int32_t r = 0; r < nc; r += BLK) {
    const int32_t nr = nc - r < BLK ? nc - r : BLK;
    /* P0 = k exp(G - G_r), P1 = q exp(G - G_r) for this block's rows */
    BULK(nr * K, QN(r + i, d), {
      const float ex = expf(G[d * CP + r + i] - G[d * CP + r]);
      P0[d * BP + i] = Kn[d * CP + r + i] * ex;
      P1[d * BP + i] = x * ex;
    })
    for (int32_t j0 = 0; j0 < r; j0 += BLK) { /* earlier blocks: P2 = k exp(G_r - G) */
      __syncthreads();
      for (int32_t e = tid; e < BLK * K; e += NT) {
        const int32_t j = e / K, d = e % K;
        P2[d * BP + j] = Kn[d * CP + j0 + j] * expf(G[d * CP + r] - G[d * CP + j0 + j]);
      }
      __syncthreads();
      if (il < nr) {
        float s = 0.0f, sq = 0.0f;
        for (int32_t d = 0; d < K; d++) {
          const float kj = P2[d * BP + jl];
          s = fmaf(P0[d * BP + il], kj, s);
          sq = fmaf(P1[d * BP + il], kj, sq);
        }
        A[(r + il) * CP + j0 + jl] = s;
        out.Aqk[(size_t)(r + il) * C + j0 + jl] = sq;
      }
    }
    __syncthreads();
    BULK(nr * K, QN(r + i, d), P2[d * BP + i] = x) /* the block's q rows, for the pairs inside it */
    __syncthreads();
    if (il < nr && jl <= il) {
      const int32_t i = r + il, j = r + jl;
      float s = 0.0f, sq = 0.0f;
      for (int32_t d = 0; d < K; d++) {
        const float x = expf(G[d * CP + i] - G[d * CP + j]), kj = Kn[d * CP + j] * x;
        s = fmaf(Kn[d * CP + i], kj, s);
        sq = fmaf(P2[d * BP + il], kj, sq);
      }
      if (j < i) A[i * CP + j] = s;
      out.Aqk[(size_t)i * C + j] = sq;
    }
    __syncthreads();
  }

  /* T = (I + diag(beta) A)^-1 by rows, in place of A: T_ij = -(L_ij + sum_{j<m<i} L_im T_mj) */
  for (int32_t i = 1; i < nc; i++) {
    float t = 0.0f;
    if (tid < i) {
      const int32_t j = tid;
      const float b = bt[i];
      t = b * A[i * CP + j];
#pragma unroll 4
      for (int32_t m = j + 1; m < i; m++) t = fmaf(b * A[i * CP + m], A[m * CP + j], t);
    }
    __syncthreads();
    if (tid < i) A[i * CP + tid] = -t;
    __syncthreads();
  }
  for (int32_t e = tid; e < nc * nc; e += NT) { /* Tb = T diag(beta) */
    const int32_t i = e / nc, j = e % nc;
    if (j < i) A[i * CP + j] *= bt[j];
    else if (j == i) A[i * CP + j] = bt[i];
  }
  __syncthreads();

  /* per column: W = Tb (k exp(G)) and Qg, KG, exp(G_last) (d < K); Ur = Tb v (the rest) */
  for (int32_t col = tid; col < K + V; col += NT) {
    float acc[C];
#pragma unroll
    for (int32_t i = 0; i < C; i++) acc[i] = 0.0f;
    const bool isw = col < K;
    const int32_t d = isw ? col : col - K;
    for (int32_t j0 = 0; j0 < nc; j0 += LOADS) { /* LOADS columns' inputs in flight, then their terms */
      float xs[LOADS];
#pragma unroll
      for (int u = 0; u < LOADS; u++) {
        const int32_t j = j0 + u;
        xs[u] = j >= nc ? 0.0f
                : isw   ? Kn[d * CP + j] * expf(G[d * CP + j])
                        : dsp_dev_bf16_val(a.r.v.data[(c0 + j) * a.r.v.tok + hv * a.r.v.head + d]);
      }
#pragma unroll
      for (int u = 0; u < LOADS; u++) {
        const int32_t j = j0 + u;
#pragma unroll
        for (int32_t i = 0; i < C; i++)
          if (i >= j && j < nc) acc[i] = fmaf(A[i * CP + j], xs[u], acc[i]);
      }
    }
    float *dst = isw ? out.W + d : out.Ur + d;
    const int32_t ld = isw ? K : V;
#pragma unroll
    for (int32_t i = 0; i < C; i++)
      if (i < nc) dst[(size_t)i * ld] = acc[i];
    if (isw) {
      const float gl = G[d * CP + nc - 1];
      for (int32_t i0 = 0; i0 < nc; i0 += LOADS) {
        float qs[LOADS];
#pragma unroll
        for (int u = 0; u < LOADS; u++) qs[u] = i0 + u < nc ? QN(i0 + u, d) : 0.0f;
#pragma unroll
        for (int u = 0; u < LOADS; u++) {
          const int32_t i = i0 + u;
          if (i >= nc) break;
          const float gi = G[d * CP + i];
          out.Qg[(size_t)i * K + d] = qs[u] * expf(gi);
          out.KG[(size_t)i * K + d] = Kn[d * CP + i] * expf(gl - gi);
        }
      }
      out.eg[d] = expf(gl);
    }
  }
#undef QN
#undef BULK
}

static size_t intra_smem(int32_t K) {
  return ((size_t)2 * K * (C + 1) + (size_t)C * (C + 1) + (size_t)3 * K * (BLK + 1) + 2 * C) * sizeof(float);
}

/* ---- pass 2 ---------------------------------------------------------------------------
 * Thread (rg, cg): rows 4 rg .. 4 rg + 3 and columns cg + 16 c (c < BV / 16) of
 * the U and o tiles; rows d = rg + 16 e of the state tile. */
/* A chunk's [nc][K] rows of W, Qg or KG in registers (K a multiple of 4),
 * fetched one phase ahead so the loads run under the phase before. */
enum { XR = C * DSP_CU_KDA_CHUNK_MAX_K / 4 / NT };
struct xrows {
  float4 r[XR];
};

__device__ static inline void x_fetch(xrows &p, const float *src, int32_t n4) {
#pragma unroll
  for (int u = 0; u < XR; u++) {
    const int32_t e = u * NT + (int32_t)threadIdx.x;
    p.r[u] = e < n4 ? reinterpret_cast<const float4 *>(src)[e] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

__device__ static inline void x_put(const xrows &p, float *X, int32_t XP, int32_t n4, int32_t K) {
#pragma unroll
  for (int u = 0; u < XR; u++) {
    const int32_t e = u * NT + (int32_t)threadIdx.x, f = 4 * e, i = f / K;
    if (e < n4) *reinterpret_cast<float4 *>(X + (size_t)i * XP + (f - i * K)) = p.r[u];
  }
}

/* The rows into X: from the registers, or (K not a multiple of 4) straight from src. */
__device__ static inline void x_rows(const xrows &p, bool vec, const float *src, float *X, int32_t XP, int32_t nc,
                                     int32_t K) {
  if (vec) x_put(p, X, XP, nc * K / 4, K);
  else
    for (int32_t e = threadIdx.x; e < nc * K; e += NT) X[(size_t)(e / K) * XP + e % K] = src[e];
}

/* acc[r][q] += sum_d X[4 rg + r][d] S[d][cg + 16 q], d ascending; shared
 * memory walked by 32-bit pointer steps (no 64-bit index products per load). */
template <int CT>
__device__ __forceinline__ void rows_times_state(float (&acc)[4][CT], const float *X, int32_t XP, const float *S,
                                                 int32_t K, int32_t rg, int32_t cg) {
  const float *x0 = X + 4 * rg * XP, *x1 = x0 + XP, *x2 = x1 + XP, *x3 = x2 + XP, *sp = S + cg;
#pragma unroll 4
  for (int32_t d = 0; d < K; d++, sp += 16 * CT) {
    float sv[CT];
#pragma unroll
    for (int q = 0; q < CT; q++) sv[q] = sp[16 * q];
    const float xs[4] = {x0[d], x1[d], x2[d], x3[d]};
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
      for (int q = 0; q < CT; q++) acc[r][q] = fmaf(xs[r], sv[q], acc[r][q]);
  }
}

template <int BV, int KT> /* KT as k_chunk_intra's */
__global__ void __launch_bounds__(NT) k_chunk_state(chunk_args a) {
  extern __shared__ float sm[];
  constexpr int CT = BV / 16;
  const int32_t K = KT > 0 ? KT : a.r.K, V = a.r.V, tid = threadIdx.x, rg = tid >> 4, cg = tid & 15;
  const int32_t n = blockIdx.x, hv = blockIdx.y, v0 = (int32_t)blockIdx.z * BV;
  const int32_t slot = a.r.s.slot[n];
  if (slot < 0) return;
  const int64_t f0 = a.r.s.chunk_first[n], f1 = a.r.s.chunk_first[n + 1];
  const int64_t lo = f0 > a.c_lo ? f0 : a.c_lo, hi = f1 < a.c_hi ? f1 : a.c_hi;
  const bool empty = f0 == f1;
  if (empty ? a.window != 0 : lo >= hi) return; /* an empty sequence is done by window 0 */
  const int32_t XP = K + 4, AP = C + 1;
  float *S = sm, *X = S + (size_t)K * BV, *U = X + (size_t)C * XP, *Aq = U + (size_t)C * BV, *eg = Aq + (size_t)C * AP;
  const int64_t KV = (int64_t)K * V, hoff = (int64_t)hv * KV;
  float *own = a.r.state + (int64_t)slot * a.r.slot_stride + hoff;
  const float *src = lo == f0 ? ((!a.r.s.has || a.r.s.has[n]) ? own : NULL) : a.carry + (size_t)((a.window - 1) & 1) * a.r.HV * KV + hoff;
  for (int32_t e = tid; e < K * BV; e += NT) {
    const int32_t d = e / BV, j = e % BV;
    S[e] = src && v0 + j < V ? src[(int64_t)d * V + v0 + j] : 0.0f;
  }
  const bool vec = (K & 3) == 0;
  xrows pf;
  if (vec && lo < hi) {
    int64_t c0;
    int32_t nc;
    chunk_span(a.r.s, n, lo, c0, nc);
    x_fetch(pf, scr_at(a.scratch, lo - a.c_lo, a.r.HV, hv, K, V).W, nc * K / 4);
  }
  for (int64_t c = lo; c < hi; c++) {
    const chunk_scr sc = scr_at(a.scratch, c - a.c_lo, a.r.HV, hv, K, V);
    int64_t c0;
    int32_t nc;
    chunk_span(a.r.s, n, c, c0, nc);
    __syncthreads(); /* the previous chunk's X, U and Aq are no longer read */
    x_rows(pf, vec, sc.W, X, XP, nc, K);
    {
      float tu[BV / 4], ta[C * C / NT];
#pragma unroll
      for (int u = 0; u < BV / 4; u++) {
        const int32_t e = u * NT + tid, i = e / BV, j = e % BV;
        tu[u] = i < nc && v0 + j < V ? sc.Ur[(size_t)i * V + v0 + j] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < C * C / NT; u++) {
        const int32_t e = u * NT + tid, i = e / C, m = e % C;
        ta[u] = i < nc && m <= i ? sc.Aqk[(size_t)i * C + m] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < BV / 4; u++) U[u * NT + tid] = tu[u];
#pragma unroll
      for (int u = 0; u < C * C / NT; u++) {
        const int32_t e = u * NT + tid;
        Aq[(size_t)(e / C) * AP + e % C] = ta[u];
      }
    }
    for (int32_t d = tid; d < K; d += NT) eg[d] = sc.eg[d];
    __syncthreads();
    if (vec) x_fetch(pf, sc.Qg, nc * K / 4);
    /* U = Ur - W S */
    {
      float acc[4][CT];
#pragma unroll
      for (int r = 0; r < 4; r++)
#pragma unroll
        for (int q = 0; q < CT; q++) acc[r][q] = 0.0f;
      rows_times_state<CT>(acc, X, XP, S, K, rg, cg);
#pragma unroll
      for (int r = 0; r < 4; r++)
#pragma unroll
        for (int q = 0; q < CT; q++) U[(4 * rg + r) * BV + cg + 16 * q] -= acc[r][q];
    }
    __syncthreads();
    x_rows(pf, vec, sc.Qg, X, XP, nc, K);
    __syncthreads();
    if (vec) x_fetch(pf, sc.KG, nc * K / 4);
    /* o = Qg S + Aqk U */
    {
      float acc[4][CT], ac2[4][CT];
#pragma unroll
      for (int r = 0; r < 4; r++)
#pragma unroll
        for (int q = 0; q < CT; q++) acc[r][q] = ac2[r][q] = 0.0f;
      rows_times_state<CT>(acc, X, XP, S, K, rg, cg);
      const int32_t i3 = 4 * rg + 3 < nc - 1 ? 4 * rg + 3 : nc - 1;
      const float *ar = Aq + 4 * rg * AP, *up = U + cg;
      for (int32_t m = 0; m <= i3; m++, up += BV) {
        float uv[CT];
#pragma unroll
        for (int q = 0; q < CT; q++) uv[q] = up[16 * q];
#pragma unroll
        for (int r = 0; r < 4; r++) {
          const int32_t i = 4 * rg + r;
          const float x = m <= i && i < nc ? ar[r * AP + m] : 0.0f;
#pragma unroll
          for (int q = 0; q < CT; q++) ac2[r][q] = fmaf(x, uv[q], ac2[r][q]);
        }
      }
#pragma unroll
      for (int r = 0; r < 4; r++) {
        const int32_t i = 4 * rg + r;
        if (i >= nc) continue;
        uint16_t *orow = a.r.o + (c0 + i) * a.r.o_tok + hv * a.r.o_head + v0;
#pragma unroll
        for (int q = 0; q < CT; q++)
          if (v0 + cg + 16 * q < V) orow[cg + 16 * q] = dsp_dev_bf16_bits(acc[r][q] + ac2[r][q]);
      }
    }
    __syncthreads();
    x_rows(pf, vec, sc.KG, X, XP, nc, K);
    __syncthreads();
    if (vec && c + 1 < hi) { /* the next chunk's W, under this state update */
      int64_t c0n;
      int32_t ncn;
      chunk_span(a.r.s, n, c + 1, c0n, ncn);
      x_fetch(pf, scr_at(a.scratch, c + 1 - a.c_lo, a.r.HV, hv, K, V).W, ncn * K / 4);
    }
    /* S = exp(G_last) S + KG^T U, rows d = rg + 16 e */
    for (int32_t d = rg; d < K; d += 16) {
      float acc[CT];
#pragma unroll
      for (int q = 0; q < CT; q++) acc[q] = 0.0f;
      const float *xp = X + d, *up = U + cg;
#pragma unroll 4
      for (int32_t i = 0; i < nc; i++, xp += XP, up += BV) {
        const float x = *xp;
#pragma unroll
        for (int q = 0; q < CT; q++) acc[q] = fmaf(x, up[16 * q], acc[q]);
      }
#pragma unroll
      for (int q = 0; q < CT; q++) {
        float *sp = S + d * BV + cg + 16 * q;
        *sp = fmaf(eg[d], *sp, acc[q]);
      }
    }
  }
  __syncthreads();
  float *dst = !empty && hi < f1 ? a.carry + (size_t)(a.window & 1) * a.r.HV * KV + hoff : (a.r.s.write_final ? own : NULL);
  if (dst)
    for (int32_t e = tid; e < K * BV; e += NT) {
      const int32_t d = e / BV, j = e % BV;
      if (v0 + j < V) dst[(int64_t)d * V + v0 + j] = S[e];
    }
}

static size_t state_smem(int32_t K, int32_t BV) {
  return ((size_t)K * BV + (size_t)C * (K + 4) + (size_t)C * BV + (size_t)C * (C + 1) + (size_t)K) * sizeof(float);
}

template <int BV>
static dsp_status launch_state(const chunk_args &a, cudaStream_t st) {
  const size_t smem = state_smem(a.r.K, BV);
  void (*kern)(chunk_args) = a.r.K == 128  ? k_chunk_state<BV, 128>
                             : a.r.K == 64 ? k_chunk_state<BV, 64>
                                           : k_chunk_state<BV, 0>;
  DSP_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const dim3 grid((unsigned)a.r.s.num_seqs, (unsigned)a.r.HV, (unsigned)((a.r.V + BV - 1) / BV));
  kern<<<grid, NT, smem, st>>>(a);
  DSP_CUDA_TRY_LAUNCH();
  return DSP_OK;
}

extern "C" dsp_status dsp_cu_kda_chunked(int32_t H, int32_t HV, int32_t K, int32_t V, float scale, int32_t qk_raw,
                                         const dsp_cu_kda_seqs *s, int64_t c_lo, int64_t c_hi, int32_t window,
                                         dsp_cu_kda_in q, dsp_cu_kda_in k, dsp_cu_kda_in v, const float *g,
                                         const float *beta, uint16_t *o_data, int64_t o_tok, int64_t o_head,
                                         float *state, int64_t slot_stride, float *scratch, float *carry, int32_t tile,
                                         cudaStream_t st) {
  if (K > DSP_CU_KDA_CHUNK_MAX_K) return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda kda chunked: head dim K %d above %d", (int)K, DSP_CU_KDA_CHUNK_MAX_K);
  if (s->num_seqs < 1) return DSP_OK;
  if (s->num_seqs > 65535 || HV > 65535) return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda kda chunked: %d sequences of %d heads", (int)s->num_seqs, (int)HV);
  if (tile <= 0) tile = 32;
  if (tile != 16 && tile != 32 && tile != 64) return dsp_fail(DSP_ERR_ARG, "cuda kda chunked: value tile %d (16, 32 or 64)", (int)tile);
  const chunk_args a = {{H, HV, K, V, 0, qk_raw, scale, *s, q, k, v, g, beta, o_data, o_tok, o_head, state, slot_stride},
                        window, c_lo, c_hi, scratch, carry};
  if (c_hi > c_lo) {
    const size_t smem = intra_smem(K);
    void (*kern)(chunk_args) = K == 128 ? k_chunk_intra<128> : K == 64 ? k_chunk_intra<64> : k_chunk_intra<0>;
    DSP_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kern<<<dim3((unsigned)(c_hi - c_lo), (unsigned)HV), NT, smem, st>>>(a);
    DSP_CUDA_TRY_LAUNCH();
  }
  if (tile == 16) return launch_state<16>(a, st);
  if (tile == 64) return launch_state<64>(a, st);
  return launch_state<32>(a, st);
}
