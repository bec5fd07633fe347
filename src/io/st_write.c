/* safetensors writer: collects tensors in memory, then writes a temporary file
 * and renames it over the target, so a reader never sees a partial file. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dspark.h"
#include "core/status.h"
#include "core/tensor.h"

struct dsp_st_writer {
  char *path;
  json_t *header; /* tensor entries in the order added, then __metadata__ */
  json_t *meta;   /* owned; NULL until the first dsp_st_writer_meta */
  uint8_t *data;
  size_t len, cap;
};

dsp_status dsp_st_writer_create(const char *path, dsp_st_writer **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "dsp_st_writer_create: out is NULL");
  *out = NULL;
  if (!path || !*path) return dsp_fail(DSP_ERR_ARG, "dsp_st_writer_create: empty path");
  dsp_st_writer *w = calloc(1, sizeof *w);
  if (w) {
    w->path = strdup(path);
    w->header = json_object();
  }
  if (!w || !w->path || !w->header) {
    dsp_st_writer_abort(w);
    return dsp_fail(DSP_ERR_NOMEM, "%s: no memory for a writer", path);
  }
  *out = w;
  return DSP_OK;
}

void dsp_st_writer_abort(dsp_st_writer *w) {
  if (!w) return;
  json_decref(w->header);
  json_decref(w->meta);
  free(w->data);
  free(w->path);
  free(w);
}

static dsp_status st_reserve(dsp_st_writer *w, size_t more) {
  if (more <= w->cap - w->len) return DSP_OK;
  if (more > SIZE_MAX / 2 - w->len) return dsp_fail(DSP_ERR_NOMEM, "%s: tensors too large", w->path);
  size_t cap = w->cap ? w->cap : 4096;
  while (cap - w->len < more) cap *= 2;
  uint8_t *p = realloc(w->data, cap);
  if (!p) return dsp_fail(DSP_ERR_NOMEM, "%s: no memory for %zu bytes of tensors", w->path, cap);
  w->data = p;
  w->cap = cap;
  return DSP_OK;
}

/* Appends t's elements in row-major order, following its strides. */
static void st_gather(uint8_t *dst, const dsp_tensor *t, size_t es) {
  int64_t idx[DSP_MAX_DIMS] = {0};
  int64_t n = dsp_tensor_numel(t);
  for (int64_t k = 0; k < n; k++) {
    int64_t off = 0;
    for (int32_t d = 0; d < t->ndim; d++) off += idx[d] * t->stride[d];
    memcpy(dst + (size_t)k * es, (const uint8_t *)t->data + off * (int64_t)es, es);
    for (int32_t d = t->ndim - 1; d >= 0; d--) {
      if (++idx[d] < t->shape[d]) break;
      idx[d] = 0;
    }
  }
}

static json_t *st_entry_json(const dsp_tensor *t, size_t begin, size_t end) {
  json_t *shape = json_array();
  for (int32_t d = 0; shape && d < t->ndim; d++)
    if (json_array_append_new(shape, json_integer(t->shape[d])) != 0) {
      json_decref(shape);
      return NULL;
    }
  json_t *offs = json_pack("[II]", (json_int_t)begin, (json_int_t)end);
  return json_pack("{s:s, s:o, s:o}", "dtype", dsp_dtype_name(t->dtype), "shape", shape, "data_offsets", offs);
}

dsp_status dsp_st_writer_add(dsp_st_writer *w, const char *name, const dsp_tensor *t) {
  if (!w || !t) return dsp_fail(DSP_ERR_ARG, "dsp_st_writer_add: writer or tensor is NULL");
  if (!name || !*name || strcmp(name, "__metadata__") == 0)
    return dsp_fail(DSP_ERR_ARG, "%s: tensor name \"%s\" is empty or reserved", w->path, name ? name : "");
  json_t *probe = json_string(name);
  if (!probe) return dsp_fail(DSP_ERR_ARG, "%s: tensor name is not valid UTF-8", w->path);
  json_decref(probe);
  if (json_object_get(w->header, name))
    return dsp_fail(DSP_ERR_ARG, "%s: tensor '%.200s' added twice", w->path, name);
  if ((unsigned)t->dtype >= DSP_DTYPE_COUNT)
    return dsp_fail(DSP_ERR_DTYPE, "%s: tensor '%.200s': dtype %d is not a dsp_dtype", w->path, name, (int)t->dtype);
  if (t->ndim < 0 || t->ndim > DSP_MAX_DIMS)
    return dsp_fail(DSP_ERR_SHAPE, "%s: tensor '%.200s': %d dims", w->path, name, (int)t->ndim);
  size_t es = dsp_dtype_size(t->dtype);
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; d++) {
    if (t->shape[d] < 0) return dsp_fail(DSP_ERR_SHAPE, "%s: tensor '%.200s': shape[%d] < 0", w->path, name, (int)d);
    if (t->shape[d] && n > INT64_MAX / 8 / t->shape[d])
      return dsp_fail(DSP_ERR_SHAPE, "%s: tensor '%.200s': element count overflows", w->path, name);
    n *= t->shape[d];
  }
  if (n > 0 && !t->data) return dsp_fail(DSP_ERR_ARG, "%s: tensor '%.200s': data is NULL", w->path, name);
  size_t bytes = (size_t)n * es;
  DSP_TRY(st_reserve(w, bytes));
  json_t *e = st_entry_json(t, w->len, w->len + bytes);
  if (!e || json_object_set_new(w->header, name, e) != 0)
    return dsp_fail(DSP_ERR_NOMEM, "%s: tensor '%.200s': no memory for its header entry", w->path, name);
  if (n > 0) st_gather(w->data + w->len, t, es);
  w->len += bytes;
  return DSP_OK;
}

