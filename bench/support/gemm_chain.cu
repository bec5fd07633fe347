#include <algorithm>
#include <vector>

#include "kernels/cuda/common/check.h"
#include "kernels/cuda/gemm_small.h"
#include "kernels/cuda/gemm_small_dev.cuh"
#include "support/gemm_chain.h"
#include "support/grid_count.cuh"
#include "support/median_time.cuh"

namespace {

constexpr int GC_MAX = DSP_GEMM_CHAIN_MAX;

/* bf16 values of one binade 2^(e - 127) with random sign and mantissa (a hash of index and salt): weights at 2^-7
 * keep a chain of products of K up to 12288 near 1, so its outputs stay finite and their bits informative. */
__global__ void gc_fill(uint16_t *p, size_t n, uint64_t salt, uint32_t e) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ salt;
  h ^= h >> 31, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 29, h *= 0x94D049BB133111EBull, h ^= h >> 32;
  p[i] = (uint16_t)(((h & 1) << 15) | (e << 7) | ((h >> 16) & 0x7F));
}

/* The few-row kernel's stage loop and strip store (gemm_small.cu's gs_kernel), copied rather than shared so that the
 * product kernel's code stays as measured; a persistent product path would share them. */
/* One stage of a consumer warp: its nb boxes' products into d. On entry f0 holds the stage's first box (at st); on
 * exit, when `more`, it holds the next stage's first box (at st1, read once that stage's full barrier bar1 completes
 * phase ph1). A full stage runs its boxes in pairs on two fragment sets, so a box costs its loads, its products
 * and a few address adds: the form with one set copied into the other after each box, and a branch per box, spent
 * about 75 instructions a box on moves and bookkeeping at 5 cycles each, which (not the bytes) bounded the products
 * of 2-3 strips per SM. */
template <int NT8, int SB>
__device__ __forceinline__ void gs_stage_mma(float (&d)[NT8][4], gs_frag<NT8> &f0, gs_frag<NT8> &f1, uint32_t st,
                                             uint32_t st1, int nb, bool more, uint32_t bar1, uint32_t ph1,
                                             uint32_t wrow, uint32_t wbox, uint32_t wbytes, uint32_t tbox,
                                             const gs_offs<NT8> &off) {
  if (nb == SB) {
#pragma unroll
    for (int j = 0; j < SB; j += 2) {
      gs_load<NT8>(f1, st + (uint32_t)(j + 1) * wbox + wrow, st + wbytes + (uint32_t)(j + 1) * tbox, off);
      gs_mma<NT8>(d, f0);
      if (j + 2 < SB) {
        gs_load<NT8>(f0, st + (uint32_t)(j + 2) * wbox + wrow, st + wbytes + (uint32_t)(j + 2) * tbox, off);
      } else if (more) { /* the next stage's first box */
        dsp_bar_wait(bar1, ph1);
        gs_load<NT8>(f0, st1 + wrow, st1 + wbytes, off);
      }
      gs_mma<NT8>(d, f1);
    }
  } else { /* a group's short last stage (K not a multiple of SB boxes): box by box, nothing past K */
    for (int j = 0; j < nb; j++) {
      if (j + 1 < nb) {
        gs_load<NT8>(f1, st + (uint32_t)(j + 1) * wbox + wrow, st + wbytes + (uint32_t)(j + 1) * tbox, off);
      } else if (more) {
        dsp_bar_wait(bar1, ph1);
        gs_load<NT8>(f1, st1 + wrow, st1 + wbytes, off);
      }
      gs_mma<NT8>(d, f0);
      f0 = f1;
    }
  }
}

/* A strip's results (rows row0 + g, + 8; tokens 8 t + 2 q4, + 1 of each token tile) stored, bf16 with one
 * rounding or fp32, and its accumulators zeroed for the next strip. */
