/* placeholder replaced by the info command's implementation */
#include <stdio.h>
#include "cmds.h"
int dsp_cmd_info(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "dspark: 'info' is not built yet\n");
  return 1;
}
