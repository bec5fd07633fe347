/* GQA attention over the KV cache on the tensor cores (layers.h, "attention,
 * tensor-core form"; chosen by DSPARK_CUDA_ATTENTION=tc). One block of four
 * warps per (group of rows that read one slot, KV head): its query heads'
 * (row, head) pairs are the rows of m16n8k16 products, 16 or 32 of them.
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
#include <stdint.h>

#include "kernels/cuda/attention_rows.cuh"
#include "kernels/cuda/common/devmath.cuh"
#include "kernels/cuda/layers.h"

#define TC_WARPS 4
#define TC_THREADS (32 * TC_WARPS)
#define TC_CHUNK 128 /* z and p.v partials: keys [128 c, 128 c + 128) */
#define TC_STAGE 64  /* value rows per staged buffer (two buffers) */

__device__ __forceinline__ uint32_t tc_saddr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* d += a b, one m16n8k16 tile: bf16 operands, fp32 accumulators. */
__device__ __forceinline__ void tc_mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void tc_ldsm(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void tc_ldsm_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/* 16 bytes global -> shared, or 16 zero bytes where !ok (nothing is read). */
__device__ __forceinline__ void tc_cp16(uint32_t dst, const void *src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void tc_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void tc_cp_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* Shared memory: q [R][D + 8], scores / p [R][LP], values [2][TC_STAGE][D + 8] (bf16; the 16-byte pads keep
 * ldmatrix's eight rows on distinct banks). */
__host__ __device__ __forceinline__ int64_t tc_pitch(int64_t L) { return (L + TC_CHUNK - 1) / TC_CHUNK * TC_CHUNK + 8; }
static size_t tc_smem(int mt, int64_t D, int64_t L) {
  return (size_t)(16 * mt * (D + 8) + 16 * mt * tc_pitch(L) + 2 * TC_STAGE * (D + 8)) * 2;
}

template <int MT, int DC>
__global__ void __launch_bounds__(TC_THREADS) k_attention_tc(dsp_cu_attention_args a) {
  constexpr int D = 32 * DC, QP = D + 8, VP = D + 8, R = 16 * MT, NTW = D / 8 / TC_WARPS;
  static_assert(NTW % 2 == 0, "value fragments come two n-tiles at a time");
  extern __shared__ __align__(16) unsigned char tc_sm[];
  __shared__ float red[TC_WARPS][R];
  __shared__ int nks[R];
  const int64_t L = a.max_len, ts = a.kv_stride, LP = tc_pitch(L), group = a.q.heads / a.kv_heads;
  uint16_t *qs = (uint16_t *)tc_sm, *sc = qs + R * QP, *vs = sc + (size_t)R * LP;
  const int rb = a.rows_per_block, gs = a.heads_per_block;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int64_t t0 = (int64_t)blockIdx.x * rb, kvh = blockIdx.y, h0 = kvh * group + (int64_t)blockIdx.z * gs;
  const int64_t tend = t0 + rb < a.q.rows ? t0 + rb : a.q.rows;
  for (int64_t r0 = t0; r0 < tend;) {
    const int64_t slot = dsp_att_slot(a, r0);
    int64_t re = r0 + 1;
    while (re < tend && dsp_att_slot(a, re) == slot) re++;
    const int np = (int)(re - r0) * gs;
    if (tid < R) nks[tid] = tid < np ? (int)dsp_att_keys(a, r0 + tid / gs) : 0;
    for (int i = tid; i < R * D; i += TC_THREADS) {
      const int p = i / D, d = i % D;
      const dsp_cu_view &v = a.q;
      qs[p * QP + d] = p < np ? *((const uint16_t *)v.data + (r0 + p / gs) * v.s_row + (h0 + p % gs) * v.s_head +
                                  (int64_t)d * v.s_dim)
                              : (uint16_t)0;
    }
    __syncthreads();
    int nkmax = 1;
    for (int p = 0; p < R; p++) nkmax = nks[p] > nkmax ? nks[p] : nkmax;
    const uint16_t *kb = a.k + (slot * L) * ts + kvh * D, *vb = a.v + (slot * L) * ts + kvh * D;

    /* q fragments: k step 2c takes words x, y of the 16-byte piece at dims 32c + 8q, k step 2c + 1 words z, w */
    uint32_t qa[MT][DC][2][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int c = 0; c < DC; c++) {
        const uint4 lo = *(const uint4 *)(qs + (mt * 16 + g) * QP + 32 * c + 8 * q);
        const uint4 hi = *(const uint4 *)(qs + (mt * 16 + g + 8) * QP + 32 * c + 8 * q);
        qa[mt][c][0][0] = lo.x, qa[mt][c][0][1] = hi.x, qa[mt][c][0][2] = lo.y, qa[mt][c][0][3] = hi.y;
        qa[mt][c][1][0] = lo.z, qa[mt][c][1][1] = hi.z, qa[mt][c][1][2] = lo.w, qa[mt][c][1][3] = hi.w;
      }

    /* scores: warp w takes the 8-key tiles w, w + 4, ... */
    float mx[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) mx[mt][0] = mx[mt][1] = -INFINITY;
    const int ntile = (nkmax + 7) / 8;
    for (int t = warp; t < ntile; t += TC_WARPS) {
      const int key = t * 8 + g;
      uint4 kw[DC]; /* rows past the run's keys are never read (they may be unwritten) */
#pragma unroll
      for (int c = 0; c < DC; c++)
        kw[c] = key < nkmax ? *(const uint4 *)(kb + (int64_t)key * ts + 32 * c + 8 * q) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int c = 0; c < DC; c++) {
          tc_mma(acc, qa[mt][c][0][0], qa[mt][c][0][1], qa[mt][c][0][2], qa[mt][c][0][3], kw[c].x, kw[c].y);
          tc_mma(acc, qa[mt][c][1][0], qa[mt][c][1][1], qa[mt][c][1][2], qa[mt][c][1][3], kw[c].z, kw[c].w);
        }
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int pair = mt * 16 + g + 8 * (e >> 1), k2 = t * 8 + 2 * q + (e & 1);
          if (pair < np && k2 < nks[pair]) {
            const float v = dsp_dev_round_bf16(__fmul_rn(dsp_dev_round_bf16(acc[e]), a.scale));
            sc[pair * LP + k2] = dsp_dev_bf16_bits(v);
            mx[mt][e >> 1] = v > mx[mt][e >> 1] ? v : mx[mt][e >> 1];
          }
        }
      }
    }
    /* the max per pair (exact in any order): the quad's lanes, then the warps */
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

    /* z and p: warp w takes pairs w, w + 4, ...; p = 0 past a pair's keys up to the 16-key groups p.v reads */
    const int kp = (nkmax + 15) & ~15;
    for (int p = warp; p < np; p += TC_WARPS) {
      float m = red[0][p];
      for (int w = 1; w < TC_WARPS; w++) m = red[w][p] > m ? red[w][p] : m;
      const int n = nks[p];
      float z = 0.0f;
      for (int c0 = 0; c0 < n; c0 += TC_CHUNK) {
        float zl = 0.0f;
#pragma unroll
        for (int u = 0; u < TC_CHUNK / 32; u++) {
          const int j = c0 + lane + 32 * u;
          if (j < n) zl = __fadd_rn(zl, expf(__fsub_rn(dsp_dev_bf16_val(sc[p * LP + j]), m)));
        }
        for (int o = 16; o > 0; o >>= 1) zl = __fadd_rn(zl, __shfl_xor_sync(0xffffffffu, zl, o));
        z = __fadd_rn(z, zl);
      }
      for (int j = lane; j < kp; j += 32) {
        const float e = j < n ? expf(__fsub_rn(dsp_dev_bf16_val(sc[p * LP + j]), m)) : 0.0f;
        sc[p * LP + j] = j < n ? dsp_dev_bf16_bits(__fdiv_rn(e, z)) : (uint16_t)0;
      }
    }
    /* rows past the pairs: zeros, so their (discarded) products stay finite */
    for (int i = tid; i < (R - np) * kp; i += TC_THREADS) sc[(np + i / kp) * LP + i % kp] = 0;

    /* p.v: warp w owns dims 8 NTW w ..; values staged 64 rows at a time, zero rows past the run's keys */
    float tot[MT][NTW][4], cacc[MT][NTW][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int n8 = 0; n8 < NTW; n8++)
#pragma unroll
        for (int e = 0; e < 4; e++) tot[mt][n8][e] = cacc[mt][n8][e] = 0.0f;
    const int nst = (kp + TC_STAGE - 1) / TC_STAGE;
    auto stage = [&](int s) {
      uint16_t *dst = vs + (size_t)(s & 1) * TC_STAGE * VP;
      for (int i = tid; i < TC_STAGE * (D / 8); i += TC_THREADS) {
        const int r = i / (D / 8), c8 = i % (D / 8), key = s * TC_STAGE + r;
        const bool ok = key < nkmax;
        tc_cp16(tc_saddr(dst + r * VP + 8 * c8), vb + (int64_t)(ok ? key : 0) * ts + 8 * c8, ok);
      }
      tc_cp_commit();
    };
    __syncthreads(); /* p is written; the value buffers are free */
    stage(0);
    for (int s = 0; s < nst; s++) {
      if (s + 1 < nst) {
        stage(s + 1);
        tc_cp_wait<1>();
      } else {
        tc_cp_wait<0>();
      }
      __syncthreads();
      const uint16_t *vsb = vs + (size_t)(s & 1) * TC_STAGE * VP;
#pragma unroll
      for (int gi = 0; gi < TC_STAGE / 16; gi++) {
        const int k0 = s * TC_STAGE + gi * 16;
        if (k0 >= kp) break;
        uint32_t af[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) tc_ldsm(af[mt], tc_saddr(sc + (mt * 16 + (lane & 15)) * LP + k0 + (lane >> 4) * 8));
#pragma unroll
        for (int n2 = 0; n2 < NTW / 2; n2++) {
          const int d0 = (warp * NTW + 2 * n2) * 8;
          uint32_t bv[4];
          tc_ldsm_t(bv, tc_saddr(vsb + (gi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * VP + d0 + (lane >> 4) * 8));
#pragma unroll
          for (int mt = 0; mt < MT; mt++) {
            tc_mma(cacc[mt][2 * n2], af[mt][0], af[mt][1], af[mt][2], af[mt][3], bv[0], bv[1]);
            tc_mma(cacc[mt][2 * n2 + 1], af[mt][0], af[mt][1], af[mt][2], af[mt][3], bv[2], bv[3]);
          }
        }
        if ((k0 / 16) % (TC_CHUNK / 16) == TC_CHUNK / 16 - 1 || k0 + 16 >= kp) { /* a chunk ends */
#pragma unroll
          for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int n8 = 0; n8 < NTW; n8++)
#pragma unroll
              for (int e = 0; e < 4; e++) {
                tot[mt][n8][e] = __fadd_rn(tot[mt][n8][e], cacc[mt][n8][e]);
                cacc[mt][n8][e] = 0.0f;
              }
        }
      }
      __syncthreads(); /* every warp has read this buffer before it is refilled */
    }
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
    __syncthreads(); /* the next run reuses the shared memory */
    r0 = re;
  }
}