template <int NT8>
__device__ __forceinline__ void gs_store(float (&d)[NT8][4], void *out, int row0, int g, int q4, int n, int m,
                                         long long ldo, int f32) {
#pragma unroll
  for (int t = 0; t < NT8; t++) {
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int row = row0 + g + 8 * (e >> 1), tok = 8 * t + 2 * q4 + (e & 1);
      if (row < n && tok < m) dsp_dev_store_sum(out, (size_t)tok * (size_t)ldo + row, d[t][e], f32);
      d[t][e] = 0.0f;
    }
  }
}

/* The chain: product j multiplies weight tw[j] ([n[j]][K]) by tokens ta[j] (the input, or product j - 1's output)
 * into out[j]; its groups of C strips spread over the blocks as in the few-row kernel. ctr counts the blocks whose
 * consumers have stored their part of a product (zero at launch). */
struct gc_args {
  CUtensorMap tw[GC_MAX], ta[GC_MAX];
  void *out[GC_MAX];
  int n[GC_MAX], kbs[GC_MAX], groups[GC_MAX];
  int np, m, stages;
  unsigned *ctr;
};

/* The few-row kernel persistent over a chain of products (one block an SM, all resident). The producer runs one
 * ring over every product: the first stages of product j take its weights at once (the consumers free the slots
 * as product j - 1 ends), then it waits until every block has stored product j - 1 and takes the tokens. So the
 * weights keep streaming through the barrier that separates two kernels in a graph. Same stages, same boxes in
 * the same order as the few-row kernel: the same bits. */
template <int NT8, int SB>
__global__ void __launch_bounds__(32 * (gs_maxc(NT8) + 1), 1) gc_kernel(const __grid_constant__ gc_args a) {
  extern __shared__ unsigned char gc_raw[];
  unsigned char *smem = (unsigned char *)(((uintptr_t)gc_raw + 1023) & ~(uintptr_t)1023);
  const int C = (int)blockDim.x / 32 - 1, warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31;
  const int G = (int)gridDim.x, b = (int)blockIdx.x, stages = a.stages;
  const uint32_t wbytes = (uint32_t)SB * C * GS_WBOX, stage = gs_stage(C, NT8, SB);
  const uint32_t sbase = dsp_saddr(smem), full0 = sbase + (uint32_t)stages * stage, empty0 = full0 + 8 * stages;
  auto mine = [&](int j) { return b < a.groups[j] ? (a.groups[j] - 1 - b) / G + 1 : 0; };
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; s++) dsp_bar_init(full0 + 8 * s, 1), dsp_bar_init(empty0 + 8 * s, (uint32_t)C);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == C) {
    if (lane) return;
    for (int j = 0; j < a.np; j++) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(&a.tw[j]) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(&a.ta[j]) : "memory");
    }
    const uint64_t pw = dsp_l2_evict_first(), pa = dsp_l2_evict_last();
    int u0 = 0; /* ring position of product j's first unit */
    for (int j = 0; j < a.np; j++) {
      const int nst = (a.kbs[j] + SB - 1) / SB, units = mine(j) * nst;
      auto slot = [&](int i) { return sbase + (uint32_t)((u0 + i) % stages) * stage; };
      auto full = [&](int i) { return full0 + 8 * (uint32_t)((u0 + i) % stages); };
      auto claim = [&](int i) { /* the slot's last unit has been read */
        const int uu = u0 + i;
        if (uu >= stages) dsp_bar_wait(empty0 + 8 * (uint32_t)(uu % stages), (uint32_t)((uu / stages - 1) & 1));
        dsp_bar_expect(full(i), stage);
      };
      auto weights = [&](int i) {
        dsp_tcopy3_hint(slot(i), &a.tw[j], 0, 16 * C * (b + (i / nst) * G), (i % nst) * SB, full(i), pw);
      };
      auto tokens = [&](int i) { dsp_tcopy3_hint(slot(i) + wbytes, &a.ta[j], 0, 0, (i % nst) * SB, full(i), pa); };
      const int n0 = units < stages ? units : stages;
      for (int i = 0; i < n0; i++) claim(i), weights(i);
      if (j > 0) { /* the tokens are product j - 1's output: wait for every block's part, then read it by TMA */
        dsp_bench_count_wait(a.ctr, (unsigned)(j * G));
        asm volatile("fence.proxy.async.global;" ::: "memory");
      }
      for (int i = 0; i < n0; i++) tokens(i);
      for (int i = n0; i < units; i++) claim(i), weights(i), tokens(i);
      u0 += units;
    }
    return;
  }
  const int g = lane >> 2, q4 = lane & 3;
  const gs_offs<NT8> off = gs_offsets<NT8>(lane);
  const uint32_t wrow = (uint32_t)warp * GS_WBOX, wbox = (uint32_t)C * GS_WBOX, tbox = NT8 * 1024u;
  float d[NT8][4];
