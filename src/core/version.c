/* What this library is: its version and the backends it was built with. */
#include "dspark.h"

#if defined(__clang__)
#define DSP_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define DSP_COMPILER "gcc " __VERSION__
#else
#define DSP_COMPILER "an unknown C compiler"
#endif

#ifdef DSPARK_HAVE_CUDA
#ifdef DSPARK_HAVE_NCCL
#define DSP_BACKENDS "cpu, mpi, cuda, nccl"
#else
#define DSP_BACKENDS "cpu, mpi, cuda (no nccl: one GPU per process)"
#endif
#else
#define DSP_BACKENDS "cpu, mpi"
#endif

const char *dsp_version(void) { return "dspark 0.2"; }
const char *dsp_build_info(void) { return DSP_COMPILER "; backends " DSP_BACKENDS; }
