/* The ring kernel of the fused Markov step (markov.h): a producer warp streams
 * the block's W2 rows and base rows into a ring of shared-memory stages with
 * bulk asynchronous copies; 8 consumer warps compute. Per element it runs the
 * register kernel's exact sequence (same fragments, same 16 mma groups in the
 * same order, same epilogue: mk_epi_pair), so the two kernels agree bit for
 * bit. Included after markov_kernel.cuh. CUDA C++ only. */
#ifndef DSP_CUDA_MARKOV_RING_CUH
#define DSP_CUDA_MARKOV_RING_CUH

#include <cuda.h> /* CUtensorMap (the type only; the encoder comes through the runtime) */
#include <cudaTypedefs.h>

#include "cuda/markov_kernel.cuh"

namespace {

constexpr int RG_C = 4;                 /* units per chunk (64 W2 rows, 32 KB) */
constexpr int RG_WROW = RP;             /* W2 rows as in global memory: one 8 KB copy per unit (each copy
                                           costs the copy engine a fixed overhead, so few and large); the
                                           fragment reads of rows g and g+1 then share banks (2-way) */
constexpr int RG_NC = 8;                /* consumer warps */
constexpr int RG_THREADS = (RG_NC + 1) * 32;
constexpr int RG_MAXS = 8;              /* most ring stages */
static_assert(RG_C == 4, "the V 2 producer's base piece indexing assumes 4 units per chunk");

__host__ __device__ inline size_t rg_w_bytes() { return (size_t)RG_C * UNIT * RG_WROW * 2; }
__host__ __device__ inline size_t rg_stage_bytes(int bq) { return rg_w_bytes() + (size_t)RG_C * bq * UNIT * 2; }

struct rg_smem_t {
  size_t bars, prev, best, temp, seed, pos, total;
};

/* Stages at offset 0; then 2 * RG_MAXS mbarriers (full, empty) and per-row data. */
__host__ __device__ inline rg_smem_t rg_smem(int bq, bool sampling, int stages) {
  rg_smem_t L{};
  L.bars = (size_t)stages * rg_stage_bytes(bq);
  L.prev = L.bars + 2 * RG_MAXS * 8;
  L.best = mk_align(L.prev + (size_t)bq * 4);
  L.temp = mk_align(L.best + (size_t)bq * 8);
  L.seed = mk_align(L.temp + (sampling ? (size_t)bq * 4 : 0));
  L.pos = mk_align(L.seed + (sampling ? (size_t)bq * 8 : 0));
  L.total = mk_align(L.pos + (sampling ? (size_t)bq * 8 : 0)) + 1024; /* + slack: the kernel aligns its base to 1024 */
  return L;
}

__device__ __forceinline__ uint32_t rg_saddr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void rg_bar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void rg_bar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void rg_bar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ bool rg_bar_test(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}

/* Waits for the phase of `parity` to complete; traps after 5 s (a broken
 * pipeline fails loudly instead of hanging the device). */
__device__ __forceinline__ void rg_bar_wait(uint32_t bar, uint32_t parity) {
  if (rg_bar_test(bar, parity)) return;
  const unsigned long long t0 = mk_now_ns();
  while (!rg_bar_test(bar, parity))
    if (mk_now_ns() - t0 > 5000000000ull) __trap();
}

/* Global -> shared bulk copy completing `bytes` of transaction on `bar`. */
__device__ __forceinline__ void rg_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

/* Barrier among the 256 consumer threads only (the producer warp may have left). */
__device__ __forceinline__ void rg_consumers_sync() { asm volatile("bar.sync 1, 256;" ::: "memory"); }

/* Chunk n of a block's sequence: step k, first unit u0, nu units (1..RG_C).
 * Steps walk the block's chunks forwards, odd steps backwards when serpentine. */
__device__ __forceinline__ void rg_chunk(const dsp_mk_args &a, int n, int nch, int ub, int ue, int *k, int *u0,
                                         int *nu) {
  const int ks = n / nch, i = n - ks * nch;
  *k = a.k_begin + ks;
  const int c = (a.serpentine && (*k & 1)) ? nch - 1 - i : i;
  *u0 = ub + c * RG_C;
  const int e = *u0 + RG_C < ue ? *u0 + RG_C : ue;
  *nu = e - *u0;
}

/* This lane's A fragments for batch tile mt, in mma register order (see
 * mk_gather_frag): af[2j + s] = {E[r][p], E[r+8][p], E[r][p+2], E[r+8][p+2]},
 * p = 32 j + 8 q + 4 s. Built once per step, so the mma loop needs no moves:
 * each register comes from its own 4-byte load (loading 16 bytes and
 * permuting leaves ptxas to rebuild every quad with four moves before every
 * mma that reads it). */
template <int MT>
__device__ __forceinline__ void rg_load_e(const dsp_mk_args &a, const int32_t *sprev, int mt, int g, int q,
                                          uint4 (&af)[2 * KB]) {
  const uint32_t *r0 = (const uint32_t *)(a.w1 + (size_t)sprev[mt * 16 + g] * RP + q * 8);
  const uint32_t *r1 = (const uint32_t *)(a.w1 + (size_t)sprev[mt * 16 + g + 8] * RP + q * 8);
#pragma unroll
  for (int j = 0; j < KB; j++)
#pragma unroll
    for (int s = 0; s < 2; s++) {
      const int i = j * 16 + 2 * s;
      af[2 * j + s] = make_uint4(__ldg(r0 + i), __ldg(r1 + i), __ldg(r0 + i + 1), __ldg(r1 + i + 1));
    }
}

/* 16-byte asynchronous copy global -> shared (LDGSTS, L2 only), tracked per thread. */
__device__ __forceinline__ void rg_cp16(uint32_t dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}

/* One arrival on `bar` once all of this thread's earlier cp.async copies have
 * landed (the barrier's count includes it: noinc). */
__device__ __forceinline__ void rg_cp_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

/* 2-D / 3-D tensor copy of W2 (V 3) completing on `bar`: box (c0, c1[, c2]) of the map. */
__device__ __forceinline__ void rg_tcopy3(uint32_t dst, const CUtensorMap *tm, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
      "l"(tm), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void rg_tcopy2(uint32_t dst, const CUtensorMap *tm, int c0, int c1, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
               "l"(tm), "r"(c0), "r"(c1), "r"(bar)
               : "memory");
}

/* The grid part of the end of step ks, after every consumer merged its best
 * keys into sbest (shared atomics): the block's keys go to the grid (one
 * global atomicMax per row); persistent launches then wait at the grid
 * barrier (a.barrier[0]) and every block reads the winners into sprev
 * (block 0 writes the tokens); after the last step the block that arrives
 * last writes the tokens. Returns 1 when the caller must rebuild E from sprev
 * for the next step. */
__device__ __forceinline__ bool rg_grid_end(const dsp_mk_args &a, int ks, int nsteps, int tid,
                                            unsigned long long *sbest, int32_t *sprev, int *slast) {
  const int k = a.k_begin + ks, bq = a.bq;
  rg_consumers_sync();
  if (tid < bq) {
    const unsigned long long v = sbest[tid];
    sbest[tid] = 0ull;
    if (v) atomicMax(a.keys + (size_t)k * bq + tid, v);
  }
  /* the launch's end orders the keys before the select kernel; a persistent launch
   * orders them before its arrival at the grid barrier by the CTA barrier and
   * thread 0's release (the last step: its fence before the counting atomic) */
  if (!a.persistent) return false;
  const unsigned target = (unsigned)(ks + 1) * gridDim.x;
  rg_consumers_sync();
  if (ks + 1 < nsteps) {
    if (tid == 0) {
      /* a release reduction orders the block's keys (before the CTA barrier) before the
       * arrival, with no fence round trip and no returned value to wait for */
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(a.barrier) : "memory");
      const unsigned long long t0 = mk_now_ns();
      while (mk_ld_acquire(a.barrier) < target) {
        __nanosleep(32);
        if (mk_now_ns() - t0 > 5000000000ull) __trap();
      }
    }
    rg_consumers_sync();
    if (tid < bq) {
      const unsigned long long key = __ldcg(a.keys + (size_t)k * bq + tid);
      const int32_t id = key ? (int32_t)dsp_dev_key_id(key) : 0;
      sprev[tid] = id;
      if (blockIdx.x == 0) a.tokens[(size_t)k * bq + tid] = id;
    }
    rg_consumers_sync();
    return true;
  }
  if (tid == 0) {
    __threadfence();
    *slast = atomicAdd(a.barrier, 1u) == target - 1u;
  }
  rg_consumers_sync();
  if (*slast && tid < bq) {
    __threadfence();
    const unsigned long long key = __ldcg(a.keys + (size_t)k * bq + tid);
    a.tokens[(size_t)k * bq + tid] = key ? (int32_t)dsp_dev_key_id(key) : 0;
  }
  return false;
}