#pragma unroll
  for (int t = 0; t < NT8; t++) d[t][0] = d[t][1] = d[t][2] = d[t][3] = 0.0f;
  gs_frag<NT8> f0, f1;
  int s = 0;
  uint32_t ph = 0;
  for (int j = 0; j < a.np; j++) {
    const int kbs = a.kbs[j], nst = (kbs + SB - 1) / SB, units = mine(j) * nst;
    int q = 0, grp = b;
    /* the look-ahead stops at a product's end: the next product's tokens wait for this block's stores */
    if (units > 0) {
      dsp_bar_wait(full0 + 8 * (uint32_t)s, ph);
      gs_load<NT8>(f0, sbase + (uint32_t)s * stage + wrow, sbase + (uint32_t)s * stage + wbytes, off);
    }
    for (int u = 0; u < units; u++) {
      const uint32_t st = sbase + (uint32_t)s * stage;
      const int nb = kbs - q * SB < SB ? kbs - q * SB : SB;
      const bool last = q == nst - 1;
      int s1 = s + 1;
      uint32_t ph1 = ph;
      if (s1 == stages) s1 = 0, ph1 ^= 1;
      gs_stage_mma<NT8, SB>(d, f0, f1, st, sbase + (uint32_t)s1 * stage, nb, u + 1 < units, full0 + 8 * (uint32_t)s1,
                            ph1, wrow, wbox, wbytes, tbox, off);
      __syncwarp();
      if (lane == 0) dsp_bar_arrive(empty0 + 8 * (uint32_t)s);
      if (last) {
        gs_store<NT8>(d, a.out[j], 16 * (C * grp + warp), g, q4, a.n[j], a.m, a.n[j], 0);
        grp += G;
      }
      q = last ? 0 : q + 1;
      s = s1, ph = ph1;
    }
    /* this block's part of product j is stored once all C consumer warps are past their stores */
    dsp_named_sync(32u * (uint32_t)C);
    if (threadIdx.x == 0) { /* the stores are generic and the readers' copies async: a proxy fence on both sides */
      asm volatile("fence.proxy.async.global;" ::: "memory");
      dsp_bench_count_arrive(a.ctr);
    }
  }
}

struct Bufs {
  std::vector<void *> dev;
  cudaStream_t s = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  std::vector<cudaGraphExec_t> graphs;
  ~Bufs() {
    for (cudaGraphExec_t g : graphs) cudaGraphExecDestroy(g);
    for (void *p : dev) cudaFree(p);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (s) cudaStreamDestroy(s);
  }
  dsp_status alloc(size_t bytes, void **p) {
    DSP_CUDA_TRY(cudaMalloc(p, bytes));
    dev.push_back(*p);
    return DSP_OK;
  }
};

