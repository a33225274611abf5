/* tests/tasks_test.cc - remote functions (tr_task_submit) on the node's task pool, with
 * real worker processes: results, refs in and out, a warm pool shared by every process,
 * tasks in parallel, retries when the worker dies, nested tasks that wait for their
 * children, tasks that create actors, errors; the store is empty after each test. */
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_actors.h"

namespace {

using Clock = std::chrono::steady_clock;

class TasksTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    }
    void TearDown() override {
        tr_shutdown(rt);
    }
    void expect_empty() {
        tr_store_stats s = TR_STORE_STATS_INIT;
        bool empty = eventually(3000, [&] {
            EXPECT_EQ(tr_object_stats(rt, &s), 0);
            return s.n_objects == 0 && s.bytes_used == 0;
        });
        EXPECT_TRUE(empty) << s.n_objects << " objects left";
    }
    int run(const char *fn, const std::string &args, std::string *out,
            const tr_task_options *o = nullptr, const tr_ref *refs = nullptr, size_t n = 0) {
        tr_ref r;
        int rc = tr_task_submit(rt, fn, args.data(), args.size(), refs, n, o, &r);
        if (rc) {
            *out = tr_last_error();
            return rc;
        }
        const void *d;
        size_t len;
        rc = tr_get(rt, r, 30000, &d, &len);
        *out = d ? std::string((const char *)d, len) : tr_last_error();
        tr_ref_release(rt, r);
        return rc;
    }
    int64_t run_i64(const char *fn, int64_t arg) {
        std::string out;
        int rc = run(fn, std::string((const char *)&arg, 8), &out);
        EXPECT_EQ(rc, 0) << out;
        int64_t v = -1;
        if (out.size() == 8) memcpy(&v, out.data(), 8);
        return v;
    }
    tr_runtime *rt = nullptr;
};

std::string i64(int64_t v) {
    return std::string((const char *)&v, 8);
}

TEST_F(TasksTest, ResultsComeBackAndManyRunInFlight) {
    std::string out;
    ASSERT_EQ(run("t_echo", "hello task", &out), 0) << out;
    EXPECT_EQ(out, "hello task");
    std::vector<tr_ref> refs(200);
    for (size_t i = 0; i < refs.size(); i++) {
        std::string a = "v" + std::to_string(i);
        ASSERT_EQ(tr_task_submit(rt, "t_echo", a.data(), a.size(), nullptr, 0, nullptr, &refs[i]),
                  0)
            << tr_last_error();
    }
    size_t n_ready = 0;
    ASSERT_EQ(tr_wait(rt, refs.data(), refs.size(), refs.size(), 30000, nullptr, &n_ready), 0);
    EXPECT_EQ(n_ready, refs.size());
    for (size_t i = 0; i < refs.size(); i++) {
        const void *d;
        size_t n;
        ASSERT_EQ(tr_get(rt, refs[i], 0, &d, &n), 0);
        EXPECT_EQ(std::string((const char *)d, n), "v" + std::to_string(i));
        tr_ref_release(rt, refs[i]);
    }
    /* a large result goes through the store, as a call's */
    std::string big(300000, 'x');
    ASSERT_EQ(run("t_echo", big, &out), 0);
    EXPECT_EQ(out, big);
    expect_empty();
}

TEST_F(TasksTest, RefsGoInAndOut) {
    std::string data = pattern(200000, 3);
    tr_ref obj, first, second;
    ASSERT_EQ(tr_put(rt, data.data(), data.size(), &obj), 0);
    ASSERT_EQ(tr_task_submit(rt, "t_sum_refs", nullptr, 0, &obj, 1, nullptr, &first), 0)
        << tr_last_error();
    /* a task's result as another task's argument, before it is in */
    ASSERT_EQ(tr_task_submit(rt, "t_sum_refs", nullptr, 0, &first, 1, nullptr, &second), 0);
    const void *d;
    size_t n;
    ASSERT_EQ(tr_get(rt, first, 30000, &d, &n), 0) << tr_last_error();
    uint64_t s1;
    memcpy(&s1, d, 8);
    EXPECT_EQ(s1, checksum(data.data(), data.size()));
    ASSERT_EQ(tr_get(rt, second, 30000, &d, &n), 0) << tr_last_error();
    uint64_t s2;
    memcpy(&s2, d, 8);
    EXPECT_EQ(s2, checksum(&s1, 8));
    for (tr_ref r : {obj, first, second})
        tr_ref_release(rt, r);
    expect_empty();
}

