/* The fused Markov step kernel template (see markov.h for the layout, the work
 * split and the accumulation order). Included by markov_{g,s,gx,sx}.cu, one
 * translation unit per (sampling, strict) family so the instances build in
 * parallel. CUDA C++ only. */
#ifndef DSP_CUDA_MARKOV_KERNEL_CUH
#define DSP_CUDA_MARKOV_KERNEL_CUH
#include <stdint.h>
#include <string.h>

#include "core/philox.h"
#include "kernels/cuda/common/check.h"
#include "kernels/cuda/common/devmath.cuh"
#include "kernels/cuda/common/sync.cuh"
#include "kernels/cuda/markov.h"

namespace {

constexpr int RP = DSP_MK_RP;
constexpr int KB = RP / 32;       /* 32-wide k blocks: one 16-byte load per lane each */
constexpr int ES = RP + 32;       /* E row stride in shared memory: +64 bytes puts rows g and g+1 on
                                     different bank halves, so a quarter-warp's 16-byte reads never collide */
constexpr int NW = DSP_MK_THREADS / 32;
constexpr int UNIT = 16;          /* W2 rows per unit (two n8 tiles) */

struct mk_smem_t {
  size_t e, best, prev, temp, seed, pos, w, total;
};

__host__ __device__ constexpr size_t mk_align(size_t x) { return (x + 15) & ~(size_t)15; }

__host__ __device__ inline mk_smem_t mk_smem(int mt, bool sampling, bool strict) {
  const size_t rows = (size_t)mt * 16;
  mk_smem_t L{};
  L.e = 0;
  L.best = mk_align(rows * ES * 2);
  L.prev = mk_align(L.best + rows * 8);
  L.temp = mk_align(L.prev + rows * 4);
  L.seed = mk_align(L.temp + (sampling ? rows * 4 : 0));
  L.pos = mk_align(L.seed + (sampling ? rows * 8 : 0));
  L.w = mk_align(L.pos + (sampling ? rows * 8 : 0));
  L.total = mk_align(L.w + (strict ? (size_t)NW * UNIT * RP * 2 : 0));
  return L;
}

/* 16-byte streaming load: read once per step, so not kept in L1 (L2 keeps it). */
__device__ __forceinline__ uint4 mk_ld_stream(const uint16_t *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ void mk_prefetch_bulk(const void *p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mk_prefetch_line(const void *p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}



/* d += a * b for one m16n8k16 tile: bf16 operands, fp32 accumulators. */
__device__ __forceinline__ void mk_mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned long long mk_max(unsigned long long x, unsigned long long y) {
  return x > y ? x : y;
}

/* Unit u's index in step k's list for a warp that owns units gw, gw + W, ... */
__device__ __forceinline__ int mk_unit(const dsp_mk_args &a, int k, int i, int gw, int W, int nmine) {
  const int idx = (a.serpentine && (k & 1)) ? nmine - 1 - i : i;
  return gw + idx * W;
}

/* Lane (g, q) holds, for n8 tile t and k block j, W2 row 16u + 8t + g at
 * k = 32j + 8q .. 32j + 8q + 7: exactly its B fragments for groups 2j and 2j+1
 * under the k mapping of markov.h. A warp's load instruction reads 8 rows x 64
 * contiguous bytes: whole 32-byte sectors. */
__device__ __forceinline__ void mk_load_unit(uint4 (&r)[16], const uint16_t *w2, int u, int g, int q) {
  const uint16_t *p = w2 + ((size_t)u * UNIT + g) * RP + q * 8;
#pragma unroll
  for (int t = 0; t < 2; t++)
#pragma unroll
    for (int j = 0; j < KB; j++) r[t * KB + j] = mk_ld_stream(p + (size_t)t * 8 * RP + j * 32);
}

/* L2 prefetch of item (kk, ii) of this warp's sequence: its 8 KB of W2 and its
 * base rows. */
__device__ __forceinline__ void mk_prefetch(const dsp_mk_args &a, int kk, int ii, int gw, int W, int nmine, int lane) {
  if (kk >= a.k_end) return;
  const int u = mk_unit(a, kk, ii, gw, W, nmine);
  if (lane == 0) mk_prefetch_bulk(a.w2 + (size_t)u * UNIT * RP, UNIT * RP * 2);
  const int upr = a.seg_rows >> 4, seg = a.nseg == 1 ? 0 : u / upr, l0 = (u - seg * upr) * UNIT;
  const uint16_t *bp = a.base + (size_t)seg * a.seg_stride + (size_t)kk * a.bq * a.ld + l0;
  for (int b = lane; b < a.bq; b += 32) mk_prefetch_line(bp + (size_t)b * a.ld);
}

/* E = W1[prev] for every padded batch row, into shared memory. */
__device__ __forceinline__ void mk_gather_e(const uint16_t *w1, const int32_t *sprev, uint16_t *se, int bq, int tid) {
  for (int i = tid; i < bq * (RP / 8); i += DSP_MK_THREADS) {
    const int b = i / (RP / 8), c = i % (RP / 8);
    const uint4 v = __ldg((const uint4 *)(w1 + (size_t)sprev[b] * RP) + c);
    *(uint4 *)(se + b * ES + c * 8) = v;
  }
}

/* E = W1[prev] in mma A-fragment order, for the tensor-core path: entry
 * ((mt * KB + j) * 2 + s) * 32 + lane holds lane (g, q)'s four A registers of
 * group 2j + s for batch tile mt: {E[r][p], E[r+8][p], E[r][p+2], E[r+8][p+2]}
 * as bf16 pairs, r = 16 mt + g, p = 32 j + 8 q + 4 s (the k mapping of
 * markov.h). One 16-byte shared load is then one A operand, with no register
 * shuffling, and a warp's load reads 512 contiguous bytes. */
__device__ __forceinline__ void mk_gather_frag(const uint16_t *w1, const int32_t *sprev, uint16_t *se, int bq,
                                               int tid) {
  const int n = (bq / 16) * KB * 2 * 32;
  for (int e = tid; e < n; e += DSP_MK_THREADS) {
    const int ln = e & 31, sg = (e >> 5) & 1, j = (e >> 6) % KB, mt = (e >> 6) / KB;
    const int g = ln >> 2, q = ln & 3, p = j * 32 + q * 8 + 4 * sg;
    const uint2 x0 = __ldg((const uint2 *)(w1 + (size_t)sprev[mt * 16 + g] * RP + p));
    const uint2 x1 = __ldg((const uint2 *)(w1 + (size_t)sprev[mt * 16 + g + 8] * RP + p));
    *(uint4 *)(se + (size_t)e * 8) = make_uint4(x0.x, x1.x, x0.y, x1.y);
  }
}

/* A tail kernel's launch: l->grid blocks of `threads`, `smem` bytes of dynamic
 * shared memory, cooperative when l->cooperative, programmatic (PDL) when
 * l->pdl (attr[2] holds the attributes and must live until the launch). */
inline cudaLaunchConfig_t mk_config(const dsp_mk_launch *l, int threads, size_t smem, cudaStream_t s,
                                    cudaLaunchAttribute *attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)l->grid);
  cfg.blockDim = dim3((unsigned)threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  if (l->cooperative) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeCooperative;
    attr[cfg.numAttrs++].val.cooperative = 1;
  }
  if (l->pdl) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[cfg.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
  }
  return cfg;
}

/* Waits until the grid this one may overlap (a launch with l->pdl) has finished
 * and its writes are visible; returns at once in a plain launch. Every read of
 * base comes after it. */
__device__ __forceinline__ void mk_dep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* The strict chain over 256 k for one (batch row, W2 row). */
__device__ __forceinline__ float mk_chain(const uint16_t *e, const uint16_t *w) {
  float acc = 0.0f;
#pragma unroll 4
  for (int k8 = 0; k8 < RP; k8 += 8) {
    const uint4 x = *(const uint4 *)(e + k8), y = *(const uint4 *)(w + k8);
    const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
    for (int p = 0; p < 4; p++) {
      acc = fmaf(__uint_as_float(xs[p] << 16), __uint_as_float(ys[p] << 16), acc);
      acc = fmaf(__uint_as_float(xs[p] & 0xFFFF0000u), __uint_as_float(ys[p] & 0xFFFF0000u), acc);
    }
  }
  return acc;
}

/* Every block adds one and waits for all: a grid-wide barrier for a
 * cooperative (co-resident) grid. The counter only grows within a launch.
 * A barrier that never completes traps after 5 s instead of hanging. */
__device__ __forceinline__ void mk_grid_barrier(unsigned *ctr, unsigned target) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(ctr, 1u);
    const unsigned long long t0 = dsp_dev_now_ns();
    while (dsp_dev_ld_acquire(ctr) < target) {
      __nanosleep(32);
      if (dsp_dev_now_ns() - t0 > 5000000000ull) __trap();
    }
  }
  __syncthreads();
}

