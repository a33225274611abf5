/* tests/collective_test.cc - shm collective groups across real actor processes: every
 * dtype x op x count {0, 1, odd, over a chunk} for world sizes 1, 2, 3, 4 and 8, checked
 * against a reference (in tests/test_actors.cc); ranks that never arrive, ranks that die,
 * ranks that disagree. */
#include <gtest/gtest.h>

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <tuple>
#include <string>
#include <vector>

#include "tests/test_actors.h"

extern "C" {
#include "collective/group.h"
#include "collective/registry.h"
#include "collective/shm/shm.h"
#include "core/nodeconn.h"
#include "core/trace.h"
}

namespace {

/* Joins `world` ranks of a group from threads of this process (joins do not block each
 * other; each thread first runs before(rank) if given), then runs body(rank, group) on
 * each; body returns "" or what went wrong. */
template <typename F>
void in_threads(tr_runtime *rt, int world, const char *backend, const char *name, F body,
                std::function<void(int)> before = {}) {
    std::vector<std::thread> ts;
    std::vector<std::string> errs((size_t)world);
    for (int r = 0; r < world; r++)
        ts.emplace_back([&, r] {
            if (before) before(r);
            tr_group *g = nullptr;
            int rc = tr_group_join(rt, world, r, backend, name, 10000, &g);
            if (rc) {
                errs[r] = std::string("init: ") + tr_last_error();
                return;
            }
            errs[r] = body(r, g);
            tr_group_destroy(g);
        });
    for (auto &t : ts)
        t.join();
    for (int r = 0; r < world; r++)
        EXPECT_EQ(errs[r], "") << backend << " rank " << r;
}

class CollTest : public ::testing::TestWithParam<std::tuple<const char *, int>> {
  protected:
    void SetUp() override {
        ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    }
    void TearDown() override {
        tr_shutdown(rt);
    }
    /* cpus: each actor's num_cpus (>= 1 binds it to cores of its own) */
    std::vector<tr_ref> run(const char *name, int world, int timeout_ms, int mode, uint64_t count,
                            int participants, const char *backend = "shm", double cpus = 0,
                            uint64_t seed = 0) {
        std::vector<tr_ref> calls;
        tr_actor_options opts = TR_ACTOR_OPTIONS_INIT;
        opts.num_cpus = cpus;
        for (int r = 0; r < participants; r++) {
            tr_actor_id a;
            EXPECT_EQ(tr_actor_create(rt, "Counter", &opts, "c", 1, &a), 0);
            actors.push_back(a);
            CollArgs args = {};
            snprintf(args.name, sizeof args.name, "%s", name);
            args.world = world;
            args.rank = r;
            args.timeout_ms = timeout_ms;
            args.mode = mode;
            args.count = count;
            args.seed = seed;
            snprintf(args.backend, sizeof args.backend, "%s", backend);
            tr_ref c;
            EXPECT_EQ(tr_call(rt, a, "coll", &args, sizeof args, &c), 0);
            calls.push_back(c);
        }
        return calls;
    }
    tr_runtime *rt = nullptr;
    std::vector<tr_actor_id> actors;
};

TEST_P(CollTest, EveryDtypeOpAndCountAgreesWithTheReference) {
    const char *backend = std::get<0>(GetParam());
    int world = std::get<1>(GetParam());
    auto calls = run("suite", world, 30000, 0, 0, world, backend);
    for (int r = 0; r < world; r++) {
        const void *d;
        size_t n;
        ASSERT_EQ(tr_get(rt, calls[r], 120000, &d, &n), 0)
            << "rank " << r << ": " << tr_last_error();
        ASSERT_EQ(n, 8u);
        EXPECT_EQ(*(const int64_t *)d, 8 * 4 * (5 + 1 + 6 + (world > 1 ? 1 : 0)))
            << "ops checked on rank " << r;
        tr_ref_release(rt, calls[r]);
    }
}

/* Under TSan, 8 ranks on 2 cores take ~25 s a backend (the longest of the CI run's tests)
 * through the paths 4 ranks take: the other configurations run them. */
#if defined(__SANITIZE_THREAD__)
#define COLL_WORLDS 1, 2, 3, 4
#else
#define COLL_WORLDS 1, 2, 3, 4, 8
#endif
INSTANTIATE_TEST_SUITE_P(Shm, CollTest,
                         ::testing::Combine(::testing::Values("shm"),
                                            ::testing::Values(COLL_WORLDS)));
INSTANTIATE_TEST_SUITE_P(Gloo, CollTest,
                         ::testing::Combine(::testing::Values("gloo"),
                                            ::testing::Values(COLL_WORLDS)));

class CollFailures : public CollTest {};

class CollFailuresB : public CollTest {};

/* The suite again with shm's single copy off everywhere, and off on some ranks only (an op
 * uses it only where every rank can): large broadcasts, allgathers, gathers and scatters
 * go through the slots, after the same first step. */
TEST_F(CollFailures, TheSuiteWithoutSingleCopy) {
    for (int mode : {4, 5}) {
        auto calls = run(mode == 4 ? "nosingle" : "halfsingle", 3, 30000, mode, 0, 3);
        for (int r = 0; r < 3; r++) {
            const void *d;
            size_t n;
            ASSERT_EQ(tr_get(rt, calls[r], 120000, &d, &n), 0)
                << "mode " << mode << " rank " << r << ": " << tr_last_error();
            EXPECT_EQ(*(const int64_t *)d, 8 * 4 * (5 + 1 + 6 + 1));
            tr_ref_release(rt, calls[r]);
        }
    }
}

/* The suite with single copy forced on between two processes bound to cores of their own,
 * where rank 1 cannot write rank 0's memory (seccomp: process_vm_writev fails): the
 * broadcasts it roots leave rank 0 to read all of its buffer (no root writes a share), and
 * every result is the reference's. */
TEST_F(CollFailures, ARootThatCannotWriteItsPeersLetsThemReadItAll) {
    double cpus = sysconf(_SC_NPROCESSORS_ONLN) >= 2 ? 1 : 0;
    auto calls = run("nowrite", 2, 30000, 8, 0, 2, "shm", cpus);
    for (int r = 0; r < 2; r++) {
        const void *d;
        size_t n;
        ASSERT_EQ(tr_get(rt, calls[r], 120000, &d, &n), 0)
            << "rank " << r << ": " << tr_last_error();
        ASSERT_EQ(n, 8u);
        EXPECT_EQ(*(const int64_t *)d, 8 * 4 * (5 + 1 + 6 + 1));
        tr_ref_release(rt, calls[r]);
    }
}

/* Single copy between ranks that are threads of this process (reading one's own memory is
 * always allowed): forced on, every large op (broadcast, allgather, gather, scatter,
 * allreduce in and out of place) takes that path and gives the same bytes; off on one
 * rank, none does; by default, a group that knows nothing of the host starts with single
 * copy (each op kind's first two ops here), one whose process found the slots faster
 * starts with the slots, and one that found single copy faster with single copy. */
TEST_F(CollFailures, LargeOpsReadThePeersBufferDirectly) {
    const size_t n = 256 << 10; /* int32: 1 MiB a rank */
    /* -1: forced on (an allreduce out of place the pair's way: each rank reads the whole
     * of the other's send), -5: forced on, by shares; 1: rank 1 off, -2: the default,
     * knowing nothing; -3: the default where the slots were found faster, -4: where single
     * copy was */
    for (int off_rank : {-1, -5, 1, -2, -3, -4}) {
        std::string name = off_rank == -1   ? "direct"
                           : off_rank == -5 ? "direct-shares"
                           : off_rank == 1  ? "direct-off"
                                            : "auto" + std::to_string(-off_rank);
        tr__shm_set_host_way(off_rank == -3 ? 0 : off_rank == -4 ? 1 : -1);
        tr__shm_force_pair(off_rank == -1 ? 1 : off_rank == -5 ? 0 : -1);
        if (off_rank == -5) off_rank = -1;
        in_threads(rt, 2, "shm", name.c_str(), [&](int r, tr_group *g) -> std::string {
            if (tr_group_set_single_copy(g, 2) != TR_EINVAL) return "on = 2 accepted";
            if (off_rank >= -1 && tr_group_set_single_copy(g, r == off_rank ? 0 : 1))
                return tr_last_error();
            std::vector<int32_t> mine(n), all(2 * n), want(2 * n), b(n);
            for (size_t i = 0; i < n; i++) {
                mine[i] = (int32_t)(r * 1000003 + i);
                want[i] = (int32_t)i;
                want[n + i] = (int32_t)(1000003 + i);
                b[i] = r == 0 ? (int32_t)(7 * i) : -1;
            }
            if (tr_broadcast(g, b.data(), n, TR_INT32, 0, 10000)) return tr_last_error();
            for (size_t i = 0; i < n; i++)
                if (b[i] != (int32_t)(7 * i)) return "broadcast: wrong bytes";
            if (tr_allgather(g, mine.data(), all.data(), n, TR_INT32, 10000))
                return tr_last_error();
            if (all != want) return "allgather: wrong bytes";
            std::fill(all.begin(), all.end(), 0);
            if (tr_gather(g, mine.data(), r == 1 ? all.data() : nullptr, n, TR_INT32, 1, 10000))
                return tr_last_error();
            if (r == 1 && all != want) return "gather: wrong bytes";
            std::vector<int32_t> piece(n);
            if (tr_scatter(g, r == 0 ? want.data() : nullptr, piece.data(), n, TR_INT32, 0, 10000))
                return tr_last_error();
            if (!std::equal(piece.begin(), piece.end(), want.begin() + (long)(r * n)))
                return "scatter: wrong bytes";
            /* allreduce, out of place and in place, of a count the ranks split unevenly */
            std::vector<int32_t> x(n + 3), y(n + 3, -1);
            for (size_t i = 0; i < x.size(); i++)
                x[i] = (int32_t)(r * 7 + i);
            if (tr_allreduce(g, x.data(), y.data(), x.size(), TR_INT32, TR_SUM, 10000))
                return tr_last_error();
            if (tr_allreduce(g, x.data(), x.data(), x.size(), TR_INT32, TR_SUM, 10000))
                return tr_last_error();
            for (size_t i = 0; i < x.size(); i++)
                if (y[i] != (int32_t)(7 + 2 * i) || x[i] != y[i])
                    return "allreduce: wrong sum at " + std::to_string(i) + ": " +
                           std::to_string(y[i]) + ", in place " + std::to_string(x[i]);
            /* (only where ranks have a core each: not on a one-CPU machine). By default
             * each op kind's first two large ops go by single copy, unless the process
             * found the slots faster */
            uint64_t ops = off_rank == 1 || off_rank == -3 ? 0 : 6;
            uint64_t expect = g->cores_own || g->spin_limit > 0 ? ops : 0;
            if (tr__shm_single_ops(g) != expect)
                return "single-copy ops: " + std::to_string(tr__shm_single_ops(g)) + ", want " +
                       std::to_string(expect);
            /* the allreduce out of place went the pair's way where forced (by default it
             * goes by shares first; in place, it cannot) */
            uint64_t pairs = expect && name == "direct" ? 1 : 0;
            if (tr__shm_pair_ops(g) != pairs)
                return "pair ops: " + std::to_string(tr__shm_pair_ops(g)) + ", want " +
                       std::to_string(pairs);
            /* the broadcast's root wrote the first half of the other's buffer itself */
            if (tr__shm_root_writes(g) != (r == 0 && expect ? 1u : 0u))
                return "root writes: " + std::to_string(tr__shm_root_writes(g));
            return "";
        });
    }
    tr__shm_set_host_way(-1);
    tr__shm_force_pair(-1);
}

/* An output of 16 MiB or more is written with streaming stores (shm.c, copy_out): a
 * broadcast's and an allgather's, through the slots and by single copy, to buffers at odd
 * addresses of odd lengths (the stores' aligned middle and the plain head and tail), arrive
 * whole. */
TEST_F(CollFailures, LargeOutputsArriveWholeAtAnyAlignment) {
    const size_t n = (8u << 20) + 5; /* uint8: 16 MiB + 10 gathered */
    for (int single : {0, 1}) {
        std::string name = "stream" + std::to_string(single);
        in_threads(rt, 2, "shm", name.c_str(), [&](int r, tr_group *g) -> std::string {
            if (tr_group_set_single_copy(g, single)) return tr_last_error();
            std::vector<uint8_t> mine(n + 1), all(2 * n + 3), b(2 * n + 3);
            uint8_t *m = mine.data() + 1, *out = all.data() + 3, *bb = b.data() + 3;
            for (size_t i = 0; i < n; i++)
                m[i] = (uint8_t)(i * 31 + (size_t)r * 7 + (i >> 12));
            for (size_t i = 0; i < 2 * n; i++)
                bb[i] = r == 0 ? (uint8_t)(i * 13 + (i >> 16)) : 0;
            if (tr_broadcast(g, bb, 2 * n, TR_UINT8, 0, 30000)) return tr_last_error();
            for (size_t i = 0; i < 2 * n; i++)
                if (bb[i] != (uint8_t)(i * 13 + (i >> 16)))
                    return "broadcast: wrong byte at " + std::to_string(i);
            if (tr_allgather(g, m, out, n, TR_UINT8, 30000)) return tr_last_error();
            for (size_t q = 0; q < 2; q++)
                for (size_t i = 0; i < n; i++)
                    if (out[q * n + i] != (uint8_t)(i * 31 + q * 7 + (i >> 12)))
                        return "allgather: wrong byte at " + std::to_string(q * n + i);
            if (all[0] || all[1] || all[2]) return "allgather: wrote before its buffer";
            return "";
        });
    }
}

/* By default, a 2-rank allreduce of buffers apart tries each way for several ops in a row
 * (a way may take a few ops to reach its speed): in a process that knows nothing of the
 * host, its first 8 ops of 1 MiB go by single copy (by shares), the next 8 by the slots,
 * the next 8 the pair's way; every sum is right. */
TEST_F(CollFailures, ATwoRankAllreduceTriesEachWayForOpsInARow) {
    const size_t n = 256 << 10; /* int32: 1 MiB a rank */
    tr__shm_set_host_way(-1);
    tr__shm_force_pair(-1);
    in_threads(rt, 2, "shm", "trials", [&](int r, tr_group *g) -> std::string {
        std::vector<int32_t> x(n), y(n);
        for (int op = 0; op < 24; op++) {
            for (size_t i = 0; i < n; i++)
                x[i] = (int32_t)(r * 5 + op + i);
            if (tr_allreduce(g, x.data(), y.data(), n, TR_INT32, TR_SUM, 10000))
                return tr_last_error();
            for (size_t i = 0; i < n; i++)
                if (y[i] != (int32_t)(5 + 2 * (op + i)))
                    return "op " + std::to_string(op) + ": wrong sum at " + std::to_string(i);
        }
        int cores = g->cores_own || g->spin_limit > 0; /* (single copy needs a core each) */
        if (tr__shm_single_ops(g) != (cores ? 16u : 0u))
            return "single-copy ops: " + std::to_string(tr__shm_single_ops(g));
        if (tr__shm_pair_ops(g) != (cores ? 8u : 0u))
            return "pair ops: " + std::to_string(tr__shm_pair_ops(g));
        return "";
    });
    tr__shm_set_host_way(-1);
}

/* A thread's ops are counted (this process's histogram of op durations, core/trace.h)
 * exactly, gathered or not (tr__book_coll; a driver's threads count each as it ends, a
 * worker's call gathers them): two runs of 2 ranks, one with 25 tiny allreduces a rank
 * and one with none (what joining and leaving count), differ by 50; and a thread that
 * gathers (as a worker's call does) has them all counted once its group goes. */
TEST_F(CollFailures, AThreadsGatheredOpsAreCountedOnceItsGroupGoes) {
    tr__proc_counters *pc = tr__proc_cnt();
    if (!pc) {
        printf("skipped: this process records no counters (TROUPE_TRACE=0)\n");
        return;
    }
    uint64_t n[2];
    for (int ops : {0, 25}) {
        uint64_t before = __atomic_load_n(&pc->coll[TR__CNT_SHM].n, __ATOMIC_RELAXED);
        std::string name = "gathered" + std::to_string(ops);
        in_threads(rt, 2, "shm", name.c_str(), [&](int r, tr_group *g) -> std::string {
            tr__book_on = r; /* (rank 1 gathers, as a worker's call) */
            for (int i = 0; i < ops; i++) {
                int32_t x = r + i, y = 0;
                if (tr_allreduce(g, &x, &y, 1, TR_INT32, TR_SUM, 10000)) return tr_last_error();
                if (y != 1 + 2 * i) return "wrong sum " + std::to_string(y);
            }
            return "";
        });
        n[ops != 0] = __atomic_load_n(&pc->coll[TR__CNT_SHM].n, __ATOMIC_RELAXED) - before;
    }
    EXPECT_EQ(n[1] - n[0], 50u) << "with no ops: " << n[0] << ", with 25 a rank: " << n[1];
}

/* Ranks bound to cores of their own spin for each other; ranks bound to one shared core
 * must not (each would keep the core from the rank it waits for). Both compute right. */
TEST_F(CollFailures, OnlyRanksWithCoresOfTheirOwnSpin) {
    cpu_set_t all;
    ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) cpus.push_back(c);
    if (cpus.size() < 2) {
        printf("skipped: one CPU, no two cores to bind to\n");
        return;
    }
    for (int shared : {0, 1}) {
        std::string name = shared ? "one-core" : "own-cores";
        in_threads(
            rt, 2, "shm", name.c_str(),
            [&](int r, tr_group *g) -> std::string {
                if (g->cores_own != !shared)
                    return "cores_own " + std::to_string(g->cores_own) + " with " + name;
                for (int i = 0; i < 2000; i++) {
                    int32_t x = r + 1;
                    if (tr_allreduce(g, &x, &x, 1, TR_INT32, TR_SUM, 10000)) return tr_last_error();
                    if (x != 3) return "wrong sum " + std::to_string(x);
                }
                return "";
            },
            [&](int r) {
                cpu_set_t one;
                CPU_ZERO(&one);
                CPU_SET(cpus[shared ? 0 : (size_t)r], &one);
                sched_setaffinity(0, sizeof one, &one);
            });
    }
}