/* The end of step ks for a block's consumers: the fast 32-bit keys widened
 * (their unit index counted from ub), the best per row reduced over lanes (q)
 * and the block (shared atomics), then rg_grid_end; every warp rebuilds its E
 * fragments for the next step. */
template <int MT>
__device__ __forceinline__ void rg_step_end(const dsp_mk_args &a, int ks, int nsteps, bool fast, int ub, uint32_t fb0,
                                            uint32_t fb1, unsigned long long best0, unsigned long long best1,
                                            bool active, int mt, int g, int q, int tid, unsigned long long *sbest,
                                            int32_t *sprev, int *slast, uint4 (&af)[2 * KB]) {
  const int upr = a.seg_rows >> 4;
  if (fast) {
    const uint32_t f[2] = {fb0, fb1};
    unsigned long long *dst[2] = {&best0, &best1};
#pragma unroll
    for (int h = 0; h < 2; h++) {
      if (!f[h]) continue;
      const uint32_t sq = 0xFFFFu - (f[h] & 0xFFFFu);
      const int uu = ub + (int)(sq >> 2), seg = uu / upr;
      const int64_t id = (int64_t)(a.seg_rank0 + seg) * a.vr + (uu - seg * upr) * UNIT + ((sq >> 1) & 1u) * 8 +
                         2 * q + (sq & 1u);
      *dst[h] = mk_max(*dst[h], dsp_dev_key(mk_unord(f[h] >> 16), (uint32_t)id));
    }
  }
  best0 = mk_max(best0, __shfl_xor_sync(0xffffffffu, best0, 1));
  best0 = mk_max(best0, __shfl_xor_sync(0xffffffffu, best0, 2));
  best1 = mk_max(best1, __shfl_xor_sync(0xffffffffu, best1, 1));
  best1 = mk_max(best1, __shfl_xor_sync(0xffffffffu, best1, 2));
  if (active && q == 0) {
    if (best0) atomicMax(sbest + mt * 16 + g, best0);
    if (best1) atomicMax(sbest + mt * 16 + g + 8, best1);
  }
  if (rg_grid_end(a, ks, nsteps, tid, sbest, sprev, slast) && active) rg_load_e<MT>(a, sprev, mt, g, q, af);
}