/* A task runs whether or not its result is ever got (Ray's semantics): one submitted and
 * never waited for, and one that waits (held here) for another task's result, both run
 * while this process only sleeps. */
TEST_F(TasksTest, TasksRunThoughNobodyWaits) {
    char dir[] = "/dev/shm/trtouchXXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    std::string a = std::string(dir) + "/a", b = std::string(dir) + "/b";
    int64_t ms = 300;
    tr_ref ta, slow, tb;
    ASSERT_EQ(tr_task_submit(rt, "t_touch", a.c_str(), a.size(), nullptr, 0, nullptr, &ta), 0);
    ASSERT_EQ(tr_task_submit(rt, "t_sleep", &ms, 8, nullptr, 0, nullptr, &slow), 0);
    ASSERT_EQ(tr_task_submit(rt, "t_touch", b.c_str(), b.size(), &slow, 1, nullptr, &tb), 0);
    EXPECT_TRUE(eventually(20000, [&] { return access(a.c_str(), F_OK) == 0; })) << a;
    EXPECT_TRUE(eventually(20000, [&] { return access(b.c_str(), F_OK) == 0; })) << b;
    for (tr_ref r : {ta, slow, tb})
        tr_ref_release(rt, r);
    unlink(a.c_str());
    unlink(b.c_str());
    rmdir(dir);
    expect_empty();
}

/* The pool's workers stay up between tasks and are shared: the same processes serve a
 * second batch, and no more of them than the node has CPUs. */
TEST_F(TasksTest, PoolIsWarmAndBounded) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    std::set<int64_t> first, second;
    for (int round = 0; round < 2; round++) {
        std::vector<tr_ref> refs(16);
        for (auto &r : refs) {
            int64_t ms = 20;
            ASSERT_EQ(tr_task_submit(rt, "t_sleep", &ms, 8, nullptr, 0, nullptr, &r), 0);
        }
        for (auto &r : refs) {
            const void *d;
            size_t n;
            ASSERT_EQ(tr_get(rt, r, 30000, &d, &n), 0) << tr_last_error();
            int64_t pid;
            memcpy(&pid, d, 8);
            (round ? second : first).insert(pid);
            tr_ref_release(rt, r);
        }
    }
    EXPECT_LE((long)first.size(), ncpu);
    EXPECT_EQ(first, second) << "the same warm workers";
    EXPECT_NE(first.count(getpid()), 1u);
}

TEST_F(TasksTest, TasksRunInParallel) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 2) GTEST_SKIP() << "one CPU: nothing runs in parallel";
    run_i64("t_pid", 0); /* (a first worker up) */
    auto t0 = Clock::now();
    std::vector<tr_ref> refs(2);
    for (auto &r : refs) {
        int64_t ms = 400;
        ASSERT_EQ(tr_task_submit(rt, "t_sleep", &ms, 8, nullptr, 0, nullptr, &r), 0);
    }
    std::set<int64_t> pids;
    for (auto &r : refs) {
        const void *d;
        size_t n;
        ASSERT_EQ(tr_get(rt, r, 30000, &d, &n), 0);
        int64_t pid;
        memcpy(&pid, d, 8);
        pids.insert(pid);
        tr_ref_release(rt, r);
    }
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_EQ(pids.size(), 2u);
    EXPECT_LT(s, 0.79) << "two 400 ms tasks ran one after the other";
}

