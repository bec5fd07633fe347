/* The GEMM for few token rows on mma.sync (gemm_small.h).
 *
 * Block: C consumer warps and one producer warp, persistent over groups of C
 * 16-row strips of w (group g = rows 16 C g ..). The producer's lane 0 lands,
 * per stage, SB boxes of [64 k] of the group's 16 C weight rows and of the
 * NT8 x 8 token rows (NT8 1, 2 or 4; one 3-D copy each; rows past n and m and chunks past K
 * are zero-filled), by TMA with the
 * 128-byte swizzle (16-byte piece c of row r at c ^ (r & 7): ldmatrix's eight
 * rows hit distinct banks), into a ring of stages with a full and an empty
 * mbarrier each. Consumer warp w owns strip C g + w: per box, the four k
 * groups of 16 in order, ldmatrix of its 16 x 16 weight tile (mma's A: rows
 * r, r + 8, k 2q.. and 2q + 8..) and of the token tile (B), one m16n8k16 per
 * token tile into its accumulators. The next box's fragments load while this
 * box's products run: the products form one dependent chain per token tile
 * (about 24 cycles a link on an H200), and the copies are issued by the
 * producer, off the consumers' path. The tokens' box is shared by the group's
 * C warps. After a
 * strip's last box its 16 x 8 NT8 results are rounded to bf16 and stored. */
#include "kernels/cuda/gemm_small.h"

#include <stdlib.h>

#include "kernels/cuda/common/slices.cuh"
#include "kernels/cuda/gemm_small_dev.cuh"

