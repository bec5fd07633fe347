/* Hopper warpgroup products (wgmma) for ring kernel 5 (markov_dyn.cuh), its
 * self-check (markov_wgcheck.cu) and the LM-head kernel (lm_wgmma.cu): the
 * shared-memory tile layout both operands use, the matrix descriptor, and m64nNk16 bf16 products with fp32
 * accumulators. A product runs the 16 k groups of 16 in order onto zeroed
 * accumulators, as the mma.sync kernels do; whether the tensor cores then
 * give the same bits as mma.sync is a property of the device, which
 * dsp_cuda_markov_wgmma_check measures before a head uses these.
 * CUDA C++ only; sm_90a (the wgmma instructions exist only there). */
#ifndef DSP_CUDA_MARKOV_WGMMA_CUH
#define DSP_CUDA_MARKOV_WGMMA_CUH

#include <stdint.h>

#include "kernels/cuda/common/wgmma.cuh"

namespace {

/* Byte offset of the 16-byte piece kc (k = 8 kc .. 8 kc + 7) of row r in a
 * tile of `rows` rows (a multiple of 8) of 256 k, stored as [8 k blocks][rows]
 * [32 k] with the 64-byte swizzle: piece c of a 64-byte row sits at
 * c ^ ((r >> 1) & 3). The tile starts on a 512-byte boundary (the swizzle is
 * applied to address bits). Both operands use it: W2 chunks (packed so,
 * markov.cu) and E. */
__host__ __device__ inline uint32_t wg_swz(int rows, int r, int kc) {
  return (uint32_t)(kc >> 2) * (uint32_t)rows * 64u + (uint32_t)r * 64u +
         ((uint32_t)((kc & 3) ^ ((r >> 1) & 3)) << 4);
}

/* The position (0..255) along a tile row of rank index k. Both operands are
 * stored so that wgmma's k group i, position p sees the pair the mma.sync
 * kernels put in group i, slot p (their fragments take group 2j + s from
 * k = 32 j + 8 q + 4 s + {0, 1} (slots 2q, 2q + 1) and + {2, 3} (slots
 * 2q + 8, 2q + 9), mk_kernel / rg_load_e): same products in the same slots of
 * the same groups. Pairs (k even, k + 1) stay adjacent. */
__host__ __device__ inline int wg_kpos(int k) {
  const int j = k >> 5, q = (k >> 3) & 3, s = (k >> 2) & 1, h = (k >> 1) & 1, t = k & 1;
  return 16 * (2 * j + s) + 2 * q + 8 * h + t;
}

/* Byte offset of the k pair (k, k + 1), k even, of row r in a tile of `rows`
 * rows: wg_swz of its position. */
__host__ __device__ inline uint32_t wg_pair(int rows, int r, int k) {
  const int p = wg_kpos(k);
  return wg_swz(rows, r, p >> 3) + (uint32_t)(p & 7) * 2u;
}



/* Descriptor of a K-major operand at shared address `saddr` in the layout
 * above: 64-byte swizzle (2 in bits 62-63), 512 bytes between 8-row groups
 * (stride field), leading field unused by swizzled K-major layouts (1). */
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr) {
  return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(512 >> 4) << 32) |
         ((uint64_t)2 << 62);
}

/* Descriptor of k group i (k = 16 i .. 16 i + 15) of a tile of `rows` rows at
 * `base`, starting at row r0 (a multiple of 8). */
__device__ __forceinline__ uint64_t wg_desc_k(uint32_t base, int rows, int r0, int i) {
  return wg_desc(base + (uint32_t)(i >> 1) * (uint32_t)rows * 64u + (uint32_t)r0 * 64u + (uint32_t)(i & 1) * 32u);
}

/* This thread's A fragments of a whole 64-row tile at shared address `tile`
 * (layout above) for all 16 k groups: fr[i] = wg_mma_rs's a for group i, the
 * same positions wgmma reads from the tile, so a product from registers sees
 * the same pairs in the same slots as wg_product. w4: warp in the warpgroup. */
__device__ __forceinline__ void wg_load_a(uint32_t (&fr)[16][4], const unsigned char *tile, int w4, int g, int q) {
  const int r = 16 * w4 + g;
  const unsigned char *t = tile + 4 * q;
#pragma unroll
  for (int i = 0; i < 16; i++) {
    fr[i][0] = *(const uint32_t *)(t + wg_swz(64, r, 2 * i));
    fr[i][1] = *(const uint32_t *)(t + wg_swz(64, r + 8, 2 * i));
    fr[i][2] = *(const uint32_t *)(t + wg_swz(64, r, 2 * i + 1));
    fr[i][3] = *(const uint32_t *)(t + wg_swz(64, r + 8, 2 * i + 1));
  }
}

/* One 64 x N product over all 256 k: A rows [0, 64) of the tile at `a_tile`
 * (64 rows), B rows [b0, b0 + N) of the tile at `b_tile` (b_rows rows), onto
 * zeroed accumulators, 16 k groups in order; returns when d is complete. */
template <int N>
__device__ __forceinline__ void wg_product(float (&d)[N / 2], uint32_t a_tile, uint32_t b_tile, int b_rows, int b0) {
#pragma unroll
  for (int i = 0; i < N / 2; i++) d[i] = 0.0f;
  wg_fence();
#pragma unroll
  for (int i = 0; i < 16; i++) wg_mma<N>(d, wg_desc_k(a_tile, 64, 0, i), wg_desc_k(b_tile, b_rows, b0, i));
  wg_commit_wait();
}

/* wg_product with A from registers (fragments from wg_load_a). */
template <int N>
__device__ __forceinline__ void wg_product_rs(float (&d)[N / 2], const uint32_t (&fr)[16][4], uint32_t b_tile,
                                              int b_rows, int b0) {
#pragma unroll
  for (int i = 0; i < N / 2; i++) d[i] = 0.0f;
  wg_fence();
#pragma unroll
  for (int i = 0; i < 16; i++) wg_mma_rs<N>(d, fr[i], wg_desc_k(b_tile, b_rows, b0, i));
  wg_commit_wait();
}

}  // namespace

#endif
