/* Driver for compare_tokenizer.py and for speed checks.
 *
 *   tok_driver TOKENIZER.json STRINGS OUT
 *     STRINGS: one string per line, hex-encoded bytes (binary-safe).
 *     OUT: per string, "ids separated by spaces<TAB>hex of decode(ids)", or
 *     "!<status name>: <message>" when encoding or decoding fails.
 *   tok_driver --threads N TOKENIZER.json STRINGS
 *     encodes every string from N threads sharing one handle and checks that
 *     all agree with a single-threaded pass.
 *   tok_driver --bench TOKENIZER.json TEXT [REPEATS]
 *     encodes the whole file in one call, prints MB/s and ids. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/tokenizer.h"

static void die(const char *what) {
  fprintf(stderr, "tok_driver: %s: %s\n", what, dsp_error_message());
  exit(1);
}

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(1);
  }
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  for (;;) {
    if (!b) exit(1);
    size_t r = fread(b + n, 1, cap - n, f);
    n += r;
    if (r == 0) break;
    if (n == cap) b = realloc(b, cap *= 2);
  }
  fclose(f);
  *len = n;
  return b;
}

typedef struct {
  char **s;
  size_t *len, count;
} corpus;

static int hexval(int c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

static corpus read_corpus(const char *path) {
  size_t len;
  char *all = read_all(path, &len);
  corpus c = {0};
  size_t cap = 0;
  for (size_t i = 0; i < len;) {
    size_t j = i;
    while (j < len && all[j] != '\n') j++;
    if (c.count == cap) {
      cap = cap ? 2 * cap : 256;
      c.s = realloc(c.s, cap * sizeof *c.s);
      c.len = realloc(c.len, cap * sizeof *c.len);
      if (!c.s || !c.len) exit(1);
    }
    size_t n = (j - i) / 2;
    char *s = malloc(n + 1);
    if (!s) exit(1);
    for (size_t k = 0; k < n; k++) {
      int hi = hexval(all[i + 2 * k]), lo = hexval(all[i + 2 * k + 1]);
      if (hi < 0 || lo < 0) {
        fprintf(stderr, "tok_driver: %s: bad hex\n", path);
        exit(1);
      }
      s[k] = (char)(hi << 4 | lo);
    }
    c.s[c.count] = s;
    c.len[c.count++] = n;
    i = j + 1;
  }
  free(all);
  return c;
}

static void free_corpus(corpus *c) {
  for (size_t i = 0; i < c->count; i++) free(c->s[i]);
  free(c->s);
  free(c->len);
}

/* Encodes into a buffer grown on demand; returns the status. */
static dsp_status encode(const dsp_tokenizer *t, const char *s, size_t len, int32_t **ids, size_t *cap, size_t *n) {
  dsp_status st = dsp_tokenizer_encode(t, s, len, *ids, *cap, n);
  if (st == DSP_ERR_RANGE && *n > *cap) {
    *cap = *n;
    *ids = realloc(*ids, *cap * sizeof **ids);
    if (!*ids) exit(1);
    st = dsp_tokenizer_encode(t, s, len, *ids, *cap, n);
  }
  return st;
}

static int run_compare(const char *tok_path, const char *in, const char *out_path) {
  dsp_tokenizer *t;
  if (dsp_tokenizer_load(tok_path, &t) != DSP_OK) die(tok_path);
  corpus c = read_corpus(in);
  FILE *out = fopen(out_path, "w");
  if (!out) die(out_path);
  int32_t *ids = NULL;
  size_t cap = 0;
  char *buf = NULL;
  size_t bcap = 0;
  for (size_t i = 0; i < c.count; i++) {
    size_t n, len;
    dsp_status st = encode(t, c.s[i], c.len[i], &ids, &cap, &n);
    if (st == DSP_OK) {
      st = dsp_tokenizer_decode(t, ids, n, buf, bcap, &len);
      if (st == DSP_ERR_RANGE && len > bcap) {
        buf = realloc(buf, bcap = len);
        if (!buf) exit(1);
        st = dsp_tokenizer_decode(t, ids, n, buf, bcap, &len);
      }
    }
    if (st != DSP_OK) {
      fprintf(out, "!%s: %s\n", dsp_status_name(st), dsp_error_message());
      continue;
    }
    for (size_t k = 0; k < n; k++) fprintf(out, k ? " %d" : "%d", (int)ids[k]);
    fputc('\t', out);
    for (size_t k = 0; k < len; k++) fprintf(out, "%02x", (unsigned char)buf[k]);
    fputc('\n', out);
  }
  fclose(out);
  free(ids);
  free(buf);
  free_corpus(&c);
  dsp_tokenizer_free(t);
  return 0;
}

