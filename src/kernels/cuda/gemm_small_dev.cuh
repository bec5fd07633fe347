/* The few-row GEMM's device pieces and launch shape (gemm_small.cu), shared with the measurement-only chain
 * of products in bench/support/gemm_chain.cu. CUDA C++ only. */
#ifndef DSP_KERNELS_CUDA_GEMM_SMALL_DEV_CUH
#define DSP_KERNELS_CUDA_GEMM_SMALL_DEV_CUH

#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/gemm_wgmma_kernel.cuh"

namespace {

constexpr int GS_BK = 64;    /* k per box: eight 16-byte pieces per row */
constexpr int GS_MAXC = 8;   /* consumer warps per block at most */
constexpr int GS_MAXS = 4;   /* stages at most: 4 of 4 boxes streamed faster than 8 or 16 (bench/RESULTS.md) */
constexpr uint32_t GS_WBOX = 16 * 128; /* one strip's [16 rows][64 k] */
/* Consumer warps per block at most for NT8 token tiles: four token tiles' two fragment sets need more registers
   than 288 threads leave a thread (224: ptxas spilled 60 bytes), so that form runs at most 4 consumers */
__host__ __device__ constexpr int gs_maxc(int nt8) { return nt8 == 4 ? 4 : GS_MAXC; }

/* Bytes of one stage of sb boxes for C strips and NT8 token tiles. */
__host__ __device__ constexpr uint32_t gs_stage(int c, int nt8, int sb) {
  return (uint32_t)sb * ((uint32_t)c * GS_WBOX + (uint32_t)nt8 * 8 * 128);
}
size_t gs_smem(int c, int nt8, int sb, int stages) { return (size_t)stages * (gs_stage(c, nt8, sb) + 16) + 1024; }

/* Byte offset of piece c (k = 8 c .. 8 c + 7) of row r in a tile of 128-byte rows (TMA's 128-byte swizzle). */
__device__ __forceinline__ uint32_t gs_off(int r, int c) { return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4)); }

/* One box's fragments: per k group i, the A tile (a0..a3) and the token tiles' B (b0, b1 per tile). */
template <int NT8>
struct gs_frag {
  uint32_t a[4][4], b[4][2 * NT8];
};

/* Per-lane byte offsets of the ldmatrix rows in a [rows][128 bytes] tile, per k group i: the weight tile's
 * (a0..a3: rows 0-7 k 0-7, rows 8-15 k 0-7, rows 0-7 k 8-15, rows 8-15 k 8-15) and the tokens' (token tiles 0
 * and 1, k 0-7 and k 8-15, when NT8 is 2 or more; tiles 2 and 3 sit 16 rows, 2048 bytes, further: the swizzle
 * repeats every 8 rows). Fixed per lane: computed once, not per box. */
template <int NT8>
struct gs_offs {
  uint32_t a[4], b[4];
};
template <int NT8>
__device__ __forceinline__ gs_offs<NT8> gs_offsets(int lane) {
  const int mi = lane >> 3, rr = lane & 7; /* lane l gives row l & 7 of matrix l >> 3 */
  gs_offs<NT8> o;
#pragma unroll
  for (int i = 0; i < GS_BK / 16; i++) {
    o.a[i] = gs_off(rr + 8 * (mi & 1), 2 * i + (mi >> 1));
    o.b[i] = NT8 == 1 ? gs_off(rr, 2 * i + (mi & 1)) : gs_off(rr + 8 * (mi >> 1), 2 * i + (mi & 1));
  }
  return o;
}

/* wb: the strip's weight tile (its row 0 at a multiple of 8 rows of the box), tb: the tokens' tile. */
template <int NT8>
__device__ __forceinline__ void gs_load(gs_frag<NT8> &f, uint32_t wb, uint32_t tb, const gs_offs<NT8> &o) {
#pragma unroll
  for (int i = 0; i < GS_BK / 16; i++) {
    dsp_ldsm4(f.a[i], wb + o.a[i]);
    if (NT8 == 1) {
      uint32_t b[2];
      dsp_ldsm2(b, tb + o.b[i]);
      f.b[i][0] = b[0], f.b[i][1] = b[1];
    } else {
#pragma unroll
      for (int h = 0; h < NT8 / 2; h++) {
        uint32_t b[4];
        dsp_ldsm4(b, tb + o.b[i] + 2048u * h);
#pragma unroll
        for (int j = 0; j < 4; j++) f.b[i][4 * h + j] = b[j];
      }
    }
  }
}

