/* tests/concurrency_test.cc - actors that run several calls at once (max_concurrency > 1,
 * Ray's threaded actors): calls that wait for each other all finish, the limit holds,
 * results reach the right calls under many caller threads, a crash fails every call in
 * flight, and a plain actor still runs one call at a time. */
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_actors.h"

namespace {

class ConcurrencyTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    }
    void TearDown() override {
        if (rt) tr_shutdown(rt);
    }
    tr_actor_id make(int max_concurrency) {
        tr_actor_options o;
        tr_actor_options_init(&o);
        EXPECT_EQ(o.max_concurrency, 1); /* the default */
        o.max_concurrency = max_concurrency;
        tr_actor_id id;
        EXPECT_EQ(tr_actor_create(rt, "Concurrent", &o, nullptr, 0, &id), 0) << tr_last_error();
        EXPECT_EQ(tr_actor_wait_ready(rt, id, 10000), 0) << tr_last_error();
        return id;
    }
    tr_ref meet(tr_actor_id a, int64_t n, int64_t timeout_ms) {
        int64_t args[2] = {n, timeout_ms};
        tr_ref r;
        EXPECT_EQ(tr_call(rt, a, "meet", args, sizeof args, &r), 0) << tr_last_error();
        return r;
    }
    /* The rc of the call's result, and the int64 it replied (or -1). */
    int get_i64(tr_ref r, int64_t *v, int timeout_ms = 10000) {
        const void *p;
        size_t n;
        int rc = tr_get(rt, r, timeout_ms, &p, &n);
        *v = -1;
        if (rc == 0 && n == 8) memcpy(v, p, 8);
        if (rc != TR_ETIMEDOUT) tr_ref_release(rt, r);
        return rc;
    }
    tr_runtime *rt = nullptr;
};

TEST_F(ConcurrencyTest, OptionIsChecked) {
    tr_actor_options o;
    tr_actor_options_init(&o);
    tr_actor_id id;
    o.max_concurrency = -1;
    EXPECT_EQ(tr_actor_create(rt, "Concurrent", &o, nullptr, 0, &id), TR_EINVAL);
    EXPECT_NE(std::string(tr_last_error()).find("max_concurrency"), std::string::npos);
    o.max_concurrency = 65537;
    EXPECT_EQ(tr_actor_create(rt, "Concurrent", &o, nullptr, 0, &id), TR_EINVAL);
    o.max_concurrency = 0; /* reads as 1 */
    EXPECT_EQ(tr_actor_create(rt, "Concurrent", &o, nullptr, 0, &id), 0) << tr_last_error();
}

/* Two calls that each wait for the other: both finish with 2 threads. */
TEST_F(ConcurrencyTest, TwoCallsMeetWithTwo) {
    tr_actor_id a = make(2);
    tr_ref r1 = meet(a, 2, 5000), r2 = meet(a, 2, 5000);
    int64_t v1, v2;
    ASSERT_EQ(get_i64(r1, &v1), 0) << tr_last_error();
    ASSERT_EQ(get_i64(r2, &v2), 0) << tr_last_error();
    EXPECT_EQ(v1, 2);
    EXPECT_EQ(v2, 2);
}

/* With one (the default), the first waits alone and gives up; only then does the second
 * run (and find the first's arrival). */
TEST_F(ConcurrencyTest, OneAtATimeByDefault) {
    tr_actor_id a = make(1);
    tr_ref r1 = meet(a, 2, 300), r2 = meet(a, 2, 300);
    int64_t v;
    EXPECT_EQ(get_i64(r1, &v), TR_ETASK);
    EXPECT_NE(std::string(tr_last_error()).find("timed out with 1 of 2"), std::string::npos)
        << tr_last_error();
    EXPECT_EQ(get_i64(r2, &v), 0) << tr_last_error();
    EXPECT_EQ(v, 2);
}

/* The limit holds: with 2, a third call of a 3-way meet cannot start until one of the
 * first two gives up. */