/* Captures rec() into a graph kept in B. */
template <class Rec>
dsp_status capture(Bufs &B, Rec rec, cudaGraphExec_t *exec) {
  cudaGraph_t g = nullptr;
  DSP_CUDA_TRY(cudaStreamBeginCapture(B.s, cudaStreamCaptureModeThreadLocal));
  const dsp_status r = rec();
  const cudaError_t e = cudaStreamEndCapture(B.s, &g);
  DSP_TRY(r);
  DSP_CUDA_TRY(e);
  const cudaError_t ei = cudaGraphInstantiate(exec, g, 0);
  cudaGraphDestroy(g);
  DSP_CUDA_TRY(ei);
  B.graphs.push_back(*exec);
  return DSP_OK;
}

template <int NT8, int SB>
dsp_status gc_launch(const gc_args &a, int c, int grid, size_t smem, cudaStream_t s) {
  DSP_CUDA_TRY(cudaFuncSetAttribute(gc_kernel<NT8, SB>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  gc_kernel<NT8, SB><<<grid, 32 * (c + 1), smem, s>>>(a);
  DSP_CUDA_TRY_LAUNCH();
  return DSP_OK;
}

}  // namespace

extern "C" dsp_status dsp_bench_gemm_chain(int np, const int64_t *n, int64_t k0, int64_t m, int reps,
                                           dsp_bench_gemm_chain_times *t) {
  if (np < 1 || np > GC_MAX || m < 1 || m > 16 || reps < 1 || k0 < 64 || k0 % 64)
    return dsp_fail(DSP_ERR_ARG, "gemm chain: 1..%d products, 1..16 rows, K a multiple of 64", GC_MAX);
  for (int j = 0; j < np; j++)
    if (n[j] < 64 || n[j] % 64 || n[j] > (1 << 20))
      return dsp_fail(DSP_ERR_ARG, "gemm chain: product %d has %lld rows (a multiple of 64)", j, (long long)n[j]);
  const lw_dev &dv = lw_dev_once();
  if (!dv.ok) return dsp_fail(DSP_ERR_UNSUPPORTED, "gemm chain: not an sm_90 device with TMA");
  const int nt8 = m <= 8 ? 1 : 2;
  /* one shape for the whole chain: the few-row kernel's pick for the product with the most rows */
  const int64_t nmax = *std::max_element(n, n + np);
  const gs_shape sh = gs_pick(dv, nmax, nt8, 0, 0, 0);
  t->c = sh.c, t->sb = sh.sb, t->stages = sh.stages;
  Bufs B;
  DSP_CUDA_TRY(cudaStreamCreateWithFlags(&B.s, cudaStreamNonBlocking));
  DSP_CUDA_TRY(cudaEventCreate(&B.e0));
  DSP_CUDA_TRY(cudaEventCreate(&B.e1));
  void *in = nullptr, *w[GC_MAX], *o1[GC_MAX], *o2[GC_MAX], *ctr = nullptr;
  DSP_TRY(B.alloc((size_t)(m * k0) * 2, &in));
  DSP_TRY(B.alloc(sizeof(unsigned), &ctr));
  t->bytes = 0;
  for (int j = 0; j < np; j++) {
    const int64_t k = j ? n[j - 1] : k0;
    DSP_TRY(B.alloc((size_t)(n[j] * k) * 2, &w[j]));
    DSP_TRY(B.alloc((size_t)(m * n[j]) * 2, &o1[j]));
    DSP_TRY(B.alloc((size_t)(m * n[j]) * 2, &o2[j]));
    gc_fill<<<(unsigned)((n[j] * k + 255) / 256), 256, 0, B.s>>>((uint16_t *)w[j], (size_t)(n[j] * k),
                                                                0x3C00u + 97u * (unsigned)j, 120u);
    t->bytes += (double)(n[j] * k) * 2.0;
  }
  gc_fill<<<(unsigned)((m * k0 + 255) / 256), 256, 0, B.s>>>((uint16_t *)in, (size_t)(m * k0), 0x5151u, 127u);
  DSP_CUDA_TRY_LAUNCH();

  gc_args a = {};
  a.np = np, a.m = (int)m, a.stages = sh.stages, a.ctr = (unsigned *)ctr;
  for (int j = 0; j < np; j++) {
    const int64_t k = j ? n[j - 1] : k0;
    DSP_TRY(gs_map(&a.tw[j], w[j], n[j], k, k, 16 * sh.c, sh.sb));
    DSP_TRY(gs_map(&a.ta[j], j ? o2[j - 1] : in, m, k, k, 8 * nt8, sh.sb));
    a.out[j] = o2[j], a.n[j] = (int)n[j], a.kbs[j] = (int)(k / 64);
    a.groups[j] = (int)((n[j] / 16 + sh.c - 1) / sh.c);
  }
  const int grid = dv.sms;
  const size_t smem = gs_smem(sh.c, nt8, sh.sb, sh.stages);
  auto products = [&](const dsp_gemm_small_shape *shape) {
    for (int j = 0; j < np; j++) {
      const int64_t k = j ? n[j - 1] : k0;
      DSP_TRY(dsp_cuda_gemm_small_run(j ? o1[j - 1] : in, k, w[j], o1[j], m, n[j], k, n[j], 1, 1, shape, 0, B.s));
    }
    return DSP_OK;
  };
  const dsp_gemm_small_shape fixed = {sh.c, sh.sb, sh.stages};
  auto chain = [&]() {
    DSP_CUDA_TRY(cudaMemsetAsync(ctr, 0, sizeof(unsigned), B.s));
    if (nt8 == 1) return sh.sb == 2 ? gc_launch<1, 2>(a, sh.c, grid, smem, B.s) : gc_launch<1, 4>(a, sh.c, grid, smem, B.s);
    return sh.sb == 2 ? gc_launch<2, 2>(a, sh.c, grid, smem, B.s) : gc_launch<2, 4>(a, sh.c, grid, smem, B.s);
  };
  cudaGraphExec_t gp = nullptr, gf = nullptr, gc = nullptr;
  DSP_TRY(capture(B, [&] { return products(nullptr); }, &gp));
  DSP_TRY(capture(B, [&] { return products(&fixed); }, &gf));
  DSP_TRY(capture(B, chain, &gc));

  /* every product's output, the chain kernel's against the few-row kernel's */
  DSP_CUDA_TRY(cudaGraphLaunch(gf, B.s));
  DSP_CUDA_TRY(cudaGraphLaunch(gc, B.s));
  DSP_CUDA_TRY(cudaStreamSynchronize(B.s));
  t->compared = t->differ = 0;
  for (int j = 0; j < np; j++) {
    std::vector<uint16_t> h1((size_t)(m * n[j])), h2((size_t)(m * n[j]));
    DSP_CUDA_TRY(cudaMemcpy(h1.data(), o1[j], h1.size() * 2, cudaMemcpyDeviceToHost));
    DSP_CUDA_TRY(cudaMemcpy(h2.data(), o2[j], h2.size() * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < h1.size(); i++) t->differ += h1[i] != h2[i];
    t->compared += (long long)h1.size();
  }
  /* alternated, so that a drift of the clocks falls on all three */
  double sp[3] = {0, 0, 0};
  std::vector<double> r[3];
  auto none = [] { return DSP_OK; };
  const cudaGraphExec_t gs[3] = {gp, gf, gc};
  for (int rnd = 0; rnd < 3; rnd++) {
    for (int v = 0; v < 3; v++)
      DSP_TRY(dsp_bench_median_us(B.s, B.e0, B.e1, 3, reps, none, [&] {
        DSP_CUDA_TRY(cudaGraphLaunch(gs[v], B.s));
        return DSP_OK;
      }, &sp[v]));
    for (int v = 0; v < 3; v++) r[v].push_back(sp[v]);
  }
  for (int v = 0; v < 3; v++) std::sort(r[v].begin(), r[v].end());
  t->pick_us = r[0][1], t->shape_us = r[1][1], t->chain_us = r[2][1];
  return DSP_OK;
}
