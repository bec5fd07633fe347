#include <algorithm>
#include <vector>

#include "kernels/cuda/common/check.h"
#include "kernels/cuda/common/launch.cuh"
#include "support/grid_count.cuh"
#include "support/median_time.cuh"
#include "support/chain_time.h"

namespace {

constexpr int CT_THREADS = 128;

/* One phase of one block: the sum of every value of `in` (n of them) in a fixed order, written as `fl` values. */
__device__ void ct_work(const float *in, float *out, int n, int fl, float *red) {
  float s = 0.0f;
  for (int i = (int)threadIdx.x; i < n; i += CT_THREADS) s += __ldcg(in + i); /* L2: another SM wrote it */
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
  __syncthreads();
  s = (red[0] + red[1]) + (red[2] + red[3]);
  if ((int)threadIdx.x < fl) __stcg(out + blockIdx.x * fl + threadIdx.x, s / (float)n + 1e-3f * (float)threadIdx.x);
  __syncthreads(); /* red is read before the next phase writes it */
}

/* One phase as a kernel. Launched programmatically it lets the next phase's blocks start at once and waits for the
 * previous phase before it reads; launched plainly both calls return at once. */
__global__ void __launch_bounds__(CT_THREADS) k_phase(const float *in, float *out, int fl) {
  __shared__ float red[CT_THREADS / 32];
  dsp_dev_launch_dependents();
  dsp_dev_grid_wait();
  ct_work(in, out, (int)gridDim.x * fl, fl, red);
}

/* Every phase in one kernel; with `barrier`, a grid barrier after each phase: every block adds one to the counter
 * (release) and waits until all blocks of this phase have (acquire). */
__global__ void __launch_bounds__(CT_THREADS) k_persistent(float *b0, float *b1, unsigned *ctr, int phases, int fl,
                                                            int barrier) {
  __shared__ float red[CT_THREADS / 32];
  const unsigned nb = gridDim.x;
  for (int p = 0; p < phases; p++) {
    ct_work(p & 1 ? b1 : b0, p & 1 ? b0 : b1, (int)nb * fl, fl, red);
    if (!barrier) continue;
    if (threadIdx.x == 0) {
      dsp_bench_count_arrive(ctr);
      dsp_bench_count_wait(ctr, (unsigned)(p + 1) * nb);
    }
    __syncthreads();
  }
}

struct Chain {
  float *b0 = nullptr, *b1 = nullptr;
  unsigned *ctr = nullptr;
  cudaStream_t s = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  cudaGraphExec_t plain = nullptr, pdl = nullptr;
  ~Chain() {
    if (plain) cudaGraphExecDestroy(plain);
    if (pdl) cudaGraphExecDestroy(pdl);
    cudaFree(b0);
    cudaFree(b1);
    cudaFree(ctr);
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    if (s) cudaStreamDestroy(s);
  }
};

dsp_status capture(Chain &c, int phases, int blocks, int fl, int programmatic, cudaGraphExec_t *exec) {
  cudaGraph_t g = nullptr;
  DSP_CUDA_TRY(cudaStreamBeginCapture(c.s, cudaStreamCaptureModeThreadLocal));
  for (int p = 0; p < phases; p++) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)blocks), cfg.blockDim = dim3(CT_THREADS), cfg.stream = c.s;
    cudaLaunchAttribute at = dsp_pdl_attribute();
    cfg.attrs = &at, cfg.numAttrs = programmatic && p > 0;
    cudaLaunchKernelEx(&cfg, k_phase, (const float *)(p & 1 ? c.b1 : c.b0), p & 1 ? c.b0 : c.b1, fl);
  }
  cudaError_t e = cudaStreamEndCapture(c.s, &g);
  if (e == cudaSuccess) e = cudaGraphInstantiate(exec, g, 0);
  if (g) cudaGraphDestroy(g);
  DSP_CUDA_TRY(e);
  return DSP_OK;
}

/* The buffers' starting values: b0 ones, b1 zeros, the counter zero. */
dsp_status reset(Chain &c, size_t n) {
  std::vector<float> ones(n, 1.0f);
  DSP_CUDA_TRY(cudaMemcpyAsync(c.b0, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice, c.s));
  DSP_CUDA_TRY(cudaMemsetAsync(c.b1, 0, n * sizeof(float), c.s));
  DSP_CUDA_TRY(cudaMemsetAsync(c.ctr, 0, sizeof(unsigned), c.s));
  DSP_CUDA_TRY(cudaStreamSynchronize(c.s));
  return DSP_OK;
}

}  // namespace

