/* Core: bf16 (contract 1), tensor views, arena, the selection order (contract 4),
 * Philox4x32-10 known answers (contract 5). Expected values come from DESIGN.md
 * and the published Random123 vectors, not from our code. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/arena.h"
#include "core/bf16.h"
#include "core/env.h"
#include "core/philox.h"
#include "core/select.h"
#include "core/status.h"
#include "core/tensor.h"

static float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static void test_bf16_round_table(void **st) {
  (void)st;
  static const struct { uint32_t in; uint16_t out; } t[] = {
      {0x3F800000u, 0x3F80}, /* 1.0 */
      {0x3F808000u, 0x3F80}, /* tie, lower is even: down */
      {0x3F818000u, 0x3F82}, /* tie, upper is even: up */
      {0x3F808001u, 0x3F81}, /* above the tie */
      {0x3F807FFFu, 0x3F80}, /* below the tie */
      {0xBF818000u, 0xBF82}, /* negative tie to even */
      {0x7F800000u, 0x7F80}, /* +inf */
      {0xFF800000u, 0xFF80}, /* -inf */
      {0x7F7FFFFFu, 0x7F80}, /* largest fp32 rounds to inf */
      {0x7F7F7FFFu, 0x7F7F}, /* stays finite */
      {0x80000000u, 0x8000}, /* -0 */
      {0x00000000u, 0x0000}, /* +0 */
      {0x00010000u, 0x0001}, /* smallest bf16 subnormal: kept, not flushed */
      {0x00018000u, 0x0002}, /* subnormal tie to even */
      {0x00008000u, 0x0000}, /* half the smallest subnormal: tie to even 0 */
      {0x00008001u, 0x0001}, /* just above: up */
      {0x80018000u, 0x8002}, /* negative subnormal tie */
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) assert_int_equal(dsp_f32_to_bf16(f_of(t[i].in)), t[i].out);
}

static void test_bf16_nan_stays_nan(void **st) {
  (void)st;
  /* NaNs whose payload lives only in the low 16 bits must not become inf. */
  uint32_t nans[] = {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0x7F80FFFFu};
  for (size_t i = 0; i < 5; i++) {
    uint16_t h = dsp_f32_to_bf16(f_of(nans[i]));
    assert_true((h & 0x7F80) == 0x7F80 && (h & 0x007F) != 0);
    assert_int_equal(h >> 15, nans[i] >> 31);
    assert_true(isnan(dsp_bf16_to_f32(h)));
  }
}

static void test_bf16_widen_exact(void **st) {
  (void)st;
  for (uint32_t h = 0; h < 0x10000u; h++) {
    float f = dsp_bf16_to_f32((dsp_bf16)h);
    uint32_t u;
    memcpy(&u, &f, 4);
    assert_int_equal(u, h << 16);
    if (!isnan(f)) assert_int_equal(dsp_f32_to_bf16(f), h);
  }
}

static void test_tensor_views(void **st) {
  (void)st;
  float buf[4 * 6];
  for (int i = 0; i < 24; i++) buf[i] = (float)i;
  dsp_tensor t = dsp_tensor_2d(buf, DSP_F32, 4, 6);
  assert_true(dsp_tensor_is_contiguous(&t));
  dsp_tensor c = dsp_tensor_cols(&t, 2, 5); /* rows are slices of a wider row */
  assert_false(dsp_tensor_is_contiguous(&c));
  assert_int_equal(c.shape[0], 4);
  assert_int_equal(c.shape[1], 3);
  assert_int_equal(c.stride[0], 6);
  int64_t idx[2] = {3, 1};
  assert_true(*(float *)dsp_tensor_at(&c, idx) == 3 * 6 + 3);
  dsp_tensor r = dsp_tensor_rows(&c, 1, 3);
  idx[0] = 0; idx[1] = 0;
  assert_true(*(float *)dsp_tensor_at(&r, idx) == 8.0f);
  int64_t sh3[3] = {2, 3, 4};
  dsp_tensor t3 = dsp_tensor_view(buf, DSP_F32, 3, sh3);
  dsp_tensor f;
  assert_int_equal(dsp_tensor_flatten2d(&t3, &f), DSP_OK);
  assert_int_equal(f.shape[0], 6);
  assert_int_equal(f.shape[1], 4);
  /* a view whose middle dim is strided cannot merge */
  dsp_tensor bad = t3;
  bad.stride[0] = 100;
  assert_int_equal(dsp_tensor_flatten2d(&bad, &f), DSP_ERR_SHAPE);
  assert_true(strlen(dsp_error_message()) > 0);
  char s[64];
  assert_string_equal(dsp_shape_str(&t3, s, sizeof s), "[2, 3, 4]");
}

