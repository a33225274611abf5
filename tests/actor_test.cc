/* tests/actor_test.cc - actors as real worker processes on an embedded node: calls,
 * ordering, refs, wait, errors, crashes, kills, restarts, names, resources, clean shutdown. */
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include <algorithm>
#include <set>
#include <cstddef>
#include <atomic>
#include <chrono>
#include <sstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_actors.h"

extern "C" {
#include "troupe/dag.h"
}

namespace {

using Clock = std::chrono::steady_clock;

class ActorTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    }
    void TearDown() override {
        if (rt) tr_shutdown(rt);
    }
    tr_actor_id make(const char *name = "c", const tr_actor_options *o = nullptr) {
        tr_actor_id id;
        EXPECT_EQ(tr_actor_create(rt, "Counter", o, name, strlen(name), &id), 0) << tr_last_error();
        return id;
    }
    /* crash_until's arguments: the limit, then the file (in dir) that counts its runs */
    static std::string crash_args(const char *dir, int64_t limit, const std::string &file) {
        std::string args(8, '\0');
        memcpy(&args[0], &limit, 8);
        return args + dir + "/" + file;
    }
    /* how many runs of crash_until the file (in dir) counts */
    static int runs_in(const char *dir, const std::string &file) {
        std::ifstream f(std::string(dir) + "/" + file);
        return (int)std::count(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>(),
                               '\n');
    }
    /* r's 8-byte value into *v (r released): tr_get's status */
    int value_of(tr_ref r, int64_t *v) {
        const void *p;
        size_t n;
        int rc = tr_get(rt, r, 30000, &p, &n);
        if (rc == 0 && n == 8) memcpy(v, p, 8);
        tr_ref_release(rt, r);
        return rc;
    }
    tr_runtime *rt = nullptr;
};

/* A class with a dispatch function (tr_actor_class.dispatch, for bindings): every name
 * its table lacks runs it, tr_ctx_method naming the call; a name in the table runs that
 * method; a compiled graph binds any name too; a class without one still refuses. */
TEST_F(ActorTest, DispatchRunsMethodsByName) {
    tr_actor_id d, c = make();
    ASSERT_EQ(tr_actor_create(rt, "Dispatcher", nullptr, nullptr, 0, &d), 0) << tr_last_error();
    std::string out;
    ASSERT_EQ(call_str(rt, d, "anything", "xyz", &out), 0) << tr_last_error();
    EXPECT_EQ(out, "anything:xyz");
    ASSERT_EQ(call_str(rt, d, "fixed", "", &out), 0);
    EXPECT_EQ(out, "fixed(fixed)");
    EXPECT_EQ(call_str(rt, d, "fail", "", &out), TR_ETASK);
    EXPECT_NE(out.find("asked to fail"), std::string::npos) << out;
    std::string long_name(300, 'm'); /* longer than any method name: refused by the caller */
    EXPECT_EQ(call_str(rt, d, long_name.c_str(), "", &out), TR_EINVAL);
    EXPECT_EQ(call_str(rt, c, "anything", "", &out), TR_ENOMETHOD);
    tr_dag *g;
    tr_dag_node in, n1, n2;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, d, "first", &in, 1, &n1), 0);
    ASSERT_EQ(tr_dag_bind(g, d, "second", &n1, 1, &n2), 0);
    ASSERT_EQ(tr_dag_output(g, &n2, 1), 0);
    ASSERT_EQ(tr_dag_compile(g, nullptr), 0) << tr_last_error();
    uint64_t e;
    ASSERT_EQ(tr_dag_execute(g, "v", 1, &e), 0);
    const void *p;
    size_t n;
    ASSERT_EQ(tr_dag_get(g, e, 0, 10000, &p, &n), 0) << tr_last_error();
    EXPECT_EQ(std::string((const char *)p, n), "second:first:v");
    EXPECT_EQ(tr_dag_release(g, e), 0);
    EXPECT_EQ(tr_dag_destroy(g), 0);
}

TEST_F(ActorTest, CallReturnsResult) {
    tr_actor_id a = make();
    int64_t out = 0;
    ASSERT_EQ(call_i64(rt, a, "add", 41, &out), 0) << tr_last_error();
    EXPECT_EQ(out, 41);
    ASSERT_EQ(call_i64(rt, a, "add", 1, &out), 0);
    EXPECT_EQ(out, 42);
    std::string name;
    ASSERT_EQ(call_str(rt, a, "name", "", &name), 0);
    EXPECT_EQ(name, "c");
}

/* tr_call_nowait: nothing done (TR_EAGAIN) while the actor is not connected yet; then
 * calls as tr_call does, in order with tr_call's; a dead actor's call is made and fails as
 * tr_call's. */
TEST_F(ActorTest, CallNowaitMakesNoCallWhereItWouldWait) {
    tr_actor_id a = make();
    ASSERT_EQ(tr_actor_wait_ready(rt, a, 10000), 0) << tr_last_error();
    int64_t one = 1, out = 0;
    tr_ref r;
    memset(&r, 0x5a, sizeof r);
    tr_ref before = r;
    ASSERT_EQ(tr_call_nowait(rt, a, "add", &one, sizeof one, &r), TR_EAGAIN);
    EXPECT_NE(std::string(tr_last_error()).find("not connected"), std::string::npos)
        << tr_last_error();
    EXPECT_EQ(memcmp(&r, &before, sizeof r), 0); /* (no ref made) */
    ASSERT_EQ(call_i64(rt, a, "add", 1, &out), 0) << tr_last_error();
    EXPECT_EQ(out, 1); /* (the refused call never ran) */
    std::vector<tr_ref> refs(100);
    for (int i = 0; i < 100; i++) {
        int rc = i % 2 ? tr_call(rt, a, "add", &one, sizeof one, &refs[i])
                       : tr_call_nowait(rt, a, "add", &one, sizeof one, &refs[i]);
        ASSERT_EQ(rc, 0) << i << ": " << tr_last_error();
    }
    for (int i = 0; i < 100; i++) {
        const void *p;
        size_t n;
        ASSERT_EQ(tr_get(rt, refs[i], 10000, &p, &n), 0) << tr_last_error();
        ASSERT_EQ(n, 8u);
        memcpy(&out, p, 8);
        EXPECT_EQ(out, i + 2); /* in the order made, whichever made it */
        tr_ref_release(rt, refs[i]);
    }
    ASSERT_EQ(tr_actor_kill(rt, a, 1), 0);
    int rc = tr_call_nowait(rt, a, "add", &one, sizeof one, &r);
    if (rc == 0) {
        const void *p;
        size_t n;
        EXPECT_EQ(tr_get(rt, r, 10000, &p, &n), TR_EACTOR_DIED);
        tr_ref_release(rt, r);
    } else {
        EXPECT_EQ(rc, TR_EAGAIN) << tr_last_error(); /* (not known dead here yet) */
    }
    EXPECT_EQ(tr_call_nowait(nullptr, a, "add", &one, sizeof one, &r), TR_EINVAL);
    EXPECT_STREQ(tr_errname(TR_EAGAIN), "TR_EAGAIN");
}

TEST_F(ActorTest, EightActorsTenThousandCallsInOrder) {
    const int kActors = 8, kCalls = 10000;
    std::vector<tr_actor_id> actors;
    for (int i = 0; i < kActors; i++)
        actors.push_back(make());
    std::vector<tr_ref> refs(kCalls);
    std::vector<int64_t> seq(kActors, 0);
    for (int i = 0; i < kCalls; i++) {
        int a = i % kActors;
        int64_t s = ++seq[a];
        ASSERT_EQ(tr_call(rt, actors[a], "seq", &s, sizeof s, &refs[i]), 0) << tr_last_error();
    }
    for (int i = 0; i < kCalls; i++) {
        const void *data;
        size_t len;
        ASSERT_EQ(tr_get(rt, refs[i], 20000, &data, &len), 0) << i << ": " << tr_last_error();
        ASSERT_EQ(len, 8u);
        EXPECT_EQ(*(const int64_t *)data, i / kActors + 1);
        EXPECT_EQ(tr_ref_release(rt, refs[i]), 0);
    }
}

TEST_F(ActorTest, RefsWaitedOutOfOrder) {
    tr_actor_id a = make(), b = make();
    /* a sleeps 300 ms, then b answers at once: b's ref is ready first. */
    tr_ref slow, fast;
    int64_t ms = 300, v = 7;
    ASSERT_EQ(tr_call(rt, a, "sleep_ms", &ms, sizeof ms, &slow), 0);
    ASSERT_EQ(tr_call(rt, b, "add", &v, sizeof v, &fast), 0);
    tr_ref both[2] = {slow, fast};
    uint8_t ready[2] = {9, 9};
    size_t n_ready = 0;
    ASSERT_EQ(tr_wait(rt, both, 2, 1, 5000, ready, &n_ready), 0);
    EXPECT_EQ(n_ready, 1u);
    EXPECT_EQ(ready[0], 0);
    EXPECT_EQ(ready[1], 1);
    /* get in reverse order of submission */
    const void *d;
    size_t len;
    ASSERT_EQ(tr_get(rt, fast, 1000, &d, &len), 0);
    EXPECT_EQ(*(const int64_t *)d, 7);
    ASSERT_EQ(tr_get(rt, slow, 5000, &d, &len), 0);
    EXPECT_EQ(*(const int64_t *)d, 300);
    ASSERT_EQ(tr_wait(rt, both, 2, 2, 0, ready, &n_ready), 0);
    EXPECT_EQ(n_ready, 2u);
    /* many refs, gotten in reverse */
    std::vector<tr_ref> refs(500);
    for (int i = 0; i < 500; i++) {
        int64_t x = 1;
        ASSERT_EQ(tr_call(rt, b, "add", &x, sizeof x, &refs[i]), 0);
    }
    for (int i = 499; i >= 0; i--) {
        ASSERT_EQ(tr_get(rt, refs[i], 5000, &d, &len), 0);
        EXPECT_EQ(*(const int64_t *)d, 7 + i + 1);
    }
    for (auto &r : refs)
        tr_ref_release(rt, r);
    tr_ref_release(rt, slow);
    tr_ref_release(rt, fast);
}

