/* The bf16 NT GEMM kernel on the warpgroup tensor cores (see gemm_wgmma.h for
 * the contract and the accumulation order), as templates: the product
 * instances live in gemm_wgmma.cu, measurement-only parts (PART != 0) are
 * instantiated by bench/ alone.
 *
 * Block: 384 threads. Warpgroup 0's thread 0 is the producer: for each of the
 * block's tiles (tile t, t + grid, ...: vocabulary tile t / nmt, token tile
 * t % nmt, so tiles that share a weight box run side by side) it lands, per
 * 64 k, the weight box [BM rows][64 k] and the activation box [NT rows][64 k]
 * (one TMA each, 128-byte swizzle, zero fill past M, N and K) in the next free
 * stage. Warpgroups 1-2 each own 64 of the tile's vocabulary rows (BM 128), or
 * half of its tokens (BM 64, for few tokens): per stage
 * four m64nNk16 wgmma in k order, one group kept in flight, the stage handed
 * back when the group before it has finished. The epilogue rounds to bf16
 * and stores straight from the fragments (each warp writes 16-byte runs of
 * eight vocabulary ids; the producer is meanwhile filling the next tile's
 * stages).
 *
 * Clusters of two (the default where pairs fill the device: bench/RESULTS.md v37): the two blocks of a cluster take vocabulary
 * tiles 2p and 2p + 1 of the same token tile, and each producer lands half of
 * the activation box in both blocks (TMA multicast), halving what the
 * activations cost in L2 reads (on an H200: 1-3% faster after idle, equal in
 * rounds, energy within the calls' spread). A stage is then written by both producers, so
 * each consumer warp hands it back to both blocks (16 arrivals per stage), and
 * both blocks meet at a cluster barrier before either exits. Which block
 * computes a row changes nothing in its arithmetic. CUDA C++ only; the wgmma
 * path exists only in sm_90a builds. */
#ifndef DSP_KERNELS_CUDA_GEMM_WGMMA_KERNEL_CUH
#define DSP_KERNELS_CUDA_GEMM_WGMMA_KERNEL_CUH

#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdio.h>
#include <stdlib.h>

#include <atomic>

#include "kernels/cuda/check_fill.cuh"
#include "kernels/cuda/common/check.h"
#include "kernels/cuda/common/copy.cuh"
#include "kernels/cuda/common/devmath.cuh"
#include "kernels/cuda/common/launch.cuh"
#include "kernels/cuda/common/slices.cuh"
#include "kernels/cuda/common/sync.cuh"
#include "kernels/cuda/common/wgmma.cuh"
#include "kernels/cuda/gemm_wgmma.h"
extern "C" {
#include "core/env.h"
}

