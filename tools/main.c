/* dspark: the command-line program. */
#include <stdio.h>
#include <string.h>

#include "cmds.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: dspark <command> [options]\n"
          "  info          build, backends, MPI size, the CPU kernel and threads, the GPUs\n"
          "  generate      text from a Qwen3 checkpoint directory (plain decoding)\n"
          "  head          run the Markov head on safetensors inputs (see README)\n"
          "  show          list a safetensors file's tensors (small integer tensors in full)\n");
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "info")) return dsp_cmd_info(argc - 1, argv + 1);
  if (!strcmp(argv[1], "generate")) return dsp_cmd_generate(argc - 1, argv + 1);
  if (!strcmp(argv[1], "head")) return dsp_cmd_head(argc - 1, argv + 1);
  if (!strcmp(argv[1], "show")) return dsp_cmd_show(argc - 1, argv + 1);
  fprintf(stderr, "dspark: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
