/* core/status.h - setting the per-thread error text that tr__last_error() returns.
 *
 * Contract: tr__err(code, fmt, ...) records the text on the calling thread and returns
 * code, so a failure is reported where it starts: `return tr__err(TR_EINVAL, "...")`.
 * tr__err_errno converts errno where the failing syscall is. No locking: the text is
 * thread-local.
 */
#ifndef TR_CORE_STATUS_H
#define TR_CORE_STATUS_H

#include "troupe/status.h"

#define TR__PRINTF(a, b) __attribute__((format(printf, a, b)))

/* "MAJOR.MINOR.PATCH" (tr_version_string) */
#define TR__STR2(x) #x
#define TR__STR(x) TR__STR2(x)
#define TR__VERSION_STRING                                                                         \
    TR__STR(TR_VERSION_MAJOR) "." TR__STR(TR_VERSION_MINOR) "." TR__STR(TR_VERSION_PATCH)

int tr__err(int code, const char *fmt, ...) TR__PRINTF(2, 3);
/* Maps errno e to a TR_E* code and records "what: strerror(e)". */
int tr__err_errno(int e, const char *fmt, ...) TR__PRINTF(2, 3);
/* Puts the context fmt says before the thread's error text ("context: text", or the
 * context alone if there is none) and returns code: for a caller that adds what it was
 * doing to a failure below it, `return tr__err_wrap(rc, "actor %zu", i)`. */
int tr__err_wrap(int code, const char *fmt, ...) TR__PRINTF(2, 3);
/* troupe/status.h's tr_strerror, tr_errname, tr_last_error (the façade's, api/status.c,
 * forward here): for the layers below it. */
const char *tr__strerror(int status);
const char *tr__errname(int status);
const char *tr__last_error(void);
/* Maps an errno value to the closest TR_E* code. */
int tr__from_errno(int e);
/* Clears the text (start of a public call that succeeded). */
void tr__err_clear(void);

#endif
