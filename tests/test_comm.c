/* The communicator (src/comm): self and MPI backends, the dispatch checks and
 * dsp_comm_agree. Modes (first argument):
 *   self            the one-rank backend (no MPI)
 *   threads         the in-process backend at 1-4 ranks, a thread each
 *   mpi NP          every MPI collective, run under mpirun -np NP
 *   rank-exit       rank 1 exits(3) while the others wait in a barrier
 *   abort           rank 1 calls dsp_comm_abort(c, 5) while the others wait
 * The last two are driven by comm_rank_exit.sh, which checks that mpirun ends
 * quickly with a non-zero code. Expected values follow from comm.h's contract
 * (rank r's bytes at offset r * bytes, sums and maxima over the ranks' inputs,
 * "rank R: <message>" from the lowest failing rank). */
#include <math.h>
#include <setjmp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm/comm.h"
#include "comm/comm_impl.h"
#include "core/status.h"

/* Checks that work on any thread: on cmocka's own they are its assertions; on
 * a rank's thread of the "threads" communicator (where cmocka cannot unwind)
 * they print and end the process. */
static _Thread_local int t_on_rank_thread;

#define CK_FAIL(...)                                    \
  do {                                                  \
    if (!t_on_rank_thread) fail_msg(__VA_ARGS__);       \
    fprintf(stderr, "test_comm: " __VA_ARGS__);         \
    fputc('\n', stderr);                                \
    exit(1); /* the other ranks would wait for this one */ \
  } while (0)
