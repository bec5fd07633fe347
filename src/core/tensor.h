/* Tensor views: slicing and element access beyond the public helpers. Strides are in
 * elements; a view never owns its data. */
#ifndef DSP_CORE_TENSOR_H
#define DSP_CORE_TENSOR_H
#include <stdbool.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

/* (dsp_tensor_view, _2d, _numel and _rows are public: dspark.h.) */
bool dsp_tensor_is_contiguous(const dsp_tensor *t);
/* Columns [begin, end) of the last dim, keeping strides (a non-contiguous view). */
dsp_tensor dsp_tensor_cols(const dsp_tensor *t, int64_t begin, int64_t end);
/* Merge dims 0..ndim-2 into one when their strides allow it; DSP_ERR_SHAPE otherwise. */
dsp_status dsp_tensor_flatten2d(const dsp_tensor *t, dsp_tensor *out);
/* Address of element (i0, i1, ...) for up to 4 indices. */
void *dsp_tensor_at(const dsp_tensor *t, const int64_t *idx);
static inline void *dsp_tensor_row(const dsp_tensor *t, int64_t r) {
  return (char *)t->data + (size_t)(r * t->stride[0]) * dsp_dtype_size(t->dtype);
}
/* "[2, 7, 4096]" into buf. */
const char *dsp_shape_str(const dsp_tensor *t, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