/* A task whose worker dies with it is run again, max_retries times, then fails. */
TEST_F(TasksTest, RetriedWhenTheWorkerDies) {
    char dir[] = "/tmp/troupe-tasks-XXXXXX";
    ASSERT_TRUE(mkdtemp(dir));
    struct Case {
        int64_t crashes_before_ok;
        int max_retries;
        bool ok;
    } cases[] = {{1, 1, true}, {2, 3, true}, {3, 2, false}, {1, 0, false}};
    int k = 0;
    for (const Case &c : cases) {
        std::string path = std::string(dir) + "/runs" + std::to_string(k++);
        std::string args = i64(c.crashes_before_ok + 1) + path;
        tr_task_options o;
        tr_task_options_init(&o);
        o.max_retries = c.max_retries;
        std::string out;
        int rc = run("t_crash_until", args, &out, &o);
        std::string runs = run_cmd("wc -l < " + path, nullptr);
        int n_runs = atoi(runs.c_str());
        if (c.ok) {
            EXPECT_EQ(rc, 0) << out;
            EXPECT_EQ(n_runs, c.crashes_before_ok + 1);
        } else {
            EXPECT_EQ(rc, TR_EACTOR_DIED) << out;
            EXPECT_EQ(n_runs, c.max_retries + 1) << "runs: the first and each retry";
        }
        unlink(path.c_str());
    }
    rmdir(dir);
    /* the pool serves the next task (its worker came back) */
    EXPECT_GT(run_i64("t_pid", 0), 0);
}

/* Parents wait for their children in the pool's own workers: no deadlock. A tree of 31
 * tasks has 15 parents waiting at once, more than the pool's size (4x the CPUs, + 1): the
 * pool grows beside the workers whose tasks wait, as Ray starts workers beside blocked
 * ones (before, the children queued behind waiting parents until the 30 s timeout). */
TEST_F(TasksTest, NestedTasksWaitForTheirChildren) {
    EXPECT_EQ(run_i64("t_tree", 3), 8);
    EXPECT_EQ(run_i64("t_tree", 5), 32);
    expect_empty();
}

TEST_F(TasksTest, SeveralResults) {
    int32_t k = 3;
    tr_ref r[3];
    ASSERT_EQ(tr_task_submit_multi(rt, "t_parts", &k, 4, nullptr, 0, nullptr, 3, r), 0)
        << tr_last_error();
    for (int i = 2; i >= 0; i--) {
        const void *d;
        size_t n;
        ASSERT_EQ(tr_get(rt, r[i], 30000, &d, &n), 0) << tr_last_error();
        std::string one = "part-" + std::to_string(i), expect;
        for (int x = 0; x <= (i == 2 ? 30000 : i); x++)
            expect += one;
        EXPECT_EQ(std::string((const char *)d, n), expect);
        tr_ref_release(rt, r[i]);
    }
    expect_empty();
}

/* A task's stream (num_returns TR_STREAMING): its items as it yields them; a run whose
 * worker died after two items is run again (max_retries), and the items it yields again
 * are not given twice. */
TEST_F(TasksTest, StreamsAndTheirRetries) {
    char dir[] = "/tmp/trtstreamXXXXXX";
    ASSERT_TRUE(mkdtemp(dir));
    std::string mark = std::string(dir) + "/ran";
    for (int32_t mode : {0, 4}) {
        int32_t k = 5;
        std::string args((const char *)&k, 4);
        args.append((const char *)&mode, 4);
        args += mark;
        tr_task_options o = TR_TASK_OPTIONS_INIT;
        o.max_retries = 1;
        tr_ref st, it;
        ASSERT_EQ(tr_task_submit_multi(rt, "t_stream", args.data(), args.size(), nullptr, 0, &o,
                                       TR_STREAMING, &st),
                  0)
            << tr_last_error();
        int rc, i = 0;
        while ((rc = tr_stream_next(rt, st, 30000, &it)) == 0) {
            const void *d;
            size_t n;
            ASSERT_EQ(tr_get(rt, it, 10000, &d, &n), 0) << tr_last_error();
            if (i == 3) { /* a ref to the item */
                ASSERT_EQ(n, 16u);
                tr_ref inner;
                memcpy(&inner, d, 16);
                ASSERT_EQ(tr_get(rt, inner, 10000, &d, &n), 0) << tr_last_error();
                EXPECT_TRUE(std::string((const char *)d, n) == stream_item(i));
                tr_ref_release(rt, inner);
            } else {
                EXPECT_TRUE(std::string((const char *)d, n) == stream_item(i)) << "item " << i;
            }
            tr_ref_release(rt, it);
            i++;
        }
        EXPECT_EQ(rc, 1) << tr_last_error();
        EXPECT_EQ(i, 5) << "mode " << mode;
        const void *d;
        size_t n;
        ASSERT_EQ(tr_get(rt, st, 10000, &d, &n), 0) << tr_last_error();
        EXPECT_EQ(std::string((const char *)d, n), "done-5");
        tr_ref_release(rt, st);
    }
    EXPECT_EQ(access(mark.c_str(), F_OK), 0); /* (the first run of mode 4 died) */
    unlink(mark.c_str());
    rmdir(dir);
    expect_empty();
}

