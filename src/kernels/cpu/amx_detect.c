/* Whether AMX tiles can run here (the CPU's features, the OS's permission for
 * tile data) and whether the models' products take them. Below the AMX
 * product (amx.c) and the kernel choice (dispatch.c), which both ask. */
#include "kernels/cpu/amx_detect.h"

#include <cpuid.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/env.h"

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_usable;

static void detect(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
  const int amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
  if (!amx_bf16 || !amx_tile) return;
  /* the OS must enable the tile state (XCR0 bits 17, 18) and let this process use it */
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if (((lo >> 17) & 3) != 3) return;
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return;
  g_usable = 1;
}

int dsp_cpu_amx_usable(void) {
  pthread_once(&g_once, detect);
  return g_usable;
}

/* auto takes AMX where it can run: with the weight prefetched ahead it streams
 * one row as fast as the chain and runs several rows far faster (bench/RESULTS.md,
 * thirty-second session); the path cannot change with M (batch invariance), so
 * it is one choice per process. chain and the named ISAs keep the fmaf chain. */
int dsp_cpu_amx_chosen(void) {
  const char *k = dsp_env_get()->cpu_kernel;
  return (!strcmp(k, "amx") || !strcmp(k, "auto")) && dsp_cpu_amx_usable();
}
