/* dspark: a C runtime for DSpark speculative decoding.
 * The one public header: status codes, tensor views, and the entry points of
 * each component. Handles are opaque; every function that can fail because of
 * what the caller gave it returns a dsp_status, and dsp_error_message() holds
 * the readable reason (file, tensor, what is wrong) for the calling thread. */
#ifndef DSPARK_H
#define DSPARK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ------------------------------------------------------------- */
typedef enum {
  DSP_OK = 0,
  DSP_ERR_ARG,         /* an argument is out of its domain */
  DSP_ERR_IO,          /* a file could not be opened, read, mapped or written */
  DSP_ERR_FORMAT,      /* a file is malformed (header, JSON, offsets) */
  DSP_ERR_DTYPE,       /* a tensor has a dtype we do not accept here */
  DSP_ERR_SHAPE,       /* shapes disagree */
  DSP_ERR_RANGE,       /* an index or value is out of range (token id, temperature) */
  DSP_ERR_MISSING,     /* a required tensor or key is absent */
  DSP_ERR_NOMEM,       /* an allocation failed or an arena is full */
  DSP_ERR_COMM,        /* a collective failed, or another rank reported an error */
  DSP_ERR_DEVICE,      /* a device is missing or a device call failed */
  DSP_ERR_UNSUPPORTED  /* valid, but this build or layout cannot do it */
} dsp_status;

const char *dsp_status_name(dsp_status s);
/* The last error's message for this thread ("" after success). */
const char *dsp_error_message(void);

/* ---- tensors ------------------------------------------------------------- */
typedef enum { DSP_BF16 = 0, DSP_F32, DSP_I64, DSP_I32, DSP_F16, DSP_DTYPE_COUNT } dsp_dtype;
#define DSP_MAX_DIMS 4

/* A view: data pointer, dtype, shape and strides in elements. Views need not be
 * contiguous; every kernel that takes one honours its strides. */
typedef struct {
  void *data;
  dsp_dtype dtype;
  int32_t ndim;
  int64_t shape[DSP_MAX_DIMS];
  int64_t stride[DSP_MAX_DIMS];
} dsp_tensor;

typedef uint16_t dsp_bf16;

size_t dsp_dtype_size(dsp_dtype t);
const char *dsp_dtype_name(dsp_dtype t);

#ifdef __cplusplus
}
#endif
#endif /* DSPARK_H */
