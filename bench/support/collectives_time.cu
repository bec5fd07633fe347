#include <algorithm>
#include <vector>

#include "kernels/cuda/common/check.h"
#include "support/collectives_time.h"

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

/* Median of `iters` timed calls of op (one warm-up round first). */
template <class Op>
dsp_status time_op(Buffers &m, int iters, Op op, float *us) {
  std::vector<float> t;
  for (int i = 0; i < iters + 5; i++) {
    DSP_CUDA_TRY(cudaEventRecord(m.a, m.stream));
    DSP_TRY(op());
    DSP_CUDA_TRY(cudaEventRecord(m.b, m.stream));
    DSP_CUDA_TRY(cudaEventSynchronize(m.b));
    float ms = 0;
    DSP_CUDA_TRY(cudaEventElapsedTime(&ms, m.a, m.b));
    if (i >= 5) t.push_back(ms * 1e3f);
  }
  std::sort(t.begin(), t.end());
  *us = t[t.size() / 2];
  return DSP_OK;
}

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
  DSP_TRY(time_op(m, iters, [&] { return dsp_comm_allgather(nccl, m.send, m.recv, gather_bytes); }, allgather_us));
  DSP_TRY(time_op(m, iters, [&] { return dsp_comm_bcast(nccl, m.send, bcast_bytes, 0); }, bcast_us));
  return DSP_OK;
}