/* ---- the greedy bf16 fast path (generic contract, no logits written) -------
 * Two columns at a time in packed bf16x2 registers:
 *   bias2  = cvt.rn.bf16x2.f32(acc)              (RNE, as contract 3's bf16(sum))
 *   logit2 = add.rn.bf16x2(base2, bias2)         (the exact sum rounded once to bf16.
 *            For bf16 operands this equals bf16(fp32(base + bias)): their fp32 sum is
 *            exact unless the exponents differ by 16 or more, and then both roundings
 *            give the larger operand)
 *   ord    = an order-preserving 16-bit image of each logit (negatives inverted,
 *            positives with the top bit set; the hardware's only NaN, the canonical
 *            +0x7FFF, lands on top, above +inf)
 *   key32  = ord << 16 | (0xFFFF - s), s = the column's position in this thread's
 *            sequence, which increases with the vocabulary id, so equal values keep
 *            the lower id; one unsigned max per column.
 * -0 never reaches a logit: every sum starts at +0 (the LM head, the mma
 * accumulators) and +0 + -0 = +0, so +0 is the only zero to order.
 * Keys are widened to the common 64-bit key (dsp_dev_key) before any merge
 * across lanes, so every path compares the same way. */
__device__ __forceinline__ uint32_t mk_pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ uint32_t mk_add_bf16x2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

