/* safetensors reader and writer. Expected bytes and values are written out
 * from the format (u64 LE header length, JSON header, data section), not
 * taken from our own writer: bad files are built byte by byte here. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include <cmocka.h>

#include "dspark.h"
#include "core/tensor.h"

/* ---- helpers ---------------------------------------------------------------- */

/* Writes `n` raw bytes to a new temporary file; its path goes to `path`. */
static void tmp_write(char path[64], const void *bytes, size_t n) {
  snprintf(path, 64, "/tmp/dsp_st_test_XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, bytes, n), (ssize_t)n);
  assert_int_equal(close(fd), 0);
}

/* A file from a header length (as stored), header text and data bytes. */
static void tmp_st(char path[64], uint64_t hlen, const char *json, const void *data, size_t dlen) {
  size_t jn = strlen(json);
  uint8_t *b = malloc(8 + jn + dlen + 1);
  assert_non_null(b);
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(hlen >> (8 * i));
  memcpy(b + 8, json, jn);
  if (dlen) memcpy(b + 8 + jn, data, dlen);
  tmp_write(path, b, 8 + jn + dlen);
  free(b);
}

static void tmp_st_json(char path[64], const char *json, const void *data, size_t dlen) {
  tmp_st(path, strlen(json), json, data, dlen);
}

static uint8_t *slurp(const char *path, size_t *n) {
  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  fseek(fp, 0, SEEK_END);
  long len = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)len + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)len, fp), (size_t)len);
  fclose(fp);
  *n = (size_t)len;
  return b;
}

static int dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static void expect_msg(const char *a, const char *b) {
  const char *m = dsp_error_message();
  if (a && !strstr(m, a)) fail_msg("message \"%s\" lacks \"%s\"", m, a);
  if (b && !strstr(m, b)) fail_msg("message \"%s\" lacks \"%s\"", m, b);
}

/* ---- writer then reader ------------------------------------------------------ */

/* The writer's bytes, pinned from the format: one I32 tensor {1, -2}. */
static void test_writer_exact_bytes(void **st) {
  (void)st;
  char path[64];
  tmp_write(path, "", 0);
  dsp_st_writer *w;
  assert_int_equal(dsp_st_writer_create(path, &w), DSP_OK);
  int32_t v[2] = {1, -2};
  int64_t sh[1] = {2};
  dsp_tensor t = dsp_tensor_view(v, DSP_I32, 1, sh);
  assert_int_equal(dsp_st_writer_add(w, "x", &t), DSP_OK);
  assert_int_equal(dsp_st_writer_finish(w), DSP_OK);

  const char *json = "{\"x\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  size_t jn = strlen(json); /* 54: padded with two spaces to 56 */
  assert_int_equal(jn, 54);
  uint8_t want[8 + 56 + 8];
  memset(want, 0, sizeof want);
  want[0] = 56;
  memcpy(want + 8, json, jn);
  want[8 + 54] = ' ';
  want[8 + 55] = ' ';
  const uint8_t data[8] = {1, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff};
  memcpy(want + 64, data, 8);
  size_t n;
  uint8_t *got = slurp(path, &n);
  assert_int_equal(n, sizeof want);
  assert_memory_equal(got, want, sizeof want);
  free(got);
  unlink(path);
}

