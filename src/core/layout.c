#include "core/layout.h"

#include "core/status.h"

dsp_status dsp_layout_bytes(int64_t a, int64_t b, int64_t c, size_t elem, const char *what, size_t *bytes) {
  if (a < 0 || b < 0 || c < 0)
    return dsp_fail(DSP_ERR_RANGE, "%s: negative size (%lld x %lld x %lld)", what, (long long)a, (long long)b,
                    (long long)c);
  uint64_t n = (uint64_t)a;
  const uint64_t f[3] = {(uint64_t)b, (uint64_t)c, (uint64_t)elem};
  for (int i = 0; i < 3; i++) {
    if (f[i] && n > (uint64_t)(SIZE_MAX / 2) / f[i])
      return dsp_fail(DSP_ERR_RANGE, "%s: %lld x %lld x %lld elements of %zu bytes overflow the address space", what,
                      (long long)a, (long long)b, (long long)c, elem);
    n *= f[i];
  }
  *bytes = (size_t)n;
  return DSP_OK;
}

static size_t round_up(size_t x) { return (x + DSP_LAYOUT_ALIGN - 1) / DSP_LAYOUT_ALIGN * DSP_LAYOUT_ALIGN; }

dsp_status dsp_layout_total(const dsp_layout_entry *e, int n, size_t *total) {
  size_t t = 0;
  for (int i = 0; i < n; i++) {
    if (e[i].bytes > SIZE_MAX / 2 || t > SIZE_MAX / 2 - round_up(e[i].bytes))
      return dsp_fail(DSP_ERR_RANGE, "buffer layout: %d buffers overflow the address space", n);
    t += round_up(e[i].bytes);
  }
  *total = t;
  return DSP_OK;
}

void dsp_layout_carve(void *base, const dsp_layout_entry *e, int n) {
  char *p = base;
  for (int i = 0; i < n; i++) {
    *e[i].dst = e[i].bytes ? p : NULL;
    p += round_up(e[i].bytes);
  }
}
