/* One thread's walk over its weight panels with cache blocking (cpu/kernel.h). */
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/slices.h"

/* Whether A tile t and panel j run the AVX-512 BF16 kernels. */
static inline int dot_ok(const dsp_cpu_kernels *kn, const struct dsp_cpu_packed *w, int64_t t, int64_t j) {
  return kn->dot && kn->tguard[t] + w->guard[j] >= DSP_CPU_GUARD_MIN;
}

void dsp_cpu_sweep(const dsp_cpu_kernels *kn, int64_t m, const struct dsp_cpu_packed *w, int64_t j0, int64_t j1,
                   float *cbuf, dsp_cpu_epi_fn epi, void *ctx) {
  const int64_t k = w->k, tiles = dsp_cpu_mtiles(m);
  /* K slices: slice s runs k [s ks, (s + 1) ks) from +0 into its own part of cbuf, then the tree adds them */
  const int ns = w->slices > 1 ? w->slices : 1;
  const int64_t ks = k / ns;
  if (kn->fn2 && m <= DSP_CPU_MR2) { /* one tile of few rows: panels in pairs (the second tile past the first's rows) */
    const int mr = (int)m;
    const size_t part = 2 * DSP_CPU_MR2 * DSP_CPU_NR; /* one slice's pair of tiles */
    for (; j0 + 1 < j1; j0 += 2) {
      const uint16_t *b0 = dsp_cpu_panel(w, j0), *b1 = dsp_cpu_panel(w, j0 + 1);
      const int dot = kn->dot2 && dot_ok(kn, w, 0, j0) && dot_ok(kn, w, 0, j0 + 1);
      const dsp_cpu_tile2_fn f2 = dot ? kn->dot2 : kn->fn2;
      const float *a = dot ? kn->aq : kn->ap;
      for (int s = 0; s < ns; s++) {
        float *t0 = cbuf + (size_t)s * part, *t1 = t0 + DSP_CPU_MR2 * DSP_CPU_NR;
        const int64_t k0 = s * ks, k1 = ns > 1 ? k0 + ks : k;
        for (int64_t kb = k0; kb == k0 || kb < k1; kb += DSP_CPU_KC) {
          const int64_t kc = k1 - kb < DSP_CPU_KC ? k1 - kb : DSP_CPU_KC;
          /* the blocks read next: both panels' next k blocks, else the next pair's first */
          const void *p0 = kb + kc < k ? (const void *)(b0 + (kb + kc) * DSP_CPU_NR)
                           : j0 + 2 < w->npanels ? (const void *)dsp_cpu_panel(w, j0 + 2) : NULL;
          const void *p1 = kb + kc < k ? (const void *)(b1 + (kb + kc) * DSP_CPU_NR)
                           : j0 + 3 < w->npanels ? (const void *)dsp_cpu_panel(w, j0 + 3) : NULL;
          f2(a + kb * mr, mr, b0 + kb * DSP_CPU_NR, b1 + kb * DSP_CPU_NR, kc, t0, t1, kb > k0, p0, p1);
        }
      }
      dsp_cpu_slice_tree(cbuf, part, 0, ns, (size_t)mr * DSP_CPU_NR); /* only the rows' floats are written */
      dsp_cpu_slice_tree(cbuf + DSP_CPU_MR2 * DSP_CPU_NR, part, 0, ns, (size_t)mr * DSP_CPU_NR);
      epi(ctx, cbuf, 0, mr, j0), epi(ctx, cbuf + DSP_CPU_MR2 * DSP_CPU_NR, 0, mr, j0 + 1);
    }
  }
  const size_t part = dsp_cpu_sweep_floats(m);
  for (int64_t j = j0; j < j1; j++) {
    const uint16_t *bp = dsp_cpu_panel(w, j);
    for (int s = 0; s < ns; s++) {
      const int64_t k0 = s * ks, k1 = ns > 1 ? k0 + ks : k;
      /* K == 0 still makes one pass: every output is the empty sum, +0. */
      for (int64_t kb = k0; kb == k0 || kb < k1; kb += DSP_CPU_KC) {
        const int64_t kc = k1 - kb < DSP_CPU_KC ? k1 - kb : DSP_CPU_KC;
        for (int64_t t = 0; t < tiles; t++) {
          const int64_t m0 = t * DSP_CPU_MR;
          const int mr = (int)(m - m0 < DSP_CPU_MR ? m - m0 : DSP_CPU_MR);
          float *tile = cbuf + (size_t)s * part + t * DSP_CPU_MR * DSP_CPU_NR;
          const int dot = dot_ok(kn, w, t, j);
          /* The next block read from memory: this panel's next k block, else
           * the next panel's first (both follow this block in the packing). */
          const void *pf = t ? NULL : kb + kc < k ? (const void *)(bp + (kb + kc) * DSP_CPU_NR)
                                  : j + 1 < w->npanels ? (const void *)dsp_cpu_panel(w, j + 1) : NULL;
          (dot ? kn->dot : kn->fn)((dot ? kn->aq : kn->ap) + t * DSP_CPU_MR * k + kb * mr, mr, bp + kb * DSP_CPU_NR,
                                   kc, tile, kb > k0, pf);
          if (ns == 1 && kb + kc >= k) epi(ctx, tile, m0, mr, j);
        }
      }
    }
    if (ns > 1) {
      dsp_cpu_slice_tree(cbuf, part, 0, ns, (size_t)m * DSP_CPU_NR); /* the tiles' rows, contiguous */
      for (int64_t t = 0; t < tiles; t++) {
        const int64_t m0 = t * DSP_CPU_MR;
        epi(ctx, cbuf + t * DSP_CPU_MR * DSP_CPU_NR, m0, (int)(m - m0 < DSP_CPU_MR ? m - m0 : DSP_CPU_MR), j);
      }
    }
  }
}
