// core/wait_test.cc - the event wait in its three spin modes: long spin, short spin,
// yielding; each wakes on a signal (while spinning and asleep) and times out on time.
#include <gtest/gtest.h>

#include <sched.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

extern "C" {
#include "core/status.h"
#include "core/clock.h"
#include "core/wait.h"
}

namespace {

const int64_t kModes[] = {100000, 0, -20000}; /* spin 100 us, the short spin, yield 20 us */

TEST(Wait, ReturnsAtOnceWhenTheCounterHasMoved) {
    for (int64_t spin : kModes) {
        tr__event ev = {};
        tr__event_signal(&ev);
        EXPECT_EQ(tr__event_wait_spin(&ev, 0, tr__deadline(1000), spin), 0) << spin;
    }
}

TEST(Wait, TimesOutAtTheDeadlineInEveryMode) {
    for (int64_t spin : kModes) {
        tr__event ev = {};
        auto t0 = std::chrono::steady_clock::now();
        EXPECT_EQ(tr__event_wait_spin(&ev, 0, tr__deadline(50), spin), TR_ETIMEDOUT) << spin;
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
        EXPECT_GE(ms, 49) << spin;
        EXPECT_LT(ms, 2000) << spin;
        EXPECT_EQ(ev.sleepers, 0u) << spin;
    }
}

/* A signal while the waiter spins (at once) and once it sleeps (after 30 ms). */
TEST(Wait, ASignalWakesTheWaiterSpinningOrAsleep) {
    for (int64_t spin : kModes)
        for (int delay_ms : {0, 30}) {
            tr__event ev = {};
            std::thread t([&] {
                std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
                tr__event_signal(&ev);
            });
            EXPECT_EQ(tr__event_wait_spin(&ev, 0, tr__deadline(5000), spin), 0)
                << spin << " " << delay_ms;
            t.join();
        }
}

/* Two threads bound to one core take turns 2000 times: the yielding wait hands the core
 * over (a long spin there would hold it until the scheduler's tick, every turn). */
TEST(Wait, TwoThreadsOnOneCoreTakeTurnsByYielding) {
    cpu_set_t all, one;
    ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) {
            CPU_SET(c, &one);
            break;
        }
    tr__event ping = {}, pong = {};
    std::atomic<int> failed{0};
    auto player = [&](tr__event *mine, tr__event *theirs, bool first) {
        sched_setaffinity(0, sizeof one, &one);
        for (uint32_t i = 0; i < 2000; i++) {
            if (!first && tr__event_wait_spin(mine, i, tr__deadline(10000), -20000)) failed++;
            tr__event_signal(theirs);
            if (first && tr__event_wait_spin(mine, i, tr__deadline(10000), -20000)) failed++;
        }
    };
    std::thread a(player, &ping, &pong, true), b(player, &pong, &ping, false);
    a.join();
    b.join();
    EXPECT_EQ(failed.load(), 0);
    EXPECT_EQ(ping.seq, 2000u);
    EXPECT_EQ(pong.seq, 2000u);
}

} // namespace

/* The polling of sockets (tr__spin): polls until TR__SPIN_MISSES waits in a row whose
 * event came late or never, then not until one comes soon again, slept or not. */
TEST(Spin, StopsAfterLateEventsAndResumesOnASoonOne) {
    tr__spin s = {0};
    const int64_t spin = 30000, soon = TR__SPIN_NEAR * spin, late = soon + 1;
    for (int i = 0; i < 100; i++) { /* a caller in a loop: every reply soon */
        ASSERT_TRUE(tr__spin_try(&s));
        tr__spin_waited(&s, 5000, spin, 1);
    }
    for (int i = 0; i < TR__SPIN_MISSES - 1; i++) { /* late now and then: still polls */
        tr__spin_waited(&s, late, spin, 1);
        EXPECT_TRUE(tr__spin_try(&s)) << i;
    }
    tr__spin_waited(&s, soon, spin, 1); /* one soon resets the count */
    for (int i = 0; i < TR__SPIN_MISSES; i++) {
        EXPECT_TRUE(tr__spin_try(&s)) << i;
        tr__spin_waited(&s, 10 * late, spin, i % 2); /* late, or timed out */
    }
    EXPECT_FALSE(tr__spin_try(&s)); /* calls longer than the poll: it stops */
    for (int i = 0; i < 1000; i++)
        tr__spin_waited(&s, late, spin, 1);
    EXPECT_FALSE(tr__spin_try(&s));
    tr__spin_waited(&s, soon, spin, 0); /* a timeout is never soon */
    EXPECT_FALSE(tr__spin_try(&s));
    tr__spin_waited(&s, spin / 2, spin, 1); /* an event soon after a sleep: again */
    EXPECT_TRUE(tr__spin_try(&s));
}

