/* GQA attention over the KV cache on the tensor cores (layers.h, "attention,
 * tensor-core form"; the default, DSPARK_CUDA_ATTENTION=fp32 opts out). One block of four
 * warps per (group of rows that read one slot, KV head), or a cluster of up to
 * 8 such blocks sharing its keys when the launch leaves SMs idle or the cache
 * is past one block's shared memory for its scores: its query
 * heads' (row, head) pairs are the rows of m16n8k16 products, 16 or 32 of them.
 *   s: q.k as bf16 products, one m16n8k16 k step of 16 dims at a time onto +0:
 *      32-dim chunk c gives two steps, the first over dims 32c + 8q + {0..3},
 *      the second over 32c + 8q + {4..7} (q = 0..3), chunks in increasing
 *      order, so a key row feeds a lane's fragments in one 16-byte load.
 *      Then bf16, times the scale, bf16.
 *   z: per 128-key chunk, lane i of a warp sums keys 128c + i + 32u (u = 0..3)
 *      in order, an xor butterfly over 16, 8, 4, 2, 1; the chunks in order.
 *   p.v: per 128-key chunk, its 16-key groups in increasing order onto +0
 *      (one m16n8k16 each); the chunks added in order in fp32.
 * Every order is fixed by key and dim indices alone, so a launch's grouping of
 * rows never changes a bit. A pair's keys past its own count enter p.v as
 * exact zeros (p = 0) times the same run's later rows: a row's bits depend on
 * the run it shares only if such a value is inf or NaN (0 x inf), or in the
 * sign of an exactly zero output. */
#include <cooperative_groups.h>
#include <limits.h>
#include <stdint.h>

#include "kernels/cuda/attention_rows.cuh"
#include "kernels/cuda/common/devmath.cuh"
#include "kernels/cuda/common/launch.cuh"
#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/common/sync.cuh"
#include "kernels/cuda/layers.h"

#define TC_CHUNK 128 /* z and p.v partials: keys [128 c, 128 c + 128) */
#define TC_STAGE 64  /* value rows per staged buffer (two buffers) at D 128; 128 / D times that below it */
#define TC_SPLIT 8   /* blocks per cluster at most (the portable cluster size) */

namespace cg = cooperative_groups;


/* Keys are split over the S blocks of a cluster in whole chunks (S = 1: one block does them all): block b owns
 * chunks [b cpb, b cpb + cpb), cpb = ceil(chunks / S), and shares its per-pair maxima, per-chunk z partials and
 * per-chunk p.v partials through distributed shared memory; every sum still runs chunk by chunk in order, so the
 * split is a launch choice that changes no bit. */
__host__ __device__ __forceinline__ int64_t tc_cpb(int64_t L, int S) {
  return ((L + TC_CHUNK - 1) / TC_CHUNK + S - 1) / S;
}
/* Value rows a stage: the same bytes at every head dim, so a short head's p.v waits on as few copies; half of them
 * in the form with q in shared memory (qr 0), so its blocks fit two an SM over more cache positions. */
__host__ __device__ constexpr int tc_stage_rows(int64_t D, int qr) { return (int)(TC_STAGE * 128 / D) / (qr ? 1 : 2); }
/* Shared memory: q [R][D + 8], scores / p [P (+ 1)][LP] for the block's P (row, head) pairs and, where P < R, one
 * row of zeros (the A fragments' lanes of absent pairs read it), values [2][stage rows][D + 8] (bf16; the 16-byte pads keep
 * ldmatrix's eight rows on distinct banks); with S > 1 also z partials [cpb][R] and p.v partials [cpb][P][D]
 * (fp32). Sized by the pairs, not the m-tiles' 16 R rows, so a decode block (P = the GQA group) holds a cache
 * about 16 / (group + 1) times longer. */
