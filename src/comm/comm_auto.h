/* Picking the communicator for a program run (see comm_auto.c). */
#ifndef DSP_COMM_COMM_AUTO_H
#define DSP_COMM_COMM_AUTO_H
#include "comm/comm.h"

int dsp_comm_launched_by_mpi(void);
dsp_status dsp_comm_create_auto(dsp_comm **out);

#endif