/* Ranks that disagree on the count, dtype, reduction op, root or the op itself, with each
 * rank in turn arriving late: every rank gets TR_EINVAL naming the difference, at once, and
 * the group stays usable (tests/test_actors.cc, coll_mismatches). Two ranks bound to cores
 * where the machine has them (gloo: its I/O thread then shares the rank's core at
 * SCHED_IDLE), three and four floating. */
TEST_P(CollFailuresB, RanksThatDisagreeAllFailAndTheGroupStaysUsable) {
    const char *backend = std::get<0>(GetParam());
    for (int world : {2, 3, 4}) {
        std::string name = "disagree" + std::to_string(world);
        auto t0 = std::chrono::steady_clock::now();
        double cpus = world == 2 && sysconf(_SC_NPROCESSORS_ONLN) >= 2 ? 1 : 0;
        auto calls = run(name.c_str(), world, 10000, 6, 0, world, backend, cpus);
        for (int r = 0; r < world; r++) {
            const void *d;
            size_t n;
            ASSERT_EQ(tr_get(rt, calls[(size_t)r], 60000, &d, &n), 0)
                << backend << " world " << world << " rank " << r << ": " << tr_last_error();
            ASSERT_EQ(n, 8u);
            EXPECT_EQ(*(const int64_t *)d, 10 * (world + 1));
            tr_ref_release(rt, calls[(size_t)r]);
        }
        /* 10 x (world + 1) disagreements, 20 ms of lateness each: none waits a timeout */
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8));
    }
}

