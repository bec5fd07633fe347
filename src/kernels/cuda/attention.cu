/* GQA attention over the KV cache (layers.h, "attention"). One block of
 * AT_THREADS threads per (group of rb consecutive rows, KV head, gs of that
 * head's query heads). The rows of a group that read the same slot (a run)
 * share every key and value load across their (row, head) pairs, so a block
 * reads a slot's cache once for up to 16 pairs. The per-pair arithmetic is
 * the contract's whatever rb and gs are (the launcher picks them for speed):
 *   score: q.k in order over d (fmaf), rounded, times the scale, rounded;
 *   z: threads 0..255 sum keys r, r + 256, ... in order, butterflies in
 *      warps 0..7, the warps added in order;
 *   p.v: per dim, 8 contiguous key ranges [w n / 8, (w+1) n / 8), each in
 *      key order, the ranges added in order.
 * Scores and then probabilities live in shared memory as bf16: both are
 * rounded to bf16 by the contract, so nothing is lost. */
#include <stdint.h>

#include "kernels/cuda/attention_rows.cuh"
#include "kernels/cuda/common/devmath.cuh"
#include "kernels/cuda/common/sync.cuh"
#include "kernels/cuda/layers.h"

#define AT_THREADS 512
#define AT_WARPS (AT_THREADS / 32)
#define AT_ZTHREADS 256 /* z: the contract's 256 thread-strided partial sums */
#define AT_ZWARPS (AT_ZTHREADS / 32)
#define AT_RANGES 8     /* p.v: the contract's 8 key ranges */
#define AT_MAXP 16      /* (row, head) pairs per block */
#define AT_VKEYS 8      /* p.v: value rows a warp loads ahead */

__device__ __forceinline__ const uint16_t *at_in(const dsp_cu_view &v, int64_t r, int64_t h, int64_t d) {
  return (const uint16_t *)v.data + r * v.s_row + h * v.s_head + d * v.s_dim;
}

/* Eight bf16 values of a 16-byte load, widened in memory order. */
__device__ __forceinline__ void at_unpack8(uint4 w, float (&f)[8]) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    f[2 * i] = dsp_dev_bf16_val((uint16_t)(u[i] & 0xFFFFu));
    f[2 * i + 1] = dsp_dev_bf16_val((uint16_t)(u[i] >> 16));
  }
}

template <int P>
__device__ __forceinline__ void at_scores(const dsp_cu_attention_args &a, const float *qs, uint16_t *sc,
                                          const uint16_t *kb, const uint16_t *vb, const int *nk, int np, int nkmax,
                                          float *m) {
  const int64_t D = a.q.dim, ts = a.kv_stride, L = a.max_len;
  const bool vec = D % 8 == 0 && ts % 8 == 0;
  constexpr int AT_KCHUNKS = P >= 16 ? 4 : P >= 8 ? 8 : 16; /* 16-byte loads of a key row issued together */
  for (int j = threadIdx.x; j < nkmax; j += AT_THREADS) {
    const uint16_t *kr = kb + j * ts;
    const uint16_t *vr = vb + j * ts;
    for (int64_t d = 0; d < D; d += 64) asm volatile("prefetch.global.L2 [%0];" ::"l"(vr + d)); /* for p.v */
    float s[P];
#pragma unroll
    for (int p = 0; p < P; p++) s[p] = 0.0f;
    if (vec) {
      for (int64_t d0 = 0; d0 < D; d0 += 8 * AT_KCHUNKS) { /* up to 128 dims' loads in flight */
        uint4 w[AT_KCHUNKS];
#pragma unroll
        for (int c = 0; c < AT_KCHUNKS; c++)
          w[c] = d0 + 8 * c < D ? *(const uint4 *)(kr + d0 + 8 * c) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int c = 0; c < AT_KCHUNKS; c++) {
          if (d0 + 8 * c >= D) break;
          float kv[8];
          at_unpack8(w[c], kv);
#pragma unroll
          for (int p = 0; p < P; p++) {
            if (p >= np) break;
            const float4 qa = *(const float4 *)(qs + p * D + d0 + 8 * c);
            const float4 qb = *(const float4 *)(qs + p * D + d0 + 8 * c + 4);
            float x = s[p];
            x = __fmaf_rn(qa.x, kv[0], x), x = __fmaf_rn(qa.y, kv[1], x);
            x = __fmaf_rn(qa.z, kv[2], x), x = __fmaf_rn(qa.w, kv[3], x);
            x = __fmaf_rn(qb.x, kv[4], x), x = __fmaf_rn(qb.y, kv[5], x);
            x = __fmaf_rn(qb.z, kv[6], x), x = __fmaf_rn(qb.w, kv[7], x);
            s[p] = x;
          }
        }
      }
    } else {
      for (int64_t d = 0; d < D; d++) {
        const float kv = dsp_dev_bf16_val(kr[d]);
#pragma unroll
        for (int p = 0; p < P; p++)
          if (p < np) s[p] = __fmaf_rn(qs[p * D + d], kv, s[p]);
      }
    }
#pragma unroll
    for (int p = 0; p < P; p++) {
      if (p >= np || j >= nk[p]) continue;
      const float v = dsp_dev_round_bf16(__fmul_rn(dsp_dev_round_bf16(s[p]), a.scale));
      sc[p * L + j] = dsp_dev_bf16_bits(v);
      m[p] = v > m[p] ? v : m[p];
    }
  }
}

