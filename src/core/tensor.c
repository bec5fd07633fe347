#include "core/tensor.h"

#include <stdio.h>

#include "core/status.h"

size_t dsp_dtype_size(dsp_dtype t) {
  switch (t) {
    case DSP_BF16: case DSP_F16: return 2;
    case DSP_F32: case DSP_I32: return 4;
    case DSP_I64: return 8;
    default: return 0;
  }
}

const char *dsp_dtype_name(dsp_dtype t) {
  static const char *names[] = {"BF16", "F32", "I64", "I32", "F16"};
  return (unsigned)t < DSP_DTYPE_COUNT ? names[t] : "?";
}

dsp_tensor dsp_tensor_view(void *data, dsp_dtype dt, int32_t ndim, const int64_t *shape) {
  DSP_ASSERT(ndim >= 0 && ndim <= DSP_MAX_DIMS);
  dsp_tensor t = {.data = data, .dtype = dt, .ndim = ndim};
  int64_t s = 1;
  for (int32_t i = ndim - 1; i >= 0; i--) {
    t.shape[i] = shape[i];
    t.stride[i] = s;
    s *= shape[i];
  }
  return t;
}

dsp_tensor dsp_tensor_2d(void *data, dsp_dtype dt, int64_t rows, int64_t cols) {
  int64_t sh[2] = {rows, cols};
  return dsp_tensor_view(data, dt, 2, sh);
}

int64_t dsp_tensor_numel(const dsp_tensor *t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

bool dsp_tensor_is_contiguous(const dsp_tensor *t) {
  int64_t s = 1;
  for (int32_t i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->stride[i] != s) return false;
    s *= t->shape[i];
  }
  return true;
}

dsp_tensor dsp_tensor_rows(const dsp_tensor *t, int64_t begin, int64_t end) {
  DSP_ASSERT(t->ndim >= 1 && 0 <= begin && begin <= end && end <= t->shape[0]);
  dsp_tensor v = *t;
  v.data = (char *)t->data + (size_t)(begin * t->stride[0]) * dsp_dtype_size(t->dtype);
  v.shape[0] = end - begin;
  return v;
}

dsp_tensor dsp_tensor_cols(const dsp_tensor *t, int64_t begin, int64_t end) {
  int32_t d = t->ndim - 1;
  DSP_ASSERT(d >= 0 && 0 <= begin && begin <= end && end <= t->shape[d]);
  dsp_tensor v = *t;
  v.data = (char *)t->data + (size_t)(begin * t->stride[d]) * dsp_dtype_size(t->dtype);
  v.shape[d] = end - begin;
  return v;
}

dsp_status dsp_tensor_flatten2d(const dsp_tensor *t, dsp_tensor *out) {
  if (t->ndim < 1) return dsp_fail(DSP_ERR_SHAPE, "cannot flatten a scalar to 2-D");
  dsp_tensor v = {.data = t->data, .dtype = t->dtype, .ndim = 2};
  int32_t last = t->ndim - 1;
  v.shape[1] = t->shape[last];
  v.stride[1] = t->stride[last];
  if (t->ndim == 1) {
    v.shape[0] = 1;
    v.stride[0] = t->shape[0] * t->stride[0];
    *out = v;
    return DSP_OK;
  }
  int64_t rows = t->shape[last - 1];
  int64_t rs = t->stride[last - 1];
  for (int32_t i = last - 2; i >= 0; i--) {
    if (t->shape[i] != 1 && t->stride[i] != t->shape[i + 1] * t->stride[i + 1])
      return dsp_fail(DSP_ERR_SHAPE, "view's leading dims cannot merge into rows");
    rows *= t->shape[i];
  }
  v.shape[0] = rows;
  v.stride[0] = rs;
  *out = v;
  return DSP_OK;
}

void *dsp_tensor_at(const dsp_tensor *t, const int64_t *idx) {
  int64_t off = 0;
  for (int32_t i = 0; i < t->ndim; i++) {
    DSP_ASSERT(idx[i] >= 0 && idx[i] < t->shape[i]);
    off += idx[i] * t->stride[i];
  }
  return (char *)t->data + (size_t)off * dsp_dtype_size(t->dtype);
}

const char *dsp_shape_str(const dsp_tensor *t, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int32_t i = 0; i < t->ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)t->shape[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}
