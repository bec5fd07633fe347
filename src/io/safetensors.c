/* safetensors reader: map, validate the header once, then hand out views and
 * row ranges without further checks. */
#include "dspark.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"
#include "core/tensor.h"

/* Every dtype name the format defines, with its width in bits (F4 and F6 pack
 * several elements per byte) and our dtype where we have one. */
typedef struct {
  const char *name;
  int32_t bits;
  int32_t dt; /* a dsp_dtype, or -1 */
} st_dtype;

static const st_dtype st_dtypes[] = {
    {"BOOL", 8, -1},    {"U8", 8, -1},       {"I8", 8, -1},       {"F8_E5M2", 8, -1},
    {"F8_E4M3", 8, -1}, {"F8_E8M0", 8, -1},  {"F4", 4, -1},       {"F6_E2M3", 6, -1},
    {"F6_E3M2", 6, -1}, {"I16", 16, -1},     {"U16", 16, -1},     {"F16", 16, DSP_F16},
    {"BF16", 16, DSP_BF16}, {"I32", 32, DSP_I32}, {"U32", 32, -1}, {"F32", 32, DSP_F32},
    {"C64", 64, -1},    {"F64", 64, -1},     {"I64", 64, DSP_I64}, {"U64", 64, -1},
};

typedef struct {
  dsp_st_entry e;
  const st_dtype *dtype;
} st_tensor;

struct dsp_st_file {
  char *path;
  const uint8_t *map; /* the mapping when we own one, else NULL */
  size_t map_len;
  const uint8_t *data; /* first byte of the data section */
  uint64_t data_len;
  json_t *root; /* owns the names and the metadata strings */
  json_t *meta; /* borrowed from root; NULL when absent */
  int n;
  st_tensor *t;    /* sorted by (begin, end, name) */
  const st_tensor **by_name; /* into t, sorted by name */
  int64_t *dims;   /* every tensor's shape, back to back */
};

/* Messages quote at most this much of a name so that the path survives. */
#define NAME_FMT "'%.200s'"

static const st_dtype *st_dtype_find(const char *s) {
  for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
    if (strcmp(st_dtypes[i].name, s) == 0) return &st_dtypes[i];
  return NULL;
}

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* numel of a shape whose values are >= 0. The product of the non-zero dims must
 * fit in int64 together with the element width, so that no stride or byte
 * count computed later from this shape can overflow, even when a zero dim
 * makes the tensor empty. */
static int st_numel(const int64_t *shape, int32_t ndim, int32_t bits, int64_t *numel) {
  int64_t nz = 1;
  int zero = 0;
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] == 0) {
      zero = 1;
      continue;
    }
    if (nz > INT64_MAX / shape[i]) return 0;
    nz *= shape[i];
  }
  if (nz > INT64_MAX / bits) return 0;
  *numel = zero ? 0 : nz;
  return 1;
}

static int cmp_offset(const void *a, const void *b) {
  const st_tensor *x = a, *y = b;
  if (x->e.begin != y->e.begin) return x->e.begin < y->e.begin ? -1 : 1;
  if (x->e.end != y->e.end) return x->e.end < y->e.end ? -1 : 1;
  return strcmp(x->e.name, y->e.name);
}

static int cmp_name(const void *a, const void *b) {
  return strcmp((*(const st_tensor *const *)a)->e.name, (*(const st_tensor *const *)b)->e.name);
}

/* Reads a JSON integer >= 0 into *v. */
static int json_nonneg(const json_t *j, int64_t *v) {
  if (!json_is_integer(j)) return 0;
  json_int_t x = json_integer_value(j);
  if (x < 0) return 0;
  *v = (int64_t)x;
  return 1;
}