/* Whether the machine has a CPU to spare: an answer (0 or 1) on every call (it is
 * called on every poll), from /proc/loadavg at most every TR__CPUS_FREE_MS. */
TEST(Spin, CpusFreeAlwaysAnswers) {
    for (int i = 0; i < 100000; i++) {
        int v = tr__cpus_free();
        ASSERT_TRUE(v == 0 || v == 1) << v;
    }
}

/* Asymmetric events (tr__event_publish, tr__event_wait_asym) between two processes: the
 * publisher moves the event kRounds times, each after a pause of 0-300 us, so that the
 * waiter (a short spin, then asleep) sleeps through many of them. No wake-up is lost: every
 * wait ends well before its 2 s deadline. With TROUPE_MEMBARRIER=0 in both (no barrier:
 * fenced stores, sleeps in slices of TR__ASYM_SLICE_NS) the same holds. */
struct AsymShared {
    tr__event ev;
    int asym_pub, asym_wait, failed;
    int64_t worst_ns;
};

const uint32_t kRounds = 3000;

void PublishAndWait(bool membarrier, AsymShared *sh) {
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        ASSERT_GE(kids[k], 0);
        if (kids[k]) continue;
        if (!membarrier) setenv("TROUPE_MEMBARRIER", "0", 1);
        srand(1234 + k);
        if (k == 0) { /* the publisher */
            sh->asym_pub = tr__event_asym_ok();
            for (uint32_t i = 1; i <= kRounds; i++) {
                struct timespec p = {0, (rand() % 300) * 1000};
                if (p.tv_nsec) nanosleep(&p, NULL);
                tr__event_publish(&sh->ev, i);
            }
            _exit(0);
        }
        sh->asym_wait = tr__event_asym_ok(); /* the waiter */
        for (uint32_t i = 1; i <= kRounds;) {
            uint32_t cur = tr__event_seq(&sh->ev);
            if ((int32_t)(cur - i) >= 0) {
                i = cur + 1;
                continue;
            }
            int64_t t0 = tr__now_ns();
            int rc = tr__event_wait_asym(&sh->ev, cur, tr__deadline(2000), 0, NULL);
            int64_t took = tr__now_ns() - t0;
            if (took > sh->worst_ns) sh->worst_ns = took;
            if (rc) {
                sh->failed = rc;
                _exit(1);
            }
        }
        _exit(0);
    }
    for (int k = 0; k < 2; k++) {
        int st = 0;
        ASSERT_EQ(waitpid(kids[k], &st, 0), kids[k]);
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "process " << k << " status " << st;
    }
}

TEST(Asym, NoWakeUpIsLostBetweenProcesses) {
    for (bool membarrier : {true, false}) {
        auto *sh = static_cast<AsymShared *>(mmap(NULL, sizeof(AsymShared), PROT_READ | PROT_WRITE,
                                                  MAP_SHARED | MAP_ANONYMOUS, -1, 0));
        ASSERT_NE(sh, MAP_FAILED);
        PublishAndWait(membarrier, sh);
        EXPECT_EQ(sh->failed, 0) << "membarrier " << membarrier << ": a wait failed";
        EXPECT_EQ(tr__event_seq(&sh->ev), kRounds);
        EXPECT_LT(sh->worst_ns, 500000000) << "membarrier " << membarrier;
        if (!membarrier) {
            EXPECT_EQ(sh->asym_pub, 0);
            EXPECT_EQ(sh->asym_wait, 0);
        } else if (!sh->asym_pub) {
            printf("membarrier(2) GLOBAL_EXPEDITED is not available here: the fenced way ran\n");
        }
        munmap(sh, sizeof(AsymShared));
    }
}
