/* dsp_cuda_markov_wgmma_check (markov.h): ring kernel 5's warpgroup products
 * (from shared memory, and up to bq 64 also with W2 from registers, as its
 * resident chunks run) against ring kernel 4's mma.sync chains on random
 * chunks, each through the kernels' own code (the W2 packing, E's gather,
 * wg_product, wg_load_a + wg_product_rs; rg_load_e, rd_frag_packed, mk_mma),
 * compared bit for bit. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common/check.h"
#include "kernels/cuda/check_fill.cuh"
#include "kernels/cuda/markov.h"
#include "kernels/cuda/markov_dyn.cuh"

namespace {

/* Block c: chunk c of the packed W2 times E = W1 rows c bq .. c bq + bq - 1,
 * out_wg by the warpgroups, out_mma by the warps' mma chains, both [64 c + v][b]. */
template <int MT>
__global__ void __launch_bounds__(256, 1) wc_kernel(const uint16_t *w2p, const uint16_t *w1, float *out_wg,
                                                    float *out_mma, float *out_rs) {
  constexpr int N = 8 * MT, BQ = 16 * MT;
  extern __shared__ __align__(16) unsigned char raw[];
  unsigned char *sw = raw + ((1024u - (dsp_saddr(raw) & 1023u)) & 1023u), *se = sw + 64 * RP * 2;
  __shared__ int32_t sprev[BQ];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3, c = blockIdx.x;
  const uint4 *src = (const uint4 *)(w2p + (size_t)c * 64 * RP);
  for (int i = tid; i < 64 * RP / 8; i += 256) ((uint4 *)sw)[i] = src[i];
  if (tid < BQ) sprev[tid] = c * BQ + tid;
  __syncthreads();
  dsp_mk_args a;
  memset(&a, 0, sizeof a);
  a.w1 = w1;
  a.bq = BQ;
  rd_gather_e(a, sprev, se, tid);
  __syncthreads();

  const int wg = warp >> 2, w4 = warp & 3;
  float d[N / 2];
  wg_product<N>(d, dsp_saddr(sw), dsp_saddr(se), BQ, wg * N);
#pragma unroll
  for (int j = 0; j < N / 8; j++)
#pragma unroll
    for (int e = 0; e < 4; e++)
      out_wg[((size_t)c * 64 + 16 * w4 + g + 8 * (e >> 1)) * BQ + wg * N + 8 * j + 2 * q + (e & 1)] = d[4 * j + e];

  if constexpr (MT <= 4) { /* the resident chunks' product: A from registers, all BQ columns, warpgroup 0 */
    if (wg == 0) {
      uint32_t fr[16][4];
      float d2[BQ / 2];
      wg_load_a(fr, sw, w4, g, q);
      wg_product_rs<BQ>(d2, fr, dsp_saddr(se), BQ, 0);
#pragma unroll
      for (int j = 0; j < BQ / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          out_rs[((size_t)c * 64 + 16 * w4 + g + 8 * (e >> 1)) * BQ + 8 * j + 2 * q + (e & 1)] = d2[4 * j + e];
    }
  }
  for (int task = warp; task < MT * 8; task += 8) { /* (batch tile, unit, n8 tile) */
    const int mt = task / 8, u = (task % 8) / 2, t = task % 2;
    uint4 af[2 * KB];
    rg_load_e<MT>(a, sprev, mt, g, q, af);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < KB; j++) {
      const uint4 w = rd_frag_packed((const uint16_t *)sw, u * 16 + t * 8 + g, j, q);
      mk_mma(acc, af[2 * j].x, af[2 * j].y, af[2 * j].z, af[2 * j].w, w.x, w.y);
      mk_mma(acc, af[2 * j + 1].x, af[2 * j + 1].y, af[2 * j + 1].z, af[2 * j + 1].w, w.z, w.w);
    }
    const size_t v = (size_t)c * 64 + u * 16 + t * 8 + 2 * q, b = (size_t)mt * 16 + g;
    out_mma[v * BQ + b] = acc[0];
    out_mma[(v + 1) * BQ + b] = acc[1];
    out_mma[v * BQ + b + 8] = acc[2];
    out_mma[(v + 1) * BQ + b + 8] = acc[3];
  }
}

