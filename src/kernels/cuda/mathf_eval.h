/* The device's elementary functions on host inputs, for the tests that pin
 * them to the CPU's bit for bit (tests/test_cuda_mathf.c): dsp_dev_expf
 * (kernels/cuda/common/expf.cuh) and dsp_log1pf (core/log1pf.h). */
#ifndef DSP_KERNELS_CUDA_MATHF_EVAL_H
#define DSP_KERNELS_CUDA_MATHF_EVAL_H
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* exp_out[i] = expf(x[i]), log1p_out[i] = log1pf(x[i]) on device 0; host arrays of n. */
dsp_status dsp_cuda_mathf_eval(const float *x, int64_t n, float *exp_out, float *log1p_out);

#ifdef __cplusplus
}
#endif
#endif
