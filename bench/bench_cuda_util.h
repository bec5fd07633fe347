/* Checked CUDA, cuBLASLt and dspark calls for the CUDA benchmark programs
 * (bench_cuda_head, bench_tail, bench_lm): they end the program with file and line. */
#ifndef DSP_BENCH_CUDA_UTIL_H
#define DSP_BENCH_CUDA_UTIL_H
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "bench_util.h"

#define CK(call)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));  \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)
#define CKB(call)                                                                                   \
  do {                                                                                              \
    cublasStatus_t b_ = (call);                                                                     \
    if (b_ != CUBLAS_STATUS_SUCCESS) {                                                              \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cublasLtGetStatusString(b_));   \
      exit(1);                                                                                      \
    }                                                                                               \
  } while (0)
#define CKD(call)                                                                             \
  do {                                                                                        \
    dsp_status s_ = (call);                                                                   \
    if (s_ != DSP_OK) {                                                                       \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, dsp_error_message());     \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

#endif