TEST_F(ActorTest, WaitTimesOutWithoutError) {
    tr_actor_id a = make();
    tr_ref r;
    int64_t ms = 500;
    ASSERT_EQ(tr_call(rt, a, "sleep_ms", &ms, sizeof ms, &r), 0);
    uint8_t ready = 9;
    size_t n = 9;
    auto t0 = Clock::now();
    ASSERT_EQ(tr_wait(rt, &r, 1, 1, 50, &ready, &n), 0);
    EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(400));
    EXPECT_EQ(n, 0u);
    EXPECT_EQ(ready, 0);
    EXPECT_EQ(tr_get(rt, r, 10, nullptr, nullptr), TR_ETIMEDOUT);
    EXPECT_EQ(tr_get(rt, r, 5000, nullptr, nullptr), 0); /* the ref stayed valid */
    tr_ref_release(rt, r);
}

TEST_F(ActorTest, MethodErrorGivesTaskErrorAndActorLivesOn) {
    tr_actor_id a = make();
    std::string out;
    EXPECT_EQ(call_str(rt, a, "fail", "boom", &out), TR_ETASK);
    EXPECT_NE(std::string(tr_last_error()).find("failing on purpose: boom"), std::string::npos)
        << tr_last_error();
    EXPECT_NE(out.find("failing on purpose: boom"), std::string::npos);
    EXPECT_EQ(call_str(rt, a, "fail_silent", "", &out), TR_ETASK);
    EXPECT_NE(std::string(tr_last_error()).find("returned 7"), std::string::npos);
    int64_t v = 0;
    EXPECT_EQ(call_i64(rt, a, "add", 3, &v), 0);
    EXPECT_EQ(v, 3);
    /* wrong argument size is the method's own error */
    EXPECT_EQ(call_str(rt, a, "add", "x", &out), TR_ETASK);
}

TEST_F(ActorTest, UnknownMethod) {
    tr_actor_id a = make();
    std::string out;
    EXPECT_EQ(call_str(rt, a, "no_such_method", "", &out), TR_ENOMETHOD);
    EXPECT_NE(std::string(tr_last_error()).find("no_such_method"), std::string::npos);
    int64_t v;
    EXPECT_EQ(call_i64(rt, a, "add", 1, &v), 0);
}

TEST_F(ActorTest, CrashInsideMethodKillsOnlyThatActor) {
    tr_actor_id a = make(), b = make();
    int64_t v;
    ASSERT_EQ(call_i64(rt, b, "add", 1, &v), 0);
    std::string out;
    auto t0 = Clock::now();
    EXPECT_EQ(call_str(rt, a, "crash", "", &out), TR_EACTOR_DIED);
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(1));
    /* later calls fail too, with the reason */
    EXPECT_EQ(call_i64(rt, a, "add", 1, &v, 5000), TR_EACTOR_DIED);
    /* "killed by signal 11" (or "exited with status 1" under ASan, which catches SEGV) */
    EXPECT_NE(std::string(tr_last_error()).find("worker process"), std::string::npos)
        << tr_last_error();
    EXPECT_EQ(tr_actor_wait_ready(rt, a, 1000), TR_EACTOR_DIED);
    /* the other actor is unaffected */
    ASSERT_EQ(call_i64(rt, b, "add", 1, &v), 0);
    EXPECT_EQ(v, 2);
}

TEST_F(ActorTest, KilledMidStreamFailsPendingCallsWithinASecond) {
    tr_actor_id a = make(), b = make();
    std::vector<tr_ref> refs(200);
    for (auto &r : refs) {
        int64_t ms = 20;
        ASSERT_EQ(tr_call(rt, a, "sleep_ms", &ms, sizeof ms, &r), 0);
    }
    /* let a few finish */
    ASSERT_EQ(tr_get(rt, refs[2], 5000, nullptr, nullptr), 0);
    auto t0 = Clock::now();
    ASSERT_EQ(tr_actor_kill(rt, a, 1), 0);
    int died = 0, ok = 0;
    for (auto &r : refs) {
        int rc = tr_get(rt, r, 2000, nullptr, nullptr);
        if (rc == TR_EACTOR_DIED)
            died++;
        else if (rc == 0)
            ok++;
        else
            ADD_FAILURE() << tr_errname(rc) << " " << tr_last_error();
        tr_ref_release(rt, r);
    }
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(1));
    EXPECT_GE(ok, 3);
    EXPECT_GT(died, 150);
    int64_t v;
    EXPECT_EQ(call_i64(rt, a, "add", 1, &v, 5000), TR_EACTOR_DIED);
    EXPECT_NE(std::string(tr_last_error()).find("tr_actor_kill"), std::string::npos)
        << tr_last_error();
    EXPECT_EQ(call_i64(rt, b, "add", 1, &v), 0);
}

TEST_F(ActorTest, MaxRestartsRestartsAfterCrash) {
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.max_restarts = 2;
    tr_actor_id a = make("r", &o);
    int64_t pid1 = 0, pid2 = 0, pid3 = 0, v;
    ASSERT_EQ(call_i64(rt, a, "pid", 0, &pid1), 0);
    ASSERT_EQ(call_i64(rt, a, "add", 10, &v), 0);
    std::string out;
    EXPECT_EQ(call_str(rt, a, "crash", "", &out), TR_EACTOR_DIED);
    /* the next call goes to the new incarnation, whose state is fresh */
    ASSERT_EQ(call_i64(rt, a, "pid", 0, &pid2, 10000), 0) << tr_last_error();
    EXPECT_NE(pid1, pid2);
    ASSERT_EQ(call_i64(rt, a, "get", 0, &v), 0);
    EXPECT_EQ(v, 0);
    EXPECT_EQ(call_str(rt, a, "exit", "", &out), TR_EACTOR_DIED);
    ASSERT_EQ(call_i64(rt, a, "pid", 0, &pid3, 10000), 0) << tr_last_error();
    EXPECT_NE(pid2, pid3);
    /* restarts used up: the third death is final */
    EXPECT_EQ(call_str(rt, a, "crash", "", &out), TR_EACTOR_DIED);
    EXPECT_EQ(call_i64(rt, a, "pid", 0, &pid3, 5000), TR_EACTOR_DIED);
    /* a kill without no_restart also restarts */
    tr_actor_id b = make("k", &o);
    ASSERT_EQ(call_i64(rt, b, "pid", 0, &pid1), 0);
    ASSERT_EQ(tr_actor_kill(rt, b, 0), 0);
    for (int i = 0; i < 50; i++) {
        int rc = call_i64(rt, b, "pid", 0, &pid2, 10000);
        if (rc == 0 && pid2 != pid1) break;
        ASSERT_TRUE(rc == 0 || rc == TR_EACTOR_DIED) << tr_errname(rc);
    }
    EXPECT_NE(pid1, pid2);
}

/* tr_call_opts' max_task_retries: a call's own retries over its actor's (Ray's per-method
 * max_task_retries): more than the actor's, none where the actor's are -1, the actor's
 * with TR_RETRIES_ACTOR; bad options are refused; NULL options are tr_call_refs'. */
/* tr_ctx_exit_actor (Ray's exit_actor): the call that ran it fails with TR_EACTOR_DIED and
 * its reason whatever it replied, the actor is dead for good (restarts left or not) with
 * that reason in its details, and a later call fails; in a constructor the actor never
 * lives; in a task it is refused. */
TEST_F(ActorTest, AnActorThatEndsItselfSaysWhy) {
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.max_restarts = -1;
    tr_actor_id a = make("e", &o);
    std::string out;
    EXPECT_EQ(call_str(rt, a, "exit_with", "all done", &out), TR_EACTOR_DIED);
    tr_ref after; /* (sent behind it: never run, for the same reason) */
    int64_t one = 1;
    ASSERT_EQ(tr_call(rt, a, "add", &one, sizeof one, &after), 0);
    EXPECT_EQ(tr_get(rt, after, 10000, nullptr, nullptr), TR_EACTOR_DIED);
    EXPECT_NE(std::string(tr_last_error()).find("all done"), std::string::npos) << tr_last_error();
    tr_ref_release(rt, after);
    EXPECT_NE(std::string(tr_last_error()).find("all done"), std::string::npos) << tr_last_error();
    EXPECT_NE(std::string(tr_last_error()).find("'exit_with'"), std::string::npos)
        << tr_last_error();
    tr_actor_details d; /* (its worker goes right after the reply: dead soon) */
    tr_actor_details_init(&d);
    EXPECT_TRUE(eventually(
        5000, [&] { return tr_actor_info(rt, a, &d) == 0 && d.state == TR_ACTOR_DEAD; }));
    EXPECT_STREQ(d.reason, "all done");
    EXPECT_EQ(d.restarts, 0);
    int64_t v;
    EXPECT_EQ(call_i64(rt, a, "add", 1, &v), TR_EACTOR_DIED);
    /* in its constructor */
    tr_actor_id b;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &o, "exit-ctor", 9, &b), 0);
    EXPECT_EQ(tr_actor_wait_ready(rt, b, 10000), TR_EACTOR_DIED);
    EXPECT_NE(std::string(tr_last_error()).find("its constructor said so"), std::string::npos)
        << tr_last_error();
    /* in a task */
    tr_ref r;
    const void *p;
    size_t n;
    ASSERT_EQ(tr_task_submit(rt, "t_exit", nullptr, 0, nullptr, 0, nullptr, &r), 0);
    ASSERT_EQ(tr_get(rt, r, 30000, &p, &n), 0) << tr_last_error();
    EXPECT_EQ(std::string((const char *)p, n), "TR_ESTATE");
    tr_ref_release(rt, r);
    EXPECT_EQ(tr_ctx_exit_actor(nullptr, "x"), TR_EINVAL);
    /* the longest reason, cut to 300 bytes */
    tr_actor_id c = make("e2");
    EXPECT_EQ(call_str(rt, c, "exit_with", std::string(1000, 'w'), &out), TR_EACTOR_DIED);
    EXPECT_NE(std::string(tr_last_error()).find(std::string(300, 'w')), std::string::npos);
    EXPECT_EQ(std::string(tr_last_error()).find(std::string(301, 'w')), std::string::npos);
}

