/* The GEMM for few token rows on mma.sync (gemm_small.h).
 *
 * Block: one warp. It owns the 16-row strips s = blockIdx.x, + gridDim.x, ...
 * of w and walks each strip's K in [64 k] chunks: lane 0 lands the chunk of
 * its 16 rows (2 KB) and of the NT8 x 8 token rows (1 KB each; rows past n
 * and m are zero-filled) by TMA with the 128-byte swizzle (16-byte piece c of
 * row r at c ^ (r & 7): ldmatrix's eight rows hit distinct banks) into the
 * next of `stages` stages, each with an mbarrier. Per chunk, the four k
 * groups of 16 in order: ldmatrix of the 16 x 16 weight tile (mma's A: rows
 * g, g + 8, k 2q.. and 2q + 8..) and of the token tile (B), one m16n8k16 per
 * token tile into its accumulators. The next chunk's fragments load while
 * this one's products run (the products form one dependent chain per token
 * tile, which is the kernel's critical path); a stage is landed again once
 * its fragments are in registers. After a strip's last chunk its 16 x 8 NT8
 * results are rounded to bf16 and stored. */
#include "kernels/cuda/gemm_small.h"

#include <stdlib.h>

#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/gemm_wgmma_kernel.cuh"

namespace {

constexpr int GS_BK = 64;      /* k per stage: eight 16-byte pieces per row */
constexpr int GS_MAXS = 32;    /* stages per warp at most */
constexpr int GS_PER_SM = 8;   /* resident warps per SM the stage count is sized for, at most */

template <int NT8>
struct gs_cfg {
  static constexpr uint32_t w_bytes = 16 * 128, a_bytes = NT8 * 8 * 128, stage = w_bytes + a_bytes;
};
template <int NT8>
size_t gs_smem(int stages) {
  return (size_t)stages * (gs_cfg<NT8>::stage + 8) + 1024;
}

/* Byte offset of piece c (k = 8 c .. 8 c + 7) of row r in a tile of 128-byte rows (TMA's 128-byte swizzle). */
__device__ __forceinline__ uint32_t gs_off(int r, int c) { return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4)); }

/* One chunk's fragments: per k group i, the A tile (a0..a3) and the token tiles' B (b0, b1 per tile). */
template <int NT8>
struct gs_frag {
  uint32_t a[4][4], b[4][2 * NT8];
};

template <int NT8>
__device__ __forceinline__ void gs_load(gs_frag<NT8> &f, uint32_t st, int lane) {
  const int mi = lane >> 3, rr = lane & 7; /* lane l gives row l & 7 of matrix l >> 3 */
#pragma unroll
  for (int i = 0; i < GS_BK / 16; i++) {
    /* matrices: rows 0-7 k 0-7, rows 8-15 k 0-7, rows 0-7 k 8-15, rows 8-15 k 8-15 (a0..a3) */
    dsp_ldsm4(f.a[i], st + gs_off(rr + 8 * (mi & 1), 2 * i + (mi >> 1)));
    const uint32_t tb = st + gs_cfg<NT8>::w_bytes;
    if (NT8 == 1) {
      uint32_t b[2];
      dsp_ldsm2(b, tb + gs_off(rr, 2 * i + (mi & 1)));
      f.b[i][0] = b[0], f.b[i][1] = b[1];
    } else { /* token tiles 0 and 1: (k 0-7, k 8-15) each */
      uint32_t b[4];
      dsp_ldsm4(b, tb + gs_off(rr + 8 * (mi >> 1), 2 * i + (mi & 1)));
#pragma unroll
      for (int j = 0; j < 2 * NT8; j++) f.b[i][j] = b[j];
    }
  }
}

