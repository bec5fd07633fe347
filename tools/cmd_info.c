/* dspark info: what this build is and what this machine offers it: version,
 * compiler, backends, MPI size, and each available backend's description
 * (the CPU kernel dispatch chose and the thread count; the GPUs). Under mpirun
 * rank 0 prints. Measured ceilings are a benchmark's job (bench/bench_ceilings). */
#include <stdio.h>
#include <string.h>

#include "cmds.h"
#include "dspark.h"
#include "tool_common.h"

static void info_usage(FILE *f) {
  fprintf(f, "usage: dspark info [--json]\n"
             "  --json   one JSON object (version, build, mpi_size, cpu, cuda)\n");
}

/* s as a JSON string body (the descriptions hold no control characters, but quotes may appear). */
static void json_str(const char *s) {
  putchar('"');
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') putchar('\\');
    if ((unsigned char)*s >= 0x20) putchar(*s);
  }
  putchar('"');
}

int dsp_cmd_info(int argc, char **argv) {
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      info_usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "dspark info: unknown option '%s'\n", argv[i]);
      info_usage(stderr);
      return 2;
    }
  }
  if (dsp_tool_settings("dspark info")) return 2;
  dsp_comm *comm = NULL;
  if (dsp_comm_auto_create(&comm) != DSP_OK) {
    fprintf(stderr, "dspark info: error: %s\n", dsp_error_message());
    return 1;
  }
  dsp_backend *cpu = NULL, *cuda = NULL;
  dsp_backend_config cc = {.kind = DSP_BACKEND_CPU, .comm = comm};
  dsp_status s = dsp_comm_agree(comm, dsp_backend_create(&cc, &cpu));
  char cuda_desc[512] = "not available";
  if (s == DSP_OK && dsp_backend_available(DSP_BACKEND_CUDA)) {
    dsp_backend_config gc = {.kind = DSP_BACKEND_CUDA, .comm = comm};
    if (dsp_comm_agree(comm, dsp_backend_create(&gc, &cuda)) == DSP_OK)
      snprintf(cuda_desc, sizeof cuda_desc, "%s", dsp_backend_describe(cuda));
    else
      snprintf(cuda_desc, sizeof cuda_desc, "error: %s", dsp_error_message());
  }
  if (s == DSP_OK && dsp_comm_rank(comm) == 0) {
    if (json) {
      printf("{\"version\": ");
      json_str(dsp_version());
      printf(", \"build\": ");
      json_str(dsp_build_info());
      printf(", \"mpi_size\": %d, \"comm\": ", dsp_comm_size(comm));
      json_str(dsp_comm_kind(comm));
      printf(", \"cpu\": ");
      json_str(dsp_backend_describe(cpu));
      printf(", \"cuda\": ");
      json_str(cuda_desc);
      printf("}\n");
    } else {
      printf("%s\n", dsp_version());
      printf("build      %s\n", dsp_build_info());
      printf("mpi size   %d (%s)\n", dsp_comm_size(comm), dsp_comm_kind(comm));
      printf("cpu        %s\n", dsp_backend_describe(cpu));
      printf("cuda       %s\n", cuda_desc);
    }
  }
  if (s != DSP_OK && dsp_comm_rank(comm) == 0) fprintf(stderr, "dspark info: error: %s\n", dsp_error_message());
  dsp_backend_free(cuda);
  dsp_backend_free(cpu);
  dsp_comm_free(comm);
  return s == DSP_OK ? 0 : 1;
}