TEST_F(ActorTest, CallOptionsRetriesOverTheActors) {
    char dir[] = "/tmp/troupe-own-retries-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    auto crash_until = [&](tr_actor_id a, int64_t limit, const std::string &file, int retries,
                           tr_ref *r) {
        std::string args = crash_args(dir, limit, file);
        tr_call_options co = TR_CALL_OPTIONS_INIT;
        co.max_task_retries = retries;
        return tr_call_opts(rt, a, "crash_until", args.data(), args.size(), NULL, 0, &co, r);
    };
    auto runs = [&](const std::string &file) { return runs_in(dir, file); };
    auto value = [&](tr_ref r, int64_t *v) { return value_of(r, v); };
    int64_t v = -1;
    tr_ref r;
    /* an actor without retries (the default, 0): a call of its own 1 goes again once */
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.max_restarts = 5;
    tr_actor_id a = make("own", &o);
    ASSERT_EQ(crash_until(a, 2, "more", 1, &r), 0) << tr_last_error();
    ASSERT_EQ(value(r, &v), 0) << tr_last_error();
    EXPECT_EQ(v, 2);
    EXPECT_EQ(runs("more"), 2);
    ASSERT_EQ(crash_until(a, 2, "actors", TR_RETRIES_ACTOR, &r), 0) << tr_last_error();
    EXPECT_EQ(value(r, &v), TR_EACTOR_DIED);
    EXPECT_EQ(runs("actors"), 1);
    /* an actor that always retries: a call of its own 0 fails as its worker dies */
    tr_actor_options always = TR_ACTOR_OPTIONS_INIT;
    always.max_restarts = 5;
    always.max_task_retries = -1;
    tr_actor_id b = make("always", &always);
    ASSERT_EQ(call_i64(rt, b, "get", 0, &v, 30000), 0) << tr_last_error(); /* (known) */
    ASSERT_EQ(crash_until(b, 2, "none", 0, &r), 0) << tr_last_error();
    EXPECT_EQ(value(r, &v), TR_EACTOR_DIED);
    EXPECT_EQ(runs("none"), 1);
    ASSERT_EQ(crash_until(b, 3, "default", TR_RETRIES_ACTOR, &r), 0) << tr_last_error();
    ASSERT_EQ(value(r, &v), 0) << tr_last_error();
    EXPECT_EQ(v, 3);
    /* bad options */
    tr_call_options bad = TR_CALL_OPTIONS_INIT;
    bad.max_task_retries = -3;
    int64_t one = 1;
    EXPECT_EQ(tr_call_opts(rt, a, "add", &one, 8, NULL, 0, &bad, &r), TR_EINVAL);
    EXPECT_NE(strstr(tr_last_error(), "max_task_retries"), nullptr) << tr_last_error();
    bad = TR_CALL_OPTIONS_INIT;
    bad.n_contained = 1;
    EXPECT_EQ(tr_call_opts(rt, a, "add", &one, 8, NULL, 0, &bad, &r), TR_EINVAL);
    tr_call_options raw;
    memset(&raw, 0, sizeof raw); /* (nobody initialised it) */
    EXPECT_EQ(tr_call_opts(rt, a, "add", &one, 8, NULL, 0, &raw, &r), TR_EINVAL);
    EXPECT_EQ(tr_call_opts(rt, a, "add", &one, 8, NULL, 0, NULL, NULL), TR_EINVAL);
    /* NULL options: a plain call */
    ASSERT_EQ(tr_call_opts(rt, a, "add", &one, 8, NULL, 0, NULL, &r), 0) << tr_last_error();
    ASSERT_EQ(value(r, &v), 0) << tr_last_error();
    EXPECT_EQ(v, 1);
    for (const char *f : {"more", "actors", "none", "default"})
        unlink((std::string(dir) + "/" + f).c_str());
    rmdir(dir);
}

/* max_task_retries (Ray's): a call in flight when the worker dies goes again to the next
 * incarnation, ahead of the calls sent after it, up to that many times; a process that
 * found the actor by name does the same; without it (the default) the call fails. */
TEST_F(ActorTest, MaxTaskRetriesSendsCallsInFlightAgain) {
    char dir[] = "/tmp/troupe-retries-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    auto crash_until = [&](tr_actor_id a, int64_t limit, const std::string &file, tr_ref *r) {
        std::string args = crash_args(dir, limit, file);
        return tr_call(rt, a, "crash_until", args.data(), args.size(), r);
    };
    auto runs = [&](const std::string &file) { return runs_in(dir, file); };
    auto value = [&](tr_ref r, int64_t *v) { return value_of(r, v); };
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.name = "retried";
    o.max_restarts = 5;
    o.max_task_retries = 2;
    tr_actor_id a = make("r", &o);
    /* submitted at once (before the node has said anything of the actor): the first run
     * dies in flight, the second (a new worker's) replies 2; the calls sent after it run
     * after it, in order (the next run of crash_until counts 3), on fresh state */
    tr_ref r1, r2, r3, r4;
    ASSERT_EQ(crash_until(a, 2, "first", &r1), 0) << tr_last_error();
    ASSERT_EQ(crash_until(a, 0, "first", &r2), 0) << tr_last_error();
    int64_t five = 5, v = -1;
    ASSERT_EQ(tr_call(rt, a, "add", &five, 8, &r3), 0);
    ASSERT_EQ(tr_call(rt, a, "get", &five, 8, &r4), 0);
    ASSERT_EQ(value(r1, &v), 0) << tr_last_error();
    EXPECT_EQ(v, 2);
    ASSERT_EQ(value(r2, &v), 0) << tr_last_error();
    EXPECT_EQ(v, 3);
    ASSERT_EQ(value(r3, &v), 0) << tr_last_error();
    EXPECT_EQ(v, 5);
    ASSERT_EQ(value(r4, &v), 0) << tr_last_error();
    EXPECT_EQ(v, 5);
    EXPECT_EQ(runs("first"), 3);
    /* a call that dies every time runs 1 + max_task_retries times, then fails */
    ASSERT_EQ(crash_until(a, 100, "always", &r1), 0);
    EXPECT_EQ(value(r1, &v), TR_EACTOR_DIED);
    EXPECT_NE(std::string(tr_last_error()).find("died"), std::string::npos) << tr_last_error();
    EXPECT_EQ(runs("always"), 3);
    /* (4 restarts of 5 used: it is up again) */
    ASSERT_EQ(call_i64(rt, a, "get", 0, &v, 30000), 0) << tr_last_error();
    EXPECT_EQ(v, 0);
    /* a process that finds it by name (its handle says nothing of retries) sends again too */
    int st =
        run_self(std::string("RETRY_BY_NAME=") + tr_runtime_address(rt) + "|" + dir + "/child");
    EXPECT_TRUE(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child status " << st;
    EXPECT_EQ(runs("child"), 2);
    /* the default, 0: a call in flight fails, and is not run again */
    tr_actor_options plain = TR_ACTOR_OPTIONS_INIT;
    plain.max_restarts = 1;
    tr_actor_id b = make("p", &plain);
    ASSERT_EQ(crash_until(b, 2, "plain", &r1), 0);
    EXPECT_EQ(value(r1, &v), TR_EACTOR_DIED);
    ASSERT_EQ(call_i64(rt, b, "get", 0, &v, 30000), 0) << tr_last_error();
    EXPECT_EQ(runs("plain"), 1);
    /* retries without restarts: nowhere to go again (Ray's max_task_retries needs
     * max_restarts), so it fails as it dies, as without them */
    tr_actor_options once = TR_ACTOR_OPTIONS_INIT;
    once.max_task_retries = -1;
    tr_actor_id c = make("o", &once);
    ASSERT_EQ(crash_until(c, 2, "once", &r1), 0);
    EXPECT_EQ(value(r1, &v), TR_EACTOR_DIED);
    EXPECT_NE(std::string(tr_last_error()).find("in flight"), std::string::npos) << tr_last_error();
    EXPECT_EQ(runs("once"), 1);
    tr_actor_options bad = TR_ACTOR_OPTIONS_INIT;
    bad.max_task_retries = -2;
    tr_actor_id none;
    EXPECT_EQ(tr_actor_create(rt, "Counter", &bad, "x", 1, &none), TR_EINVAL);
    EXPECT_NE(strstr(tr_last_error(), "max_task_retries"), nullptr) << tr_last_error();
    for (const char *f : {"first", "always", "child", "plain", "once"})
        unlink((std::string(dir) + "/" + f).c_str());
    rmdir(dir);
}

