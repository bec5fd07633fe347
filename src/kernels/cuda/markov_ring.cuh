/* The shared-memory ring of the fused Markov step (markov.h), used by ring
 * kernels 4-5 (markov_dyn.cuh): stage layout, mbarriers, bulk and tensor
 * copies, the A fragments of E, and the end of a step (keys to the grid, the
 * grid barrier, the winners). Per element the ring kernels run the register
 * kernel's exact sequence (same 16 mma groups in the same order, same
 * epilogue), so they agree bit for bit. Included after markov_kernel.cuh.
 * CUDA C++ only. */
#ifndef DSP_CUDA_MARKOV_RING_CUH
#define DSP_CUDA_MARKOV_RING_CUH

#include "kernels/cuda/common/copy.cuh"
#include "kernels/cuda/common/sync.cuh"
#include "kernels/cuda/markov_kernel.cuh"

namespace {

constexpr int RG_C = 4;                 /* units per chunk (64 W2 rows, 32 KB) */
constexpr int RG_NC = 8;                /* consumer warps */
constexpr int RG_THREADS = (RG_NC + 1) * 32;
/* Ring kernel 5 with one warpgroup per chunk: a whole producer warpgroup, so
 * that registers can move to the consumers (setmaxnreg works on warpgroups):
 * the producer's 4 warps drop to RG_PRODUCER_REGS, the consumers' 8 rise to
 * RG_CONSUMER_REGS (4 x 56 + 8 x 224 warps' worth fits 64K registers). */
constexpr int RG_THREADS_WG = (RG_NC + 4) * 32;
constexpr int RG_PRODUCER_REGS = 56;
constexpr int RG_CONSUMER_REGS = 224;
constexpr int RG_MAXS = 8;              /* most ring stages */

__host__ __device__ inline size_t rg_w_bytes() { return (size_t)RG_C * UNIT * RP * 2; }
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








/* Barrier among the 256 consumer threads only (the producer warp may have left). */
__device__ __forceinline__ void rg_consumers_sync() { asm volatile("bar.sync 1, 256;" ::: "memory"); }

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

/* The grid part of the end of step ks, after every consumer merged its best
 * keys into sbest (shared atomics): the block's keys go to the grid (one
 * global atomicMax per row); persistent launches then wait at the grid
 * barrier (a.barrier[0]) and every block reads the winners into sprev
 * (block 0 writes the tokens); after the last step the block that arrives
 * last writes the tokens. Returns 1 when the caller must rebuild E from
 * sprev for the next step. tr: this step's trace record or NULL. */
__device__ __forceinline__ bool rg_grid_end(const dsp_mk_args &a, int ks, int nsteps, int tid,
                                            unsigned long long *sbest, int32_t *sprev, int *slast,
                                            unsigned long long *tr, uint32_t abar) {
  const int k = a.k_begin + ks, bq = a.bq;
  rg_consumers_sync();
  if (tr && tid == 0) tr[8] = dsp_dev_now_ns();
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
      dsp_bar_arrive(abar); /* the producer may refill again (dsp_mk_args.pause) */
      if (tr) tr[9] = dsp_dev_now_ns();
      const unsigned long long t0 = dsp_dev_now_ns();
      while (dsp_dev_ld_acquire(a.barrier) < target) {
        __nanosleep(32);
        if (dsp_dev_now_ns() - t0 > 5000000000ull) __trap();
      }
    }
    rg_consumers_sync();
    if (tid < bq) {
      const unsigned long long key = __ldcg(a.keys + (size_t)k * bq + tid);
      const int32_t id = key ? (int32_t)dsp_dev_key_id(key) : 0;
      sprev[tid] = id;
      if (blockIdx.x == 0) a.tokens[(size_t)k * bq + tid] = id;
    }
    if (tr && tid == 0) tr[10] = dsp_dev_now_ns();
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

/* The end of step ks for a block's consumers: the fast 32-bit keys widened,
 * the best per row reduced over lanes (q)
 * and the block (shared atomics), then rg_grid_end; every warp rebuilds its E
 * fragments for the next step. */
template <int MT>
__device__ __forceinline__ void rg_step_end(const dsp_mk_args &a, int ks, int nsteps, bool fast, uint32_t fb0,
                                            uint32_t fb1, unsigned long long best0, unsigned long long best1,
                                            bool active, int mt, int g, int q, int tid, unsigned long long *sbest,
                                            int32_t *sprev, int *slast, uint4 (&af)[2 * KB],
                                            unsigned long long *tr, uint32_t abar) {
  const int upr = a.seg_rows >> 4;
  if (fast) {
    const uint32_t f[2] = {fb0, fb1};
    unsigned long long *dst[2] = {&best0, &best1};
#pragma unroll
    for (int h = 0; h < 2; h++) {
      if (!f[h]) continue;
      const uint32_t sq = 0xFFFFu - (f[h] & 0xFFFFu);
      const int uu = (int)(sq >> 2), seg = uu / upr;
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
  if (rg_grid_end(a, ks, nsteps, tid, sbest, sprev, slast, tr, abar) && active) rg_load_e<MT>(a, sprev, mt, g, q, af);
}

}  // namespace

#endif
