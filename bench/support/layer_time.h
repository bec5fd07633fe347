/* A decoder layer's work outside its attention at Qwen3-8B's shapes, through the backend's ops and replayed as a
 * graph as the model captures it: with the small kernels between the products (the residual adds with their
 * RMSNorms, silu_mul) and with the four products alone. The difference is what those kernels cost in a replay,
 * where the programmatic launches overlap them with their neighbours (measurement only). */
#ifndef DSP_BENCH_SUPPORT_LAYER_TIME_H
#define DSP_BENCH_SUPPORT_LAYER_TIME_H

#include <stdint.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  double full_us;     /* a layer: o, add_rmsnorm, gate/up, silu_mul, down, add_rmsnorm, qkv */
  double products_us; /* a layer: the four products alone, each reading the one before */
  double bytes;       /* a layer's weight bytes */
} dsp_bench_layer_times;

/* `layers` layers of distinct weights (so that none stays in L2) for m token rows, each form captured once and
 * replayed reps times; microseconds a layer. Needs a backend with graphs. */
dsp_status dsp_bench_layer_parts(dsp_backend *be, int64_t m, int layers, int reps, dsp_bench_layer_times *t);

#ifdef __cplusplus
}
#endif
#endif