TEST_F(ActorTest, InfoReportsStatePidRestartsClassNameAndNode) {
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.name = "described";
    o.max_restarts = 1;
    tr_actor_id a = make("d", &o);
    int64_t pid = 0;
    ASSERT_EQ(call_i64(rt, a, "pid", 0, &pid), 0);
    tr_actor_details d;
    tr_actor_details_init(&d);
    ASSERT_EQ(tr_actor_info(rt, a, &d), 0) << tr_last_error();
    EXPECT_EQ(d.state, TR_ACTOR_ALIVE);
    EXPECT_STREQ(tr_actor_state_name(d.state), "ALIVE");
    EXPECT_EQ(d.pid, pid);
    EXPECT_EQ(d.restarts, 0);
    EXPECT_EQ(d.max_restarts, 1);
    EXPECT_STREQ(d.class_name, "Counter");
    EXPECT_STREQ(d.name, "described");
    EXPECT_STREQ(d.node, tr_runtime_address(rt));
    EXPECT_STREQ(d.reason, "");
    /* a crash: restarted, with a new pid */
    std::string out;
    EXPECT_EQ(call_str(rt, a, "crash", "", &out), TR_EACTOR_DIED);
    int64_t pid2 = 0;
    ASSERT_EQ(call_i64(rt, a, "pid", 0, &pid2, 10000), 0) << tr_last_error();
    ASSERT_EQ(tr_actor_info(rt, a, &d), 0);
    EXPECT_EQ(d.state, TR_ACTOR_ALIVE);
    EXPECT_EQ(d.restarts, 1);
    EXPECT_EQ(d.pid, pid2);
    /* killed for good: dead, with the reason */
    ASSERT_EQ(tr_actor_kill(rt, a, 1), 0);
    ASSERT_EQ(tr_actor_info(rt, a, &d), 0);
    EXPECT_EQ(d.state, TR_ACTOR_DEAD);
    EXPECT_NE(std::string(d.reason).find("tr_actor_kill"), std::string::npos) << d.reason;
    /* an unnamed actor, and errors */
    tr_actor_id b = make("u");
    ASSERT_EQ(tr_actor_wait_ready(rt, b, 10000), 0);
    ASSERT_EQ(tr_actor_info(rt, b, &d), 0);
    EXPECT_STREQ(d.name, "");
    tr_actor_id nobody;
    memset(&nobody, 0x5a, sizeof nobody);
    EXPECT_EQ(tr_actor_info(rt, nobody, &d), TR_ENOTFOUND);
    EXPECT_EQ(tr_actor_info(rt, b, nullptr), TR_EINVAL);
    d.struct_size = 8;
    EXPECT_EQ(tr_actor_info(rt, b, &d), TR_EINVAL);
}

TEST_F(ActorTest, ABindingsErrorWithoutFormatting) {
    tr_actor_id a = make();
    std::string out;
    EXPECT_EQ(call_str(rt, a, "fail_plain", "100% plain, no %s here", &out), TR_ETASK);
    EXPECT_EQ(std::string(tr_last_error()), "100% plain, no %s here");
}

/* Option and result structs of any size from the first published one up: what an older
 * binding passes (exactly that many bytes: the sanitizers see any read beyond), and what
 * a newer one passes (fields this library does not know). */
TEST_F(ActorTest, StructsOfOlderAndNewerSizesAreAccepted) {
    const size_t opts_v1 = offsetof(tr_actor_options, max_restarts) + sizeof(int);
    auto *old_opts = (tr_actor_options *)malloc(opts_v1);
    tr_actor_options def = TR_ACTOR_OPTIONS_INIT;
    memcpy(old_opts, &def, opts_v1);
    old_opts->struct_size = (uint32_t)opts_v1;
    old_opts->name = "old-binding";
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", old_opts, "o", 1, &a), 0) << tr_last_error();
    old_opts->struct_size = (uint32_t)opts_v1 - 1;
    old_opts->name = "too-old";
    EXPECT_EQ(tr_actor_create(rt, "Counter", old_opts, "o", 1, &a), TR_EINVAL);
    free(old_opts);
    struct {
        tr_actor_options o;
        uint64_t later_fields[4];
    } newer;
    newer.o = def;
    newer.o.struct_size = (uint32_t)sizeof newer | TR_STRUCT_MAGIC; /* as its header's macro */
    newer.o.name = "new-binding";
    memset(newer.later_fields, 0xee, sizeof newer.later_fields);
    ASSERT_EQ(tr_actor_create(rt, "Counter", &newer.o, "n", 1, &a), 0) << tr_last_error();
    tr_actor_id found;
    ASSERT_EQ(tr_actor_get(rt, "old-binding", &found), 0);
    ASSERT_EQ(tr_actor_get(rt, "new-binding", &found), 0);
    EXPECT_EQ(memcmp(&found, &a, sizeof a), 0);

    /* a result struct: filled up to the caller's size, nothing beyond */
    const size_t stats_v1 = offsetof(tr_store_stats, restores) + sizeof(uint64_t);
    auto *old_stats = (tr_store_stats *)malloc(stats_v1);
    memset(old_stats, 0, stats_v1);
    old_stats->struct_size = (uint32_t)stats_v1;
    ASSERT_EQ(tr_object_stats(rt, old_stats), 0) << tr_last_error();
    EXPECT_GT(old_stats->capacity, 0u);
    free(old_stats);
    struct {
        tr_store_stats s;
        uint64_t later_fields[2];
    } newer_stats;
    tr_store_stats_init(&newer_stats.s);
    newer_stats.s.struct_size = (uint32_t)sizeof newer_stats | TR_STRUCT_MAGIC;
    newer_stats.later_fields[0] = newer_stats.later_fields[1] = 77;
    ASSERT_EQ(tr_object_stats(rt, &newer_stats.s), 0);
    EXPECT_GT(newer_stats.s.capacity, 0u);
    EXPECT_EQ(newer_stats.later_fields[0], 77u) << "written past what this library knows";
    tr_store_stats tiny;
    tiny.struct_size = 4;
    EXPECT_EQ(tr_object_stats(rt, &tiny), TR_EINVAL);

    /* an actor class */
    const size_t cls_v1 = offsetof(tr_actor_class, n_methods) + sizeof(size_t);
    tr_config *cfg;
    ASSERT_EQ(tr_config_create(&cfg), 0);
    auto *old_cls = (tr_actor_class *)malloc(cls_v1);
    tr_actor_class cdef;
    tr_actor_class_init(&cdef);
    memcpy(old_cls, &cdef, cls_v1);
    old_cls->struct_size = (uint32_t)cls_v1;
    old_cls->name = "Old";
    EXPECT_EQ(tr_config_add_class(cfg, old_cls), 0) << tr_last_error();
    old_cls->struct_size = 3;
    old_cls->name = "Older";
    EXPECT_EQ(tr_config_add_class(cfg, old_cls), TR_EINVAL);
    free(old_cls);
    tr_config_destroy(cfg);
}

/* A struct nobody initialised (stack garbage in struct_size) is refused, not read past
 * its end; a binary from before 0.3 (no magic) only at a size troupe published then. */
TEST_F(ActorTest, UninitialisedStructsAreRefused) {
    tr_actor_options def = TR_ACTOR_OPTIONS_INIT;
    EXPECT_EQ(def.struct_size & 0xffff0000u, TR_STRUCT_MAGIC);
    EXPECT_EQ(def.struct_size & 0xffffu, sizeof def);
    tr_actor_options o = def;
    tr_actor_id a;
    for (uint32_t garbage : {0u, 0xdeadbeefu, (uint32_t)sizeof o + 8, 0x7fffffffu}) {
        o.struct_size = garbage;
        EXPECT_EQ(tr_actor_create(rt, "Counter", &o, "g", 1, &a), TR_EINVAL) << garbage;
        EXPECT_NE(strstr(tr_last_error(), "initialise the struct"), nullptr) << tr_last_error();
    }
    o.struct_size = (uint32_t)sizeof o; /* 0.2's size, no magic: an old binary */
    EXPECT_EQ(tr_actor_create(rt, "Counter", &o, "g", 1, &a), 0) << tr_last_error();
    tr_store_stats st;
    memset(&st, 0xab, sizeof st);
    EXPECT_EQ(tr_object_stats(rt, &st), TR_EINVAL);
    tr_store_stats_init(&st);
    EXPECT_EQ(tr_object_stats(rt, &st), 0) << tr_last_error();
    tr_actor_class cls;
    memset(&cls, 0, sizeof cls);
    cls.struct_size = 0x1234;
    cls.name = "Garbage";
    tr_config *cfg;
    ASSERT_EQ(tr_config_create(&cfg), 0);
    EXPECT_EQ(tr_config_add_class(cfg, &cls), TR_EINVAL);
    tr_actor_class_init(&cls);
    EXPECT_EQ(cls.struct_size, TR_STRUCT_SIZE(tr_actor_class));
    cls.name = "Garbage";
    EXPECT_EQ(tr_config_add_class(cfg, &cls), 0) << tr_last_error();
    tr_config_destroy(cfg);
}

/* A binding's data kept with the actor comes back to whoever asks by its id (found by
 * name, say), through restarts; none is NULL; over the limit is refused at create. */