namespace {

constexpr int LW_BM = 128;  /* vocabulary rows per tile (the wide tiles; the narrow ones have 64) */
constexpr int LW_BK = 64;   /* k per stage: one 128-byte swizzle row */
constexpr int LW_THREADS = 384;
constexpr int LW_MAXS = 16; /* the narrow tiles' stages are small: more of them keep enough bytes in flight */

/* BM 128: consumer warpgroup c takes vocabulary rows 64 c.. of all NT tokens; BM 64: all 64 rows of the
 * tokens NT / 2 c.. (a narrow weight tile doubles the tiles a few tokens spread over the SMs). */
template <int NT, int BM = LW_BM>
struct lw_cfg {
  static_assert(BM == 128 || (BM == 64 && NT % 16 == 0), "64-row tiles split the tokens in two 8-row groups");
  static constexpr uint32_t w_bytes = BM * LW_BK * 2;
  static constexpr uint32_t a_bytes = NT * LW_BK * 2; /* NT % 8 == 0: a multiple of 1024 */
  static constexpr uint32_t stage = w_bytes + a_bytes;
  static constexpr int cw = BM == 128 ? NT : NT / 2; /* one consumer warpgroup's token columns */
};

/* Split K (SK > 1): each block of a cluster keeps its fp32 partial tile here
 * for the others to read, 256 consumer threads x NT / 2 values. */
template <int NT>
constexpr size_t lw_red_bytes() {
  return (size_t)256 * (NT / 2) * 4;
}

/* Stages that fit: the ring, 2 * LW_MAXS mbarriers, with split K two more and
 * the partial tile, and 1024 bytes of alignment slack. */
template <int NT, int SK = 1, int BM = LW_BM>
inline int lw_stages(size_t optin) {
  const size_t fixed = 1024 + 2 * LW_MAXS * 8 + (SK > 1 ? 16 + lw_red_bytes<NT>() : 0);
  if (optin <= fixed) return 0;
  const int s = (int)((optin - fixed) / lw_cfg<NT, BM>::stage);
  return s > LW_MAXS ? LW_MAXS : s;
}
template <int NT, int SK = 1, int BM = LW_BM>
inline size_t lw_smem(int stages) {
  return (size_t)stages * lw_cfg<NT, BM>::stage + 2 * LW_MAXS * 8 + (SK > 1 ? 16 + lw_red_bytes<NT>() : 0) + 1024;
}

/* Descriptor of a K-major tile with the 128-byte swizzle (layout type 1):
 * rows of 128 bytes, 1024 bytes between 8-row groups; a k group of 16 starts
 * 32 bytes further along the row (the swizzle acts on address bits). */
__device__ __forceinline__ uint64_t lw_desc(uint32_t saddr) {
  return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
         ((uint64_t)1 << 62);
}

/* The next ring stage; the parity flips each time the ring wraps. */
__device__ __forceinline__ void lw_next(int &s, uint32_t &ph, int stages) {
  if (++s == stages) {
    s = 0;
    ph ^= 1;
  }
}



/* A consumer warp hands a stage back to every block that writes it. */
template <int CL>
__device__ __forceinline__ void lw_release(uint32_t bar) {
  if (CL == 1) {
    dsp_bar_arrive(bar);
  } else {
    dsp_bar_arrive_remote(bar, 0);
    dsp_bar_arrive_remote(bar, 1);
  }
}



/* Tile t of the walk: its first vocabulary row and token row. Single blocks
 * take tile t = (vocabulary tile t / nmt, token tile t % nmt); clusters of two
 * take pair t = (vocabulary pair t / nmt, token tile t % nmt), block `rank`
 * its tile 2 (t / nmt) + rank. A second tile past the vocabulary's end
 * recomputes the last tile and stores nothing (its producer still lands its
 * half of the activations). */
template <int NT, int CL, int BM>
__device__ __forceinline__ void lw_tile(int t, int nmt, int nvt, uint32_t rank, int &v0, int &m0, bool &store) {
  const int vt = CL * (t / nmt) + (int)rank;
  store = vt < nvt;
  v0 = (store ? vt : nvt - 1) * BM;
  m0 = (t % nmt) * NT;
}

/* PART (bench only, dsp_cuda_gemm_wg_part): 0 the product; 1 the tensor-core work
 * alone (the producer lands each stage once, then hands the same bytes back
 * round after round, so no operand leaves HBM or L2 after the first pass);
 * 2 the data movement alone (every box lands, the consumers hand it back
 * untouched and store zeros); 3 and 4 as 2 with only the weight boxes, only
 * the activation boxes. All keep the pipeline's barriers and the
 * stores, so their energies split the product's (bench_lm).
 *
 * SK > 1 (with CL == 1): K split over the SK blocks of a cluster. Every block
 * walks the same tiles; block r runs k blocks [r nkb / SK, (r + 1) nkb / SK)
 * onto +0, keeps its partial tile in shared memory, and the tile's element is
 * the halving tree of p_0 .. p_{SK-1} in fp32 (kernels/cpu/slices.h's order,
 * so a weight in SK K slices runs here), then one rounding, whichever block
 * adds it (block r adds the token columns 8 j.. with j % SK == r). SK comes
 * from the weight's shape or its slices alone (gemm.cu), so the order is
 * batch-invariant.
 *
 * BM 64 (no split): the tile is 64 vocabulary rows; each consumer warpgroup multiplies them with its half of
 * the token tile. An element's k groups and instructions are those of BM 128 (m64 wgmma), only N is narrower. */
template <int NT, int CL, int PART, int SK = 1, int BM = LW_BM>
__global__ void __launch_bounds__(LW_THREADS, 1)
    lw_kernel(const __grid_constant__ CUtensorMap tw, const __grid_constant__ CUtensorMap ta, void *__restrict__ out,
              int m, int n, int nkb, long long ldo, int nmt, int nvt, int nwalk, int stages, int f32) {
  static_assert(CL == 1 || SK == 1, "a cluster shares activations or splits K, not both");
  static_assert(BM == LW_BM || SK == 1, "the split's partial tile is laid out for 128-row tiles");
  constexpr int CS = CL * SK, CW = lw_cfg<NT, BM>::cw;
  constexpr uint32_t WB = lw_cfg<NT, BM>::w_bytes, SB = lw_cfg<NT, BM>::stage, AH = lw_cfg<NT, BM>::a_bytes / CL;
  extern __shared__ unsigned char lw_raw[];
  /* the shared window has the same base in every block, so the same offsets line up across the cluster */
  unsigned char *smem = (unsigned char *)(((uintptr_t)lw_raw + 1023) & ~(uintptr_t)1023);
  const uint32_t sbase = dsp_saddr(smem);
  const uint32_t full0 = sbase + (uint32_t)stages * SB, empty0 = full0 + LW_MAXS * 8;
  const uint32_t ready = empty0 + LW_MAXS * 8, done = ready + 8, red = done + 8; /* split K only */
  const int tid = threadIdx.x, wg = tid >> 7;
  uint32_t rank = 0;
  if (CS > 1) asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  const uint32_t vrank = SK > 1 ? 0u : rank; /* the rank that picks a vocabulary tile */
  const int kb0 = SK > 1 ? (int)rank * nkb / SK : 0, kb1 = SK > 1 ? ((int)rank + 1) * nkb / SK : nkb;
  const int walker = CS > 1 ? (int)(blockIdx.x / CS) : (int)blockIdx.x, nwalkers = (int)gridDim.x / CS;
  if (tid == 0) {
    for (int s = 0; s < stages; s++) {
      dsp_bar_init(full0 + 8 * s, 1);
      dsp_bar_init(empty0 + 8 * s, 8 * CL); /* one arrival per consumer warp of every block that writes it */
    }
    if (SK > 1) {
      dsp_bar_init(ready, SK); /* one arrival per block, per tile */
      dsp_bar_init(done, SK);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (CS > 1)
    dsp_cluster_sync(); /* the peer's barriers exist before any multicast or remote arrival */
  else
    __syncthreads();

  if (wg == 0) {
    /* the producer warpgroup leaves here (a consumer branch entered from a join would make ptxas serialize the
       wgmma: C7520); in a cluster it first meets the peer at the exit barrier */
    if (tid == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(&tw) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(&ta) : "memory");
      uint64_t pw, pa; /* weights stream once; activations are read by every tile */
      pw = dsp_l2_evict_first();
      pa = dsp_l2_evict_last();
      /* the first ring's weights before griddepcontrol.wait (launched programmatically, this grid may run beside
         the kernel that writes the activations; without PDL the wait returns at once) */
      int pre = 0;
      if (PART == 0)
        for (int t = walker; t < nwalk && pre < stages; t += nwalkers) {
          int v0, m0;
          bool store;
          lw_tile<NT, CL, BM>(t, nmt, nvt, vrank, v0, m0, store);
          for (int kb = kb0; kb < kb1 && pre < stages; kb++, pre++) {
            dsp_bar_expect(full0 + 8 * pre, SB);
            dsp_tcopy2(sbase + (uint32_t)pre * SB, &tw, kb * LW_BK, v0, full0 + 8 * pre, pw);
          }
        }
      asm volatile("griddepcontrol.wait;" ::: "memory");
      int s = 0, fills = 0;
      uint32_t ph = 0;
      for (int t = walker; t < nwalk; t += nwalkers) {
        int v0, m0;
        bool store;
        lw_tile<NT, CL, BM>(t, nmt, nvt, vrank, v0, m0, store);
        for (int kb = kb0; kb < kb1; kb++) {
          dsp_bar_wait(empty0 + 8 * s, ph ^ 1);
          const uint32_t st = sbase + (uint32_t)s * SB, fb = full0 + 8 * s;
          if (PART == 1 && fills++ >= stages) { /* the stage keeps its first bytes */
            dsp_bar_arrive(fb);
            lw_next(s, ph, stages);
            continue;
          }
          if (PART != 0 || fills++ >= pre) { /* else its weights and expected bytes are on their way */
            dsp_bar_expect(fb, PART == 3 ? WB : PART == 4 ? SB - WB : SB);
            if (PART != 4) dsp_tcopy2(st, &tw, kb * LW_BK, v0, fb, pw);
          }
          if (PART != 3 && CL == 1) dsp_tcopy2(st + WB, &ta, kb * LW_BK, m0, fb, pa);
          if (PART != 3 && CL > 1) dsp_tcopy2_mc(st + WB + rank * AH, &ta, kb * LW_BK, m0 + (int)rank * (NT / CL), fb, pa);
          lw_next(s, ph, stages);
        }
      }
    }
    __syncwarp();
    if (CS > 1) dsp_cluster_sync();
    return;
  }
  {
    /* consumers: warpgroup c = wg - 1 owns tile rows 64 c .. 64 c + 63 (BM 128) or token columns CW c.. (BM 64) */
    const int c = wg - 1, w4 = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, q = lane & 3, ct = tid - 128;
    const int rc = BM == LW_BM ? 64 * c : 0, cc0 = BM == LW_BM ? 0 : CW * c; /* this warpgroup's rows, columns */
    float d[CW / 2];
    int s = 0, it = 0;
    uint32_t ph = 0;
    if (SK > 1 && ct == 0) /* the partial tile starts free: done's phase 0 completes before the first tile */
      for (int p = 0; p < SK; p++) dsp_bar_arrive_remote_relaxed(done, (uint32_t)p);
    for (int t = walker; t < nwalk; t += nwalkers, it++) {
      int v0, m0;
      bool store;
      lw_tile<NT, CL, BM>(t, nmt, nvt, vrank, v0, m0, store);
      /* this block's last tile: a kernel launched programmatically after this one (the Markov tail, PDL) may
         start placing its blocks on the SMs that blocks with one tile fewer leave; it still waits for this
         grid's completion (griddepcontrol.wait) before it reads base */
      if (t + nwalkers >= nwalk) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#pragma unroll
      for (int i = 0; i < CW / 2; i++) d[i] = 0.0f;
      int prev = -1;
      for (int kb = kb0; kb < kb1; kb++) {
        dsp_bar_wait(full0 + 8 * s, ph);
        if (PART >= 2) { /* the bytes landed; nothing multiplies them */
          if (lane == 0) lw_release<CL>(empty0 + 8 * s);
          lw_next(s, ph, stages);
          continue;
        }
        const uint32_t st = sbase + (uint32_t)s * SB;
        const uint32_t wa = st + (uint32_t)rc * 128u, aa = st + WB + (uint32_t)cc0 * 128u;
        wg_fence();
#pragma unroll
        for (int i = 0; i < LW_BK / 16; i++) wg_mma<CW>(d, lw_desc(wa + 32u * i), lw_desc(aa + 32u * i));
        wg_commit_wait1(); /* the group before this one is done: its stage can be refilled */
        if (prev >= 0 && lane == 0) lw_release<CL>(empty0 + 8 * prev);
        prev = s;
        lw_next(s, ph, stages);
      }
      wg_commit_wait();
      if (prev >= 0 && lane == 0) lw_release<CL>(empty0 + 8 * prev);
      const int nlim = store ? n : 0; /* a predicate, not a branch (C7520 again) */
      /* d[4 j + {0, 1, 2, 3}] = (row r, token 8 j + 2 q), (r, + 1), (r + 8, 8 j + 2 q), (r + 8, + 1) */
      const int r = v0 + rc + 16 * w4 + g;
      if (SK == 1) {
#pragma unroll
        for (int j = 0; j < CW / 8; j++) {
          const int col = m0 + cc0 + 8 * j + 2 * q;
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int rr = r + 8 * (e >> 1), cc = col + (e & 1);
            if (rr < nlim && cc < m) dsp_dev_store_sum(out, (size_t)cc * (size_t)ldo + rr, d[4 * j + e], f32);
          }
        }
      } else {
        /* the partial tile as [j][thread][e]: one 16-byte load per (j, block) when adding */
        float4 *mine = (float4 *)(smem + (red - sbase));
        /* one thread per block waits at cluster scope; the CTA barrier hands its view to the others */
        if (ct == 0) dsp_bar_wait_acquire_cluster(done, (uint32_t)it & 1u); /* the peers read the last tile */
        dsp_named_sync(256);
#pragma unroll
        for (int j = 0; j < CW / 8; j++) mine[j * 256 + ct] = make_float4(d[4 * j], d[4 * j + 1], d[4 * j + 2], d[4 * j + 3]);
        dsp_named_sync(256); /* every consumer's part is written; one thread releases them to the cluster */
        if (ct == 0) {
          dsp_fence_cluster();
          for (int p = 0; p < SK; p++) dsp_bar_arrive_remote_relaxed(ready, (uint32_t)p);
          dsp_bar_wait_acquire_cluster(ready, (uint32_t)it & 1u);
        }
        dsp_named_sync(256);
        for (int j = (int)rank; j < CW / 8; j += SK) {
          float4 x[SK];
#pragma unroll
          for (int p = 0; p < SK; p++) x[p] = *dsp_cluster_peer(mine + j * 256 + ct, (uint32_t)p);
          float v[4];
#pragma unroll
          for (int e = 0; e < 4; e++) { /* the halving tree over the parts (slices.cuh) */
            float xe[SK];
#pragma unroll
            for (int p = 0; p < SK; p++) xe[p] = e == 0 ? x[p].x : e == 1 ? x[p].y : e == 2 ? x[p].z : x[p].w;
            v[e] = dsp_slice_tree<0, SK>(xe);
          }
          const int col = m0 + 8 * j + 2 * q;
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int rr = r + 8 * (e >> 1), cc = col + (e & 1);
            if (rr < nlim && cc < m) dsp_dev_store_sum(out, (size_t)cc * (size_t)ldo + rr, v[e], f32);
          }
        }
        dsp_named_sync(256); /* every consumer has read its columns; one thread tells the blocks */
        if (ct == 0) {
          dsp_fence_cluster();
          for (int p = 0; p < SK; p++) dsp_bar_arrive_remote_relaxed(done, (uint32_t)p);
        }
      }
    }
  }
  /* a cluster's blocks leave together: the peer may still arrive on this block's barriers or read its tile */
  if (CS > 1) dsp_cluster_sync();
}

