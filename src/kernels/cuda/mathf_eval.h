/* The device's elementary functions on host inputs, for the tests that pin
 * them to the CPU's bit for bit (tests/test_cuda_mathf.c): dsp_dev_expf
 * (kernels/cuda/common/expf.cuh) and dsp_log1pf (core/log1pf.h); and the
 * hardware bf16 rounding against the integer one. */
#ifndef DSP_KERNELS_CUDA_MATHF_EVAL_H
#define DSP_KERNELS_CUDA_MATHF_EVAL_H
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* exp_out[i] = expf(x[i]), log1p_out[i] = log1pf(x[i]) on device 0; host arrays of n. */
dsp_status dsp_cuda_mathf_eval(const float *x, int64_t n, float *exp_out, float *log1p_out);
/* Over every fp32 input but NaNs, how many times the hardware's bf16 rounding (devmath.cuh, one and two values
   a conversion) differs from the integer rounding, on device 0. */
dsp_status dsp_cuda_bf16_cvt_check(unsigned long long *mismatches);
/* dsp_dev_div_fast against __fdiv_rn: every a of its range (zero and each normal |a| in [2^-90, 2^10], both
   signs) over nb divisors b (host array); the quotients it calls fast and those that differ, counted. */
dsp_status dsp_cuda_div_check(const float *b, int nb, unsigned long long *fast, unsigned long long *mismatches);

#ifdef __cplusplus
}
#endif
#endif