TEST_F(ConcurrencyTest, ThirdCallWaitsForAThread) {
    tr_actor_id a = make(2);
    tr_ref r1 = meet(a, 3, 400), r2 = meet(a, 3, 400), r3 = meet(a, 3, 400);
    int64_t v1, v2, v3;
    /* one of the first two gives up (had a third thread run, all three would have met at
     * once); the other may still be waiting when the third starts on the freed thread
     * (which of the two started first is the threads' race) */
    int rc1 = get_i64(r1, &v1), rc2 = get_i64(r2, &v2);
    EXPECT_TRUE(rc1 == TR_ETASK || rc2 == TR_ETASK) << tr_errname(rc1) << " " << tr_errname(rc2);
    EXPECT_TRUE((rc1 == 0 || rc1 == TR_ETASK) && (rc2 == 0 || rc2 == TR_ETASK));
    EXPECT_EQ(get_i64(r3, &v3), 0) << tr_last_error(); /* the third arrival */
    EXPECT_EQ(v3, 3);
    /* and at most that many at once: 6 calls of 100 ms on 3 threads */
    tr_actor_id b = make(3);
    std::vector<tr_ref> refs(6);
    int64_t ms = 100, peak = 0, v;
    for (auto &r : refs)
        ASSERT_EQ(tr_call(rt, b, "hold", &ms, sizeof ms, &r), 0);
    for (auto &r : refs) {
        ASSERT_EQ(get_i64(r, &v), 0) << tr_last_error();
        peak = std::max(peak, v);
    }
    EXPECT_LE(peak, 3) << "more calls at once than max_concurrency";
    EXPECT_GE(peak, 2) << "the calls did not overlap"; /* (3 unless a slow build staggers) */
}

/* A fast call's result comes back while a slow call before it still runs. */
TEST_F(ConcurrencyTest, ResultsReturnAsCallsFinish) {
    tr_actor_id a = make(2);
    int64_t ms = 1500, v;
    tr_ref slow, fast;
    ASSERT_EQ(tr_call(rt, a, "hold", &ms, sizeof ms, &slow), 0);
    ms = 0;
    ASSERT_EQ(tr_call(rt, a, "hold", &ms, sizeof ms, &fast), 0);
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(get_i64(fast, &v), 0) << tr_last_error();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1000));
    EXPECT_EQ(get_i64(slow, &v), 0) << tr_last_error();
    /* (v, the most that ran at once, is 2 when the fast one started before the slow one's
     * method did: on a slow build the fast one may be over first; the bound above is the
     * point: its result did not wait for the slow one's) */
    EXPECT_GE(v, 1);
}

/* 8 caller threads, each with calls in flight: every result is its own call's. */
TEST_F(ConcurrencyTest, EightThreadsGetTheirOwnResults) {
    tr_actor_id a = make(4);
    constexpr int kThreads = 8, kCalls = 300, kWindow = 16;
    std::atomic<int> bad{0}, ok{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; t++) {
        ts.emplace_back([&, t] {
            std::vector<std::pair<tr_ref, std::string>> inflight;
            auto drain = [&](size_t keep) {
                while (inflight.size() > keep) {
                    const void *p;
                    size_t n;
                    auto &f = inflight.front();
                    if (tr_get(rt, f.first, 10000, &p, &n) == 0 &&
                        std::string((const char *)p, n) == f.second)
                        ok++;
                    else
                        bad++;
                    tr_ref_release(rt, f.first);
                    inflight.erase(inflight.begin());
                }
            };
            for (int i = 0; i < kCalls; i++) {
                std::string s = "t" + std::to_string(t) + "-" + std::to_string(i) +
                                std::string((size_t)(i % 7) * 13, 'x');
                tr_ref r;
                if (tr_call(rt, a, "echo", s.data(), s.size(), &r)) {
                    bad++;
                    continue;
                }
                inflight.emplace_back(r, s);
                drain(kWindow);
            }
            drain(0);
        });
    }
    for (auto &t : ts)
        t.join();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(ok.load(), kThreads * kCalls);
    int64_t total;
    ASSERT_EQ(call_i64(rt, a, "total", 0, &total), 0) << tr_last_error();
    EXPECT_EQ(total, kThreads * kCalls);
}

