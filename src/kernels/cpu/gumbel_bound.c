/* The noise's bound by word (gumbel_bound.h): a grid t_k = LO + k / 8 and, per
 * step, the first word whose noise reaches it, found by bisection over the
 * noise itself. A word below that first word has noise below t_k; the bound
 * returned is one step higher still, so that a local wobble of libm's log by
 * an ulp (far below a step) cannot matter. */
#include "kernels/cpu/gumbel_bound.h"

#include <pthread.h>

#include "core/philox.h"

enum { STEPS = (int)((DSP_GUMBEL_HI - DSP_GUMBEL_LO) * 8.0f) + 1 };
static uint64_t g_first[STEPS]; /* first word with noise >= t_k; 2^32 where none */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static float grid(int k) { return DSP_GUMBEL_LO + (float)k * 0.125f; }

static void build(void) {
  for (int k = 0; k < STEPS; k++) {
    uint64_t lo = 0, hi = 1ull << 32; /* the answer lies in [lo, hi] */
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (dsp_gumbel_of_word((uint32_t)mid) >= grid(k)) hi = mid;
      else lo = mid + 1;
    }
    g_first[k] = lo;
  }
}

float dsp_gumbel_bound(uint32_t w) {
  pthread_once(&g_once, build);
  int lo = 0, hi = STEPS; /* the first k with w < g_first[k] */
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if ((uint64_t)w < g_first[mid]) hi = mid;
    else lo = mid + 1;
  }
  return lo + 1 < STEPS ? grid(lo + 1) : DSP_GUMBEL_HI;
}
