/* A bump arena for per-step buffers: sized once when a step is planned, so a
 * step allocates nothing after warm-up. Allocations are 64-byte aligned. */
#ifndef DSP_CORE_ARENA_H
#define DSP_CORE_ARENA_H
#include <stddef.h>

#include "dspark.h"

typedef struct dsp_arena dsp_arena;

dsp_status dsp_arena_create(size_t capacity, dsp_arena **out);
void dsp_arena_free(dsp_arena *a);
/* NULL (and an error message) when the arena is full. */
void *dsp_arena_alloc(dsp_arena *a, size_t bytes);
void dsp_arena_reset(dsp_arena *a);
size_t dsp_arena_used(const dsp_arena *a);
size_t dsp_arena_high_water(const dsp_arena *a);
size_t dsp_arena_capacity(const dsp_arena *a);

#endif
