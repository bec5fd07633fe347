/* What a dependent step costs between kernels, against what it would cost inside one persistent kernel.
 *
 * A chain of phases, each block of a phase reading every value the previous phase wrote (as a product reads the
 * whole normalised row and the attention the whole projected q/k/v), timed four ways in one run: a CUDA graph of
 * one kernel a phase with plain launches, the same graph with programmatic launches (PDL, as the model's graphs
 * launch their kernels), one kernel with a grid barrier between phases, and that kernel without the barriers (the
 * phases' work alone). The difference to the last, over the phase count, is the price of one dependent step.
 * Question it answers: how much of a batch-1 decode step's fixed cost (about 30 us a layer beyond its bytes on an
 * H100, about nine dependent kernels) a persistent kernel per step could remove, before anyone writes one.
 * usage: bench_chain [--phases 324] [--blocks SMs] [--floats 32] [--reps 20] [--per-layer 9] [--layers 36] */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cuda_util.h"
#include "support/chain_time.h"

int main(int argc, char **argv) {
  long phases = 324, blocks = 0, floats = 32, reps = 20, per_layer = 9, layers = 36;
  for (int i = 1; i + 1 < argc; i += 2) {
    long *v = !strcmp(argv[i], "--phases")      ? &phases
              : !strcmp(argv[i], "--blocks")    ? &blocks
              : !strcmp(argv[i], "--floats")    ? &floats
              : !strcmp(argv[i], "--reps")      ? &reps
              : !strcmp(argv[i], "--per-layer") ? &per_layer
              : !strcmp(argv[i], "--layers")    ? &layers
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
                    "[--layers 36]\n");
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
  return t.equal ? 0 : 1;
}