/* A crash mid-call fails every call in flight with TR_EACTOR_DIED, never a hang. */
TEST_F(ConcurrencyTest, CrashFailsEveryCallInFlight) {
    tr_actor_id a = make(4);
    tr_ref r1 = meet(a, 9, 20000), r2 = meet(a, 9, 20000), r3 = meet(a, 9, 20000);
    std::this_thread::sleep_for(std::chrono::milliseconds(100)); /* (all three running) */
    tr_ref c;
    ASSERT_EQ(tr_call(rt, a, "crash", nullptr, 0, &c), 0);
    int64_t v;
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(get_i64(r1, &v), TR_EACTOR_DIED);
    EXPECT_EQ(get_i64(r2, &v), TR_EACTOR_DIED);
    EXPECT_EQ(get_i64(r3, &v), TR_EACTOR_DIED);
    EXPECT_EQ(get_i64(c, &v), TR_EACTOR_DIED);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

/* tr_cancel of an actor's calls on this node: the one running sees it (tr_ctx_canceled)
 * and returns early; one queued behind it is never run (the actor's count of echoes stays
 * 0); both refs fail at once; the actor goes on. With max_concurrency 1 and 4 alike. */
TEST_F(ConcurrencyTest, CanceledCallsAreToldOrNotRun) {
    for (int conc : {1, 4}) {
        SCOPED_TRACE(conc);
        tr_actor_id a = make(conc);
        int64_t ms = 20000, v;
        tr_ref running, queued, blocker;
        ASSERT_EQ(tr_call(rt, a, "until_canceled", &ms, sizeof ms, &running), 0);
        if (conc > 1) { /* (the echo waits behind calls that fill the actor for 1.5 s) */
            int64_t args[2] = {99, 1500};
            for (int i = 0; i < conc - 1; i++) {
                ASSERT_EQ(tr_call(rt, a, "meet", args, sizeof args, &blocker), 0);
                tr_ref_release(rt, blocker);
            }
        }
        int64_t one = 1;
        ASSERT_EQ(tr_call(rt, a, "echo", &one, sizeof one, &queued), 0);
        EXPECT_EQ(tr_get(rt, running, 300, nullptr, nullptr), TR_ETIMEDOUT); /* (it runs) */
        auto t0 = std::chrono::steady_clock::now();
        EXPECT_EQ(tr_cancel(rt, queued, 0), 0) << tr_last_error();
        EXPECT_EQ(tr_cancel(rt, running, 0), 0) << tr_last_error();
        EXPECT_EQ(get_i64(running, &v), TR_ECANCELED);
        EXPECT_EQ(get_i64(queued, &v), TR_ECANCELED);
        tr_ref r;
        ASSERT_EQ(tr_call(rt, a, "canceled", nullptr, 0, &r), 0);
        EXPECT_EQ(get_i64(r, &v), 0) << tr_last_error();
        EXPECT_EQ(v, 1); /* the running one saw its cancel, */
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
        ASSERT_EQ(tr_call(rt, a, "total", nullptr, 0, &r), 0);
        EXPECT_EQ(get_i64(r, &v), 0);
        EXPECT_EQ(v, 0); /* and the queued echo never ran */
        EXPECT_EQ(tr_actor_kill(rt, a, 1), 0);
    }
}

/* Many calls and results of 90 KiB in flight at once (inline, under the store's 100 KiB),
 * to an actor running 4 at a time: more than a call ring holds either way (64 KiB), so
 * each side waits for room and is rung when the other reads. Every result is its own
 * call's, whole. */
TEST_F(ConcurrencyTest, ValuesLargerThanTheCallRingGoBothWaysWhole) {
    tr_actor_id a = make(4);
    std::vector<std::string> args(48);
    std::vector<tr_ref> refs(args.size());
    for (size_t i = 0; i < args.size(); i++) {
        args[i].assign(90u << 10, (char)('a' + i % 26));
        memcpy(&args[i][0], &i, sizeof i);
        ASSERT_EQ(tr_call(rt, a, "echo", args[i].data(), args[i].size(), &refs[i]), 0);
    }
    for (size_t i = 0; i < args.size(); i++) {
        const void *p;
        size_t n;
        ASSERT_EQ(tr_get(rt, refs[i], 30000, &p, &n), 0) << i << ": " << tr_last_error();
        EXPECT_TRUE(n == args[i].size() && memcmp(p, args[i].data(), n) == 0) << i;
        tr_ref_release(rt, refs[i]);
    }
    EXPECT_EQ(tr_actor_kill(rt, a, 1), 0);
}

/* The class's idle hook (tr_actor_class.idle), where a binding gives back a lock it kept
 * from one call to the next (Python's GIL): on the worker's loop it runs before the loop
 * sleeps, so the lock is never held while the actor waits for calls; on a pool's threads
 * after each call. Idler counts the lock's takes and give-backs on each thread. */
TEST_F(ConcurrencyTest, IdleHookRunsBeforeTheThreadWaits) {
    for (int conc : {1, 3}) {
        SCOPED_TRACE("max_concurrency " + std::to_string(conc));
        tr_actor_options o;
        tr_actor_options_init(&o);
        o.max_concurrency = conc;
        tr_actor_id a;
        ASSERT_EQ(tr_actor_create(rt, "Idler", &o, nullptr, 0, &a), 0) << tr_last_error();
        ASSERT_EQ(tr_actor_wait_ready(rt, a, 10000), 0) << tr_last_error();
        auto call = [&](const char *m, int64_t *v) {
            tr_ref r;
            const void *p;
            size_t n;
            ASSERT_EQ(tr_call(rt, a, m, "", 0, &r), 0) << tr_last_error();
            ASSERT_EQ(tr_get(rt, r, 10000, &p, &n), 0) << tr_last_error();
            if (v) {
                ASSERT_EQ(n, 3 * sizeof *v);
                memcpy(v, p, n);
            }
            tr_ref_release(rt, r);
        };
        int64_t v[3];
        for (int i = 0; i < 5; i++) { /* (the loop polls 30 us, then sleeps) */
            call("hold", nullptr);
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        call("count", v);
        EXPECT_EQ(v[0], 5); /* given back before each sleep */
        EXPECT_EQ(v[1], 0);
        EXPECT_EQ(v[2], 0); /* each hold found it given back */
        const int holds = 2000;
        for (int i = 0; i < holds; i++) /* back to back: the loop may keep it between */
            call("hold", nullptr);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        call("count", v);
        EXPECT_EQ(v[1], 0);
        EXPECT_EQ(v[0] + v[2], 5 + holds); /* every take given back once */
        if (conc > 1) {
            EXPECT_EQ(v[2], 0); /* a pool's thread gives it back after each call */
        }
        EXPECT_EQ(tr_actor_kill(rt, a, 1), 0);
    }
}

/* Plain actors are as they were: calls one at a time, results in call order. */
TEST_F(ConcurrencyTest, PlainActorsUnchanged) {
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "c", 1, &a), 0) << tr_last_error();
    std::vector<tr_ref> refs(100);
    for (int i = 0; i < 100; i++) {
        int64_t one = 1;
        ASSERT_EQ(tr_call(rt, a, "add", &one, sizeof one, &refs[i]), 0);
    }
    for (int i = 0; i < 100; i++) {
        int64_t v;
        ASSERT_EQ(get_i64(refs[i], &v), 0) << tr_last_error();
        EXPECT_EQ(v, i + 1);
    }
}

} // namespace

