/* placeholder replaced by the bench command's implementation */
#include <stdio.h>
#include "cmds.h"
int dsp_cmd_bench(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "dspark: 'bench' is not built yet\n");
  return 1;
}
