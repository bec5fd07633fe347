/* Ring kernels 4-5 of the fused Markov step (markov.h). No block owns a fixed
 * range: one producer thread per block claims 64-row chunks of every step
 * from a global counter (three claims in flight) and lands each chunk's
 * packed W2 by one bulk copy and its base rows by one tensor box per unit;
 * a claim past the end marks the step's end in the ring. Ring kernel 4's
 * consumers are 8 mma.sync warps; ring kernel 5's are wgmma warpgroups
 * (greedy fast path), which up to bq 32 also keep a few W2 chunks resident in
 * registers for the whole launch (loaded through the ring at step 0; later
 * steps move only their base rows), the claims covering the rest. Per element
 * both run the same 16 k groups in the same order and slots, so they agree
 * with every other tensor-core kernel bit for bit (ring 5: where
 * dsp_cuda_markov_wgmma_check passes). Included after
 * markov_ring.cuh. CUDA C++ only. */
#ifndef DSP_CUDA_MARKOV_DYN_CUH
#define DSP_CUDA_MARKOV_DYN_CUH

/* Benchmark builds (bench/support/markov_bench.cu) define this as 1 before any
 * include: the ring-wgmma kernel's other warpgroup split then exists. The
 * trace hooks (dsp_mk_args.trace) stay in every build: compiled out, ptxas
 * allocated the ring-wgmma kernel's registers differently and spilled 40-116
 * bytes; the product never passes a trace buffer. */
#ifndef DSP_MK_BENCH_VARIANTS
#define DSP_MK_BENCH_VARIANTS 0
#endif

#include "kernels/cuda/markov_ring.cuh"
#include "kernels/cuda/markov_wgmma.cuh"

namespace {

__device__ __forceinline__ uint64_t rd_policy(bool keep) {
  uint64_t p;
  if (keep)
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  else
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

/* Bulk copy global -> shared completing on `bar`, with an L2 policy when hinted. */
__device__ __forceinline__ void rd_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar, bool hint,
                                        uint64_t pol) {
  if (hint)
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "l"(pol)
        : "memory");
  else
    dsp_bulk_copy(dst, src, bytes, bar);
}

/* One unit's base rows: the box (16 columns, bq rows, 1 segment) of the base
 * map at (column c0, row c1 = k * bq, segment c2), landing as [bq][16]. */
__device__ __forceinline__ void rd_tcopy_base(uint32_t dst, const CUtensorMap *tm, int c0, int c1, int c2,
                                              uint32_t bar, bool hint, uint64_t pol) {
  if (hint)
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, %4}], [%5], %6;" ::"r"(dst),
        "l"(tm), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "l"(pol)
        : "memory");
  else
    dsp_tcopy3(dst, tm, c0, c1, c2, bar);
}

/* Step k's base rows of units u0 .. u0 + nu - 1 into dst ([unit][bq][16]), one
 * tensor box per unit, completing on `bar`. */
__device__ __forceinline__ void rd_copy_base_rows(uint32_t dst, const CUtensorMap *tm, const dsp_mk_args &a, int u0,
                                                  int nu, int upr, int k, uint32_t bar, bool hint, uint64_t pol) {
  for (int ui = 0; ui < nu; ui++) {
    const int u = u0 + ui, seg = a.nseg == 1 ? 0 : u / upr;
    rd_tcopy_base(dst + (uint32_t)((size_t)ui * a.bq * UNIT * 2), tm, (u - seg * upr) * UNIT, k * a.bq, seg, bar, hint,
                  pol);
  }
}

__device__ __forceinline__ unsigned long long rd_clock() { return clock64(); }

/* Row r's W2 fragment registers for k block j, lane quad q, from a packed
 * chunk (wgmma's layout, markov_wgmma.cuh): the pairs k = 32 j + 8 q + {0, 2,
 * 4, 6}, i.e. what a 16-byte load of plain rows gives. */
