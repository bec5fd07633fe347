/* KDA's chunked form on the GPU (kda.h, dsp_cu_kda_chunked): fla's chunk_kda
 * in fp32, in two passes over a window of chunks of 64 tokens.
 *
 * Pass 1, one block per (chunk, value head), all chunks at once: q and k
 * normalised, G the running sum of g inside the chunk, the scores
 *   A_ij = sum_d k_i k_j exp(G_i - G_j) (j < i), Aqk_ij likewise with q_i (j <= i)
 * by 16-row blocks as the CPU (a pair across blocks as the product of two
 * factors <= 1, a pair inside one by expf of the difference), the UT transform
 * Tb = (I + diag(beta) A)^-1 diag(beta) by forward substitution, and into the
 * chunk's scratch: W = Tb (k exp(G)), Ur = Tb v, Qg = q exp(G),
 * KG = k exp(G_last - G), Aqk and exp(G_last).
 * Pass 2, one block per (sequence, value head, tile of value columns), over
 * the sequence's chunks in order, the state tile in shared memory:
 *   U = Ur - W S;  o = Qg S + Aqk U;  S = exp(G_last) S + KG^T U.
 * Every value follows the CPU's chunked form (kda_chunked_body.h): its q/k
 * roots, its expf, the same sums in the same orders, each product rounded
 * before its add (never fused), so neither the tile nor the batch changes a
 * bit. Where a row of o cancels, the gated norm turns one ulp anywhere (an
 * fma, an expf, a root) into more than the contract's 1e-4 of the largest
 * output against the CPU. */
#include "kernels/cuda/kda.h"

#include <math.h>

#include "kernels/cuda/common/check.h"
#include "kernels/cuda/common/devmath.cuh"
#include "kernels/cuda/common/expf.cuh"
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
 * Shared memory: G and Kn [C][KP] by rows (KP = K4 + 4, K4 = K rounded up to 4,
 * the pad zero, so the sums over d read float4), A (then L, then Tb
 * transposed) [C][C+1], three 16-row panels [BLK][KP] (then T [C][C+1]); for
 * the last phase X [C][XW], the columns of [k exp(G) | v], over G and Kn. */
enum { XS = 256, KS = C * DSP_CU_KDA_CHUNK_MAX_K / NT };
static_assert(NT == 256 && BLK == 16 && C == 64, "the intra pass's thread maps (240 pairs + 16 diagonals, 8-row tiles) assume these");
static_assert(2 * (C + 1) >= DSP_CU_KDA_CHUNK_MAX_K, "g's rows are staged over A and the panels");
struct intra_layout {
  size_t A, R2, rq, bt, rk, total;
  int32_t XW;
};
__host__ __device__ static inline intra_layout intra_lay(int32_t K, int32_t V) {
  intra_layout l;
  const int32_t CP = C + 1, KP = ((K + 3) & ~3) + 4, kv4 = (K + V + 3) & ~3;
  l.XW = kv4 < XS ? kv4 : XS;
  const size_t r0 = (size_t)2 * C * KP, x = (size_t)C * l.XW, p = (size_t)3 * BLK * KP, t = (size_t)C * CP;
  l.A = ((r0 > x ? r0 : x) + 3) & ~(size_t)3; /* TbT is read as float4 */
  l.R2 = l.A + (size_t)C * CP;
  l.rq = l.R2 + (p > t ? p : t);
  l.bt = l.rq + C;
  l.rk = l.bt + C;
  l.total = l.rk + C;
  return l;
}

__device__ __forceinline__ float4 ld4(const float *p) { return *reinterpret_cast<const float4 *>(p); }

/* four bf16 (little-endian pairs in x and y) as floats */
__device__ __forceinline__ float4 bf16x4(uint2 v) {
  return make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u), __uint_as_float(v.y << 16),
                     __uint_as_float(v.y & 0xffff0000u));
}

/* a b + c with the product rounded first, as the CPU's sums (never fused) */
__device__ __forceinline__ float kda_mul_add(float a, float b, float c) { return __fadd_rn(__fmul_rn(a, b), c); }

/* v's columns s0 - K .. of the slab starting at X column s0, rows i < nc, as floats. */
__device__ static inline void fill_v(const dsp_cu_kda_in &v, int64_t c0, int32_t hv, int32_t nc, int32_t K, int32_t V,
                                     int32_t s0, float *X, int32_t XW) {
  const int32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t lo = K > s0 ? K - s0 : 0, hi = K + V - s0 < XS ? K + V - s0 : XS;
  for (int32_t i = warp; i < nc; i += NT / 32) {
    const uint16_t *row = v.data + (c0 + i) * v.tok + hv * v.head;
#pragma unroll 4
    for (int32_t cc = lo + lane; cc < hi; cc += 32) X[i * XW + cc] = dsp_dev_bf16_val(row[s0 - K + cc]);
  }
}

