/* Packing [N, K] bf16 weight rows into the kernel's panels (layout in
 * cpu/kernel.h). Done once at load time; bits are copied, never converted. */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "core/tensor.h"
#include "cpu/kernel.h"
#include "cpu/matmul.h"

dsp_status dsp_cpu_pack(const dsp_tensor *w, dsp_cpu_packed **out) {
  if (!w || !out) return dsp_fail(DSP_ERR_ARG, "cpu pack: NULL argument");
  *out = NULL;
  char sh[64];
  if (w->dtype != DSP_BF16)
    return dsp_fail(DSP_ERR_DTYPE, "cpu pack: weight is %s, expected BF16", dsp_dtype_name(w->dtype));
  if (w->ndim != 2 || w->shape[0] < 0 || w->shape[1] < 0)
    return dsp_fail(DSP_ERR_SHAPE, "cpu pack: weight %s, expected [N, K]", dsp_shape_str(w, sh, sizeof sh));
  if (w->shape[0] > INT32_MAX || w->shape[1] > INT32_MAX)
    return dsp_fail(DSP_ERR_SHAPE, "cpu pack: weight %s is too large (N and K must be < 2^31)",
                    dsp_shape_str(w, sh, sizeof sh));
  if (w->shape[0] * w->shape[1] > 0 && !w->data) return dsp_fail(DSP_ERR_ARG, "cpu pack: weight has no data");
  dsp_cpu_packed *p = calloc(1, sizeof *p);
  if (!p) return dsp_fail(DSP_ERR_NOMEM, "cpu pack: out of memory");
  p->n = w->shape[0];
  p->k = w->shape[1];
  p->npanels = (p->n + DSP_CPU_NR - 1) / DSP_CPU_NR;
  p->bytes = (size_t)p->npanels * (size_t)p->k * DSP_CPU_NR * sizeof(uint16_t);
  /* Slack of one k block after the panels: the sweep's prefetch of "the next
   * block" may reach up to one block past the last one. */
  p->data = aligned_alloc(64, p->bytes + (size_t)DSP_CPU_KC * DSP_CPU_NR * sizeof(uint16_t));
  if (!p->data) {
    size_t bytes = p->bytes;
    free(p);
    return dsp_fail(DSP_ERR_NOMEM, "cpu pack: cannot allocate %zu bytes of panels", bytes);
  }
  const int64_t n = p->n, k = p->k, rs = w->stride[0], cs = w->stride[1];
  const uint16_t *src = w->data;
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < p->npanels; j++) {
    uint16_t *dst = p->data + (size_t)j * (size_t)k * DSP_CPU_NR;
    for (int c = 0; c < DSP_CPU_NR; c++) {
      int64_t row = j * DSP_CPU_NR + c;
      int s = dsp_cpu_slot(c);
      if (row >= n) {
        for (int64_t kk = 0; kk < k; kk++) dst[kk * DSP_CPU_NR + s] = 0;
      } else {
        const uint16_t *r = src + row * rs;
        for (int64_t kk = 0; kk < k; kk++) dst[kk * DSP_CPU_NR + s] = r[kk * cs];
      }
    }
  }
  *out = p;
  return DSP_OK;
}

void dsp_cpu_packed_free(dsp_cpu_packed *p) {
  if (!p) return;
  free(p->data);
  free(p);
}

int64_t dsp_cpu_packed_n(const dsp_cpu_packed *p) { return p->n; }
int64_t dsp_cpu_packed_k(const dsp_cpu_packed *p) { return p->k; }
size_t dsp_cpu_packed_bytes(const dsp_cpu_packed *p) { return p->bytes; }
