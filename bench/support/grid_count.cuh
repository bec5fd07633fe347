/* The grid barrier of the benchmarks' persistent kernels, as a counter in global memory: blocks add one when their
 * part is stored (release), waiters poll until the count reaches a target (acquire), and a wait past 5 s traps, so
 * a broken barrier fails loudly instead of hanging the device. CUDA C++ only (the benchmarks' support). */
#ifndef DSP_BENCH_SUPPORT_GRID_COUNT_CUH
#define DSP_BENCH_SUPPORT_GRID_COUNT_CUH

#include "kernels/cuda/common/sync.cuh"

/* One thread of a block, after a block barrier that follows every thread's stores. */
__device__ __forceinline__ void dsp_bench_count_arrive(unsigned *ctr) {
  __threadfence();
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(ctr) : "memory");
}

__device__ __forceinline__ void dsp_bench_count_wait(const unsigned *ctr, unsigned target) {
  const unsigned long long t0 = dsp_dev_now_ns();
  while (dsp_dev_ld_acquire(ctr) < target)
    if (dsp_dev_now_ns() - t0 > 5000000000ull) __trap();
}

#endif