namespace {

class ConcurrencyGroupsTest : public ConcurrencyTest {
  protected:
    /* An actor of default max_concurrency 1 with a group "io" of 2 threads that runs
     * "meet" (and "hold" where `hold_too`). */
    tr_actor_id make_grouped(bool hold_too = false) {
        const char *methods[] = {"meet", "hold"};
        tr_concurrency_group g = {"io", 2, methods, hold_too ? 2u : 1u};
        tr_actor_options o;
        tr_actor_options_init(&o);
        o.concurrency_groups = &g;
        o.n_concurrency_groups = 1;
        tr_actor_id id;
        EXPECT_EQ(tr_actor_create(rt, "Concurrent", &o, nullptr, 0, &id), 0) << tr_last_error();
        EXPECT_EQ(tr_actor_wait_ready(rt, id, 10000), 0) << tr_last_error();
        return id;
    }
    tr_ref call(tr_actor_id a, const char *method, int64_t x, int64_t y) {
        int64_t args[2] = {x, y};
        tr_ref r;
        EXPECT_EQ(tr_call(rt, a, method, args, y < 0 ? 8 : sizeof args, &r), 0) << tr_last_error();
        return r;
    }
};

/* Bad groups are refused, naming what is wrong. */
TEST_F(ConcurrencyGroupsTest, GroupsAreChecked) {
    const char *m[] = {"meet"}, *bad_m[] = {"me;et"};
    tr_concurrency_group cases[][2] = {
        {{"", 1, m, 1}, {"b", 1, m, 1}},         /* no name */
        {{"a@b", 1, m, 1}, {"b", 1, m, 1}},      /* a separator in it */
        {{"a", 0, m, 1}, {"b", 1, m, 1}},        /* no thread */
        {{"a", 65537, m, 1}, {"b", 1, m, 1}},    /* too many */
        {{"a", 1, m, 1}, {"a", 1, m, 1}},        /* twice */
        {{"a", 1, bad_m, 1}, {"b", 1, m, 1}},    /* a bad method */
        {{"a", 1, nullptr, 1}, {"b", 1, m, 1}}}; /* methods missing */
    for (auto &c : cases) {
        tr_actor_options o;
        tr_actor_options_init(&o);
        o.concurrency_groups = c;
        o.n_concurrency_groups = 2;
        tr_actor_id id;
        EXPECT_EQ(tr_actor_create(rt, "Concurrent", &o, nullptr, 0, &id), TR_EINVAL) << c[0].name;
        EXPECT_NE(std::string(tr_last_error()).find("concurrency group"), std::string::npos)
            << tr_last_error();
    }
    std::vector<tr_concurrency_group> many(65, {"g", 1, nullptr, 0});
    tr_actor_options o;
    tr_actor_options_init(&o);
    o.concurrency_groups = many.data();
    o.n_concurrency_groups = many.size();
    tr_actor_id id;
    EXPECT_EQ(tr_actor_create(rt, "Concurrent", &o, nullptr, 0, &id), TR_EINVAL);
}

/* A group's calls run on its own threads: two that wait for each other meet in "io"
 * while the default group's one thread is busy, and the default group still runs one at
 * a time. */
TEST_F(ConcurrencyGroupsTest, AGroupRunsBesideTheDefaultOne) {
    tr_actor_id a = make_grouped();
    tr_ref busy = call(a, "hold", 1500, -1); /* (default group: its one thread) */
    auto t0 = std::chrono::steady_clock::now();
    tr_ref m1 = call(a, "meet", 2, 5000), m2 = call(a, "meet", 2, 5000);
    int64_t v1, v2, v;
    ASSERT_EQ(get_i64(m1, &v1), 0) << tr_last_error();
    ASSERT_EQ(get_i64(m2, &v2), 0) << tr_last_error();
    EXPECT_EQ(v1, 2);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.2)
        << "the group's calls waited for the default group's";
    /* two holds of 300 ms in the group, while the default group's (1.5 s) still runs */
    tr_ref h1 = call(a, "hold@io", 300, -1), h2 = call(a, "hold@io", 300, -1);
    ASSERT_EQ(get_i64(h1, &v1), 0) << tr_last_error();
    ASSERT_EQ(get_i64(h2, &v2), 0) << tr_last_error();
    EXPECT_EQ(get_i64(busy, &v), 0) << tr_last_error();
    EXPECT_EQ(v, 3) << "the group's two holds did not run beside the default group's";
    /* the default group: one at a time (two holds never overlap) */
    tr_actor_id b = make_grouped();
    h1 = call(b, "hold", 200, -1);
    h2 = call(b, "hold", 200, -1);
    ASSERT_EQ(get_i64(h1, &v1), 0);
    ASSERT_EQ(get_i64(h2, &v2), 0);
    EXPECT_EQ(std::max(v1, v2), 1) << "the default group ran two at once";
}