dsp_status dsp_st_writer_meta(dsp_st_writer *w, const char *key, const char *value) {
  if (!w || !key || !value) return dsp_fail(DSP_ERR_ARG, "dsp_st_writer_meta: NULL argument");
  if (!w->meta && !(w->meta = json_object())) return dsp_fail(DSP_ERR_NOMEM, "%s: no memory for metadata", w->path);
  json_t *v = json_string(value);
  if (!v) return dsp_fail(DSP_ERR_ARG, "%s: metadata value of '%.200s' is not valid UTF-8", w->path, key);
  if (json_object_set_new(w->meta, key, v) != 0)
    return dsp_fail(DSP_ERR_ARG, "%s: metadata key is not valid UTF-8", w->path);
  return DSP_OK;
}

static int write_all(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n > 0) {
    ssize_t k = write(fd, b, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    b += k;
    n -= (size_t)k;
  }
  return 0;
}

/* The header text, padded with spaces to a multiple of 8 bytes. */
static dsp_status st_header_text(dsp_st_writer *w, char **text, size_t *len) {
  if (w->meta && json_object_set(w->header, "__metadata__", w->meta) != 0)
    return dsp_fail(DSP_ERR_NOMEM, "%s: no memory for the header", w->path);
  char *s = json_dumps(w->header, JSON_COMPACT);
  if (!s) return dsp_fail(DSP_ERR_NOMEM, "%s: no memory for the header", w->path);
  size_t n = strlen(s), padded = (n + 7) / 8 * 8;
  char *p = realloc(s, padded + 1);
  if (!p) {
    free(s);
    return dsp_fail(DSP_ERR_NOMEM, "%s: no memory for the header", w->path);
  }
  memset(p + n, ' ', padded - n);
  p[padded] = 0;
  *text = p;
  *len = padded;
  return DSP_OK;
}

dsp_status dsp_st_writer_finish(dsp_st_writer *w) {
  if (!w) return dsp_fail(DSP_ERR_ARG, "dsp_st_writer_finish: writer is NULL");
  char *hdr = NULL, *tmp = NULL;
  size_t hlen = 0;
  int fd = -1, created = 0;
  dsp_status s = st_header_text(w, &hdr, &hlen);
  if (s != DSP_OK) goto out;
  size_t tlen = strlen(w->path) + 32;
  if (!(tmp = malloc(tlen))) {
    s = dsp_fail(DSP_ERR_NOMEM, "%s: no memory", w->path);
    goto out;
  }
  snprintf(tmp, tlen, "%s.tmp.%ld", w->path, (long)getpid());
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    s = dsp_fail(DSP_ERR_IO, "%s: cannot create %s: %s", w->path, tmp, strerror(errno));
    goto out;
  }
  created = 1;
  uint8_t lenb[8];
  for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
  if (write_all(fd, lenb, 8) || write_all(fd, hdr, hlen) || write_all(fd, w->data, w->len)) {
    s = dsp_fail(DSP_ERR_IO, "%s: cannot write %s: %s", w->path, tmp, strerror(errno));
    goto out;
  }
  int rc = close(fd);
  fd = -1;
  if (rc != 0) {
    s = dsp_fail(DSP_ERR_IO, "%s: cannot write %s: %s", w->path, tmp, strerror(errno));
    goto out;
  }
  if (rename(tmp, w->path) != 0) {
    s = dsp_fail(DSP_ERR_IO, "%s: cannot rename %s onto it: %s", w->path, tmp, strerror(errno));
    goto out;
  }
  created = 0;
out:
  if (fd >= 0) close(fd);
  if (created) unlink(tmp); /* only on failure: leave no temporary behind */
  free(tmp);
  free(hdr);
  dsp_st_writer_abort(w);
  return s;
}