extern "C" dsp_status dsp_bench_chain(int phases, int blocks, int fl, int reps, dsp_bench_chain_times *t) {
  int dev = 0, sms = 0;
  DSP_CUDA_TRY(cudaGetDevice(&dev));
  DSP_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  if (phases < 2 || phases % 2 || reps < 1 || fl < 1 || fl > CT_THREADS || blocks < 1 || blocks > sms)
    return dsp_fail(DSP_ERR_ARG, "chain: phases even and >= 2, reps >= 1, floats 1..%d, blocks 1..%d (the SMs)",
                    CT_THREADS, sms);
  Chain c;
  const size_t n = (size_t)blocks * (size_t)fl;
  DSP_CUDA_TRY(cudaStreamCreateWithFlags(&c.s, cudaStreamNonBlocking));
  DSP_CUDA_TRY(cudaEventCreate(&c.a));
  DSP_CUDA_TRY(cudaEventCreate(&c.b));
  DSP_CUDA_TRY(cudaMalloc(&c.b0, n * sizeof(float)));
  DSP_CUDA_TRY(cudaMalloc(&c.b1, n * sizeof(float)));
  DSP_CUDA_TRY(cudaMalloc(&c.ctr, sizeof(unsigned)));
  DSP_TRY(capture(c, phases, blocks, fl, 0, &c.plain));
  DSP_TRY(capture(c, phases, blocks, fl, 1, &c.pdl));
  const dim3 grid((unsigned)blocks), blk(CT_THREADS);
  auto persistent = [&](int barrier) {
    k_persistent<<<grid, blk, 0, c.s>>>(c.b0, c.b1, c.ctr, phases, fl, barrier);
    DSP_CUDA_TRY_LAUNCH();
    return DSP_OK;
  };
  auto graph = [&](cudaGraphExec_t g) {
    DSP_CUDA_TRY(cudaGraphLaunch(g, c.s));
    return DSP_OK;
  };

  /* the same bits from the chain of kernels and from the barrier kernel (phases is even: the result is in b0) */
  std::vector<float> r0(n), r1(n), r2(n);
  DSP_TRY(reset(c, n));
  DSP_TRY(graph(c.plain));
  DSP_CUDA_TRY(cudaMemcpyAsync(r0.data(), c.b0, n * sizeof(float), cudaMemcpyDeviceToHost, c.s));
  DSP_TRY(reset(c, n));
  DSP_TRY(graph(c.pdl));
  DSP_CUDA_TRY(cudaMemcpyAsync(r1.data(), c.b0, n * sizeof(float), cudaMemcpyDeviceToHost, c.s));
  DSP_TRY(reset(c, n));
  DSP_TRY(persistent(1));
  DSP_CUDA_TRY(cudaMemcpyAsync(r2.data(), c.b0, n * sizeof(float), cudaMemcpyDeviceToHost, c.s));
  DSP_CUDA_TRY(cudaStreamSynchronize(c.s));
  t->equal = std::equal(r0.begin(), r0.end(), r1.begin()) && std::equal(r0.begin(), r0.end(), r2.begin());

  auto none = [] { return DSP_OK; };
  auto zero = [&] {
    DSP_CUDA_TRY(cudaMemsetAsync(c.ctr, 0, sizeof(unsigned), c.s));
    return DSP_OK;
  };
  DSP_TRY(dsp_bench_median_us(c.s, c.a, c.b, 3, reps, none, [&] { return graph(c.plain); }, &t->plain_us));
  DSP_TRY(dsp_bench_median_us(c.s, c.a, c.b, 3, reps, none, [&] { return graph(c.pdl); }, &t->pdl_us));
  DSP_TRY(dsp_bench_median_us(c.s, c.a, c.b, 3, reps, zero, [&] { return persistent(1); }, &t->barrier_us));
  DSP_TRY(dsp_bench_median_us(c.s, c.a, c.b, 3, reps, none, [&] { return persistent(0); }, &t->free_us));
  return DSP_OK;
}
