#include "core/arena.h"

#include <stdlib.h>
#include <string.h>

#include "core/status.h"

#define DSP_ARENA_ALIGN 64

struct dsp_arena {
  char *base;
  size_t cap, used, high;
};

dsp_status dsp_arena_create(size_t capacity, dsp_arena **out) {
  *out = NULL;
  dsp_arena *a = calloc(1, sizeof *a);
  if (!a) return dsp_fail(DSP_ERR_NOMEM, "arena: cannot allocate the handle");
  size_t cap = (capacity + DSP_ARENA_ALIGN - 1) / DSP_ARENA_ALIGN * DSP_ARENA_ALIGN;
  if (cap == 0) cap = DSP_ARENA_ALIGN;
  a->base = aligned_alloc(DSP_ARENA_ALIGN, cap);
  if (!a->base) {
    free(a);
    return dsp_fail(DSP_ERR_NOMEM, "arena: cannot allocate %zu bytes", cap);
  }
  a->cap = cap;
  *out = a;
  return DSP_OK;
}

void dsp_arena_free(dsp_arena *a) {
  if (!a) return;
  free(a->base);
  free(a);
}

void *dsp_arena_alloc(dsp_arena *a, size_t bytes) {
  size_t need = (bytes + DSP_ARENA_ALIGN - 1) / DSP_ARENA_ALIGN * DSP_ARENA_ALIGN;
  if (need < bytes || need > a->cap - a->used) {
    dsp_fail(DSP_ERR_NOMEM, "arena: %zu bytes requested, %zu of %zu free", bytes, a->cap - a->used, a->cap);
    return NULL;
  }
  void *p = a->base + a->used;
  a->used += need;
  if (a->used > a->high) a->high = a->used;
  return p;
}

void dsp_arena_reset(dsp_arena *a) { a->used = 0; }
size_t dsp_arena_used(const dsp_arena *a) { return a->used; }
size_t dsp_arena_high_water(const dsp_arena *a) { return a->high; }
size_t dsp_arena_capacity(const dsp_arena *a) { return a->cap; }