/* Validates one tensor entry and fills t (its shape goes to dims). */
static dsp_status st_parse_tensor(const char *path, const char *name, const json_t *v, uint64_t data_len,
                                  st_tensor *t, int64_t *dims) {
  if (!json_is_object(v)) return dsp_fail(DSP_ERR_FORMAT, "%s: tensor " NAME_FMT ": entry is not an object", path, name);
  const json_t *jdt = json_object_get(v, "dtype");
  const json_t *jsh = json_object_get(v, "shape");
  const json_t *jof = json_object_get(v, "data_offsets");
  if (!jdt || !json_is_string(jdt))
    return dsp_fail(DSP_ERR_FORMAT, "%s: tensor " NAME_FMT ": %s", path, name,
                    jdt ? "\"dtype\" is not a string" : "no \"dtype\"");
  if (!jsh || !json_is_array(jsh))
    return dsp_fail(DSP_ERR_FORMAT, "%s: tensor " NAME_FMT ": %s", path, name,
                    jsh ? "\"shape\" is not an array" : "no \"shape\"");
  if (!jof || !json_is_array(jof))
    return dsp_fail(DSP_ERR_FORMAT, "%s: tensor " NAME_FMT ": %s", path, name,
                    jof ? "\"data_offsets\" is not an array" : "no \"data_offsets\"");

  const char *dtname = json_string_value(jdt);
  const st_dtype *dt = st_dtype_find(dtname);
  if (!dt) return dsp_fail(DSP_ERR_FORMAT, "%s: tensor " NAME_FMT ": unknown dtype \"%.40s\"", path, name, dtname);

  size_t nd = json_array_size(jsh);
  for (size_t i = 0; i < nd; i++)
    if (!json_nonneg(json_array_get(jsh, i), &dims[i]))
      return dsp_fail(DSP_ERR_FORMAT, "%s: tensor " NAME_FMT ": shape[%zu] is not an integer >= 0", path, name, i);
  int64_t numel = 0;
  if (!st_numel(dims, (int32_t)nd, dt->bits, &numel))
    return dsp_fail(DSP_ERR_FORMAT, "%s: tensor " NAME_FMT ": shape's element count overflows", path, name);
  if ((numel * dt->bits) % 8 != 0)
    return dsp_fail(DSP_ERR_FORMAT, "%s: tensor " NAME_FMT ": %lld %s elements do not fill whole bytes", path, name,
                    (long long)numel, dt->name);
  int64_t nbytes = numel * dt->bits / 8;

  int64_t b = 0, e = 0;
  if (json_array_size(jof) != 2 || !json_nonneg(json_array_get(jof, 0), &b) || !json_nonneg(json_array_get(jof, 1), &e))
    return dsp_fail(DSP_ERR_FORMAT, "%s: tensor " NAME_FMT ": data_offsets is not two integers >= 0", path, name);
  if (b > e)
    return dsp_fail(DSP_ERR_FORMAT, "%s: tensor " NAME_FMT ": data_offsets [%lld, %lld] begin after end", path, name,
                    (long long)b, (long long)e);
  if (e - b != nbytes)
    return dsp_fail(DSP_ERR_FORMAT,
                    "%s: tensor " NAME_FMT ": %lld %s elements are %lld bytes but data_offsets [%lld, %lld] span %lld",
                    path, name, (long long)numel, dt->name, (long long)nbytes, (long long)b, (long long)e,
                    (long long)(e - b));
  if ((uint64_t)e > data_len)
    return dsp_fail(DSP_ERR_FORMAT, "%s: tensor " NAME_FMT ": data_offsets [%lld, %lld] end past the data section (%llu bytes)",
                    path, name, (long long)b, (long long)e, (unsigned long long)data_len);

  t->e.name = name;
  t->e.dtype = dt->name;
  t->e.ndim = (int32_t)nd;
  t->e.shape = dims;
  t->e.begin = (uint64_t)b;
  t->e.end = (uint64_t)e;
  t->dtype = dt;
  return DSP_OK;
}