/* A group's limit holds: of three calls that wait for three, the third starts only when
 * one of the first two gives up. */
TEST_F(ConcurrencyGroupsTest, AGroupsLimitHolds) {
    tr_actor_id a = make_grouped();
    tr_ref r1 = call(a, "meet", 3, 400), r2 = call(a, "meet", 3, 400), r3 = call(a, "meet", 3, 400);
    int64_t v1, v2, v3;
    int rc1 = get_i64(r1, &v1), rc2 = get_i64(r2, &v2);
    EXPECT_TRUE(rc1 == TR_ETASK || rc2 == TR_ETASK) << tr_errname(rc1) << " " << tr_errname(rc2);
    EXPECT_EQ(get_i64(r3, &v3), 0) << tr_last_error();
    EXPECT_EQ(v3, 3);
}

/* A call chooses its group ("method@group"): hold in "io" runs beside hold in the default
 * group; a group the actor lacks is an error naming it. */
TEST_F(ConcurrencyGroupsTest, ACallChoosesItsGroup) {
    tr_actor_id a = make_grouped();
    tr_ref h1 = call(a, "hold", 300, -1), h2 = call(a, "hold@io", 300, -1);
    int64_t v1, v2;
    ASSERT_EQ(get_i64(h1, &v1), 0) << tr_last_error();
    ASSERT_EQ(get_i64(h2, &v2), 0) << tr_last_error();
    EXPECT_EQ(std::max(v1, v2), 2) << "hold@io did not run beside the default group's hold";
    tr_ref bad = call(a, "hold@nope", 1, -1);
    EXPECT_EQ(get_i64(bad, &v1), TR_EINVAL);
    EXPECT_NE(std::string(tr_last_error()).find("'nope'"), std::string::npos) << tr_last_error();
    tr_actor_id plain = make(1); /* an actor without groups */
    bad = call(plain, "hold@io", 1, -1);
    EXPECT_EQ(get_i64(bad, &v1), TR_EINVAL) << tr_last_error();
}

} // namespace
