/* Host side of ring kernels 4-5 (markov_ring.cuh, markov_dyn.cuh): stage
 * count, the base tensor map, instance choice by padded batch and launch.
 * CUDA C++ only. */
#ifndef DSP_CUDA_MARKOV_RING_LAUNCH_CUH
#define DSP_CUDA_MARKOV_RING_LAUNCH_CUH

#include "kernels/cuda/markov_dyn.cuh"

namespace {

/* Stages that fit the device's shared memory for this padded batch. */
inline int rg_stages_for(int bq, bool sampling) {
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return 0;
  const size_t extra = rg_smem(bq, sampling, 0).total + 1024; /* + static shared memory, with margin */
  if ((size_t)optin <= extra) return 0;
  int s = (int)(((size_t)optin - extra) / rg_stage_bytes(bq));
  return s > RG_MAXS ? RG_MAXS : s;
}


/* The tensor map of the base logits for ring kernel 4: (columns ld, rows
 * k_end * bq, segments nseg) with box (16, bq, 1): one unit's base rows of one
 * step and segment, landing as [bq][16]. */
inline dsp_status rd_base_map(const dsp_mk_args *a, CUtensorMap *tm) {
  const PFN_cuTensorMapEncodeTiled_v12000 enc = dsp_tma_encoder();
  if (!enc) return dsp_fail(DSP_ERR_DEVICE, "cuda markov ring kernels 4-5: no cuTensorMapEncodeTiled");
  const cuuint64_t rows = (cuuint64_t)a->k_end * (cuuint64_t)a->bq;
  const cuuint64_t dims[3] = {(cuuint64_t)a->ld, rows, (cuuint64_t)a->nseg};
  const cuuint64_t strides[2] = {(cuuint64_t)a->ld * 2,
                                 a->nseg > 1 ? (cuuint64_t)a->seg_stride * 2 : rows * (cuuint64_t)a->ld * 2};
  const cuuint32_t box[3] = {UNIT, (cuuint32_t)a->bq, 1}, es[3] = {1, 1, 1};
  const CUresult r = enc(tm, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, (void *)a->base, dims, strides, box, es,
                         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return dsp_fail(DSP_ERR_DEVICE, "cuda markov ring kernel 4: cuTensorMapEncodeTiled (base) failed (%d)", (int)r);
  return DSP_OK;
}

typedef void (*rd_fn)(const dsp_mk_args, const CUtensorMap);

/* Ring kernel 5's instance for MT batch tiles (none for sampling). */
template <int MT, bool SAMPLING>
inline rd_fn rd_wg_kernel() {
  if constexpr (SAMPLING)
    return nullptr;
  else
    return rd_kernel<MT, false, 8 * MT>;
}

/* Ring kernel 5 with one computing warpgroup (N = bq <= 64). */
template <int MT, bool SAMPLING>
inline rd_fn rd_wg1_kernel() {
  if constexpr (SAMPLING || MT > 4)
    return nullptr;
  else
    return rd_kernel<MT, false, 16 * MT>;
}

/* Ring kernel 5 applies: greedy fast path, bq filling MT tiles, packed W2. */
inline bool rd_wg_applies(const dsp_mk_args *a, int mt, bool sampling) {
  return !sampling && a->bq == 16 * mt && a->w2p && !a->fp32_add && (int64_t)a->nseg * (a->seg_rows >> 4) <= 16384;
}

template <int MT, bool SAMPLING>
dsp_status rg_launch_mt(const dsp_mk_args *a, const dsp_mk_launch *l, cudaStream_t s, int query, size_t *smem,
                        int *occ) {
  const rd_fn kern4 = rd_kernel<MT, SAMPLING, 0>;
  if (query) {
    const int st = rg_stages_for(a->bq, SAMPLING);
    if (st < 2) return dsp_fail(DSP_ERR_DEVICE, "cuda markov ring kernel: shared memory too small for 2 stages");
    const size_t bytes = rg_smem(a->bq, SAMPLING, st).total;
    /* the instances serve several buckets (different bq, stages): allow the most */
    int dev = 0, optin = 0;
    cudaFuncAttributes fa;
    DSP_CUDA_TRY(cudaGetDevice(&dev));
    DSP_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    for (rd_fn kd : {kern4, rd_wg_kernel<MT, SAMPLING>(), rd_wg1_kernel<MT, SAMPLING>()}) {
      if (!kd) continue;
      DSP_CUDA_TRY(cudaFuncGetAttributes(&fa, kd));
      DSP_CUDA_TRY(cudaFuncSetAttribute(kd, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - (int)fa.sharedSizeBytes));
    }
    DSP_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(occ, kern4, RG_THREADS, bytes));
    *smem = bytes;
    occ[1] = st; /* the caller passes int occ[2] */
    return DSP_OK;
  }
  const int ver = l->ring;
  if (ver < 4 || ver > (DSP_MK_BENCH_VARIANTS ? 6 : 5))
    return dsp_fail(DSP_ERR_ARG, "cuda markov ring kernel %d: only ring kernels 4-5 exist", ver);
  if (a->stages < 2 || a->stages > RG_MAXS)
    return dsp_fail(DSP_ERR_ARG, "cuda markov ring kernel: %d stages outside [2, %d]", a->stages, RG_MAXS);
  /* ring kernel 5: one computing warpgroup up to bq 32, two above (faster each side:
   * bench/RESULTS.md); a benchmark build's ver 6 takes the other split */
  const bool wg1 = (ver == 6) != (a->bq <= 32) && rd_wg1_kernel<MT, SAMPLING>();
  const rd_fn kern5 = wg1 ? rd_wg1_kernel<MT, SAMPLING>() : rd_wg_kernel<MT, SAMPLING>();
  cudaLaunchAttribute attr[2];
  CUtensorMap tm;
  memset(&tm, 0, sizeof tm);
  dsp_mk_args b = *a;
  rd_fn kern = kern4;
  size_t bytes = rg_smem(a->bq, SAMPLING, a->stages).total;
  if (ver >= 5 && kern5 && rd_wg_applies(a, MT, SAMPLING)) {
    /* E takes shared memory: as many of the stages asked for as then fit */
    int dev = 0, optin = 0;
    DSP_CUDA_TRY(cudaGetDevice(&dev));
    DSP_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    /* registers outlive a step only within one launch: per-step launches keep none */
    const int rmax = wg1 && b.persistent ? rd_res_max(MT, 16 * MT) : 0;
    b.resident = b.resident < 0 ? 0 : b.resident > rmax ? rmax : b.resident;
    const int nres = 2 * b.resident; /* chunks per block whose base rows need a place */
    while (b.stages > 2 && rd_smem_wg(b.bq, b.stages, nres) + 1024 > (size_t)optin) b.stages--;
    if (rd_smem_wg(b.bq, b.stages, nres) + 1024 > (size_t)optin)
      return dsp_fail(DSP_ERR_DEVICE, "cuda markov ring kernel 5: shared memory too small for 2 stages and E");
    kern = kern5;
    bytes = rd_smem_wg(b.bq, b.stages, nres);
  }
  const cudaLaunchConfig_t cfg = mk_config(l, kern == kern5 && wg1 ? RG_THREADS_WG : RG_THREADS, bytes, s, attr);
  DSP_TRY(rd_base_map(&b, &tm));
  DSP_CUDA_TRY(cudaLaunchKernelEx(&cfg, kern, b, tm));
  return DSP_OK;
}

template <bool SAMPLING>
dsp_status rg_launch_family(const dsp_mk_args *a, const dsp_mk_launch *l, cudaStream_t s, int query, size_t *smem,
                            int *occ) {
  const int tiles = a->bq / 16;
  if (a->bq < 16 || a->bq % 16 || a->bq > DSP_MK_MAXBQ)
    return dsp_fail(DSP_ERR_ARG, "cuda markov ring kernel: padded batch %d is not a multiple of 16 in [16, %d]",
                    a->bq, DSP_MK_MAXBQ);
  if (tiles <= 1) return rg_launch_mt<1, SAMPLING>(a, l, s, query, smem, occ);
  if (tiles <= 2) return rg_launch_mt<2, SAMPLING>(a, l, s, query, smem, occ);
  if (tiles <= 4) return rg_launch_mt<4, SAMPLING>(a, l, s, query, smem, occ);
  return rg_launch_mt<8, SAMPLING>(a, l, s, query, smem, occ);
}

}  // namespace

#endif
