/* One thread's walk over its weight panels with cache blocking (cpu/kernel.h). */
#include "kernels/cpu/kernel.h"

void dsp_cpu_sweep(const float *ap, int64_t m, const struct dsp_cpu_packed *w, int64_t j0, int64_t j1,
                   dsp_cpu_tile_fn fn, dsp_cpu_tile2_fn fn2, float *cbuf, dsp_cpu_epi_fn epi, void *ctx) {
  const int64_t k = w->k, tiles = dsp_cpu_mtiles(m);
  if (fn2 && m <= DSP_CPU_MR2) { /* one tile of few rows: panels in pairs (the second tile past the first's rows) */
    const int mr = (int)m;
    float *t0 = cbuf, *t1 = cbuf + DSP_CPU_MR2 * DSP_CPU_NR;
    for (; j0 + 1 < j1; j0 += 2) {
      const uint16_t *b0 = dsp_cpu_panel(w, j0), *b1 = dsp_cpu_panel(w, j0 + 1);
      for (int64_t kb = 0; kb == 0 || kb < k; kb += DSP_CPU_KC) {
        const int64_t kc = k - kb < DSP_CPU_KC ? k - kb : DSP_CPU_KC;
        /* the blocks read next: both panels' next k blocks, else the next pair's first */
        const void *p0 = kb + kc < k ? (const void *)(b0 + (kb + kc) * DSP_CPU_NR)
                         : j0 + 2 < w->npanels ? (const void *)dsp_cpu_panel(w, j0 + 2) : NULL;
        const void *p1 = kb + kc < k ? (const void *)(b1 + (kb + kc) * DSP_CPU_NR)
                         : j0 + 3 < w->npanels ? (const void *)dsp_cpu_panel(w, j0 + 3) : NULL;
        fn2(ap + kb * mr, mr, b0 + kb * DSP_CPU_NR, b1 + kb * DSP_CPU_NR, kc, t0, t1, kb > 0, p0, p1);
        if (kb + kc >= k) epi(ctx, t0, 0, mr, j0), epi(ctx, t1, 0, mr, j0 + 1);
      }
    }
  }
  for (int64_t j = j0; j < j1; j++) {
    const uint16_t *bp = dsp_cpu_panel(w, j);
    /* K == 0 still makes one pass: every output is the empty sum, +0. */
    for (int64_t kb = 0; kb == 0 || kb < k; kb += DSP_CPU_KC) {
      const int64_t kc = k - kb < DSP_CPU_KC ? k - kb : DSP_CPU_KC;
      for (int64_t t = 0; t < tiles; t++) {
        const int64_t m0 = t * DSP_CPU_MR;
        const int mr = (int)(m - m0 < DSP_CPU_MR ? m - m0 : DSP_CPU_MR);
        float *tile = cbuf + t * DSP_CPU_MR * DSP_CPU_NR;
        /* The next block read from memory: this panel's next k block, else
         * the next panel's first (both follow this block in the packing). */
        const void *pf = t ? NULL : kb + kc < k ? (const void *)(bp + (kb + kc) * DSP_CPU_NR)
                                : j + 1 < w->npanels ? (const void *)dsp_cpu_panel(w, j + 1) : NULL;
        fn(ap + t * DSP_CPU_MR * k + kb * mr, mr, bp + kb * DSP_CPU_NR, kc, tile, kb > 0, pf);
        if (kb + kc >= k) epi(ctx, tile, m0, mr, j);
      }
    }
  }
}