template <int NT8>
__device__ __forceinline__ void gs_mma(float (&d)[NT8][4], const gs_frag<NT8> &f) {
#pragma unroll
  for (int i = 0; i < GS_BK / 16; i++)
#pragma unroll
    for (int t = 0; t < NT8; t++)
      dsp_mma16816(d[t], f.a[i][0], f.a[i][1], f.a[i][2], f.a[i][3], f.b[i][2 * t], f.b[i][2 * t + 1]);
}

/* The launch shape: C strips per group where the groups spread most evenly over the SMs (one block each; ties
 * to the larger C: more chains in flight per SM), 4 boxes a stage up to 4 strips and 2 past them (8 to 32 KB
 * of weights a stage), and up to GS_MAXS stages that fit one block's shared memory. */
struct gs_shape {
  int c, sb, stages, grid;
  int64_t groups;
};
gs_shape gs_pick(const lw_dev &dv, int64_t n, int nt8, int force_c, int force_sb, int force_stages) {
  const int64_t strips = (n + 15) / 16;
  gs_shape sh{1, 1, 0, 0, strips};
  double best = -1.0;
  if (force_c > gs_maxc(nt8)) force_c = gs_maxc(nt8); /* a forced shape past the form's warps takes its most */
  for (int c = 1; c <= gs_maxc(nt8); c++) {
    if (force_c && c != force_c) continue;
    const int64_t groups = (strips + c - 1) / c, rounds = (groups + dv.sms - 1) / dv.sms;
    const double eff = (double)strips / ((double)rounds * dv.sms * c);
    if (eff >= best - 1e-9) best = eff, sh.c = c, sh.groups = groups;
  }
  sh.sb = force_sb ? force_sb : sh.c > 4 ? 2 : 4;
  const int64_t st = ((int64_t)dv.optin - 1024 - 1024) / (gs_stage(sh.c, nt8, sh.sb) + 16);
  const int cap = force_stages ? force_stages : GS_MAXS;
  sh.stages = (int)(st > cap ? cap : st);
  sh.grid = (int)(sh.groups < dv.sms ? sh.groups : dv.sms);
  return sh;
}

/* A 3-D view of the [rows][k] matrix p (row stride ld) as (64 k, row, chunk of 64 k), box (64, box_rows, sb): one
 * copy lands sb chunks as [sb][box_rows][128 bytes], each chunk the 2-D box's image (128-byte swizzle). */
dsp_status gs_map(CUtensorMap *tm, const void *p, int64_t rows, int64_t k, int64_t ld, int box_rows, int sb) {
  const PFN_cuTensorMapEncodeTiled_v12000 enc = dsp_tma_encoder();
  if (!enc) return dsp_fail(DSP_ERR_DEVICE, "cuda gemm (mma.sync): no cuTensorMapEncodeTiled");
  const cuuint64_t dims[3] = {(cuuint64_t)GS_BK, (cuuint64_t)rows, (cuuint64_t)(k / GS_BK)};
  const cuuint64_t strides[2] = {(cuuint64_t)ld * 2, (cuuint64_t)GS_BK * 2};
  const cuuint32_t box[3] = {GS_BK, (cuuint32_t)box_rows, (cuuint32_t)sb}, es[3] = {1, 1, 1};
  const CUresult r = enc(tm, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, (void *)p, dims, strides, box, es,
                         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return dsp_fail(DSP_ERR_DEVICE, "cuda gemm (mma.sync): cuTensorMapEncodeTiled failed (%d) for [%lld][%lld]", (int)r,
                    (long long)rows, (long long)k);
  return DSP_OK;
}

}  // namespace

#endif