typedef struct {
  const dsp_tokenizer *t;
  const corpus *c;
  int32_t **expect;
  size_t *expect_n;
  int bad;
} thread_job;

static void *thread_main(void *p) {
  thread_job *j = p;
  int32_t *ids = NULL;
  size_t cap = 0;
  for (int round = 0; round < 3; round++)
    for (size_t i = 0; i < j->c->count; i++) {
      size_t n;
      if (encode(j->t, j->c->s[i], j->c->len[i], &ids, &cap, &n) != DSP_OK || n != j->expect_n[i] ||
          (n && memcmp(ids, j->expect[i], n * sizeof *ids) != 0))
        j->bad++;
    }
  free(ids);
  return NULL;
}

static int run_threads(int nt, const char *tok_path, const char *in) {
  dsp_tokenizer *t;
  if (dsp_tokenizer_load(tok_path, &t) != DSP_OK) die(tok_path);
  corpus c = read_corpus(in);
  int32_t **expect = calloc(c.count, sizeof *expect);
  size_t *expect_n = calloc(c.count, sizeof *expect_n);
  if ((!expect || !expect_n) && c.count) exit(1);
  for (size_t i = 0; i < c.count; i++) {
    size_t cap = 0;
    if (encode(t, c.s[i], c.len[i], &expect[i], &cap, &expect_n[i]) != DSP_OK) die("encode");
  }
  pthread_t th[64];
  thread_job jobs[64];
  if (nt < 1 || nt > 64) nt = 4;
  for (int k = 0; k < nt; k++) {
    jobs[k] = (thread_job){t, &c, expect, expect_n, 0};
    if (pthread_create(&th[k], NULL, thread_main, &jobs[k]) != 0) exit(1);
  }
  int bad = 0;
  for (int k = 0; k < nt; k++) {
    pthread_join(th[k], NULL);
    bad += jobs[k].bad;
  }
  printf("threads: %d x %zu strings x 3 rounds, %d disagreements\n", nt, c.count, bad);
  for (size_t i = 0; i < c.count; i++) free(expect[i]);
  free(expect);
  free(expect_n);
  free_corpus(&c);
  dsp_tokenizer_free(t);
  return bad != 0;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int run_bench(const char *tok_path, const char *text_path, int repeats) {
  double t0 = now();
  dsp_tokenizer *t;
  if (dsp_tokenizer_load(tok_path, &t) != DSP_OK) die(tok_path);
  double t1 = now();
  size_t len;
  char *text = read_all(text_path, &len);
  int32_t *ids = NULL;
  size_t cap = 0, n = 0;
  double best = 1e30;
  for (int r = 0; r < repeats; r++) {
    double a = now();
    if (encode(t, text, len, &ids, &cap, &n) != DSP_OK) die("encode");
    double b = now();
    if (b - a < best) best = b - a;
  }
  char *buf = malloc(len * 2 + 16);
  size_t dlen;
  double a = now();
  if (!buf || dsp_tokenizer_decode(t, ids, n, buf, len * 2 + 16, &dlen) != DSP_OK) die("decode");
  double b = now();
  printf("load %.3f s; encode %zu bytes -> %zu ids in %.4f s (best of %d): %.2f MB/s; decode %.4f s\n", t1 - t0, len, n,
         best, repeats, (double)len / best / 1e6, b - a);
  free(buf);
  free(ids);
  free(text);
  dsp_tokenizer_free(t);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 5 && strcmp(argv[1], "--threads") == 0) return run_threads(atoi(argv[2]), argv[3], argv[4]);
  if (argc >= 4 && strcmp(argv[1], "--bench") == 0) return run_bench(argv[2], argv[3], argc > 4 ? atoi(argv[4]) : 3);
  if (argc == 4) return run_compare(argv[1], argv[2], argv[3]);
  fprintf(stderr,
          "usage: tok_driver TOKENIZER.json STRINGS.hex OUT\n"
          "       tok_driver --threads N TOKENIZER.json STRINGS.hex\n"
          "       tok_driver --bench TOKENIZER.json TEXT [REPEATS]\n");
  return 2;
}
