/* The fused Markov step on the GPU (contracts 3-5), CUDA C++ internal interface.
 *
 * Rows. The vocabulary rows a launch covers form `nseg` segments (one per TP
 * rank whose rows are present: 1 for this rank's own rows, P after the base
 * all-gather), each padded to seg_rows (a multiple of 16) rows. Local row l of
 * segment s is global id (seg_rank0 + s) * vr + l, real when l < vr and
 * id < vocab. W2 holds [nseg][seg_rows][DSP_MK_RP] bf16 (R zero-padded to 256:
 * zero products leave a sum that started at +0 unchanged); base and the logits
 * output hold [nseg] x [gamma][bq][ld] (element (s, k, b, l) at
 * s * seg_stride + (k * bq + b) * ld + l).
 *
 * Work. A unit is 16 consecutive rows of one segment (8 KB of W2); warp w of W
 * takes units w, w + W, ... (reversed on odd steps when serpentine: the units a
 * step streamed last are the ones still in L2 when the next step starts).
 * Per unit a warp loads its W2 rows straight into tensor-core fragments (16-byte
 * loads, the next unit in flight while this one computes, and an L2 prefetch
 * `prefetch` units ahead), multiplies them with E = W1[prev] (shared memory,
 * stored in mma fragment order) for every batch tile, and the epilogue adds
 * base, rounds, writes logits (sampling) and keeps each row's best key in
 * registers: the greedy bf16 path in packed bf16x2 arithmetic with 32-bit keys
 * (markov_kernel.cuh, mk_fast_tile), every other path with the 64-bit key of
 * devmath.cuh; all keys are 64-bit before any merge across lanes.
 * A step ends with a max over the warp, the block (shared atomics) and the grid
 * (one global atomicMax per block and row into keys[k][b]).
 *
 * ACCUMULATION ORDER of bias[b][v] (fast mode): fp32 accumulator starting at
 * +0; the 256 (padded) k are taken in 16 groups c = 0..15 in increasing order,
 * group c = 2j + s holding k = 32j + 8q + 4s + i (q, i = 0..3); each group is
 * one mma.sync m16n8k16 (bf16 products, fp32 accumulate; the tensor core's
 * internal order within a group). The order is the same for every row, every
 * segment and split, every batch size and bucket: shard- and batch-invariant.
 * Strict mode: acc = +0; for k = 0..255: acc = fmaf(e[k], w[k], acc) (the CPU
 * chain, bitwise equal to the CPU). Then bias = bf16_rne(acc).
 *
 * Persistent mode runs steps [k_begin, k_end) in one cooperative launch: after
 * each step a grid barrier, then every block reads the winners, block 0 writes
 * the tokens, and every block gathers the next E itself. Otherwise a launch runs
 * one step and dsp_cuda_markov_select (after any all-gather of keys) picks the
 * tokens. */
#ifndef DSP_CUDA_MARKOV_H
#define DSP_CUDA_MARKOV_H
#include <cuda_runtime.h>
#include <stdint.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DSP_MK_RP 256      /* padded Markov rank: R <= 256 */
#define DSP_MK_THREADS 256 /* 8 warps per block */
#define DSP_MK_MAXBQ 128   /* largest padded batch */