static void test_round_trip(void **st) {
  (void)st;
  char dir[] = "/tmp/dsp_st_rt_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof path, "%s/w.safetensors", dir);

  const uint16_t bf[6] = {0x3F80, 0xBF80, 0x7F80, 0xFF80, 0x7FC0, 0x0001}; /* 1, -1, inf, -inf, NaN, subnormal */
  float base[4][5];
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 5; c++) base[r][c] = (float)(r * 10 + c) + 0.5f;
  const int64_t i64[3] = {-1, INT64_MAX, INT64_MIN};
  const int32_t i32[4] = {7, -7, INT32_MAX, INT32_MIN};
  const int32_t scalar = 42;

  dsp_st_writer *w;
  assert_int_equal(dsp_st_writer_create(path, &w), DSP_OK);
  int64_t sh_bf[2] = {2, 3}, sh_i64[1] = {3}, sh_i32[2] = {2, 2}, sh_empty[2] = {0, 7};
  dsp_tensor t_bf = dsp_tensor_view((void *)bf, DSP_BF16, 2, sh_bf);
  dsp_tensor full = dsp_tensor_2d(base, DSP_F32, 4, 5);
  dsp_tensor t_f32 = dsp_tensor_cols(&full, 1, 4); /* [4, 3], row stride 5: not contiguous */
  assert_false(dsp_tensor_is_contiguous(&t_f32));
  dsp_tensor t_i64 = dsp_tensor_view((void *)i64, DSP_I64, 1, sh_i64);
  dsp_tensor t_i32 = dsp_tensor_view((void *)i32, DSP_I32, 2, sh_i32);
  dsp_tensor t_empty = dsp_tensor_view(NULL, DSP_F32, 2, sh_empty);
  dsp_tensor t_scalar = dsp_tensor_view((void *)&scalar, DSP_I32, 0, NULL);
  assert_int_equal(dsp_st_writer_add(w, "w.bf16", &t_bf), DSP_OK);
  assert_int_equal(dsp_st_writer_add(w, "w.f32_strided", &t_f32), DSP_OK);
  assert_int_equal(dsp_st_writer_add(w, "w.i64", &t_i64), DSP_OK);
  assert_int_equal(dsp_st_writer_add(w, "w.empty", &t_empty), DSP_OK);
  assert_int_equal(dsp_st_writer_add(w, "w.i32", &t_i32), DSP_OK);
  assert_int_equal(dsp_st_writer_add(w, "w.scalar", &t_scalar), DSP_OK);
  /* Rejected adds leave the writer as it was. */
  assert_int_equal(dsp_st_writer_add(w, "w.i64", &t_i64), DSP_ERR_ARG);
  assert_int_equal(dsp_st_writer_add(w, "__metadata__", &t_i64), DSP_ERR_ARG);
  assert_int_equal(dsp_st_writer_add(w, "", &t_i64), DSP_ERR_ARG);
  assert_int_equal(dsp_st_writer_add(w, "bad\xff", &t_i64), DSP_ERR_ARG);
  dsp_tensor t_null = dsp_tensor_view(NULL, DSP_I64, 1, sh_i64);
  assert_int_equal(dsp_st_writer_add(w, "w.null", &t_null), DSP_ERR_ARG);
  dsp_tensor t_bad = t_i64;
  t_bad.dtype = DSP_DTYPE_COUNT;
  assert_int_equal(dsp_st_writer_add(w, "w.bad", &t_bad), DSP_ERR_DTYPE);
  t_bad = t_i64;
  t_bad.shape[0] = -1;
  assert_int_equal(dsp_st_writer_add(w, "w.neg", &t_bad), DSP_ERR_SHAPE);
  assert_int_equal(dsp_st_writer_meta(w, "format", "pt"), DSP_OK);
  assert_int_equal(dsp_st_writer_meta(w, "note", "first"), DSP_OK);
  assert_int_equal(dsp_st_writer_meta(w, "note", "h\xc3\xa9llo"), DSP_OK); /* replaces */
  assert_int_equal(dsp_st_writer_finish(w), DSP_OK);
  assert_int_equal(dir_entries(dir), 1); /* no temporary left behind */

  /* The header length is a multiple of 8 and the data section is exactly
   * 12 + 48 + 24 + 0 + 16 + 4 bytes. */
  size_t n;
  uint8_t *raw = slurp(path, &n);
  uint64_t hn = 0;
  for (int i = 7; i >= 0; i--) hn = hn << 8 | raw[i];
  assert_int_equal(hn % 8, 0);
  assert_int_equal(n, 8 + hn + 104);
  free(raw);

  dsp_st_file *f;
  assert_int_equal(dsp_st_open(path, &f), DSP_OK);
  assert_string_equal(dsp_error_message(), "");
  assert_string_equal(dsp_st_path(f), path);
  assert_int_equal(dsp_st_count(f), 6);
  const char *order[6] = {"w.bf16", "w.f32_strided", "w.i64", "w.empty", "w.i32", "w.scalar"};
  for (int i = 0; i < 6; i++) assert_string_equal(dsp_st_name(f, i), order[i]);
  assert_null(dsp_st_name(f, 6));
  assert_null(dsp_st_name(f, -1));
  const dsp_st_entry *e = dsp_st_entry_at(f, 2);
  assert_string_equal(e->dtype, "I64");
  assert_int_equal(e->begin, 60);
  assert_int_equal(e->end, 84);
  assert_string_equal(dsp_st_metadata(f, "format"), "pt");
  assert_string_equal(dsp_st_metadata(f, "note"), "h\xc3\xa9llo");
  assert_null(dsp_st_metadata(f, "absent"));

  dsp_dtype dt;
  int32_t nd;
  int64_t shape[DSP_MAX_DIMS];
  assert_int_equal(dsp_st_info(f, "w.f32_strided", &dt, &nd, shape), DSP_OK);
  assert_int_equal(dt, DSP_F32);
  assert_int_equal(nd, 2);
  assert_int_equal(shape[0], 4);
  assert_int_equal(shape[1], 3);

  dsp_tensor v;
  assert_int_equal(dsp_st_view(f, "w.bf16", &v), DSP_OK);
  assert_int_equal(v.dtype, DSP_BF16);
  assert_int_equal(v.shape[0], 2);
  assert_int_equal(v.shape[1], 3);
  assert_memory_equal(v.data, bf, sizeof bf);

  assert_int_equal(dsp_st_view(f, "w.f32_strided", &v), DSP_OK);
  assert_true(dsp_tensor_is_contiguous(&v));
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 3; c++) assert_true(((const float *)v.data)[r * 3 + c] == (float)(r * 10 + c + 1) + 0.5f);

  /* w.i64 starts at data byte 60 (added after 12 + 48 bytes): no aligned
   * view, but its rows copy out. */
  assert_int_equal(dsp_st_view(f, "w.i64", &v), DSP_ERR_UNSUPPORTED);
  int64_t i64_got[3];
  assert_int_equal(dsp_st_read_rows(f, "w.i64", 0, 3, i64_got), DSP_OK);
  assert_memory_equal(i64_got, i64, sizeof i64);
  assert_int_equal(dsp_st_view(f, "w.i32", &v), DSP_OK);
  assert_memory_equal(v.data, i32, sizeof i32);

  assert_int_equal(dsp_st_info(f, "w.empty", &dt, &nd, shape), DSP_OK);
  assert_int_equal(nd, 2);
  assert_int_equal(shape[0], 0);
  assert_int_equal(shape[1], 7);
  assert_int_equal(dsp_st_view(f, "w.empty", &v), DSP_OK);
  assert_int_equal(dsp_tensor_numel(&v), 0);
  assert_int_equal(dsp_st_read_rows(f, "w.empty", 0, 0, NULL), DSP_OK);

  assert_int_equal(dsp_st_view(f, "w.scalar", &v), DSP_OK);
  assert_int_equal(v.ndim, 0);
  assert_int_equal(*(const int32_t *)v.data, 42);
  assert_int_equal(dsp_st_read_rows(f, "w.scalar", 0, 1, NULL), DSP_ERR_SHAPE);

  assert_int_equal(dsp_st_info(f, "nope", NULL, NULL, NULL), DSP_ERR_MISSING);
  expect_msg(path, "nope");
  dsp_st_close(f);

  /* Finishing onto an existing file replaces it whole. */
  assert_int_equal(dsp_st_writer_create(path, &w), DSP_OK);
  assert_int_equal(dsp_st_writer_add(w, "only", &t_i32), DSP_OK);
  assert_int_equal(dsp_st_writer_finish(w), DSP_OK);
  assert_int_equal(dsp_st_open(path, &f), DSP_OK);
  assert_int_equal(dsp_st_count(f), 1);
  assert_null(dsp_st_metadata(f, "format"));
  dsp_st_close(f);
  assert_int_equal(dir_entries(dir), 1);
  unlink(path);
  rmdir(dir);
}

