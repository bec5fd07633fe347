/* The card's energy counter, power limit and SM clock through NVML, opened at
 * run time (dlopen) so the benchmarks build and run where no driver library
 * is installed: there bench_power_open returns 0 and the energy lines are
 * left out. Used to show what a sustained load costs in joules, and so what
 * time the card's power limit allows for it (joules / watts). */
#ifndef DSP_BENCH_POWER_H
#define DSP_BENCH_POWER_H
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>

typedef struct {
  void *lib, *dev;
  int (*energy)(void *, unsigned long long *); /* nvmlDeviceGetTotalEnergyConsumption: mJ since driver load */
  int (*limit)(void *, unsigned int *);        /* nvmlDeviceGetEnforcedPowerLimit: mW */
  int (*clock)(void *, int, unsigned int *);   /* nvmlDeviceGetClockInfo: MHz (type 1 = SM) */
} bench_power;

/* 1 when NVML answers for CUDA device `cuda_dev`. */
static inline int bench_power_open(bench_power *p, int cuda_dev) {
  p->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!p->lib) return 0;
  int (*init)(void) = (int (*)(void))dlsym(p->lib, "nvmlInit_v2");
  int (*by_bus)(const char *, void **) = (int (*)(const char *, void **))dlsym(p->lib, "nvmlDeviceGetHandleByPciBusId_v2");
  p->energy = (int (*)(void *, unsigned long long *))dlsym(p->lib, "nvmlDeviceGetTotalEnergyConsumption");
  p->limit = (int (*)(void *, unsigned int *))dlsym(p->lib, "nvmlDeviceGetEnforcedPowerLimit");
  p->clock = (int (*)(void *, int, unsigned int *))dlsym(p->lib, "nvmlDeviceGetClockInfo");
  char bus[32];
  if (!init || !by_bus || !p->energy || !p->limit || !p->clock || init() != 0 ||
      cudaDeviceGetPCIBusId(bus, (int)sizeof bus, cuda_dev) != cudaSuccess || by_bus(bus, &p->dev) != 0) {
    cudaGetLastError();
    dlclose(p->lib);
    p->lib = NULL;
    return 0;
  }
  unsigned long long mj;
  return p->energy(p->dev, &mj) == 0;
}

/* The energy counter in joules (negative on failure). */
static inline double bench_power_joules(const bench_power *p) {
  unsigned long long mj = 0;
  return p->lib && p->energy(p->dev, &mj) == 0 ? (double)mj * 1e-3 : -1.0;
}

/* The enforced power limit in watts (0 on failure). */
static inline double bench_power_limit_w(const bench_power *p) {
  unsigned int mw = 0;
  return p->lib && p->limit(p->dev, &mw) == 0 ? mw * 1e-3 : 0.0;
}

/* The SM clock now, MHz (0 on failure). */
static inline unsigned bench_power_sm_mhz(const bench_power *p) {
  unsigned int mhz = 0;
  return p->lib && p->clock(p->dev, 1, &mhz) == 0 ? mhz : 0u;
}

#endif