namespace {

/* SL: a sliced weight (nsl slices of kbs boxes, their sums added by the tree whose merges slices.cuh encodes);
 * a group's stages then run slice by slice, a slice's last stage short where kbs is not a multiple of SB. Without
 * SL, nsl is 1 and kbs is K's boxes. */
template <int NT8, int SB, bool SL>
__global__ void __launch_bounds__(32 * (gs_maxc(NT8) + 1), 1) gs_kernel(const __grid_constant__ CUtensorMap tw,
                                                               const __grid_constant__ CUtensorMap ta,
                                                               void *__restrict__ out, int m, int n, int kbs,
                                                               int nsl, unsigned long long merges, long long ldo,
                                                               int ngroups, int stages, int f32) {
  static_assert(SB % 2 == 0, "a full stage runs its boxes in pairs");
  /* no griddepcontrol.launch_dependents here: with it the layer kernels after a product, which trigger at once,
     let the next product's blocks land early on SMs already taken, and a batch-1 decode step lost 0.4 ms */
  extern __shared__ unsigned char gs_raw[];
  unsigned char *smem = (unsigned char *)(((uintptr_t)gs_raw + 1023) & ~(uintptr_t)1023);
  const int C = (int)blockDim.x / 32 - 1, warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31;
  const uint32_t wbytes = (uint32_t)SB * C * GS_WBOX, stage = gs_stage(C, NT8, SB);
  const uint32_t sbase = dsp_saddr(smem), full0 = sbase + (uint32_t)stages * stage, empty0 = full0 + 8 * stages;
  const int my_groups = (int)blockIdx.x < ngroups ? (ngroups - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
  const int sps = (kbs + SB - 1) / SB, nst = nsl * sps; /* stages per slice and per group */
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; s++) dsp_bar_init(full0 + 8 * s, 1), dsp_bar_init(empty0 + 8 * s, (uint32_t)C);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == C) {
    if (lane) return;
    /* the producer: unit u is stage u % nst of the block's group u / nst */
    asm volatile("prefetch.tensormap [%0];" ::"l"(&tw) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(&ta) : "memory");
    const uint64_t pw = dsp_l2_evict_first(), pa = dsp_l2_evict_last(); /* weights stream once, tokens stay */
    const int units = my_groups * nst;
    /* one copy per stage and operand: boxes of [sb chunks][rows][64 k] (3-D maps: k, row, chunk); chunks past K
       are zero-filled and counted, so every stage expects the same bytes */
    /* stage q of a group starts at box (q / sps) kbs + (q % sps) SB; a short stage's boxes past its slice land
       and are not read */
    auto chunk = [&](int u) { return (u % nst) / sps * kbs + (u % nst) % sps * SB; };
    auto weights = [&](int u, uint32_t st) {
      const int row = 16 * C * ((int)blockIdx.x + (u / nst) * (int)gridDim.x);
      dsp_tcopy3_hint(st, &tw, 0, row, chunk(u), full0 + 8 * (u % stages), pw);
    };
    auto tokens = [&](int u, uint32_t st) {
      dsp_tcopy3_hint(st + wbytes, &ta, 0, 0, chunk(u), full0 + 8 * (u % stages), pa);
    };
    /* the first ring's weights before griddepcontrol.wait (launched programmatically, this grid may run beside
       the kernel that writes the tokens; without PDL the wait returns at once), then its tokens */
    const int n0 = units < stages ? units : stages;
    for (int u = 0; u < n0; u++) {
      dsp_bar_expect(full0 + 8 * u, stage);
      weights(u, sbase + (uint32_t)u * stage);
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int u = 0; u < n0; u++) tokens(u, sbase + (uint32_t)u * stage);
    for (int u = n0; u < units; u++) {
      const int s = u % stages;
      dsp_bar_wait(empty0 + 8 * s, (uint32_t)((u / stages - 1) & 1));
      dsp_bar_expect(full0 + 8 * s, stage);
      weights(u, sbase + (uint32_t)s * stage);
      tokens(u, sbase + (uint32_t)s * stage);
    }
    return;
  }
  /* consumers: warp w's strip in the box is rows 16 w .. 16 w + 15. A full stage's SB boxes run unrolled in pairs
     on two fragment sets, so a box costs its loads, its products and a few address adds: the form with one set
     copied into the other after each box, and a branch per box, spent about 75 instructions a box on moves and
     bookkeeping at 5 cycles each, which (not the bytes) bounded the products of 2-3 strips per SM */
  asm volatile("griddepcontrol.wait;" ::: "memory"); /* the previous kernel may still read out */
  const int g = lane >> 2, q4 = lane & 3;
  const gs_offs<NT8> off = gs_offsets<NT8>(lane);
  const uint32_t wrow = (uint32_t)warp * GS_WBOX, wbox = (uint32_t)C * GS_WBOX, tbox = NT8 * 1024u;
  float d[NT8][4];
#pragma unroll
  for (int t = 0; t < NT8; t++) d[t][0] = d[t][1] = d[t][2] = d[t][3] = 0.0f;
  constexpr int DEP = SL ? 4 : 1; /* up to 8 slices (gemm.cu slices no other count on these kernels) */
  float stk[DEP][NT8 * 4];
  int sp = 0;
  const int units = my_groups * nst;
  gs_frag<NT8> f0, f1;
  int s = 0, q = 0, grp = (int)blockIdx.x;
  uint32_t ph = 0;
  if (units > 0) {
    dsp_bar_wait(full0, 0);
    gs_load<NT8>(f0, sbase + wrow, sbase + wbytes, off);
  }
  for (int u = 0; u < units; u++) {
    /* f0 holds this stage's first box */
    const uint32_t st = sbase + (uint32_t)s * stage;
    const int qs = q % sps, nb = kbs - qs * SB < SB ? kbs - qs * SB : SB; /* boxes in this stage */
    const bool last = q == nst - 1;                                        /* the group's last stage */
    int s1 = s + 1;
    uint32_t ph1 = ph;
    if (s1 == stages) s1 = 0, ph1 ^= 1;
    const uint32_t st1 = sbase + (uint32_t)s1 * stage;
    const bool more = u + 1 < units;
    if (nb == SB) {
#pragma unroll
      for (int j = 0; j < SB; j += 2) {
        gs_load<NT8>(f1, st + (uint32_t)(j + 1) * wbox + wrow, st + wbytes + (uint32_t)(j + 1) * tbox, off);
        gs_mma<NT8>(d, f0);
        if (j + 2 < SB) {
          gs_load<NT8>(f0, st + (uint32_t)(j + 2) * wbox + wrow, st + wbytes + (uint32_t)(j + 2) * tbox, off);
        } else if (more) { /* the next stage's first box */
          dsp_bar_wait(full0 + 8 * s1, ph1);
          gs_load<NT8>(f0, st1 + wrow, st1 + wbytes, off);
        }
        gs_mma<NT8>(d, f1);
      }
    } else { /* a group's short last stage (K not a multiple of SB boxes): box by box, nothing past K */
      for (int j = 0; j < nb; j++) {
        if (j + 1 < nb) {
          gs_load<NT8>(f1, st + (uint32_t)(j + 1) * wbox + wrow, st + wbytes + (uint32_t)(j + 1) * tbox, off);
        } else if (more) {
          dsp_bar_wait(full0 + 8 * s1, ph1);
          gs_load<NT8>(f1, st1 + wrow, st1 + wbytes, off);
        }
        gs_mma<NT8>(d, f0);
        f0 = f1;
      }
    }
    /* the stage's fragments are in registers (the products above read them): the producer may land it again */
    __syncwarp();
    if (lane == 0) dsp_bar_arrive(empty0 + 8 * s);
    if (SL && qs == sps - 1) { /* the slice's last stage: its sums into the tree */
      dsp_slice_close<NT8 * 4, DEP>(&d[0][0], stk, sp, (int)((merges >> (4 * (q / sps))) & 15u));
      if (last) {
        sp = 0;
#pragma unroll
        for (int t = 0; t < NT8; t++)
#pragma unroll
          for (int e = 0; e < 4; e++) d[t][e] = stk[0][4 * t + e];
      }
    }
    if (last) {
      /* d[t] = (row g, token 8 t + 2 q), (g, + 1), (g + 8, 8 t + 2 q), (g + 8, + 1) */
      const int row0 = 16 * (C * grp + warp);
#pragma unroll
      for (int t = 0; t < NT8; t++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int row = row0 + g + 8 * (e >> 1), tok = 8 * t + 2 * q4 + (e & 1);
          if (row < n && tok < m) dsp_dev_store_sum(out, (size_t)tok * (size_t)ldo + row, d[t][e], f32);
          d[t][e] = 0.0f;
        }
      }
      grp += (int)gridDim.x;
    }
    q = last ? 0 : q + 1;
    s = s1, ph = ph1;
  }
}

