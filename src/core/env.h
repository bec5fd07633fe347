/* Every DSPARK_* environment switch is read here, once; README.md lists them. */
#ifndef DSP_CORE_ENV_H
#define DSP_CORE_ENV_H

typedef struct {
  int threads;            /* DSPARK_THREADS: CPU threads per process (0 = one per core, 1 under MPI) */
  const char *cpu_kernel; /* DSPARK_CPU_KERNEL: auto|avx512|avx2|scalar */
  int quiet;              /* DSPARK_QUIET=1: no start-up report lines */
  const char *buckets;    /* DSPARK_BUCKETS: CUDA graph batch buckets, e.g. "1,2,4,8,16,32,64" */
  int graphs;             /* DSPARK_GRAPHS=0: run the CUDA head eagerly, without graphs (debugging) */
  int cuda_strict;        /* DSPARK_CUDA_STRICT=1: fixed-order fp32 products on the GPU (bitwise = CPU) */
  int cuda_tail;          /* DSPARK_CUDA_TAIL: Markov tail kernel, 0 = the fastest by timing at creation,
                             1 register-streaming, 5 ring kernel 4, 6 ring kernel 5 (2-4: removed) */
} dsp_env;

const dsp_env *dsp_env_get(void);

#endif
