#include <cuda_runtime.h>
#include <stdlib.h>

extern "C" {
#include "core/status.h"
}
#include "backend/cuda/markov_cuda.h"
#include "kernels/cuda/common/check.h"
#include "support/cuda_head_time.h"

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* graph: NULL replays the bucket's own proposal (eager where graphs are off). */
static dsp_status time_runs(dsp_cuda_head *h, int32_t batch, int sampling, cudaGraphExec_t graph, int replays,
                            float *median) {
  cudaStream_t st = dsp_cuda_head_stream(h);
  cudaEvent_t *ev = (cudaEvent_t *)calloc((size_t)replays * 2, sizeof *ev);
  float *ms = (float *)calloc((size_t)replays, sizeof *ms);
  dsp_status s = ev && ms ? DSP_OK : dsp_fail(DSP_ERR_NOMEM, "cuda head time: out of memory");
  int made = 0;
  for (; s == DSP_OK && made < 2 * replays; made++)
    if (cudaEventCreate(&ev[made]) != cudaSuccess)
      s = dsp_fail(DSP_ERR_DEVICE, "%s:%d: cudaEventCreate: %s", __FILE__, __LINE__, cudaGetErrorString(cudaGetLastError()));
  auto run = [&]() -> dsp_status {
    if (!graph) return dsp_cuda_head_replay(h, batch, sampling);
    DSP_CUDA_TRY(cudaGraphLaunch(graph, st));
    return DSP_OK;
  };
  for (int w = 0; w < 3 && s == DSP_OK; w++) s = run();
  for (int r = 0; r < replays && s == DSP_OK; r++) {
    cudaError_t e = cudaEventRecord(ev[2 * r], st);
    if (e == cudaSuccess) {
      s = run();
      if (s == DSP_OK) e = cudaEventRecord(ev[2 * r + 1], st);
    }
    if (s == DSP_OK && e != cudaSuccess)
      s = dsp_fail(DSP_ERR_DEVICE, "%s:%d: cudaEventRecord: %s", __FILE__, __LINE__, cudaGetErrorString(e));
  }
  if (s == DSP_OK) {
    cudaError_t e = cudaStreamSynchronize(st);
    for (int r = 0; r < replays && e == cudaSuccess; r++) e = cudaEventElapsedTime(&ms[r], ev[2 * r], ev[2 * r + 1]);
    if (e != cudaSuccess)
      s = dsp_fail(DSP_ERR_DEVICE, "%s:%d: timing replays: %s", __FILE__, __LINE__, cudaGetErrorString(e));
  }
  if (s == DSP_OK) {
    qsort(ms, (size_t)replays, sizeof *ms, cmp_float);
    *median = replays % 2 ? ms[replays / 2] : 0.5f * (ms[replays / 2 - 1] + ms[replays / 2]);
  }
  for (int i = 0; i < made; i++) cudaEventDestroy(ev[i]);
  free(ev);
  free(ms);
  return s;
}

extern "C" dsp_status dsp_bench_cuda_head_time(dsp_cuda_head *h, int32_t batch, int sampling, int replays,
                                               float *ms_full, float *ms_tail) {
  if (!h || replays < 1) return dsp_fail(DSP_ERR_ARG, "cuda head time: no head or replays %d < 1", replays);
  sampling = sampling != 0;
  if (ms_full) DSP_TRY(time_runs(h, batch, sampling, NULL, replays, ms_full));
  if (ms_tail) {
    cudaGraphExec_t g = NULL;
    DSP_TRY(dsp_cuda_head_capture(h, batch, sampling, 1, &g));
    dsp_status s = time_runs(h, batch, sampling, g, replays, ms_tail);
    cudaGraphExecDestroy(g);
    DSP_TRY(s);
  }
  return DSP_OK;
}