__device__ __forceinline__ uint32_t mk_ord_bf16x2(uint32_t x) {
  const uint32_t neg = (x >> 15) & 0x00010001u;
  return x ^ ((neg * 0x7FFFu) | 0x80008000u);
}

/* One (mt, t) tile: acc as in the mma fragment (rows g, g + 8; columns c, c + 1),
 * bb0 / bb1 the base pairs of rows g / g + 8, cst = 0xFFFF - s of column c. */
__device__ __forceinline__ void mk_fast_tile(const float (&acc)[4], uint32_t bb0, uint32_t bb1, uint32_t cst,
                                             bool full, bool ok0, bool ok1, uint32_t &best0, uint32_t &best1) {
  const uint32_t o0 = mk_ord_bf16x2(mk_add_bf16x2(bb0, mk_pack_bf16x2(acc[0], acc[1])));
  const uint32_t o1 = mk_ord_bf16x2(mk_add_bf16x2(bb1, mk_pack_bf16x2(acc[2], acc[3])));
  uint32_t k00 = (o0 << 16) | cst, k01 = (o0 & 0xFFFF0000u) | (cst - 1u);
  uint32_t k10 = (o1 << 16) | cst, k11 = (o1 & 0xFFFF0000u) | (cst - 1u);
  if (!full) {
    if (!ok0) k00 = k10 = 0u;
    if (!ok1) k01 = k11 = 0u;
  }
  best0 = max(best0, max(k00, k01));
  best1 = max(best1, max(k10, k11));
}

/* The bf16 value behind a 16-bit order image (inverse of mk_ord_bf16x2). */
__device__ __forceinline__ float mk_unord(uint32_t o16) {
  const uint32_t h = (o16 & 0x8000u) ? (o16 ^ 0x8000u) : (~o16 & 0xFFFFu);
  return __uint_as_float(h << 16);
}

/* The epilogue for two adjacent vocabulary columns (id, id + 1) of batch row b:
 * acc0/acc1 are the fp32 products, bb holds the two base values (bf16 pair).
 *   bias = bf16(acc); logit = bf16(base + bias) (or fp32-add: base + bias);
 *   sampling: logits written at element lo of the logits layout, and rows with
 *   T > 0 score float(logit / T) + g (one IEEE division, one IEEE add);
 *   best = max(best, key(score, id)) over the real columns. */
/* W1 rows of the previous tokens into shared memory: the strict kernel's plain
 * rows, or the tensor-core kernels' fragment order. */