static void test_arena(void **st) {
  (void)st;
  dsp_arena *a;
  assert_int_equal(dsp_arena_create(1000, &a), DSP_OK);
  void *p = dsp_arena_alloc(a, 10), *q = dsp_arena_alloc(a, 100);
  assert_non_null(p);
  assert_non_null(q);
  assert_int_equal((uintptr_t)p % 64, 0);
  assert_int_equal((uintptr_t)q % 64, 0);
  assert_int_equal(dsp_arena_used(a), 64 + 128);
  assert_null(dsp_arena_alloc(a, 5000));
  assert_non_null(strstr(dsp_error_message(), "arena"));
  dsp_arena_reset(a);
  assert_int_equal(dsp_arena_used(a), 0);
  assert_int_equal(dsp_arena_high_water(a), 192);
  dsp_arena_free(a);
}

static void test_select_order(void **st) {
  (void)st;
  float nan = NAN, inf = INFINITY;
  assert_true(dsp_pair_better(nan, 5, inf, 1));   /* NaN beats +inf */
  assert_true(dsp_pair_better(nan, 2, nan, 3));   /* first NaN wins */
  assert_false(dsp_pair_better(nan, 3, nan, 2));
  assert_false(dsp_pair_better(inf, 0, nan, 9));
  assert_true(dsp_pair_better(1.0f, 7, 1.0f, 8)); /* tie: lower id */
  assert_true(dsp_pair_better(-0.0f, 1, 0.0f, 2)); /* -0 == +0 */
  assert_true(dsp_pair_better(0.0f, 1, -0.0f, 2));
  assert_true(dsp_pair_better(-inf, 0, -inf, 1)); /* all -inf: id 0 */
  assert_true(dsp_pair_better(2.0f, 9, 1.0f, 0));
  assert_true(dsp_pair_better(inf, 4, inf, 5));
  assert_false(dsp_pair_better(-inf, 0, -inf, 0)); /* irreflexive */
}

static void test_philox_kat(void **st) {
  (void)st;
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1},
  };
  for (int i = 0; i < 3; i++) {
    dsp_philox4 c = {{kat[i][0], kat[i][1], kat[i][2], kat[i][3]}};
    dsp_philox4 r = dsp_philox4x32_10(c, kat[i][4], kat[i][5]);
    for (int j = 0; j < 4; j++) assert_int_equal(r.v[j], kat[i][6 + j]);
  }
}

static void test_gumbel_keying(void **st) {
  (void)st;
  /* word0 of Philox(ctr {0,0,0,0}, key {0,0}) is 0x6627e8d5:
   * u = (0x6627e8d5 + 0.5) / 2^32, g = -log(-log(u)). */
  double u = ((double)0x6627e8d5u + 0.5) / 4294967296.0;
  assert_true(dsp_gumbel(0, 0, 0) == (float)(-log(-log(u))));
  /* seed all-ones, id and position all-ones: the second vector's word0 */
  u = ((double)0x408f276du + 0.5) / 4294967296.0;
  assert_true(dsp_gumbel(UINT64_MAX, -1, -1) == (float)(-log(-log(u))));
  assert_true(dsp_gumbel(1, 2, 3) != dsp_gumbel(1, 2, 4));
}

static void test_status_messages(void **st) {
  (void)st;
  assert_int_equal(dsp_fail(DSP_ERR_RANGE, "token %d out of range", 7), DSP_ERR_RANGE);
  assert_string_equal(dsp_error_message(), "token 7 out of range");
  assert_string_equal(dsp_status_name(DSP_ERR_RANGE), "out of range");
  assert_string_equal(dsp_dtype_name(DSP_BF16), "BF16");
  assert_int_equal(dsp_dtype_size(DSP_I64), 8);
  assert_non_null(dsp_env_get()->cpu_kernel);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bf16_round_table), cmocka_unit_test(test_bf16_nan_stays_nan),
      cmocka_unit_test(test_bf16_widen_exact), cmocka_unit_test(test_tensor_views),
      cmocka_unit_test(test_arena),           cmocka_unit_test(test_select_order),
      cmocka_unit_test(test_philox_kat),      cmocka_unit_test(test_gumbel_keying),
      cmocka_unit_test(test_status_messages),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