/* The same disagreements, hundreds of random rounds of them (coll_mismatches with a count):
 * a random case each round (1 to 20000 elements), its roles rotated, every rank pausing a
 * random while (none, up to 200 us or up to 2 ms; a quarter of the rounds none at all)
 * before the disagreement and before the allreduce after it, which has a random count, is
 * in place or not, and is checked element by element against the sum. A disagreement must
 * leave no trace, whichever ranks were inside it first (gloo: those that entered its Gloo
 * op and those that stood in): every buffer it was given stays as it was (troupe.h), and
 * the next op, which reuses those buffers as they are (the broadcast's buffer in place, as
 * the report of issue 21 did; the input in place; one into the other), gives the sum of
 * what they held before. Two ranks bound to cores where the machine has them, three and
 * four floating.
 * The seed is in every failure; STRESS_SEED=<n> replays one, STRESS_ROUNDS and
 * STRESS_WORLD=<w> make a soak (--test_env). Fewer rounds under ASan and TSan. */
TEST_P(CollFailuresB, DisagreementsInAnyOrderNeverSpoilTheNextOp) {
    const char *backend = std::get<0>(GetParam());
#if defined(__SANITIZE_THREAD__)
    const uint64_t kRounds = 100;
#elif defined(__SANITIZE_ADDRESS__)
    const uint64_t kRounds = 200;
#else
    const uint64_t kRounds = 500;
#endif
    const uint64_t rounds =
        getenv("STRESS_ROUNDS") ? strtoull(getenv("STRESS_ROUNDS"), nullptr, 10) : kRounds;
    const char *env = getenv("STRESS_SEED");
    uint64_t seed = env ? strtoull(env, nullptr, 10)
                        : (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count();
    std::vector<int> worlds = {2, 3, 4};
    if (getenv("STRESS_WORLD")) worlds = {atoi(getenv("STRESS_WORLD"))};
    printf("%s: STRESS_SEED=%llu\n", backend, (unsigned long long)seed);
    for (int world : worlds) {
        std::string name = "stress" + std::to_string(world);
        auto t0 = std::chrono::steady_clock::now();
        double cpus = world == 2 && sysconf(_SC_NPROCESSORS_ONLN) >= 2 ? 1 : 0;
        auto calls = run(name.c_str(), world, 10000, 6, rounds, world, backend, cpus,
                         seed + (uint64_t)world);
        bool ok = true; /* every rank's word: the first to fail says why, the others see it go */
        for (int r = 0; r < world; r++) {
            const void *d;
            size_t n;
            int rc = tr_get(rt, calls[(size_t)r], 120000, &d, &n);
            EXPECT_EQ(rc, 0) << backend << " world " << world << " rank " << r
                             << " (STRESS_SEED=" << seed << "): " << tr_last_error();
            if (!rc) {
                EXPECT_EQ(n, 8u);
                EXPECT_EQ(n == 8 ? *(const int64_t *)d : -1, (int64_t)rounds);
            }
            ok = ok && !rc;
            tr_ref_release(rt, calls[(size_t)r]);
        }
        ASSERT_TRUE(ok);
        printf("%s world %d: %llu rounds in %.1f s\n", backend, world, (unsigned long long)rounds,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
}

TEST_P(CollFailuresB, ARankThatNeverArrivesTimesOutEveryone) {
    const char *backend = std::get<0>(GetParam());
    auto calls = run("short", 3, 500, 2, 10, 2, backend); /* rank 2 never comes */
    for (auto &c : calls) {
        EXPECT_EQ(tr_get(rt, c, 10000, nullptr, nullptr), TR_ETASK);
        EXPECT_NE(std::string(tr_last_error()).find("TR_ETIMEDOUT"), std::string::npos)
            << tr_last_error();
        tr_ref_release(rt, c);
    }
}

TEST_P(CollFailuresB, ARankThatDiesFailsTheOthersAtOnce) {
    const char *backend = std::get<0>(GetParam());
    int64_t kv0 = status_field(rt, "kv_keys");
    /* ranks 0 and 1 join and allreduce; rank 2 joins, then crashes */
    std::vector<tr_ref> calls = run("dies", 3, 20000, 2, 300000, 2, backend);
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "x", 1, &a), 0);
    CollArgs args = {};
    snprintf(args.name, sizeof args.name, "dies");
    args.world = 3;
    args.rank = 2;
    args.timeout_ms = 20000;
    args.mode = 1;
    snprintf(args.backend, sizeof args.backend, "%s", backend);
    tr_ref crash;
    ASSERT_EQ(tr_call(rt, a, "coll", &args, sizeof args, &crash), 0);
    auto t0 = std::chrono::steady_clock::now();
    for (auto &c : calls) {
        EXPECT_EQ(tr_get(rt, c, 15000, nullptr, nullptr), TR_ETASK);
        std::string m = tr_last_error();
        EXPECT_NE(m.find("TR_EPEER_DIED"), std::string::npos) << m;
        /* it may die while the others still set up their Gloo connections (then the join
         * fails); if the op failed, the group must stay unusable */
        EXPECT_TRUE(m.find("init TR_EPEER_DIED") != std::string::npos ||
                    m.find("after: TR_EPEER_DIED") != std::string::npos)
            << m;
        tr_ref_release(rt, c);
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
    EXPECT_EQ(tr_get(rt, crash, 5000, nullptr, nullptr), TR_EACTOR_DIED);
    tr_ref_release(rt, crash);
    expect_nothing_left(rt, kv0); /* the dead rank's rendezvous keys too */
}

TEST_P(CollFailuresB, DestroyingAGroupMidOpFailsTheOp) {
    int64_t kv0 = status_field(rt, "kv_keys");
    const char *backend = std::get<0>(GetParam());
    std::vector<tr_ref> waiting = run("leaves", 2, 20000, 2, 1000, 1, backend); /* rank 0 */
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "l", 1, &a), 0);
    CollArgs args = {};
    snprintf(args.name, sizeof args.name, "leaves");
    args.world = 2;
    args.rank = 1;
    args.timeout_ms = 20000;
    args.mode = 3;
    snprintf(args.backend, sizeof args.backend, "%s", backend);
    tr_ref leaver;
    ASSERT_EQ(tr_call(rt, a, "coll", &args, sizeof args, &leaver), 0);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(tr_get(rt, waiting[0], 15000, nullptr, nullptr), TR_ETASK);
    EXPECT_NE(std::string(tr_last_error()).find("TR_EPEER_DIED"), std::string::npos)
        << tr_last_error();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
    EXPECT_EQ(tr_get(rt, leaver, 5000, nullptr, nullptr), 0) << tr_last_error();
    tr_ref_release(rt, waiting[0]);
    tr_ref_release(rt, leaver);
    expect_nothing_left(rt, kv0);
}