__host__ __device__ __forceinline__ int64_t tc_pitch(int64_t L, int S) { return tc_cpb(L, S) * TC_CHUNK + 8; }
/* Rows of scores: the P pairs', and the zero row where the m-tiles have rows past them. */
__host__ __device__ __forceinline__ int tc_rows(int P, int mt) { return P < 16 * mt ? P + 1 : P; }
static size_t tc_smem(int mt, int P, int qr, int64_t D, int64_t L, int S) {
  size_t b = (size_t)(16 * mt * (D + 8) + tc_rows(P, mt) * tc_pitch(L, S) + 2 * tc_stage_rows(D, qr) * (D + 8)) * 2;
  if (S > 1) b += (size_t)tc_cpb(L, S) * (16 * mt + P * D) * 4;
  return b;
}

/* Every block of the cluster (or of this block, S = 1) has reached this point and its shared writes are visible. */
__device__ __forceinline__ void tc_sync(int S) {
  if (S > 1) cg::this_cluster().sync();
  else __syncthreads();
}
template <typename T>
__device__ __forceinline__ const T *tc_peer(const T *p, int rank) {
  return cg::this_cluster().map_shared_rank(p, rank);
}

/* ((0 + x(0)) + x(1)) + ... + x(n - 1) in fp32, the loads issued eight at a time (peers' shared memory is far). */
template <typename F>
__device__ __forceinline__ float tc_chain(int n, F x) {
  float acc = 0.0f;
  for (int c0 = 0; c0 < n; c0 += 8) {
    float v[8];
#pragma unroll
    for (int u = 0; u < 8; u++) v[u] = c0 + u < n ? x(c0 + u) : 0.0f;
#pragma unroll
    for (int u = 0; u < 8; u++)
      if (c0 + u < n) acc = __fadd_rn(acc, v[u]);
  }
  return acc;
}

/* W warps per block: 8 at D 128, else 4 (each warp's part of the scores and p.v halves against 4;
 * the dims a warp owns change, never a dim's sum). */
/* QR 1: the q fragments stay in registers. Two m-tiles' take 64 registers more than one's, and ptxas's default
 * target spills them, so that form asks for one block an SM's registers (200 at D 128). QR 0 (two m-tiles only)
 * reads them from shared memory per use, with half the key rows in flight and half the value stage, so two blocks
 * fit an SM (128 registers) where their shared memory does: a batch-32 verify's 256 blocks then run in one wave. */