#define CK(cond)                                              \
  do {                                                        \
    if (!(cond)) CK_FAIL("%s:%d: %s", __FILE__, __LINE__, #cond); \
  } while (0)
#define CK_EQ(a, b)                                                                                  \
  do {                                                                                               \
    long long a_ = (long long)(a), b_ = (long long)(b);                                              \
    if (a_ != b_) CK_FAIL("%s:%d: %s is %lld, want %lld", __FILE__, __LINE__, #a, a_, b_);           \
  } while (0)

static dsp_comm *g_comm;
static int g_expect_size;
static int g_passed; /* set by each MPI test as its last statement */

/* ---- patterns ------------------------------------------------------------ */

static uint8_t pattern(int rank, size_t i) { return (uint8_t)(rank * 131 + i * 7 + (i >> 8) * 3 + 1); }

static void fill(uint8_t *p, size_t n, int rank) {
  for (size_t i = 0; i < n; i++) p[i] = pattern(rank, i);
}

/* recv must hold each rank's pattern at offset r * bytes. */
static void check_gathered(const uint8_t *recv, size_t bytes, int size) {
  for (int r = 0; r < size; r++)
    for (size_t i = 0; i < bytes; i++)
      if (recv[(size_t)r * bytes + i] != pattern(r, i))
        CK_FAIL("allgather: rank %d byte %zu is %u, want %u", r, i, recv[(size_t)r * bytes + i], pattern(r, i));
}

static void gather_case(dsp_comm *c, size_t bytes) {
  int rank = dsp_comm_rank(c), size = dsp_comm_size(c);
  uint8_t *send = malloc(bytes + 1), *recv = malloc((size_t)size * bytes + 1);
  CK(send != NULL);
  CK(recv != NULL);
  fill(send, bytes, rank);
  memset(recv, 0xEE, (size_t)size * bytes);
  CK_EQ(dsp_comm_allgather(c, send, recv, bytes), DSP_OK);
  check_gathered(recv, bytes, size);
  for (size_t i = 0; i < bytes; i++) CK_EQ(send[i], pattern(rank, i)); /* send untouched */

  /* in place: own part already at rank * bytes */
  memset(recv, 0xEE, (size_t)size * bytes);
  fill(recv + (size_t)rank * bytes, bytes, rank);
  CK_EQ(dsp_comm_allgather(c, recv + (size_t)rank * bytes, recv, bytes), DSP_OK);
  check_gathered(recv, bytes, size);
  free(send);
  free(recv);
}

static void bcast_case(dsp_comm *c, size_t bytes, int root) {
  uint8_t *buf = malloc(bytes + 1);
  CK(buf != NULL);
  if (dsp_comm_rank(c) == root) fill(buf, bytes, root);
  else memset(buf, 0xEE, bytes);
  CK_EQ(dsp_comm_bcast(c, buf, bytes, root), DSP_OK);
  for (size_t i = 0; i < bytes; i++)
    if (buf[i] != pattern(root, i)) CK_FAIL("bcast from %d: byte %zu is %u, want %u", root, i, buf[i], pattern(root, i));
  free(buf);
}

/* ---- allreduce: each rank's inputs and the exact expected results -------- */

enum { NRED = 100 };

static float f32_sum_in(int r, int i) { return (float)(i % 17) * 0.25f + (float)r; }
static float f32_max_in(int r, int i) {
  if (i == 0) return -INFINITY;                       /* all -inf: max is -inf */
  if (i == 1) return r == g_expect_size - 1 ? INFINITY : 1.0f; /* +inf on the last rank */
  return (float)((i + 3 * r) % 5 - 2) * 1.5f;
}
static int32_t i32_sum_in(int r, int i) { return (i + 1) * (r % 2 ? -1 : 1) * (r + 1); }
static int32_t i32_max_in(int r, int i) {
  if (i == 0) return INT32_MIN;
  if (i == 1) return r == 0 ? INT32_MAX : INT32_MIN;
  return (int32_t)((i * 7 + r * 13) % 23) - 11;
}
static int64_t i64_sum_in(int r, int i) { return ((int64_t)(r + 1) << 33) + i - 5; }
static int64_t i64_max_in(int r, int i) {
  if (i == 0) return INT64_MIN;
  if (i == 1) return r == g_expect_size - 1 ? INT64_MAX : INT64_MIN + r;
  return ((int64_t)((i * 7 + r * 13) % 23) << 40) - r; /* needs all 64 bits */
}

static float f32_sum_want(int size, int i) {
  /* size * (i % 17) / 4 + size * (size - 1) / 2: quarters of small integers, exact in f32 */
  return (float)size * (float)(i % 17) * 0.25f + (float)(size * (size - 1) / 2);
}
static int64_t i64_sum_want(int size, int i) {
  return ((int64_t)(size * (size + 1) / 2) << 33) + (int64_t)size * (i - 5);
}

static void reduce_case(dsp_comm *c, int in_place) {
  int rank = dsp_comm_rank(c), size = dsp_comm_size(c);
  float fs[NRED], fm[NRED], fr[NRED];
  int32_t is[NRED], im[NRED], ir[NRED];
  int64_t ls[NRED], lm[NRED], lr[NRED];
  for (int i = 0; i < NRED; i++) {
    fs[i] = f32_sum_in(rank, i), fm[i] = f32_max_in(rank, i);
    is[i] = i32_sum_in(rank, i), im[i] = i32_max_in(rank, i);
    ls[i] = i64_sum_in(rank, i), lm[i] = i64_max_in(rank, i);
  }
#define RUN(src, out, dt, op)                                                        \
  do {                                                                               \
    if (in_place) {                                                                  \
      memcpy(out, src, sizeof out);                                                  \
      CK_EQ(dsp_comm_allreduce(c, out, out, NRED, dt, op), DSP_OK);       \
    } else {                                                                         \
      memset(out, 0x5A, sizeof out);                                                 \
      CK_EQ(dsp_comm_allreduce(c, src, out, NRED, dt, op), DSP_OK);       \
    }                                                                                \
  } while (0)

  RUN(fs, fr, DSP_F32, DSP_REDUCE_SUM);
  for (int i = 0; i < NRED; i++) CK(fr[i] == f32_sum_want(size, i));
  RUN(fm, fr, DSP_F32, DSP_REDUCE_MAX);
  for (int i = 0; i < NRED; i++) {
    float want = -INFINITY;
    for (int r = 0; r < size; r++) want = fmaxf(want, f32_max_in(r, i));
    CK(fr[i] == want);
  }
  CK(isinf(fr[0]) && fr[0] < 0);
  CK(fr[1] == INFINITY);

  RUN(is, ir, DSP_I32, DSP_REDUCE_SUM);
  for (int i = 0; i < NRED; i++) {
    int32_t k = 0; /* sum over r of (+-1)(r+1): 1 - 2 + 3 - 4 ... */
    for (int r = 0; r < size; r++) k += (r % 2 ? -1 : 1) * (r + 1);
    CK_EQ(ir[i], (i + 1) * k);
  }
  RUN(im, ir, DSP_I32, DSP_REDUCE_MAX);
  CK_EQ(ir[0], INT32_MIN);
  CK_EQ(ir[1], INT32_MAX);
  for (int i = 2; i < NRED; i++) {
    int32_t want = INT32_MIN;
    for (int r = 0; r < size; r++) want = i32_max_in(r, i) > want ? i32_max_in(r, i) : want;
    CK_EQ(ir[i], want);
  }

  RUN(ls, lr, DSP_I64, DSP_REDUCE_SUM);
  for (int i = 0; i < NRED; i++) CK(lr[i] == i64_sum_want(size, i));
  RUN(lm, lr, DSP_I64, DSP_REDUCE_MAX);
  CK(lr[0] == INT64_MIN);
  CK(lr[1] == INT64_MAX);
  for (int i = 2; i < NRED; i++) {
    int64_t want = INT64_MIN;
    for (int r = 0; r < size; r++) want = i64_max_in(r, i) > want ? i64_max_in(r, i) : want;
    CK(lr[i] == want);
  }
#undef RUN
  /* not in place: the inputs are untouched */
  for (int i = 0; i < NRED; i++) {
    CK(fs[i] == f32_sum_in(rank, i));
    CK(ls[i] == i64_sum_in(rank, i));
  }
}

/* F32 sums on host engines go by the halving tree over ranks (ranks [lo, hi)
 * are [lo, mid) + [mid, hi) with mid = lo + (hi - lo) / 2: ((x0 + x1) + (x2 +
 * x3)) for four, x0 + (x1 + x2) for three), on every rank: inputs of mixed
 * signs and magnitudes, where another order would round differently, against
 * that order computed here. */
static float order_in(int r, size_t i) {
  uint32_t h = (uint32_t)(r * 2654435761u) ^ (uint32_t)(i * 40503u + 0x9e3779b9u);
  h ^= h >> 15, h *= 0x2c1b3c6du, h ^= h >> 12;
  const float m = 1.0f + (float)(h % 1000u) / 1000.0f;
  return ldexpf((h & 0x80000000u) ? -m : m, (int)((h >> 8) % 48u) - 24);
}

static float tree_want(int lo, int hi, size_t i) {
  if (hi - lo == 1) return order_in(lo, i);
  const int mid = lo + (hi - lo) / 2;
  volatile float l = tree_want(lo, mid, i), r = tree_want(mid, hi, i);
  return l + r;
}

static void order_case(dsp_comm *c, size_t n) {
  int rank = dsp_comm_rank(c), size = dsp_comm_size(c);
  float *x = malloc(n * sizeof *x + 4);
  CK(x != NULL);
  for (size_t i = 0; i < n; i++) x[i] = order_in(rank, i);
  CK_EQ(dsp_comm_allreduce(c, x, x, n, DSP_F32, DSP_REDUCE_SUM), DSP_OK);
  size_t differ = 0;
  for (size_t i = 0; i < n; i++) {
    volatile float want = tree_want(0, size, i);
    differ += memcmp(&x[i], (const void *)&want, 4) != 0;
  }
  free(x);
  if (differ) CK_FAIL("F32 sum over %d ranks: %zu of %zu elements not in the tree's order", size, differ, n);
}

/* ---- MPI tests ------------------------------------------------------------- */

static void test_mpi_identity(void **st) {
  (void)st;
  assert_string_equal(dsp_comm_kind(g_comm), "mpi");
  assert_int_equal(dsp_comm_size(g_comm), g_expect_size);
  int rank = dsp_comm_rank(g_comm);
  assert_true(rank >= 0 && rank < g_expect_size);
  /* every rank has a distinct number: the sum of ranks is 0 + 1 + ... + size-1 */
  int32_t s = rank;
  assert_int_equal(dsp_comm_allreduce(g_comm, &s, &s, 1, DSP_I32, DSP_REDUCE_SUM), DSP_OK);
  assert_int_equal(s, g_expect_size * (g_expect_size - 1) / 2);
  g_passed = 1;
}

static void test_mpi_allgather(void **st) {
  (void)st;
  static const size_t sizes[] = {0, 1, 7, 4096, 1u << 20};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) gather_case(g_comm, sizes[k]);
  /* zero bytes with no buffers at all */
  assert_int_equal(dsp_comm_allgather(g_comm, NULL, NULL, 0), DSP_OK);
  g_passed = 1;
}

/* The > INT_MAX path (a derived datatype of max-byte blocks plus a remainder),
 * exercised by lowering the per-call limit instead of moving gigabytes. */
static void test_mpi_allgather_split(void **st) {
  (void)st;
  assert_int_equal(dsp_comm_mpi_set_max_count(g_comm, 1000), DSP_OK);
  gather_case(g_comm, 2500);       /* 2 blocks + 500 */
  gather_case(g_comm, 1u << 20);   /* 1048 blocks + 576 */
  gather_case(g_comm, 1000);       /* exactly the limit: one plain call */
  assert_int_equal(dsp_comm_mpi_set_max_count(g_comm, 4096), DSP_OK);
  gather_case(g_comm, 1u << 20);   /* 256 blocks, no remainder */
  assert_int_equal(dsp_comm_mpi_set_max_count(g_comm, INT32_MAX), DSP_OK);
  g_passed = 1;
}

static void test_mpi_bcast(void **st) {
  (void)st;
  int last = dsp_comm_size(g_comm) - 1;
  static const size_t sizes[] = {0, 1, 13, 1u << 20};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    bcast_case(g_comm, sizes[k], 0);
    bcast_case(g_comm, sizes[k], last);
  }
  assert_int_equal(dsp_comm_mpi_set_max_count(g_comm, 1000), DSP_OK); /* chunked */
  bcast_case(g_comm, 1u << 20, 0);
  bcast_case(g_comm, 2500, last);
  assert_int_equal(dsp_comm_mpi_set_max_count(g_comm, INT32_MAX), DSP_OK);
  g_passed = 1;
}