template <int NT8>
dsp_status gs_launch(const void *a, int64_t lda, const void *w, void *out, int64_t m, int64_t n, int64_t k, int64_t ldo,
                     int slices, int pdl, int force_c, int force_sb, int force_stages, int f32, cudaStream_t s) {
  const lw_dev &dv = lw_dev_once();
  if (!dv.ok) return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda gemm (mma.sync): not an sm_90 device with TMA");
  const gs_shape sh = gs_pick(dv, n, NT8, force_c, force_sb, force_stages);
  if (sh.stages < 2) return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda gemm (mma.sync): shared memory too small");
  if (sh.groups > INT32_MAX) return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda gemm (mma.sync): N %lld too large", (long long)n);
  CUtensorMap tw, ta;
  DSP_TRY(gs_map(&tw, w, n, k, k, 16 * sh.c, sh.sb));
  DSP_TRY(gs_map(&ta, a, m, k, lda, 8 * NT8, sh.sb));
  void (*kern)(const CUtensorMap, const CUtensorMap, void *, int, int, int, int, unsigned long long, long long, int,
               int, int) = slices > 1 ? (sh.sb == 2 ? gs_kernel<NT8, 2, true> : gs_kernel<NT8, 4, true>)
                                      : (sh.sb == 2 ? gs_kernel<NT8, 2, false> : gs_kernel<NT8, 4, false>);
  /* per call: the opt-in is per device; the most any launch asks */
  DSP_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dv.optin));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)sh.grid), cfg.blockDim = dim3((unsigned)(32 * (sh.c + 1)));
  cfg.dynamicSmemBytes = gs_smem(sh.c, NT8, sh.sb, sh.stages), cfg.stream = s;
  cudaLaunchAttribute at = dsp_pdl_attribute();
  cfg.attrs = &at, cfg.numAttrs = pdl ? 1 : 0;
  const int nkb = (int)(k / GS_BK);
  DSP_CUDA_TRY(cudaLaunchKernelEx(&cfg, kern, tw, ta, out, (int)m, (int)n, nkb / slices, slices,
                                  dsp_slice_merges(slices), (long long)ldo, (int)sh.groups, sh.stages, f32));
  DSP_CUDA_TRY_LAUNCH();
  return DSP_OK;
}