INSTANTIATE_TEST_SUITE_P(Backends, CollFailuresB,
                         ::testing::Combine(::testing::Values("shm", "gloo"),
                                            ::testing::Values(3)));

/* A method finds a group that another method of its actor joined, by name (as Ray's ops
 * take a group_name). */
TEST_F(CollFailures, AGroupIsFoundAgainByName) {
    tr_actor_id a[3];
    for (auto &x : a)
        ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "n", 1, &x), 0);
    tr_ref joins[3];
    for (int i = 0; i < 3; i++) {
        std::string arg = "byname|3|" + std::to_string(i) + "|shm";
        ASSERT_EQ(tr_call(rt, a[i], "join_group", arg.data(), arg.size(), &joins[i]), 0);
    }
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(tr_get(rt, joins[i], 20000, nullptr, nullptr), 0) << tr_last_error();
        tr_ref_release(rt, joins[i]);
    }
    for (int round = 0; round < 2; round++) {
        tr_ref calls[3];
        for (int i = 0; i < 3; i++)
            ASSERT_EQ(tr_call(rt, a[i], "allreduce_by_name", "byname", 6, &calls[i]), 0);
        for (int i = 0; i < 3; i++) {
            const void *d;
            size_t n;
            ASSERT_EQ(tr_get(rt, calls[i], 20000, &d, &n), 0) << tr_last_error();
            EXPECT_EQ(*(const int64_t *)d, 1 + 2 + 3);
            tr_ref_release(rt, calls[i]);
        }
    }
    std::string out;
    EXPECT_EQ(call_str(rt, a[0], "allreduce_by_name", "nosuch", &out), TR_ETASK);
    EXPECT_NE(out.find("TR_ENOTFOUND"), std::string::npos) << out;
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(call_str(rt, a[i], "leave_group", "byname", &out), 0) << out;
    EXPECT_EQ(call_str(rt, a[0], "allreduce_by_name", "byname", &out), TR_ETASK);
    EXPECT_NE(out.find("TR_ENOTFOUND"), std::string::npos) << out;
    /* the driver: its own groups only, and bad arguments */
    tr_group *g = nullptr;
    EXPECT_EQ(tr_group_get(rt, "byname", &g), TR_ENOTFOUND);
    EXPECT_EQ(tr_group_get(rt, nullptr, &g), TR_EINVAL);
    EXPECT_EQ(tr_group_get(nullptr, "byname", &g), TR_EINVAL);
    ASSERT_EQ(tr_group_join(rt, 1, 0, "shm", "mine", 1000, &g), 0);
    tr_group *again = nullptr;
    ASSERT_EQ(tr_group_get(rt, "mine", &again), 0);
    EXPECT_EQ(again, g);
    tr_group_destroy(g);
    EXPECT_EQ(tr_group_get(rt, "mine", &again), TR_ENOTFOUND);
}