static void test_mpi_allreduce(void **st) {
  (void)st;
  reduce_case(g_comm, 0);
  reduce_case(g_comm, 1);
  assert_int_equal(dsp_comm_mpi_set_max_count(g_comm, 7), DSP_OK); /* 100 = 14 chunks of 7 + 2 */
  reduce_case(g_comm, 0);
  reduce_case(g_comm, 1);
  assert_int_equal(dsp_comm_mpi_set_max_count(g_comm, INT32_MAX), DSP_OK);
  assert_int_equal(dsp_comm_allreduce(g_comm, NULL, NULL, 0, DSP_I64, DSP_REDUCE_SUM), DSP_OK);
  g_passed = 1;
}

static void test_mpi_sum_order(void **st) {
  (void)st;
  order_case(g_comm, 1000);
  order_case(g_comm, 300000); /* sizes where MPI's own algorithms differ */
  assert_int_equal(dsp_comm_mpi_set_max_count(g_comm, 7), DSP_OK);
  order_case(g_comm, 100);
  assert_int_equal(dsp_comm_mpi_set_max_count(g_comm, INT32_MAX), DSP_OK);
  g_passed = 1;
}

static void test_mpi_barrier(void **st) {
  (void)st;
  for (int k = 0; k < 3; k++) assert_int_equal(dsp_comm_barrier(g_comm), DSP_OK);
  g_passed = 1;
}

