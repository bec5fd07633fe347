/* What a dependent step costs between kernels, against what it would cost inside one persistent kernel.
 *
 * A chain of phases, each block of a phase reading every value the previous phase wrote (as a product reads the
 * whole normalised row and the attention the whole projected q/k/v), timed four ways in one run: a CUDA graph of
 * one kernel a phase with plain launches, the same graph with programmatic launches (PDL, as the model's graphs
 * launch their kernels), one kernel with a grid barrier between phases, and that kernel without the barriers (the
 * phases' work alone). The difference to the last, over the phase count, is the price of one dependent step.
 * Question it answers: how much of a batch-1 decode step's fixed cost (about 30 us a layer beyond its bytes on an
 * H100, about nine dependent kernels) a persistent kernel per step could remove, before anyone writes one.
 *
 * Then the same question for the products themselves: chains of eight few-row products at Qwen3-8B's decode
 * shapes (each product's output the next one's tokens; distinct weights, so nothing stays in L2), as a graph of
 * the library's few-row kernels launched programmatically, and as one persistent kernel whose producers stream
 * the next product's weights while the grid barrier is open (support/gemm_chain.h); every output compared bit
 * for bit, times against the weights' bytes over the copy rate measured now. Last, a layer's work outside its
 * attention through the backend's ops as the model's graph runs it, with and without the small kernels between the
 * products (support/layer_time.h): what those kernels cost in a replay.
 * usage: bench_chain [--phases 324] [--blocks SMs] [--floats 32] [--reps 20] [--per-layer 9] [--layers 36]
 *                    [--products 0|1] */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cuda_util.h"
#include "support/chain_time.h"
#include "support/gemm_chain.h"
#include "support/layer_time.h"
#include "support/rates.h"

/* The product chains' table; 1 when some output differs. */
static int product_chains(int reps) {
  dsp_backend *be = NULL;
  const dsp_backend_config bc = {.kind = DSP_BACKEND_CUDA};
  CKD(dsp_backend_create(&bc, &be));
  const double gbps = dsp_bench_copy_rate(be) * 1e-9;
  static const struct {
    const char *name;
    int64_t k0, n[8];
  } chains[] = {{"o x8", 4096, {4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096}},
                {"up/down x4", 4096, {12288, 4096, 12288, 4096, 12288, 4096, 12288, 4096}},
                {"qkv/o'/up/down x2", 4096, {6144, 4096, 12288, 4096, 6144, 4096, 12288, 4096}}};
  printf("\nchains of 8 few-row products, copy %.0f GB/s (measured now); us a chain (median of 3 alternated medians)\n",
         gbps);
  printf("| chain | M | C:SB:ST | floor | graph, own shapes | graph, chain's shape | one kernel | saved a boundary | bits |\n"
         "|---|---|---|---|---|---|---|---|---|\n");
  int bad = 0;
  for (size_t c = 0; c < sizeof chains / sizeof chains[0]; c++)
    for (int64_t m = 1; m <= 8; m += 7) {
      dsp_bench_gemm_chain_times t;
      CKD(dsp_bench_gemm_chain(8, chains[c].n, chains[c].k0, m, reps, &t));
      const double floor_us = t.bytes / (gbps * 1e9) * 1e6;
      printf("| %s | %lld | %d:%d:%d | %.1f | %.1f (%.2fx) | %.1f (%.2fx) | %.1f (%.2fx) | %.2f us | %lld of %lld differ |\n",
             chains[c].name, (long long)m, t.c, t.sb, t.stages, floor_us, t.pick_us, t.pick_us / floor_us, t.shape_us,
             t.shape_us / floor_us, t.chain_us, t.chain_us / floor_us, (t.shape_us - t.chain_us) / 7.0, t.differ,
             t.compared);
      bad |= t.differ != 0;
    }
  printf("\na layer outside its attention, 8 layers of distinct weights, graph replay (us a layer)\n");
  printf("| M | floor | o, add+norm, gate/up, silu, down, add+norm, qkv | the four products alone | the small kernels |\n"
         "|---|---|---|---|---|\n");
  for (int64_t m = 1; m <= 8; m += 7) {
    dsp_bench_layer_times lt;
    CKD(dsp_bench_layer_parts(be, m, 8, reps, &lt));
    const double floor_us = lt.bytes / (gbps * 1e9) * 1e6;
    printf("| %lld | %.1f | %.1f (%.2fx) | %.1f (%.2fx) | %.1f |\n", (long long)m, floor_us, lt.full_us,
           lt.full_us / floor_us, lt.products_us, lt.products_us / floor_us, lt.full_us - lt.products_us);
  }
  dsp_backend_free(be);
  return bad;
}

int main(int argc, char **argv) {
  long phases = 324, blocks = 0, floats = 32, reps = 20, per_layer = 9, layers = 36, products = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    long *v = !strcmp(argv[i], "--phases")      ? &phases
              : !strcmp(argv[i], "--blocks")    ? &blocks
              : !strcmp(argv[i], "--floats")    ? &floats
              : !strcmp(argv[i], "--reps")      ? &reps
              : !strcmp(argv[i], "--per-layer") ? &per_layer
              : !strcmp(argv[i], "--layers")    ? &layers
              : !strcmp(argv[i], "--products")  ? &products
                                                : NULL;
    if (!v) {
      fprintf(stderr, "bench_chain: unknown option %s\n", argv[i]);
      return 2;
    }
    char *end = NULL;
    *v = strtol(argv[i + 1], &end, 10);
    if (!end || *end) {
      fprintf(stderr, "bench_chain: %s takes an integer, not '%s'\n", argv[i], argv[i + 1]);
      return 2;
    }
  }
  if (argc % 2 == 0 || per_layer < 1 || layers < 1 || phases > 100000 || blocks < 0) {
    fprintf(stderr, "usage: bench_chain [--phases 324] [--blocks SMs] [--floats 32] [--reps 20] [--per-layer 9] "
                    "[--layers 36] [--products 0|1]\n");
    return 2;
  }
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  if (!blocks) blocks = prop.multiProcessorCount;
  dsp_bench_chain_times t;
  CKD(dsp_bench_chain((int)phases, (int)blocks, (int)floats, (int)reps, &t));
  printf("bench_chain: %s, %d SMs; %ld phases of %ld blocks, each reading %ld values; median of %ld runs\n",
         prop.name, prop.multiProcessorCount, phases, blocks, blocks * floats, reps);
  printf("chain of kernels == barrier kernel, bit for bit: %s\n", t.equal ? "yes" : "NO");
  printf("%-34s %12s %14s %22s\n", "form", "chain us", "us a step", "ms a decode step");
  const struct {
    const char *name;
    double us;
  } rows[] = {{"graph, plain launches", t.plain_us},
              {"graph, programmatic launches (PDL)", t.pdl_us},
              {"one kernel, grid barriers", t.barrier_us},
              {"one kernel, no barriers (work)", t.free_us}};
  for (int i = 0; i < 4; i++) {
    const double step = (rows[i].us - t.free_us) / (double)phases;
    printf("%-34s %12.1f %14.2f %22.3f\n", rows[i].name, rows[i].us, step, step * (double)(per_layer * layers) * 1e-3);
  }
  printf("(last column: the step's price times %ld dependent steps a layer times %ld layers)\n", per_layer, layers);
  int bad = !t.equal;
  if (products) bad |= product_chains((int)reps);
  return bad;
}