template <bool STRICT>
__device__ __forceinline__ void mk_gather(const uint16_t *w1, const int32_t *sprev, uint16_t *se, int bq, int tid) {
  if (STRICT)
    mk_gather_e(w1, sprev, se, bq, tid);
  else
    mk_gather_frag(w1, sprev, se, bq, tid);
}

/* A tail launch's per-row state: best key cleared, previous token (the anchor,
 * or the last token of the steps before k_begin), sampling metadata. */
template <bool SAMPLING>
__device__ __forceinline__ void mk_load_rows(const dsp_mk_args &a, unsigned long long *sbest, int32_t *sprev,
                                             float *st, uint64_t *sseed, int64_t *spos, int tid) {
  const int bq = a.bq;
  if (tid < bq) {
    sbest[tid] = 0ull;
    sprev[tid] = a.k_begin == 0 ? a.anchor[tid] : __ldcg(a.tokens + (size_t)(a.k_begin - 1) * bq + tid);
    if (SAMPLING) {
      st[tid] = a.temp[tid];
      sseed[tid] = a.seed[tid];
      spos[tid] = a.pos[tid];
    }
  }
}

template <bool SAMPLING>
__device__ __forceinline__ void mk_epi_pair(const dsp_mk_args &a, int k, int b, int64_t id, bool ok0, bool ok1,
                                            float acc0, float acc1, uint32_t bb, size_t lo,
                                            unsigned long long &best, const float *st, const uint64_t *sseed,
                                            const int64_t *spos) {
  const float base0 = __uint_as_float(bb << 16), base1 = __uint_as_float(bb & 0xFFFF0000u);
  const float bias0 = dsp_dev_round_bf16(acc0), bias1 = dsp_dev_round_bf16(acc1);
  const float s0 = __fadd_rn(base0, bias0), s1 = __fadd_rn(base1, bias1);
  float lg0, lg1;
  if (a.fp32_add) {
    lg0 = dsp_dev_canon_f32(s0);
    lg1 = dsp_dev_canon_f32(s1);
  } else {
    lg0 = dsp_dev_round_bf16(s0);
    lg1 = dsp_dev_round_bf16(s1);
  }
  float sc0 = lg0, sc1 = lg1;
  if (SAMPLING) {
    if (a.fp32_add)
      *(float2 *)((float *)a.logits + lo) = make_float2(lg0, lg1);
    else
      *(uint32_t *)((uint16_t *)a.logits + lo) = (__float_as_uint(lg0) >> 16) | (__float_as_uint(lg1) & 0xFFFF0000u);
    const float T = st[b];
    if (T > 0.0f && a.noise) { /* lo is even: the pair's noise is one aligned 8-byte load, read once */
      const float2 g = __ldcs((const float2 *)(a.noise + lo));
      if (ok0) sc0 = __fadd_rn(__fdiv_rn(lg0, T), g.x);
      if (ok1) sc1 = __fadd_rn(__fdiv_rn(lg1, T), g.y);
    } else if (T > 0.0f) {
      const int64_t p = spos[b] + 1 + k;
      if (ok0) sc0 = __fadd_rn(__fdiv_rn(lg0, T), dsp_gumbel(sseed[b], p, id));
      if (ok1) sc1 = __fadd_rn(__fdiv_rn(lg1, T), dsp_gumbel(sseed[b], p, id + 1));
    }
  }
  if (ok0) best = mk_max(best, dsp_dev_key(sc0, (uint32_t)id));
  if (ok1) best = mk_max(best, dsp_dev_key(sc1, (uint32_t)(id + 1)));
}

