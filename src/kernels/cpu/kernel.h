/* Internals shared by the CPU product (matmul.c) and the fused Markov step
 * (markov_step.c): the packed weight layout, the widened-A layout, the per-ISA
 * tile kernels and their epilogues, run-time dispatch and per-thread scratch.
 *
 * THE ACCUMULATION ORDER (contract 2, normative). For output element (m, n):
 *     acc = +0.0f;
 *     for k = 0 .. K-1 in order:  acc = fmaf(a[m][k], w[n][k], acc);   (one fused
 *                                 multiply-add in fp32, round to nearest even)
 *     result = bf16_rne(acc)      (or acc itself where the caller asks for fp32)
 * Every path (AVX-512F, AVX2+FMA, scalar with C99 fmaf) runs exactly this chain
 * per output; vectors run across n (one output per lane), never across k, so
 * results are bit-identical across paths, across any split of N (shards), any M
 * (batch, bucket padding) and any thread count. Subnormals are kept (the
 * default MXCSR: no FTZ/DAZ). Every NaN a kernel writes is the canonical quiet
 * NaN (+, 0x7FC00000 / bf16 0x7FC0): which operand's payload an instruction
 * propagates depends on how the compiler ordered the operands, so only the
 * canonical form can be the same on every path.
 *
 * The AVX-512 BF16 path (kernel_bf16dot.c) runs the same chain two k steps
 * per vdpbf16ps: that instruction's two roundings are two fmaf, high bf16
 * halves first, so k step 2p goes in the high halves (checked bit for bit at
 * start-up, dsp_cpu_dot_check; without a pass the path is not offered). It
 * reads subnormal inputs as zero and flushes subnormal results, so it runs
 * only where the rows' guards (below) rule both out; the rest take the fmaf
 * kernels on the same panels. AMX (tdpbf16ps) adds 32 products in its own
 * order: a separate, opt-in product with its own contract (amx.h). */
#ifndef DSP_CPU_KERNEL_H
#define DSP_CPU_KERNEL_H
#include <stddef.h>
#include <stdint.h>

#include "dspark.h"

/* Rows of A per tile; A is widened to fp32 tile by tile, laid out [K][mr] so
 * the mr values a k step broadcasts are adjacent. */
#define DSP_CPU_MR 12
/* Columns (weight rows) per panel. A panel holds 32 weight rows as one 64-byte
 * line per k: slot 2j = row j, slot 2j+1 = row 16+j (j < 16), so one 512-bit
 * load gives rows 0..15 as (x << 16) and rows 16..31 as (x & 0xFFFF0000). */
#define DSP_CPU_NR 32

struct dsp_cpu_packed {
  int64_t n, k;     /* the weight's [N, K] */
  int64_t npanels;  /* ceil(N / 32); rows >= N are zero */
  uint16_t *data;   /* [npanels][K][32] bf16, 64-byte aligned */
  int16_t *guard;   /* [npanels]: the smallest row guard of each panel (dsp_cpu_row_guard) */
  int16_t guard_min;
  size_t bytes;
  int32_t slices;   /* K slices summed by slices.h's tree (1: one chain over K) */
};

/* The guard of n bf16 values at stride s: the smallest biased exponent of the
 * nonzero ones (255 when all are zero), or -1024 when one is an inf, a NaN or a
 * subnormal. Where an A row's and a weight row's guards sum to at least
 * DSP_CPU_GUARD_MIN, every product of the two rows is a multiple of 2^-126
 * (2^(ea + ew - 268)) and so is every partial sum of their chain: none is
 * subnormal, so instructions that flush subnormal inputs and results
 * (vdpbf16ps, tdpbf16ps) see none. */
#define DSP_CPU_GUARD_MIN 142
int16_t dsp_cpu_row_guard(const uint16_t *x, int64_t n, int64_t s);
/* inline: the AVX-512 guard's tail takes it, below the guard's dispatch (pack.c) */
static inline int16_t dsp_cpu_row_guard_scalar(const uint16_t *x, int64_t n, int64_t s) {
  int g = 255;
  for (int64_t i = 0; i < n; i++) {
    const unsigned v = x[i * s], e = (v >> 7) & 0xFFu;
    if (e == 0xFFu || (e == 0 && (v & 0x7Fu))) return -1024; /* inf, NaN, subnormal */
    if ((v & 0x7FFFu) && (int)e < g) g = (int)e;
  }
  return (int16_t)g;
}
int16_t dsp_cpu_row_guard_avx512(const uint16_t *x, int64_t n); /* s == 1, AVX-512BW */