typedef struct {
  const uint16_t *w2;       /* [nseg][seg_rows][RP] */
  const uint16_t *w1;       /* [Vp][RP] */
  const uint16_t *base;     /* see above */
  void *logits;             /* same layout as base, BF16 or F32 (fp32_add); sampling only */
  const float *noise;       /* sampling: NULL (the tail draws the Gumbel noise), or the noise of every real
                               element of rows with T > 0 in base's layout (dsp_cuda_markov_noise) */
  int64_t seg_stride;       /* elements between segments of base / logits */
  int64_t vr;               /* real rows per rank before padding */
  int64_t vocab;
  int32_t ld;               /* row stride of base / logits (= seg_rows) */
  int32_t seg_rows;         /* multiple of 16 */
  int32_t nseg;
  int32_t seg_rank0;
  int32_t bq;               /* padded batch, multiple of 16, <= DSP_MK_MAXBQ */
  int32_t fp32_add;
  const int32_t *anchor;    /* [bq] */
  const float *temp;        /* [bq] */
  const uint64_t *seed;     /* [bq] */
  const int64_t *pos;       /* [bq] */
  int32_t *tokens;          /* [gamma][bq] */
  unsigned long long *keys; /* [gamma][bq], zero before the first step */
  unsigned int *barrier;    /* [1 + gamma], zero before a tail: [0] the grid barrier of a persistent
                               launch, [1 + k] step k's chunk claims (ring kernel 4) */
  int32_t k_begin, k_end;
  int32_t persistent;
  int32_t serpentine;
  int32_t prefetch;         /* L2 prefetch distance in units; 0 = off (register kernel) */
  int32_t stages;           /* shared-memory ring stages (ring kernel) */
  int32_t keep8;            /* ring kernel 4: chunks c with c % 8 < keep8 are copied with an L2
                               evict_last policy, every other byte evict_first (0: no hints) */
  unsigned long long *trace; /* ring kernel 4: NULL, or [grid][k_end - k_begin][DSP_MK_TRACE] timings */
  const uint16_t *w2p;      /* ring kernel 4: W2 packed (dsp_cuda_markov_pack_w2), one plain copy per
                               chunk landing conflict-free; NULL: copies of w2's rows (2-way conflicts) */
  int32_t resident;         /* ring kernel 5 where one warpgroup takes all bq columns (bq <= 32, or 64 with
                               ring 6): W2 chunks each warpgroup keeps in registers through a persistent
                               launch (0 = none; at most 2 for bq <= 32, 1 for bq 64; per-step launches
                               keep none) */
  int32_t pause;            /* ring kernels 4-5, persistent: the producer copies nothing of step k + 1
                               until its block has arrived at step k's grid barrier, whose release then
                               waits for no copy in flight (the head sets it for ring kernel 5 with
                               one warpgroup per chunk, bq <= 32; bench_tail compares) */
} dsp_mk_args;

/* Per block and step (ring kernels 4-5): globaltimer ns when the step's work
 * began (E ready), ended (its last chunk done) and the grid barrier released
 * it; SM cycles of the work and of the barrier; consumer warp 0's cycles
 * waiting for full stages; chunks done; producer cycles waiting for empty
 * stages; ns when the block's keys were merged, when they left (the arrival
 * at the grid barrier) and when the block knew the winners. */
#define DSP_MK_TRACE 11

typedef struct {
  int sampling, strict;
  int ring;        /* 4: ring kernel 4 (below); 5: ring kernel 5 (ring kernel 4 with warpgroup products where
                      it applies, else ring kernel 4); 6: ring kernel 5 with the other warpgroup split
                      (benchmarks); 0: the register kernel (always for strict). Ring kernels 1-3 (a fixed
                      range of units per block) were removed: bench/RESULTS.md has their history */
  int grid;        /* blocks */
  int cooperative; /* launch with the cooperative attribute */
  int pdl;         /* programmatic dependent launch: the kernel may start while the kernel before it
                      (the LM head's product) finishes; it reads base only after griddepcontrol.wait.
                      Only where that product is the stream's previous operation */
} dsp_mk_launch;

/* The kernels compute the same function with the same per-element order:
 *   register kernel: every warp streams its 16-row units of W2 straight into
 *     registers (the next in flight) with L2 prefetches; E in shared memory.
 *     Also runs strict mode (the CPU's fmaf chain).
 *   ring kernel 4 (DSPARK_CUDA_TAIL=ring): one producer thread per block claims
 *     64-row chunks from a global counter and lands each (packed W2 in one bulk
 *     copy, base rows in tensor boxes) in a ring of shared-memory stages on
 *     mbarriers, running ahead across steps; 8 consumer warps multiply with
 *     mma.sync and release the stages. Optional L2 hints (keep8) and `pause`.
 *   ring kernel 5 (ring-wgmma): ring kernel 4's producer; the consumers are
 *     warpgroups running wgmma (one per chunk up to bq 32, keeping `resident`
 *     chunks of W2 in registers through a persistent launch; half the columns
 *     each above), greedy fast path at bq 16/32/64/128 on sm_90a, else ring
 *     kernel 4. Bit-identical only where the device's wgmma sums as its
 *     mma.sync does: the head runs dsp_cuda_markov_wgmma_check first.
 * Measurements behind these choices: bench/RESULTS.md.
 *
 * Shared-memory bytes and the most co-resident blocks per SM of the instance
 * for (bq, sampling, strict, ring) on the current device; also raises its
 * dynamic shared-memory limit. *stages: the ring's depth (ring kernel). */