template <int MT, bool SAMPLING, bool STRICT>
__device__ __forceinline__ void mk_compute(const dsp_mk_args &a, const uint4 (&cur)[16], int k, int u, int idx,
                                           bool fast, unsigned long long (&best)[MT][2], uint32_t (&best32)[MT][2],
                                           const uint16_t *se, uint16_t *sw, const float *st,
                                           const uint64_t *sseed, const int64_t *spos, int g, int q) {
  const int upr = a.seg_rows >> 4, seg = a.nseg == 1 ? 0 : u / upr, l0 = (u - seg * upr) * UNIT;
  const int64_t id0 = (int64_t)(a.seg_rank0 + seg) * a.vr + l0;
  const size_t off = (size_t)seg * a.seg_stride + (size_t)k * a.bq * a.ld + l0;
  const uint16_t *bp = a.base + off;
  if (STRICT) {
#pragma unroll
    for (int t = 0; t < 2; t++)
#pragma unroll
      for (int j = 0; j < KB; j++) *(uint4 *)(sw + (t * 8 + g) * RP + j * 32 + q * 8) = cur[t * KB + j];
    __syncwarp();
  }
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    if (mt * 16 >= a.bq) break;
    float acc[2][4];
    if (!STRICT) {
#pragma unroll
      for (int t = 0; t < 2; t++)
#pragma unroll
        for (int x = 0; x < 4; x++) acc[t][x] = 0.0f;
      const uint4 *ef = (const uint4 *)se + (size_t)mt * KB * 2 * 32 + (g * 4 + q);
#pragma unroll
      for (int j = 0; j < KB; j++) {
        const uint4 a0 = ef[(j * 2) * 32], a1 = ef[(j * 2 + 1) * 32];
#pragma unroll
        for (int t = 0; t < 2; t++) {
          const uint4 w = cur[t * KB + j];
          mk_mma(acc[t], a0.x, a0.y, a0.z, a0.w, w.x, w.y); /* group 2j   */
          mk_mma(acc[t], a1.x, a1.y, a1.z, a1.w, w.z, w.w); /* group 2j+1 */
        }
      }
    } else {
#pragma unroll
      for (int t = 0; t < 2; t++)
#pragma unroll
        for (int x = 0; x < 4; x++) {
          const int b = mt * 16 + g + 8 * (x >> 1), col = t * 8 + 2 * q + (x & 1);
          acc[t][x] = mk_chain(se + b * ES, sw + col * RP);
        }
    }
    /* epilogue: accumulator x of tile t is (row g + 8*(x>>1), column 2q + (x&1)) */
    if (!SAMPLING && !STRICT && fast) {
      const bool full = (int64_t)(l0 + UNIT) <= a.vr && id0 + UNIT <= a.vocab;
#pragma unroll
      for (int t = 0; t < 2; t++) {
        const int c = t * 8 + 2 * q;
        const bool ok0 = (int64_t)(l0 + c) < a.vr && id0 + c < a.vocab;
        const bool ok1 = (int64_t)(l0 + c + 1) < a.vr && id0 + c + 1 < a.vocab;
        const uint32_t bb0 = __ldg((const unsigned int *)(bp + (size_t)(mt * 16 + g) * a.ld + c));
        const uint32_t bb1 = __ldg((const unsigned int *)(bp + (size_t)(mt * 16 + g + 8) * a.ld + c));
        const uint32_t cst = 0xFFFFu - (((uint32_t)idx << 2) | ((uint32_t)t << 1));
        mk_fast_tile(acc[t], bb0, bb1, cst, full, ok0, ok1, best32[mt][0], best32[mt][1]);
      }
      continue;
    }
#pragma unroll
    for (int t = 0; t < 2; t++) {
      const int c = t * 8 + 2 * q;
      const int64_t id = id0 + c;
      const bool ok0 = (int64_t)(l0 + c) < a.vr && id < a.vocab;
      const bool ok1 = (int64_t)(l0 + c + 1) < a.vr && id + 1 < a.vocab;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int b = mt * 16 + g + 8 * h;
        const uint32_t bb = __ldg((const unsigned int *)(bp + (size_t)b * a.ld + c));
        mk_epi_pair<SAMPLING>(a, k, b, id, ok0, ok1, acc[t][2 * h], acc[t][2 * h + 1], bb, off + (size_t)b * a.ld + c,
                              best[mt][h], st, sseed, spos);
      }
    }
  }
  if (STRICT) __syncwarp(); /* the next unit restages sw */
}