template <int NT8>
__global__ void __launch_bounds__(32) gs_kernel(const __grid_constant__ CUtensorMap tw,
                                                const __grid_constant__ CUtensorMap ta, uint16_t *__restrict__ out,
                                                int m, int n, int nkb, long long ldo, int nstrips, int stages) {
  extern __shared__ unsigned char gs_raw[];
  using C = gs_cfg<NT8>;
  unsigned char *smem = (unsigned char *)(((uintptr_t)gs_raw + 1023) & ~(uintptr_t)1023);
  const int lane = threadIdx.x, g = lane >> 2, q = lane & 3;
  const uint32_t sbase = dsp_saddr(smem), full0 = sbase + (uint32_t)stages * C::stage;
  const int my_strips = (int)blockIdx.x < nstrips ? (nstrips - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
  const int units = my_strips * nkb;
  if (lane == 0) {
    for (int s = 0; s < stages; s++) dsp_bar_init(full0 + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(&tw) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(&ta) : "memory");
  }
  __syncwarp();
  /* lane 0 lands the units in order: pu of them so far, the next one chunk pk of strip pstrip */
  uint64_t pw = 0, pa = 0;
  int pu = 0, pstrip = (int)blockIdx.x, pk = 0;
  auto issue = [&](int slot) {
    const uint32_t st = sbase + (uint32_t)slot * C::stage, fb = full0 + 8 * slot;
    dsp_bar_expect(fb, C::stage);
    dsp_tcopy2(st, &tw, pk * GS_BK, 16 * pstrip, fb, pw);
    dsp_tcopy2(st + C::w_bytes, &ta, pk * GS_BK, 0, fb, pa);
    pu++;
    if (++pk == nkb) pk = 0, pstrip += (int)gridDim.x;
  };
  if (lane == 0) {
    pw = dsp_l2_evict_first(); /* the weights stream once; the tokens are read by every warp */
    pa = dsp_l2_evict_last();
    /* the first ring's weights before griddepcontrol.wait (launched programmatically, this grid may run beside
       the kernel that writes the tokens; without PDL the wait returns at once), then its tokens */
    int ps = pstrip, pk0 = pk, n0 = 0;
    for (; n0 < stages && n0 < units; n0++) {
      dsp_bar_expect(full0 + 8 * n0, C::stage);
      dsp_tcopy2(sbase + (uint32_t)n0 * C::stage, &tw, pk0 * GS_BK, 16 * ps, full0 + 8 * n0, pw);
      if (++pk0 == nkb) pk0 = 0, ps += (int)gridDim.x;
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int s = 0; s < n0; s++) {
      dsp_tcopy2(sbase + (uint32_t)s * C::stage + C::w_bytes, &ta, pk * GS_BK, 0, full0 + 8 * s, pa);
      pu++;
      if (++pk == nkb) pk = 0, pstrip += (int)gridDim.x;
    }
  }
  float d[NT8][4];
#pragma unroll
  for (int t = 0; t < NT8; t++) d[t][0] = d[t][1] = d[t][2] = d[t][3] = 0.0f;
  gs_frag<NT8> cur, nxt;
  int s = 0, strip = (int)blockIdx.x, kb = 0;
  uint32_t ph = 0;
  if (units > 0) {
    dsp_bar_wait(full0, 0);
    gs_load<NT8>(cur, sbase, lane);
  }
  for (int u = 0; u < units; u++) {
    /* the next chunk's fragments first: they load while this chunk's products run */
    int s1 = s + 1;
    uint32_t ph1 = ph;
    if (s1 == stages) s1 = 0, ph1 ^= 1;
    if (u + 1 < units) {
      dsp_bar_wait(full0 + 8 * s1, ph1);
      gs_load<NT8>(nxt, sbase + (uint32_t)s1 * C::stage, lane);
    }
#pragma unroll
    for (int i = 0; i < GS_BK / 16; i++) {
      dsp_mma16816(d[0], cur.a[i][0], cur.a[i][1], cur.a[i][2], cur.a[i][3], cur.b[i][0], cur.b[i][1]);
      if (NT8 == 2) dsp_mma16816(d[NT8 - 1], cur.a[i][0], cur.a[i][1], cur.a[i][2], cur.a[i][3], cur.b[i][2 * NT8 - 2],
                                 cur.b[i][2 * NT8 - 1]);
    }
    /* stage s's fragments are in registers (cur): every lane is past them, so lane 0 may land it again */
    __syncwarp();
    if (lane == 0 && pu < units) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      issue(s);
    }
    if (++kb == nkb) {
      /* d[t] = (row g, token 8 t + 2 q), (g, + 1), (g + 8, 8 t + 2 q), (g + 8, + 1) */
#pragma unroll
      for (int t = 0; t < NT8; t++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int row = 16 * strip + g + 8 * (e >> 1), tok = 8 * t + 2 * q + (e & 1);
          if (row < n && tok < m) out[(size_t)tok * (size_t)ldo + row] = dsp_dev_bf16_bits(d[t][e]);
          d[t][e] = 0.0f;
        }
      }
      kb = 0, strip += (int)gridDim.x;
    }
    cur = nxt;
    s = s1, ph = ph1;
  }
}

/* Stages per warp for a launch of `warps` warps: sized so that the warps an SM holds (warps over SMs, at most
 * GS_PER_SM) share its shared memory. */
template <int NT8>
int gs_stages(const lw_dev &dv, int64_t warps) {
  int64_t per = (warps + dv.sms - 1) / dv.sms;
  per = per < 1 ? 1 : per > GS_PER_SM ? GS_PER_SM : per;
  const int64_t s = ((int64_t)dv.optin / per - 1024 - 1024) / (gs_cfg<NT8>::stage + 8); /* 1 KB per block reserved */
  return (int)(s > GS_MAXS ? GS_MAXS : s);
}