TEST_F(CollFailures, GroupsDeclaredByTheDriverOverActors) {
    tr_actor_id a[3];
    for (auto &x : a)
        ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "d", 1, &x), 0);
    int ranks[3] = {2, 0, 1};
    EXPECT_EQ(tr_group_is_declared(rt, "declared"), 0);
    ASSERT_EQ(tr_group_declare(rt, a, 3, ranks, "shm", "declared"), 0) << tr_last_error();
    EXPECT_EQ(tr_group_is_declared(rt, "declared"), 1);
    EXPECT_EQ(tr_group_is_declared(rt, "bad/name"), TR_EINVAL);
    tr_ref calls[3];
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(tr_call(rt, a[i], "open_allreduce", "declared", 8, &calls[i]), 0);
    for (int i = 0; i < 3; i++) {
        const void *d;
        size_t n;
        ASSERT_EQ(tr_get(rt, calls[i], 20000, &d, &n), 0) << tr_last_error();
        ASSERT_EQ(n, 8u);
        EXPECT_EQ(((const int32_t *)d)[0], ranks[i]) << "actor " << i;
        EXPECT_EQ(((const int32_t *)d)[1], 1 + 2 + 3);
        tr_ref_release(rt, calls[i]);
    }
    /* errors: not a permutation; not an actor; not declared */
    int bad[3] = {0, 0, 1};
    EXPECT_EQ(tr_group_declare(rt, a, 3, bad, "shm", "bad"), TR_EINVAL);
    tr_group *g = nullptr;
    EXPECT_EQ(tr_group_open(rt, "declared", 100, &g), TR_ESTATE);
    tr_ref c;
    ASSERT_EQ(tr_call(rt, a[0], "open_allreduce", "nobody|300", 10, &c), 0);
    EXPECT_EQ(tr_get(rt, c, 30000, nullptr, nullptr), TR_ETASK);
    EXPECT_NE(std::string(tr_last_error()).find("TR_ETIMEDOUT"), std::string::npos)
        << tr_last_error();
    tr_ref_release(rt, c);
}