TEST_F(ActorTest, BindingDataComesBackToWhoeverFindsTheActor) {
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.name = "kept";
    o.max_restarts = 1;
    std::string meta = "{\"methods\":[\"add\"],\"returns\":{\"split\":2}}";
    o.binding_data = meta.c_str();
    tr_actor_id a = make("k", &o);
    tr_actor_id found;
    ASSERT_EQ(tr_actor_get(rt, "kept", &found), 0) << tr_last_error();
    char *got = nullptr;
    ASSERT_EQ(tr_actor_binding_data(rt, found, &got), 0) << tr_last_error();
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(std::string(got), meta);
    tr_free(got);
    ASSERT_EQ(tr_actor_kill(rt, a, 0), 0); /* (restarts: the actor's record stays) */
    ASSERT_EQ(tr_actor_wait_ready(rt, a, 30000), 0) << tr_last_error();
    got = nullptr;
    ASSERT_EQ(tr_actor_binding_data(rt, a, &got), 0) << tr_last_error();
    EXPECT_EQ(std::string(got ? got : "(none)"), meta);
    tr_free(got);
    tr_actor_id plain = make("p");
    got = (char *)"untouched";
    ASSERT_EQ(tr_actor_binding_data(rt, plain, &got), 0);
    EXPECT_EQ(got, nullptr);
    std::string big(TR_ACTOR_BINDING_DATA_MAX + 1, 'x');
    tr_actor_options ob = TR_ACTOR_OPTIONS_INIT;
    ob.binding_data = big.c_str();
    tr_actor_id none;
    EXPECT_EQ(tr_actor_create(rt, "Counter", &ob, "b", 1, &none), TR_EINVAL);
    EXPECT_NE(strstr(tr_last_error(), "binding_data"), nullptr) << tr_last_error();
    big.pop_back(); /* exactly the limit: kept whole */
    ASSERT_EQ(tr_actor_create(rt, "Counter", &ob, "b", 1, &none), 0) << tr_last_error();
    ASSERT_EQ(tr_actor_binding_data(rt, none, &got), 0) << tr_last_error();
    EXPECT_EQ(got ? strlen(got) : 0u, (size_t)TR_ACTOR_BINDING_DATA_MAX);
    tr_free(got);
    tr_actor_id nobody;
    memset(&nobody, 7, sizeof nobody);
    EXPECT_EQ(tr_actor_binding_data(rt, nobody, &got), TR_ENOTFOUND);
    EXPECT_EQ(tr_actor_binding_data(rt, a, nullptr), TR_EINVAL);
    for (tr_actor_id x : {a, plain, none})
        tr_actor_kill(rt, x, 1);
}

TEST_F(ActorTest, ConstructorFailureAndUnknownClass) {
    tr_actor_id a = make("fail-ctor");
    EXPECT_EQ(tr_actor_wait_ready(rt, a, 10000), TR_EACTOR_DIED);
    EXPECT_NE(std::string(tr_last_error()).find("constructor refused"), std::string::npos)
        << tr_last_error();
    int64_t v;
    EXPECT_EQ(call_i64(rt, a, "add", 1, &v), TR_EACTOR_DIED);
    tr_actor_id u;
    ASSERT_EQ(tr_actor_create(rt, "NoSuchClass", nullptr, nullptr, 0, &u), 0);
    EXPECT_EQ(tr_actor_wait_ready(rt, u, 10000), TR_EACTOR_DIED);
    EXPECT_NE(std::string(tr_last_error()).find("NoSuchClass"), std::string::npos);
    tr_actor_id c = make("crash-ctor");
    EXPECT_EQ(tr_actor_wait_ready(rt, c, 10000), TR_EACTOR_DIED);
    /* a class without a constructor works */
    tr_actor_id s;
    ASSERT_EQ(tr_actor_create(rt, "Stateless", nullptr, nullptr, 0, &s), 0);
    std::string out;
    EXPECT_EQ(call_str(rt, s, "echo", "hi", &out), 0);
    EXPECT_EQ(out, "hi");
}

TEST_F(ActorTest, NamedActors) {
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.name = "the-counter";
    tr_actor_id a = make("x", &o), found;
    ASSERT_EQ(tr_actor_get(rt, "the-counter", &found), 0);
    EXPECT_EQ(memcmp(&a, &found, sizeof a), 0);
    tr_actor_id dup;
    EXPECT_EQ(tr_actor_create(rt, "Counter", &o, "y", 1, &dup), TR_EEXIST);
    EXPECT_EQ(tr_actor_get(rt, "nobody", &found), TR_ENOTFOUND);
    EXPECT_EQ(tr_actor_get(rt, "", &found), TR_EINVAL);
    ASSERT_EQ(tr_actor_kill(rt, a, 1), 0);
    EXPECT_EQ(tr_actor_get(rt, "the-counter", &found), TR_ENOTFOUND);
    /* the name is free again */
    EXPECT_EQ(tr_actor_create(rt, "Counter", &o, "z", 1, &dup), 0);
}

/* Names live in namespaces (Ray's): one name in two namespaces is two actors; a runtime
 * finds the names of its own namespace (its config's "namespace", else the environment's
 * TROUPE_NAMESPACE, else the default ""), tr_actor_get_in those of any; a namespace or a
 * name with the byte 0x1f, or a namespace over 255 bytes, is refused. */
TEST_F(ActorTest, NamespacesScopeNames) {
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.name = "shared";
    o.ns = "a";
    tr_actor_id a = make("a", &o), dup, found;
    EXPECT_EQ(tr_actor_create(rt, "Counter", &o, "d", 1, &dup), TR_EEXIST);
    o.ns = "b";
    tr_actor_id b = make("b", &o);
    o.ns = nullptr; /* the runtime's: the default */
    tr_actor_id d = make("d", &o);
    ASSERT_EQ(tr_actor_get_in(rt, "a", "shared", &found), 0) << tr_last_error();
    EXPECT_EQ(memcmp(&found, &a, sizeof a), 0);
    ASSERT_EQ(tr_actor_get_in(rt, "b", "shared", &found), 0);
    EXPECT_EQ(memcmp(&found, &b, sizeof b), 0);
    ASSERT_EQ(tr_actor_get(rt, "shared", &found), 0);
    EXPECT_EQ(memcmp(&found, &d, sizeof d), 0);
    ASSERT_EQ(tr_actor_get_in(rt, "", "shared", &found), 0);
    EXPECT_EQ(memcmp(&found, &d, sizeof d), 0);
    EXPECT_EQ(tr_actor_get_in(rt, "c", "shared", &found), TR_ENOTFOUND);
    EXPECT_NE(std::string(tr_last_error()).find("namespace 'c'"), std::string::npos);
    /* the environment's namespace, for a runtime whose config names none */
    setenv("TROUPE_NAMESPACE", "b", 1);
    int rc = tr_actor_get(rt, "shared", &found);
    setenv("TROUPE_NAMESPACE", std::string(300, 'x').c_str(), 1); /* (too long: refused) */
    EXPECT_EQ(tr_actor_get(rt, "shared", &found), TR_EINVAL);
    unsetenv("TROUPE_NAMESPACE");
    ASSERT_EQ(rc, 0);
    EXPECT_EQ(memcmp(&found, &b, sizeof b), 0);
    /* another driver of the node, in namespace "a" by its config */
    tr_runtime *rt2 = nullptr;
    tr_config *cfg = test_config_with({{"address", tr_runtime_address(rt)}, {"namespace", "a"}});
    ASSERT_EQ(tr_init(cfg, &rt2), 0) << tr_last_error();
    tr_config_destroy(cfg);
    ASSERT_EQ(tr_actor_get(rt2, "shared", &found), 0);
    EXPECT_EQ(memcmp(&found, &a, sizeof a), 0);
    tr_shutdown(rt2);
    /* refused */
    o.name = "bad\x1fname";
    EXPECT_EQ(tr_actor_create(rt, "Counter", &o, "e", 1, &dup), TR_EINVAL);
    o.name = "fine";
    o.ns = "bad\x1fns";
    EXPECT_EQ(tr_actor_create(rt, "Counter", &o, "e", 1, &dup), TR_EINVAL);
    std::string long_ns(300, 'n');
    o.ns = long_ns.c_str();
    EXPECT_EQ(tr_actor_create(rt, "Counter", &o, "e", 1, &dup), TR_EINVAL);
    EXPECT_EQ(tr_actor_get_in(rt, long_ns.c_str(), "fine", &found), TR_EINVAL);
    EXPECT_EQ(tr_actor_get_in(rt, "a", "x\x1fy", &found), TR_EINVAL);
    /* killed, its name is free in its namespace only */
    ASSERT_EQ(tr_actor_kill(rt, a, 1), 0);
    EXPECT_EQ(tr_actor_get_in(rt, "a", "shared", &found), TR_ENOTFOUND);
    EXPECT_EQ(tr_actor_get_in(rt, "b", "shared", &found), 0);
}