static inline const uint16_t *dsp_cpu_panel(const struct dsp_cpu_packed *p, int64_t j) {
  return p->data + (size_t)j * (size_t)p->k * DSP_CPU_NR;
}

/* Panel slot of column c (0..31) in a k line. */
static inline int dsp_cpu_slot(int c) { return c < 16 ? 2 * c : 2 * (c - 16) + 1; }

/* The portable loops of the scalar paths, also compiled for FMA and chosen at
 * load time: without -mfma every fmaf is a libm call (same bits either way). */
#define DSP_FMA_CLONES __attribute__((target_clones("fma", "default")))

typedef enum { DSP_CPU_ISA_SCALAR = 0, DSP_CPU_ISA_AVX2, DSP_CPU_ISA_AVX512 } dsp_cpu_isa;
dsp_cpu_isa dsp_cpu_isa_current(void);
int dsp_cpu_isa_supported(dsp_cpu_isa isa);

/* The calling thread's scratch, grown to at least `bytes` (64-byte aligned);
 * kept for the thread's lifetime so steady-state calls allocate nothing. */
void *dsp_cpu_scratch(size_t bytes);
/* nthreads <= 0: DSPARK_THREADS, and 0 there: omp_get_max_threads(). */
int dsp_cpu_threads_resolve(int nthreads);

/* Widened A: tiles [0, ceil(M/MR)), tile t at out + t*MR*K holding rows
 * t*MR .. t*MR+mr-1 as [K][mr] fp32. */
static inline int64_t dsp_cpu_mtiles(int64_t m) { return (m + DSP_CPU_MR - 1) / DSP_CPU_MR; }
void dsp_cpu_widen_tile(const dsp_tensor *a, int64_t t, float *out);

/* A tile kernel: the chain of the comment above over k steps [k0, k0 + kc) for
 * A row i < mr of a tile and panel column c < 32. ap is the tile's [K][mr]
 * block at k0, bp the panel's [K][32] block at k0. load == 0 starts from +0;
 * load == 1 continues from the fp32 partial sums in tile (an exact spill: the
 * chain is the same as one pass over all k). Results go to tile[i*32 + c].
 * pf: one 64-byte line per k step to prefetch into L2 (the weight block the
 * sweep reads next), or NULL. */
typedef void (*dsp_cpu_tile_fn)(const float *ap, int mr, const uint16_t *bp, int64_t kc, float *tile, int load,
                                const void *pf);
void dsp_cpu_tile_scalar(const float *ap, int mr, const uint16_t *bp, int64_t kc, float *tile, int load,
                         const void *pf);
void dsp_cpu_tile_avx2(const float *ap, int mr, const uint16_t *bp, int64_t kc, float *tile, int load, const void *pf);
void dsp_cpu_tile_avx512(const float *ap, int mr, const uint16_t *bp, int64_t kc, float *tile, int load,
                         const void *pf);
dsp_cpu_tile_fn dsp_cpu_tile_for(dsp_cpu_isa isa);
/* The same over two panels at once (bp0, bp1 into tile0, tile1), for mr <= DSP_CPU_MR2: at few rows a single
 * panel's 2 mr chains cannot hide the multiply-add latency, two panels' 4 mr can. Each output's chain is the
 * one above. pf0, pf1: the lines to prefetch per k step, or NULL. NULL where the ISA has none. */
#define DSP_CPU_MR2 4
typedef void (*dsp_cpu_tile2_fn)(const float *ap, int mr, const uint16_t *bp0, const uint16_t *bp1, int64_t kc,
                                 float *tile0, float *tile1, int load, const void *pf0, const void *pf1);
void dsp_cpu_tile2_avx2(const float *ap, int mr, const uint16_t *bp0, const uint16_t *bp1, int64_t kc, float *tile0,
                        float *tile1, int load, const void *pf0, const void *pf1);
void dsp_cpu_tile2_avx512(const float *ap, int mr, const uint16_t *bp0, const uint16_t *bp1, int64_t kc, float *tile0,
                          float *tile1, int load, const void *pf0, const void *pf1);
dsp_cpu_tile2_fn dsp_cpu_tile2_for(dsp_cpu_isa isa);

/* prefix##mr(...) for a tile of mr rows (1 .. DSP_CPU_MR; more runs prefix##12), and prefix##mr for a panel
 * pair's mr (1 .. DSP_CPU_MR2): a path's kernels are compiled per row count, so their loops unroll. */
