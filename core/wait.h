/* core/wait.h - the one wait primitive for shared memory (store, collectives, channels):
 * spin briefly, then sleep on a futex; every wait has a deadline.
 *
 * Waits on a 32-bit word in (possibly process-shared) memory until it differs from
 * `expected`. On this 2-core machine a kernel wake-up costs ~10 us and pure spinning with
 * more runnable processes than cores costs milliseconds, so the spin is short and yields.
 * Thread safety: any thread, any process mapping the word.
 */
#ifndef TR_CORE_WAIT_H
#define TR_CORE_WAIT_H

#include <stdint.h>

/* Tells the CPU this thread is spinning (frees the sibling hyper-thread, saves power),
 * as libuv's uv__cpu_relax: `pause` on x86, `yield` on ARM, a compiler barrier elsewhere. */
static inline void tr__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || (defined(__arm__) && defined(__ARM_ARCH) && __ARM_ARCH >= 7)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* Polling a socket before sleeping on it ("call_spin_us": a caller waiting for its
 * reply, actor/calls.c; an actor's worker after an event, actor/worker.c). A wait whose
 * event came later than TR__SPIN_NEAR polls' time (its peer's work takes longer than a
 * poll), TR__SPIN_MISSES times in a row, stops the polling until a wait's event comes
 * that soon again: the poll's CPU would be taken from the processes doing the work, on a
 * host with fewer cores than processes. "That soon" counts a slept wait too, so that a
 * peer's slow wake-up from its own sleep does not keep this side from polling. */
#define TR__SPIN_MISSES 4
#define TR__SPIN_NEAR 4

typedef struct tr__spin {
    unsigned misses; /* waits in a row whose event came late */
} tr__spin;

/* Whether the machine has a CPU to spare: no more threads runnable than CPUs online
 * (/proc/loadavg's, looked at most every TR__CPUS_FREE_MS per process). A poll on a
 * machine without one takes a CPU from a process doing work. */
#define TR__CPUS_FREE_MS 5
#define TR__CPUS_BUSY_NS 250000
int tr__cpus_free(void);

/* Whether the waits so far make a poll before this one worth it (the callers check
 * tr__cpus_free too). */
static inline int tr__spin_try(const tr__spin *s) {
    return s->misses < TR__SPIN_MISSES;
}
/* After a wait that began waited_ns ago: got, its event came (else it timed out). */
static inline void tr__spin_waited(tr__spin *s, int64_t waited_ns, int64_t spin_ns, int got) {
    if (got && waited_ns <= TR__SPIN_NEAR * spin_ns)
        s->misses = 0;
    else if (s->misses < TR__SPIN_MISSES)
        s->misses++;
}

/* An event counter in (possibly shared) memory: waiters wait for `seq` to move; signalers
 * bump it and make the futex syscall only when someone sleeps. Zero-initialised. */
typedef struct tr__event {
    uint32_t seq;
    uint32_t sleepers;
} tr__event;

/* Returns 0 once ev->seq != seen, or TR_ETIMEDOUT at the deadline (tr__deadline()). */
int tr__event_wait(tr__event *ev, uint32_t seen, int64_t deadline);
/* The same, spinning up to spin_ns more before sleeping: for parties that each have a
 * core (a kernel wake-up there costs more than the wait). A negative spin_ns yields the
 * core instead, for up to -spin_ns: for parties that share cores (the one awaited may be
 * waiting for this one's core; a sleep and a wake-up cost more than a yield). */
int tr__event_wait_spin(tr__event *ev, uint32_t seen, int64_t deadline, int64_t spin_ns);
/* The same, ending with TR_ECLOSED once *stop (may be NULL) is non-zero: whoever sets
 * it (a seq_cst store) then calls tr__event_wake on the events waited on. A wake-up that
 * races the waiter's going to sleep can be missed (seq did not move): the waiter then
 * sees the stop at its deadline, so wait in slices (dag/chan.c: 100 ms). */
int tr__event_wait_stop(tr__event *ev, uint32_t seen, int64_t deadline, int64_t spin_ns,
                        const uint32_t *stop);
/* Bumps ev->seq and wakes every waiter. */
void tr__event_signal(tr__event *ev);
/* Moves ev->seq to `seq` and wakes every waiter (for a counter with one writer). */
void tr__event_set(tr__event *ev, uint32_t seq);
/* Wakes every waiter without moving ev->seq (they look at their stop word). */
void tr__event_wake(tr__event *ev);
/* Asymmetric events, for a counter with one writer that moves millions of times a second
 * (a compiled graph's channels, dag/chan.c). tr__event_signal's atomic add is a full
 * fence: on x86 it waits for every store before it (the value just written to a line
 * the peer holds) to reach the cache. tr__event_publish is a plain store and a plain look
 * at `sleepers`; the fence moves to the rare side: a waiter about to sleep announces
 * itself, then has every CPU running a process of the node execute a barrier
 * (membarrier(2) MEMBARRIER_CMD_GLOBAL_EXPEDITED) before it looks at seq again. Either the
 * writer's store is visible by then, or the writer's look at `sleepers` comes after the
 * barrier and sees the waiter. It takes both ends registered (tr__event_asym_ok, once a
 * process): a process that could not register publishes with tr__event_set, and a waiter
 * that could not sleeps in slices of TR__ASYM_SLICE_NS (a wake-up it misses costs that). */
#define TR__ASYM_SLICE_NS 1000000
int tr__event_asym_ok(void);
/* Moves ev->seq to seq (its one writer) and wakes every asymmetric waiter. */
void tr__event_publish(tr__event *ev, uint32_t seq);
/* tr__event_wait_stop for an event moved by tr__event_publish. */
int tr__event_wait_asym(tr__event *ev, uint32_t seen, int64_t deadline, int64_t spin_ns,
                        const uint32_t *stop);

static inline uint32_t tr__event_seq(tr__event *ev) {
    return __atomic_load_n(&ev->seq, __ATOMIC_ACQUIRE);
}

#endif
