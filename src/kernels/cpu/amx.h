/* The CPU product on AMX tiles (tdpbf16ps), for the models' linear layers
 * where the CPU has AMX-BF16 and the OS grants the tile state.
 *
 * THE ORDER (contract 2). Output (m, n) is the fp32 tile accumulator over k
 * blocks of 32 in order, from +0: each tdpbf16ps adds one block's 32 products
 * in the hardware's own order and precision, then one RNE rounding to bf16
 * (or the fp32 as is). That order depends on K alone: not on M, the other rows
 * of a tile, the split of N or the thread count, so the product stays batch-
 * and shard-invariant. It is not the fmaf chain of kernel.h (measured here:
 * closer to the exact sum), so AMX weights are a backend choice like the
 * GPU's tensor cores: DSPARK_CPU_KERNEL auto or amx takes it where the CPU
 * has it, chain (or a named ISA) keeps the fmaf chain everywhere; strict
 * weights keep the chain.
 *
 * tdpbf16ps reads subnormal inputs as zero and flushes subnormal results. An
 * output whose A row or weight row holds a subnormal, an inf or a NaN, or
 * whose products could be subnormal (every partial sum is a multiple of
 * 2^(ea + ew - 268) for the smallest biased exponents ea, ew of the two rows'
 * nonzero values: below 2^-126 when ea + ew < 142; kernel.h's row guards,
 * DSP_CPU_GUARD_MIN), is computed with the fmaf
 * chain instead; the choice depends only on the two rows, so the invariances
 * hold for those outputs too. */
#ifndef DSP_KERNELS_CPU_AMX_H
#define DSP_KERNELS_CPU_AMX_H
#include <stddef.h>
#include <stdint.h>

#include "dspark.h"
#include "kernels/cpu/amx_detect.h"

/* Weight rows in tiles: column block j (16 rows of W), k block t (32 k) is one
 * 1 KiB tile [16 k pairs][16 columns][2], zero past N and K. Blocks go in
 * groups of four (the last may have fewer), a group's tiles ordered by t,
 * then block: the group a thread walks is one sequential stream. */
typedef struct {
  int64_t n, k, nb, kb;
  uint16_t *data;
  int16_t *guard;   /* [slices][N]: each row's guard over each K slice (kernel.h's dsp_cpu_row_guard) */
  int16_t guard_min;
  size_t bytes;
  int32_t slices;   /* K slices summed by slices.h's tree (1: one sum over K) */
} dsp_cpu_amx;

dsp_status dsp_cpu_amx_pack(const dsp_tensor *w, dsp_cpu_amx **out);
/* K into `slices` equal slices, as dsp_cpu_packed_slice: each slice's sum over
 * its own k blocks from +0 (the chain for an output whose A row and weight row
 * fail the guard over that slice), then slices.h's tree. K a multiple of
 * 32 x slices, at most DSP_CPU_AMX_SLICES slices; DSP_ERR_SHAPE otherwise. */
#define DSP_CPU_AMX_SLICES 16
dsp_status dsp_cpu_amx_slice(dsp_cpu_amx *p, int32_t slices);
void dsp_cpu_amx_free(dsp_cpu_amx *p);
/* The weight's rows back out of its tiles: dst [N][K]. */
void dsp_cpu_amx_unpack(const dsp_cpu_amx *p, uint16_t *dst);
/* Blocks in the group of block j, and the offset of tile (j, t) in elements. */
static inline int64_t dsp_cpu_amx_gblocks(const dsp_cpu_amx *p, int64_t j) {
  const int64_t left = p->nb - j / 4 * 4;
  return left < 4 ? left : 4;
}
static inline size_t dsp_cpu_amx_tile(const dsp_cpu_amx *p, int64_t j, int64_t t) {
  return ((size_t)(j / 4 * 4 * p->kb + t * dsp_cpu_amx_gblocks(p, j) + j % 4)) * 512;
}
/* Element (n, k) of the weight. */
static inline uint16_t dsp_cpu_amx_at(const dsp_cpu_amx *p, int64_t n, int64_t k) {
  return p->data[dsp_cpu_amx_tile(p, n / 16, k / 32) + (size_t)((k % 32) / 2) * 32 + (size_t)(n % 16) * 2 +
                 (size_t)(k % 2)];
}

/* c = a w^T as dsp_cpu_matmul_nt (views, dtypes, canonical NaN), in the order
 * above. nthreads <= 0: DSPARK_THREADS (0: OpenMP's default). */
dsp_status dsp_cpu_amx_matmul_nt(const dsp_tensor *a, const dsp_cpu_amx *w, dsp_tensor *c, int nthreads);

#endif