static void test_read_rows(void **st) {
  (void)st;
  /* F32 [6, 3], element (r, c) = r * 10 + c, written by hand. */
  float d[18];
  for (int r = 0; r < 6; r++)
    for (int c = 0; c < 3; c++) d[r * 3 + c] = (float)(r * 10 + c);
  char path[64];
  tmp_st_json(path, "{\"m\":{\"dtype\":\"F32\",\"shape\":[6,3],\"data_offsets\":[0,72]}}", d, sizeof d);
  dsp_st_file *f;
  assert_int_equal(dsp_st_open(path, &f), DSP_OK);
  float out[9] = {0};
  assert_int_equal(dsp_st_read_rows(f, "m", 2, 3, out), DSP_OK);
  const float want[9] = {20, 21, 22, 30, 31, 32, 40, 41, 42};
  assert_memory_equal(out, want, sizeof want);
  assert_int_equal(dsp_st_read_rows(f, "m", 5, 1, out), DSP_OK);
  assert_true(out[0] == 50 && out[1] == 51 && out[2] == 52);
  assert_int_equal(dsp_st_read_rows(f, "m", 6, 0, out), DSP_OK);
  assert_int_equal(dsp_st_read_rows(f, "m", -1, 1, out), DSP_ERR_RANGE);
  expect_msg(path, "'m'");
  assert_int_equal(dsp_st_read_rows(f, "m", 0, 7, out), DSP_ERR_RANGE);
  assert_int_equal(dsp_st_read_rows(f, "m", 4, 3, out), DSP_ERR_RANGE);
  assert_int_equal(dsp_st_read_rows(f, "m", 7, 0, out), DSP_ERR_RANGE);
  assert_int_equal(dsp_st_read_rows(f, "m", 1, -1, out), DSP_ERR_RANGE);
  assert_int_equal(dsp_st_read_rows(f, "m", INT64_MAX, INT64_MAX, out), DSP_ERR_RANGE);
  assert_int_equal(dsp_st_read_rows(f, "m", 1, 1, NULL), DSP_ERR_ARG);
  assert_int_equal(dsp_st_read_rows(f, "x", 0, 1, out), DSP_ERR_MISSING);
  dsp_st_close(f);
  unlink(path);
}