/* Checks that are refused before any rank communicates (so they are local). */
static void test_mpi_bad_args(void **st) {
  (void)st;
  int size = dsp_comm_size(g_comm);
  uint8_t b[8] = {0};
  assert_int_equal(dsp_comm_bcast(g_comm, b, 8, size), DSP_ERR_ARG);
  assert_non_null(strstr(dsp_error_message(), "root"));
  assert_int_equal(dsp_comm_bcast(g_comm, b, 8, -1), DSP_ERR_ARG);
  assert_int_equal(dsp_comm_allreduce(g_comm, b, b, 2, DSP_BF16, DSP_REDUCE_SUM), DSP_ERR_DTYPE);
  assert_int_equal(dsp_comm_allreduce(g_comm, b, b, 2, DSP_I32, (dsp_reduce_op)7), DSP_ERR_ARG);
  assert_int_equal(dsp_comm_allgather(g_comm, NULL, b, 1), DSP_ERR_ARG);
  if (size >= 2) /* size * bytes would overflow size_t */
    assert_int_equal(dsp_comm_allgather(g_comm, b, b, SIZE_MAX / (size_t)size + 1), DSP_ERR_ARG);
  assert_int_equal(dsp_comm_set_stream(g_comm, b), DSP_ERR_UNSUPPORTED);
  assert_int_equal(dsp_comm_mpi_set_max_count(g_comm, 0), DSP_ERR_ARG);
  g_passed = 1;
}

/* An error MPI itself reports comes back as DSP_ERR_COMM with file:line and
 * MPI's text. The dispatch refuses a bad root, so call the backend's op
 * directly; MPI checks the root before communicating, on every rank. */