dsp_status dsp_cuda_markov_prepare(int bq, int sampling, int strict, int ring, size_t *smem, int *blocks_per_sm,
                                   int *stages);
dsp_status dsp_cuda_markov_launch(const dsp_mk_args *a, const dsp_mk_launch *l, cudaStream_t s);
/* noise[(s, k, b, l)] = dsp_gumbel(seed[b], pos[b] + 1 + k, id) in base's layout for steps k < steps, the
 * rows b with temp[b] > 0 and every real (s, l) of a's rows; other elements are left as they are. The tail
 * reads it (a->noise) with the bits it would have drawn, where at batch 1 it drew with one lane in eight. */
dsp_status dsp_cuda_markov_noise(const dsp_mk_args *a, int32_t steps, float *noise, cudaStream_t s);
/* tokens[b] = id of max_r keys[r * bq + b] (0 when no candidate), b < bq. */
dsp_status dsp_cuda_markov_select(const unsigned long long *keys, int nranks, int bq, int32_t *tokens,
                                  cudaStream_t s);
/* W2 packed for ring kernels 4-5: chunk c (rows 64c .. 64c + 63 of w2's
 * [rows][RP]) becomes one contiguous 32 KB block in wgmma's 64-byte-swizzled
 * K-major layout with the k pairs permuted as the mma.sync fragments group
 * them (markov_wgmma.cuh), so one plain bulk copy (whole DRAM bursts) lands
 * it, wgmma reads it as it lies and ring kernel 4's fragment reads never share
 * a bank; rows past `rows` are zero. packed holds
 * dsp_cuda_markov_packed_elems(rows) elements. */
size_t dsp_cuda_markov_packed_elems(int64_t rows);
dsp_status dsp_cuda_markov_pack_w2(const uint16_t *w2, int64_t rows, uint16_t *packed, cudaStream_t s);
/* Ring kernel 5's products against ring kernel 4's on this device: `trials`
 * random 64-row chunks of bf16 W2 and bq rows of E (exponents over 2^-24 ..
 * 2^24, signs random, so sums cancel) multiplied both ways through the
 * kernels' own packing, gather and fragment code (for bq <= 64 also with W2
 * from registers, as ring kernel 5's resident chunks: then twice as many
 * comparisons); *differ counts fp32 results whose bits differ, of *compared. DSP_ERR_DEVICE where wgmma is not built
 * (not sm_90a) or bq is not 16, 32, 64 or 128. */
dsp_status dsp_cuda_markov_wgmma_check(int bq, int trials, long long *compared, long long *differ);
/* 1 when a cooperative launch can be captured into a CUDA graph here. */
int dsp_cuda_markov_coop_capturable(cudaStream_t s);
/* 1 when a kernel launched with programmatic stream serialization (and the
 * cooperative attribute when coop) after another kernel can be captured into a
 * graph, instantiated and replayed here. */
int dsp_cuda_markov_pdl_capturable(cudaStream_t s, int coop);

/* One instance per (MT, sampling, strict) family; defined in markov_*.cu. */
dsp_status dsp_mk_launch_g(const dsp_mk_args *a, const dsp_mk_launch *l, cudaStream_t s, int query,
                           size_t *smem, int *occ);
dsp_status dsp_mk_launch_s(const dsp_mk_args *a, const dsp_mk_launch *l, cudaStream_t s, int query,
                           size_t *smem, int *occ);
dsp_status dsp_mk_ring_g(const dsp_mk_args *a, const dsp_mk_launch *l, cudaStream_t s, int query, size_t *smem,
                         int *occ);
dsp_status dsp_mk_ring_s(const dsp_mk_args *a, const dsp_mk_launch *l, cudaStream_t s, int query, size_t *smem,
                         int *occ);
dsp_status dsp_mk_launch_gx(const dsp_mk_args *a, const dsp_mk_launch *l, cudaStream_t s, int query,
                            size_t *smem, int *occ);
dsp_status dsp_mk_launch_sx(const dsp_mk_args *a, const dsp_mk_launch *l, cudaStream_t s, int query,
                            size_t *smem, int *occ);

#ifdef __cplusplus
}
#endif
#endif