/* Open accepts every dtype name and any rank; the data accessors refuse what
 * dsp_dtype cannot hold. Also: gaps between ranges, an empty range inside
 * another, and a tensor whose bytes are not aligned for a view. */
static void test_accessor_limits(void **st) {
  (void)st;
  const char *json =
      "{\"__metadata__\":{\"a\":\"b\"},"
      "\"d\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]},"
      "\"u\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[8,9]},"
      "\"f\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9,13]},"
      "\"five\":{\"dtype\":\"I32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[16,20]},"
      "\"hole\":{\"dtype\":\"I32\",\"shape\":[0],\"data_offsets\":[18,18]},"
      "\"g\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[24,32]}}";
  char hdr[512];
  size_t jn = strlen(json), padded = (jn + 7) / 8 * 8;
  memcpy(hdr, json, jn);
  memset(hdr + jn, ' ', padded - jn);
  hdr[padded] = 0;
  uint8_t data[32] = {0};
  const float fv = 1.5f;
  memcpy(data + 9, &fv, 4);
  data[24] = 5;
  data[28] = 6;
  char path[64];
  tmp_st_json(path, hdr, data, sizeof data);
  dsp_st_file *f;
  assert_int_equal(dsp_st_open(path, &f), DSP_OK);
  assert_int_equal(dsp_st_count(f), 6);
  assert_string_equal(dsp_st_entry_at(f, 0)->dtype, "F64");
  assert_int_equal(dsp_st_entry_at(f, 3)->ndim, 5);

  assert_int_equal(dsp_st_info(f, "d", NULL, NULL, NULL), DSP_ERR_DTYPE);
  expect_msg(path, "unsupported dtype F64");
  expect_msg("'d'", NULL);
  dsp_tensor v;
  assert_int_equal(dsp_st_view(f, "u", &v), DSP_ERR_DTYPE);
  uint8_t buf[8];
  assert_int_equal(dsp_st_read_rows(f, "d", 0, 1, buf), DSP_ERR_DTYPE);
  assert_int_equal(dsp_st_info(f, "five", NULL, NULL, NULL), DSP_ERR_SHAPE);
  expect_msg(path, "'five'");

  /* "f" starts at data byte 9: the header is a multiple of 8 long, so the
   * mapping puts it at an address that is 1 mod 4. */
  assert_int_equal(dsp_st_view(f, "f", &v), DSP_ERR_UNSUPPORTED);
  expect_msg(path, "'f'");
  float got = 0;
  assert_int_equal(dsp_st_read_rows(f, "f", 0, 1, &got), DSP_OK);
  assert_true(got == 1.5f);

  assert_int_equal(dsp_st_view(f, "g", &v), DSP_OK);
  assert_int_equal(((const int32_t *)v.data)[0], 5);
  assert_int_equal(((const int32_t *)v.data)[1], 6);
  assert_int_equal(dsp_st_info(f, "hole", NULL, NULL, NULL), DSP_OK);
  assert_string_equal(dsp_st_metadata(f, "a"), "b");
  dsp_st_close(f);

  /* The same image from memory. */
  size_t n;
  uint8_t *img = slurp(path, &n);
  assert_int_equal(dsp_st_open_memory(img, n, "label-x", &f), DSP_OK);
  assert_string_equal(dsp_st_path(f), "label-x");
  assert_int_equal(dsp_st_read_rows(f, "g", 1, 1, &got), DSP_OK);
  dsp_st_close(f);
  free(img);
  unlink(path);
}

