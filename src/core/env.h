/* Every DSPARK_* environment switch is read and validated here, once;
 * README.md lists them. A value that does not parse is an error naming the
 * variable and what it accepts (dsp_settings_check), never a silent default. */
#ifndef DSP_CORE_ENV_H
#define DSP_CORE_ENV_H

#ifdef __cplusplus
extern "C" {
#endif

/* DSPARK_CUDA_TAIL: the Markov tail kernel on CUDA. */
typedef enum {
  DSP_TAIL_AUTO = 0,    /* ring-wgmma where its bit check passes and the tail is one launch, else by timing */
  DSP_TAIL_REGISTER,    /* register-streaming kernel (strict mode always runs it) */
  DSP_TAIL_RING,        /* shared-memory ring kernel, mma.sync consumers */
  DSP_TAIL_RING_WGMMA   /* the ring kernel with wgmma consumers (after its bit check; else ring) */
} dsp_tail_kernel;

/* Or'd into dsp_env.gemm_tile: the tile is over 64 weight rows (gemm_wgmma.h's DSP_WG_NARROW). */
#define DSP_ENV_GEMM_NARROW 0x1000

typedef struct {
  int threads;            /* DSPARK_THREADS: CPU threads per process (0 = the default share of the cores) */
  const char *cpu_kernel; /* DSPARK_CPU_KERNEL: auto|amx|chain|avx512bf16|avx512|avx2|scalar */
  int quiet;              /* DSPARK_QUIET=1: no start-up report lines */
  int verbose;            /* DSPARK_VERBOSE=1: kernel choices and check counts in the report */
  const char *buckets;    /* DSPARK_BUCKETS: CUDA graph batch buckets, e.g. "1,2,4,8,16,32,64" */
  int graphs;             /* DSPARK_GRAPHS=0: run CUDA components eagerly, without graphs (debugging) */
  int cuda_strict;        /* DSPARK_CUDA_STRICT=1: fixed-order fp32 products on the GPU (bitwise = CPU) */
  dsp_tail_kernel cuda_tail; /* DSPARK_CUDA_TAIL */
  int gemm_split;         /* DSPARK_GEMM_SPLIT=1: split a linear layer's K over a cluster where its shape leaves SMs idle */
  int gemm_tile;          /* DSPARK_GEMM_TILE: the own GEMM's token tile for every M (0: chosen by M), with
                             DSP_ENV_GEMM_NARROW or'd in for 64-row weight tiles */
  int gemm_small;         /* DSPARK_GEMM_SMALL: the mma.sync kernel for few token rows (M <= 16): 0 never; 1 and 2 (auto) always */
  int cuda_attention_tc;  /* DSPARK_CUDA_ATTENTION=tc (the default): attention on the tensor cores where its shapes allow */
  int cuda_attention_rows; /* 0: the one-row attention kernel only (tc-one-row); 1: the many-row one for long runs (tc); 2: also the caches past one block (tc-long) */
  int cuda_attention_q;   /* DSPARK_CUDA_ATTENTION_Q: two m-tiles' q fragments: 0 auto, 1 registers, 2 shared memory */
  int cuda_attention_short; /* DSPARK_CUDA_ATTENTION_SHORT: the many-row kernel for runs of 16 to 63 pairs (a batch's
                               verify or draft block) whose blocks fill the SMs: 0 auto, 1 never, 2 always */
  int cuda_pdl;           /* DSPARK_CUDA_PDL=1 (the default): captured products launch programmatically (PDL) */
  int cuda_noise;         /* DSPARK_CUDA_NOISE=1: a sampled Markov tail reads Gumbel noise drawn before it (opt-in until timed) */
  int cuda_tp_unverified; /* DSPARK_CUDA_TP_UNVERIFIED=1: the CUDA target runs TP > 1, a path no machine has run yet */
  int tp_invariant;       /* DSPARK_TP_INVARIANT: 1 o and down in K slices (CONTRACTS.md), the same bits at TP 1, 2, 4, 8;
                             0 one sum over K; -1 (auto) the backend's default: CPU 1, CUDA 0 */
  int row_parallel;       /* DSPARK_ROW_PARALLEL=1: o and down as at TP > 1 even at TP 1 (fp32 partials, all-reduce, one rounding) */
  const char *error;      /* NULL, or why a variable was refused */
} dsp_env;

/* The settings (defaults where a variable is unset or refused; see error). */
const dsp_env *dsp_env_get(void);
const char *dsp_tail_kernel_name(dsp_tail_kernel k);

#ifdef __cplusplus
}
#endif
#endif
