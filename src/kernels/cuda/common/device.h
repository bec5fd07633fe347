/* The CUDA devices this process sees (C and CUDA C++). */
#ifndef DSP_KERNELS_CUDA_COMMON_DEVICE_H
#define DSP_KERNELS_CUDA_COMMON_DEVICE_H

#ifdef __cplusplus
extern "C" {
#endif

/* CUDA devices visible to this process; 0 when there is no driver or GPU. */
int dsp_cuda_device_count(void);

#ifdef __cplusplus
}
#endif
#endif
