/* The instruction sets this CPU runs (cpuid, once): below every kernel and
 * the choice among them (dispatch.c), which all ask. */
#include <pthread.h>

#include "kernels/cpu/kernel.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_have[3];

static void detect(void) {
  __builtin_cpu_init();
  g_have[DSP_CPU_ISA_SCALAR] = 1;
  g_have[DSP_CPU_ISA_AVX2] = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  g_have[DSP_CPU_ISA_AVX512] = g_have[DSP_CPU_ISA_AVX2] && __builtin_cpu_supports("avx512f") &&
                               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                               __builtin_cpu_supports("avx512vl");
}

int dsp_cpu_isa_supported(dsp_cpu_isa isa) {
  pthread_once(&g_once, detect);
  return (unsigned)isa < 3 && g_have[isa];
}