TEST_F(TasksTest, TaskCreatesAnActor) {
    EXPECT_EQ(run_i64("t_make_actor", 41), 41);
}

/* A driver's namespace (tr_config "namespace") goes with what it starts: its actors'
 * workers and its tasks, and their tasks, make and find names in it, while the same pool
 * workers run another driver's tasks in that one's (the default here). */
TEST_F(TasksTest, ActorsAndTasksRunInTheirDriversNamespace) {
    tr_runtime *job = nullptr;
    tr_config *cfg =
        test_config_with({{"address", tr_runtime_address(rt)}, {"namespace", "job-1"}});
    ASSERT_EQ(tr_init(cfg, &job), 0) << tr_last_error();
    tr_config_destroy(cfg);
    char ns[256];
    ASSERT_EQ(tr_runtime_namespace(job, ns, sizeof ns), 0);
    EXPECT_STREQ(ns, "job-1");
    ASSERT_EQ(tr_runtime_namespace(rt, ns, sizeof ns), 0);
    EXPECT_STREQ(ns, "");
    EXPECT_EQ(tr_runtime_namespace(job, ns, 5), TR_EINVAL); /* (too small) */
    auto task = [&](tr_runtime *r, const char *fn, const std::string &arg = "") {
        tr_ref ref;
        const void *d;
        size_t n;
        std::string out = "(failed)";
        EXPECT_EQ(tr_task_submit(r, fn, arg.data(), arg.size(), nullptr, 0, nullptr, &ref), 0)
            << tr_last_error();
        EXPECT_EQ(tr_get(r, ref, 30000, &d, &n), 0) << tr_last_error();
        if (d) out.assign((const char *)d, n);
        tr_ref_release(r, ref);
        return out;
    };
    for (int i = 0; i < 3; i++) { /* (the same warm workers, each task its driver's) */
        EXPECT_EQ(task(job, "t_namespace"), "job-1");
        EXPECT_EQ(task(rt, "t_namespace"), "");
    }
    EXPECT_EQ(task(job, "t_child_namespace"), "job-1");
    EXPECT_EQ(task(rt, "t_child_namespace"), "");
    /* an actor's worker: its creator's */
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(job, "Counter", nullptr, "a", 1, &a), 0) << tr_last_error();
    tr_ref r;
    const void *d;
    size_t n;
    ASSERT_EQ(tr_call(job, a, "namespace", nullptr, 0, &r), 0);
    ASSERT_EQ(tr_get(job, r, 30000, &d, &n), 0) << tr_last_error();
    EXPECT_EQ(std::string((const char *)d, n), "job-1");
    tr_ref_release(job, r);
    /* a name made in a task is its driver's */
    EXPECT_EQ(task(job, "t_make_named", "from-task"), "made");
    tr_actor_id found;
    EXPECT_EQ(tr_actor_get(rt, "from-task", &found), TR_ENOTFOUND);
    ASSERT_EQ(tr_actor_get(job, "from-task", &found), 0) << tr_last_error();
    EXPECT_EQ(tr_actor_kill(job, found, 1), 0);
    tr_shutdown(job);
    /* the longest namespace (255 bytes) with a function's name: both go */
    std::string longest(255, 'n');
    cfg = test_config_with({{"address", tr_runtime_address(rt)}, {"namespace", longest.c_str()}});
    ASSERT_EQ(tr_init(cfg, &job), 0) << tr_last_error();
    tr_config_destroy(cfg);
    EXPECT_EQ(task(job, "t_child_namespace"), longest);
    tr_shutdown(job);
}