/* V = 1: the producer issues one bulk copy per W2 unit and one per base row
 *        (36 bulk copies per 32 KB chunk);
 * V = 2: one bulk copy per chunk for W2 (the chunk's units are contiguous) and
 *        the base rows as 16-byte cp.async copies by the producer's 32 lanes,
 *        each lane's arrival (cp.async.mbarrier.arrive.noinc) counted on the
 *        stage's full barrier: 1 bulk copy per chunk. Same stage layout, same
 *        consumers, so the same bits.
 * V = 3: as V 2, but W2 comes through a tensor map as [8 k blocks][64 rows][32 k]
 *        (one 3-D box per chunk, or 8 2-D boxes when nbox = 8): rows g and g+1
 *        then sit 64 bytes apart, so a quarter-warp's fragment reads never share
 *        a bank (V 1-2: 2-way conflicts). The registers get the same values. */
template <int MT, bool SAMPLING, int V>
__global__ void __launch_bounds__(RG_THREADS, 1) rg_kernel(const dsp_mk_args a, const __grid_constant__ CUtensorMap tm, const int nbox) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  /* stages on a 1024-byte boundary: the tensor copies (V 3) need 128-byte aligned destinations */
  unsigned char *smem = smem_raw + ((1024u - (rg_saddr(smem_raw) & 1023u)) & 1023u);
  const int bq = a.bq, S = a.stages;
  const rg_smem_t L = rg_smem(bq, SAMPLING, S);
  const size_t SB = rg_stage_bytes(bq);
  uint64_t *bars = (uint64_t *)(smem + L.bars); /* full[s] = bars[s], empty[s] = bars[RG_MAXS + s] */
  int32_t *sprev = (int32_t *)(smem + L.prev);
  unsigned long long *sbest = (unsigned long long *)(smem + L.best);
  float *st = (float *)(smem + L.temp);
  uint64_t *sseed = (uint64_t *)(smem + L.seed);
  int64_t *spos = (int64_t *)(smem + L.pos);
  __shared__ int slast;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
  const int upr = a.seg_rows >> 4, U = a.nseg * upr;
  const int ub = (int)((long long)U * blockIdx.x / gridDim.x);
  const int ue = (int)((long long)U * (blockIdx.x + 1) / gridDim.x);
  const int nch = (ue - ub + RG_C - 1) / RG_C, nsteps = a.k_end - a.k_begin;

  if (tid == 0) {
    for (int s = 0; s < S; s++) {
      rg_bar_init(rg_saddr(&bars[s]), V >= 2 ? 33 : 1); /* the producer's arrive + the bytes (V 2-3: + 32 lanes' cp.async) */
      rg_bar_init(rg_saddr(&bars[RG_MAXS + s]), RG_NC); /* one arrive per consumer warp */
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  mk_load_rows<SAMPLING>(a, sbest, sprev, st, sseed, spos, tid);
  __syncthreads();

  if (warp == RG_NC) {
    /* producer: every chunk of every step, as far ahead as the ring allows */
    const int total = nch * nsteps;
    for (int n = 0; n < total; n++) {
      const int s = n % S, r = n / S;
      if (r > 0) rg_bar_wait(rg_saddr(&bars[RG_MAXS + s]), (uint32_t)(r - 1) & 1u);
      int k, u0, nu;
      rg_chunk(a, n, nch, ub, ue, &k, &u0, &nu);
      const uint32_t full = rg_saddr(&bars[s]);
      if (V >= 2) {
        const uint32_t dst = rg_saddr(smem + (size_t)s * SB);
        if (lane == 0 && V == 2) {
          rg_bar_expect(full, (uint32_t)(nu * UNIT * RP * 2));
          rg_copy(dst, a.w2 + (size_t)u0 * UNIT * RP, (uint32_t)(nu * UNIT * RP * 2), full);
        }
        if (lane == 0 && V == 3) { /* whole boxes: rows past the map's end are zero-filled and counted */
          rg_bar_expect(full, (uint32_t)rg_w_bytes());
          if (nbox == 1)
            rg_tcopy3(dst, &tm, 0, u0 * UNIT, 0, full);
          else
            for (int j = 0; j < KB; j++)
              rg_tcopy2(dst + (uint32_t)(j * RG_C * UNIT * 32 * 2), &tm, j * 32, u0 * UNIT, full);
        }
        /* base piece j: batch row b = j / 8, unit ui = (j / 2) % 4, half hf = j % 2 (8 columns) */
        for (int j = lane; j < bq * RG_C * 2; j += 32) {
          const int b = j >> 3, ui = (j >> 1) & (RG_C - 1), hf = j & 1;
          if (ui >= nu) continue;
          const int u = u0 + ui, seg = a.nseg == 1 ? 0 : u / upr, l0 = (u - seg * upr) * UNIT;
          const uint16_t *src = a.base + (size_t)seg * a.seg_stride + ((size_t)k * bq + b) * a.ld + l0 + hf * 8;
          rg_cp16(dst + (uint32_t)(rg_w_bytes() + ((size_t)b * RG_C + ui) * UNIT * 2 + hf * 16), src);
        }
        rg_cp_arrive(full);
        continue;
      }
      if (lane == 0) rg_bar_expect(full, (uint32_t)(nu * UNIT * RP * 2 + nu * bq * UNIT * 2));
      __syncwarp();
      const uint32_t dst = rg_saddr(smem + (size_t)s * SB);
      if (lane < nu) /* units are contiguous in W2: one copy each */
        rg_copy(dst + (uint32_t)(lane * UNIT * RP * 2), a.w2 + ((size_t)(u0 + lane) * UNIT) * RP, UNIT * RP * 2,
                full);
      /* base: [unit][bq][16] in the stage; one copy per batch row covers all the
       * chunk's units when they lie in one segment (contiguous columns) */
      const int seg0 = u0 / upr;
      if ((u0 + nu - 1) / upr == seg0) {
        const int l00 = (u0 - seg0 * upr) * UNIT;
        for (int b = lane; b < bq; b += 32) {
          const uint16_t *src = a.base + (size_t)seg0 * a.seg_stride + ((size_t)k * bq + b) * a.ld + l00;
          rg_copy(dst + (uint32_t)(rg_w_bytes() + (size_t)b * RG_C * UNIT * 2), src, (uint32_t)(nu * UNIT * 2), full);
        }
      } else {
        for (int j = lane; j < nu * bq; j += 32) {
          const int ui = j / bq, b = j - ui * bq, u = u0 + ui, seg = u / upr, l0 = (u - seg * upr) * UNIT;
          const uint16_t *src = a.base + (size_t)seg * a.seg_stride + ((size_t)k * bq + b) * a.ld + l0;
          rg_copy(dst + (uint32_t)(rg_w_bytes() + ((size_t)b * RG_C + ui) * UNIT * 2), src, UNIT * 2, full);
        }
      }
    }
    if (V >= 2) asm volatile("cp.async.wait_all;" ::: "memory"); /* no copy outlives its issuing thread */
    return;
  }

  /* consumers: warp w owns batch tile mt = w % MT and every (MT/8)-th (unit, n8 tile) pair of a chunk */
  const int mt = warp % MT, nsub = RG_NC / MT, sub = warp / MT;
  const bool active = mt * 16 < bq;
  uint4 af[2 * KB];
  if (active) rg_load_e<MT>(a, sprev, mt, g, q, af);
  const bool fast = !SAMPLING && !a.fp32_add && ue - ub <= 16384; /* see mk_fast_tile */
  for (int ks = 0; ks < nsteps; ks++) {
    const int k = a.k_begin + ks;
    unsigned long long best0 = 0ull, best1 = 0ull;
    uint32_t fb0 = 0u, fb1 = 0u;
    for (int i = 0; i < nch; i++) {
      const int n = ks * nch + i, s = n % S;
      int kk, u0, nu;
      rg_chunk(a, n, nch, ub, ue, &kk, &u0, &nu);
      rg_bar_wait(rg_saddr(&bars[s]), (uint32_t)(n / S) & 1u);
      if (active) {
        const uint16_t *ws = (const uint16_t *)(smem + (size_t)s * SB);
        const uint16_t *bs = (const uint16_t *)(smem + (size_t)s * SB + rg_w_bytes());
        for (int p = sub; p < nu * 2; p += nsub) {
          const int ui = p >> 1, t = p & 1, u = u0 + ui;
          float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          const uint16_t *wr = V == 3 ? ws + (size_t)(ui * UNIT + t * 8 + g) * 32 + q * 8
                                      : ws + (size_t)(ui * UNIT + t * 8 + g) * RG_WROW + q * 8;
#pragma unroll
          for (int j = 0; j < KB; j++) {
            const uint4 w = *(const uint4 *)(wr + (V == 3 ? j * (RG_C * UNIT * 32) : j * 32));
            mk_mma(acc, af[2 * j].x, af[2 * j].y, af[2 * j].z, af[2 * j].w, w.x, w.y);             /* group 2j */
            mk_mma(acc, af[2 * j + 1].x, af[2 * j + 1].y, af[2 * j + 1].z, af[2 * j + 1].w, w.z, w.w); /* 2j+1 */
          }
          const int seg = a.nseg == 1 ? 0 : u / upr, l0 = (u - seg * upr) * UNIT;
          const int64_t id = (int64_t)(a.seg_rank0 + seg) * a.vr + l0 + t * 8 + 2 * q;
          const int lc = l0 + t * 8 + 2 * q;
          const bool ok0 = (int64_t)lc < a.vr && id < a.vocab;
          const bool ok1 = (int64_t)(lc + 1) < a.vr && id + 1 < a.vocab;
          const int b0 = mt * 16 + g, b1 = b0 + 8;
          const uint32_t bb0 = *(const uint32_t *)(bs + ((size_t)b0 * RG_C + ui) * UNIT + t * 8 + 2 * q);
          const uint32_t bb1 = *(const uint32_t *)(bs + ((size_t)b1 * RG_C + ui) * UNIT + t * 8 + 2 * q);
          if (fast) {
            const bool full = (int64_t)(l0 + UNIT) <= a.vr && id - t * 8 - 2 * q + UNIT <= a.vocab;
            const uint32_t cst = 0xFFFFu - (((uint32_t)(u - ub) << 2) | ((uint32_t)t << 1));
            mk_fast_tile(acc, bb0, bb1, cst, full, ok0, ok1, fb0, fb1);
            continue;
          }
          const size_t off = (size_t)seg * a.seg_stride + (size_t)k * bq * a.ld + lc;
          mk_epi_pair<SAMPLING>(a, k, b0, id, ok0, ok1, acc[0], acc[1], bb0, off + (size_t)b0 * a.ld, best0, st,
                                sseed, spos);
          mk_epi_pair<SAMPLING>(a, k, b1, id, ok0, ok1, acc[2], acc[3], bb1, off + (size_t)b1 * a.ld, best1, st,
                                sseed, spos);
        }
      }
      __syncwarp();
      if (lane == 0) rg_bar_arrive(rg_saddr(&bars[RG_MAXS + s])); /* this warp is done with stage s */
    }
    rg_step_end<MT>(a, ks, nsteps, fast, ub, fb0, fb1, best0, best1, active, mt, g, q, tid, sbest, sprev, &slast, af);
  }
}

}  // namespace

#endif
