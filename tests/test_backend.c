/* The backend's plumbing on the CPU. dsp_backend_each with several devices in
 * one process (--tp N): every device's job runs once per call, device 0 on the
 * caller's thread and the others on threads that stay the same from call to
 * call; the first failure comes back with its device named; a job that starts
 * another round on every device is refused; the devices' collectives meet, and
 * those of devices whose peer failed alone return instead of waiting for it.
 * dsp_op_memory_used: the process's peak grows by what it touches. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <omp.h>

#include "backend/backend.h"
#include "backend/ops.h"
#include "core/status.h"

enum { NDEV = 3 };

typedef struct {
  dsp_backend *be;
  pthread_t thread[NDEV];
  int calls[NDEV], threads[NDEV];
  int fail_dev; /* -1: none */
  dsp_status nested[NDEV];
  int32_t sum[NDEV];
} job;

static dsp_status record(void *ctx, int dev) {
  job *j = ctx;
  j->thread[dev] = pthread_self();
  j->calls[dev]++;
  j->threads[dev] = omp_get_max_threads();
  int32_t x = dev + 1;
  DSP_TRY(dsp_comm_allreduce(j->be->tp[dev], &x, &x, 1, DSP_I32, DSP_REDUCE_SUM));
  j->sum[dev] = x;
  if (dev == j->fail_dev) return dsp_fail(DSP_ERR_RANGE, "device %d's own reason", dev);
  return DSP_OK;
}

/* Device 1 fails before the collective the others enter: they must not wait for it. */
static dsp_status strand(void *ctx, int dev) {
  job *j = ctx;
  if (dev == 1) return dsp_fail(DSP_ERR_NOMEM, "device 1 ran out");
  int32_t x = 1;
  j->nested[dev] = dsp_comm_allreduce(j->be->tp[dev], &x, &x, 1, DSP_I32, DSP_REDUCE_SUM);
  return j->nested[dev];
}

static dsp_status nest(void *ctx, int dev) {
  job *j = ctx;
  j->nested[dev] = dsp_backend_each(j->be, record, ctx);
  return DSP_OK;
}

static void test_each(void **st) {
  (void)st;
  dsp_backend *be;
  dsp_backend_config cfg = {.kind = DSP_BACKEND_CPU, .devices = NDEV};
  assert_int_equal(dsp_backend_create(&cfg, &be), DSP_OK);
  assert_int_equal(dsp_backend_tp_size(be), NDEV);
  assert_int_equal(dsp_backend_devices(be), NDEV);
  assert_string_equal(dsp_comm_kind(be->tp[1]), "threads");
  job j = {.be = be, .fail_dev = -1};
  pthread_t first[NDEV];
  for (int call = 0; call < 3; call++) {
    assert_int_equal(dsp_backend_each(be, record, &j), DSP_OK);
    for (int d = 0; d < NDEV; d++) {
      assert_int_equal(j.calls[d], call + 1);
      assert_int_equal(j.sum[d], NDEV * (NDEV + 1) / 2);
      assert_true(j.threads[d] >= 1);
      if (call == 0) first[d] = j.thread[d];
      else assert_true(pthread_equal(first[d], j.thread[d])); /* the same thread each call */
    }
  }
  assert_true(pthread_equal(first[0], pthread_self()));
  for (int d = 1; d < NDEV; d++) {
    assert_false(pthread_equal(first[d], pthread_self()));
    for (int e = 1; e < d; e++) assert_false(pthread_equal(first[d], first[e]));
  }
  j.fail_dev = 2;
  assert_int_equal(dsp_backend_each(be, record, &j), DSP_ERR_RANGE);
  assert_non_null(strstr(dsp_error_message(), "device 2: device 2's own reason"));
  for (int d = 0; d < NDEV; d++) j.nested[d] = DSP_OK;
  assert_int_equal(dsp_backend_each(be, nest, &j), DSP_OK);
  for (int d = 0; d < NDEV; d++) assert_int_equal(j.nested[d], DSP_ERR_ARG);
  j.fail_dev = -1;
  assert_int_equal(dsp_backend_each(be, record, &j), DSP_OK); /* still usable */
  /* a device that fails alone: the others' collective returns, and the reason reported is the failing device's */
  for (int k = 0; k < 200; k++) { /* the failure lands before, during and after the others' arrival */
    assert_int_equal(dsp_backend_each(be, strand, &j), DSP_ERR_NOMEM);
    assert_non_null(strstr(dsp_error_message(), "device 1: device 1 ran out"));
    assert_int_equal(j.nested[0], DSP_ERR_COMM);
    assert_int_equal(j.nested[2], DSP_ERR_COMM);
  }
  assert_int_equal(dsp_backend_each(be, record, &j), DSP_OK); /* the group works again */
  for (int d = 0; d < NDEV; d++) assert_int_equal(j.sum[d], NDEV * (NDEV + 1) / 2);
  dsp_backend_free(be);
}

static void test_refusals(void **st) {
  (void)st;
  dsp_backend *be = NULL;
  dsp_backend_config cfg = {.kind = DSP_BACKEND_CPU, .devices = DSP_BACKEND_MAX_DEVICES + 1};
  assert_int_equal(dsp_backend_create(&cfg, &be), DSP_ERR_ARG);
  assert_null(be);
}

static void test_memory_used(void **st) {
  (void)st;
  dsp_backend *be;
  dsp_backend_config cfg = {.kind = DSP_BACKEND_CPU};
  assert_int_equal(dsp_backend_create(&cfg, &be), DSP_OK);
  size_t before = 0, after = 0;
  assert_int_equal(dsp_op_memory_used(be, 0, &before), DSP_OK);
  assert_true(before > 0);
  const size_t n = (size_t)256 << 20; /* well above what the process held so far */
  volatile char *p = malloc(n);
  assert_non_null((void *)p);
  for (size_t i = 0; i < n; i += 4096) p[i] = (char)i;
  assert_int_equal(dsp_op_memory_used(be, 0, &after), DSP_OK);
  free((void *)p);
  assert_true(after >= before + n - ((size_t)16 << 20));
  assert_int_equal(dsp_op_memory_used(be, 1, &after), DSP_ERR_ARG); /* one device */
  assert_int_equal(dsp_op_memory_used(be, 0, NULL), DSP_ERR_ARG);
  dsp_backend_free(be);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_each), cmocka_unit_test(test_refusals),
                                     cmocka_unit_test(test_memory_used)};
  return cmocka_run_group_tests_name("backend", tests, NULL, NULL);
}