TEST_F(TasksTest, ErrorsAreTheRefs) {
    std::string out;
    EXPECT_EQ(run("t_fail", "why", &out), TR_ETASK);
    EXPECT_NE(out.find("task failed: why"), std::string::npos) << out;
    EXPECT_EQ(run("no_such_fn", "", &out), TR_ETASK);
    EXPECT_NE(out.find("no remote function 'no_such_fn'"), std::string::npos) << out;
    tr_ref r;
    EXPECT_EQ(tr_task_submit(rt, "", "", 0, nullptr, 0, nullptr, &r), TR_EINVAL);
    EXPECT_EQ(tr_task_submit(rt, "__troupe_x", "", 0, nullptr, 0, nullptr, &r), TR_EINVAL);
    EXPECT_EQ(tr_task_submit(rt, "t_echo", nullptr, 3, nullptr, 0, nullptr, &r), TR_EINVAL);
    tr_task_options o;
    tr_task_options_init(&o);
    o.max_retries = -2;
    EXPECT_EQ(tr_task_submit(rt, "t_echo", "", 0, nullptr, 0, &o, &r), TR_EINVAL);
    o.max_retries = 0;
    o.num_cpus = -1;
    EXPECT_EQ(tr_task_submit(rt, "t_echo", "", 0, nullptr, 0, &o, &r), TR_EINVAL);
    tr_task_options bad;
    memset(&bad, 0, sizeof bad);
    EXPECT_EQ(tr_task_submit(rt, "t_echo", "", 0, nullptr, 0, &bad, &r), TR_EINVAL);
    expect_empty();
}

/* tr_cancel: a queued call never runs, a running one's result is dropped, a running
 * task is stopped with force (its worker restarts and serves the next); a done ref stays
 * as it was; a ref of nobody's is refused. */
TEST_F(TasksTest, CancelQueuedRunningAndForced) {
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "c", 1, &a), 0);
    int64_t ms = 1500, v = 1;
    tr_ref slow, queued, done;
    ASSERT_EQ(tr_call(rt, a, "add", &v, 8, &done), 0);
    ASSERT_EQ(tr_get(rt, done, 10000, nullptr, nullptr), 0);
    ASSERT_EQ(tr_call(rt, a, "sleep_ms", &ms, 8, &slow), 0);
    ASSERT_EQ(tr_call(rt, a, "add", &v, 8, &queued), 0);              /* behind the sleep */
    EXPECT_EQ(tr_get(rt, slow, 100, nullptr, nullptr), TR_ETIMEDOUT); /* (sent, running) */
    EXPECT_EQ(tr_cancel(rt, queued, 0), 0);
    EXPECT_EQ(tr_cancel(rt, slow, 0), 0);
    EXPECT_EQ(tr_cancel(rt, slow, 1), TR_EINVAL) << "force is for tasks";
    auto t0 = Clock::now();
    EXPECT_EQ(tr_get(rt, slow, 10000, nullptr, nullptr), TR_ECANCELED);
    EXPECT_EQ(tr_get(rt, queued, 10000, nullptr, nullptr), TR_ECANCELED);
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 0.5) << "at once";
    EXPECT_EQ(tr_cancel(rt, done, 0), 0); /* done: nothing changes */
    const void *d;
    size_t n;
    ASSERT_EQ(tr_get(rt, done, 0, &d, &n), 0);
    /* the actor goes on: the sleep that had begun ran on (its reply was dropped); the add
     * queued behind it was told of its cancel before it began, and never ran: 1 + 0 */
    int64_t total = 0;
    ASSERT_EQ(call_i64(rt, a, "add", 0, &total), 0);
    EXPECT_EQ(total, 1) << "the canceled add had not begun: it was not run";
    for (tr_ref r : {slow, queued, done})
        tr_ref_release(rt, r);
    /* a running task, forced */
    int64_t long_ms = 20000;
    tr_ref t;
    ASSERT_EQ(tr_task_submit(rt, "t_sleep", &long_ms, 8, nullptr, 0, nullptr, &t), 0);
    EXPECT_EQ(tr_get(rt, t, 300, nullptr, nullptr), TR_ETIMEDOUT);
    t0 = Clock::now();
    EXPECT_EQ(tr_cancel(rt, t, 1), 0) << tr_last_error();
    EXPECT_EQ(tr_get(rt, t, 10000, nullptr, nullptr), TR_ECANCELED);
    tr_ref_release(rt, t);
    EXPECT_GT(run_i64("t_pid", 0), 0) << "the pool serves the next task";
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
    tr_ref forged = t;
    forged.b[0] ^= 1;
    EXPECT_EQ(tr_cancel(rt, forged, 0), TR_ESTALE);
    expect_empty();
}