#define TC_KERNELS(X) X(1, 2) X(2, 2) X(1, 4) X(2, 4)

extern "C" int dsp_cu_attention_tc_config(dsp_cu_attention_args *a, int row_group, size_t smem_limit) {
  const int64_t D = a->q.dim, Hkv = a->kv_heads;
  if ((D != 64 && D != 128) || Hkv < 1 || a->q.heads % Hkv || a->kv_stride % 8 || ((uintptr_t)a->k & 15) ||
      ((uintptr_t)a->v & 15))
    return 0;
  const int group = (int)(a->q.heads / Hkv);
  if (group > 32) return 0;
  int rb = row_group > 1 ? row_group : 1;
  if (rb * group > 32) rb = 32 / group > 1 ? 32 / group : 1;
  int mt = rb * group <= 16 ? 1 : 2;
  if (tc_smem(mt, D, a->max_len) > smem_limit && group <= 16) mt = 1, rb = 16 / group > 1 ? 16 / group : 1;
  if (tc_smem(mt, D, a->max_len) > smem_limit) return 0;
  a->rows_per_block = rb, a->heads_per_block = group, a->pairs = 16 * mt;
  return 1;
}

extern "C" cudaError_t dsp_cu_attention_tc_prepare(size_t smem_limit) {
#define TC_SET(mt, dc) \
  if (const cudaError_t e = dsp_att_optin((const void *)k_attention_tc<mt, dc>, smem_limit)) return e;
  TC_KERNELS(TC_SET)
#undef TC_SET
  return cudaSuccess;
}

extern "C" void dsp_cu_attention_tc(const dsp_cu_attention_args *a, cudaStream_t s) {
  const int mt = a->pairs / 16, dc = (int)(a->q.dim / 32);
  const void *k = NULL;
#define TC_PICK(m_, d_) if (mt == m_ && dc == d_) k = (const void *)k_attention_tc<m_, d_>;
  TC_KERNELS(TC_PICK)
#undef TC_PICK
  if (a->q.rows <= 0 || !k) return;
  const dim3 grid((unsigned)((a->q.rows + a->rows_per_block - 1) / a->rows_per_block), (unsigned)a->kv_heads, 1);
  void *args[] = {(void *)a};
  cudaLaunchKernel(k, grid, dim3(TC_THREADS), args, tc_smem(mt, a->q.dim, a->max_len), s);
}