template <int NT8>
dsp_status gs_launch(const void *a, int64_t lda, const void *w, void *out, int64_t m, int64_t n, int64_t k, int64_t ldo,
                     int pdl, cudaStream_t s) {
  const lw_dev &dv = lw_dev_once();
  if (!dv.ok) return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda gemm (mma.sync): not an sm_90 device with TMA");
  const int64_t strips = (n + 15) / 16;
  int stages = gs_stages<NT8>(dv, strips);
  if (stages < 2) return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda gemm (mma.sync): shared memory too small");
  /* as many warps as fit, then fewer so that every warp owns the same count of strips (1536 strips on 1056
     warps left half of them one strip behind), then the stages those warps' SMs can give each */
  const int64_t fit = (int64_t)dv.optin / (int64_t)(gs_smem<NT8>(stages) + 1024) * dv.sms;
  const int64_t each = (strips + fit - 1) / fit, grid = (strips + each - 1) / each;
  stages = gs_stages<NT8>(dv, grid);
  CUtensorMap tw, ta;
  DSP_TRY(lw_map(&tw, w, n, k, k, 16));
  DSP_TRY(lw_map(&ta, a, m, k, lda, 8 * NT8));
  /* per call: the opt-in is per device; the most any launch asks */
  DSP_CUDA_TRY(cudaFuncSetAttribute(gs_kernel<NT8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)gs_smem<NT8>(GS_MAXS)));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)grid), cfg.blockDim = dim3(32), cfg.dynamicSmemBytes = gs_smem<NT8>(stages), cfg.stream = s;
  cudaLaunchAttribute at = dsp_pdl_attribute();
  cfg.attrs = &at, cfg.numAttrs = pdl ? 1 : 0;
  DSP_CUDA_TRY(cudaLaunchKernelEx(&cfg, gs_kernel<NT8>, tw, ta, (uint16_t *)out, (int)m, (int)n, (int)(k / GS_BK),
                                  (long long)ldo, (int)strips, stages));
  DSP_CUDA_TRY_LAUNCH();
  return DSP_OK;
}

}  // namespace

extern "C" dsp_status dsp_cuda_gemm_small_run(const void *a, int64_t lda, const void *w, void *out, int64_t m, int64_t n,
                                              int64_t k, int64_t ldo, int pdl, cudaStream_t s) {
  if (m < 1) return DSP_OK;
  if (m > DSP_GEMM_SMALL_MAX_M || k % GS_BK || k > INT32_MAX || n > INT32_MAX || lda % 8 || lda < k || ldo < n ||
      (uintptr_t)a % 16 || (uintptr_t)w % 16)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda gemm (mma.sync): M %lld, K %lld, lda %lld not supported", (long long)m,
                    (long long)k, (long long)lda);
  return m <= 8 ? gs_launch<1>(a, lda, w, out, m, n, k, ldo, pdl, s) : gs_launch<2>(a, lda, w, out, m, n, k, ldo, pdl, s);
}

extern "C" dsp_status dsp_cuda_gemm_small_check(int64_t k, long long *compared, long long *differ) {
  const int64_t N = 520, ms[2] = {16, 5}; /* both token tiles; a strip of 8 rows past N's last 16 */
  *compared = *differ = 0;
  uint16_t *buf = NULL;
  const size_t na = (size_t)(16 * k), nw = (size_t)(N * k), no = (size_t)(16 * N);
  DSP_CUDA_TRY(cudaMalloc(&buf, (na + nw + 2 * no) * 2));
  uint16_t *a = buf, *w = buf + na, *o1 = w + nw, *o2 = o1 + no;
  uint16_t *h = (uint16_t *)malloc(2 * no * 2);
  cudaStream_t s = NULL;
  dsp_status st = h ? DSP_OK : dsp_fail(DSP_ERR_NOMEM, "cuda gemm (mma.sync) check: out of memory");
  if (st == DSP_OK && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
    st = dsp_fail(DSP_ERR_DEVICE, "%s:%d: cudaStreamCreate: %s", __FILE__, __LINE__, cudaGetErrorString(cudaGetLastError()));
  if (st == DSP_OK) {
    dsp_check_fill<<<(unsigned)((na + 255) / 256), 256, 0, s>>>(a, na, 0x5151u);
    dsp_check_fill<<<(unsigned)((nw + 255) / 256), 256, 0, s>>>(w, nw, 0xC0DEu);
  }
  for (int v = 0; v < 2 && st == DSP_OK; v++) {
    st = dsp_cuda_gemm_wg_run(a, k, w, o1, ms[v], N, k, N, 0, 0, 0, s);
    if (st == DSP_OK) st = dsp_cuda_gemm_small_run(a, k, w, o2, ms[v], N, k, N, 0, s);
    if (st == DSP_OK && (cudaMemcpyAsync(h, o1, (size_t)(ms[v] * N) * 2, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
                         cudaMemcpyAsync(h + no, o2, (size_t)(ms[v] * N) * 2, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
                         cudaStreamSynchronize(s) != cudaSuccess))
      st = dsp_fail(DSP_ERR_DEVICE, "%s:%d: cuda gemm (mma.sync) check: %s", __FILE__, __LINE__,
                    cudaGetErrorString(cudaGetLastError()));
    if (st == DSP_OK) {
      for (size_t i = 0; i < (size_t)(ms[v] * N); i++) *differ += h[i] != h[no + i];
      *compared += ms[v] * N;
    }
  }
  if (s) cudaStreamDestroy(s);
  free(h);
  cudaFree(buf);
  return st;
}