__device__ __forceinline__ uint4 rd_frag_packed(const uint16_t *ws, int r, int j, int q) {
  const unsigned char *b = (const unsigned char *)ws;
  const int k = 32 * j + 8 * q;
  return make_uint4(*(const uint32_t *)(b + wg_pair(64, r, k)), *(const uint32_t *)(b + wg_pair(64, r, k + 2)),
                    *(const uint32_t *)(b + wg_pair(64, r, k + 4)), *(const uint32_t *)(b + wg_pair(64, r, k + 6)));
}

/* One chunk's work for a consumer warp: it keeps the A fragments of batch
 * tile mt = warp % MT; for MT >= 2 it owns units warp / MT + i * (8 / MT) of
 * the chunk and runs both n8 tiles of each as two interleaved mma chains, for
 * MT = 1 one (unit, n8 tile) pair. (Two batch tiles per warp sharing each W2
 * fragment read was tried: 14% slower, twice the A registers and a twice
 * longer E reload per step.) The fast keys' position is the global unit index
 * (U <= 16384). */
template <int MT, bool SAMPLING, bool BOX>
__device__ __forceinline__ void rd_chunk(const dsp_mk_args &a, int k, int c, int U, int upr, bool fast,
                                         const uint16_t *ws, const uint16_t *bs, int warp, int mt, int g, int q,
                                         const uint4 (&af)[2 * KB], unsigned long long &best0,
                                         unsigned long long &best1, uint32_t &fb0, uint32_t &fb1, const float *st,
                                         const uint64_t *sseed, const int64_t *spos) {
  const int u0 = c * RG_C, nu = U - u0 < RG_C ? U - u0 : RG_C;
  constexpr int TPW = MT == 1 ? 1 : 2;                 /* n8 tiles per unit and warp */
  constexpr int PER = MT == 1 ? 1 : RG_C * MT / RG_NC; /* units per warp and chunk */
  if (mt * 16 >= a.bq) return;
#pragma unroll
  for (int i = 0; i < PER; i++) {
    const int ui = MT == 1 ? warp >> 1 : warp / MT + i * (RG_NC / MT);
    const int t0 = MT == 1 ? warp & 1 : 0;
    if (ui >= nu) continue;
    const int u = u0 + ui;
    float acc[TPW][4];
#pragma unroll
    for (int t = 0; t < TPW; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    /* W2 in the stage: [64 rows][256 k] (plain rows) or wgmma's layout (BOX: packed W2) */
    const int r0 = ui * UNIT + t0 * 8 + g;
    const uint16_t *wr = ws + (size_t)r0 * RP + q * 8;
#pragma unroll
    for (int j = 0; j < KB; j++) {
      uint4 w[TPW];
#pragma unroll
      for (int t = 0; t < TPW; t++) w[t] = BOX ? rd_frag_packed(ws, r0 + t * 8, j, q) : *(const uint4 *)(wr + t * 8 * RP + j * 32);
#pragma unroll
      for (int t = 0; t < TPW; t++)
        mk_mma(acc[t], af[2 * j].x, af[2 * j].y, af[2 * j].z, af[2 * j].w, w[t].x, w[t].y); /* group 2j */
#pragma unroll
      for (int t = 0; t < TPW; t++)
        mk_mma(acc[t], af[2 * j + 1].x, af[2 * j + 1].y, af[2 * j + 1].z, af[2 * j + 1].w, w[t].z, w[t].w); /* 2j+1 */
    }
    const int seg = a.nseg == 1 ? 0 : u / upr, l0 = (u - seg * upr) * UNIT;
    const int b0 = mt * 16 + g, b1 = b0 + 8;
#pragma unroll
    for (int tt = 0; tt < TPW; tt++) {
      const int t = t0 + tt;
      const int64_t id = (int64_t)(a.seg_rank0 + seg) * a.vr + l0 + t * 8 + 2 * q;
      const int lc = l0 + t * 8 + 2 * q;
      const bool ok0 = (int64_t)lc < a.vr && id < a.vocab;
      const bool ok1 = (int64_t)(lc + 1) < a.vr && id + 1 < a.vocab;
      const uint32_t bb0 = *(const uint32_t *)(bs + ((size_t)ui * a.bq + b0) * UNIT + t * 8 + 2 * q);
      const uint32_t bb1 = *(const uint32_t *)(bs + ((size_t)ui * a.bq + b1) * UNIT + t * 8 + 2 * q);
      if (fast) {
        const bool full = (int64_t)(l0 + UNIT) <= a.vr && id - t * 8 - 2 * q + UNIT <= a.vocab;
        const uint32_t cst = 0xFFFFu - (((uint32_t)u << 2) | ((uint32_t)t << 1));
        mk_fast_tile(acc[tt], bb0, bb1, cst, full, ok0, ok1, fb0, fb1);
        continue;
      }
      const size_t off = (size_t)seg * a.seg_stride + (size_t)k * a.bq * a.ld + lc;
      mk_epi_pair<SAMPLING>(a, k, b0, id, ok0, ok1, acc[tt][0], acc[tt][1], bb0, off + (size_t)b0 * a.ld, best0,
                            st, sseed, spos);
      mk_epi_pair<SAMPLING>(a, k, b1, id, ok0, ok1, acc[tt][2], acc[tt][3], bb1, off + (size_t)b1 * a.ld, best1,
                            st, sseed, spos);
    }
  }
}

/* Ring kernel 5: E (W1 rows of the previous tokens) into shared memory in
 * wgmma's layout, by the 256 consumer threads, then made visible to wgmma. */
__device__ __forceinline__ void rd_gather_e(const dsp_mk_args &a, const int32_t *sprev, unsigned char *se, int tid) {
  constexpr int T = RG_NC * 32, L = 8; /* up to 8 loads in flight per thread: one W1 latency for bq <= 64 */
  const int n = a.bq * (RP / 8);
  for (int i0 = tid; i0 < n; i0 += L * T) {
    uint4 v[L];
#pragma unroll
    for (int l = 0; l < L; l++) {
      const int i = i0 + l * T;
      if (i < n) v[l] = __ldg((const uint4 *)(a.w1 + (size_t)sprev[i / (RP / 8)] * RP + (i % (RP / 8)) * 8));
    }
#pragma unroll
    for (int l = 0; l < L; l++) {
      const int i = i0 + l * T, b = i / (RP / 8), k = (i % (RP / 8)) * 8;
      if (i >= n) break;
      *(uint32_t *)(se + wg_pair(a.bq, b, k)) = v[l].x;
      *(uint32_t *)(se + wg_pair(a.bq, b, k + 2)) = v[l].y;
      *(uint32_t *)(se + wg_pair(a.bq, b, k + 4)) = v[l].z;
      *(uint32_t *)(se + wg_pair(a.bq, b, k + 6)) = v[l].w;
    }
  }
  wg_proxy_fence();
  rg_consumers_sync();
}

/* Ring kernel 5, one chunk for warpgroup wg: the 64 x N product of the chunk's
 * W2 rows and E rows [wg N, wg N + N), then the fast epilogue of mk_fast_tile
 * on this thread's elements (rows g, g + 8 of unit `warp % 4`, batch columns
 * wg N + 8 j + 2 q (+ 1)); fb[2 j + p] keeps the best 32-bit key of column
 * 8 j + 2 q + p, its position 2 u + (row g + 8) below 0xFFFF. */
template <int N>
__device__ __forceinline__ void rd_epi_wg(const dsp_mk_args &a, const float (&d)[N / 2], int c, int U, int upr,
                                          const uint16_t *bs, int wg, int w4, int g, int q, uint32_t (&fb)[N / 4]) {
  const int u0 = c * RG_C, nu = U - u0 < RG_C ? U - u0 : RG_C;
  if (w4 >= nu) return;
  const int u = u0 + w4, seg = a.nseg == 1 ? 0 : u / upr, l0 = (u - seg * upr) * UNIT;
  const int64_t id0 = (int64_t)(a.seg_rank0 + seg) * a.vr + l0 + g;
  const bool full = (int64_t)(l0 + UNIT) <= a.vr && id0 - g + UNIT <= a.vocab;
  const bool ok0 = (int64_t)(l0 + g) < a.vr && id0 < a.vocab, ok1 = (int64_t)(l0 + g + 8) < a.vr && id0 + 8 < a.vocab;
  const uint32_t cst0 = 0xFFFFu - ((uint32_t)u << 1), cst1 = cst0 - 1u;
  const uint16_t *bu = bs + (size_t)w4 * a.bq * UNIT; /* the unit's base rows: [bq][16] */
#pragma unroll
  for (int j = 0; j < N / 8; j++) {
    const int b = wg * N + 8 * j + 2 * q;
    const uint32_t bb0 = (uint32_t)bu[b * UNIT + g] | ((uint32_t)bu[(b + 1) * UNIT + g] << 16);
    const uint32_t bb1 = (uint32_t)bu[b * UNIT + g + 8] | ((uint32_t)bu[(b + 1) * UNIT + g + 8] << 16);
    const uint32_t o0 = mk_ord_bf16x2(mk_add_bf16x2(bb0, mk_pack_bf16x2(d[4 * j], d[4 * j + 1])));     /* row g */
    const uint32_t o1 = mk_ord_bf16x2(mk_add_bf16x2(bb1, mk_pack_bf16x2(d[4 * j + 2], d[4 * j + 3]))); /* row g + 8 */
    uint32_t k00 = (o0 << 16) | cst0, k01 = (o0 & 0xFFFF0000u) | cst0; /* columns b, b + 1 of row g */
    uint32_t k10 = (o1 << 16) | cst1, k11 = (o1 & 0xFFFF0000u) | cst1;
    if (!full) {
      if (!ok0) k00 = k01 = 0u;
      if (!ok1) k10 = k11 = 0u;
    }
    fb[2 * j] = max(fb[2 * j], max(k00, k10));
    fb[2 * j + 1] = max(fb[2 * j + 1], max(k01, k11));
  }
}

template <int N>
__device__ __forceinline__ void rd_chunk_wg(const dsp_mk_args &a, int c, int U, int upr, uint32_t ws, const uint16_t *bs,
                                            uint32_t se, int wg, int w4, int g, int q, uint32_t (&fb)[N / 4]) {
  float d[N / 2];
  wg_product<N>(d, ws, se, a.bq, wg * N);
  rd_epi_wg<N>(a, d, c, U, upr, bs, wg, w4, g, q, fb);
}

/* Ring kernel 5's step end: the 32-bit keys widened with their ids and
 * reduced over the 8 lanes of a column (g); each warp stores its column keys
 * to sk[warp][column] and, after a consumer barrier, thread c < bq takes the
 * max over the warps that cover column c into sbest[c]. (64-bit atomicMax on
 * shared memory is a compare-and-swap loop: 8 warps x 8 keys of each
 * thread contending on 32 words: the step end came ~1 us later, bench/RESULTS.md v28) */
template <int N, bool WHOLE>
__device__ __forceinline__ void rd_merge_wg(const dsp_mk_args &a, const uint32_t (&fb)[N / 4], int warp, int g, int q,
                                            int tid, unsigned long long *sk, unsigned long long *sbest) {
  const int upr = a.seg_rows >> 4, bq = a.bq, c0 = WHOLE ? 0 : (warp >> 2) * N;
#pragma unroll
  for (int i = 0; i < N / 4; i++) {
    unsigned long long key = 0ull;
    if (fb[i]) {
      const uint32_t sq = 0xFFFFu - (fb[i] & 0xFFFFu);
      const int uu = (int)(sq >> 1), seg = a.nseg == 1 ? 0 : uu / upr;
      const int64_t id = (int64_t)(a.seg_rank0 + seg) * a.vr + (uu - seg * upr) * UNIT + (sq & 1u) * 8 + g;
      key = dsp_dev_key(mk_unord(fb[i] >> 16), (uint32_t)id);
    }
    key = mk_max(key, __shfl_xor_sync(0xffffffffu, key, 4));
    key = mk_max(key, __shfl_xor_sync(0xffffffffu, key, 8));
    key = mk_max(key, __shfl_xor_sync(0xffffffffu, key, 16));
    if (g == 0) sk[warp * bq + c0 + 8 * (i >> 1) + 2 * q + (i & 1)] = key;
  }
  rg_consumers_sync();
  if (tid < bq) {
    const int w0 = WHOLE ? 0 : 4 * (tid / N), w1 = WHOLE ? RG_NC : w0 + 4;
    unsigned long long v = 0ull;
    for (int w = w0; w < w1; w++) v = mk_max(v, sk[w * bq + tid]);
    sbest[tid] = v;
  }
}

/* Ring kernel 5's shared memory: ring kernel 4's, then E (bq rows of wgmma's
 * layout) on a 1024-byte boundary. */
__host__ __device__ inline size_t rd_e_offset(int bq, int stages) {
  return (rg_smem(bq, false, stages).total - 1024 + 1023) & ~(size_t)1023;
}
/* Then the base rows of the block's resident chunks (ring kernel 5 with N =
 * bq): nres chunks of [RG_C units][bq][16], as a stage holds them. */
__host__ __device__ inline size_t rd_rb_offset(int bq, int stages) {
  return (rd_e_offset(bq, stages) + (size_t)bq * RP * 2 + 1023) & ~(size_t)1023;
}
__host__ __device__ inline size_t rd_chunk_base_bytes(int bq) { return (size_t)RG_C * bq * UNIT * 2; }
/* Then the step end's key scratch: [RG_NC warps][bq] 64-bit keys. */
__host__ __device__ inline size_t rd_sk_offset(int bq, int stages, int nres) {
  return rd_rb_offset(bq, stages) + (size_t)nres * rd_chunk_base_bytes(bq);
}
__host__ __device__ inline size_t rd_smem_wg(int bq, int stages, int nres) {
  return rd_sk_offset(bq, stages, nres) + (size_t)RG_NC * bq * 8 + 1024;
}
/* Chunks per warpgroup an instance can hold in registers (64 registers each). */
__host__ __device__ constexpr int rd_res_max(int mt, int wgn) { return wgn == 16 * mt ? (mt <= 2 ? 2 : 1) : 0; }

/* WGN = 0: ring kernel 4 (mma.sync consumers); WGN = bq / 2: ring kernel 5
 * (two warpgroups of wgmma consumers, each with half of E on every chunk;
 * greedy fast path only, see markov.h); WGN = bq: the two warpgroups take the
 * chunks in turn, each multiplying its chunk by all of E (W2 read once from
 * shared memory). */
template <int MT, bool SAMPLING, int WGN>
__global__ void __launch_bounds__(WGN == 16 * MT ? RG_THREADS_WG : RG_THREADS, 1)
    rd_kernel(const dsp_mk_args a, const __grid_constant__ CUtensorMap tb) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024u - (dsp_saddr(smem_raw) & 1023u)) & 1023u);
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
  __shared__ int shdr[RG_MAXS]; /* the chunk in each stage, -1: end of step, -2 - i: resident slot i (step 0) */
  __shared__ __align__(8) uint64_t rbar[2]; /* resident chunks' base rows: full, empty */
  __shared__ __align__(8) uint64_t abar;    /* thread 0 arrived at the grid barrier (dsp_mk_args.pause) */
  __shared__ unsigned long long stc[5]; /* trace scratch of thread 0 (no registers held across the loop) */

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
  const int upr = a.seg_rows >> 4, U = a.nseg * upr, NCH = (U + RG_C - 1) / RG_C, nsteps = a.k_end - a.k_begin;
  unsigned *claims = a.barrier + 1;
  unsigned long long *trace = a.trace ? a.trace + (size_t)blockIdx.x * nsteps * DSP_MK_TRACE : NULL;
  /* Resident chunks (ring kernel 5 with N = bq): each warpgroup keeps `resw` chunks of
   * W2 in registers for the whole launch, so after step 0 only their base rows move;
   * block b owns chunks [b nrb, b nrb + nrb), the claims cover the rest from dyn0.
   * Off unless every block gets its share and the last (possibly partial) chunk
   * stays dynamic. */
  constexpr int RES = rd_res_max(MT, WGN);
  int resw = RES ? (a.resident < RES ? a.resident : RES) : 0;
  if (resw < 0 || NCH <= (int)gridDim.x * 2 * resw) resw = 0;
  const int nrb = 2 * resw, res0 = (int)blockIdx.x * nrb, dyn0 = (int)gridDim.x * nrb, NCHD = NCH - dyn0;
  unsigned char *rbuf = smem + rd_rb_offset(bq, S);
  const size_t CBB = rd_chunk_base_bytes(bq);

  if (tid == 0) {
    for (int s = 0; s < S; s++) {
      dsp_bar_init(dsp_saddr(&bars[s]), 1);               /* the producer's arrive (+ the bytes) */
      dsp_bar_init(dsp_saddr(&bars[RG_MAXS + s]), RG_NC * 32); /* every consumer thread arrives: each orders
                                                               its own reads of the stage before the refill */
    }
    dsp_bar_init(dsp_saddr(&rbar[0]), 1);
    dsp_bar_init(dsp_saddr(&rbar[1]), RG_NC * 32);
    dsp_bar_init(dsp_saddr(&abar), 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  mk_load_rows<SAMPLING>(a, sbest, sprev, st, sseed, spos, tid);
  __syncthreads();

  if (warp >= RG_NC) {
    /* producer (one thread): claim a chunk, wait for a free stage, copy the chunk's
     * W2 rows (one bulk copy, contiguous) and its base rows (one tensor box per
     * unit) into it; a claim past the end marks the step's end */
    if constexpr (WGN == 16 * MT) wg_setmaxnreg_dec<RG_PRODUCER_REGS>();
    if (warp != RG_NC || lane != 0) return;
    const bool hint = a.keep8 > 0;
    const uint64_t pol_keep = rd_policy(true), pol_stream = rd_policy(false);
    mk_dep_wait(); /* launched early (PDL): base comes from the LM head's product */
    int s = 0, r = 0; /* stage and round of the next copy (no divisions in the loop) */
    for (int ks = 0; ks < nsteps; ks++) {
      const int k = a.k_begin + ks;
      const bool rev = a.serpentine && (k & 1);
      unsigned long long wait = 0;
      /* three claims in flight: a claim's round trip (~1 us with every block's producer
       * on one counter) hides behind the copies of the two before it. Each claim keeps
       * its own register (a loop unrolled by three): moving a pending atomic's result
       * would wait for it. */
      unsigned p0 = atomicAdd(&claims[k], 1u), p1 = atomicAdd(&claims[k], 1u), p2 = atomicAdd(&claims[k], 1u);
      /* pause: no copy of this step until the block has arrived at the last step's grid
         barrier, whose release would otherwise wait for the copies in flight */
      if (a.pause && ks > 0) dsp_bar_wait(dsp_saddr(&abar), (uint32_t)(ks - 1) & 1u);
      if (nrb && ks > 0) { /* the resident chunks' base rows, once their last readers are done */
        const uint32_t rf = dsp_saddr(&rbar[0]);
        if (ks > 1) dsp_bar_wait(dsp_saddr(&rbar[1]), (uint32_t)(ks - 2) & 1u);
        dsp_bar_expect(rf, (uint32_t)(nrb * CBB));
        for (int i = 0; i < nrb; i++)
          rd_copy_base_rows(dsp_saddr(rbuf + i * CBB), &tb, a, (res0 + i) * RG_C, RG_C, upr, k, rf, hint, pol_stream);
      }
      /* stage s gets chunk ch (tag: what the consumers see, -1 = end of step) */
      auto fill = [&](int ch, int tag) {
        if (r > 0) {
          const unsigned long long w0 = trace ? rd_clock() : 0;
          dsp_bar_wait(dsp_saddr(&bars[RG_MAXS + s]), (uint32_t)(r - 1) & 1u);
          if (trace) wait += rd_clock() - w0;
        }
        const uint32_t full = dsp_saddr(&bars[s]);
        const uint32_t dst = dsp_saddr(smem + (size_t)s * SB);
        shdr[s] = tag;
        if (tag != -1) {
          const int u0 = ch * RG_C, nu = U - u0 < RG_C ? U - u0 : RG_C;
          const uint64_t pw = (ch & 7) < a.keep8 ? pol_keep : pol_stream;
          if (a.w2p) { /* the packed chunk: a whole 32 KB block (zero rows past the end) */
            dsp_bar_expect(full, (uint32_t)(rg_w_bytes() + (size_t)nu * UNIT * bq * 2));
            rd_copy(dst, a.w2p + (size_t)ch * (rg_w_bytes() / 2), (uint32_t)rg_w_bytes(), full, hint, pw);
          } else {
            dsp_bar_expect(full, (uint32_t)(nu * UNIT * (RP + bq) * 2));
            rd_copy(dst, a.w2 + (size_t)u0 * UNIT * RP, (uint32_t)(nu * UNIT * RP * 2), full, hint, pw);
          }
          rd_copy_base_rows(dst + (uint32_t)rg_w_bytes(), &tb, a, u0, nu, upr, k, full, hint, pol_stream);
        } else {
          dsp_bar_arrive(full);
        }
        if (++s == S) s = 0, r++;
      };
      if (ks == 0)
        for (int i = 0; i < nrb; i++) fill(res0 + i, -2 - i); /* resident chunks: loaded once */
      auto one = [&](unsigned &p) -> bool {
        const int c = (int)p;
        const bool valid = c < NCHD;
        if (valid) p = atomicAdd(&claims[k], 1u);
        const int ch = dyn0 + (rev ? NCHD - 1 - c : c);
        fill(valid ? ch : -1, valid ? ch : -1);
        return valid;
      };
      while (one(p0) && one(p1) && one(p2)) {
      }
      if (trace) trace[(size_t)ks * DSP_MK_TRACE + 7] = wait;
    }
    return;
  }

  /* consumers */
  if constexpr (WGN == 16 * MT) wg_setmaxnreg_inc<RG_CONSUMER_REGS>();
  const int mt = MT == 1 ? 0 : warp % MT;
  const bool active = mt * 16 < bq;
  uint4 af[2 * KB]; /* ring kernel 4 only */
  /* this warpgroup's resident chunks as wgmma A fragments: two named arrays, each
   * indexed only by constants, so both stay in registers */
  uint32_t fr0[16][4], fr1[16][4];
  constexpr int NF = WGN ? WGN / 4 : 1;
  uint32_t fbw[NF];
  unsigned char *se = smem + rd_e_offset(bq, S);
  if constexpr (WGN > 0)
    rd_gather_e(a, sprev, se, tid);
  else if (active)
    rg_load_e<MT>(a, sprev, mt, g, q, af);
  const bool fast = !SAMPLING && !a.fp32_add && U <= 16384; /* see mk_fast_tile */
  int s = 0;
  uint32_t ph = 0; /* stage and phase parity of the next chunk */
  for (int ks = 0; ks < nsteps; ks++) {
    const int k = a.k_begin + ks;
    unsigned long long best0 = 0ull, best1 = 0ull;
    uint32_t fb0 = 0u, fb1 = 0u;
#pragma unroll
    for (int i = 0; i < NF; i++) fbw[i] = 0u;
    if (trace && tid == 0) stc[0] = dsp_dev_now_ns(), stc[1] = rd_clock(), stc[2] = 0, stc[3] = 0;
    unsigned nch = 0; /* chunks seen this step (ring kernel 5 with N = bq: who takes the next) */
    if constexpr (RES > 0) {
      if (resw && ks > 0) { /* the resident chunks first: their W2 is already here.
                              Done last they delay every block's arrival at the grid barrier
                              (about 2.5 us per step: bench/RESULTS.md) */
        const int wg = warp >> 2;
        dsp_bar_wait(dsp_saddr(&rbar[0]), (uint32_t)(ks - 1) & 1u);
        auto one_res = [&](const uint32_t(&f)[16][4], int j) {
          const int slot = wg * resw + j;
          float d[WGN / 2];
          wg_product_rs<WGN>(d, f, dsp_saddr(se), bq, 0);
          rd_epi_wg<WGN>(a, d, res0 + slot, U, upr, (const uint16_t *)(rbuf + slot * CBB), 0, warp & 3, g, q, fbw);
        };
        one_res(fr0, 0);
        if (RES > 1 && resw > 1) one_res(fr1, 1);
        dsp_bar_arrive(dsp_saddr(&rbar[1]));
      }
    }
    for (;;) {
      if (trace && tid == 0) stc[4] = rd_clock();
      dsp_bar_wait(dsp_saddr(&bars[s]), ph);
      if (trace && tid == 0) stc[2] += rd_clock() - stc[4];
      const int ch = *(volatile int *)&shdr[s];
      const uint16_t *ws = (const uint16_t *)(smem + (size_t)s * SB), *bs = ws + rg_w_bytes() / 2;
      if constexpr (WGN == 16 * MT) {
        /* each warpgroup multiplies every other chunk by all of E: while one runs its
         * epilogue, the other's wgmma chain runs (both see every stage in order, so
         * they agree on the count; the keys' max does not depend on who took what) */
        if (ch >= 0 && (nch++ & 1) == (warp >> 2))
          rd_chunk_wg<WGN>(a, ch, U, upr, dsp_saddr(ws), bs, dsp_saddr(se), 0, warp & 3, g, q, fbw);
        if (RES > 0 && ch <= -2 && (-2 - ch) / resw == (warp >> 2)) { /* step 0: a resident chunk arrives */
          const int slot = -2 - ch;
          if (slot % resw == 0)
            wg_load_a(fr0, (const unsigned char *)ws, warp & 3, g, q);
          else if (RES > 1)
            wg_load_a(fr1, (const unsigned char *)ws, warp & 3, g, q);
          rd_chunk_wg<WGN>(a, res0 + slot, U, upr, dsp_saddr(ws), bs, dsp_saddr(se), 0, warp & 3, g, q, fbw);
        }
      } else if constexpr (WGN > 0) {
        if (ch >= 0) rd_chunk_wg<WGN>(a, ch, U, upr, dsp_saddr(ws), bs, dsp_saddr(se), warp >> 2, warp & 3, g, q, fbw);
      } else if (ch >= 0 && a.w2p) {
        rd_chunk<MT, SAMPLING, true>(a, k, ch, U, upr, fast, ws, bs, warp, mt, g, q, af, best0,
                                     best1, fb0, fb1, st, sseed, spos);
      } else if (ch >= 0) {
        rd_chunk<MT, SAMPLING, false>(a, k, ch, U, upr, fast, ws, bs, warp, mt, g, q, af, best0,
                                      best1, fb0, fb1, st, sseed, spos);
      }
      dsp_bar_arrive(dsp_saddr(&bars[RG_MAXS + s])); /* this thread is done with stage s */
      if (++s == S) s = 0, ph ^= 1u;
      if (ch == -1) break;
      if (trace && tid == 0) stc[3]++;
    }
    if (trace && tid == 0) {
      unsigned long long *tr = trace + (size_t)ks * DSP_MK_TRACE;
      tr[0] = stc[0], tr[1] = dsp_dev_now_ns(), tr[3] = rd_clock() - stc[1], tr[5] = stc[2], tr[6] = stc[3];
      stc[1] = rd_clock();
    }
    unsigned long long *trk = trace ? trace + (size_t)ks * DSP_MK_TRACE : NULL;
    if constexpr (WGN > 0) {
      rd_merge_wg<WGN, WGN == 16 * MT>(a, fbw, warp, g, q, tid,
                                       (unsigned long long *)(smem + rd_sk_offset(bq, S, 2 * a.resident)), sbest);
      if (rg_grid_end(a, ks, nsteps, tid, sbest, sprev, &slast, trk, dsp_saddr(&abar))) rd_gather_e(a, sprev, se, tid);
    } else {
      rg_step_end<MT>(a, ks, nsteps, fast, fb0, fb1, best0, best1, active, mt, g, q, tid, sbest, sprev, &slast,
                      af, trk, dsp_saddr(&abar));
    }
    if (trace && tid == 0) {
      unsigned long long *tr = trace + (size_t)ks * DSP_MK_TRACE;
      tr[2] = dsp_dev_now_ns(), tr[4] = rd_clock() - stc[1];
    }
  }
}

}  // namespace

#endif
