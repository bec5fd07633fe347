/* Carving one allocation into named buffers: the total is computed from the
 * same entries that are carved, so the two cannot drift apart, and every size
 * product is checked for overflow before anything is allocated. */
#ifndef DSP_CORE_LAYOUT_H
#define DSP_CORE_LAYOUT_H
#include <stddef.h>
#include <stdint.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DSP_LAYOUT_ALIGN 64

typedef struct {
  void **dst;   /* where the buffer's address goes */
  size_t bytes; /* 0: *dst = NULL */
} dsp_layout_entry;

/* bytes = a * b * c with overflow refused (DSP_ERR_RANGE naming `what`). */
dsp_status dsp_layout_bytes(int64_t a, int64_t b, int64_t c, size_t elem, const char *what, size_t *bytes);
/* Sum of the entries, each rounded up to DSP_LAYOUT_ALIGN; DSP_ERR_RANGE on overflow. */
dsp_status dsp_layout_total(const dsp_layout_entry *e, int n, size_t *total);
/* p rounded up to DSP_LAYOUT_ALIGN (a caller's buffer of dsp_layout_total +
 * DSP_LAYOUT_ALIGN - 1 bytes holds the layout from there). */
static inline void *dsp_layout_align(void *p) {
  return (void *)(((uintptr_t)p + DSP_LAYOUT_ALIGN - 1) & ~(uintptr_t)(DSP_LAYOUT_ALIGN - 1));
}
/* Hands out the entries from base (DSP_LAYOUT_ALIGN-aligned, dsp_layout_total bytes). */
void dsp_layout_carve(void *base, const dsp_layout_entry *e, int n);

#ifdef __cplusplus
}
#endif
#endif
