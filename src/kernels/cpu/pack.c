/* Packing [N, K] bf16 weight rows into the kernel's panels (layout in
 * cpu/kernel.h). Done once at load time; bits are copied, never converted. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/matmul.h"

/* Panels are streamed from memory once per product: large ones go on 2 MiB
 * pages (transparent huge pages, where the kernel offers them) so the stream
 * does not miss the TLB every 4 KiB. A slack of one k block follows the
 * panels: the sweep's prefetch of "the next block" may reach one block past
 * the last. */
static uint16_t *panels_alloc(size_t bytes) {
  const size_t huge = (size_t)2 << 20;
  size_t n = bytes + (size_t)DSP_CPU_KC * DSP_CPU_NR * sizeof(uint16_t);
  if (n < huge) return aligned_alloc(64, (n + 63) & ~(size_t)63);
  n = (n + huge - 1) & ~(huge - 1);
  void *p = aligned_alloc(huge, n);
#ifdef MADV_HUGEPAGE
  if (p) (void)madvise(p, n, MADV_HUGEPAGE); /* advice only: fine when refused */
#endif
  return p;
}

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
  p->slices = 1;
  p->npanels = (p->n + DSP_CPU_NR - 1) / DSP_CPU_NR;
  p->bytes = (size_t)p->npanels * (size_t)p->k * DSP_CPU_NR * sizeof(uint16_t);
  p->data = panels_alloc(p->bytes);
  p->guard = malloc((size_t)(p->npanels ? p->npanels : 1) * sizeof *p->guard);
  if (!p->data || !p->guard) {
    size_t bytes = p->bytes;
    dsp_cpu_packed_free(p);
    return dsp_fail(DSP_ERR_NOMEM, "cpu pack: cannot allocate %zu bytes of panels", bytes);
  }
  const int64_t n = p->n, k = p->k, rs = w->stride[0], cs = w->stride[1];
  const uint16_t *src = w->data;
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < p->npanels; j++) {
    uint16_t *dst = p->data + (size_t)j * (size_t)k * DSP_CPU_NR;
    int16_t g = 255;
    for (int c = 0; c < DSP_CPU_NR; c++) {
      int64_t row = j * DSP_CPU_NR + c;
      int s = dsp_cpu_slot(c);
      if (row >= n) {
        for (int64_t kk = 0; kk < k; kk++) dst[kk * DSP_CPU_NR + s] = 0;
      } else {
        const uint16_t *r = src + row * rs;
        for (int64_t kk = 0; kk < k; kk++) dst[kk * DSP_CPU_NR + s] = r[kk * cs];
        const int16_t rg = dsp_cpu_row_guard(r, k, cs);
        g = rg < g ? rg : g;
      }
    }
    p->guard[j] = g;
  }
  p->guard_min = 255;
  for (int64_t j = 0; j < p->npanels; j++) p->guard_min = p->guard[j] < p->guard_min ? p->guard[j] : p->guard_min;
  *out = p;
  return DSP_OK;
}

void dsp_cpu_packed_free(dsp_cpu_packed *p) {
  if (!p) return;
  free(p->data);
  free(p->guard);
  free(p);
}

int16_t dsp_cpu_row_guard(const uint16_t *x, int64_t n, int64_t s) {
  return s == 1 && dsp_cpu_isa_supported(DSP_CPU_ISA_AVX512) ? dsp_cpu_row_guard_avx512(x, n)
                                                              : dsp_cpu_row_guard_scalar(x, n, s);
}

dsp_status dsp_cpu_packed_slice(dsp_cpu_packed *p, int32_t slices) {
  if (slices < 1 || p->k % ((int64_t)slices * 32))
    return dsp_fail(DSP_ERR_SHAPE, "cpu pack: K = %lld does not split into %d slices of a multiple of 32",
                    (long long)p->k, (int)slices);
  p->slices = slices;
  return DSP_OK;
}

int64_t dsp_cpu_packed_n(const dsp_cpu_packed *p) { return p->n; }
int64_t dsp_cpu_packed_k(const dsp_cpu_packed *p) { return p->k; }
size_t dsp_cpu_packed_bytes(const dsp_cpu_packed *p) { return p->bytes; }