template <int MT, bool SAMPLING, bool STRICT>
__global__ void __launch_bounds__(DSP_MK_THREADS, 1) mk_kernel(const dsp_mk_args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const mk_smem_t L = mk_smem(MT, SAMPLING, STRICT);
  uint16_t *se = (uint16_t *)(smem + L.e);
  unsigned long long *sbest = (unsigned long long *)(smem + L.best);
  int32_t *sprev = (int32_t *)(smem + L.prev);
  float *st = (float *)(smem + L.temp);
  uint64_t *sseed = (uint64_t *)(smem + L.seed);
  int64_t *spos = (int64_t *)(smem + L.pos);
  uint16_t *sw = (uint16_t *)(smem + L.w) + (size_t)(threadIdx.x >> 5) * UNIT * RP;
  __shared__ int slast;

  const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, q = lane & 3;
  const int bq = a.bq;
  const int W = gridDim.x * NW, gw = blockIdx.x * NW + (tid >> 5);
  const int U = a.nseg * (a.seg_rows >> 4);
  const int nmine = gw < U ? (U - 1 - gw) / W + 1 : 0;

  mk_load_rows<SAMPLING>(a, sbest, sprev, st, sseed, spos, tid);
  __syncthreads();
  mk_gather<STRICT>(a.w1, sprev, se, bq, tid);
  __syncthreads();
  mk_dep_wait(); /* base comes from the LM head's product */

  /* two unit buffers used in turn (no register copies): A holds the item being
   * computed while B's loads fly, then the other way round */
  uint4 ba[2 * KB], bb[2 * KB];
  int pk = a.k_begin, pi = 0; /* the last item handed to the L2 prefetcher */
  if (nmine > 0) {
    mk_load_unit(ba, a.w2, mk_unit(a, a.k_begin, 0, gw, W, nmine), g, q);
    for (int d = 0; d < a.prefetch; d++) {
      if (++pi == nmine) pi = 0, pk++;
      mk_prefetch(a, pk, pi, gw, W, nmine, lane);
    }
  }
  /* the fast epilogue's 16-bit positions: idx << 2 | t << 1 | e must fit */
  const bool fast = !a.fp32_add && nmine <= 16384;
  const int upr = a.seg_rows >> 4;
  for (int k = a.k_begin; k < a.k_end; k++) {
    unsigned long long best[MT][2];
    uint32_t best32[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) best[mt][0] = best[mt][1] = 0ull, best32[mt][0] = best32[mt][1] = 0u;
    const bool rev = a.serpentine && (k & 1);
    for (int i = 0; i < nmine; i += 2) {
      /* the next unit (possibly the next step's: W2 does not depend on E) goes
       * in flight before this one computes */
      const bool has1 = i + 1 < nmine;
      if (has1)
        mk_load_unit(bb, a.w2, mk_unit(a, k, i + 1, gw, W, nmine), g, q);
      else if (k + 1 < a.k_end)
        mk_load_unit(bb, a.w2, mk_unit(a, k + 1, 0, gw, W, nmine), g, q);
      if (a.prefetch > 0) {
        if (++pi == nmine) pi = 0, pk++;
        mk_prefetch(a, pk, pi, gw, W, nmine, lane);
      }
      int idx = rev ? nmine - 1 - i : i;
      mk_compute<MT, SAMPLING, STRICT>(a, ba, k, gw + idx * W, idx, fast, best, best32, se, sw, st, sseed, spos, g,
                                       q);
      if (!has1) break;
      if (i + 2 < nmine)
        mk_load_unit(ba, a.w2, mk_unit(a, k, i + 2, gw, W, nmine), g, q);
      else if (k + 1 < a.k_end)
        mk_load_unit(ba, a.w2, mk_unit(a, k + 1, 0, gw, W, nmine), g, q);
      if (a.prefetch > 0) {
        if (++pi == nmine) pi = 0, pk++;
        mk_prefetch(a, pk, pi, gw, W, nmine, lane);
      }
      idx = rev ? nmine - 2 - i : i + 1;
      mk_compute<MT, SAMPLING, STRICT>(a, bb, k, gw + idx * W, idx, fast, best, best32, se, sw, st, sseed, spos, g,
                                       q);
    }
    /* an odd count left the next step's first unit in B */
    if ((nmine & 1) && k + 1 < a.k_end) {
#pragma unroll
      for (int x = 0; x < 2 * KB; x++) ba[x] = bb[x];
    }
    /* the step's best per row: lanes of a row (q) -> block (shared) -> grid (global) */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      if (mt * 16 >= bq) break;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        unsigned long long v = best[mt][h];
        const uint32_t k32 = best32[mt][h];
        if (!SAMPLING && !STRICT && k32) { /* back to the global id and the common 64-bit key */
          const uint32_t sq = 0xFFFFu - (k32 & 0xFFFFu);
          const int uu = gw + (int)(sq >> 2) * W, seg = uu / upr;
          const int64_t id = (int64_t)(a.seg_rank0 + seg) * a.vr + (uu - seg * upr) * UNIT + ((sq >> 1) & 1u) * 8 +
                             2 * q + (sq & 1u);
          v = mk_max(v, dsp_dev_key(mk_unord(k32 >> 16), (uint32_t)id));
        }
        v = mk_max(v, __shfl_xor_sync(0xffffffffu, v, 1));
        v = mk_max(v, __shfl_xor_sync(0xffffffffu, v, 2));
        if (q == 0 && v) atomicMax(sbest + mt * 16 + g + 8 * h, v);
      }
    }
    __syncthreads();
    if (tid < bq) {
      const unsigned long long v = sbest[tid];
      sbest[tid] = 0ull;
      if (v) atomicMax(a.keys + (size_t)k * bq + tid, v);
      __threadfence();
    }
    if (!a.persistent) continue;
    if (k + 1 < a.k_end) {
      mk_grid_barrier(a.barrier, (unsigned)(k + 1 - a.k_begin) * gridDim.x);
      if (tid < bq) {
        const unsigned long long key = __ldcg(a.keys + (size_t)k * bq + tid);
        const int32_t id = key ? (int32_t)dsp_dev_key_id(key) : 0;
        sprev[tid] = id;
        if (blockIdx.x == 0) a.tokens[(size_t)k * bq + tid] = id;
      }
      __syncthreads();
      mk_gather<STRICT>(a.w1, sprev, se, bq, tid);
      __syncthreads();
    } else {
      /* the last step: the block that arrives last writes the tokens */
      __syncthreads();
      if (tid == 0) {
        __threadfence();
        const unsigned target = (unsigned)(k + 1 - a.k_begin) * gridDim.x;
        slast = atomicAdd(a.barrier, 1u) == target - 1u;
      }
      __syncthreads();
      if (slast && tid < bq) {
        __threadfence();
        const unsigned long long key = __ldcg(a.keys + (size_t)k * bq + tid);
        a.tokens[(size_t)k * bq + tid] = key ? (int32_t)dsp_dev_key_id(key) : 0;
      }
    }
  }
}

