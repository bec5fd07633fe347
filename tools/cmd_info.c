/* dspark info: what this build is and what this machine can do. Prints the
 * version, compiler, backends, MPI size, the product kernel dispatch chose and
 * the thread count, then measures on the spot the two ceilings benchmarks
 * report against: copy bandwidth and the bf16 product rate (LM-head shape, on
 * a slice of N, and the fused Markov step). Under mpirun every rank measures
 * at once (the per-rank figures a TP run sees) and rank 0 prints. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "comm/comm_auto.h"
#include "core/env.h"
#include "core/status.h"
#include "support/ceilings.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/matmul.h"
#include "tool_common.h"

#define DSP_VERSION "dspark 0.1"

#if defined(__clang__)
#define DSP_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define DSP_COMPILER "gcc " __VERSION__
#else
#define DSP_COMPILER "unknown C compiler"
#endif

#ifdef DSPARK_HAVE_CUDA
#define DSP_BACKENDS "cpu, mpi, cuda"
#else
#define DSP_BACKENDS "cpu, mpi"
#endif

typedef struct {
  int64_t lm_m, lm_k, lm_n, lm_slice; /* the LM-head shape and the slice of N measured */
  int64_t mk_m, mk_k, mk_n;           /* the Markov-step shape */
} info_shapes;

static void info_usage(FILE *f) {
  fprintf(f, "usage: dspark info [--json] [--quick]\n"
             "  --json   one JSON object (copy_gbps, product_gflops_lm, product_gflops_markov, kernel, threads, mpi_size)\n"
             "  --quick  small measurements (a smoke test, not ceilings)\n");
}

/* The CPU's model name, or "" when /proc/cpuinfo does not say. */
static void cpu_model(char *buf, size_t n) {
  buf[0] = 0;
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char *c = strchr(line, ':');
    if (!strncmp(line, "model name", 10) && c) {
      c += c[1] == ' ' ? 2 : 1;
      c[strcspn(c, "\n")] = 0;
      snprintf(buf, n, "%s", c);
      break;
    }
  }
  fclose(f);
}

int dsp_cmd_info(int argc, char **argv) {
  int json = 0, quick = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      info_usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "dspark info: unknown option '%s'\n", argv[i]);
      info_usage(stderr);
      return 2;
    }
  }
  dsp_comm *comm = NULL;
  if (dsp_comm_create_auto(&comm) != DSP_OK) {
    fprintf(stderr, "dspark info: error: %s\n", dsp_error_message());
    return 1;
  }
  dsp_tool_threads(comm);
  const int rank = dsp_comm_rank(comm), size = dsp_comm_size(comm);
  const int threads = dsp_cpu_threads_resolve(0);
  const info_shapes sh = quick ? (info_shapes){224, 7168, 163840, 64, 32, 256, 4096}
                               : (info_shapes){224, 7168, 163840, 16384, 32, 256, 163840};

  double copy = 0, lm = 0, mk = 0, mk_ms = 0;
  dsp_status s = dsp_comm_barrier(comm);
  if (s == DSP_OK) {
    copy = dsp_cpu_measure_copy_gbps();
    if (copy > 0) lm = dsp_cpu_measure_product_gflops(sh.lm_m, sh.lm_k, sh.lm_slice, 0);
    if (lm > 0) mk = dsp_cpu_measure_markov_gflops(sh.mk_m, sh.mk_k, sh.mk_n, 0, &mk_ms);
    s = dsp_comm_agree(comm, mk > 0 ? DSP_OK : DSP_ERR_NOMEM);
  }
  if (s != DSP_OK) {
    if (rank == 0) fprintf(stderr, "dspark info: error: %s\n", dsp_error_message());
    dsp_comm_free(comm);
    return 1;
  }

  if (rank == 0) {
    char model[256];
    cpu_model(model, sizeof model);
    const char *kernel = dsp_cpu_kernel_name();
    if (json) {
      json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:s, s:i, s:f, s:f, s:f, s:f, s:I, s:b}", "version",
                            DSP_VERSION, "compiler", DSP_COMPILER, "backends", DSP_BACKENDS, "cpu", model, "mpi_size",
                            size, "comm", dsp_comm_kind(comm), "kernel", kernel, "threads", threads, "copy_gbps", copy,
                            "product_gflops_lm", lm, "product_gflops_markov", mk, "markov_ms_per_step", mk_ms,
                            "lm_slice_n", (json_int_t)sh.lm_slice, "quick", quick);
      char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
      if (!txt) {
        fprintf(stderr, "dspark info: error: cannot format JSON\n");
        json_decref(o);
        dsp_comm_free(comm);
        return 1;
      }
      printf("%s\n", txt);
      free(txt);
      json_decref(o);
    } else {
      printf("%s\n", DSP_VERSION);
      printf("build      %s, C11\n", DSP_COMPILER);
      printf("backends   %s\n", DSP_BACKENDS);
      printf("mpi size   %d (%s)\n", size, dsp_comm_kind(comm));
      if (model[0]) printf("cpu        %s\n", model);
      printf("kernel     %s (DSPARK_CPU_KERNEL=%s)\n", kernel, dsp_env_get()->cpu_kernel);
      printf("threads    %d%s\n", threads, size > 1 ? " per rank" : "");
      if (quick) printf("measured with --quick: small sizes, not ceilings\n");
      printf("copy bandwidth        %8.1f GB/s  (memcpy of %s, bytes read + written, median of 5)\n", copy,
             "256 MiB");
      printf("product, LM head      %8.1f GFLOP/s  (M %lld, K %lld, N %lld: measured on a slice of N = %lld rows)\n",
             lm, (long long)sh.lm_m, (long long)sh.lm_k, (long long)sh.lm_n, (long long)sh.lm_slice);
      printf("product, Markov step  %8.1f GFLOP/s  (M %lld, K %lld, N %lld: fused step, greedy; %.3f ms per step)\n",
             mk, (long long)sh.mk_m, (long long)sh.mk_k, (long long)sh.mk_n, mk_ms);
      if (size > 1) printf("(figures per rank, all %d ranks measuring at once)\n", size);
    }
  }
  dsp_comm_free(comm);
  return 0;
}