TEST_F(CollFailures, JoinErrors) {
    tr_group *g = nullptr;
    EXPECT_EQ(tr_group_join(rt, 2, 2, "shm", "bad", 100, &g), TR_EINVAL);
    EXPECT_EQ(tr_group_join(rt, 2, 0, "carrier-pigeon", "bad", 100, &g), TR_EINVAL);
    EXPECT_NE(std::string(tr_last_error()).find("carrier-pigeon"), std::string::npos);
    EXPECT_EQ(tr_group_join(rt, 0, 0, "shm", "bad", 100, &g), TR_EINVAL);
    EXPECT_EQ(tr_group_join(rt, 1, 0, "shm", "", 100, &g), TR_EINVAL);
    EXPECT_EQ(tr_group_join(rt, 1, 0, "gloo", "a/b", 100, &g), TR_EINVAL); /* keys nest */
    EXPECT_EQ(g, nullptr);
    /* a world of one works at once */
    ASSERT_EQ(tr_group_join(rt, 1, 0, "shm", "solo", 1000, &g), 0);
    EXPECT_EQ(tr_group_rank(g), 0);
    EXPECT_EQ(tr_group_size(g), 1);
    float x = 2;
    EXPECT_EQ(tr_allreduce(g, &x, &x, 1, TR_FLOAT32, TR_PROD, 1000), 0);
    EXPECT_EQ(x, 2.0f);
    EXPECT_EQ(tr_allreduce(g, &x, &x, 1, (tr_dtype)77, TR_SUM, 1000), TR_EINVAL);
    EXPECT_EQ(tr_broadcast(g, &x, 1, TR_FLOAT32, 1, 1000), TR_EINVAL);
    tr_group_destroy(g);
    tr_group_destroy(nullptr);
    /* the name is free again once its members left; a second group of another size
     * under a live name is refused */
    ASSERT_EQ(tr_group_join(rt, 1, 0, "shm", "solo", 1000, &g), 0);
    tr_group *h = nullptr;
    EXPECT_EQ(tr_group_join(rt, 2, 1, "shm", "solo", 100, &h), TR_EINVAL);
    tr_group_destroy(g);
}

/* One deadline for a whole join: rank 1 reaches the node's rendezvous late and never sets
 * up Gloo; rank 0's join still ends at its own timeout, not a timeout after rank 1 came. */
TEST_F(CollFailures, AJoinWaitsNoLongerThanItsTimeout) {
    const int kTimeoutMs = 1500, kLateMs = 1000;
    std::atomic<bool> done{false};
    std::thread late([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(kLateMs));
        tr__nodeconn *c = nullptr;
        ASSERT_EQ(tr__nodeconn_open(tr_runtime_address(rt), 1 << 20, &c), 0);
        tr__buf b = TR__BUF_INIT;
        tr__enc_map(&b, 5);
        tr__enc_str(&b, "name");
        tr__enc_str(&b, "late-join");
        tr__enc_str(&b, "backend");
        tr__enc_str(&b, "gloo");
        tr__enc_str(&b, "world");
        tr__enc_int(&b, 2);
        tr__enc_str(&b, "rank");
        tr__enc_int(&b, 1);
        tr__enc_str(&b, "wait_ms");
        tr__enc_int(&b, 5000);
        tr__reply r;
        int fd = -1;
        EXPECT_EQ(tr__nodeconn_call_fd(c, TR__MSG_GROUP_JOIN, &b, 10000, &r, &fd), 0)
            << tr_last_error();
        tr__buf_free(&b);
        tr__reply_free(&r);
        while (!done) /* a member that never does its part of the set-up */
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        if (fd >= 0) close(fd);
        tr__nodeconn_close(c);
    });
    auto t0 = std::chrono::steady_clock::now();
    tr_group *g = nullptr;
    int rc = tr_group_join(rt, 2, 0, "gloo", "late-join", kTimeoutMs, &g);
    auto took = std::chrono::steady_clock::now() - t0;
    done = true;
    late.join();
    EXPECT_EQ(rc, TR_ETIMEDOUT) << tr_last_error();
    EXPECT_EQ(g, nullptr);
    EXPECT_GE(took, std::chrono::milliseconds(kTimeoutMs));
    /* a backend set-up with a fresh deadline would end near kLateMs + kTimeoutMs */
    EXPECT_LT(took, std::chrono::milliseconds(kTimeoutMs + kLateMs / 2));
}

