/* Device synchronisation primitives shared by the CUDA kernels: the global
 * timer, acquire loads, shared-memory addresses, mbarriers (arrive, expect
 * bytes, wait with a 5 s trap so a broken pipeline fails loudly), and the
 * arrivals and barriers of clusters. CUDA C++ only. */
#ifndef DSP_KERNELS_CUDA_COMMON_SYNC_CUH
#define DSP_KERNELS_CUDA_COMMON_SYNC_CUH

#include <stdint.h>

namespace {

/* Lets a kernel launched programmatically after this one (PDL: the products) place its blocks now; it still waits
 * for this grid's completion (griddepcontrol.wait) before it reads what this grid writes. */
__device__ __forceinline__ void dsp_dev_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* Returns once the kernel before this one on its stream has completed and its writes are visible: a grid launched
 * programmatically (dsp_launch) calls it before it reads or writes anything that kernel touches; without PDL it
 * returns at once. */
__device__ __forceinline__ void dsp_dev_grid_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

__device__ __forceinline__ unsigned long long dsp_dev_now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned dsp_dev_ld_acquire(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint32_t dsp_saddr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void dsp_bar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void dsp_bar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void dsp_bar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ bool dsp_bar_test(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}

/* Waits for the phase of `parity` to complete; traps after 5 s (a broken
 * pipeline fails loudly instead of hanging the device). */
__device__ __forceinline__ void dsp_bar_wait(uint32_t bar, uint32_t parity) {
  if (dsp_bar_test(bar, parity)) return;
  const unsigned long long t0 = dsp_dev_now_ns();
  while (!dsp_bar_test(bar, parity))
    if (dsp_dev_now_ns() - t0 > 5000000000ull) __trap();
}

/* Arrival on the mbarrier at the same shared offset in cluster block `rank`.
 * CTA-scope release (the default): the stage's readers are wgmma groups that
 * wgmma.wait_group has already seen complete, so no cluster-scope fence is
 * needed before the peer's producer overwrites it. With `.release.cluster`
 * every arrival waited on a memory barrier (ncu: 44% of the stalls) and
 * clusters ran at half speed (bench/RESULTS.md v35, v37). */
__device__ __forceinline__ void dsp_bar_arrive_remote(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n\t.reg .b32 ra;\n\tmapa.shared::cluster.u32 ra, %0, %1;\n\t"
      "mbarrier.arrive.shared::cluster.b64 _, [ra];\n\t}" ::"r"(bar),
      "r"(rank)
      : "memory");
}

/* Data handed between cluster blocks through shared memory: one cluster-scope
 * fence (this thread's earlier accesses, and those a CTA barrier made it
 * observe), then relaxed cluster-scope arrivals (a release per arrival costs a
 * fence each); the waiter's acquire at cluster scope; loads through the peer's
 * generic address. */
__device__ __forceinline__ void dsp_fence_cluster() { asm volatile("fence.acq_rel.cluster;" ::: "memory"); }

__device__ __forceinline__ void dsp_bar_arrive_remote_relaxed(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n\t.reg .b32 ra;\n\tmapa.shared::cluster.u32 ra, %0, %1;\n\t"
      "mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [ra];\n\t}" ::"r"(bar),
      "r"(rank)
      : "memory");
}

__device__ __forceinline__ void dsp_bar_wait_acquire_cluster(uint32_t bar, uint32_t parity) {
  const unsigned long long t0 = dsp_dev_now_ns();
  for (;;) {
    uint32_t ok;
    asm volatile(
        "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
    if (ok) return;
    if (dsp_dev_now_ns() - t0 > 5000000000ull) __trap();
  }
}

/* The generic address of `p` (this block's shared memory) in cluster block
 * `rank`'s window: plain loads through it, ordered after an acquire wait. */
template <typename T>
__device__ __forceinline__ const T *dsp_cluster_peer(const T *p, uint32_t rank) {
  uint64_t r;
  asm("mapa.u64 %0, %1, %2;" : "=l"(r) : "l"(p), "r"(rank));
  return (const T *)r;
}

/* Named barrier 1 over `count` threads (a multiple of 32), memory ordered at CTA scope. */
__device__ __forceinline__ void dsp_named_sync(uint32_t count) {
  asm volatile("bar.sync 1, %0;" ::"r"(count) : "memory");
}

/* Every block of the cluster: arrive and wait (all threads). */
__device__ __forceinline__ void dsp_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

}  // namespace

#endif