template <int MT, int DC, int W, int QR>
__global__ void __launch_bounds__(32 * W, QR && MT == 2 ? 1 : 16 / W) k_attention_tc(dsp_cu_attention_args a) {
  dsp_dev_launch_dependents();
  dsp_dev_grid_wait();
  constexpr int D = 32 * DC, QP = D + 8, VP = D + 8, R = 16 * MT, NTW = D / 8 / W, TC_WARPS = W, TC_THREADS = 32 * W;
  constexpr int ST = tc_stage_rows(D, QR);
  static_assert(NTW % 2 == 0 || NTW == 1, "value fragments come two n-tiles at a time, or one");
  extern __shared__ __align__(16) unsigned char tc_sm[];
  __shared__ float red[TC_WARPS][R], bmx[R], gmx[R], gz[R]; /* block's max; with S > 1 the run's max and z */
  __shared__ int nks[R];
  const int S = a.key_split, b = (int)(blockIdx.x % (unsigned)S);
  const int64_t L = a.max_len, ts = a.kv_stride, LP = tc_pitch(L, S), group = a.q.heads / a.kv_heads;
  const int P = a.pairs; /* the pairs a block holds at most (rows per block x heads per block) */
  uint16_t *qs = (uint16_t *)tc_sm, *sc = qs + R * QP, *vs = sc + (size_t)tc_rows(P, MT) * LP;
  float *zp = (float *)(vs + 2 * ST * VP), *pp = zp + tc_cpb(L, S) * R; /* S > 1 only */
  const int rb = a.rows_per_block, gs = a.heads_per_block;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int64_t t0 = (int64_t)(blockIdx.x / (unsigned)S) * rb, kvh = blockIdx.y;
  const int64_t h0 = kvh * group + (int64_t)blockIdx.z * gs;
  const int64_t tend = t0 + rb < a.q.rows ? t0 + rb : a.q.rows;
  for (int64_t r0 = t0; r0 < tend;) {
    const int64_t slot = dsp_att_slot(a, r0), re = dsp_att_run_end(a, r0, tend);
    const int np = (int)(re - r0) * gs;
    if (tid < R) nks[tid] = tid < np ? (int)dsp_att_keys(a, r0 + tid / gs) : 0;
    dsp_att_stage_q<D, QP>(a, qs, r0, h0, np, R, gs, tid, TC_THREADS);
    __syncthreads();
    int nkmax = 1;
    for (int p = 0; p < R; p++) nkmax = nks[p] > nkmax ? nks[p] : nkmax;
    const uint16_t *kb = a.k + (slot * L) * ts + kvh * D, *vb = a.v + (slot * L) * ts + kvh * D;
    /* this block's chunks [c0, c1) and keys [k0b, kend); p.v reads p up to kpe (16-key groups) */
    const int nch = (nkmax + TC_CHUNK - 1) / TC_CHUNK, cpb = (nch + S - 1) / S, c0 = b * cpb;
    const int c1 = c0 + cpb < nch ? c0 + cpb : nch, k0b = c0 * TC_CHUNK, kp = (nkmax + 15) & ~15;
    const int kend = c1 > c0 ? (c1 * TC_CHUNK < nkmax ? c1 * TC_CHUNK : nkmax) : k0b;
    const int kpe = c1 > c0 ? (c1 * TC_CHUNK < kp ? c1 * TC_CHUNK : kp) : k0b;

    /* the first values load while the scores and the softmax run (the buffers are free at a run's start) */
    const int kw_ = kpe - k0b, nst = (kw_ + ST - 1) / ST;
    auto stage = [&](int s) {
      uint16_t *dst = vs + (size_t)(s & 1) * ST * VP;
      for (int i = tid; i < ST * (D / 8); i += TC_THREADS) {
        const int r = i / (D / 8), c8 = i % (D / 8), key = k0b + s * ST + r;
        const bool ok = key < nkmax;
        dsp_cp16(dsp_att_saddr(dst + r * VP + 8 * c8), vb + (int64_t)(ok ? key : 0) * ts + 8 * c8, ok);
      }
      dsp_cp_commit();
    };
    if (nst > 0) stage(0);

    /* q fragments: k step 2c takes words x, y of the 16-byte piece at dims 32c + 8q, k step 2c + 1 words z, w; the
       QR form keeps them in registers */
    constexpr bool QREG = QR != 0;
    auto qfrag = [&](int mt, int c, uint32_t(&f)[2][4]) {
      const uint4 lo = *(const uint4 *)(qs + (mt * 16 + g) * QP + 32 * c + 8 * q);
      const uint4 hi = *(const uint4 *)(qs + (mt * 16 + g + 8) * QP + 32 * c + 8 * q);
      f[0][0] = lo.x, f[0][1] = hi.x, f[0][2] = lo.y, f[0][3] = hi.y;
      f[1][0] = lo.z, f[1][1] = hi.z, f[1][2] = lo.w, f[1][3] = hi.w;
    };
    uint32_t qa[QREG ? MT : 1][DC][2][4];
    if (QREG)
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int c = 0; c < DC; c++) qfrag(mt, c, qa[mt][c]);

    /* scores of the block's keys: warp w takes its 8-key tiles w, w + W, ..., the key rows of U of them loaded
       before their products (one load's latency per U tiles, not per tile) */
    float mx[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) mx[mt][0] = mx[mt][1] = -INFINITY;
    /* the fewest keys among this lane's pairs (0 when one is past the run's): tiles below it store without a
       check per pair */
    int lmin = INT_MAX;
#pragma unroll
    for (int p = 0; p < 2 * MT; p++) {
      const int pair = 8 * p + g, n = pair < np ? nks[pair] : 0;
      lmin = n < lmin ? n : lmin;
    }
    constexpr int U = QREG ? 8 / DC : DC == 1 ? 2 : 4 / DC;
    const int tend8 = (kend + 7) / 8;
    for (int tb = k0b / 8 + warp; tb < tend8; tb += U * TC_WARPS) {
      uint4 kw[U][DC]; /* rows past the run's keys are never read (they may be unwritten) */
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int key = (tb + u * TC_WARPS) * 8 + g;
#pragma unroll
        for (int c = 0; c < DC; c++)
          kw[u][c] = key < kend ? *(const uint4 *)(kb + (int64_t)key * ts + 32 * c + 8 * q) : make_uint4(0, 0, 0, 0);
      }
      /* a tile's score: bf16, times the scale, bf16 (pair and key past the run's: not stored). The lane's two
         keys of a pair are rounded in one instruction and stored in one word (the hardware rounding: the same
         bits but a NaN's payload, which no output sees: p of a NaN is NaN, and outputs round canonically) */
      auto score = [&](const float (&acc)[4], int t, int mt) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
          int n = 2; /* the pair's keys from the lane's first on, where below 2 */
          if (t * 8 + 8 > lmin) {
            const int pair = mt * 16 + g + 8 * h;
            n = (pair < np ? nks[pair] : 0) - (t * 8 + 2 * q);
            if (n <= 0) continue;
          }
          const uint32_t at = dsp_att_saddr(sc) + 2u * (uint32_t)((mt * 16 + 8 * h + g) * LP + t * 8 + 2 * q - k0b);
          const uint32_t b = dsp_dev_bf16x2_hw(__fmul_rn(dsp_dev_round_bf16_hw(acc[2 * h]), a.scale),
                                               __fmul_rn(dsp_dev_round_bf16_hw(acc[2 * h + 1]), a.scale));
          const float v0 = __uint_as_float(b << 16), v1 = __uint_as_float(b & 0xFFFF0000u);
          mx[mt][h] = v0 > mx[mt][h] ? v0 : mx[mt][h];
          if (n >= 2) {
            dsp_att_sts32(at, b);
            mx[mt][h] = v1 > mx[mt][h] ? v1 : mx[mt][h];
          } else {
            dsp_att_sts16(at, (uint16_t)b);
          }
        }
      };
      /* every (tile, m-tile) sum runs over c in order, k step 2c then 2c + 1 */
      if constexpr (QREG) {
#pragma unroll
        for (int u = 0; u < U; u++) {
          const int t = tb + u * TC_WARPS;
          if (t >= tend8) break;
#pragma unroll
          for (int mt = 0; mt < MT; mt++) {
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int c = 0; c < DC; c++) {
              dsp_mma16816(acc, qa[mt][c][0][0], qa[mt][c][0][1], qa[mt][c][0][2], qa[mt][c][0][3], kw[u][c].x,
                           kw[u][c].y);
              dsp_mma16816(acc, qa[mt][c][1][0], qa[mt][c][1][1], qa[mt][c][1][2], qa[mt][c][1][3], kw[u][c].z,
                           kw[u][c].w);
            }
            score(acc, t, mt);
          }
        }
      } else { /* each q fragment read once for the U tiles (a tile past the keys: zeros, unused) */
        float acc[U][MT][4];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
          for (int mt = 0; mt < MT; mt++) acc[u][mt][0] = acc[u][mt][1] = acc[u][mt][2] = acc[u][mt][3] = 0.0f;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
          for (int c = 0; c < DC; c++) {
            uint32_t f[2][4];
            qfrag(mt, c, f);
#pragma unroll
            for (int u = 0; u < U; u++) {
              dsp_mma16816(acc[u][mt], f[0][0], f[0][1], f[0][2], f[0][3], kw[u][c].x, kw[u][c].y);
              dsp_mma16816(acc[u][mt], f[1][0], f[1][1], f[1][2], f[1][3], kw[u][c].z, kw[u][c].w);
            }
          }
#pragma unroll
        for (int u = 0; u < U; u++) {
          if (tb + u * TC_WARPS >= tend8) break;
#pragma unroll
          for (int mt = 0; mt < MT; mt++) score(acc[u][mt], tb + u * TC_WARPS, mt);
        }
      }
    }
    /* the max per pair (exact in any order): the quad's lanes, the warps, then the cluster's blocks */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        float x = mx[mt][h];
        for (int o = 1; o <= 2; o <<= 1) {
          const float y = __shfl_xor_sync(0xffffffffu, x, o);
          x = y > x ? y : x;
        }
        if (q == 0) red[warp][mt * 16 + g + 8 * h] = x;
      }
    __syncthreads();
    if (tid < R) {
      float m = red[0][tid];
      for (int w = 1; w < TC_WARPS; w++) m = red[w][tid] > m ? red[w][tid] : m;
      bmx[tid] = gmx[tid] = m;
    }
    tc_sync(S);
    if (S > 1) { /* the run's max per pair: every block's, loaded at once */
      if (tid < R) {
        float y[TC_SPLIT], m = -INFINITY;
#pragma unroll
        for (int r = 0; r < TC_SPLIT; r++) y[r] = r < S ? tc_peer(bmx, r)[tid] : -INFINITY;
#pragma unroll
        for (int r = 0; r < TC_SPLIT; r++) m = y[r] > m ? y[r] : m;
        gmx[tid] = m;
      }
      __syncthreads();
    }
    /* chunk c's z partial of pair p: lane i sums keys 128c + i + 32u in order, then the butterfly */
    auto zchunk = [&](int p, int c, float m) {
      const int n = nks[p];
      float zl = 0.0f;
#pragma unroll
      for (int u = 0; u < TC_CHUNK / 32; u++) {
        const int j = c * TC_CHUNK + lane + 32 * u;
        if (j < n) zl = __fadd_rn(zl, expf(__fsub_rn(dsp_dev_bf16_val(sc[p * LP + j - k0b]), m)));
      }
      for (int o = 16; o > 0; o >>= 1) zl = __fadd_rn(zl, __shfl_xor_sync(0xffffffffu, zl, o));
      return zl;
    };
    if (S > 1) { /* the block's chunks' z partials, for every block of the cluster to add in order */
      for (int p = warp; p < np; p += TC_WARPS) {
        const float m = gmx[p];
        for (int c = c0; c < c1; c++) {
          const float zl = c * TC_CHUNK < nks[p] ? zchunk(p, c, m) : 0.0f;
          if (lane == 0) zp[(c - c0) * R + p] = zl;
        }
      }
      tc_sync(S);
      if (tid < R) /* z per pair: the chunks' partials in order */
        gz[tid] = tc_chain((nks[tid] + TC_CHUNK - 1) / TC_CHUNK,
                           [&](int c) { return tc_peer(zp, c / cpb)[(c % cpb) * R + tid]; });
      __syncthreads();
    }

    /* z and p: warp w takes pairs w, w + 4, ...; p = 0 past a pair's keys up to the 16-key groups p.v reads */
    for (int p = warp; p < np; p += TC_WARPS) {
      const float m = gmx[p];
      const int n = nks[p];
      float z = 0.0f;
      if (S > 1) z = gz[p];
      else
        for (int c = 0; c * TC_CHUNK < n; c++) z = __fadd_rn(z, zchunk(p, c, m));
      /* four keys a lane at a time, the division's fast path without a branch per key; a group with a quotient
         off that path (a score far below the max) takes __fdiv_rn for its four */
      const dsp_dev_divisor dz = dsp_dev_divisor_of(z);
      uint16_t *sp = sc + p * LP - k0b;
      for (int j0 = k0b + lane; j0 < kpe; j0 += 128) {
        float e[4];
        uint32_t slow = 0;
        uint16_t o[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
          const int j = j0 + 32 * u;
          const bool in = j < n && j < kpe;
          /* a key out of the pair's reads its lane's first key instead: no branch, and no other lane writes it */
          const float x = expf(__fsub_rn(dsp_dev_bf16_val(sp[in ? j : j0]), m));
          e[u] = in ? x : 0.0f;
          uint32_t fast;
          const float q = dsp_dev_div_fast(e[u], dz, fast);
          slow |= (uint32_t)in & (fast ^ 1u);
          o[u] = in ? dsp_dev_bf16_bits_hw(q) : (uint16_t)0; /* a NaN p's payload: the output's rounding */
        }
        if (slow)
#pragma unroll
          for (int u = 0; u < 4; u++)
            if (j0 + 32 * u < n && j0 + 32 * u < kpe) o[u] = dsp_dev_bf16_bits(__fdiv_rn(e[u], z));
#pragma unroll
        for (int u = 0; u < 4; u++)
          if (j0 + 32 * u < kpe) sp[j0 + 32 * u] = o[u];
      }
    }
    /* rows past the run's pairs and the zero row: zeros, so the absent pairs' (discarded) products stay finite */
    for (int i = tid; i < (tc_rows(P, MT) - np) * kw_; i += TC_THREADS) sc[(np + i / kw_) * LP + i % kw_] = 0;

    /* p.v over the block's keys: warp w owns dims 8 NTW w ..; values staged 64 rows at a time, zero rows past
       the run's keys */
    float tot[MT][NTW][4], cacc[MT][NTW][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int n8 = 0; n8 < NTW; n8++)