static void test_mpi_error_text(void **st) {
  (void)st;
  uint8_t b[4] = {0};
  assert_int_equal(g_comm->ops->bcast(g_comm, b, 4, dsp_comm_size(g_comm) + 5), DSP_ERR_COMM);
  const char *m = dsp_error_message();
  if (!strstr(m, "comm_mpi.c:") || !strstr(m, ": MPI_Bcast failed: ") || !strstr(m, "root"))
    fail_msg("unexpected message: %s", m);
  assert_int_equal(dsp_comm_barrier(g_comm), DSP_OK); /* still usable */
  g_passed = 1;
}

static void test_mpi_agree_ok(void **st) {
  (void)st;
  dsp_fail(DSP_ERR_ARG, "untouched");
  assert_int_equal(dsp_comm_agree(g_comm, DSP_OK), DSP_OK);
  assert_string_equal(dsp_error_message(), "untouched");
  g_passed = 1;
}

static void test_mpi_agree_last_fails(void **st) {
  (void)st;
  int rank = dsp_comm_rank(g_comm), last = dsp_comm_size(g_comm) - 1;
  dsp_status local = DSP_OK;
  dsp_error_clear();
  if (rank == last) local = dsp_fail(DSP_ERR_IO, "boom");
  assert_int_equal(dsp_comm_agree(g_comm, local), DSP_ERR_IO);
  char want[64];
  if (last == 0) snprintf(want, sizeof want, "boom"); /* one rank: none to name */
  else snprintf(want, sizeof want, "rank %d: boom", last);
  assert_string_equal(dsp_error_message(), want);
  g_passed = 1;
}

/* Ranks 1 and 2 fail with different reasons: the lowest failing rank wins. */
static void test_mpi_agree_lowest_wins(void **st) {
  (void)st;
  int rank = dsp_comm_rank(g_comm), size = dsp_comm_size(g_comm);
  if (size < 2) {
    g_passed = 1;
    skip();
  }
  dsp_status local = DSP_OK;
  dsp_error_clear();
  if (rank == 1) local = dsp_fail(DSP_ERR_RANGE, "token id 99 >= vocab 50");
  if (rank == 2) local = dsp_fail(DSP_ERR_IO, "cannot open w2.safetensors");
  assert_int_equal(dsp_comm_agree(g_comm, local), DSP_ERR_RANGE);
  assert_string_equal(dsp_error_message(), "rank 1: token id 99 >= vocab 50");
  /* agreeing on an agreed failure names the rank once */
  assert_int_equal(dsp_comm_agree(g_comm, rank == 1 ? DSP_ERR_RANGE : DSP_OK), DSP_ERR_RANGE);
  assert_string_equal(dsp_error_message(), "rank 1: token id 99 >= vocab 50");
  g_passed = 1;
}

/* Every rank fails: rank 0's reason; an empty reason is replaced by the status name. */
static void test_mpi_agree_all_fail(void **st) {
  (void)st;
  int rank = dsp_comm_rank(g_comm);
  dsp_error_clear();
  dsp_status local = rank == 0 ? DSP_ERR_SHAPE : dsp_fail(DSP_ERR_NOMEM, "rank-local reason");
  assert_int_equal(dsp_comm_agree(g_comm, local), DSP_ERR_SHAPE);
  assert_string_equal(dsp_error_message(), dsp_comm_size(g_comm) > 1 ? "rank 0: bad shape" : "bad shape");
  /* and the communicator still works afterwards */
  assert_int_equal(dsp_comm_agree(g_comm, DSP_OK), DSP_OK);
  g_passed = 1;
}

static int mpi_test_setup(void **st) {
  (void)st;
  g_passed = 0;
  return 0;
}

/* A rank whose test failed must not leave the others waiting in a collective:
 * it ends the job (mpirun then exits non-zero). */
static int mpi_test_teardown(void **st) {
  (void)st;
  if (!g_passed) {
    fprintf(stderr, "test_comm: rank %d failed a test; aborting all ranks\n", dsp_comm_rank(g_comm));
    fflush(stderr);
    fflush(stdout);
    dsp_comm_abort(g_comm, 1);
  }
  return 0;
}

#define MPI_TEST(f) cmocka_unit_test_setup_teardown(f, mpi_test_setup, mpi_test_teardown)