/* Tensor map of a row-major [rows][k] bf16 matrix, box [box_rows][64 k], 128-byte swizzle. */
dsp_status lw_map(CUtensorMap *tm, const void *p, int64_t rows, int64_t k, int64_t ld, int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 enc = dsp_tma_encoder();
  if (!enc) return dsp_fail(DSP_ERR_DEVICE, "cuda lm head (wgmma): no cuTensorMapEncodeTiled");
  const cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)rows};
  const cuuint64_t strides[1] = {(cuuint64_t)ld * 2};
  const cuuint32_t box[2] = {LW_BK, (cuuint32_t)box_rows}, es[2] = {1, 1};
  const CUresult r = enc(tm, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)p, dims, strides, box, es,
                         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return dsp_fail(DSP_ERR_DEVICE, "cuda lm head (wgmma): cuTensorMapEncodeTiled failed (%d) for [%lld][%lld]",
                    (int)r, (long long)rows, (long long)k);
  return DSP_OK;
}

struct lw_dev {
  int sms;
  size_t optin;
  int ok;
};

/* This device's SM count and shared memory (once per device index; 0 when unusable). */
lw_dev lw_device() {
  lw_dev d{0, 0, 0};
  int dev = 0, major = 0, minor = 0, sms = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) {
    cudaGetLastError();
    return d;
  }
  d.sms = sms;
  d.optin = (size_t)optin;
  d.ok = major == 9 && minor == 0 && dsp_tma_encoder() != NULL;
  return d;
}

