#include "core/env.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

static dsp_env g_env;
static char g_error[512];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Records the first refusal; later ones are reported after it is fixed. */
static void refuse(const char *name, const char *value, const char *accepted) {
  if (g_env.error) return;
  snprintf(g_error, sizeof g_error, "environment: %s='%.100s' is not valid; it accepts %s", name, value, accepted);
  g_env.error = g_error;
}

static const char *env_value(const char *name) {
  const char *s = getenv(name);
  return s && *s ? s : NULL;
}

static int env_int(const char *name, int dflt, long lo, long hi, const char *accepted) {
  const char *s = env_value(name);
  if (!s) return dflt;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) {
    refuse(name, s, accepted);
    return dflt;
  }
  return (int)v;
}

/* One of `names` (NULL-terminated); returns its index. */
static int env_choice(const char *name, const char *const *names, int dflt, const char *accepted) {
  const char *s = env_value(name);
  if (!s) return dflt;
  for (int i = 0; names[i]; i++)
    if (!strcmp(s, names[i])) return i;
  refuse(name, s, accepted);
  return dflt;
}

/* A comma-separated list of batch sizes in [1, 2^20]. */
static const char *env_buckets(const char *name, const char *dflt) {
  const char *s = env_value(name);
  if (!s) return dflt;
  const char *p = s;
  while (*p) {
    char *end;
    errno = 0;
    long x = strtol(p, &end, 10);
    if (errno || end == p || x < 1 || x > 1 << 20 || (*end && *end != ',') || (*end == ',' && !end[1])) {
      refuse(name, s, "a comma-separated list of batch sizes in [1, 1048576], e.g. 1,2,4,8");
      return dflt;
    }
    p = *end ? end + 1 : end;
  }
  return s;
}

static const char *const g_tail_names[] = {"auto", "register", "ring", "ring-wgmma", NULL};
static const char *const g_cpu_kernels[] = {"auto", "amx", "chain", "avx512bf16", "avx512", "avx2", "scalar", NULL};
static const char *const g_bool[] = {"0", "1", NULL};
static const char *const g_gemm_tiles[] = {"auto", "32", "64", "112", "128", "224", "256", "64x112", "64x128", NULL};
static const int g_gemm_tile_n[] = {0, 32, 64, 112, 128, 224, 256, 112 | DSP_ENV_GEMM_NARROW, 128 | DSP_ENV_GEMM_NARROW};
static const char *const g_attention[] = {"tc", "fp32", "tc-long", "tc-one-row", NULL};
static const char *const g_small[] = {"0", "1", "auto", NULL};
static const char *const g_att_q[] = {"auto", "registers", "shared", NULL};
static const char *const g_short[] = {"auto", "0", "1", NULL};

static void env_read(void) {
  g_env.threads = env_int("DSPARK_THREADS", 0, 0, 4096, "an integer in [0, 4096] (0: the default share of the cores)");
  g_env.cpu_kernel = g_cpu_kernels[env_choice("DSPARK_CPU_KERNEL", g_cpu_kernels, 0, "auto, amx, chain, avx512bf16, avx512, avx2 or scalar")];
  g_env.quiet = env_choice("DSPARK_QUIET", g_bool, 0, "0 or 1");
  g_env.verbose = env_choice("DSPARK_VERBOSE", g_bool, 0, "0 or 1");
  g_env.buckets = env_buckets("DSPARK_BUCKETS", "1,2,4,8,16,32,64,128");
  g_env.graphs = env_choice("DSPARK_GRAPHS", g_bool, 1, "0 or 1");
  g_env.cuda_strict = env_choice("DSPARK_CUDA_STRICT", g_bool, 0, "0 or 1");
  g_env.gemm_split = env_choice("DSPARK_GEMM_SPLIT", g_bool, 0, "0 or 1");
  g_env.gemm_tile = g_gemm_tile_n[env_choice("DSPARK_GEMM_TILE", g_gemm_tiles, 0, "auto, 32, 64, 112, 128, 224, 256, 64x112 or 64x128")];
  g_env.gemm_small = env_choice("DSPARK_GEMM_SMALL", g_small, 2, "0, 1 or auto");
  const int att = env_choice("DSPARK_CUDA_ATTENTION", g_attention, 0, "tc, fp32, tc-one-row or tc-long");
  g_env.cuda_attention_tc = att != 1;
  g_env.cuda_attention_rows = att == 3 ? 0 : att == 2 ? 2 : 1;
  g_env.cuda_attention_q = env_choice("DSPARK_CUDA_ATTENTION_Q", g_att_q, 0, "auto, registers or shared");
  g_env.cuda_attention_short = env_choice("DSPARK_CUDA_ATTENTION_SHORT", g_short, 0, "auto, 0 or 1");
  g_env.cuda_pdl = env_choice("DSPARK_CUDA_PDL", g_bool, 1, "0 or 1");
  g_env.cuda_noise = env_choice("DSPARK_CUDA_NOISE", g_bool, 0, "0 or 1");
  g_env.row_parallel = env_choice("DSPARK_ROW_PARALLEL", g_bool, 0, "0 or 1");
  g_env.tp_invariant = env_choice("DSPARK_TP_INVARIANT", g_short, 0, "auto, 0 or 1") - 1; /* auto: -1 */
  g_env.cuda_tp_unverified = env_choice("DSPARK_CUDA_TP_UNVERIFIED", g_bool, 0, "0 or 1");
  g_env.cuda_tail =
      (dsp_tail_kernel)env_choice("DSPARK_CUDA_TAIL", g_tail_names, 0, "auto, register, ring or ring-wgmma");
}

const dsp_env *dsp_env_get(void) {
  pthread_once(&g_once, env_read);
  return &g_env;
}

const char *dsp_tail_kernel_name(dsp_tail_kernel k) {
  return (unsigned)k < sizeof g_tail_names / sizeof g_tail_names[0] - 1 ? g_tail_names[k] : "?";
}

dsp_status dsp_settings_check(void) {
  const dsp_env *e = dsp_env_get();
  return e->error ? dsp_fail(DSP_ERR_ARG, "%s", e->error) : DSP_OK;
}

int dsp_settings_quiet(void) { return dsp_env_get()->quiet; }
int dsp_settings_verbose(void) { return dsp_env_get()->verbose; }