/* tr_cancel of calls never sent (their actor's worker not connected yet: a new actor, a
 * cold pool): they never run, and what comes after them does. Before, their bytes went
 * out once the worker connected, and it ran them (its board had no word for them yet):
 * the add ran, and a cold pool's next task queued behind the canceled 20 s sleep. */
TEST_F(TasksTest, CancelBeforeTheWorkerConnectsNeverRuns) {
    for (int force = 0; force < 2; force++) {
        tr_actor_id a;
        ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "c", 1, &a), 0);
        int64_t five = 5, total = -1;
        tr_ref add;
        ASSERT_EQ(tr_call(rt, a, "add", &five, 8, &add), 0); /* (at once: not connected) */
        EXPECT_EQ(tr_cancel(rt, add, 0), 0) << tr_last_error();
        EXPECT_EQ(tr_get(rt, add, 10000, nullptr, nullptr), TR_ECANCELED);
        tr_ref_release(rt, add);
        ASSERT_EQ(call_i64(rt, a, "add", 1, &total, 10000), 0) << tr_last_error();
        EXPECT_EQ(total, 1) << "the canceled add ran";
        tr_actor_kill(rt, a, 1);
    }
    for (int force = 0; force < 2; force++) {
        int64_t long_ms = 20000;
        tr_ref t;
        ASSERT_EQ(tr_task_submit(rt, "t_sleep", &long_ms, 8, nullptr, 0, nullptr, &t), 0);
        EXPECT_EQ(tr_cancel(rt, t, force), 0) << tr_last_error();
        EXPECT_EQ(tr_get(rt, t, 10000, nullptr, nullptr), TR_ECANCELED);
        tr_ref_release(rt, t);
        auto t0 = Clock::now();
        EXPECT_GT(run_i64("t_pid", 0), 0);
        EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0)
            << "the next task waited behind the canceled one";
    }
    expect_empty();
}

/* tr_cancel without force of a running task: the task sees tr_ctx_canceled and returns
 * early (not at its 20 s); one that was not canceled does not see it. */
TEST_F(TasksTest, ARunningTaskSeesItsCancel) {
    char dir[] = "/tmp/troupe-cancel-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    std::string path = std::string(dir) + "/m", other = std::string(dir) + "/o";
    int64_t ms = 20000;
    std::string args = i64(ms) + path;
    tr_ref t;
    ASSERT_EQ(
        tr_task_submit(rt, "t_until_canceled", args.data(), args.size(), nullptr, 0, nullptr, &t),
        0);
    EXPECT_EQ(tr_get(rt, t, 300, nullptr, nullptr), TR_ETIMEDOUT); /* (it runs) */
    auto t0 = Clock::now();
    EXPECT_EQ(tr_cancel(rt, t, 0), 0) << tr_last_error();
    EXPECT_EQ(tr_get(rt, t, 10000, nullptr, nullptr), TR_ECANCELED);
    tr_ref_release(rt, t);
    std::string seen;
    EXPECT_TRUE(eventually(10000, [&] {
        FILE *f = fopen(path.c_str(), "r");
        char buf[32] = "";
        if (f) {
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            buf[n] = '\0';
            fclose(f);
        }
        seen = buf;
        return !seen.empty();
    }));
    EXPECT_EQ(seen, "canceled");
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
    std::string out; /* a task nobody canceled runs to its end */
    EXPECT_EQ(run("t_until_canceled", i64(200) + other, &out), 0) << out;
    EXPECT_EQ(out, "ran out");
    unlink(path.c_str());
    unlink(other.c_str());
    rmdir(dir);
    expect_empty();
}