#define DSP_CPU_MR_CALL(prefix, mr, ...)                                                                  \
  switch (mr) {                                                                                           \
    case 1: prefix##1(__VA_ARGS__); break;                                                                \
    case 2: prefix##2(__VA_ARGS__); break;                                                                \
    case 3: prefix##3(__VA_ARGS__); break;                                                                \
    case 4: prefix##4(__VA_ARGS__); break;                                                                \
    case 5: prefix##5(__VA_ARGS__); break;                                                                \
    case 6: prefix##6(__VA_ARGS__); break;                                                                \
    case 7: prefix##7(__VA_ARGS__); break;                                                                \
    case 8: prefix##8(__VA_ARGS__); break;                                                                \
    case 9: prefix##9(__VA_ARGS__); break;                                                                \
    case 10: prefix##10(__VA_ARGS__); break;                                                              \
    case 11: prefix##11(__VA_ARGS__); break;                                                              \
    default: prefix##12(__VA_ARGS__); break;                                                              \
  }
#define DSP_CPU_MR2_CALL(prefix, mr, ...)                                                                 \
  switch (mr) {                                                                                           \
    case 1: prefix##1(__VA_ARGS__); break;                                                                \
    case 2: prefix##2(__VA_ARGS__); break;                                                                \
    case 3: prefix##3(__VA_ARGS__); break;                                                                \
    default: prefix##4(__VA_ARGS__); break;                                                               \
  }

/* The AVX-512 BF16 kernels (kernel_bf16dot.c): the tile kernels' contract with ap holding, instead of widened
 * A, the pair words of dsp_cpu_pair_tile (as uint32_t). Used only where dsp_cpu_dot_current() and the guards
 * allow. */
void dsp_cpu_tile_dot(const float *ap, int mr, const uint16_t *bp, int64_t kc, float *tile, int load, const void *pf);
void dsp_cpu_tile2_dot(const float *ap, int mr, const uint16_t *bp0, const uint16_t *bp1, int64_t kc, float *tile0,
                       float *tile1, int load, const void *pf0, const void *pf1);
/* Tile t of a as pair words (k 2p in the high half, 2p + 1 in the low, 0 past K) at out[2 p mr + i], the
 * offsets of dsp_cpu_widen_tile's floats, and the smallest guard of its rows in *guard. */
void dsp_cpu_pair_tile(const dsp_tensor *a, int64_t t, uint32_t *out, int16_t *guard);
/* 1 where vdpbf16ps gave two fmaf's bits on every check input (run once, by dispatch). */
int dsp_cpu_dot_check(void);
/* 1 where products run the AVX-512 BF16 kernels: the CPU has them, the check passed, and DSPARK_CPU_KERNEL is
 * auto, avx512bf16 or amx (or dsp_cpu_kernel_force chose them). */
int dsp_cpu_dot_current(void);

/* Cache blocking of one thread's panels [j0, j1): per panel, k blocks of
 * DSP_CPU_KC steps, then all A tiles, so a tile's A block (12 x 256 fp32) and
 * the panel's block (256 x 32 bf16) sit in L1 together; partial sums are
 * spilled to cbuf between k blocks (exact: fp32 in, fp32 out, the chain goes
 * on unchanged). While the first tile runs over a block, the kernel prefetches
 * the next block the sweep will read (blocks are contiguous in the packing),
 * which is what keeps the weight-streaming shapes (M = 1, the Markov step) fed.
 * Measured here: 256 beat no blocking, 128 and 512; grouping several panels
 * per A block and pre-widening panel blocks to fp32 did not pay. With fn2 (or
 * NULL) and a single tile of at most DSP_CPU_MR2 rows, panels go in pairs.
 * Each finished (tile, panel) goes to epi, the panels of a row in increasing
 * order. cbuf holds dsp_cpu_sweep_floats(m) floats, 64-byte aligned. */
#define DSP_CPU_KC 256
typedef void (*dsp_cpu_epi_fn)(void *ctx, const float *tile, int64_t m0, int mr, int64_t j);
static inline size_t dsp_cpu_sweep_floats(int64_t m) {
  return (size_t)((m + DSP_CPU_MR - 1) / DSP_CPU_MR) * DSP_CPU_MR * DSP_CPU_NR;
}
/* With K slices (w->slices > 1) each slice's partials get their own cbuf part:
 * cbuf then holds slices x dsp_cpu_sweep_floats(m) floats. */