/* Two ranks in this process (a thread each: joins do not block each other): one waits
 * with the group's default timeout for a rank that never comes. */
TEST_F(CollFailures, GroupDefaultTimeoutAndIsInitialized) {
    EXPECT_EQ(tr_group_is_initialized(rt, "pair"), 0);
    tr_group *g[2] = {nullptr, nullptr};
    int rc[2];
    std::thread t([&] { rc[1] = tr_group_join(rt, 2, 1, "shm", "pair", 10000, &g[1]); });
    rc[0] = tr_group_join(rt, 2, 0, "shm", "pair", 10000, &g[0]);
    t.join();
    ASSERT_EQ(rc[0], 0) << tr_last_error();
    ASSERT_EQ(rc[1], 0);
    EXPECT_EQ(tr_group_is_initialized(rt, "pair"), 1);
    EXPECT_EQ(tr_group_is_initialized(rt, "other"), 0);
    EXPECT_EQ(tr_group_set_timeout(g[0], -7), TR_EINVAL);
    int32_t x = 1;
    EXPECT_EQ(tr_allreduce(g[0], &x, &x, 1, TR_INT32, TR_SUM, -5), TR_EINVAL);
    ASSERT_EQ(tr_group_set_timeout(g[0], 300), 0);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(tr_allreduce(g[0], &x, &x, 1, TR_INT32, TR_SUM, TR_GROUP_TIMEOUT), TR_ETIMEDOUT);
    auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    EXPECT_GE(ms, 250);
    EXPECT_LT(ms, 5000);
    tr_group_destroy(g[0]);
    EXPECT_EQ(tr_group_is_initialized(rt, "pair"), 1); /* rank 1's handle is still live */
    tr_group_destroy(g[1]);
    EXPECT_EQ(tr_group_is_initialized(rt, "pair"), 0);
}

/* Without the agreement check, gloo ops still give the right results (two ranks in this
 * process, a thread each); the choice is per handle. */
TEST_F(CollFailures, GlooWithoutChecksStillComputesRightly) {
    tr_group *g[2] = {nullptr, nullptr};
    int rc[2] = {-1, -1};
    std::vector<int32_t> out[2];
    auto rank = [&](int r) {
        rc[r] = tr_group_join(rt, 2, r, "gloo", "nocheck", 10000, &g[r]);
        if (!rc[r]) rc[r] = tr_group_set_checks(g[r], 0);
        std::vector<int32_t> v(1000);
        for (int i = 0; i < 1000; i++)
            v[i] = (r + 1) * i;
        if (!rc[r])
            rc[r] = tr_allreduce(g[r], v.data(), v.data(), v.size(), TR_INT32, TR_SUM, 10000);
        if (!rc[r]) rc[r] = tr_barrier(g[r], 10000);
        int32_t b = r == 1 ? 77 : 0;
        if (!rc[r]) rc[r] = tr_broadcast(g[r], &b, 1, TR_INT32, 1, 10000);
        v.push_back(b);
        out[r] = v;
    };
    std::thread t(rank, 1);
    rank(0);
    t.join();
    for (int r = 0; r < 2; r++) {
        ASSERT_EQ(rc[r], 0) << "rank " << r << ": " << tr_last_error();
        ASSERT_EQ(out[r].size(), 1001u);
        for (int i = 0; i < 1000; i++)
            ASSERT_EQ(out[r][i], 3 * i);
        EXPECT_EQ(out[r][1000], 77);
        tr_group_destroy(g[r]);
    }
    EXPECT_EQ(tr_group_set_checks(nullptr, 0), TR_EINVAL);
}

/* A rank that leaves counts once, though it also closes its connection: the group
 * lives on for the rank still in it. */
TEST_F(CollFailures, AGroupLivesUntilItsLastRankLeaves) {
    tr_group *g[3] = {nullptr, nullptr, nullptr};
    std::thread t1([&] { tr_group_join(rt, 3, 1, "shm", "trio", 10000, &g[1]); });
    std::thread t2([&] { tr_group_join(rt, 3, 2, "shm", "trio", 10000, &g[2]); });
    ASSERT_EQ(tr_group_join(rt, 3, 0, "shm", "trio", 10000, &g[0]), 0) << tr_last_error();
    t1.join();
    t2.join();
    ASSERT_TRUE(g[1] && g[2]);
    tr_group_destroy(g[0]);
    tr_group_destroy(g[1]);
    EXPECT_EQ(status_field(rt, "groups"), 1);
    tr_group_destroy(g[2]);
    EXPECT_EQ(status_field(rt, "groups"), 0);
}

/* A refused point-to-point message fails its receive (and, on shm, its send) and leaves
 * the pair in step: the next message goes through. */