/* A quantity in one of a node status's resource maps ("resources_in_tasks", ...): -1 if
 * the map does not list the name. */
double status_res(const std::string &json, const char *map, const char *name) {
    size_t at = json.find(std::string("\"") + map + "\":{");
    if (at == std::string::npos) return -1;
    size_t end = json.find('}', at);
    size_t k = json.find(std::string("\"") + name + "\":", at);
    if (k == std::string::npos || k > end) return -1;
    return atof(json.c_str() + k + strlen(name) + 3);
}

/* A task holds its CPUs while it runs (the node's resources_in_tasks, what Ray's
 * available_resources() inside a task leaves out), and only then; its pool's worker holds
 * its custom resources for its life (they bound how many tasks run at once), but while it
 * runs no task they are idle (resources_idle_in_tasks) and an actor that waits for them
 * has them. A task no node could ever run is refused at once, as such an actor is. */
TEST(TaskResourcesTest, ATaskHoldsItsResourcesOnlyWhileItRuns) {
    tr_config *cfg = test_config_with({{"resources", "slot=2"}});
    tr_runtime *rt = nullptr;
    ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
    tr_config_destroy(cfg);
    tr_resource slot = {"slot", 1};
    tr_task_options o = TR_TASK_OPTIONS_INIT;
    o.resources = &slot;
    o.n_resources = 1;
    for (int round = 0; round < 2; round++) { /* (the second on the warm worker) */
        tr_ref r;
        ASSERT_EQ(tr_task_submit(rt, "t_status", nullptr, 0, nullptr, 0, &o, &r), 0)
            << tr_last_error();
        const void *d;
        size_t n;
        ASSERT_EQ(tr_get(rt, r, 30000, &d, &n), 0) << tr_last_error();
        std::string inside((const char *)d, n);
        tr_ref_release(rt, r);
        EXPECT_EQ(status_res(inside, "resources_in_tasks", "CPU"), 1) << inside;
        EXPECT_EQ(status_res(inside, "resources_available", "slot"), 1) << inside;
        EXPECT_EQ(status_res(inside, "resources_idle_in_tasks", "slot"), -1) << inside;
    }
    char *json = nullptr;
    ASSERT_EQ(tr_node_status(rt, &json), 0);
    std::string after(json);
    tr_free(json);
    EXPECT_EQ(status_res(after, "resources_in_tasks", "CPU"), -1) << after;
    EXPECT_EQ(status_res(after, "resources_available", "slot"), 1) << after; /* (its worker's, */
    EXPECT_EQ(status_res(after, "resources_idle_in_tasks", "slot"), 1) << after; /* idle) */

    /* the slots bound how many run at once: 4 tasks of 300 ms, 2 slots */
    auto t0 = Clock::now();
    std::vector<tr_ref> four(4);
    for (auto &f : four) {
        int64_t ms = 300;
        ASSERT_EQ(tr_task_submit(rt, "t_sleep", &ms, 8, nullptr, 0, &o, &f), 0) << tr_last_error();
    }
    for (auto &f : four) {
        EXPECT_EQ(tr_get(rt, f, 30000, nullptr, nullptr), 0) << tr_last_error();
        tr_ref_release(rt, f);
    }
    EXPECT_GE(std::chrono::duration<double>(Clock::now() - t0).count(), 0.59)
        << "more tasks ran at once than the node has slots";
    EXPECT_GT(status_res(after, "resources_total", "memory"), 0) << after; /* (Ray's) */

    tr_resource both = {"slot", 2}; /* (a pool worker that kept one would leave it pending) */
    tr_actor_options ao = TR_ACTOR_OPTIONS_INIT;
    ao.resources = &both;
    ao.n_resources = 1;
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &ao, nullptr, 0, &a), 0) << tr_last_error();
    EXPECT_EQ(tr_actor_wait_ready(rt, a, 30000), 0) << tr_last_error();
    tr_actor_kill(rt, a, 1);

    tr_task_options big = TR_TASK_OPTIONS_INIT;
    big.num_cpus = 1000;
    tr_ref r;
    EXPECT_EQ(tr_task_submit(rt, "t_pid", nullptr, 0, nullptr, 0, &big, &r), TR_ERESOURCES);
    EXPECT_NE(strstr(tr_last_error(), "CPU=1000"), nullptr) << tr_last_error();
    tr_resource none = {"nowhere", 1};
    tr_task_options odd = TR_TASK_OPTIONS_INIT;
    odd.resources = &none;
    odd.n_resources = 1;
    EXPECT_EQ(tr_task_submit(rt, "t_pid", nullptr, 0, nullptr, 0, &odd, &r), TR_ERESOURCES);
    EXPECT_NE(strstr(tr_last_error(), "nowhere=1"), nullptr) << tr_last_error();
    tr_shutdown(rt);
}