template <int MT>
dsp_status wc_run(int trials, const uint16_t *w2p, const uint16_t *w1, float *o1, float *o2, float *o3) {
  const int smem = 64 * RP * 2 + 16 * MT * RP * 2 + 1024;
  DSP_CUDA_TRY(cudaFuncSetAttribute(wc_kernel<MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  wc_kernel<MT><<<trials, 256, smem>>>(w2p, w1, o1, o2, o3);
  DSP_CUDA_TRY_LAUNCH();
  return DSP_OK;
}

}  // namespace

dsp_status dsp_cuda_markov_wgmma_check(int bq, int trials, long long *compared, long long *differ) {
  *compared = *differ = 0;
  if ((bq != 16 && bq != 32 && bq != 64 && bq != 128) || trials < 1 || trials > 4096)
    return dsp_fail(DSP_ERR_ARG, "wgmma check: bq %d (16, 32, 64 or 128) or trials %d (1..4096)", bq, trials);
  int dev = 0, major = 0;
  DSP_CUDA_TRY(cudaGetDevice(&dev));
  DSP_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major != 9) return dsp_fail(DSP_ERR_DEVICE, "wgmma check: compute capability %d.x, the products need sm_90a", major);
  const size_t rows = (size_t)trials * 64, nw2 = rows * RP, nw1 = (size_t)trials * bq * RP, nout = rows * bq;
  uint16_t *w2 = NULL, *w2p = NULL, *w1 = NULL;
  float *o = NULL;
  const int rs = bq <= 64; /* ring kernel 5 keeps resident chunks (A from registers) up to bq 64 */
  float *h = (float *)malloc(nout * 3 * sizeof(float));
  dsp_status s = h ? DSP_OK : dsp_fail(DSP_ERR_NOMEM, "wgmma check: out of host memory");
  if (s == DSP_OK && (cudaMalloc((void **)&w2, nw2 * 2) != cudaSuccess ||
                      cudaMalloc((void **)&w2p, dsp_cuda_markov_packed_elems((int64_t)rows) * 2) != cudaSuccess ||
                      cudaMalloc((void **)&w1, nw1 * 2) != cudaSuccess ||
                      cudaMalloc((void **)&o, nout * 3 * sizeof(float)) != cudaSuccess))
    s = dsp_fail(DSP_ERR_NOMEM, "%s:%d: wgmma check: cudaMalloc: %s", __FILE__, __LINE__,
                 cudaGetErrorString(cudaGetLastError()));
  if (s == DSP_OK) {
    dsp_check_fill<<<(unsigned)((nw2 + 255) / 256), 256>>>(w2, nw2, 0x5EEDull);
    dsp_check_fill<<<(unsigned)((nw1 + 255) / 256), 256>>>(w1, nw1, 0xE1ull);
    s = dsp_cuda_markov_pack_w2(w2, (int64_t)rows, w2p, 0);
  }
  if (s == DSP_OK) {
    const int mt = bq / 16;
    float *o2 = o + nout, *o3 = o + 2 * nout;
    s = mt == 1 ? wc_run<1>(trials, w2p, w1, o, o2, o3)
        : mt == 2 ? wc_run<2>(trials, w2p, w1, o, o2, o3)
        : mt == 4 ? wc_run<4>(trials, w2p, w1, o, o2, o3)
                  : wc_run<8>(trials, w2p, w1, o, o2, o3);
  }
  if (s == DSP_OK) {
    const cudaError_t e = cudaMemcpy(h, o, nout * 3 * sizeof(float), cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
      s = dsp_fail(DSP_ERR_DEVICE, "%s:%d: wgmma check: %s", __FILE__, __LINE__, cudaGetErrorString(e));
  }
  if (s == DSP_OK) {
    for (size_t i = 0; i < nout; i++) {
      *differ += memcmp(&h[i], &h[nout + i], sizeof(float)) != 0;
      if (rs) *differ += memcmp(&h[2 * nout + i], &h[nout + i], sizeof(float)) != 0;
    }
    *compared = (long long)nout * (rs ? 2 : 1);
  }
  cudaFree(w2), cudaFree(w2p), cudaFree(w1), cudaFree(o);
  free(h);
  return s;
}