static dsp_status st_parse_meta(const char *path, const json_t *m) {
  if (!json_is_object(m)) return dsp_fail(DSP_ERR_FORMAT, "%s: \"__metadata__\" is not an object", path);
  const char *k;
  const json_t *v;
  json_object_foreach((json_t *)m, k, v) {
    if (!json_is_string(v))
      return dsp_fail(DSP_ERR_FORMAT, "%s: \"__metadata__\" value of " NAME_FMT " is not a string", path, k);
  }
  return DSP_OK;
}

/* Checks that no two ranges share a byte (t sorted by begin). Empty ranges
 * hold no byte and overlap nothing. */
static dsp_status st_check_overlap(const dsp_st_file *f) {
  const st_tensor *last = NULL;
  for (int i = 0; i < f->n; i++) {
    const st_tensor *t = &f->t[i];
    if (t->e.begin == t->e.end) continue;
    if (last && t->e.begin < last->e.end)
      return dsp_fail(DSP_ERR_FORMAT,
                      "%s: tensors " NAME_FMT " [%llu, %llu] and " NAME_FMT " [%llu, %llu] have overlapping data_offsets",
                      f->path, last->e.name, (unsigned long long)last->e.begin, (unsigned long long)last->e.end,
                      t->e.name, (unsigned long long)t->e.begin, (unsigned long long)t->e.end);
    if (!last || t->e.end > last->e.end) last = t;
  }
  return DSP_OK;
}

/* Parses and validates the header of the image [buf, buf+len); f->path set. */
static dsp_status st_parse(dsp_st_file *f, const uint8_t *buf, size_t len) {
  const char *path = f->path;
  if (len < 8)
    return dsp_fail(DSP_ERR_FORMAT, "%s: file is %zu bytes, shorter than the 8-byte header length", path, len);
  uint64_t hn = le64(buf);
  if (hn > DSP_ST_MAX_HEADER)
    return dsp_fail(DSP_ERR_FORMAT, "%s: header length %llu is absurd (limit %llu bytes); not a safetensors file?", path,
                    (unsigned long long)hn, (unsigned long long)DSP_ST_MAX_HEADER);
  if (hn > len - 8)
    return dsp_fail(DSP_ERR_FORMAT, "%s: header length %llu runs past the end of the file (%zu bytes)", path,
                    (unsigned long long)hn, len);
  f->data = buf + 8 + hn;
  f->data_len = len - 8 - hn;

  json_error_t jerr;
  f->root = json_loadb((const char *)buf + 8, (size_t)hn, JSON_REJECT_DUPLICATES, &jerr);
  if (!f->root)
    return dsp_fail(DSP_ERR_FORMAT, "%s: header is not valid JSON: %s (header byte %d)", path, jerr.text, jerr.position);
  if (!json_is_object(f->root)) return dsp_fail(DSP_ERR_FORMAT, "%s: header is not a JSON object", path);

  /* Count tensors and dims first so that two allocations hold everything. */
  size_t n = 0, ndims = 0;
  const char *k;
  json_t *v;
  json_object_foreach(f->root, k, v) {
    if (strcmp(k, "__metadata__") == 0) continue;
    n++;
    const json_t *sh = json_is_object(v) ? json_object_get(v, "shape") : NULL;
    if (json_is_array(sh)) ndims += json_array_size(sh);
  }
  if (n > INT32_MAX) return dsp_fail(DSP_ERR_FORMAT, "%s: too many tensors (%zu)", path, n);
  f->t = calloc(n ? n : 1, sizeof *f->t);
  f->by_name = calloc(n ? n : 1, sizeof *f->by_name);
  f->dims = calloc(ndims ? ndims : 1, sizeof *f->dims);
  if (!f->t || !f->by_name || !f->dims) return dsp_fail(DSP_ERR_NOMEM, "%s: no memory for %zu tensors", path, n);

  size_t di = 0;
  json_object_foreach(f->root, k, v) {
    if (strcmp(k, "__metadata__") == 0) {
      DSP_TRY(st_parse_meta(path, v));
      f->meta = v;
      continue;
    }
    DSP_TRY(st_parse_tensor(path, k, v, f->data_len, &f->t[f->n], f->dims + di));
    di += (size_t)f->t[f->n].e.ndim;
    f->n++;
  }
  DSP_ASSERT((size_t)f->n == n && di == ndims);
  if (f->n > 1) qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_offset);
  DSP_TRY(st_check_overlap(f));
  for (int i = 0; i < f->n; i++) f->by_name[i] = &f->t[i];
  if (f->n > 1) qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name);
  return DSP_OK;
}