/* acc[r][c] += Tb[i0 + r][j] X[j][4 q + c] for rows r >= r0 (the diagonal tile). */
__device__ __forceinline__ void wy_terms(float (&acc)[8][4], const float *tp, const float *xp, int32_t r0) {
  const float4 t0 = ld4(tp), t1 = ld4(tp + 4);
  const float4 xv = ld4(xp);
  const float tb[8] = {t0.x, t0.y, t0.z, t0.w, t1.x, t1.y, t1.z, t1.w}, xs[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
  for (int r = 0; r < 8; r++)
    if (r >= r0)
#pragma unroll
      for (int cc = 0; cc < 4; cc++) acc[r][cc] = kda_mul_add(tb[r], xs[cc], acc[r][cc]);
}

template <int KT> /* K, or 0: K from the arguments (the index divisions by K are shifts otherwise) */
__global__ void __launch_bounds__(NT, 2) k_chunk_intra(chunk_args a) {
  extern __shared__ float sm[];
  const int32_t K = KT > 0 ? KT : a.r.K, V = a.r.V, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t c = a.c_lo + blockIdx.x;
  const int32_t hv = blockIdx.y, h = hv / (a.r.HV / a.r.H);
  const int32_t n = seq_of_chunk(a.r.s, c);
  if (a.r.s.slot[n] < 0) return;
  int64_t c0;
  int32_t nc;
  chunk_span(a.r.s, n, c, c0, nc);
  const int32_t CP = C + 1, K4 = (K + 3) & ~3, KP = K4 + 4;
  const intra_layout ly = intra_lay(K, V);
  const int32_t XW = ly.XW;
  float *G = sm, *Kn = G + (size_t)C * KP, *X = sm, *A = sm + ly.A, *TbT = A, *P0 = sm + ly.R2, *T = P0;
  float *P1 = P0 + (size_t)BLK * KP, *P2 = P1 + (size_t)BLK * KP, *rq = sm + ly.rq, *bt = sm + ly.bt, *rk = sm + ly.rk;
  float *gs = A; /* g's rows [nc][K] until G is free: A and the panels (2 C (C + 1) floats at least) */
  const chunk_scr out = scr_at(a.scratch, blockIdx.x, a.r.HV, hv, K, V);

  /* q row i normalised and scaled, element d: made once into Qg's scratch (Qg = it times exp(G) at the end),
   * so the loops that read it hold no division (whose slow-path branch would keep their expfs apart) */
#define QN(i, d) out.Qg[(size_t)(i) * K + (d)]
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
  if (K4 > K) { /* the pad columns K .. K4 - 1 are zeros: the float4 sums over d add nothing there */
    const int32_t pad = K4 > K ? K4 - K : 1; /* never 0, also where K is a template's multiple of 4 */
    for (int32_t e = tid; e < (2 * C + 3 * BLK) * pad; e += NT) {
      const int32_t row = e / pad, col = K + e % pad;
      (row < 2 * C ? G + (size_t)row * KP : P0 + (size_t)(row - 2 * C) * KP)[col] = 0.0f;
    }
  }
  /* raw k into Kn, raw q into G for a moment, g into gs, the three tensors' loads in flight together; then the
   * roots, as the CPU's (d order, no fma): thread i the root of q row i, thread nc + i of k row i */
  /* four elements a load where the views allow: a quarter of the load instructions, half the L1 wavefronts */
  const bool vld = (K & 3) == 0 && ((a.r.k.tok | a.r.k.head | a.r.q.tok | a.r.q.head) & 3) == 0 &&
                   (((uintptr_t)a.r.k.data | (uintptr_t)a.r.q.data) & 7) == 0 && ((uintptr_t)a.r.g & 15) == 0;
  for (int32_t e0 = 4 * tid; vld && e0 < nc * K; e0 += 4 * LOADS * NT) {
    uint2 xk[LOADS], xq[LOADS];
    float4 xg[LOADS];
#pragma unroll
    for (int u = 0; u < LOADS; u++) {
      const int32_t e = e0 + 4 * u * NT, i = e / K, d = e - i * K;
      if (e < nc * K) {
        xk[u] = *reinterpret_cast<const uint2 *>(a.r.k.data + (c0 + i) * a.r.k.tok + h * a.r.k.head + d);
        xq[u] = *reinterpret_cast<const uint2 *>(a.r.q.data + (c0 + i) * a.r.q.tok + h * a.r.q.head + d);
        xg[u] = *reinterpret_cast<const float4 *>(a.r.g + ((c0 + i) * a.r.HV + hv) * K + d);
      }
    }
#pragma unroll
    for (int u = 0; u < LOADS; u++) {
      const int32_t e = e0 + 4 * u * NT, i = e / K, d = e - i * K;
      if (e < nc * K) {
        *reinterpret_cast<float4 *>(Kn + i * KP + d) = bf16x4(xk[u]);
        *reinterpret_cast<float4 *>(G + i * KP + d) = bf16x4(xq[u]);
        *reinterpret_cast<float4 *>(gs + e) = xg[u];
      }
    }
  }
  for (int32_t e0 = tid; !vld && e0 < nc * K; e0 += LOADS * NT) {
    float xk[LOADS], xq[LOADS], xg[LOADS];
#pragma unroll
    for (int u = 0; u < LOADS; u++) {
      const int32_t e = e0 + u * NT, i = e / K, d = e - i * K;
      const bool in = e < nc * K;
      xk[u] = in ? dsp_dev_bf16_val(a.r.k.data[(c0 + i) * a.r.k.tok + h * a.r.k.head + d]) : 0.0f;
      xq[u] = in ? dsp_dev_bf16_val(a.r.q.data[(c0 + i) * a.r.q.tok + h * a.r.q.head + d]) : 0.0f;
      xg[u] = in ? a.r.g[((c0 + i) * a.r.HV + hv) * K + d] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < LOADS; u++) {
      const int32_t e = e0 + u * NT, i = e / K, d = e - i * K;
      if (e < nc * K) Kn[i * KP + d] = xk[u], G[i * KP + d] = xq[u], gs[e] = xg[u];
    }
  }
  __syncthreads();
  if (tid < 2 * nc) {
    const int32_t i = tid < nc ? tid : tid - nc;
    const float root = a.r.qk_raw ? 1.0f : kda_l2_root((tid < nc ? G : Kn) + i * KP, K);
    (tid < nc ? rq : rk)[i] = root;
    if (tid < nc) bt[i] = a.r.beta[(c0 + i) * a.r.HV + hv];
  }
  __syncthreads();
  for (int32_t e = tid; e < nc * K; e += NT) {
    const int32_t i = e / K, d = e - i * K;
    Kn[i * KP + d] = Kn[i * KP + d] / rk[i];
    QN(i, d) = G[i * KP + d] / rq[i] * a.r.scale;
    G[i * KP + d] = gs[e];
  }
  __syncthreads();
  for (int32_t d = tid; d < K; d += NT) { /* running sums of g */
    float run = 0.0f;
    for (int32_t i = 0; i < nc; i++) {
      run += G[i * KP + d];
      G[i * KP + d] = run;
    }
  }
  __syncthreads();

  /* scores across 16-row blocks; thread (il, jl) of a 16 x 16 block pair */
  const int32_t il = tid >> 4, jl = tid & 15;
  for (int32_t r = BLK; r < nc; r += BLK) {
    const int32_t nr = nc - r < BLK ? nc - r : BLK;
    __syncthreads(); /* the previous block's panels are no longer read */
    /* P0 = k exp(G - G_r), P1 = q exp(G - G_r) for this block's rows. Past the rows (e >= nr K) the values
     * are made from row r and dropped: only the stores are conditional, so the expfs overlap. */
    for (int32_t e0 = tid; e0 < nr * K; e0 += LOADS * NT) {
      float x_[LOADS], ex_[LOADS];
#pragma unroll
      for (int u = 0; u < LOADS; u++) {
        const int32_t e = e0 + u * NT < nr * K ? e0 + u * NT : 0, i = e / K, d = e - i * K;
        x_[u] = QN(r + i, d);
        ex_[u] = dsp_dev_expf(G[(r + i) * KP + d] - G[r * KP + d]);
      }
#pragma unroll
      for (int u = 0; u < LOADS; u++) {
        const int32_t e = e0 + u * NT, i = e / K, d = e - i * K;
        if (e < nr * K) {
          P0[i * KP + d] = Kn[(r + i) * KP + d] * ex_[u];
          P1[i * KP + d] = x_[u] * ex_[u];
        }
      }
    }
    for (int32_t j0 = 0; j0 < r; j0 += BLK) { /* earlier blocks: P2 = k exp(G_r - G) */
      __syncthreads();
      /* every load before a store (they may alias); one at a time for a K from the arguments (registers) */
      constexpr int PL = KT > 0 ? LOADS : 1;
      for (int32_t e0 = tid; e0 < BLK * K; e0 += PL * NT) {
        float p_[PL];
#pragma unroll
        for (int u = 0; u < PL; u++) {
          const int32_t e = e0 + u * NT < BLK * K ? e0 + u * NT : 0, j = e / K, d = e - j * K;
          p_[u] = Kn[(j0 + j) * KP + d] * dsp_dev_expf(G[r * KP + d] - G[(j0 + j) * KP + d]);
        }
#pragma unroll
        for (int u = 0; u < PL; u++) {
          const int32_t e = e0 + u * NT, j = e / K, d = e - j * K;
          if (e < BLK * K) P2[j * KP + d] = p_[u];
        }
      }
      __syncthreads();
      if (il < nr) {
        float s = 0.0f, sq = 0.0f;
        const float *p0 = P0 + il * KP, *p1 = P1 + il * KP, *p2 = P2 + jl * KP;
#pragma unroll 4
        for (int32_t d = 0; d < K4; d += 4) {
          const float4 k4 = ld4(p2 + d), a4 = ld4(p0 + d), q4 = ld4(p1 + d);
          s = kda_mul_add(a4.x, k4.x, s), sq = kda_mul_add(q4.x, k4.x, sq);
          s = kda_mul_add(a4.y, k4.y, s), sq = kda_mul_add(q4.y, k4.y, sq);
          s = kda_mul_add(a4.z, k4.z, s), sq = kda_mul_add(q4.z, k4.z, sq);
          s = kda_mul_add(a4.w, k4.w, s), sq = kda_mul_add(q4.w, k4.w, sq);
        }
        A[(r + il) * CP + j0 + jl] = s;
        out.Aqk[(size_t)(r + il) * C + j0 + jl] = sq;
      }
    }
  }
  /* pairs inside a block, two blocks at a time: q rows into P0 and P1; threads
   * 0..239 take the 120 pairs j < i of each, 240..255 the diagonals (Aqk only) */
  for (int32_t r = 0; r < nc; r += 2 * BLK) {
    const int32_t nr = nc - r < 2 * BLK ? nc - r : 2 * BLK;
    __syncthreads();
    BULK(nr * K, QN(r + i, d), (i < BLK ? P0 : P1)[(i & (BLK - 1)) * KP + d] = x)
    __syncthreads();
    if (tid >= 240) { /* the diagonals of row tid - 240 of both blocks */
      const int32_t pi = tid - 240;
      for (int32_t u = 0; u < 2; u++) {
        const int32_t ii = r + u * BLK + pi;
        if (ii >= nc) continue;
        const float *Q = u ? P1 : P0;
        float sq = 0.0f;
        const float *kr = Kn + ii * KP, *gr = G + ii * KP, *qr = Q + pi * KP;
        for (int32_t d = 0; d < K4; d += 4) {
          const float4 k4 = ld4(kr + d), g4 = ld4(gr + d), q4 = ld4(qr + d);
          /* expf(g - g) is 1 (NaN for a NaN or infinite g) in either expf */
          sq = kda_mul_add(__fmul_rn(q4.x, k4.x), expf(g4.x - g4.x), sq);
          sq = kda_mul_add(__fmul_rn(q4.y, k4.y), expf(g4.y - g4.y), sq);
          sq = kda_mul_add(__fmul_rn(q4.z, k4.z), expf(g4.z - g4.z), sq);
          sq = kda_mul_add(__fmul_rn(q4.w, k4.w), expf(g4.w - g4.w), sq);
        }
        out.Aqk[(size_t)ii * C + ii] = sq;
      }
      continue;
    }
    const int32_t hb = tid >= 120, p = tid - 120 * hb; /* p = pi (pi - 1) / 2 + pj, pj < pi */
    int32_t pi = 1;
    while ((pi + 1) * pi / 2 <= p) pi++;
    const int32_t pj = p - pi * (pi - 1) / 2, i = r + hb * BLK + pi, j = r + hb * BLK + pj;
    if (i < nc) {
      const float *Q = hb ? P1 : P0;
      float s = 0.0f, sq = 0.0f;
      const float *ki = Kn + i * KP, *kj = Kn + j * KP, *gi = G + i * KP, *gj = G + j * KP, *qi = Q + pi * KP;
#pragma unroll 2
      for (int32_t d = 0; d < K4; d += 4) {
        const float4 a4 = ld4(ki + d), b4 = ld4(kj + d), g4 = ld4(gi + d), h4 = ld4(gj + d), q4 = ld4(qi + d);
        /* the CPU's terms: (k_i k_j) e and (q_i k_j) e */
        const float e0 = dsp_dev_expf(g4.x - h4.x), e1 = dsp_dev_expf(g4.y - h4.y);
        const float e2 = dsp_dev_expf(g4.z - h4.z), e3 = dsp_dev_expf(g4.w - h4.w);
        s = kda_mul_add(__fmul_rn(a4.x, b4.x), e0, s), sq = kda_mul_add(__fmul_rn(q4.x, b4.x), e0, sq);
        s = kda_mul_add(__fmul_rn(a4.y, b4.y), e1, s), sq = kda_mul_add(__fmul_rn(q4.y, b4.y), e1, sq);
        s = kda_mul_add(__fmul_rn(a4.z, b4.z), e2, s), sq = kda_mul_add(__fmul_rn(q4.z, b4.z), e2, sq);
        s = kda_mul_add(__fmul_rn(a4.w, b4.w), e3, s), sq = kda_mul_add(__fmul_rn(q4.w, b4.w), e3, sq);
      }
      A[i * CP + j] = s;
      out.Aqk[(size_t)i * C + j] = sq;
    }
  }
  __syncthreads();
  /* Qg = q exp(G), KG = k exp(G_last - G) and exp(G_last) out; k exp(G) (W's
   * right side) kept in registers until X replaces G and Kn. ke holds normalised q
   * first. */
  float ke[KS];
#pragma unroll
  for (int u = 0; u < KS; u++) {
    const int32_t e = u * NT + tid, i = e / K, d = e - i * K;
    ke[u] = e < nc * K ? QN(i, d) : 0.0f;
  }
#pragma unroll
  for (int u = 0; u < KS; u++) { /* as P0's: values past the rows from row 0, only the stores conditional */
    const bool in = u * NT + tid < nc * K;
    const int32_t e = in ? u * NT + tid : 0, i = e / K, d = e - i * K;
    const float gi = G[i * KP + d], ex = dsp_dev_expf(gi), kn = Kn[i * KP + d];
    const float qg = ke[u] * ex, kg = kn * dsp_dev_expf(G[(nc - 1) * KP + d] - gi);
    asm volatile("" ::"f"(qg), "f"(kg), "f"(ex)); /* made here: nvcc would sink them into the branch */
    if (in) {
      out.Qg[(size_t)i * K + d] = qg;
      out.KG[(size_t)i * K + d] = kg;
      ke[u] = kn * ex;
    }
  }
  for (int32_t d = tid; d < K; d += NT) out.eg[d] = dsp_dev_expf(G[(nc - 1) * KP + d]);
  __syncthreads();
  /* X slab 0: k exp(G) then v; L = diag(beta) A in place */
#pragma unroll
  for (int u = 0; u < KS; u++) {
    const int32_t e = u * NT + tid, i = e / K, d = e - i * K;
    if (e < nc * K) X[i * XW + d] = ke[u];
  }
  fill_v(a.r.v, c0, hv, nc, K, V, 0, X, XW);
  for (int32_t e = tid; e < nc * C; e += NT) { /* T's sums start from L */
    const int32_t i = e >> 6, m = e & (C - 1);
    if (m < i) {
      const float l = A[i * CP + m] * bt[i];
      A[i * CP + m] = l, T[i * CP + m] = l;
    }
  }
  __syncthreads();
  /* T = (I + L)^-1: T_ij = -(L_ij + sum_{j<m<i} L_im T_mj), m ascending, in four 16-row phases. Phase b first
   * finishes block b's rows: each column's terms from rows inside the block, a step per row, four lanes a column
   * (rows 16 b + q + 4 k) ordered by __syncwarp. Rows m of block b are then final, and every later row takes their
   * terms, in m order, one (row, column) a thread. So each sum gets its terms in the CPU's order. T holds the sums,
   * -T_ij, until Tb. */
  for (int32_t b0 = 0; b0 < nc; b0 += BLK) {
    {
      const int32_t j = tid >> 2, q = tid & 3;
      for (int32_t s = 0; s < BLK - 1; s++) {
        const int32_t m = b0 + s;
        __syncwarp(); /* row m's last term, added by another lane of the column at step s - 1 */
        if (j < m && m < nc) {
          const float tm = -T[m * CP + j];
#pragma unroll
          for (int32_t k = 0; k < BLK / 4; k++) {
            const int32_t i = b0 + q + 4 * k;
            if (i > m && i < nc) T[i * CP + j] = kda_mul_add(A[i * CP + m], tm, T[i * CP + j]);
          }
        }
      }
    }
    __syncthreads();
    const int32_t r0 = b0 + BLK, nj = b0 + BLK, mend = b0 + BLK < nc ? b0 + BLK : nc;
    if (r0 >= nc) break;
    for (int32_t e = tid; e < (nc - r0) * nj; e += NT) {
      const int32_t i = r0 + e / nj, j = e - (i - r0) * nj;
      float t = T[i * CP + j];
      for (int32_t m = b0 > j + 1 ? b0 : j + 1; m < mend; m++) t = kda_mul_add(A[i * CP + m], -T[m * CP + j], t);
      T[i * CP + j] = t;
    }
    __syncthreads();
  }
  /* Tb = T diag(beta), transposed over L: TbT[j][i] = Tb_ij (zero above the diagonal) */
  for (int32_t e = tid; e < C * C; e += NT) {
    const int32_t j = e >> 6, i = e & (C - 1);
    TbT[e] = j < i ? -T[i * CP + j] * bt[j] : j == i ? bt[i] : 0.0f;
  }
  __syncthreads();

  /* [W | Ur] = Tb [k exp(G) | v], 256 columns of X at a time: thread tiles of 8
   * rows x 4 columns, rows 8 p and 56 - 8 p (p = warp & 3) so every warp walks
   * 72 terms; each sum in j order from 0 */
  const int32_t pr = warp & 3, half = warp >> 2;
  const bool vec = (K & 3) == 0 && (V & 3) == 0;
  for (int32_t s0 = 0; s0 < K + V; s0 += XS) {
    const int32_t sw = K + V - s0 < XS ? K + V - s0 : XS, nq = (sw + 3) >> 2;
    if (s0 > 0) {
      __syncthreads();
      fill_v(a.r.v, c0, hv, nc, K, V, s0, X, XW);
      __syncthreads();
    }
    for (int32_t q = half * 32 + lane; q < nq; q += 64)
      for (int32_t t2 = 0; t2 < 2; t2++) {
        const int32_t i0 = t2 ? C - 8 - 8 * pr : 8 * pr;
        if (i0 >= nc) continue;
        float acc[8][4];
#pragma unroll
        for (int r = 0; r < 8; r++)
#pragma unroll
          for (int cc = 0; cc < 4; cc++) acc[r][cc] = 0.0f;
        const float *xp = X + 4 * q, *tp = TbT + i0;
#pragma unroll 2
        for (int32_t j = 0; j < i0; j++, xp += XW, tp += C) wy_terms(acc, tp, xp, 0);
        const int32_t je = i0 + 8 < nc ? i0 + 8 : nc;
        for (int32_t j = i0; j < je; j++, xp += XW, tp += C) wy_terms(acc, tp, xp, j - i0);
        const int32_t col = s0 + 4 * q;
#pragma unroll
        for (int r = 0; r < 8; r++) {
          const int32_t i = i0 + r;
          if (i >= nc) break;
          if (vec && col + 3 < K + V) {
            float *dst = col < K ? out.W + (size_t)i * K + col : out.Ur + (size_t)i * V + col - K;
            *reinterpret_cast<float4 *>(dst) = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
          } else {
#pragma unroll
            for (int cc = 0; cc < 4; cc++) {
              const int32_t cl = col + cc;
              if (cl < K) out.W[(size_t)i * K + cl] = acc[r][cc];
              else if (cl < K + V) out.Ur[(size_t)i * V + cl - K] = acc[r][cc];
            }
          }
        }
      }
  }
#undef QN
#undef BULK
}

static size_t intra_smem(int32_t K, int32_t V) { return intra_lay(K, V).total * sizeof(float); }

/* ---- pass 2 ---------------------------------------------------------------------------
 * Two groups of NT threads over a chunk's two phases, __syncthreads between:
 *   phase 1: the state group U = Ur - W S; the output group Qg S (o's first sum);
 *   phase 2: the state group S' = exp(G_last) S + KG^T U into the other state
 *            buffer; the output group Aqk U (o's second sum), and o.
 * So o leaves the series, and each phase runs two products side by side. The
 * next chunk's rows land during phase 2 (two W/KG buffers, two U buffers).
 * Every sum is the one-group form's, in the same order.
 * In a group, thread (rg, cq) of BV / 4 column quads: rows RT rg .. RT rg + RT - 1
 * and columns 4 cq .. 4 cq + 3 of the U and o tiles, read as float4 (K padded to K4,
 * a multiple of 4, with zeros); state rows by quads of 4 likewise. */
/* A chunk's [nc][K] rows of W, Qg or KG in registers (K a multiple of 4),
 * fetched one phase ahead so the loads run under the phase before; t is the thread's index in its group. */
template <int KT> /* float4s a thread holds: KT's rows, or (KT 0) the largest K's */
struct xrows {
  static constexpr int N = C * (KT > 0 ? KT : DSP_CU_KDA_CHUNK_MAX_K) / 4 / NT;
  float4 r[N];
};

template <int KT>
__device__ static inline void x_fetch(xrows<KT> &p, const float *src, int32_t n4, int32_t t) {
  constexpr int XR = xrows<KT>::N;
#pragma unroll
  for (int u = 0; u < XR; u++) {
    const int32_t e = u * NT + t;
    p.r[u] = e < n4 ? reinterpret_cast<const float4 *>(src)[e] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

template <int KT>
__device__ static inline void x_put(const xrows<KT> &p, float *X, int32_t XP, int32_t n4, int32_t K, int32_t t) {
  constexpr int XR = xrows<KT>::N;
#pragma unroll
  for (int u = 0; u < XR; u++) {
    const int32_t e = u * NT + t, f = 4 * e, i = f / K;
    if (e < n4) *reinterpret_cast<float4 *>(X + (size_t)i * XP + (f - i * K)) = p.r[u];
  }
}

/* The rows into X: from the registers, or (K not a multiple of 4) straight from src. */
template <int KT>
__device__ static inline void x_rows(const xrows<KT> &p, bool vec, const float *src, float *X, int32_t XP, int32_t nc,
                                     int32_t K, int32_t t) {
  if (vec) x_put(p, X, XP, nc * K / 4, K, t);
  else
    for (int32_t e = t; e < nc * K; e += NT) X[(size_t)(e / K) * XP + e % K] = src[e];
}

/* acc[r][c] += sum_d X[i0 + r][d] S[d][4 cq + c], d ascending (K4 terms). */
template <int RT, int BV>
__device__ __forceinline__ void rows_times_state(float (&acc)[RT][4], const float *X, int32_t XP, const float *S,
                                                 int32_t K4, int32_t i0, int32_t cq) {
  const float *xr = X + i0 * XP, *sp = S + 4 * cq;
#pragma unroll 2
  for (int32_t d = 0; d < K4; d += 4, sp += 4 * BV) {
    float4 xv[RT];
#pragma unroll
    for (int r = 0; r < RT; r++) xv[r] = ld4(xr + r * XP + d);
    const float4 s4[4] = {ld4(sp), ld4(sp + BV),
                          ld4(sp + 2 * BV), ld4(sp + 3 * BV)};
#pragma unroll
    for (int dd = 0; dd < 4; dd++)
#pragma unroll
      for (int r = 0; r < RT; r++) {
        const float x = dd == 0 ? xv[r].x : dd == 1 ? xv[r].y : dd == 2 ? xv[r].z : xv[r].w;
        acc[r][0] = kda_mul_add(x, s4[dd].x, acc[r][0]);
        acc[r][1] = kda_mul_add(x, s4[dd].y, acc[r][1]);
        acc[r][2] = kda_mul_add(x, s4[dd].z, acc[r][2]);
        acc[r][3] = kda_mul_add(x, s4[dd].w, acc[r][3]);
      }
  }
}

/* Floats of the state pass's shared memory: states [2][K4][BV], the state group's W and KG rows [2][C][K4 + 4],
 * U [2][C][BV], the output group's Qg rows [C][K4 + 4] and Aqk [C][C + 1], exp(G_last) [2][K4]. */
__host__ __device__ static inline size_t state_floats(int32_t K, int32_t BV) {
  const size_t K4 = ((size_t)K + 3) & ~(size_t)3;
  return 2 * K4 * BV + 3 * (size_t)C * (K4 + 4) + 2 * (size_t)C * BV + (size_t)C * (C + 1) + 2 * K4;
}

template <int BV, int KT> /* KT as k_chunk_intra's */
__global__ void __launch_bounds__(2 * NT, 1) k_chunk_state(chunk_args a) {
  extern __shared__ __align__(16) float sm[];
  constexpr int CQ = BV / 4, RT = C * CQ / NT;
  const int32_t K = KT > 0 ? KT : a.r.K, V = a.r.V, tid = threadIdx.x, grp = tid / NT, t = tid % NT;
  const int32_t cq = t % CQ, i0 = t / CQ * RT, K4 = (K + 3) & ~3;
  const int32_t n = blockIdx.x, hv = blockIdx.y, v0 = (int32_t)blockIdx.z * BV;
  const int32_t slot = a.r.s.slot[n];
  if (slot < 0) return;
  const int64_t f0 = a.r.s.chunk_first[n], f1 = a.r.s.chunk_first[n + 1];
  const int64_t lo = f0 > a.c_lo ? f0 : a.c_lo, hi = f1 < a.c_hi ? f1 : a.c_hi;
  const bool empty = f0 == f1;
  if (empty ? a.window != 0 : lo >= hi) return; /* an empty sequence is done by window 0 */
  const int64_t nch = hi > lo ? hi - lo : 0;
  const int32_t XP = K4 + 4, AP = C + 1;
  const size_t SS = (size_t)K4 * BV, US = (size_t)C * BV, XS2 = (size_t)C * XP;
  float *Sb = sm, *XW = Sb + 2 * SS, *XK = XW + XS2, *Ub = XK + XS2, *XQ = Ub + 2 * US, *Aq = XQ + XS2;
  float *egb = Aq + (size_t)C * AP;
  const int64_t KV = (int64_t)K * V, hoff = (int64_t)hv * KV;
  float *own = a.r.state + (int64_t)slot * a.r.slot_stride + hoff;
  const float *src = lo == f0 ? ((!a.r.s.has || a.r.s.has[n]) ? own : NULL) : a.carry + (size_t)((a.window - 1) & 1) * a.r.HV * KV + hoff;
  /* the state group fetches KG and W a phase ahead where K is a template's (a K from the arguments holds too many
     registers for that beside the products) */
  const bool ahead = (K & 3) == 0 && KT > 0;
  xrows<KT> pf;
  auto span = [&](int64_t k, int64_t &c0, int32_t &nc) { chunk_span(a.r.s, n, lo + k, c0, nc); };
  auto scr = [&](int64_t k) { return scr_at(a.scratch, lo + k - a.c_lo, a.r.HV, hv, K, V); };
  /* src's rows into X: from pf where they were fetched ahead, else now */
  auto rows_in = [&](const float *rows, float *X, int32_t nc) {
    if (ahead) x_put(pf, X, XP, nc * K / 4, K, t);
    else x_rows(pf, false, rows, X, XP, nc, K, t);
  };
  auto fetch = [&](const float *rows, int32_t nc) {
    if (ahead) x_fetch(pf, rows, nc * K / 4, t);
  };
  /* rows into X now (the loads in flight together where K is a template's multiple of 4) */
  auto rows_now = [&](const float *rows, float *X, int32_t nc) {
    if (ahead) {
      xrows<KT> r;
      x_fetch(r, rows, nc * K / 4, t);
      x_put(r, X, XP, nc * K / 4, K, t);
    } else
      x_rows(pf, false, rows, X, XP, nc, K, t);
  };
  /* chunk k's Ur columns into U and exp(G_last) into eg (the state group) */
  auto stage_u = [&](int64_t k, int32_t nc, float *U, float *eg) {
    const chunk_scr sc = scr(k);
    float tu[BV / 4];
#pragma unroll
    for (int u = 0; u < BV / 4; u++) {
      const int32_t e = u * NT + t, i = e / BV, j = e % BV;
      tu[u] = i < nc && v0 + j < V ? sc.Ur[(size_t)i * V + v0 + j] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < BV / 4; u++) U[u * NT + t] = tu[u];
    for (int32_t d = t; d < K4; d += NT) eg[d] = d < K ? sc.eg[d] : 0.0f;
  };
  for (int32_t e = tid; e < K4 * BV; e += 2 * NT) { /* rows K .. K4 - 1 stay zero, as X's columns there */
    const int32_t d = e / BV, j = e % BV;
    Sb[e] = src && d < K && v0 + j < V ? src[(int64_t)d * V + v0 + j] : 0.0f;
  }
  for (int32_t e = tid; e < C * XP; e += 2 * NT) XW[e] = XK[e] = XQ[e] = 0.0f;
  __syncthreads();
  if (nch > 0) { /* chunk 0's inputs: W, Ur and exp(G_last) (KG ahead), Qg */
    int64_t c0;
    int32_t nc;
    span(0, c0, nc);
    if (grp == 0) {
      rows_now(scr(0).W, XW, nc);
      fetch(scr(0).KG, nc);
      stage_u(0, nc, Ub, egb);
    } else {
      rows_now(scr(0).Qg, XQ, nc);
    }
  }
  __syncthreads();
  float acc[RT][4];
  for (int64_t k = 0; k < nch; k++) {
    int64_t c0;
    int32_t nc;
    span(k, c0, nc);
    const chunk_scr sc = scr(k);
    const float *S = Sb + (size_t)(k & 1) * SS, *eg = egb + (size_t)(k & 1) * K4;
    float *U = Ub + (size_t)(k & 1) * US;
#pragma unroll
    for (int r = 0; r < RT; r++)
#pragma unroll
      for (int q = 0; q < 4; q++) acc[r][q] = 0.0f;
    /* phase 1 */
    if (grp == 0) {
      rows_in(sc.KG, XK, nc); /* read in phase 2 */
      if (k + 1 < nch) {
        int64_t c0n;
        int32_t ncn;
        span(k + 1, c0n, ncn);
        fetch(scr(k + 1).W, ncn);
      }
      rows_times_state<RT, BV>(acc, XW, XP, S, K4, i0, cq); /* U = Ur - W S */
#pragma unroll
      for (int r = 0; r < RT; r++)
#pragma unroll
        for (int q = 0; q < 4; q++) U[(i0 + r) * BV + 4 * cq + q] -= acc[r][q];
    } else {
      for (int32_t e = t; e < C * C; e += NT) { /* Aqk, zero past the chunk and above the diagonal */
        const int32_t i = e / C, m = e % C;
        Aq[(size_t)i * AP + m] = i < nc && m <= i ? sc.Aqk[(size_t)i * C + m] : 0.0f;
      }
      rows_times_state<RT, BV>(acc, XQ, XP, S, K4, i0, cq); /* o's Qg S */
    }
    __syncthreads();
    /* phase 2 */
    if (grp == 0) {
      if (k + 1 < nch) { /* the next chunk's W, Ur and exp(G_last) (its KG ahead) */
        int64_t c0n;
        int32_t ncn;
        span(k + 1, c0n, ncn);
        rows_in(scr(k + 1).W, XW, ncn);
        fetch(scr(k + 1).KG, ncn);
        stage_u(k + 1, ncn, Ub + (size_t)((k + 1) & 1) * US, egb + (size_t)((k + 1) & 1) * K4);
      }
      /* S' = exp(G_last) S + KG^T U, by (quad of rows d, quad of columns) */
      float *Sn = Sb + (size_t)((k + 1) & 1) * SS;
      for (int32_t e = t; e < K4 / 4 * CQ; e += NT) {
        const int32_t d0 = e / CQ * 4, c4 = e % CQ * 4;
        float sa[4][4];
#pragma unroll
        for (int dd = 0; dd < 4; dd++)
#pragma unroll
          for (int q = 0; q < 4; q++) sa[dd][q] = 0.0f;
        const float *xp = XK + d0, *up = U + c4;
#pragma unroll 4
        for (int32_t i = 0; i < nc; i++, xp += XP, up += BV) {
          const float4 kg = ld4(xp), u = ld4(up);
          const float ks[4] = {kg.x, kg.y, kg.z, kg.w}, us[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
          for (int dd = 0; dd < 4; dd++)
#pragma unroll
            for (int q = 0; q < 4; q++) sa[dd][q] = kda_mul_add(ks[dd], us[q], sa[dd][q]);
        }
#pragma unroll
        for (int dd = 0; dd < 4; dd++)
#pragma unroll
          for (int q = 0; q < 4; q++) {
            const size_t o = (size_t)(d0 + dd) * BV + c4 + q;
            Sn[o] = kda_mul_add(eg[d0 + dd], S[o], sa[dd][q]);
          }
      }
    } else {
      float ac2[RT][4];
#pragma unroll
      for (int r = 0; r < RT; r++)
#pragma unroll
        for (int q = 0; q < 4; q++) ac2[r][q] = 0.0f;
      /* Aq is zero above the diagonal: the rows' common range of m adds nothing */
      const int32_t ml = i0 + RT - 1 < nc - 1 ? i0 + RT - 1 : nc - 1;
      const float *ar = Aq + i0 * AP, *up = U + 4 * cq;
      for (int32_t m = 0; m <= ml; m++, up += BV) {
        const float4 u = ld4(up);
#pragma unroll
        for (int r = 0; r < RT; r++) {
          const float x = ar[r * AP + m];
          ac2[r][0] = kda_mul_add(x, u.x, ac2[r][0]);
          ac2[r][1] = kda_mul_add(x, u.y, ac2[r][1]);
          ac2[r][2] = kda_mul_add(x, u.z, ac2[r][2]);
          ac2[r][3] = kda_mul_add(x, u.w, ac2[r][3]);
        }
      }
#pragma unroll
      for (int r = 0; r < RT; r++) {
        const int32_t i = i0 + r;
        if (i >= nc) continue;
        uint16_t *orow = a.r.o + (c0 + i) * a.r.o_tok + hv * a.r.o_head + v0;
#pragma unroll
        for (int q = 0; q < 4; q++)
          if (v0 + 4 * cq + q < V) orow[4 * cq + q] = dsp_dev_bf16_bits(acc[r][q] + ac2[r][q]);
      }
      if (k + 1 < nch) { /* the next chunk's Qg (this chunk's was read in phase 1) */
        int64_t c0n;
        int32_t ncn;
        span(k + 1, c0n, ncn);
        rows_now(scr(k + 1).Qg, XQ, ncn);
      }
    }
    __syncthreads();
  }
  const float *S = Sb + (size_t)(nch & 1) * SS;
  float *dst = !empty && hi < f1 ? a.carry + (size_t)(a.window & 1) * a.r.HV * KV + hoff : (a.r.s.write_final ? own : NULL);
  if (dst)
    for (int32_t e = tid; e < K * BV; e += 2 * NT) {
      const int32_t d = e / BV, j = e % BV;
      if (v0 + j < V) dst[(int64_t)d * V + v0 + j] = S[e];
    }
}

static size_t state_smem(int32_t K, int32_t BV) { return state_floats(K, BV) * sizeof(float); }

template <int BV>
static dsp_status launch_state(const chunk_args &a, cudaStream_t st) {
  const size_t smem = state_smem(a.r.K, BV);
  void (*kern)(chunk_args) = a.r.K == 128  ? k_chunk_state<BV, 128>
                             : a.r.K == 64 ? k_chunk_state<BV, 64>
                                           : k_chunk_state<BV, 0>;
  DSP_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const dim3 grid((unsigned)a.r.s.num_seqs, (unsigned)a.r.HV, (unsigned)((a.r.V + BV - 1) / BV));
  kern<<<grid, 2 * NT, smem, st>>>(a);
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
    const size_t smem = intra_smem(K, V);
    void (*kern)(chunk_args) = K == 128 ? k_chunk_intra<128> : K == 64 ? k_chunk_intra<64> : k_chunk_intra<0>;
    DSP_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kern<<<dim3((unsigned)(c_hi - c_lo), (unsigned)HV), NT, smem, st>>>(a);
    DSP_CUDA_TRY_LAUNCH();
  }
  if (tile == 16) return launch_state<16>(a, st);
  if (tile == 64) return launch_state<64>(a, st);
  return launch_state<32>(a, st);
}
