/* safetensors files: a validating, zero-copy reader and an all-or-nothing writer.
 *
 * Layout: u64 little-endian N, then N bytes of a UTF-8 JSON object mapping each
 * tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
 * relative to the first byte after the header), plus an optional
 * "__metadata__" object of string -> string; then the data section.
 *
 * Reader: dsp_st_open validates the whole header before returning, so every
 * accessor afterwards can trust offsets and sizes. Open accepts every dtype
 * name the format defines (F64, U8, BOOL, F8_*, ...) and any number of dims;
 * the accessors that hand out data (info, view, read_rows) refuse a dtype
 * that has no dsp_dtype (DSP_ERR_DTYPE) and more than DSP_MAX_DIMS dims
 * (DSP_ERR_SHAPE). Data ranges may leave gaps but never share a byte (empty
 * ranges share none). Tensors are listed in the order of their data offsets
 * (file order; equal offsets by end, then name). */
#ifndef DSP_CORE_SAFETENSORS_H
#define DSP_CORE_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>

#include "dspark.h"

/* Headers longer than this are refused as corrupt before anything is parsed. */
#define DSP_ST_MAX_HEADER ((uint64_t)100 * 1024 * 1024)

typedef struct dsp_st_file dsp_st_file;

/* What open learned about one tensor, whatever its dtype. */
typedef struct {
  const char *name;
  const char *dtype;     /* the file's dtype name, e.g. "BF16", "F64" */
  int32_t ndim;          /* may exceed DSP_MAX_DIMS */
  const int64_t *shape;  /* ndim values */
  uint64_t begin, end;   /* byte range within the data section */
} dsp_st_entry;

/* Opens and maps `path` read-only (MAP_PRIVATE) and validates it.
 * DSP_ERR_IO when it cannot be opened or mapped, DSP_ERR_FORMAT when malformed. */
dsp_status dsp_st_open(const char *path, dsp_st_file **out);
/* The same validation over a caller's buffer, which must outlive the handle;
 * `label` stands for the path in messages and dsp_st_path. */
dsp_status dsp_st_open_memory(const void *buf, size_t len, const char *label, dsp_st_file **out);
void dsp_st_close(dsp_st_file *f);

const char *dsp_st_path(const dsp_st_file *f);
int dsp_st_count(const dsp_st_file *f);
/* Name of tensor i (0 <= i < count), in data-offset order; NULL out of range. */
const char *dsp_st_name(const dsp_st_file *f, int i);
/* Everything about tensor i; NULL out of range. Valid until dsp_st_close. */
const dsp_st_entry *dsp_st_entry_at(const dsp_st_file *f, int i);
/* Value of a "__metadata__" key; NULL when absent. */
const char *dsp_st_metadata(const dsp_st_file *f, const char *key);

/* dtype and shape of `name` (any output may be NULL). DSP_ERR_MISSING if
 * absent, DSP_ERR_DTYPE if its dtype has no dsp_dtype, DSP_ERR_SHAPE if it has
 * more than DSP_MAX_DIMS dims. */
dsp_status dsp_st_info(const dsp_st_file *f, const char *name, dsp_dtype *dt, int32_t *ndim,
                       int64_t shape[DSP_MAX_DIMS]);
/* A contiguous view into the file's bytes, touching none of them. The data is
 * read-only (a private read-only mapping, or the caller's buffer): callers
 * must not write through it. DSP_ERR_UNSUPPORTED when the tensor's bytes are
 * not aligned to its element size (a writer that packed dtypes of different
 * widths); dsp_st_read_rows copies such tensors. Errors as dsp_st_info. */
dsp_status dsp_st_view(const dsp_st_file *f, const char *name, dsp_tensor *out);
/* Copies rows [row0, row0 + nrows) of dim 0 to dst (contiguous, row-major).
 * Only those rows' bytes are read, so a tensor-parallel rank that reads its
 * own rows never faults in the others' pages. DSP_ERR_RANGE for a row range
 * outside [0, shape[0]], DSP_ERR_SHAPE for a 0-dim tensor; errors as info. */
dsp_status dsp_st_read_rows(const dsp_st_file *f, const char *name, int64_t row0, int64_t nrows, void *dst);

/* ---- writer ------------------------------------------------------------------
 * Tensors are copied when added and laid out in the order added, without
 * padding between them (so a view of a later tensor is aligned only if the
 * bytes before it are a multiple of its element size). The header is padded
 * with spaces to a multiple of 8 bytes. Nothing appears at `path` until
 * dsp_st_writer_finish succeeds: it writes `path`.tmp.<pid> and renames it. */
typedef struct dsp_st_writer dsp_st_writer;

dsp_status dsp_st_writer_create(const char *path, dsp_st_writer **out);
/* Copies t's elements (any strides) under `name`. DSP_ERR_ARG for a duplicate,
 * empty, reserved ("__metadata__") or non-UTF-8 name, or a NULL data pointer
 * with elements; DSP_ERR_DTYPE / DSP_ERR_SHAPE for a bad dtype or shape. A
 * failed add leaves the writer as it was. */
dsp_status dsp_st_writer_add(dsp_st_writer *w, const char *name, const dsp_tensor *t);
/* Sets a "__metadata__" entry; a later value for the same key replaces it. */
dsp_status dsp_st_writer_meta(dsp_st_writer *w, const char *key, const char *value);
/* Writes the file (DSP_ERR_IO on failure, leaving nothing at `path` nor a
 * temporary file) and frees w in every case. */
dsp_status dsp_st_writer_finish(dsp_st_writer *w);
/* Frees w; writes nothing. */
void dsp_st_writer_abort(dsp_st_writer *w);

#endif
