/* core/wait.c - spin-then-futex waits. Shared (not FUTEX_PRIVATE) futexes: the word may
 * live in memory mapped by several processes. */
#include "core/wait.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/status.h"

#define SPINS 200

int tr__event_wait(tr__event *ev, uint32_t expected, int64_t deadline) {
    return tr__event_wait_spin(ev, expected, deadline, 0);
}

int tr__event_wait_spin(tr__event *ev, uint32_t expected, int64_t deadline, int64_t spin_ns) {
    return tr__event_wait_stop(ev, expected, deadline, spin_ns, NULL);
}

/* The stop word is looked at wherever seq is, and once more just before sleeping. */
#define STOPPED(stop) ((stop) && __atomic_load_n((stop), __ATOMIC_SEQ_CST))

/* Registered for MEMBARRIER_CMD_GLOBAL_EXPEDITED: 1 yes, 0 no, -1 not tried yet. */
static int asym = -1;

/* A child of fork(2) registers again on first use (its memory map is a new one). */
static void asym_forget(void) {
    __atomic_store_n(&asym, -1, __ATOMIC_RELAXED);
}

static void asym_at_fork(void) {
    pthread_atfork(NULL, NULL, asym_forget);
}

int tr__event_asym_ok(void) {
    int v = __atomic_load_n(&asym, __ATOMIC_ACQUIRE);
    if (v >= 0) return v;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, asym_at_fork);
    /* (racing first callers register twice: harmless) */
    const char *off = getenv("TROUPE_MEMBARRIER"); /* "0": fenced stores, sliced sleeps */
    if (off && strcmp(off, "0") == 0) {
        __atomic_store_n(&asym, 0, __ATOMIC_RELEASE);
        return 0;
    }
    long q = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    v = q > 0 && (q & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
        syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
    __atomic_store_n(&asym, v, __ATOMIC_RELEASE);
    return v;
}

void tr__event_publish(tr__event *ev, uint32_t seq) {
    if (!tr__event_asym_ok()) {
        tr__event_set(ev, seq);
        return;
    }
    __atomic_store_n(&ev->seq, seq, __ATOMIC_RELEASE);
    /* (the look at sleepers stays after the store in program order: a waiter's barrier
     * that comes between them finds the store in this CPU's buffer and drains it) */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&ev->sleepers, __ATOMIC_RELAXED))
        syscall(SYS_futex, &ev->seq, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

static int wait_impl(tr__event *ev, uint32_t expected, int64_t deadline, int64_t spin_ns,
                     const uint32_t *stop, int asym_wait);

int tr__event_wait_stop(tr__event *ev, uint32_t expected, int64_t deadline, int64_t spin_ns,
                        const uint32_t *stop) {
    return wait_impl(ev, expected, deadline, spin_ns, stop, 0);
}

int tr__event_wait_asym(tr__event *ev, uint32_t expected, int64_t deadline, int64_t spin_ns,
                        const uint32_t *stop) {
    return wait_impl(ev, expected, deadline, spin_ns, stop, 1);
}

static int wait_impl(tr__event *ev, uint32_t expected, int64_t deadline, int64_t spin_ns,
                     const uint32_t *stop, int asym_wait) {
    uint32_t *addr = &ev->seq;
    if (spin_ns > 0) { /* every party has a core: keep it, a yield or a sleep costs more */
        int64_t until = tr__now_ns() + spin_ns;
        if (deadline != TR__NO_DEADLINE && deadline < until) until = deadline;
        for (unsigned i = 1;; i++) {
            if (__atomic_load_n(addr, __ATOMIC_ACQUIRE) != expected) return 0;
            tr__cpu_relax();
            if (i % 64 == 0 && (tr__now_ns() >= until || STOPPED(stop))) break;
        }
    } else if (spin_ns < 0) { /* cores are shared: let the others run */
        int64_t until = tr__now_ns() - spin_ns;
        if (deadline != TR__NO_DEADLINE && deadline < until) until = deadline;
        for (;;) {
            if (__atomic_load_n(addr, __ATOMIC_ACQUIRE) != expected) return 0;
            sched_yield();
            if (tr__now_ns() >= until || STOPPED(stop)) break;
        }
    } else {
        for (int i = 0; i < SPINS; i++) {
            if (__atomic_load_n(addr, __ATOMIC_ACQUIRE) != expected) return 0;
            if (i % 16 == 15)
                sched_yield();
            else
                tr__cpu_relax();
        }
    }
    for (;;) {
        if (__atomic_load_n(addr, __ATOMIC_ACQUIRE) != expected) return 0;
        if (STOPPED(stop)) return tr__err(TR_ECLOSED, "wait stopped");
        struct timespec ts, *tsp = NULL;
        int64_t left = deadline == TR__NO_DEADLINE ? INT64_MAX : deadline - tr__now_ns();
        if (left <= 0) return tr__err(TR_ETIMEDOUT, "wait timed out");
        /* Announce the sleep before re-checking, so a signaler that bumps seq after our
         * check sees sleepers > 0 and makes the wake call (seq_cst on both sides; for an
         * asymmetric event, the barrier on every CPU: tr__event_publish). */
        __atomic_add_fetch(&ev->sleepers, 1, __ATOMIC_SEQ_CST);
        if (asym_wait &&
            (!tr__event_asym_ok() ||
             syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) != 0) &&
            left > TR__ASYM_SLICE_NS)
            left = TR__ASYM_SLICE_NS; /* (no barrier: a missed wake-up costs a slice) */
        if (left != INT64_MAX) {
            ts.tv_sec = left / 1000000000;
            ts.tv_nsec = left % 1000000000;
            tsp = &ts;
        }
        long r = 0;
        int e = 0;
        if (__atomic_load_n(addr, __ATOMIC_SEQ_CST) == expected && !STOPPED(stop)) {
            r = syscall(SYS_futex, addr, FUTEX_WAIT, expected, tsp, NULL, 0);
            e = errno;
        }
        __atomic_sub_fetch(&ev->sleepers, 1, __ATOMIC_SEQ_CST);
        if (r != 0 && e != EAGAIN && e != EINTR && e != ETIMEDOUT)
            return tr__err_errno(e, "futex wait");
    }
}