TEST_F(CollFailures, ARefusedMessageLeavesThePairUsable) {
    for (const char *be : {"shm", "gloo"}) {
        in_threads(rt, 2, be, be, [&](int r, tr_group *g) -> std::string {
            int32_t big[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, small[5] = {0};
            int rc = r == 0 ? tr_send(g, big, 10, TR_INT32, 1, 5000)
                            : tr_recv(g, small, 5, TR_INT32, 0, 5000);
            int want = r == 1 || strcmp(be, "shm") == 0 ? TR_EINVAL : 0;
            if (rc != want) return std::string("mismatch gave ") + tr_errname(rc);
            rc = r == 0 ? tr_send(g, big, 3, TR_INT32, 1, 5000)
                        : tr_recv(g, small, 3, TR_INT32, 0, 5000);
            if (rc) return std::string("next message: ") + tr_errname(rc) + " " + tr_last_error();
            if (r == 1 && (small[0] != 1 || small[2] != 3)) return "wrong data after a refusal";
            return "";
        });
    }
}

/* Above 8 ranks the send/recv channels shrink (4 MiB in all): messages of several
 * chunks still arrive whole and in order. 12 ranks as threads of this process. */
TEST_F(CollFailures, PointToPointInALargeGroup) {
    const int W = 12, n = 20000; /* 80 KB: several 28 KiB chunks */
    in_threads(rt, W, "shm", "ring12", [&](int r, tr_group *g) -> std::string {
        std::vector<int32_t> out(n), in(n, -1);
        for (int round = 0; round < 2; round++) {
            for (int i = 0; i < n; i++)
                out[i] = r * 1000000 + round * 100000 + i;
            int next = (r + 1) % W, prev = (r + W - 1) % W;
            for (int step = 0; step < 2; step++) {
                bool sending = (step == 0) == (r % 2 == 0);
                int rc = sending ? tr_send(g, out.data(), n, TR_INT32, next, 20000)
                                 : tr_recv(g, in.data(), n, TR_INT32, prev, 20000);
                if (rc) return std::string(tr_errname(rc)) + ": " + tr_last_error();
            }
            for (int i = 0; i < n; i++)
                if (in[i] != prev * 1000000 + round * 100000 + i) return "wrong data";
        }
        return "";
    });
}

/* In place (send inside recv) gather, scatter, alltoall and allgather give the same as
 * out of place, on both backends (Gloo posts transfers before copying its own piece). */
TEST_F(CollFailures, InPlaceOpsOnBothBackends) {
    const int W = 3, n = 1000, root = 1;
    for (const char *be : {"shm", "gloo"}) {
        std::string name = std::string("inplace-") + be;
        in_threads(rt, W, be, name.c_str(), [&](int r, tr_group *g) -> std::string {
            std::vector<int32_t> buf((size_t)W * n);
            auto val = [](int from, int to, int i) { return from * 100000 + to * 10000 + i; };
            /* gather: rank r's piece sits at r * n of the root's buffer */
            for (int i = 0; i < n; i++)
                buf[(size_t)r * n + i] = val(r, root, i);
            int rc = tr_gather(g, &buf[(size_t)r * n], r == root ? buf.data() : nullptr, n,
                               TR_INT32, root, 10000);
            if (rc) return std::string("gather: ") + tr_last_error();
            for (int q = 0; q < W && r == root; q++)
                for (int i = 0; i < n; i++)
                    if (buf[(size_t)q * n + i] != val(q, root, i)) return "gather: wrong data";
            /* scatter: the root's own piece is its recv */
            for (int q = 0; q < W; q++)
                for (int i = 0; i < n; i++)
                    buf[(size_t)q * n + i] = r == root ? val(root, q, i) : -1;
            rc = tr_scatter(g, r == root ? buf.data() : nullptr, &buf[(size_t)r * n], n, TR_INT32,
                            root, 10000);
            if (rc) return std::string("scatter: ") + tr_last_error();
            for (int i = 0; i < n; i++)
                if (buf[(size_t)r * n + i] != val(root, r, i)) return "scatter: wrong data";
            /* alltoall with send == recv */
            for (int q = 0; q < W; q++)
                for (int i = 0; i < n; i++)
                    buf[(size_t)q * n + i] = val(r, q, i);
            rc = tr_alltoall(g, buf.data(), buf.data(), n, TR_INT32, 10000);
            if (rc) return std::string("alltoall: ") + tr_last_error();
            for (int q = 0; q < W; q++)
                for (int i = 0; i < n; i++)
                    if (buf[(size_t)q * n + i] != val(q, r, i)) return "alltoall: wrong data";
            /* allgather: rank r's piece already at r * n */
            for (int i = 0; i < n; i++)
                buf[(size_t)r * n + i] = val(r, r, i);
            rc = tr_allgather(g, &buf[(size_t)r * n], buf.data(), n, TR_INT32, 10000);
            if (rc) return std::string("allgather: ") + tr_last_error();
            for (int q = 0; q < W; q++)
                for (int i = 0; i < n; i++)
                    if (buf[(size_t)q * n + i] != val(q, q, i)) return "allgather: wrong data";
            return "";
        });
    }
}

/* Three actors, five groups over overlapping subsets on both backends; every actor runs
 * all of its groups at once, one thread per group (joins included). */
TEST_F(CollFailures, SeveralGroupsPerActorUsedConcurrently) {
    int64_t kv0 = status_field(rt, "kv_keys");
    std::vector<tr_actor_id> three(3);
    std::vector<tr_ref> calls(3);
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "c", 1, &three[i]), 0);
        MultiArgs a = {};
        a.index = i;
        a.iters = 30;
        a.timeout_ms = 30000;
        snprintf(a.tag, sizeof a.tag, "multi");
        ASSERT_EQ(tr_call(rt, three[i], "multi", &a, sizeof a, &calls[i]), 0);
    }
    for (int i = 0; i < 3; i++) {
        int groups = 0;
        for (const MultiGroup &mg : multi_groups)
            for (int r = 0; r < mg.n; r++)
                groups += mg.members[r] == i;
        const void *d;
        size_t n;
        ASSERT_EQ(tr_get(rt, calls[i], 120000, &d, &n), 0)
            << "actor " << i << ": " << tr_last_error();
        ASSERT_EQ(n, 8u);
        EXPECT_EQ(*(const int64_t *)d, 2 * 30 * groups) << "ops checked by actor " << i;
        tr_ref_release(rt, calls[i]);
    }
    expect_nothing_left(rt, kv0);
}

} // namespace