/* ---- bad files ------------------------------------------------------------------ */

typedef struct {
  const char *what;
  int raw;        /* 1: `json` bytes are the whole file (rawlen bytes) */
  size_t rawlen;
  uint64_t hlen;  /* stored header length; 0: strlen(json) */
  const char *json;
  size_t dlen;    /* zero bytes of data after the header */
  dsp_status want;
  const char *tensor; /* must appear in the message; NULL: none involved */
} bad_case;

#define T1(dt, shape, offs) "{\"t\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":" offs "}}"

static const bad_case bad_cases[] = {
    {"truncated", 1, 5, 0, "\x10\0\0\0\0", 0, DSP_ERR_FORMAT, NULL},
    {"empty file", 1, 0, 0, "", 0, DSP_ERR_FORMAT, NULL},
    {"header length past EOF", 0, 0, 1000, "{}", 0, DSP_ERR_FORMAT, NULL},
    {"header length absurd", 0, 0, (uint64_t)1 << 62, "{}", 0, DSP_ERR_FORMAT, NULL},
    {"invalid JSON", 0, 0, 0, "{\"t\":", 0, DSP_ERR_FORMAT, NULL},
    {"trailing bytes in header", 0, 0, 0, "{} x", 0, DSP_ERR_FORMAT, NULL},
    {"not UTF-8", 0, 0, 0, "{\"t\xff\":{}}", 0, DSP_ERR_FORMAT, NULL},
    {"JSON array at top", 0, 0, 0, "[1,2]", 0, DSP_ERR_FORMAT, NULL},
    {"duplicate keys", 0, 0, 0,
     "{\"dup\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
     "\"dup\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
     2, DSP_ERR_FORMAT, "dup"},
    {"entry not an object", 0, 0, 0, "{\"t\":[1]}", 0, DSP_ERR_FORMAT, "'t'"},
    {"unknown dtype", 0, 0, 0, T1("Q4", "[1]", "[0,1]"), 1, DSP_ERR_FORMAT, "'t'"},
    {"dtype not a string", 0, 0, 0, "{\"t\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, DSP_ERR_FORMAT, "'t'"},
    {"missing shape", 0, 0, 0, "{\"t\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, DSP_ERR_FORMAT, "'t'"},
    {"shape with negative dim", 0, 0, 0, T1("F32", "[2,-1]", "[0,0]"), 0, DSP_ERR_FORMAT, "'t'"},
    {"shape with a fraction", 0, 0, 0, T1("U8", "[1.0]", "[0,1]"), 1, DSP_ERR_FORMAT, "'t'"},
    {"dims overflow", 0, 0, 0, T1("U8", "[4294967296,4294967296]", "[0,0]"), 0, DSP_ERR_FORMAT, "'t'"},
    {"dims overflow behind a zero", 0, 0, 0, T1("U8", "[0,4294967296,4294967296]", "[0,0]"), 0, DSP_ERR_FORMAT, "'t'"},
    {"shape x dtype size != range", 0, 0, 0, T1("F32", "[2,3]", "[0,20]"), 24, DSP_ERR_FORMAT, "'t'"},
    {"data_offsets past the end", 0, 0, 0, T1("F32", "[2]", "[4,12]"), 8, DSP_ERR_FORMAT, "'t'"},
    {"begin > end", 0, 0, 0, T1("U8", "[0]", "[4,2]"), 8, DSP_ERR_FORMAT, "'t'"},
    {"negative offset", 0, 0, 0, T1("U8", "[1]", "[-1,0]"), 8, DSP_ERR_FORMAT, "'t'"},
    {"three offsets", 0, 0, 0, T1("U8", "[1]", "[0,1,2]"), 8, DSP_ERR_FORMAT, "'t'"},
    {"missing data_offsets", 0, 0, 0, "{\"t\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, DSP_ERR_FORMAT, "'t'"},
    {"overlapping ranges", 0, 0, 0,
     "{\"first\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"second\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     8, DSP_ERR_FORMAT, "'second'"},
    {"range inside another", 0, 0, 0,
     "{\"big\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
     "\"small\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},"
     "\"after\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[6,7]}}",
     8, DSP_ERR_FORMAT, "'big'"},
    {"non-string metadata value", 0, 0, 0, "{\"__metadata__\":{\"epoch\":3}}", 0, DSP_ERR_FORMAT, "'epoch'"},
    {"metadata not an object", 0, 0, 0, "{\"__metadata__\":\"x\"}", 0, DSP_ERR_FORMAT, NULL},
};

static void test_bad_files(void **st) {
  (void)st;
  uint8_t zeros[64] = {0};
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    const bad_case *c = &bad_cases[i];
    char path[64];
    if (c->raw) tmp_write(path, c->json, c->rawlen);
    else tmp_st(path, c->hlen ? c->hlen : strlen(c->json), c->json, zeros, c->dlen);
    dsp_st_file *f = (dsp_st_file *)1;
    dsp_status s = dsp_st_open(path, &f);
    if (s != c->want) fail_msg("%s: status %s, want %s (%s)", c->what, dsp_status_name(s), dsp_status_name(c->want),
                               dsp_error_message());
    assert_null(f);
    const char *m = dsp_error_message();
    if (!strstr(m, path)) fail_msg("%s: message \"%s\" lacks the path", c->what, m);
    if (c->tensor && !strstr(m, c->tensor)) fail_msg("%s: message \"%s\" lacks %s", c->what, m, c->tensor);
    print_message("  %-28s %s\n", c->what, m);

    /* The same bytes from memory fail the same way. */
    size_t n;
    uint8_t *img = slurp(path, &n);
    assert_int_equal(dsp_st_open_memory(img, n, "mem", &f), c->want);
    free(img);
    unlink(path);
  }
}

static void test_missing_file(void **st) {
  (void)st;
  dsp_st_file *f;
  const char *p = "/tmp/dsp_st_test_no_such_dir/none.safetensors";
  assert_int_equal(dsp_st_open(p, &f), DSP_ERR_IO);
  assert_null(f);
  expect_msg(p, "No such file");
  assert_int_equal(dsp_st_open("/tmp", &f), DSP_ERR_IO);
  expect_msg("/tmp", "not a regular file");
}

/* ---- the writer never leaves a partial file ---------------------------------------- */

static void test_writer_all_or_nothing(void **st) {
  (void)st;
  char dir[] = "/tmp/dsp_st_w_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[160];
  int32_t v[4] = {1, 2, 3, 4};
  dsp_tensor t = dsp_tensor_2d(v, DSP_I32, 2, 2);

  snprintf(path, sizeof path, "%s/a.safetensors", dir);
  dsp_st_writer *w;
  assert_int_equal(dsp_st_writer_create(path, &w), DSP_OK);
  assert_int_equal(dsp_st_writer_add(w, "t", &t), DSP_OK);
  dsp_st_writer_abort(w);
  assert_int_equal(dir_entries(dir), 0);

  snprintf(path, sizeof path, "%s/missing/a.safetensors", dir);
  assert_int_equal(dsp_st_writer_create(path, &w), DSP_OK);
  assert_int_equal(dsp_st_writer_add(w, "t", &t), DSP_OK);
  assert_int_equal(dsp_st_writer_finish(w), DSP_ERR_IO);
  expect_msg(path, NULL);
  assert_int_equal(dir_entries(dir), 0);

  /* rename() onto a directory fails after the temporary was written: it must go. */
  snprintf(path, sizeof path, "%s/adir", dir);
  assert_int_equal(mkdir(path, 0755), 0);
  char inner[200];
  snprintf(inner, sizeof inner, "%s/x", path);
  assert_int_equal(mkdir(inner, 0755), 0);
  assert_int_equal(dsp_st_writer_create(path, &w), DSP_OK);
  assert_int_equal(dsp_st_writer_add(w, "t", &t), DSP_OK);
  assert_int_equal(dsp_st_writer_finish(w), DSP_ERR_IO);
  assert_int_equal(dir_entries(dir), 1); /* only adir */
  rmdir(inner);
  rmdir(path);
  rmdir(dir);

  assert_int_equal(dsp_st_writer_create(NULL, &w), DSP_ERR_ARG);
  assert_int_equal(dsp_st_writer_finish(NULL), DSP_ERR_ARG);
  dsp_st_writer_abort(NULL);
}

/* ---- read_rows touches only its rows ---------------------------------------------------
 * Two proofs on a 16 MiB BF16 tensor [64, 128 Ki] (256 KiB a row):
 * 1. mprotect(PROT_NONE) every page of the mapping outside the wanted rows'
 *    pages, then read them: any access elsewhere would fault. This holds
 *    whatever the page cache does.
 * 2. mincore: evict the file from the page cache, forbid read-around on the
 *    mapping (MADV_RANDOM), read the rows, and check which pages are resident.
 *    Skipped (with a note) when the file system does not let us evict. */

#define BIG_ROWS 64
#define BIG_COLS (128 * 1024)

static char big_path[64];

static int big_setup(void **st) {
  (void)st;
  size_t row = (size_t)BIG_COLS * 2;
  uint16_t *d = malloc(row * BIG_ROWS);
  if (!d) return -1;
  for (size_t r = 0; r < BIG_ROWS; r++)
    for (size_t c = 0; c < BIG_COLS; c++) d[r * BIG_COLS + c] = (uint16_t)(r * 7 + c);
  char json[160];
  snprintf(json, sizeof json, "{\"big\":{\"dtype\":\"BF16\",\"shape\":[%d,%d],\"data_offsets\":[0,%zu]}}        ",
           BIG_ROWS, BIG_COLS, row * BIG_ROWS);
  json[(strlen(json) - 8 + 7) / 8 * 8] = 0; /* pad to 8 with the spaces */
  tmp_st_json(big_path, json, d, row * BIG_ROWS);
  free(d);
  return 0;
}

static int big_teardown(void **st) {
  (void)st;
  unlink(big_path);
  return 0;
}

static void check_rows(const uint16_t *got, int64_t r0, int64_t n) {
  for (int64_t r = r0; r < r0 + n; r++)
    for (size_t c = 0; c < BIG_COLS; c++)
      if (got[(size_t)(r - r0) * BIG_COLS + c] != (uint16_t)(r * 7 + c)) fail_msg("row %lld col %zu", (long long)r, c);
}

static void test_rows_touch_only_their_pages(void **st) {
  (void)st;
  const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  const size_t row = (size_t)BIG_COLS * 2;
  const int64_t r0 = 30, n = 3;
  dsp_st_file *f;
  assert_int_equal(dsp_st_open(big_path, &f), DSP_OK);
  dsp_tensor v;
  assert_int_equal(dsp_st_view(f, "big", &v), DSP_OK); /* an address; nothing read */
  uintptr_t data = (uintptr_t)v.data;
  uintptr_t lo = (data + (uintptr_t)r0 * row) / pg * pg;
  uintptr_t hi = (data + (uintptr_t)(r0 + n) * row + pg - 1) / pg * pg;
  uintptr_t map0 = (data - 1) / pg * pg; /* the page holding the header's tail */
  uintptr_t map1 = (data + row * BIG_ROWS + pg - 1) / pg * pg;
  assert_int_equal(mprotect((void *)map0, lo - map0, PROT_NONE), 0);
  assert_int_equal(mprotect((void *)hi, map1 - hi, PROT_NONE), 0);
  uint16_t *out = malloc(row * (size_t)n);
  assert_non_null(out);
  assert_int_equal(dsp_st_read_rows(f, "big", r0, n, out), DSP_OK);
  check_rows(out, r0, n);
  assert_int_equal(mprotect((void *)map0, map1 - map0, PROT_READ), 0);
  dsp_st_close(f);

  /* 2. page-cache residency */
  int fd = open(big_path, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(dsp_st_open(big_path, &f), DSP_OK);
  assert_int_equal(dsp_st_view(f, "big", &v), DSP_OK);
  data = (uintptr_t)v.data;
  uintptr_t first = (data + pg - 1) / pg * pg; /* first page holding only data */
  size_t npages = (map1 - first) / pg;
  /* Drop our page-table entries for the data (fault-around may have mapped
   * cached pages next to the header), then evict the file's clean pages. */
  assert_int_equal(madvise((void *)first, map1 - first, MADV_RANDOM), 0);
  assert_int_equal(madvise((void *)first, map1 - first, MADV_DONTNEED), 0);
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  unsigned char *res = malloc(npages);
  assert_non_null(res);
  assert_int_equal(mincore((void *)first, map1 - first, res), 0);
  size_t resident = 0;
  for (size_t i = 0; i < npages; i++) resident += res[i] & 1;
  if (resident > 0) {
    print_message("  mincore proof skipped: %zu of %zu data pages stay cached after POSIX_FADV_DONTNEED\n", resident,
                  npages);
  } else {
    assert_int_equal(dsp_st_read_rows(f, "big", r0, n, out), DSP_OK);
    check_rows(out, r0, n);
    assert_int_equal(mincore((void *)first, map1 - first, res), 0);
    size_t in_rows = 0, outside = 0;
    for (size_t i = 0; i < npages; i++) {
      uintptr_t p = first + i * pg;
      if (p >= lo && p < hi) in_rows += res[i] & 1;
      else outside += res[i] & 1;
    }
    print_message("  mincore: %zu of %zu pages of rows [%lld, %lld) resident, %zu other data pages resident\n", in_rows,
                  (size_t)((hi - lo) / pg), (long long)r0, (long long)(r0 + n), outside);
    assert_int_equal(in_rows, (hi - lo) / pg);
    assert_int_equal(outside, 0);
  }
  free(res);
  free(out);
  close(fd);
  dsp_st_close(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_writer_exact_bytes),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_read_rows),
      cmocka_unit_test(test_accessor_limits),
      cmocka_unit_test(test_bad_files),
      cmocka_unit_test(test_missing_file),
      cmocka_unit_test(test_writer_all_or_nothing),
      cmocka_unit_test_setup_teardown(test_rows_touch_only_their_pages, big_setup, big_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