void tr__event_wake(tr__event *ev) {
    if (__atomic_load_n(&ev->sleepers, __ATOMIC_SEQ_CST))
        syscall(SYS_futex, &ev->seq, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

void tr__event_set(tr__event *ev, uint32_t seq) {
    __atomic_store_n(&ev->seq, seq, __ATOMIC_SEQ_CST);
    tr__event_wake(ev);
}

void tr__event_signal(tr__event *ev) {
    __atomic_add_fetch(&ev->seq, 1, __ATOMIC_SEQ_CST);
    tr__event_wake(ev);
}

int tr__cpus_free(void) {
    static int64_t next_ns; /* when to look again; the answer until then */
    static int ncpu, verdict = 1;
    int64_t now = tr__now_ns();
    if (now < __atomic_load_n(&next_ns, __ATOMIC_RELAXED))
        return __atomic_load_n(&verdict, __ATOMIC_RELAXED);
    __atomic_store_n(&next_ns, now + (int64_t)TR__CPUS_FREE_MS * 1000000, __ATOMIC_RELAXED);
    int n = __atomic_load_n(&ncpu, __ATOMIC_RELAXED);
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
        __atomic_store_n(&ncpu, n, __ATOMIC_RELAXED);
    }
    /* "0.50 0.40 0.30 R/T LAST": R threads runnable now, this one among them */
    int v = 1, fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char buf[128];
        ssize_t k = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (k > 0) {
            buf[k] = 0;
            const char *slash = strchr(buf, '/');
            const char *p = slash;
            while (p && p > buf && p[-1] >= '0' && p[-1] <= '9')
                p--;
            if (p && p < slash) v = atoi(p) <= n; /* (this thread among them) */
        }
    }
    __atomic_store_n(&verdict, v, __ATOMIC_RELAXED);
    if (!v) /* (busy may be a peer's last poll: look again soon) */
        __atomic_store_n(&next_ns, now + TR__CPUS_BUSY_NS, __ATOMIC_RELAXED);
    return v;
}