static dsp_status st_new(const char *label, dsp_st_file **out) {
  *out = NULL;
  dsp_st_file *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(label))) {
    free(f);
    return dsp_fail(DSP_ERR_NOMEM, "%s: no memory to open", label);
  }
  *out = f;
  return DSP_OK;
}

dsp_status dsp_st_open_memory(const void *buf, size_t len, const char *label, dsp_st_file **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "dsp_st_open_memory: out is NULL");
  *out = NULL;
  if (!label) label = "<memory>";
  if (!buf && len) return dsp_fail(DSP_ERR_ARG, "%s: buffer is NULL", label);
  dsp_st_file *f;
  DSP_TRY(st_new(label, &f));
  dsp_status s = st_parse(f, buf, len);
  if (s != DSP_OK) {
    dsp_st_close(f);
    return s;
  }
  dsp_error_clear();
  *out = f;
  return DSP_OK;
}

dsp_status dsp_st_open(const char *path, dsp_st_file **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "dsp_st_open: out is NULL");
  *out = NULL;
  if (!path) return dsp_fail(DSP_ERR_ARG, "dsp_st_open: path is NULL");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return dsp_fail(DSP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return dsp_fail(DSP_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return dsp_fail(DSP_ERR_IO, "%s: not a regular file", path);
  }
  dsp_st_file *f;
  dsp_status s = st_new(path, &f);
  if (s != DSP_OK) {
    close(fd);
    return s;
  }
  size_t len = (size_t)sb.st_size;
  const uint8_t *buf = NULL;
  if (len > 0) { /* mmap refuses length 0; an empty file fails below as too short */
    void *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      int e = errno;
      close(fd);
      dsp_st_close(f);
      return dsp_fail(DSP_ERR_IO, "%s: cannot map %zu bytes: %s", path, len, strerror(e));
    }
    f->map = buf = m;
    f->map_len = len;
  }
  close(fd); /* the mapping keeps the file */
  s = st_parse(f, buf, len);
  if (s != DSP_OK) {
    dsp_st_close(f);
    return s;
  }
  dsp_error_clear();
  *out = f;
  return DSP_OK;
}

void dsp_st_close(dsp_st_file *f) {
  if (!f) return;
  if (f->map) munmap((void *)f->map, f->map_len);
  json_decref(f->root);
  free(f->t);
  free(f->by_name);
  free(f->dims);
  free(f->path);
  free(f);
}

const char *dsp_st_path(const dsp_st_file *f) { return f->path; }
int dsp_st_count(const dsp_st_file *f) { return f->n; }

const dsp_st_entry *dsp_st_entry_at(const dsp_st_file *f, int i) {
  return i >= 0 && i < f->n ? &f->t[i].e : NULL;
}

const char *dsp_st_name(const dsp_st_file *f, int i) {
  return i >= 0 && i < f->n ? f->t[i].e.name : NULL;
}

const char *dsp_st_metadata(const dsp_st_file *f, const char *key) {
  if (!f->meta || !key) return NULL;
  return json_string_value(json_object_get(f->meta, key));
}

static const st_tensor *st_find(const dsp_st_file *f, const char *name) {
  int lo = 0, hi = f->n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    const st_tensor *t = f->by_name[mid];
    int c = strcmp(name, t->e.name);
    if (c == 0) return t;
    if (c < 0) hi = mid;
    else lo = mid + 1;
  }
  return NULL;
}

