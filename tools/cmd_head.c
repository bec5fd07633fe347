/* placeholder replaced by the head command's implementation */
#include <stdio.h>
#include "cmds.h"
int dsp_cmd_head(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "dspark: 'head' is not built yet\n");
  return 1;
}