#pragma unroll
        for (int e = 0; e < 4; e++) tot[mt][n8][e] = cacc[mt][n8][e] = 0.0f;
    __syncthreads(); /* p is written */
    for (int s = 0; s < nst; s++) {
      if (s + 1 < nst) {
        stage(s + 1);
        dsp_cp_wait<1>();
      } else {
        dsp_cp_wait<0>();
      }
      __syncthreads();
      const uint16_t *vsb = vs + (size_t)(s & 1) * ST * VP;
#pragma unroll
      for (int gi = 0; gi < ST / 16; gi++) {
        const int k0 = k0b + s * ST + gi * 16;
        if (k0 >= kpe) break;
        uint32_t af[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
          dsp_ldsm4(af[mt], dsp_att_saddr(sc + (mt * 16 + (lane & 15) < P ? mt * 16 + (lane & 15) : P) * LP + k0 - k0b +
                                          (lane >> 4) * 8));
#pragma unroll
        for (int n2 = 0; n2 < NTW / 2; n2++) {
          const int d0 = (warp * NTW + 2 * n2) * 8;
          uint32_t bv[4];
          dsp_ldsm4_t(bv, dsp_att_saddr(vsb + (gi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * VP + d0 + (lane >> 4) * 8));
#pragma unroll
          for (int mt = 0; mt < MT; mt++) {
            dsp_mma16816(cacc[mt][2 * n2], af[mt][0], af[mt][1], af[mt][2], af[mt][3], bv[0], bv[1]);
            dsp_mma16816(cacc[mt][2 * n2 + 1], af[mt][0], af[mt][1], af[mt][2], af[mt][3], bv[2], bv[3]);
          }
        }
        if (NTW == 1) { /* one n-tile a warp (D 32): its 16 keys x 8 dims */
          uint32_t bv[2];
          dsp_ldsm2_t(bv, dsp_att_saddr(vsb + (gi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * VP + warp * 8));
#pragma unroll
          for (int mt = 0; mt < MT; mt++)
            dsp_mma16816(cacc[mt][0], af[mt][0], af[mt][1], af[mt][2], af[mt][3], bv[0], bv[1]);
        }
        if ((k0 / 16) % (TC_CHUNK / 16) == TC_CHUNK / 16 - 1 || k0 + 16 >= kpe) { /* a chunk ends */
          const int cl = k0 / TC_CHUNK - c0;
#pragma unroll
          for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int n8 = 0; n8 < NTW; n8++)
#pragma unroll
              for (int e = 0; e < 4; e++) {
                if (S > 1 && mt * 16 + g + 8 * (e >> 1) < P)
                  pp[((size_t)cl * P + mt * 16 + g + 8 * (e >> 1)) * D + (warp * NTW + n8) * 8 + 2 * q + (e & 1)] =
                      cacc[mt][n8][e];
                else
                  tot[mt][n8][e] = __fadd_rn(tot[mt][n8][e], cacc[mt][n8][e]);
                cacc[mt][n8][e] = 0.0f;
              }
        }
      }
      __syncthreads(); /* every warp has read this buffer before it is refilled */
    }
    if (S > 1) { /* block b adds its share of the (pair, dim) outputs over all chunks in order */
      tc_sync(S);
      const int n = np * D, share = (n + S - 1) / S, i1 = (b + 1) * share < n ? (b + 1) * share : n;
      for (int i = b * share + tid; i < i1; i += TC_THREADS) {
        const int pair = i / D, d = i % D;
        const float acc =
            tc_chain(nch, [&](int c) { return tc_peer(pp, c / cpb)[((size_t)(c % cpb) * P + pair) * D + d]; });
        *((uint16_t *)a.out.data + (r0 + pair / gs) * a.out.s_row + (h0 + pair % gs) * a.out.s_head +
          (int64_t)d * a.out.s_dim) = dsp_dev_bf16_bits(acc);
      }
    } else {
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n8 = 0; n8 < NTW; n8++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int pair = mt * 16 + g + 8 * (e >> 1), d = (warp * NTW + n8) * 8 + 2 * q + (e & 1);
            if (pair < np)
              *((uint16_t *)a.out.data + (r0 + pair / gs) * a.out.s_row + (h0 + pair % gs) * a.out.s_head +
                (int64_t)d * a.out.s_dim) = dsp_dev_bf16_bits(tot[mt][n8][e]);
          }
    }
    tc_sync(S); /* the next run reuses the shared memory, which the cluster's blocks may still be reading */
    r0 = re;
  }
}

