#include "core/env.h"

#include <pthread.h>
#include <stdlib.h>

static dsp_env g_env;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static int env_int(const char *name, int dflt) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char *end;
  long v = strtol(s, &end, 10);
  return (*end || v < 0 || v > 1 << 20) ? dflt : (int)v;
}

static const char *env_str(const char *name, const char *dflt) {
  const char *s = getenv(name);
  return (s && *s) ? s : dflt;
}

static void env_read(void) {
  g_env.threads = env_int("DSPARK_THREADS", 0);
  g_env.cpu_kernel = env_str("DSPARK_CPU_KERNEL", "auto");
  g_env.quiet = env_int("DSPARK_QUIET", 0);
  g_env.buckets = env_str("DSPARK_BUCKETS", "1,2,4,8,16,32,64,128");
  g_env.graphs = env_int("DSPARK_GRAPHS", 1);
  g_env.cuda_strict = env_int("DSPARK_CUDA_STRICT", 0);
  g_env.cuda_tail = env_int("DSPARK_CUDA_TAIL", 0);
}

const dsp_env *dsp_env_get(void) {
  pthread_once(&g_once, env_read);
  return &g_env;
}