TEST_F(ActorTest, StaleAndInvalidHandles) {
    tr_actor_id a = make();
    tr_ref r;
    int64_t v = 1;
    ASSERT_EQ(tr_call(rt, a, "add", &v, sizeof v, &r), 0);
    ASSERT_EQ(tr_get(rt, r, 5000, nullptr, nullptr), 0);
    ASSERT_EQ(tr_ref_release(rt, r), 0);
    EXPECT_EQ(tr_get(rt, r, 0, nullptr, nullptr), TR_ESTALE);
    EXPECT_EQ(tr_ref_release(rt, r), TR_ESTALE);
    tr_ref garbage;
    memset(&garbage, 0xab, sizeof garbage);
    garbage.b[15] &= 0x7f; /* a call ref (the top bit marks object refs) */
    EXPECT_EQ(tr_get(rt, garbage, 0, nullptr, nullptr), TR_ESTALE);
    uint8_t ready;
    EXPECT_EQ(tr_wait(rt, &garbage, 1, 1, 0, &ready, nullptr), TR_ESTALE);
    EXPECT_EQ(tr_wait(rt, &r, 1, 2, 0, &ready, nullptr), TR_EINVAL);
    /* a made-up actor id */
    tr_actor_id fake;
    memset(&fake, 0x5a, sizeof fake);
    EXPECT_EQ(call_i64(rt, fake, "add", 1, &v), TR_ENOTFOUND);
    EXPECT_NE(std::string(tr_last_error()).find("no such actor"), std::string::npos);
    EXPECT_EQ(tr_call(rt, fake, "add", &v, sizeof v, &r), TR_ENOTFOUND);
    EXPECT_EQ(tr_actor_kill(rt, fake, 1), TR_ENOTFOUND);
    EXPECT_EQ(tr_actor_wait_ready(rt, fake, 100), TR_ENOTFOUND);
    /* bad arguments */
    EXPECT_EQ(tr_call(rt, a, nullptr, nullptr, 0, &r), TR_EINVAL);
    EXPECT_EQ(tr_call(rt, a, "", nullptr, 0, &r), TR_EINVAL);
    EXPECT_EQ(tr_call(rt, a, "add", nullptr, 5, &r), TR_EINVAL);
    EXPECT_EQ(tr_call(nullptr, a, "add", nullptr, 0, &r), TR_EINVAL);
    tr_actor_id id;
    EXPECT_EQ(tr_actor_create(rt, "", nullptr, nullptr, 0, &id), TR_EINVAL);
    tr_actor_options bad = TR_ACTOR_OPTIONS_INIT;
    bad.struct_size = 4;
    EXPECT_EQ(tr_actor_create(rt, "Counter", &bad, nullptr, 0, &id), TR_EINVAL);
    bad = TR_ACTOR_OPTIONS_INIT;
    bad.num_cpus = -1;
    EXPECT_EQ(tr_actor_create(rt, "Counter", &bad, nullptr, 0, &id), TR_EINVAL);
}

TEST_F(ActorTest, LargeArgumentsAndMessageLimit) {
    tr_actor_id a = make();
    std::string big(1 << 20, 'q');
    for (size_t i = 0; i < big.size(); i += 4096)
        big[i] = (char)('a' + i % 26);
    std::string out;
    ASSERT_EQ(call_str(rt, a, "echo", big, &out), 0) << tr_last_error();
    EXPECT_EQ(out, big);
    std::string huge(65u << 20, 'x'); /* over the 64 MiB default limit */
    tr_ref r;
    EXPECT_EQ(tr_call(rt, a, "echo", huge.data(), huge.size(), &r), TR_EMSGSIZE);
    EXPECT_EQ(call_str(rt, a, "echo", "", &out), 0);
    EXPECT_EQ(out, "");
}

TEST_F(ActorTest, PollingWithZeroTimeoutMakesProgress) {
    tr_actor_id a = make(); /* not up yet: the first polls also send the queued call */
    tr_ref r;
    int64_t v = 5;
    ASSERT_EQ(tr_call(rt, a, "add", &v, sizeof v, &r), 0);
    int rc, polls = 0;
    auto t0 = Clock::now();
    while ((rc = tr_get(rt, r, 0, nullptr, nullptr)) == TR_ETIMEDOUT &&
           Clock::now() - t0 < std::chrono::seconds(10))
        polls++;
    EXPECT_EQ(rc, 0) << tr_errname(rc) << " after " << polls << " polls";
    uint8_t ready = 0;
    size_t n = 0;
    ASSERT_EQ(tr_wait(rt, &r, 1, 1, 0, &ready, &n), 0);
    EXPECT_EQ(n, 1u);
    tr_ref_release(rt, r);
    ASSERT_EQ(tr_call(rt, a, "add", &v, sizeof v, &r), 0);
    t0 = Clock::now();
    do
        ASSERT_EQ(tr_wait(rt, &r, 1, 1, 0, &ready, &n), 0);
    while (n == 0 && Clock::now() - t0 < std::chrono::seconds(10));
    EXPECT_EQ(n, 1u);
    tr_ref_release(rt, r);
}

TEST_F(ActorTest, PipelinedLargeCallsArriveIntact) {
    tr_actor_id a = make();
    std::vector<std::string> in(24);
    std::vector<tr_ref> refs(in.size());
    for (size_t i = 0; i < in.size(); i++) {
        in[i].assign((512u << 10) + i * 4099, (char)('A' + i));
        ASSERT_EQ(tr_call(rt, a, "echo", in[i].data(), in[i].size(), &refs[i]), 0);
    }
    for (size_t i = 0; i < in.size(); i++) {
        const void *d;
        size_t len;
        ASSERT_EQ(tr_get(rt, refs[i], 20000, &d, &len), 0) << i << ": " << tr_last_error();
        EXPECT_EQ(len, in[i].size());
        EXPECT_TRUE(len == in[i].size() && memcmp(d, in[i].data(), len) == 0) << i;
        tr_ref_release(rt, refs[i]);
    }
}

TEST_F(ActorTest, ActorCallsActor) {
    tr_actor_id a = make(), b = make();
    std::string arg((const char *)&b, sizeof b), out;
    ASSERT_EQ(call_str(rt, a, "call_other", arg, &out), 0) << tr_last_error();
    ASSERT_EQ(out.size(), 8u);
    EXPECT_EQ(*(const int64_t *)out.data(), 5);
    int64_t v;
    ASSERT_EQ(call_i64(rt, b, "get", 0, &v), 0);
    EXPECT_EQ(v, 5);
}

TEST_F(ActorTest, ManyThreadsShareTheRuntime) {
    std::vector<tr_actor_id> actors;
    for (int i = 0; i < 3; i++)
        actors.push_back(make());
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < 500; i++) {
                int64_t v = 0;
                std::string out, in = std::to_string(t * 100000 + i);
                if (call_str(rt, actors[(t + i) % 3], "echo", in, &out) || out != in) failures++;
                if (i % 50 == 0 && call_i64(rt, actors[t % 3], "add", 1, &v)) failures++;
            }
        });
    }
    for (auto &th : threads)
        th.join();
    EXPECT_EQ(failures.load(), 0);
    int64_t total = 0;
    for (auto &a : actors) {
        int64_t v;
        ASSERT_EQ(call_i64(rt, a, "get", 0, &v), 0);
        total += v;
    }
    EXPECT_EQ(total, 4 * 10);
}

TEST_F(ActorTest, CallsBeforeTheActorIsUpAreQueuedInOrder) {
    tr_actor_id a = make();
    std::vector<tr_ref> refs(100);
    for (int i = 0; i < 100; i++) {
        int64_t s = i + 1;
        ASSERT_EQ(tr_call(rt, a, "seq", &s, sizeof s, &refs[i]), 0);
    }
    for (int i = 0; i < 100; i++) {
        const void *d;
        size_t len;
        ASSERT_EQ(tr_get(rt, refs[i], 10000, &d, &len), 0) << tr_last_error();
        EXPECT_EQ(*(const int64_t *)d, i + 1);
        tr_ref_release(rt, refs[i]);
    }
}

TEST_F(ActorTest, KeyValueStore) {
    ASSERT_EQ(tr_kv_put(rt, "alpha", "one", 3), 0);
    void *v = nullptr;
    size_t n = 0;
    ASSERT_EQ(tr_kv_get(rt, "alpha", &v, &n), 0);
    EXPECT_EQ(std::string((char *)v, n), "one");
    tr_free(v);
    ASSERT_EQ(tr_kv_put(rt, "alpha", "", 0), 0);
    ASSERT_EQ(tr_kv_get(rt, "alpha", &v, &n), 0);
    EXPECT_EQ(n, 0u);
    tr_free(v);
    EXPECT_EQ(tr_kv_del(rt, "alpha"), 0);
    EXPECT_EQ(tr_kv_get(rt, "alpha", &v, &n), TR_ENOTFOUND);
    EXPECT_EQ(tr_kv_del(rt, "alpha"), TR_ENOTFOUND);
    EXPECT_EQ(tr_kv_put(rt, "", "x", 1), TR_EINVAL);
    std::string long_key(2000, 'k');
    EXPECT_EQ(tr_kv_put(rt, long_key.c_str(), "x", 1), TR_EINVAL);
}