static int run_mpi(int np) {
  g_expect_size = np;
  if (dsp_comm_mpi_create(&g_comm) != DSP_OK) {
    fprintf(stderr, "test_comm: %s\n", dsp_error_message());
    return 1;
  }
  /* one copy of cmocka's progress lines; failures still go to stderr from every rank */
  if (dsp_comm_rank(g_comm) != 0 && !freopen("/dev/null", "w", stdout)) return 1;
  const struct CMUnitTest tests[] = {
      MPI_TEST(test_mpi_identity),       MPI_TEST(test_mpi_allgather),   MPI_TEST(test_mpi_allgather_split),
      MPI_TEST(test_mpi_bcast),          MPI_TEST(test_mpi_allreduce),   MPI_TEST(test_mpi_sum_order),
      MPI_TEST(test_mpi_barrier),
      MPI_TEST(test_mpi_bad_args),       MPI_TEST(test_mpi_error_text),  MPI_TEST(test_mpi_agree_ok),    MPI_TEST(test_mpi_agree_last_fails),
      MPI_TEST(test_mpi_agree_lowest_wins), MPI_TEST(test_mpi_agree_all_fail),
  };
  int failed = cmocka_run_group_tests_name("comm mpi", tests, NULL, NULL);
  dsp_comm_free(g_comm);
  return failed ? 1 : 0;
}

/* ---- self backend -------------------------------------------------------- */

static void test_self_basics(void **st) {
  (void)st;
  dsp_comm *c;
  assert_int_equal(dsp_comm_self_create(&c), DSP_OK);
  assert_string_equal(dsp_comm_kind(c), "self");
  assert_int_equal(dsp_comm_rank(c), 0);
  assert_int_equal(dsp_comm_size(c), 1);
  gather_case(c, 0);
  gather_case(c, 13);
  gather_case(c, 1u << 20);
  bcast_case(c, 13, 0);
  assert_int_equal(dsp_comm_barrier(c), DSP_OK);
  g_expect_size = 1;
  reduce_case(c, 0);
  reduce_case(c, 1);
  assert_int_equal(dsp_comm_allgather(c, NULL, NULL, 0), DSP_OK);
  dsp_comm_free(c);
  dsp_comm_free(NULL);
}

static void test_self_errors(void **st) {
  (void)st;
  dsp_comm *c;
  assert_int_equal(dsp_comm_self_create(&c), DSP_OK);
  uint8_t b[4] = {0};
  assert_int_equal(dsp_comm_bcast(c, b, 4, 1), DSP_ERR_ARG);
  assert_int_equal(dsp_comm_allreduce(c, b, b, 1, DSP_F16, DSP_REDUCE_MAX), DSP_ERR_DTYPE);
  assert_int_equal(dsp_comm_allgather(c, b, NULL, 4), DSP_ERR_ARG);
  assert_int_equal(dsp_comm_set_stream(c, b), DSP_ERR_UNSUPPORTED);
  assert_non_null(strstr(dsp_error_message(), "self"));
  assert_int_equal(dsp_comm_mpi_set_max_count(c, 10), DSP_ERR_ARG);
  assert_int_equal(dsp_comm_self_create(NULL), DSP_ERR_ARG);
  assert_int_equal(dsp_comm_barrier(NULL), DSP_ERR_ARG);

  dsp_fail(DSP_ERR_ARG, "untouched");
  assert_int_equal(dsp_comm_agree(c, DSP_OK), DSP_OK);
  assert_string_equal(dsp_error_message(), "untouched");
  assert_int_equal(dsp_comm_agree(c, dsp_fail(DSP_ERR_IO, "boom")), DSP_ERR_IO);
  assert_string_equal(dsp_error_message(), "boom"); /* alone: no rank to name */
  dsp_comm_free(c);
}

static void test_self_abort_exits(void **st) {
  (void)st;
  dsp_comm *c;
  assert_int_equal(dsp_comm_self_create(&c), DSP_OK);
  fflush(stdout);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) dsp_comm_abort(c, 7);
  int wst = 0;
  assert_int_equal(waitpid(pid, &wst, 0), pid);
  assert_true(WIFEXITED(wst));
  assert_int_equal(WEXITSTATUS(wst), 7);
  dsp_comm_free(c);
}

static int run_self(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_self_basics),
      cmocka_unit_test(test_self_errors),
      cmocka_unit_test(test_self_abort_exits),
  };
  return cmocka_run_group_tests_name("comm self", tests, NULL, NULL) ? 1 : 0;
}

