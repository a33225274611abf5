/* core/clock.h - monotonic time and deadlines. A timeout in ms (or TR_FOREVER = -1)
 * becomes an absolute deadline once, at the start of a wait; loops then ask for what is
 * left. Header-only. */
#ifndef TR_CORE_CLOCK_H
#define TR_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

#define TR__NO_DEADLINE INT64_MAX

static inline int64_t tr__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t tr__deadline(int timeout_ms) {
    if (timeout_ms < 0) return TR__NO_DEADLINE;
    return tr__now_ns() + (int64_t)timeout_ms * 1000000;
}

/* Milliseconds left until the deadline, rounded up, for poll(2); -1 if none. */
static inline int tr__ms_left(int64_t deadline) {
    if (deadline == TR__NO_DEADLINE) return -1;
    int64_t left = deadline - tr__now_ns();
    if (left <= 0) return 0;
    int64_t ms = (left + 999999) / 1000000;
    return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

#endif
