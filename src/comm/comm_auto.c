/* The communicator a program gets by default: MPI when started by a launcher
 * (mpirun sets these variables), the self engine otherwise, so a plain run
 * needs no MPI daemon. */
#include <stdlib.h>

#include "comm/comm.h"

int dsp_comm_launched_by_mpi(void) {
  static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (getenv(vars[i])) return 1;
  return 0;
}

dsp_status dsp_comm_auto_create(dsp_comm **out) {
  return dsp_comm_launched_by_mpi() ? dsp_comm_mpi_create(out) : dsp_comm_self_create(out);
}
