/* core/status.h - setting the per-thread error text that tr_last_error() returns.
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

int tr__err(int code, const char *fmt, ...) TR__PRINTF(2, 3);
/* Maps errno e to a TR_E* code and records "what: strerror(e)". */
int tr__err_errno(int e, const char *fmt, ...) TR__PRINTF(2, 3);
/* Maps an errno value to the closest TR_E* code. */
int tr__from_errno(int e);
/* Clears the text (start of a public call that succeeded). */
void tr__err_clear(void);

#endif