/* Clusters of CL blocks of this instance that can be resident at once (asked once per instance). Clusters live
 * inside one GPC, so fewer than sms / CL may fit: a persistent grid must not exceed them (a second wave would
 * double the time). 0 when the query fails. */
/* The device model, asked once per process (a process drives devices of one model). */
const lw_dev &lw_dev_once() {
  static const lw_dev dv = lw_device();
  return dv;
}

template <int NT, int CL, int PART, int SK = 1, int BM = LW_BM>
int lw_resident(const lw_dev &dv, cudaLaunchConfig_t cfg) {
  constexpr int CS = CL * SK;
  static std::atomic<int> resident{0};
  if (!resident.load()) {
    cfg.gridDim = dim3((unsigned)(dv.sms / CS * CS));
    int nc = 0;
    if (cudaOccupancyMaxActiveClusters(&nc, lw_kernel<NT, CL, PART, SK, BM>, &cfg) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    resident.store(nc < 1 ? 1 : nc > dv.sms / CS ? dv.sms / CS : nc);
    if (dsp_env_get()->verbose)
      fprintf(stderr, "dspark: lm wgmma tile %d x %d cluster %d split %d part %d: %d clusters resident (of %d SMs), %zu B\n",
              BM, NT, CL, SK, PART, nc, dv.sms, (size_t)cfg.dynamicSmemBytes);
  }
  return resident.load();
}

/* The launch configuration of an instance (its shared memory opted in on the current device). */
template <int NT, int CL, int PART, int SK = 1, int BM = LW_BM>
dsp_status lw_config(const lw_dev &dv, cudaStream_t s, cudaLaunchAttribute *attr, cudaLaunchConfig_t *cfg) {
  const size_t smem = lw_smem<NT, SK, BM>(lw_stages<NT, SK, BM>(dv.optin));
  /* per call: the opt-in is per device, and one process may drive several (TP threads) */
  DSP_CUDA_TRY(cudaFuncSetAttribute(lw_kernel<NT, CL, PART, SK, BM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem));
  *cfg = cudaLaunchConfig_t{};
  cfg->blockDim = dim3(LW_THREADS);
  cfg->dynamicSmemBytes = smem;
  cfg->stream = s;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = CL * SK;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg->attrs = attr;
  cfg->numAttrs = 1;
  return DSP_OK;
}

/* The default cluster size: 2 where pairs fill at least 15/16 of the SMs (an H200: all 132), else 1
 * (decided once per process, like the device model). */
template <int NT, int BM = LW_BM>
int lw_default_cluster(const lw_dev &dv, cudaStream_t s) {
  static std::atomic<int> chosen{0};
  if (!chosen.load()) {
    cudaLaunchAttribute attr[1];
    cudaLaunchConfig_t cfg;
    int c = 1;
    if (lw_config<NT, 2, 0, 1, BM>(dv, s, attr, &cfg) == DSP_OK)
      c = 2 * lw_resident<NT, 2, 0, 1, BM>(dv, cfg) * 16 >= dv.sms * 15 ? 2 : 1;
    else
      dsp_error_clear();
    chosen.store(c);
  }
  return chosen.load();
}

/* Clusters of a split-K instance resident at once (0 when it cannot run here). */
template <int NT, int SK>
int lw_split_resident(const lw_dev &dv) {
  if (lw_stages<NT, SK>(dv.optin) < 2) return 0;
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg;
  if (lw_config<NT, 1, 0, SK>(dv, 0, attr, &cfg) != DSP_OK) {
    dsp_error_clear();
    return 0;
  }
  return lw_resident<NT, 1, 0, SK>(dv, cfg);
}

template <int NT, int CL, int PART = 0, int SK = 1, int BM = LW_BM>
dsp_status lw_launch(const void *a, int64_t lda, const void *w, void *out, int64_t m, int64_t n, int64_t k,
                     int64_t ldo, const lw_dev &dv, cudaStream_t s, bool pdl = false, int f32 = 0) {
  const int stages = lw_stages<NT, SK, BM>(dv.optin);
  if (stages < 2) return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda lm head (wgmma): shared memory too small");
  if (SK > 1 && (k / LW_BK) < SK)
    return dsp_fail(DSP_ERR_ARG, "cuda gemm (wgmma): K %lld split %d ways", (long long)k, SK);
  CUtensorMap tw, ta;
  DSP_TRY(lw_map(&tw, w, n, k, k, BM));
  DSP_TRY(lw_map(&ta, a, m, k, lda, NT / CL));
  const int nmt = (int)((m + NT - 1) / NT), nvt = (int)((n + BM - 1) / BM);
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg;
  DSP_TRY((lw_config<NT, CL, PART, SK, BM>(dv, s, attr, &cfg)));
  if (pdl) attr[1] = dsp_pdl_attribute(), cfg.numAttrs = 2;
  const int most = lw_resident<NT, CL, PART, SK, BM>(dv, cfg); /* clusters that fit at once */
  if (most < 1) return dsp_fail(DSP_ERR_DEVICE, "cuda lm head (wgmma): no resident cluster of %d", CL * SK);
  const int nwalk = nmt * ((nvt + CL - 1) / CL), walkers = nwalk < most ? nwalk : most;
  cfg.gridDim = dim3((unsigned)(walkers * CL * SK));
  DSP_CUDA_TRY(cudaLaunchKernelEx(&cfg, lw_kernel<NT, CL, PART, SK, BM>, tw, ta, out, (int)m, (int)n,
                                  (int)(k / LW_BK), (long long)ldo, nmt, nvt, nwalk, stages, f32));
  return DSP_OK;
}

}  // namespace

#endif
