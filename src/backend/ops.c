/* The operations' shared checks, then the backend's entry. */
#include "backend/ops.h"

#include "backend/backend.h"
#include "core/status.h"

static dsp_status check_dev(const dsp_backend *be, int dev) {
  if (!be) return dsp_fail(DSP_ERR_ARG, "op: no backend");
  if (dev < 0 || dev >= be->ndev) return dsp_fail(DSP_ERR_ARG, "op: device %d outside [0, %d)", dev, be->ndev);
  return DSP_OK;
}

dsp_status dsp_op_alloc(dsp_backend *be, int dev, size_t bytes, void **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "op alloc: NULL output");
  *out = NULL;
  DSP_TRY(check_dev(be, dev));
  return be->ops->alloc(be, dev, bytes, out);
}

void dsp_op_release(dsp_backend *be, int dev, void *p) {
  if (p && check_dev(be, dev) == DSP_OK) be->ops->release(be, dev, p);
}

dsp_status dsp_op_upload(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes) {
  DSP_TRY(check_dev(be, dev));
  if (bytes && (!dst || !src)) return dsp_fail(DSP_ERR_ARG, "op upload: NULL buffer for %zu bytes", bytes);
  return bytes ? be->ops->upload(be, dev, dst, src, bytes) : DSP_OK;
}

dsp_status dsp_op_download(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes) {
  DSP_TRY(check_dev(be, dev));
  if (bytes && (!dst || !src)) return dsp_fail(DSP_ERR_ARG, "op download: NULL buffer for %zu bytes", bytes);
  return bytes ? be->ops->download(be, dev, dst, src, bytes) : DSP_OK;
}

dsp_status dsp_op_copy(dsp_backend *be, int dev, void *dst, const void *src, size_t bytes) {
  DSP_TRY(check_dev(be, dev));
  if (bytes && (!dst || !src)) return dsp_fail(DSP_ERR_ARG, "op copy: NULL buffer for %zu bytes", bytes);
  return bytes ? be->ops->copy(be, dev, dst, src, bytes) : DSP_OK;
}

dsp_status dsp_op_sync(dsp_backend *be, int dev) {
  DSP_TRY(check_dev(be, dev));
  return be->ops->sync(be, dev);
}

dsp_status dsp_op_weight_create(dsp_backend *be, int dev, const dsp_tensor *host, int strict, dsp_weight **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "op weight: NULL output");
  *out = NULL;
  DSP_TRY(check_dev(be, dev));
  if (!host || host->dtype != DSP_BF16 || host->ndim != 2 || host->shape[0] < 1 || host->shape[1] < 1 ||
      host->stride[1] != 1 || host->stride[0] < host->shape[1] || !host->data)
    return dsp_fail(DSP_ERR_SHAPE, "op weight: want a non-empty [N, K] BF16 host view with contiguous rows");
  return be->ops->weight_create(be, dev, host, strict, out);
}

void dsp_op_weight_free(dsp_backend *be, dsp_weight *w) {
  if (w && be) be->ops->weight_free(be, w);
}

const char *dsp_op_weight_describe(const dsp_backend *be, const dsp_weight *w) {
  return w && be ? be->ops->weight_describe(w) : "";
}

dsp_status dsp_op_gemm(dsp_backend *be, int dev, const dsp_tensor *a, const dsp_weight *w, dsp_tensor *c) {
  DSP_TRY(check_dev(be, dev));
  if (!a || !w || !c) return dsp_fail(DSP_ERR_ARG, "op gemm: NULL argument");
  if (a->dtype != DSP_BF16 || a->ndim != 2 || c->ndim != 2 || c->dtype != DSP_BF16)
    return dsp_fail(DSP_ERR_SHAPE, "op gemm: want a [M, K] BF16 and c [M, N] BF16");
  if (a->stride[1] != 1 || c->stride[1] != 1 || c->shape[0] != a->shape[0])
    return dsp_fail(DSP_ERR_SHAPE, "op gemm: rows of a and c must agree and be contiguous");
  return be->ops->gemm(be, dev, a, w, c);
}

dsp_status dsp_op_markov_step(dsp_backend *be, int dev, const dsp_op_markov_args *a) {
  DSP_TRY(check_dev(be, dev));
  if (!a || !a->e || !a->w2 || !a->base || !a->best_val || !a->best_id)
    return dsp_fail(DSP_ERR_ARG, "op markov step: NULL argument");
  return be->ops->markov_step(be, dev, a);
}
