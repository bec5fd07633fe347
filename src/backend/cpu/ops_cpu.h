/* The CPU backend's operations (the ops table of backend/backend.h). */
#ifndef DSP_BACKEND_CPU_OPS_CPU_H
#define DSP_BACKEND_CPU_OPS_CPU_H
#include "backend/backend.h"

dsp_status dsp_cpu_op_alloc(dsp_backend *be, int dev, size_t bytes, void **out);
void dsp_cpu_op_release(dsp_backend *be, int dev, void *p);
/* upload and download alike: host to host */
dsp_status dsp_cpu_op_copy(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes);
dsp_status dsp_cpu_op_sync(dsp_backend *be, int dev);
dsp_status dsp_cpu_op_weight_create(dsp_backend *be, int dev, const dsp_tensor *host, int strict, dsp_weight **out);
void dsp_cpu_op_weight_free(dsp_backend *be, dsp_weight *w);
const char *dsp_cpu_op_weight_describe(const dsp_weight *w);
dsp_status dsp_cpu_op_gemm(dsp_backend *be, int dev, const dsp_tensor *a, const dsp_weight *w, dsp_tensor *c);
dsp_status dsp_cpu_op_markov_step(dsp_backend *be, int dev, const dsp_op_markov_args *a);

#endif
