/* Status helpers and the always-on assertion for internal invariants. */
#ifndef DSP_CORE_STATUS_H
#define DSP_CORE_STATUS_H
#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

/* (dsp_fail is public: dspark.h.) */
void dsp_error_clear(void);

/* Propagate a non-OK status. */
#define DSP_TRY(expr)                   \
  do {                                  \
    dsp_status dsp_try_s_ = (expr);     \
    if (dsp_try_s_ != DSP_OK) return dsp_try_s_; \
  } while (0)

/* Internal invariant: never compiled out. Prints file and line, then aborts. */
void dsp_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define DSP_ASSERT(c) ((c) ? (void)0 : dsp_assert_fail(#c, __FILE__, __LINE__))

#ifdef __cplusplus
}
#endif
#endif