TEST(Runtime, ShutdownLeavesNothingBehind) {
    tr_runtime *rt;
    ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    std::string addr = tr_runtime_address(rt);
    std::string session = addr.substr(0, addr.rfind('/'));
    std::vector<int64_t> pids;
    for (int i = 0; i < 4; i++) {
        tr_actor_id a;
        ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "p", 1, &a), 0);
        int64_t pid;
        ASSERT_EQ(call_i64(rt, a, "pid", 0, &pid), 0);
        pids.push_back(pid);
    }
    char *json = nullptr;
    ASSERT_EQ(tr_node_status(rt, &json), 0);
    std::string status(json);
    tr_free(json);
    EXPECT_NE(status.find("\"workers_live\":4"), std::string::npos) << status;
    struct stat st;
    ASSERT_EQ(stat(session.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    ASSERT_EQ(stat(addr.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    tr_shutdown(rt);
    EXPECT_TRUE(session_ended(session)) << session << " holds more than its event log";
    for (auto pid : pids)
        EXPECT_FALSE(pid_alive((int)pid)) << "worker " << pid << " survived";
}

TEST(Runtime, ResourcesPlaceQueueAndRefuse) {
    tr_config *cfg =
        test_config_with({{"resources", "slot=2"}, {"num_cpus", "4"}, {"num_gpus", "0"}});
    tr_runtime *rt;
    ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
    tr_resource slot = {"slot", 1};
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.resources = &slot;
    o.n_resources = 1;
    tr_actor_id a, b, c, d;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &o, "a", 1, &a), 0);
    ASSERT_EQ(tr_actor_create(rt, "Counter", &o, "b", 1, &b), 0);
    ASSERT_EQ(tr_actor_create(rt, "Counter", &o, "c", 1, &c), 0);
    EXPECT_EQ(tr_actor_wait_ready(rt, a, 10000), 0);
    EXPECT_EQ(tr_actor_wait_ready(rt, b, 10000), 0);
    EXPECT_EQ(tr_actor_wait_ready(rt, c, 300), TR_ETIMEDOUT) << "c should wait for a slot";
    /* a call to c is queued, and runs once c gets its slot */
    tr_ref r;
    int64_t v = 9;
    ASSERT_EQ(tr_call(rt, c, "add", &v, sizeof v, &r), 0);
    EXPECT_EQ(tr_get(rt, r, 100, nullptr, nullptr), TR_ETIMEDOUT);
    ASSERT_EQ(tr_actor_kill(rt, a, 1), 0);
    EXPECT_EQ(tr_actor_wait_ready(rt, c, 10000), 0) << tr_last_error();
    const void *data;
    size_t len;
    ASSERT_EQ(tr_get(rt, r, 10000, &data, &len), 0);
    EXPECT_EQ(*(const int64_t *)data, 9);
    tr_ref_release(rt, r);
    /* more than the node has: refused at once */
    slot.quantity = 5;
    EXPECT_EQ(tr_actor_create(rt, "Counter", &o, "d", 1, &d), TR_ERESOURCES);
    EXPECT_NE(std::string(tr_last_error()).find("slot"), std::string::npos) << tr_last_error();
    tr_actor_options g = TR_ACTOR_OPTIONS_INIT;
    g.num_gpus = 1;
    EXPECT_EQ(tr_actor_create(rt, "Counter", &g, "g", 1, &d), TR_ERESOURCES);
    g = TR_ACTOR_OPTIONS_INIT;
    g.num_cpus = 4;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &g, "cpu", 3, &d), 0);
    EXPECT_EQ(tr_actor_wait_ready(rt, d, 10000), 0);
    g.num_cpus = 0.5;
    tr_actor_id e;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &g, "cpu2", 4, &e), 0);
    EXPECT_EQ(tr_actor_wait_ready(rt, e, 300), TR_ETIMEDOUT);
    tr_shutdown(rt);
    tr_config_destroy(cfg);
}

TEST(Runtime, ConfigErrors) {
    tr_config *cfg = nullptr;
    ASSERT_EQ(tr_config_create(&cfg), 0);
    EXPECT_EQ(tr_config_set(cfg, "nope", "1"), TR_EINVAL);
    EXPECT_EQ(tr_config_set(cfg, "num_cpus", "many"), TR_EINVAL);
    EXPECT_EQ(tr_config_set(cfg, "resources", "slot"), TR_EINVAL);
    EXPECT_EQ(tr_config_set(cfg, "address", "/nonexistent/dir/node.sock"), 0);
    tr_runtime *rt = (tr_runtime *)0x1;
    EXPECT_EQ(tr_init(cfg, &rt), TR_ECONNECT);
    EXPECT_EQ(rt, nullptr);
    EXPECT_NE(std::string(tr_last_error()).find("/nonexistent/dir/node.sock"), std::string::npos);
    EXPECT_EQ(tr_init(cfg, nullptr), TR_EINVAL);
    EXPECT_EQ(tr_init_abi(cfg, &rt, TR_ABI_VERSION + 1), TR_EVERSION);
    EXPECT_EQ(tr_worker_main(cfg), TR_ESTATE);
    tr_config_destroy(cfg);
    tr_shutdown(nullptr);
    tr_config_destroy(nullptr);
}

TEST(Runtime, ResultOverTheMessageLimitIsAnErrorNotABrokenActor) {
    tr_config *cfg = test_config_with({{"max_message_bytes", "65536"}});
    tr_runtime *rt;
    ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "m", 1, &a), 0);
    int64_t v;
    std::string out;
    EXPECT_EQ(call_i64(rt, a, "big", 100000, &v), TR_EMSGSIZE);
    EXPECT_NE(std::string(tr_last_error()).find("exceeds the message limit"), std::string::npos)
        << tr_last_error();
    ASSERT_EQ(call_i64(rt, a, "big", 8, &v), 0);
    EXPECT_EQ(call_i64(rt, a, "add", 2, &v), 0);
    EXPECT_EQ(v, 2);
    std::string arg(70000, 'x');
    tr_ref r;
    EXPECT_EQ(tr_call(rt, a, "echo", arg.data(), arg.size(), &r), TR_EMSGSIZE);
    tr_shutdown(rt);
    tr_config_destroy(cfg);
}

TEST(Runtime, WorkerStartTimeout) {
    tr_config *cfg = test_config_with({{"worker_start_timeout_ms", "300"}});
    tr_runtime *rt;
    ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "slow-ctor", 9, &a), 0);
    auto t0 = Clock::now();
    EXPECT_EQ(tr_actor_wait_ready(rt, a, 10000), TR_EACTOR_DIED);
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
    EXPECT_NE(std::string(tr_last_error()).find("start timeout"), std::string::npos)
        << tr_last_error();
    tr_shutdown(rt);
    tr_config_destroy(cfg);
}

TEST(Runtime, NodeDeathIsReportedNotHung) {
    tr_runtime *rt;
    ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "n", 1, &a), 0);
    int64_t v, worker = 0;
    ASSERT_EQ(call_i64(rt, a, "pid", 0, &worker), 0);
    int64_t node = status_pid_of(rt);
    ASSERT_GT(node, 0);
    ASSERT_EQ(kill((pid_t)node, SIGKILL), 0);
    /* the worker follows its node (parent-death signal) */
    auto t0 = Clock::now();
    while (pid_alive((int)worker) && Clock::now() - t0 < std::chrono::seconds(10))
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_FALSE(pid_alive((int)worker)) << "the worker outlived its node";
    /* then calls fail at once, long before their timeout: they do not hang */
    EXPECT_EQ(call_i64(rt, a, "add", 1, &v, 60000), TR_EACTOR_DIED) << tr_last_error();
    tr_actor_id b;
    EXPECT_EQ(tr_actor_create(rt, "Counter", nullptr, "m", 1, &b), TR_ECONNECT);
    EXPECT_EQ(tr_kv_put(rt, "k", "v", 1), TR_ECONNECT);
    std::string addr = tr_runtime_address(rt);
    std::string session = addr.substr(0, addr.rfind('/'));
    tr_shutdown(rt);
    /* the killed node could not clean up; the next node to start sweeps its directory */
    struct stat sb;
    ASSERT_EQ(stat(session.c_str(), &sb), 0);
    /* a lock file a second old or more is not a node's that is just starting */
    std::string lock = session + "/node.lock";
    struct timespec old_times[2] = {{time(nullptr) - 10, 0}, {time(nullptr) - 10, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, lock.c_str(), old_times, 0), 0);
    ASSERT_EQ(tr_init(test_config(), &rt), 0);
    EXPECT_TRUE(session_ended(session)) << session << " was not swept";
    tr_shutdown(rt);
}

/* The node and the workers start with only the descriptors troupe hands them: a pipe the
 * program left inheritable is not held open by them. */
TEST(Runtime, SpawnedProcessesInheritNoDescriptorsOfTheProgram) {
    int p[2];
    ASSERT_EQ(pipe(p), 0); /* inheritable on purpose: no O_CLOEXEC */
    tr_runtime *rt;
    ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "fd", 2, &a), 0);
    int64_t worker = 0;
    ASSERT_EQ(call_i64(rt, a, "pid", 0, &worker), 0) << tr_last_error();
    struct stat st;
    ASSERT_EQ(fstat(p[0], &st), 0);
    std::string ours = "pipe:[" + std::to_string(st.st_ino) + "]";
    close(p[1]);
    struct pollfd pfd = {p[0], POLLIN, 0};
    ASSERT_EQ(poll(&pfd, 1, 3000), 1) << "the writing end lives on in the node or a worker";
    char c;
    EXPECT_EQ(read(p[0], &c, 1), 0); /* EOF: nobody else holds the writing end */
    /* and neither process holds either end */
    for (int64_t pid : {status_pid_of(rt), worker}) {
        std::string dir = "/proc/" + std::to_string(pid) + "/fd";
        DIR *d = opendir(dir.c_str());
        ASSERT_NE(d, nullptr) << dir;
        while (struct dirent *e = readdir(d)) {
            char target[512] = "";
            std::string link = dir + "/" + e->d_name;
            ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
            if (n > 0) target[n] = 0;
            EXPECT_NE(ours, target) << "pid " << pid << " holds " << link;
        }
        closedir(d);
    }
    close(p[0]);
    tr_shutdown(rt);
}

/* The kernel's view of where a process may run: its Cpus_allowed_list ("0-1", "1"). */
std::string allowed_cpus(int64_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("Cpus_allowed_list:", 0) == 0)
            return line.substr(line.find_last_of("\t ") + 1);
    return "?";
}

/* Actors asking for whole CPUs are bound to distinct cores of the node's, as mpirun binds
 * ranks; once there are more of them than cores, the rest float; a core comes back when
 * its actor goes. */
