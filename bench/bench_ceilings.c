/* bench_ceilings: the two ceilings the CPU benchmarks report against, measured
 * now: copy bandwidth and the bf16 product rate of the project's kernel (at the
 * LM-head shape on a slice of N, and the fused Markov step). Under mpirun every
 * rank measures at once (the per-rank figures a TP run sees); rank 0 prints. */
#include <stdio.h>
#include <string.h>

#include "dspark.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/matmul.h"
#include "support/ceilings.h"

typedef struct {
  int64_t lm_m, lm_k, lm_n, lm_slice; /* the LM-head shape and the slice of N measured */
  int64_t mk_m, mk_k, mk_n;           /* the Markov-step shape */
} shapes;

int main(int argc, char **argv) {
  int json = 0, quick = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "--quick")) quick = 1;
    else {
      fprintf(stderr, "usage: bench_ceilings [--json] [--quick]   (unknown option '%s')\n", argv[i]);
      return 2;
    }
  }
  dsp_comm *comm = NULL;
  dsp_backend *be = NULL;
  dsp_backend_config bc = {.kind = DSP_BACKEND_CPU};
  if (dsp_comm_auto_create(&comm) != DSP_OK || (bc.comm = comm, dsp_backend_create(&bc, &be)) != DSP_OK) {
    fprintf(stderr, "bench_ceilings: error: %s\n", dsp_error_message());
    return 1;
  }
  const int rank = dsp_comm_rank(comm), size = dsp_comm_size(comm);
  const shapes sh = quick ? (shapes){224, 7168, 163840, 64, 32, 256, 4096} : (shapes){224, 7168, 163840, 16384, 32, 256, 163840};
  double copy = 0, lm = 0, mk = 0, mk_ms = 0;
  dsp_status s = dsp_comm_barrier(comm);
  if (s == DSP_OK) {
    copy = dsp_cpu_measure_copy_gbps();
    if (copy > 0) lm = dsp_cpu_measure_product_gflops(sh.lm_m, sh.lm_k, sh.lm_slice, 0);
    if (lm > 0) mk = dsp_cpu_measure_markov_gflops(sh.mk_m, sh.mk_k, sh.mk_n, 0, &mk_ms);
    s = dsp_comm_agree(comm, mk > 0 ? DSP_OK : DSP_ERR_NOMEM);
  }
  if (s == DSP_OK && rank == 0) {
    if (json) {
      printf("{\"backend\": \"%s\", \"kernel\": \"%s\", \"threads\": %d, \"mpi_size\": %d, \"copy_gbps\": %.3f, "
             "\"product_gflops_lm\": %.3f, \"product_gflops_markov\": %.3f, \"markov_ms_per_step\": %.4f, "
             "\"lm_slice_n\": %lld, \"quick\": %s}\n",
             dsp_backend_describe(be), dsp_cpu_kernel_name(), dsp_cpu_threads_resolve(0), size, copy, lm, mk, mk_ms,
             (long long)sh.lm_slice, quick ? "true" : "false");
    } else {
      printf("%s\n", dsp_backend_describe(be));
      if (quick) printf("measured with --quick: small sizes, not ceilings\n");
      printf("copy bandwidth        %8.1f GB/s  (memcpy of 256 MiB, bytes read + written, median of 5)\n", copy);
      printf("product, LM head      %8.1f GFLOP/s  (M %lld, K %lld, N %lld: measured on a slice of N = %lld rows)\n",
             lm, (long long)sh.lm_m, (long long)sh.lm_k, (long long)sh.lm_n, (long long)sh.lm_slice);
      printf("product, Markov step  %8.1f GFLOP/s  (M %lld, K %lld, N %lld: fused step, greedy; %.3f ms per step)\n",
             mk, (long long)sh.mk_m, (long long)sh.mk_k, (long long)sh.mk_n, mk_ms);
      if (size > 1) printf("(figures per rank, all %d ranks measuring at once)\n", size);
    }
  }
  if (s != DSP_OK && rank == 0) fprintf(stderr, "bench_ceilings: error: %s\n", dsp_error_message());
  dsp_backend_free(be);
  dsp_comm_free(comm);
  return s == DSP_OK ? 0 : 1;
}
