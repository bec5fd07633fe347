/* The CPU backend's operations: host memory, packed weights, the CPU kernels. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops_cpu.h"
#include "core/status.h"
#include "kernels/cpu/markov_step.h"
#include "kernels/cpu/matmul.h"

struct dsp_weight {
  dsp_cpu_packed *p;
  char desc[64];
};

dsp_status dsp_cpu_op_alloc(dsp_backend *be, int dev, size_t bytes, void **out) {
  (void)be, (void)dev;
  size_t n = (bytes + 63) / 64 * 64;
  *out = aligned_alloc(64, n ? n : 64);
  if (!*out) return dsp_fail(DSP_ERR_NOMEM, "cpu: cannot allocate %zu bytes", bytes);
  return DSP_OK;
}

void dsp_cpu_op_release(dsp_backend *be, int dev, void *p) {
  (void)be, (void)dev;
  free(p);
}

dsp_status dsp_cpu_op_copy(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes) {
  (void)be, (void)dev;
  memmove(dst, src, bytes);
  return DSP_OK;
}

dsp_status dsp_cpu_op_sync(dsp_backend *be, int dev) {
  (void)be, (void)dev;
  return DSP_OK;
}

dsp_status dsp_cpu_op_weight_create(dsp_backend *be, int dev, const dsp_tensor *host, int strict, dsp_weight **out) {
  (void)be, (void)dev, (void)strict; /* the CPU chain is the strict order */
  dsp_weight *w = calloc(1, sizeof *w);
  if (!w) return dsp_fail(DSP_ERR_NOMEM, "cpu: out of memory");
  dsp_status s = dsp_cpu_pack(host, &w->p);
  if (s != DSP_OK) {
    free(w);
    return s;
  }
  snprintf(w->desc, sizeof w->desc, "%s panels (fmaf chain)", dsp_cpu_kernel_name());
  *out = w;
  return DSP_OK;
}

void dsp_cpu_op_weight_free(dsp_backend *be, dsp_weight *w) {
  (void)be;
  dsp_cpu_packed_free(w->p);
  free(w);
}

const char *dsp_cpu_op_weight_describe(const dsp_weight *w) { return w->desc; }

dsp_status dsp_cpu_op_gemm(dsp_backend *be, int dev, const dsp_tensor *a, const dsp_weight *w, dsp_tensor *c) {
  (void)be, (void)dev;
  return dsp_cpu_matmul_nt(a, w->p, c, 0);
}

dsp_status dsp_cpu_op_markov_step(dsp_backend *be, int dev, const dsp_op_markov_args *a) {
  (void)be, (void)dev;
  dsp_cpu_markov_args m = {.e = a->e, .w2 = a->w2->p, .base = a->base, .fp32_add = a->fp32_add, .id0 = a->id0,
                           .n_valid = a->n_valid, .best_val = a->best_val, .best_id = a->best_id,
                           .logits = a->logits};
  return dsp_cpu_markov_step(&m, 0);
}