/* p.v with 16-byte value loads: the 64 threads of range w take octets of 8
 * dims and every `slices`-th pair; each (pair, dim) is still one chain over
 * the range's keys in key order (the same bits as the scalar form). */
template <int P, int DI>
__device__ __forceinline__ void at_pv_vec(const dsp_cu_attention_args &a, const uint16_t *sc, const uint16_t *vb,
                                          const int *nk, int np, float *part) {
  constexpr int PP = (P * DI + 7) / 8; /* pairs per thread: 64 / (D / 8) slices hold every pair */
  const int64_t D = a.q.dim, ts = a.kv_stride, L = a.max_len;
  const int oct = (int)(D / 8), slices = 64 / oct, wr = threadIdx.x / 64, t = threadIdx.x % 64;
  const int o = t % oct, sl = t / oct;
  if (sl >= slices) return;
  int pp_p[PP], j0[PP], j1[PP], J0 = (int)L, J1 = 0;
#pragma unroll
  for (int i = 0; i < PP; i++) {
    const int p = sl + slices * i;
    pp_p[i] = p < np ? p : -1;
    int n = 0; /* nk[p] by unrolled selects: a runtime index would put nk in local memory */
#pragma unroll
    for (int q = 0; q < P; q++) n = q == p && p < np ? nk[q] : n;
    j0[i] = n * wr / AT_RANGES, j1[i] = n * (wr + 1) / AT_RANGES;
    if (pp_p[i] >= 0 && j0[i] < j1[i]) J0 = j0[i] < J0 ? j0[i] : J0, J1 = j1[i] > J1 ? j1[i] : J1;
  }
  float acc[PP][8];
#pragma unroll
  for (int i = 0; i < PP; i++)
#pragma unroll
    for (int e = 0; e < 8; e++) acc[i][e] = 0.0f;
  const uint16_t *vo = vb + 8 * o;
  constexpr int U = AT_VKEYS; /* value rows loaded ahead */
  for (int j = J0; j < J1; j += U) {
    uint4 w[U];
#pragma unroll
    for (int u = 0; u < U; u++) w[u] = j + u < J1 ? *(const uint4 *)(vo + (int64_t)(j + u) * ts) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int jj = j + u;
      float v[8];
      at_unpack8(w[u], v);
#pragma unroll
      for (int i = 0; i < PP; i++) {
        if (pp_p[i] < 0 || jj < j0[i] || jj >= j1[i]) continue;
        const float pj = dsp_dev_bf16_val(sc[pp_p[i] * L + jj]);
#pragma unroll
        for (int e = 0; e < 8; e++) acc[i][e] = __fmaf_rn(pj, v[e], acc[i][e]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < PP; i++) {
    if (pp_p[i] < 0) continue;
    float *dst = part + ((size_t)wr * P + pp_p[i]) * D + 8 * o;
#pragma unroll
    for (int e = 0; e < 8; e++) dst[e] = acc[i][e];
  }
}

template <int P, int DI>
__global__ void __launch_bounds__(AT_THREADS) k_attention(dsp_cu_attention_args a) {
  dsp_dev_launch_dependents();
  dsp_dev_grid_wait();
  extern __shared__ __align__(16) unsigned char at_sm[];
  __shared__ float red[AT_WARPS][P];
  const int64_t D = a.q.dim, ts = a.kv_stride, L = a.max_len, group = a.q.heads / a.kv_heads;
  const int rb = a.rows_per_block, gs = a.heads_per_block;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float *qs = (float *)at_sm;                                      /* [P][D] */
  float *part = qs + P * D;                                        /* [AT_RANGES][P][D] */
  uint16_t *sc = (uint16_t *)(part + (size_t)AT_RANGES * P * D);   /* [P][L] */
  const int64_t t0 = (int64_t)blockIdx.x * rb, kvh = blockIdx.y, h0 = kvh * group + (int64_t)blockIdx.z * gs;
  const int64_t tend = t0 + rb < a.q.rows ? t0 + rb : a.q.rows;
  for (int64_t r0 = t0; r0 < tend;) {
    /* the run: the following rows of this group that read the same slot */
    const int64_t slot = dsp_att_slot(a, r0), re = dsp_att_run_end(a, r0, tend);
    const int np = (int)(re - r0) * gs;
    int nk[P], nkmax = 1;
#pragma unroll
    for (int p = 0; p < P; p++) {
      nk[p] = p < np ? (int)dsp_att_keys(a, r0 + p / gs) : 0;
      nkmax = nk[p] > nkmax ? nk[p] : nkmax;
    }
    for (int64_t i = tid; i < (int64_t)np * D; i += AT_THREADS) {
      const int p = (int)(i / D);
      qs[i] = dsp_dev_bf16_val(*at_in(a.q, r0 + p / gs, h0 + p % gs, i % D));
    }
    __syncthreads();
    const uint16_t *kb = a.k + (slot * L) * ts + kvh * D;
    const uint16_t *vb = a.v + (slot * L) * ts + kvh * D;
    const bool vec_pv = D % 8 == 0 && ts % 8 == 0 && ((uintptr_t)a.v & 15) == 0;
    float m[P];
#pragma unroll
    for (int p = 0; p < P; p++) m[p] = -INFINITY;
    at_scores<P>(a, qs, sc, kb, vb, nk, np, nkmax, m);
    /* the max per pair (exact in any order; a +-0 tie gives the same e) */
#pragma unroll
    for (int p = 0; p < P; p++) {
      float x = m[p];
      for (int o = 16; o > 0; o >>= 1) {
        const float y = __shfl_xor_sync(0xffffffffu, x, o);
        x = y > x ? y : x;
      }
      if (lane == 0) red[warp][p] = x;
    }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < P; p++) {
      float x = red[0][p];
      for (int w = 1; w < AT_WARPS; w++) x = red[w][p] > x ? red[w][p] : x;
      m[p] = x;
    }
    __syncthreads();
    /* z: the contract's partials on threads 0..255 */
    if (tid < AT_ZTHREADS) {
#pragma unroll
      for (int p = 0; p < P; p++) {
        if (p >= np) break;
        float z = 0.0f;
        for (int j = tid; j < nk[p]; j += AT_ZTHREADS)
          z = __fadd_rn(z, expf(__fsub_rn(dsp_dev_bf16_val(sc[p * L + j]), m[p])));
        for (int o = 16; o > 0; o >>= 1) z = __fadd_rn(z, __shfl_xor_sync(0xffffffffu, z, o));
        if (lane == 0) red[warp][p] = z;
      }
    }
    __syncthreads();
    float zt[P];
#pragma unroll
    for (int p = 0; p < P; p++) {
      float z = red[0][p];
      for (int w = 1; w < AT_ZWARPS; w++) z = __fadd_rn(z, red[w][p]);
      zt[p] = z;
    }
    /* p = bf16(e / z) over the scores, four keys a thread at a time through the division's fast path (no branch
       per key; a group with a quotient off that path takes __fdiv_rn) */
#pragma unroll
    for (int p = 0; p < P; p++) {
      if (p >= np) break;
      const dsp_dev_divisor dz = dsp_dev_divisor_of(zt[p]);
      uint16_t *sp = sc + p * L;
      for (int j0 = tid; j0 < nk[p]; j0 += 4 * AT_THREADS) {
        float e[4];
        uint16_t o[4];
        uint32_t slow = 0;
#pragma unroll
        for (int u = 0; u < 4; u++) {
          const int j = j0 + u * AT_THREADS;
          const bool in = j < nk[p];
          e[u] = expf(__fsub_rn(dsp_dev_bf16_val(sp[in ? j : j0]), m[p]));
          uint32_t fast;
          const float q = dsp_dev_div_fast(e[u], dz, fast);
          slow |= (uint32_t)in & (fast ^ 1u);
          o[u] = dsp_dev_bf16_bits(q);
        }
        if (slow)
#pragma unroll
          for (int u = 0; u < 4; u++) o[u] = dsp_dev_bf16_bits(__fdiv_rn(e[u], zt[p]));
#pragma unroll
        for (int u = 0; u < 4; u++)
          if (j0 + u * AT_THREADS < nk[p]) sp[j0 + u * AT_THREADS] = o[u];
      }
    }
    __syncthreads();
    if (vec_pv) at_pv_vec<P, DI>(a, sc, vb, nk, np, part);
    else {
      /* p.v: warp w sums range w % 8 for dims (w / 8) * 32 + lane + 64 i */
      {
        const int wr = warp % AT_RANGES, dh = warp / AT_RANGES;
        int j0[P], j1[P], J0 = (int)L, J1 = 0;
#pragma unroll
        for (int p = 0; p < P; p++) {
          j0[p] = nk[p] * wr / AT_RANGES, j1[p] = nk[p] * (wr + 1) / AT_RANGES;
          if (p < np && j0[p] < j1[p]) J0 = j0[p] < J0 ? j0[p] : J0, J1 = j1[p] > J1 ? j1[p] : J1;
        }
        float acc[P][DI];
#pragma unroll
        for (int p = 0; p < P; p++)
#pragma unroll
          for (int i = 0; i < DI; i++) acc[p][i] = 0.0f;
        int dd[DI];
#pragma unroll
        for (int i = 0; i < DI; i++) dd[i] = dh * 32 + lane + 64 * i;
        for (int j = J0; j < J1; j += AT_VKEYS) {
          float v[AT_VKEYS][DI];
#pragma unroll
          for (int u = 0; u < AT_VKEYS; u++)
#pragma unroll
            for (int i = 0; i < DI; i++)
              v[u][i] = j + u < J1 && dd[i] < D ? dsp_dev_bf16_val(vb[(int64_t)(j + u) * ts + dd[i]]) : 0.0f;
#pragma unroll
          for (int u = 0; u < AT_VKEYS; u++) {
            const int jj = j + u;
#pragma unroll
            for (int p = 0; p < P; p++) {
              if (p >= np) break;
              if (jj < j0[p] || jj >= j1[p]) continue;
              const float pj = dsp_dev_bf16_val(sc[p * L + jj]);
#pragma unroll
              for (int i = 0; i < DI; i++) acc[p][i] = __fmaf_rn(pj, v[u][i], acc[p][i]);
            }
          }
        }
#pragma unroll
        for (int p = 0; p < P; p++) {
          if (p >= np) break;
#pragma unroll
          for (int i = 0; i < DI; i++)
            if (dd[i] < D) part[((size_t)wr * P + p) * D + dd[i]] = acc[p][i];
        }
      }
    }
    __syncthreads();
    for (int64_t i = tid; i < (int64_t)np * D; i += AT_THREADS) {
      const int p = (int)(i / D);
      const int64_t d = i % D;
      float o = part[(size_t)p * D + d];
      for (int w = 1; w < AT_RANGES; w++) o = __fadd_rn(o, part[((size_t)w * P + p) * D + d]);
      *((uint16_t *)a.out.data + (r0 + p / gs) * a.out.s_row + (h0 + p % gs) * a.out.s_head + d * a.out.s_dim) =
          dsp_dev_bf16_bits(o);
    }
    __syncthreads(); /* the next run reuses the shared memory */
    r0 = re;
  }
}

static size_t at_smem(int P, int64_t D, int64_t L) {
  return ((size_t)P * (size_t)D * 4 * (1 + AT_RANGES) + (size_t)P * (size_t)L * 2 + 15) / 16 * 16;
}

static int at_pow2(int x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

#define AT_KERNELS(X) X(1, 1) X(2, 1) X(4, 1) X(8, 1) X(16, 1) X(1, 2) X(2, 2) X(4, 2) X(8, 2) X(16, 2) \
  X(1, 4) X(2, 4) X(4, 4) X(8, 4)

static const void *at_kernel(int P, int DI) {
#define AT_PICK(p, di) if (P == p && DI == di) return (const void *)k_attention<p, di>;
  AT_KERNELS(AT_PICK)
#undef AT_PICK
  return NULL;
}

extern "C" int dsp_cu_attention_config(dsp_cu_attention_args *a, int row_group, int sms, size_t smem_limit) {
  const int64_t D = a->q.dim, T = a->q.rows, Hkv = a->kv_heads;
  if (D < 1 || D > 256 || Hkv < 1 || a->q.heads % Hkv) return 0;
  const int group = (int)(a->q.heads / Hkv), DI = D <= 64 ? 1 : D <= 128 ? 2 : 4;
  int gs = group, rb = row_group > AT_MAXP ? AT_MAXP : row_group > 1 ? row_group : 1;
  for (;;) {
    while (group % gs) gs--;
    /* too few blocks for the SMs (one block fills an SM's registers): rows
       apart, then fewer heads per block while that still leaves one wave */
    if (rb > 1 && (T + rb - 1) / rb * Hkv * (group / gs) < sms) rb = 1;
    while (rb == 1 && gs > 1 && 2 * T * Hkv * (group / gs) <= sms)
      for (gs--; group % gs;) gs--;
    const int P = at_pow2(rb * gs);
    if (P <= AT_MAXP && P * DI <= 32 && at_smem(P, D, a->max_len) <= smem_limit) {
      a->rows_per_block = rb, a->heads_per_block = gs, a->pairs = P;
      return 1;
    }
    if (rb > 1) rb--;
    else if (gs > 1) gs--;
    else return 0;
  }
}

extern "C" cudaError_t dsp_cu_attention_prepare(size_t smem_limit) {
#define AT_SET(p, di) \
  if (const cudaError_t e = dsp_att_optin((const void *)k_attention<p, di>, smem_limit)) return e;
  AT_KERNELS(AT_SET)
#undef AT_SET
  return cudaSuccess;
}

extern "C" void dsp_cu_attention(const dsp_cu_attention_args *a, cudaStream_t s) {
  const int P = a->pairs, DI = a->q.dim <= 64 ? 1 : a->q.dim <= 128 ? 2 : 4;
  const void *k = at_kernel(P, DI);
  if (a->q.rows <= 0 || !k) return;
  const int rb = a->rows_per_block, gs = a->heads_per_block;
  const dim3 grid((unsigned)((a->q.rows + rb - 1) / rb), (unsigned)a->kv_heads,
                  (unsigned)(a->q.heads / a->kv_heads / gs));
  void *args[] = {(void *)a};
  cudaLaunchKernel(k, grid, dim3(AT_THREADS), args, at_smem(P, a->q.dim, a->max_len), s);
}