/* The kernels a sweep runs: fn / fn2 on widened A (ap); where dot is set, dot / dot2 on the pair words (aq) for
 * every (tile, panel) whose guards sum to DSP_CPU_GUARD_MIN or more (tguard[t] + the panel's), fn / fn2 for the
 * rest (ap may be NULL when no pair falls short). fn2 / dot2 NULL: no panel pairs. */
typedef struct {
  const float *ap, *aq;
  dsp_cpu_tile_fn fn, dot;
  dsp_cpu_tile2_fn fn2, dot2;
  const int16_t *tguard;
} dsp_cpu_kernels;
void dsp_cpu_sweep(const dsp_cpu_kernels *kn, int64_t m, const struct dsp_cpu_packed *w, int64_t j0, int64_t j1,
                   float *cbuf, dsp_cpu_epi_fn epi, void *ctx);
/* A's scratch for a sweep of m x k: widened A, and on the AVX-512 BF16 path its pair words and the tiles' guards
 * after it; floats, a multiple of 16. */
size_t dsp_cpu_a_floats(int64_t m, int64_t k);
/* The current path's kernels over abuf (dsp_cpu_a_floats(m, k) floats, 64-byte aligned). */
dsp_cpu_kernels dsp_cpu_kernels_for(float *abuf, int64_t m, int64_t k);
/* Called by every thread of a team (it holds work-sharing loops): fills kn's A for a times w, the pair words
 * and guards where kn runs vdpbf16ps, widened A where some (tile, panel) needs the fmaf kernels. */
void dsp_cpu_prepare_a(const dsp_tensor *a, const struct dsp_cpu_packed *w, const dsp_cpu_kernels *kn);
/* Called by every thread of a team: the kernels this thread sweeps with. own 0: the team's kn, its A filled by
 * dsp_cpu_prepare_a. own 1 (a one-tile A, where a barrier costs more than a copy): this thread's own copy of A
 * at abuf + thread * a_floats, filled by it alone, with no work-sharing and no barrier. */
dsp_cpu_kernels dsp_cpu_team_a(const dsp_tensor *a, const struct dsp_cpu_packed *w, const dsp_cpu_kernels *kn,
                               float *abuf, size_t a_floats, int own);

/* Product epilogue: rows i < mr, columns c < ncols of the tile to c0 (the
 * address of element (m0, n0)) with strides rs, cs in elements; dt BF16
 * (rounded) or F32 (acc as is). */
typedef void (*dsp_cpu_store_fn)(const float *tile, int mr, int ncols, void *c0, dsp_dtype dt, int64_t rs,
                                 int64_t cs);
void dsp_cpu_store_scalar(const float *tile, int mr, int ncols, void *c0, dsp_dtype dt, int64_t rs, int64_t cs);
void dsp_cpu_store_avx2(const float *tile, int mr, int ncols, void *c0, dsp_dtype dt, int64_t rs, int64_t cs);
void dsp_cpu_store_avx512(const float *tile, int mr, int ncols, void *c0, dsp_dtype dt, int64_t rs, int64_t cs);

/* Markov epilogue for one tile (rows i < mr, columns c < nvalid of a panel at
 * local column n0): bias = bf16(tile), logit = bf16(base + bias) or, with
 * fp32_add, base + bias; logits optionally written; the running best per row
 * and lane (lane = panel column) updated. A lane's best is the first of its
 * columns under the selection order; an empty lane has id -1. */
typedef struct {
  const dsp_bf16 *base0; int64_t base_rs, base_cs; /* base at (m0, n0) */
  void *logit0; int64_t logit_rs, logit_cs;          /* NULL: not written */
  int fp32_add;
  float *best_v;   /* [mr][32] at row m0 */
  int32_t *best_i; /* [mr][32]: local column, -1 = empty */
  int32_t n0;
} dsp_cpu_markov_tile;
typedef void (*dsp_cpu_markov_fn)(const float *tile, int mr, int nvalid, const dsp_cpu_markov_tile *t);
void dsp_cpu_markov_scalar(const float *tile, int mr, int nvalid, const dsp_cpu_markov_tile *t);
void dsp_cpu_markov_avx512(const float *tile, int mr, int nvalid, const dsp_cpu_markov_tile *t);

/* fp32 -> bf16 for a kernel output: NaN canonical, else RNE (contract 1). */
static inline uint16_t dsp_cpu_out_bf16(float f) {
  if (f != f) return 0x7FC0u;
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline float dsp_cpu_out_f32(float f) {
  if (f != f) {
    uint32_t u = 0x7FC00000u;
    __builtin_memcpy(&f, &u, 4);
  }
  return f;
}

#endif
