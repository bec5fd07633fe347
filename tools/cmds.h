/* The dspark program's subcommands; each lives in its own tools/cmd_*.c. */
#ifndef DSP_TOOLS_CMDS_H
#define DSP_TOOLS_CMDS_H

int dsp_cmd_info(int argc, char **argv);
int dsp_cmd_head(int argc, char **argv);
int dsp_cmd_generate(int argc, char **argv);
int dsp_cmd_show(int argc, char **argv);

#endif