dsp_status gs_run(const void *a, int64_t lda, const void *w, void *out, int64_t m, int64_t n, int64_t k, int64_t ldo,
                  int slices, int pdl, int force_c, int force_sb, int force_stages, int f32, cudaStream_t s) {
  if (m < 1) return DSP_OK;
  if (slices != 1 && slices != 2 && slices != 4 && slices != 8)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda gemm (mma.sync): %d K slices (1, 2, 4 or 8)", slices);
  if (k % ((int64_t)slices * GS_BK))
    return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda gemm (mma.sync): K %lld in %d slices of whole 64-column boxes",
                    (long long)k, slices);
  if (m > DSP_GEMM_SMALL_MAX_M || k % GS_BK || k > INT32_MAX || n > INT32_MAX || lda % 8 || lda < k || ldo < n ||
      (uintptr_t)a % 16 || (uintptr_t)w % 16)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda gemm (mma.sync): M %lld, K %lld, lda %lld not supported", (long long)m,
                    (long long)k, (long long)lda);
  if (force_sb && force_sb != 2 && force_sb != 4)
    return dsp_fail(DSP_ERR_ARG, "cuda gemm (mma.sync): %d boxes a stage (2 or 4)", force_sb);
  if (m <= 8) return gs_launch<1>(a, lda, w, out, m, n, k, ldo, slices, pdl, force_c, force_sb, force_stages, f32, s);
  if (m <= 16) return gs_launch<2>(a, lda, w, out, m, n, k, ldo, slices, pdl, force_c, force_sb, force_stages, f32, s);
  return gs_launch<4>(a, lda, w, out, m, n, k, ldo, slices, pdl, force_c, force_sb, force_stages, f32, s);
}

}  // namespace

extern "C" dsp_status dsp_cuda_gemm_small_run(const void *a, int64_t lda, const void *w, void *out, int64_t m, int64_t n,
                                              int64_t k, int64_t ldo, int slices, int pdl,
                                              const dsp_gemm_small_shape *shape, int f32, cudaStream_t s) {
  const dsp_gemm_small_shape pick = {0, 0, 0}, *sh = shape ? shape : &pick;
  return gs_run(a, lda, w, out, m, n, k, ldo, slices, pdl, sh->c, sh->sb, sh->stages, f32, s);
}
extern "C" dsp_status dsp_cuda_gemm_small_check(int64_t k, long long *compared, long long *differ) {
  /* every token-tile count (1, 2, 4; 21 rows: the last tiles partial); a strip of 8 rows past N's last 16; groups
     of one strip (the pick at N 520), of three (four boxes a stage) and of six (two boxes a stage); their last
     groups partial */
  const int64_t N = 520, ms[4] = {32, 21, 16, 5};
  const int cs[3] = {0, 3, 6};
  *compared = *differ = 0;
  uint16_t *buf = NULL;
  const size_t na = (size_t)(DSP_GEMM_SMALL_MAX_M * k), nw = (size_t)(N * k), no = (size_t)(DSP_GEMM_SMALL_MAX_M * N);
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
  for (int v = 0; v < 12 && st == DSP_OK; v++) {
    const int64_t m = ms[v & 3];
    st = dsp_cuda_gemm_wg_run(a, k, w, o1, m, N, k, N, 0, 0, 0, 0, s);
    if (st == DSP_OK) st = gs_run(a, k, w, o2, m, N, k, N, 1, 0, cs[v >> 2], 0, 0, 0, s);
    if (st == DSP_OK && (cudaMemcpyAsync(h, o1, (size_t)(m * N) * 2, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
                         cudaMemcpyAsync(h + no, o2, (size_t)(m * N) * 2, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
                         cudaStreamSynchronize(s) != cudaSuccess))
      st = dsp_fail(DSP_ERR_DEVICE, "%s:%d: cuda gemm (mma.sync) check: %s", __FILE__, __LINE__,
                    cudaGetErrorString(cudaGetLastError()));
    if (st == DSP_OK) {
      for (size_t i = 0; i < (size_t)(m * N); i++) *differ += h[i] != h[no + i];
      *compared += m * N;
    }
  }
  if (s) cudaStreamDestroy(s);
  free(h);
  cudaFree(buf);
  return st;
}
