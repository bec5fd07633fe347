/* AMX's availability (amx_detect.c). */
#ifndef DSP_KERNELS_CPU_AMX_DETECT_H
#define DSP_KERNELS_CPU_AMX_DETECT_H

/* 1 where AMX products can run here (CPU features, the OS's permission for
 * tile data, granted once per process). */
int dsp_cpu_amx_usable(void);
/* 1 where AMX is usable and DSPARK_CPU_KERNEL is auto or amx. */
int dsp_cpu_amx_chosen(void);

#endif
