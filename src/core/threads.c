#include "core/threads.h"

#include <omp.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/env.h"

int dsp_threads_default(void) {
  const dsp_env *e = dsp_env_get();
  if (e->threads > 0) return e->threads;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  long local = ls ? atol(ls) : 1;
  long n = local > 0 ? cores / local : cores;
  return n > 0 ? (int)n : 1;
}

void dsp_threads_setup(void) { omp_set_num_threads(dsp_threads_default()); }
