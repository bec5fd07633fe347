/* Weight rows into AMX tiles (layout in amx.h) and their guards. Done once at
 * load time; bits are copied, never converted. */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/kernel.h"

dsp_status dsp_cpu_amx_pack(const dsp_tensor *w, dsp_cpu_amx **out) {
  if (!w || !out) return dsp_fail(DSP_ERR_ARG, "cpu amx pack: NULL argument");
  *out = NULL;
  char sh[64];
  if (w->dtype != DSP_BF16)
    return dsp_fail(DSP_ERR_DTYPE, "cpu amx pack: weight is %s, expected BF16", dsp_dtype_name(w->dtype));
  if (w->ndim != 2 || w->shape[0] < 1 || w->shape[1] < 1 || w->shape[0] > INT32_MAX || w->shape[1] > INT32_MAX ||
      !w->data)
    return dsp_fail(DSP_ERR_SHAPE, "cpu amx pack: weight %s, expected a non-empty [N, K] below 2^31",
                    dsp_shape_str(w, sh, sizeof sh));
  dsp_cpu_amx *p = calloc(1, sizeof *p);
  if (!p) return dsp_fail(DSP_ERR_NOMEM, "cpu amx pack: out of memory");
  p->n = w->shape[0];
  p->k = w->shape[1];
  p->slices = 1;
  p->nb = (p->n + 15) / 16;
  p->kb = (p->k + 31) / 32;
  p->bytes = (size_t)p->nb * (size_t)p->kb * 1024;
  p->data = aligned_alloc(64, p->bytes);
  p->guard = malloc((size_t)p->n * sizeof *p->guard);
  if (!p->data || !p->guard) {
    const long long n = (long long)p->n, k = (long long)p->k;
    dsp_cpu_amx_free(p);
    return dsp_fail(DSP_ERR_NOMEM, "cpu amx pack: cannot allocate %lld x %lld tiles", n, k);
  }
  const uint16_t *src = w->data;
  const int64_t rs = w->stride[0], cs = w->stride[1], n = p->n, k = p->k, kb = p->kb;
  for (int64_t j = 0; j < p->nb; j++)
    for (int64_t t = 0; t < kb; t++) {
      uint16_t *tile = p->data + dsp_cpu_amx_tile(p, j, t);
      for (int pr = 0; pr < 16; pr++)
        for (int c = 0; c < 16; c++)
          for (int e = 0; e < 2; e++) {
            const int64_t row = j * 16 + c, kk = t * 32 + 2 * pr + e;
            tile[pr * 32 + c * 2 + e] = row < n && kk < k ? src[row * rs + kk * cs] : 0;
          }
    }
  p->guard_min = 255;
  for (int64_t r = 0; r < n; r++) {
    p->guard[r] = dsp_cpu_row_guard(src + r * rs, k, cs);
    if (p->guard[r] < p->guard_min) p->guard_min = p->guard[r];
  }
  *out = p;
  return DSP_OK;
}

dsp_status dsp_cpu_amx_slice(dsp_cpu_amx *p, int32_t slices) {
  if (slices < 1 || slices > DSP_CPU_AMX_SLICES || p->k % ((int64_t)slices * 32))
    return dsp_fail(DSP_ERR_SHAPE, "cpu amx: K = %lld does not split into %d slices of a multiple of 32 (at most %d)",
                    (long long)p->k, (int)slices, DSP_CPU_AMX_SLICES);
  int16_t *g = malloc((size_t)slices * (size_t)p->n * sizeof *g);
  uint16_t *row = malloc((size_t)p->k * sizeof *row);
  if (!g || !row) {
    free(g);
    free(row);
    return dsp_fail(DSP_ERR_NOMEM, "cpu amx: out of memory");
  }
  const int64_t ks = p->k / slices;
  p->guard_min = 255;
  for (int64_t n = 0; n < p->n; n++) {
    for (int64_t k = 0; k < p->k; k++) row[k] = dsp_cpu_amx_at(p, n, k);
    for (int s = 0; s < slices; s++) {
      const int16_t v = dsp_cpu_row_guard(row + s * ks, ks, 1);
      g[s * p->n + n] = v;
      if (v < p->guard_min) p->guard_min = v;
    }
  }
  free(row);
  free(p->guard);
  p->guard = g;
  p->slices = slices;
  return DSP_OK;
}

void dsp_cpu_amx_unpack(const dsp_cpu_amx *p, uint16_t *dst) {
  for (int64_t n = 0; n < p->n; n++)
    for (int64_t k = 0; k < p->k; k++) dst[n * p->k + k] = dsp_cpu_amx_at(p, n, k);
}

void dsp_cpu_amx_free(dsp_cpu_amx *p) {
  if (!p) return;
  free(p->data);
  free(p->guard);
  free(p);
}