#define TC_KERNELS(X) \
  X(1, 1, 4, 1) X(2, 1, 4, 1) X(2, 1, 4, 0) X(1, 2, 4, 1) X(2, 2, 4, 1) X(2, 2, 4, 0) X(1, 4, 8, 1) X(2, 4, 8, 1) X(2, 4, 8, 0)

extern "C" int dsp_cu_attention_tc_config(dsp_cu_attention_args *a, int row_group, int sms, size_t smem_limit,
                                          int long_caches, int q_form) {
  const int64_t D = a->q.dim, Hkv = a->kv_heads, L = a->max_len;
  if ((D != 32 && D != 64 && D != 128) || Hkv < 1 || a->q.heads % Hkv || a->kv_stride % 8 || ((uintptr_t)a->k & 15) ||
      ((uintptr_t)a->v & 15))
    return 0;
  const int group = (int)(a->q.heads / Hkv);
  if (group > 32) return 0;
  /* the fewest blocks a cluster whose shared memory holds one row's pairs' scores over the cache: a property of
     the shape, so every call of a cache past one block's runs split (long_caches; at group 4 and head dim 128 one
     block holds about 19000 positions) */
  const int mt_min = group > 16 ? 2 : 1;
  int need = 1;
  while (long_caches && need < TC_SPLIT && tc_smem(mt_min, group, 1, D, L, need) > smem_limit) need *= 2;
  if (tc_smem(mt_min, group, 1, D, L, need) > smem_limit) return 0;
  const int r16 = 16 / group > 1 ? 16 / group : 1; /* the rows one m-tile holds */
  /* rows per block: the hint's, as many as 32 pairs and the shared memory (the scores grow with the pairs) hold */
  int rb = row_group > 1 ? row_group : 1;
  if (rb * group > 32) rb = 32 / group > 1 ? 32 / group : 1;
  while (rb > 1 && tc_smem(rb * group > 16 ? 2 : 1, rb * group, 1, D, L, need) > smem_limit) rb--;
  int mt = rb * group <= 16 ? 1 : 2;
  /* the key split (a launch choice): doubled while the blocks still fit on the SMs once and each owns a chunk */
  const int64_t chunks = (L + TC_CHUNK - 1) / TC_CHUNK;
  const auto split_for = [&](int r, int m) {
    const int64_t blocks = (a->q.rows + r - 1) / r * Hkv;
    int s = need;
    while (s < TC_SPLIT && blocks * 2 * s <= sms && 2 * s <= chunks && tc_smem(m, r * group, 1, D, L, 2 * s) <= smem_limit)
      s *= 2;
    return s;
  };
  const auto filled = [&](int r, int m) {
    const int64_t b = (a->q.rows + r - 1) / r * Hkv * split_for(r, m);
    return b < sms ? b : (int64_t)sms;
  };
  /* few rows (a batch-1 verify or draft block): one m-tile, and the most rows a block whose blocks, split, still
     fill the SMs as rows alone would: rows alone split two ways ran faster on an H200 than rows over two m-tiles
     split eight ways (0.038 against 0.048 ms), and every row more in a block shares its keys' loads and q.k mma */
  if (rb > 1 && group <= 16 && a->q.rows * Hkv * 2 <= sms) {
    int r = rb < r16 ? rb : r16;
    while (r > 1 && filled(r, 1) < filled(1, 1)) r--;
    rb = r, mt = 1;
  }
  /* two m-tiles whose q-in-shared-memory form would not fit two an SM (a cache past about 1300 positions at head
     dim 128): blocks of one m-tile instead where two of those fit (q_form 0 only; a launch choice, the same bits) */
  const auto two_an_sm = [&](int m, int p, int qr, int s) {
    return 2 * (tc_smem(m, p, qr, D, L, s) + 3072) <= smem_limit + 3072;
  };
  if (mt == 2 && group <= 16 && q_form == 0 && !two_an_sm(2, rb * group, 0, need) && two_an_sm(1, r16 * group, 1, need))
    mt = 1, rb = r16;
  const int split = split_for(rb, mt);
  a->rows_per_block = rb, a->heads_per_block = group, a->pairs = rb * group, a->key_split = split;
  /* two m-tiles: q in shared memory where that form's blocks then fit two an SM (an SM holds smem_limit plus the
     kernels' static bytes and 1 KB reserved a block, about 3 KB; the static bytes are at most 2 KB); q_form 1
     and 2 force registers and shared memory (a launch choice: the same bits) */
  a->q_reg = mt == 1 || q_form == 1 || (q_form == 0 && !two_an_sm(2, rb * group, 0, split));
  a->per_sm = two_an_sm(mt, rb * group, a->q_reg, split) ? 2 : 1;
  /* 8 warps at D 128 for every launch: a batch's blocks run one or two per SM (their shared memory), and their z
     and p passes (an expf and a division per key and pair) are bound by issue, not bytes (4 warps: verify at
     batch 32 19% slower, bench/RESULTS.md) */
  a->warps = D == 128 ? 8 : 4; /* at D 32 a warp's p.v takes one 8-dim n-tile */
  a->q_vec = a->q.s_dim == 1 && a->q.s_row % 8 == 0 && a->q.s_head % 8 == 0 && !((uintptr_t)a->q.data & 15);
  return 1;
}