/* The tensor `name` if callers may take its data: a dsp_dtype, <= 4 dims. */
static dsp_status st_usable(const dsp_st_file *f, const char *name, const st_tensor **out) {
  if (!name) return dsp_fail(DSP_ERR_ARG, "%s: tensor name is NULL", f->path);
  const st_tensor *t = st_find(f, name);
  if (!t) return dsp_fail(DSP_ERR_MISSING, "%s: no tensor " NAME_FMT, f->path, name);
  if (t->dtype->dt < 0)
    return dsp_fail(DSP_ERR_DTYPE, "%s: tensor " NAME_FMT ": unsupported dtype %s", f->path, name, t->dtype->name);
  if (t->e.ndim > DSP_MAX_DIMS)
    return dsp_fail(DSP_ERR_SHAPE, "%s: tensor " NAME_FMT ": %d dims, more than the %d supported", f->path, name,
                    (int)t->e.ndim, DSP_MAX_DIMS);
  *out = t;
  return DSP_OK;
}

dsp_status dsp_st_info(const dsp_st_file *f, const char *name, dsp_dtype *dt, int32_t *ndim,
                       int64_t shape[DSP_MAX_DIMS]) {
  const st_tensor *t;
  DSP_TRY(st_usable(f, name, &t));
  if (dt) *dt = (dsp_dtype)t->dtype->dt;
  if (ndim) *ndim = t->e.ndim;
  if (shape)
    for (int32_t i = 0; i < DSP_MAX_DIMS; i++) shape[i] = i < t->e.ndim ? t->e.shape[i] : 0;
  return DSP_OK;
}

dsp_status dsp_st_view(const dsp_st_file *f, const char *name, dsp_tensor *out) {
  const st_tensor *t;
  DSP_TRY(st_usable(f, name, &t));
  const uint8_t *p = f->data + t->e.begin;
  size_t es = dsp_dtype_size((dsp_dtype)t->dtype->dt);
  if ((uintptr_t)p % es != 0)
    return dsp_fail(DSP_ERR_UNSUPPORTED,
                    "%s: tensor " NAME_FMT ": data at byte %llu of the data section is not aligned to its %zu-byte "
                    "elements; read it with dsp_st_read_rows",
                    f->path, name, (unsigned long long)t->e.begin, es);
  /* The data is read-only; the cast only fits dsp_tensor's one pointer type. */
  *out = dsp_tensor_view((void *)(uintptr_t)p, (dsp_dtype)t->dtype->dt, t->e.ndim, t->e.shape);
  return DSP_OK;
}

dsp_status dsp_st_read_rows(const dsp_st_file *f, const char *name, int64_t row0, int64_t nrows, void *dst) {
  const st_tensor *t;
  DSP_TRY(st_usable(f, name, &t));
  if (t->e.ndim == 0) return dsp_fail(DSP_ERR_SHAPE, "%s: tensor " NAME_FMT ": a scalar has no rows", f->path, name);
  int64_t rows = t->e.shape[0];
  if (row0 < 0 || nrows < 0 || row0 > rows || nrows > rows - row0)
    return dsp_fail(DSP_ERR_RANGE, "%s: tensor " NAME_FMT ": rows [%lld, %lld + %lld) outside [0, %lld)", f->path, name,
                    (long long)row0, (long long)row0, (long long)nrows, (long long)rows);
  if (nrows == 0) return DSP_OK;
  if (!dst) return dsp_fail(DSP_ERR_ARG, "%s: tensor " NAME_FMT ": destination is NULL", f->path, name);
  /* rows > 0 here, so the row size times the row count is the tensor's byte
   * count, which open checked against the data section. */
  uint64_t row_bytes = (t->e.end - t->e.begin) / (uint64_t)rows;
  memcpy(dst, f->data + t->e.begin + (uint64_t)row0 * row_bytes, (size_t)((uint64_t)nrows * row_bytes));
  return DSP_OK;
}
