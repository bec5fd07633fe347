#include <algorithm>
#include <vector>

#include "kernels/cuda/common/check.h"
#include "support/collectives_time.h"
#include "support/median_time.cuh"

namespace {

struct Buffers {
  void *send = nullptr, *recv = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  ~Buffers() {
    cudaFree(send);
    cudaFree(recv);
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    if (stream) cudaStreamDestroy(stream);
  }
};

}  // namespace

extern "C" dsp_status dsp_cuda_time_collectives(dsp_comm *nccl, size_t gather_bytes, size_t bcast_bytes, int iters,
                                                float *allgather_us, float *bcast_us) {
  if (iters < 1 || !gather_bytes || !bcast_bytes)
    return dsp_fail(DSP_ERR_ARG, "collective timing: iters and sizes must be positive");
  Buffers m;
  size_t P = (size_t)dsp_comm_size(nccl);
  DSP_CUDA_TRY(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  DSP_CUDA_TRY(cudaEventCreate(&m.a));
  DSP_CUDA_TRY(cudaEventCreate(&m.b));
  DSP_CUDA_TRY(cudaMalloc(&m.send, std::max(gather_bytes, bcast_bytes)));
  DSP_CUDA_TRY(cudaMalloc(&m.recv, gather_bytes * P));
  DSP_CUDA_TRY(cudaMemset(m.send, 1, std::max(gather_bytes, bcast_bytes)));
  DSP_TRY(dsp_comm_set_stream(nccl, m.stream));
  auto none = [] { return DSP_OK; };
  double ag = 0, bc = 0;
  DSP_TRY(dsp_bench_median_us(m.stream, m.a, m.b, 5, iters, none,
                              [&] { return dsp_comm_allgather(nccl, m.send, m.recv, gather_bytes); }, &ag));
  DSP_TRY(dsp_bench_median_us(m.stream, m.a, m.b, 5, iters, none,
                              [&] { return dsp_comm_bcast(nccl, m.send, bcast_bytes, 0); }, &bc));
  *allgather_us = (float)ag, *bcast_us = (float)bc;
  return DSP_OK;
}