extern "C" cudaError_t dsp_cu_attention_tc_prepare(size_t smem_limit) {
#define TC_SET(mt, dc, w, qr) \
  if (const cudaError_t e = dsp_att_optin((const void *)k_attention_tc<mt, dc, w, qr>, smem_limit)) return e;
  TC_KERNELS(TC_SET)
#undef TC_SET
  return cudaSuccess;
}

extern "C" void dsp_cu_attention_tc(const dsp_cu_attention_args *a, cudaStream_t s) {
  const int mt = a->pairs > 16 ? 2 : 1, dc = (int)(a->q.dim / 32);
  const void *k = NULL;
#define TC_PICK(m_, d_, w_, qr_) \
  if (mt == m_ && dc == d_ && a->warps == w_ && (a->q_reg != 0) == (qr_ != 0)) k = (const void *)k_attention_tc<m_, d_, w_, qr_>;
  TC_KERNELS(TC_PICK)
#undef TC_PICK
  if (a->q.rows <= 0 || !k) return;
  const int S = a->key_split;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)((a->q.rows + a->rows_per_block - 1) / a->rows_per_block * S), (unsigned)a->kv_heads, 1);
  cfg.blockDim = dim3((unsigned)(32 * a->warps));
  cfg.dynamicSmemBytes = tc_smem(mt, a->pairs, a->q_reg, a->q.dim, a->max_len, S);
  cfg.stream = s;
  cudaLaunchAttribute at[2];
  int na = 0;
  if (S > 1) {
    at[na].id = cudaLaunchAttributeClusterDimension;
    at[na].val.clusterDim.x = (unsigned)S, at[na].val.clusterDim.y = 1, at[na].val.clusterDim.z = 1;
    na++;
  }
  if (dsp_cuda_pdl(s)) at[na++] = dsp_pdl_attribute(); /* the kernel waits (dsp_dev_grid_wait) before it reads */
  cfg.attrs = at, cfg.numAttrs = (unsigned)na;
  void *args[] = {(void *)a};
  cudaLaunchKernelExC(&cfg, k, args);
}