template <int MT, bool SAMPLING, bool STRICT>
dsp_status mk_launch_mt(const dsp_mk_args *a, const dsp_mk_launch *l, cudaStream_t s, int query, size_t *smem,
                        int *occ) {
  void (*kern)(const dsp_mk_args) = mk_kernel<MT, SAMPLING, STRICT>;
  const size_t bytes = mk_smem(MT, SAMPLING, STRICT).total;
  if (query) {
    DSP_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    DSP_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(occ, kern, DSP_MK_THREADS, bytes));
    *smem = bytes;
    return DSP_OK;
  }
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t cfg = mk_config(l, DSP_MK_THREADS, bytes, s, attr);
  DSP_CUDA_TRY(cudaLaunchKernelEx(&cfg, kern, *a));
  return DSP_OK;
}

/* Picks the batch-tile count instance for bq (a multiple of 16 up to 128). */
template <bool SAMPLING, bool STRICT>
dsp_status mk_launch_family(const dsp_mk_args *a, const dsp_mk_launch *l, cudaStream_t s, int query,
                            size_t *smem, int *occ) {
  const int tiles = a->bq / 16;
  if (a->bq < 16 || a->bq % 16 || a->bq > DSP_MK_MAXBQ)
    return dsp_fail(DSP_ERR_ARG, "cuda markov step: padded batch %d is not a multiple of 16 in [16, %d]", a->bq,
                    DSP_MK_MAXBQ);
  if (tiles <= 1) return mk_launch_mt<1, SAMPLING, STRICT>(a, l, s, query, smem, occ);
  if (tiles <= 2) return mk_launch_mt<2, SAMPLING, STRICT>(a, l, s, query, smem, occ);
  if (tiles <= 4) return mk_launch_mt<4, SAMPLING, STRICT>(a, l, s, query, smem, occ);
  return mk_launch_mt<8, SAMPLING, STRICT>(a, l, s, query, smem, occ);
}

}  // namespace

#endif