/* A task worker holds its GPUs for its life: an actor (or a placement group) that waits
 * for them has the idle ones end (they restart with their next task, which then waits for a GPU),
 * never a pool that keeps them from it for good. */
TEST(TaskResourcesTest, IdleTaskWorkersGiveTheirGpusToAnActorThatWaits) {
    tr_config *cfg = test_config_with({{"num_gpus", "1"}});
    tr_runtime *rt = nullptr;
    ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
    tr_config_destroy(cfg);
    tr_task_options o = TR_TASK_OPTIONS_INIT;
    o.num_gpus = 1;
    auto pid_of = [&](tr_ref r, int ms, int64_t *pid) {
        const void *d;
        size_t n;
        int rc = tr_get(rt, r, ms, &d, &n);
        if (rc == 0 && n == 8) memcpy(pid, d, 8);
        return rc;
    };
    tr_ref r;
    int64_t first = 0, second = 0;
    ASSERT_EQ(tr_task_submit(rt, "t_pid", nullptr, 0, nullptr, 0, &o, &r), 0) << tr_last_error();
    ASSERT_EQ(pid_of(r, 30000, &first), 0) << tr_last_error();
    tr_ref_release(rt, r);

    tr_actor_options ao = TR_ACTOR_OPTIONS_INIT;
    ao.num_gpus = 1;
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &ao, nullptr, 0, &a), 0) << tr_last_error();
    EXPECT_EQ(tr_actor_wait_ready(rt, a, 30000), 0) << tr_last_error();
    EXPECT_EQ(kill(first, 0), -1) << "the idle task worker ended";

    ASSERT_EQ(tr_task_submit(rt, "t_pid", nullptr, 0, nullptr, 0, &o, &r), 0) << tr_last_error();
    EXPECT_EQ(pid_of(r, 500, &second), TR_ETIMEDOUT) << "it waits for the actor's GPU";
    EXPECT_EQ(tr_actor_kill(rt, a, 1), 0);
    ASSERT_EQ(pid_of(r, 30000, &second), 0) << tr_last_error();
    EXPECT_NE(second, first);
    tr_ref_release(rt, r);

    tr_bundle gpu = TR_BUNDLE_INIT; /* a placement group waits no longer either */
    gpu.num_gpus = 1;
    tr_pg_id pg;
    ASSERT_EQ(tr_placement_group_create(rt, &gpu, 1, TR_PG_PACK, nullptr, &pg), 0)
        << tr_last_error();
    EXPECT_EQ(tr_placement_group_wait(rt, pg, 30000), 0) << tr_last_error();
    EXPECT_EQ(kill(second, 0), -1) << "the idle task worker ended";
    EXPECT_EQ(tr_placement_group_remove(rt, pg), 0);
    tr_shutdown(rt);
}

} // namespace