TEST(Binding, WholeCpusGetDistinctCoresAndTheRestFloat) {
    cpu_set_t mine;
    ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
    std::vector<int> cores;
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &mine)) cores.push_back(i);
    const int n_cores = (int)cores.size();
    ASSERT_GE(n_cores, 1);
    tr_config *cfg = test_config_with({{"num_cpus", "1024"}}); /* CPU resources never wait */
    tr_runtime *rt;
    ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
    tr_config_destroy(cfg);
    tr_actor_options one = TR_ACTOR_OPTIONS_INIT;
    one.num_cpus = 1;
    std::vector<tr_actor_id> bound;
    std::vector<int64_t> pids;
    std::set<std::string> seen;
    for (int i = 0; i <= n_cores; i++) { /* one more than there are cores */
        tr_actor_id a;
        ASSERT_EQ(tr_actor_create(rt, "Counter", &one, "b", 1, &a), 0);
        int64_t pid = 0;
        ASSERT_EQ(call_i64(rt, a, "pid", 0, &pid), 0) << tr_last_error();
        tr_actor_details d = TR_ACTOR_DETAILS_INIT;
        ASSERT_EQ(tr_actor_info(rt, a, &d), 0);
        if (i < n_cores) {
            EXPECT_STREQ(d.cpus, std::to_string(cores[i]).c_str()) << "actor " << i;
            EXPECT_EQ(allowed_cpus(pid), d.cpus) << "the worker is not pinned where it says";
            EXPECT_TRUE(seen.insert(d.cpus).second) << "two actors on core " << d.cpus;
        } else {
            EXPECT_STREQ(d.cpus, "") << "more actors than cores: this one floats";
            EXPECT_EQ(allowed_cpus(pid), allowed_cpus(getpid()));
        }
        bound.push_back(a);
        pids.push_back(pid);
    }
    /* fractional and zero CPUs float */
    tr_actor_options half = TR_ACTOR_OPTIONS_INIT;
    half.num_cpus = 0.5;
    tr_actor_id h;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &half, "h", 1, &h), 0);
    ASSERT_EQ(tr_actor_wait_ready(rt, h, 10000), 0);
    tr_actor_details d = TR_ACTOR_DETAILS_INIT;
    ASSERT_EQ(tr_actor_info(rt, h, &d), 0);
    EXPECT_STREQ(d.cpus, "");
    /* the status JSON says it too */
    char *json = nullptr;
    ASSERT_EQ(tr_node_status(rt, &json), 0);
    std::string want = "\"cpus\":\"" + std::to_string(cores[0]) + "\"";
    EXPECT_NE(std::string(json).find(want), std::string::npos) << json;
    tr_free(json);
    /* the first actor goes: once reaped, its core is the next one's */
    int64_t live = status_field(rt, "workers_live");
    ASSERT_EQ(tr_actor_kill(rt, bound[0], 1), 0);
    for (int i = 0; i < 1000 && status_field(rt, "workers_live") != live - 1; i++)
        usleep(5000);
    ASSERT_EQ(status_field(rt, "workers_live"), live - 1);
    tr_actor_id again;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &one, "a", 1, &again), 0);
    ASSERT_EQ(tr_actor_wait_ready(rt, again, 10000), 0);
    ASSERT_EQ(tr_actor_info(rt, again, &d), 0);
    EXPECT_STREQ(d.cpus, std::to_string(cores[0]).c_str());
    tr_shutdown(rt);
}

TEST(Binding, NoneLeavesEveryActorFloating) {
    tr_config *cfg = test_config_with({{"cpu_binding", "none"}});
    tr_runtime *rt;
    ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
    tr_config_destroy(cfg);
    tr_actor_options one = TR_ACTOR_OPTIONS_INIT;
    one.num_cpus = 1;
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &one, "n", 1, &a), 0);
    int64_t pid = 0;
    ASSERT_EQ(call_i64(rt, a, "pid", 0, &pid), 0);
    tr_actor_details d = TR_ACTOR_DETAILS_INIT;
    ASSERT_EQ(tr_actor_info(rt, a, &d), 0);
    EXPECT_STREQ(d.cpus, "");
    EXPECT_EQ(allowed_cpus(pid), allowed_cpus(getpid()));
    tr_shutdown(rt);
}

/* The time a process has run on a CPU, in ns (its threads' schedstat, summed). */
static int64_t cpu_ns_of(int pid) {
    int64_t total = 0;
    std::string dir = "/proc/" + std::to_string(pid) + "/task";
    DIR *d = opendir(dir.c_str());
    if (!d) return -1;
    while (struct dirent *e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        FILE *f = fopen((dir + "/" + e->d_name + "/schedstat").c_str(), "r");
        long long ns = 0;
        if (f && fscanf(f, "%lld", &ns) == 1) total += ns;
        if (f) fclose(f);
    }
    closedir(d);
    return total;
}

/* Callers and workers poll before they sleep ("call_spin_us", default 30) or never (0):
 * calls give the same results either way, a bad value is refused, and neither a caller
 * nor an actor burns CPU once the calls stop (<= 5 ms/s each: the poll follows events
 * only). */
TEST(Spin, CallsAreTheSameWithOrWithoutPollingAndIdleCostsNothing) {
    tr_config *bad = test_config();
    EXPECT_EQ(tr_config_set(bad, "call_spin_us", "-1"), TR_EINVAL);
    EXPECT_EQ(tr_config_set(bad, "call_spin_us", "10001"), TR_EINVAL);
    EXPECT_EQ(tr_config_set(bad, "call_spin_us", "1.5"), TR_EINVAL);
    EXPECT_EQ(tr_config_set(bad, "call_spin_us", "ten"), TR_EINVAL);
    tr_config_destroy(bad);
    for (const char *spin : {"0", "30", "1000"}) {
        SCOPED_TRACE(spin);
        tr_config *cfg = test_config_with({{"call_spin_us", spin}});
        tr_runtime *rt;
        ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
        tr_config_destroy(cfg);
        tr_actor_id a;
        ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "s", 1, &a), 0) << tr_last_error();
        int64_t out = 0, sum = 0;
        for (int i = 1; i <= 2000; i++) {
            ASSERT_EQ(call_i64(rt, a, "add", i, &out), 0) << tr_last_error();
            sum += i;
            ASSERT_EQ(out, sum);
        }
        int64_t pid = 0;
        ASSERT_EQ(call_i64(rt, a, "pid", 0, &pid), 0);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        int64_t w0 = cpu_ns_of((int)pid), d0 = cpu_ns_of(getpid());
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        int64_t w1 = cpu_ns_of((int)pid), d1 = cpu_ns_of(getpid());
        ASSERT_GE(w0, 0);
        EXPECT_LE(w1 - w0, 2500000) << "the idle actor ran " << (w1 - w0) << " ns in 0.5 s";
        EXPECT_LE(d1 - d0, 2500000) << "the idle caller ran " << (d1 - d0) << " ns in 0.5 s";
        tr_shutdown(rt);
    }
}

TEST(Runtime, DriverDeathCleansUp) {
    char path[] = "/tmp/troupe-orphan-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    int st = run_self(std::string("ORPHAN_PIDS=") + path); /* test_main: the orphan driver */
    ASSERT_TRUE(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "child status " << st;
    std::ifstream f(path);
    std::string addr;
    std::vector<int64_t> pids;
    f >> addr;
    for (int64_t p; f >> p;)
        pids.push_back(p);
    unlink(path);
    ASSERT_EQ(pids.size(), 4u) << "node + 3 workers";
    std::string session = addr.substr(0, addr.rfind('/'));
    /* each process by its pid and start time: a pid freed may soon name another process
     * (the sandbox's pid namespace hands out few numbers) */
    auto started = [](int64_t p) -> std::string {
        std::ifstream st("/proc/" + std::to_string(p) + "/stat");
        std::string all((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
        size_t at = all.rfind(')');
        if (at == std::string::npos) return "";
        std::istringstream rest(all.substr(at + 2));
        std::string field;
        for (int i = 3; i <= 22 && rest >> field; i++) { /* field 22: starttime */
        }
        return field;
    };
    std::vector<std::string> starts;
    for (auto p : pids)
        starts.push_back(started(p));
    auto alive = [&](size_t i) {
        return !starts[i].empty() && pid_alive((int)pids[i]) && started(pids[i]) == starts[i];
    };
    auto t0 = Clock::now();
    auto all_gone = [&] {
        for (size_t i = 0; i < pids.size(); i++)
            if (alive(i)) return false;
        return session_ended(session);
    };
    while (!all_gone() && Clock::now() - t0 < std::chrono::seconds(5))
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    /* each again, within the same 5 s: a process on its way out (its main thread gone
     * before the others, as a sanitizer's can be) may read as gone once, then not */
    for (size_t i = 0; i < pids.size(); i++) {
        while (alive(i) && Clock::now() - t0 < std::chrono::seconds(5))
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        EXPECT_FALSE(alive(i)) << "pid " << pids[i] << " outlived its driver";
    }
    EXPECT_TRUE(session_ended(session)) << session << " left behind";
}

/* A detached actor outlives the driver that made it, found by name from another one; an
 * ordinary one goes with its driver. */
TEST_F(ActorTest, DetachedActorOutlivesItsCreator) {
    int st = run_self(std::string("DETACH_AND_LEAVE=") + tr_runtime_address(rt));
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
    tr_actor_id a;
    ASSERT_EQ(tr_actor_get(rt, "stays-detached", &a), 0) << tr_last_error();
    int64_t total = 0;
    ASSERT_EQ(call_i64(rt, a, "add", 1, &total), 0);
    EXPECT_EQ(total, 8) << "the same actor, its state kept";
    tr_actor_id b;
    bool gone = eventually(5000, [&] {
        if (tr_actor_get(rt, "goes-with-me", &b) != 0) return true;
        tr_actor_details d;
        tr_actor_details_init(&d);
        return tr_actor_info(rt, b, &d) == 0 && d.state == TR_ACTOR_DEAD;
    });
    EXPECT_TRUE(gone) << "an ordinary actor stays after its creator left";
    EXPECT_EQ(tr_actor_kill(rt, a, 1), 0);
}

} // namespace