/* ---- the threads communicator: every collective, each rank on its thread -- */

static void *threads_rank(void *arg) {
  dsp_comm *c = arg;
  t_on_rank_thread = 1;
  const int rank = dsp_comm_rank(c), size = dsp_comm_size(c);
  CK(!strcmp(dsp_comm_kind(c), "threads"));
  static const size_t gsizes[] = {0, 1, 7, 4096, 1u << 20};
  for (size_t k = 0; k < sizeof gsizes / sizeof gsizes[0]; k++) gather_case(c, gsizes[k]);
  static const size_t bsizes[] = {0, 13, 1u << 20};
  for (size_t k = 0; k < sizeof bsizes / sizeof bsizes[0]; k++) {
    bcast_case(c, bsizes[k], 0);
    bcast_case(c, bsizes[k], size - 1);
  }
  reduce_case(c, 0);
  reduce_case(c, 1);
  order_case(c, 1000);
  order_case(c, 300000);
  for (int k = 0; k < 3; k++) CK_EQ(dsp_comm_barrier(c), DSP_OK);
  /* the lowest failing rank's reason reaches every rank */
  dsp_error_clear();
  dsp_status local = rank == size - 1 ? dsp_fail(DSP_ERR_IO, "boom") : DSP_OK;
  if (size > 2 && rank == 1) local = dsp_fail(DSP_ERR_RANGE, "earlier");
  const dsp_status got = dsp_comm_agree(c, local);
  char want[64];
  if (size == 1) snprintf(want, sizeof want, "boom");
  else if (size > 2) snprintf(want, sizeof want, "rank 1: earlier");
  else snprintf(want, sizeof want, "rank %d: boom", size - 1);
  CK_EQ(got, size > 2 ? DSP_ERR_RANGE : DSP_ERR_IO);
  CK(!strcmp(dsp_error_message(), want));
  CK_EQ(dsp_comm_agree(c, DSP_OK), DSP_OK);
  return NULL;
}

static int run_threads(void) {
  for (int n = 1; n <= 4; n++) {
    dsp_comm *c[4];
    if (dsp_comm_threads_create_group(n, c) != DSP_OK) {
      fprintf(stderr, "test_comm: %s\n", dsp_error_message());
      return 1;
    }
    g_expect_size = n;
    pthread_t th[4];
    for (int r = 0; r < n; r++)
      if (pthread_create(&th[r], NULL, threads_rank, c[r])) return 1;
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < n; r++) dsp_comm_free(c[r]);
    printf("comm threads: %d rank%s passed\n", n, n == 1 ? "" : "s");
  }
  dsp_comm *c;
  if (dsp_comm_threads_create_group(0, &c) != DSP_ERR_ARG || dsp_comm_threads_create_group(2, NULL) != DSP_ERR_ARG) {
    fprintf(stderr, "test_comm: a group of 0 ranks or without an output array was accepted\n");
    return 1;
  }
  return 0;
}

/* ---- rank-exit driver modes ---------------------------------------------- */

static int run_exit_mode(int use_abort) {
  dsp_comm *c;
  if (dsp_comm_mpi_create(&c) != DSP_OK) {
    fprintf(stderr, "test_comm: %s\n", dsp_error_message());
    return 1;
  }
  if (dsp_comm_rank(c) == 1) {
    if (use_abort) dsp_comm_abort(c, 5);
    exit(3);
  }
  dsp_status s = dsp_comm_barrier(c);
  /* Reaching here means the barrier came back although rank 1 is gone. */
  fprintf(stderr, "test_comm: rank %d left the barrier: %s\n", dsp_comm_rank(c),
          s == DSP_OK ? "ok (unexpected)" : dsp_error_message());
  return s == DSP_OK ? 0 : 2;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "self")) return run_self();
  if (argc >= 2 && !strcmp(argv[1], "threads")) return run_threads();
  if (argc >= 3 && !strcmp(argv[1], "mpi")) return run_mpi(atoi(argv[2]));
  if (argc >= 2 && !strcmp(argv[1], "rank-exit")) return run_exit_mode(0);
  if (argc >= 2 && !strcmp(argv[1], "abort")) return run_exit_mode(1);
  fprintf(stderr, "usage: test_comm self | threads | mpi NP | rank-exit | abort\n");
  return 2;
}
