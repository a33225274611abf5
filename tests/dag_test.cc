/* tests/dag_test.cc - compiled graphs over real actor processes: chains, several inputs
 * and outputs, pipelined executions in order, method errors, compile errors naming the
 * node, several graphs and classic calls on one actor (never at once), an actor killed
 * under a graph, a full pipeline, and teardown leaving nothing. */
#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_actors.h"
#include "troupe/dag.h"

namespace {

class Dag : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    }
    void TearDown() override {
        tr_shutdown(rt);
    }
    tr_actor_id actor() {
        tr_actor_id a;
        EXPECT_EQ(tr_actor_create(rt, "Counter", nullptr, "c", 1, &a), 0) << tr_last_error();
        EXPECT_EQ(tr_actor_wait_ready(rt, a, 10000), 0) << tr_last_error();
        return a;
    }
    /* executes x and reads output i as an int64 (-1 and the error on failure) */
    int64_t run(tr_dag *g, int64_t x, size_t outputs = 1, std::vector<int64_t> *all = nullptr) {
        uint64_t e;
        if (tr_dag_execute(g, &x, sizeof x, &e)) return -1;
        int64_t first = -1;
        for (size_t i = 0; i < outputs; i++) {
            const void *d;
            size_t n;
            if (tr_dag_get(g, e, i, 10000, &d, &n) || n != 8) {
                ADD_FAILURE() << "output " << i << ": " << tr_last_error();
                break;
            }
            int64_t v;
            memcpy(&v, d, 8);
            if (i == 0) first = v;
            if (all) all->push_back(v);
        }
        EXPECT_EQ(tr_dag_release(g, e), 0);
        return first;
    }
    /* the store holds as many objects as `before` said within 5 s (what a test made in it
     * has gone) */
    void expect_store_back_to(const tr_store_stats &before) {
        tr_store_stats after = TR_STORE_STATS_INIT;
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        do {
            ASSERT_EQ(tr_object_stats(rt, &after), 0);
            if (after.n_objects == before.n_objects) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        } while (std::chrono::steady_clock::now() < until);
        EXPECT_EQ(after.n_objects, before.n_objects) << "objects left in the store";
    }
    /* the node holds no group (a graph's segment is one) within 5 s */
    void expect_no_segments() {
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (status_field(rt, "groups") != 0 && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        EXPECT_EQ(status_field(rt, "groups"), 0);
    }
    tr_runtime *rt = nullptr;
};

/* Threads of an actor's worker process (a graph's loop is one while the graph lives). */
int threads_of(tr_runtime *rt, tr_actor_id a) {
    tr_actor_details d = TR_ACTOR_DETAILS_INIT;
    if (tr_actor_info(rt, a, &d) || d.pid <= 0) return -1;
    std::string path = "/proc/" + std::to_string(d.pid) + "/task";
    DIR *dir = opendir(path.c_str());
    int n = 0;
    for (struct dirent *e; dir && (e = readdir(dir));)
        n += e->d_name[0] != '.';
    if (dir) closedir(dir);
    return n;
}

TEST_F(Dag, AChainOfThreeActors) {
    tr_actor_id a = actor(), b = actor(), c = actor();
    int threads_before = threads_of(rt, a);
    tr_dag *g;
    tr_dag_node in, na, nb, nc;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, a, "plus1", &in, 1, &na), 0);
    ASSERT_EQ(tr_dag_bind(g, b, "plus1", &na, 1, &nb), 0);
    ASSERT_EQ(tr_dag_bind(g, c, "plus1", &nb, 1, &nc), 0);
    ASSERT_EQ(tr_dag_output(g, &nc, 1), 0);
    ASSERT_EQ(tr_dag_compile(g, nullptr), 0) << tr_last_error();
    for (int64_t x = 0; x < 200; x++)
        ASSERT_EQ(run(g, x), x + 3);
    EXPECT_EQ(tr_dag_bind(g, a, "plus1", &in, 1, &na), TR_ESTATE);
    /* (a sanitizer may start a helper thread of its own with the first new thread) */
    int threads_during = threads_of(rt, a);
    EXPECT_GT(threads_during, threads_before) << "the graph's loop thread";
    EXPECT_EQ(tr_dag_destroy(g), 0) << tr_last_error();
    expect_no_segments();
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (threads_of(rt, a) != threads_during - 1 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(threads_of(rt, a), threads_during - 1) << "the loop thread is gone";
}

/* Two nodes read the input, a third takes both (its args and its call ref), and the
 * graph has three outputs; one actor runs two of the nodes. */
TEST_F(Dag, SeveralInputsAndOutputs) {
    tr_actor_id a = actor(), b = actor();
    tr_dag *g;
    tr_dag_node in, n1, n2, n3;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, a, "plus1", &in, 1, &n1), 0);
    ASSERT_EQ(tr_dag_bind(g, b, "plus1", &in, 1, &n2), 0);
    tr_dag_node both[] = {n1, n2};
    ASSERT_EQ(tr_dag_bind(g, a, "plus1", both, 2, &n3), 0);
    tr_dag_node outs[] = {n3, n1, n2};
    ASSERT_EQ(tr_dag_output(g, outs, 3), 0);
    ASSERT_EQ(tr_dag_compile(g, nullptr), 0) << tr_last_error();
    for (int64_t x = 0; x < 50; x++) {
        std::vector<int64_t> got;
        run(g, x, 3, &got);
        ASSERT_EQ(got, (std::vector<int64_t>{2 * x + 3, x + 1, x + 1}));
    }
    char *dot = nullptr;
    ASSERT_EQ(tr_dag_to_dot(g, &dot), 0);
    std::string d(dot);
    tr_free(dot);
    EXPECT_EQ(d.find("digraph troupe_dag {\n  rankdir=LR;\n  n0 [label=\"input\""), 0u) << d;
    EXPECT_EQ(d.substr(d.size() - 2), "}\n");
    EXPECT_NE(d.find("n1 -> n3"), std::string::npos) << d;
    EXPECT_NE(d.find("n2 -> n3"), std::string::npos) << d;
    EXPECT_NE(d.find("plus1"), std::string::npos) << d;
    EXPECT_NE(d.find("shm 8 x 65536 B"), std::string::npos) << d;
    EXPECT_EQ(tr_dag_destroy(g), 0);
}

/* max_inflight executions submitted before any is read: all come back, in order. */
TEST_F(Dag, PipelinedExecutionsComeBackInOrder) {
    tr_actor_id a = actor(), b = actor();
    tr_dag *g;
    tr_dag_node in, na, nb;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, a, "seq", &in, 1, &na), 0); /* fails unless in order */
    ASSERT_EQ(tr_dag_bind(g, b, "plus1", &na, 1, &nb), 0);
    ASSERT_EQ(tr_dag_output(g, &nb, 1), 0);
    tr_dag_options o = TR_DAG_OPTIONS_INIT;
    o.max_inflight = 4;
    ASSERT_EQ(tr_dag_compile(g, &o), 0) << tr_last_error();
    int64_t next = 1;
    for (int round = 0; round < 100; round++) {
        uint64_t e[4];
        for (int k = 0; k < 4; k++, next++)
            ASSERT_EQ(tr_dag_execute(g, &next, 8, &e[k]), 0) << tr_last_error();
        for (int k = 0; k < 4; k++) {
            const void *d;
            size_t n;
            ASSERT_EQ(tr_dag_get(g, e[k], 0, 10000, &d, &n), 0) << tr_last_error();
            int64_t v;
            memcpy(&v, d, 8);
            ASSERT_EQ(v, next - 4 + k + 1);
            ASSERT_EQ(tr_dag_release(g, e[k]), 0);
        }
    }
    const void *d;
    size_t n;
    EXPECT_EQ(tr_dag_get(g, 0, 0, 0, &d, &n), TR_EINVAL) << "released";
    EXPECT_EQ(tr_dag_get(g, 10000, 0, 0, &d, &n), TR_EINVAL) << "not submitted";
    EXPECT_EQ(tr_dag_destroy(g), 0);
}

/* A method error reaches the outputs as TR_ETASK with its message; the step after it is
 * skipped; the next execution works. */
TEST_F(Dag, AMethodErrorReachesTheOutputAndTheGraphGoesOn) {
    tr_actor_id a = actor(), b = actor();
    tr_dag *g;
    tr_dag_node in, na, nb;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, a, "plus1", &in, 1, &na), 0);
    ASSERT_EQ(tr_dag_bind(g, b, "plus1", &na, 1, &nb), 0);
    ASSERT_EQ(tr_dag_output(g, &nb, 1), 0);
    ASSERT_EQ(tr_dag_compile(g, nullptr), 0) << tr_last_error();
    for (int i = 0; i < 3; i++) {
        uint64_t e;
        ASSERT_EQ(tr_dag_execute(g, "abc", 3, &e), 0); /* plus1 wants 8 bytes */
        const void *d;
        size_t n;
        EXPECT_EQ(tr_dag_get(g, e, 0, 10000, &d, &n), TR_ETASK);
        EXPECT_NE(std::string(tr_last_error()).find("plus1 wants 8 bytes, got 3"),
                  std::string::npos)
            << tr_last_error();
        EXPECT_EQ(tr_dag_release(g, e), 0);
        EXPECT_EQ(run(g, 10), 12);
    }
    EXPECT_EQ(tr_dag_destroy(g), 0);
}

TEST_F(Dag, CompileRefusesWhatCannotRunNamingTheNode) {
    tr_actor_id a = actor(), dead = actor();
    ASSERT_EQ(tr_actor_kill(rt, dead, 1), 0);
    struct Case {
        const char *what;
        int code;
        const char *says;
    } cases[] = {
        {"no outputs", TR_EINVAL, "no outputs"},
        {"dangling", TR_EINVAL, "node 2 (actor"},
        {"no method", TR_ENOMETHOD, "no method 'nope'"},
        {"dead actor", TR_EACTOR_DIED, "not alive"},
    };
    for (auto &k : cases) {
        tr_dag *g;
        tr_dag_node in, n1, n2;
        ASSERT_EQ(tr_dag_create(rt, &g), 0);
        ASSERT_EQ(tr_dag_input(g, &in), 0);
        std::string what = k.what;
        tr_actor_id who = what == "dead actor" ? dead : a;
        ASSERT_EQ(tr_dag_bind(g, who, what == "no method" ? "nope" : "plus1", &in, 1, &n1), 0);
        ASSERT_EQ(tr_dag_bind(g, a, "plus1", &in, 1, &n2), 0);
        if (what != "no outputs") {
            ASSERT_EQ(tr_dag_output(g, &n1, 1), 0);
        }
        if (what != "dangling" && what != "no outputs") {
            tr_dag_node both[] = {n1, n2};
            ASSERT_EQ(tr_dag_output(g, both, 2), 0);
        }
        EXPECT_EQ(tr_dag_compile(g, nullptr), k.code) << what << ": " << tr_last_error();
        EXPECT_NE(std::string(tr_last_error()).find(k.says), std::string::npos)
            << what << ": " << tr_last_error();
        EXPECT_EQ(tr_dag_destroy(g), 0);
    }
    tr_dag *g;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    tr_dag_node bad = 5, out, in0, n1;
    EXPECT_EQ(tr_dag_bind(g, a, "plus1", &bad, 1, &out), TR_EINVAL);
    /* a cycle: a node that would read itself, or a node made after it */
    ASSERT_EQ(tr_dag_input(g, &in0), 0);
    ASSERT_EQ(tr_dag_bind(g, a, "plus1", &in0, 1, &n1), 0);
    tr_dag_node itself = n1 + 1, loop[] = {n1, n1 + 1};
    EXPECT_EQ(tr_dag_bind(g, a, "plus1", &itself, 1, &out), TR_EINVAL);
    EXPECT_NE(std::string(tr_last_error()).find("no graph has a cycle"), std::string::npos);
    EXPECT_EQ(tr_dag_bind(g, a, "plus1", loop, 2, &out), TR_EINVAL);
    EXPECT_EQ(tr_dag_output(g, &bad, 1), TR_EINVAL);
    uint64_t e;
    EXPECT_EQ(tr_dag_execute(g, "x", 1, &e), TR_ESTATE);
    EXPECT_EQ(tr_dag_destroy(g), 0);
    expect_no_segments();
}

/* Two graphs over one actor and classic calls beside them, all on its "excl" method,
 * which fails if another method of the actor runs at the same time. */
TEST_F(Dag, SeveralGraphsAndClassicCallsShareAnActorOneMethodAtATime) {
    tr_actor_id a = actor(), b = actor();
    tr_dag *g[2];
    for (auto &gr : g) {
        tr_dag_node in, na, nb;
        ASSERT_EQ(tr_dag_create(rt, &gr), 0);
        ASSERT_EQ(tr_dag_input(gr, &in), 0);
        ASSERT_EQ(tr_dag_bind(gr, a, "excl", &in, 1, &na), 0);
        ASSERT_EQ(tr_dag_bind(gr, b, "excl", &na, 1, &nb), 0);
        ASSERT_EQ(tr_dag_output(gr, &nb, 1), 0);
        ASSERT_EQ(tr_dag_compile(gr, nullptr), 0) << tr_last_error();
    }
    std::atomic<int> classic_bad{0};
    std::thread classic([&] {
        for (int i = 0; i < 100; i++) {
            tr_ref r;
            int64_t x = i;
            if (tr_call(rt, a, "excl", &x, 8, &r) || tr_get(rt, r, 10000, nullptr, nullptr))
                classic_bad++;
            tr_ref_release(rt, r);
        }
    });
    std::vector<std::thread> ts;
    std::atomic<int> graph_bad{0};
    for (auto *gr : g)
        ts.emplace_back([&, gr] {
            for (int64_t x = 0; x < 200; x++) {
                uint64_t e;
                const void *d;
                size_t n;
                if (tr_dag_execute(gr, &x, 8, &e) || tr_dag_get(gr, e, 0, 10000, &d, &n) ||
                    n != 8 || memcmp(d, &x, 8))
                    graph_bad++;
                tr_dag_release(gr, e);
            }
        });
    for (auto &t : ts)
        t.join();
    classic.join();
    EXPECT_EQ(graph_bad.load(), 0) << tr_last_error();
    EXPECT_EQ(classic_bad.load(), 0);
    for (auto *gr : g)
        EXPECT_EQ(tr_dag_destroy(gr), 0);
    expect_no_segments();
}

/* A graph pumped without pause (8 in flight: its loop runs step after step, keeping the
 * actor's method lock between them) and classic calls to the same actor: each call gets
 * in within a few steps (the loop lets the lock go to a waiting call), the methods never
 * overlap ("excl" fails if they do), and every execution comes back right. */
TEST_F(Dag, ClassicCallsGetInBetweenTheStepsOfAPipelinedGraph) {
    tr_actor_id a = actor();
    tr_dag *g;
    tr_dag_node in, na;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, a, "excl", &in, 1, &na), 0);
    ASSERT_EQ(tr_dag_output(g, &na, 1), 0);
    ASSERT_EQ(tr_dag_compile(g, nullptr), 0) << tr_last_error();
    std::atomic<int> stop{0}, graph_bad{0};
    std::atomic<int64_t> execs{0};
    std::thread pump([&] {
        uint64_t pending[8];
        int64_t sent[8];
        int head = 0, tail = 0;
        for (int64_t x = 0; !stop.load() || head < tail;) {
            if (!stop.load() && tail - head < 8) {
                if (tr_dag_execute(g, &x, 8, &pending[tail % 8])) {
                    graph_bad++;
                    return;
                }
                sent[tail++ % 8] = x++;
                continue;
            }
            const void *d;
            size_t n;
            if (tr_dag_get(g, pending[head % 8], 0, 10000, &d, &n) || n != 8 ||
                memcmp(d, &sent[head % 8], 8))
                graph_bad++;
            tr_dag_release(g, pending[head++ % 8]);
            execs++;
        }
    });
    while (execs.load() < 50) /* the graph's loop is busy */
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    double worst_ms = 0;
    for (int i = 0; i < 20; i++) {
        tr_ref r;
        int64_t x = 1000 + i, got = 0;
        auto t0 = std::chrono::steady_clock::now();
        ASSERT_EQ(tr_call(rt, a, "excl", &x, 8, &r), 0) << tr_last_error();
        const void *d;
        size_t n;
        EXPECT_EQ(tr_get(rt, r, 10000, &d, &n), 0) << tr_last_error();
        if (n == 8) memcpy(&got, d, 8);
        EXPECT_EQ(got, x);
        tr_ref_release(rt, r);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                        .count();
        worst_ms = ms > worst_ms ? ms : worst_ms;
    }
    int64_t during = execs.load();
    stop = 1;
    pump.join();
    EXPECT_EQ(graph_bad.load(), 0) << tr_last_error();
    EXPECT_GT(execs.load(), during) << "the graph went on";
    /* a step holds the actor ~0.2 ms: a call waits one or two of them (~0.7 ms here), not
     * a burst's 64 steps (12.8 ms: what a loop that gave the lock up only between bursts
     * made it wait, 17-34 ms) */
    EXPECT_LT(worst_ms, 10.0) << "a classic call waited behind the graph's steps";
    printf("classic calls beside the graph: worst %.2f ms\n", worst_ms);
    EXPECT_EQ(tr_dag_destroy(g), 0);
    expect_no_segments();
}

/* Ray's case: kill one of four actors under a multi-output graph. Pending executions fail
 * with TR_EACTOR_DIED within a second; the three others answer, and a new graph over them
 * works. */
TEST_F(Dag, AKilledActorFailsTheGraphAndTheOthersStayUsable) {
    std::vector<tr_actor_id> a;
    for (int i = 0; i < 4; i++)
        a.push_back(actor());
    tr_dag *g;
    tr_dag_node in, n[4];
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    for (int i = 0; i < 4; i++)
        ASSERT_EQ(tr_dag_bind(g, a[(size_t)i], "plus1", &in, 1, &n[i]), 0);
    ASSERT_EQ(tr_dag_output(g, n, 4), 0);
    ASSERT_EQ(tr_dag_compile(g, nullptr), 0) << tr_last_error();
    std::vector<int64_t> got;
    run(g, 5, 4, &got);
    EXPECT_EQ(got, (std::vector<int64_t>{6, 6, 6, 6}));
    ASSERT_EQ(tr_actor_kill(rt, a[2], 1), 0);
    auto t0 = std::chrono::steady_clock::now();
    int rc = 0;
    for (int i = 0; i < 100 && !rc; i++) { /* until the death is seen */
        uint64_t e;
        int64_t x = i;
        rc = tr_dag_execute(g, &x, 8, &e);
        for (size_t k = 0; k < 4 && !rc; k++) {
            const void *d;
            size_t len;
            rc = tr_dag_get(g, e, k, 5000, &d, &len);
        }
        if (!rc) tr_dag_release(g, e);
    }
    EXPECT_EQ(rc, TR_EACTOR_DIED) << tr_last_error();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
    uint64_t e;
    EXPECT_EQ(tr_dag_execute(g, "12345678", 8, &e), TR_EACTOR_DIED);
    EXPECT_EQ(tr_dag_destroy(g), 0) << tr_last_error();
    for (int i : {0, 1, 3}) {
        int64_t v;
        EXPECT_EQ(call_i64(rt, a[(size_t)i], "plus1", 1, &v, 5000), 0) << tr_last_error();
        EXPECT_EQ(v, 2);
    }
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    tr_dag_node m[3];
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    int k = 0;
    for (int i : {0, 1, 3})
        ASSERT_EQ(tr_dag_bind(g, a[(size_t)i], "plus1", &in, 1, &m[k++]), 0);
    ASSERT_EQ(tr_dag_output(g, m, 3), 0);
    ASSERT_EQ(tr_dag_compile(g, nullptr), 0) << tr_last_error();
    got.clear();
    run(g, 7, 3, &got);
    EXPECT_EQ(got, (std::vector<int64_t>{8, 8, 8}));
    EXPECT_EQ(tr_dag_destroy(g), 0);
    expect_no_segments();
}

/* Nothing released: max_inflight executions are taken, whatever the length of the
 * pipeline (before, each of a chain's channels took max_inflight more: 16, 24, 32 for 1, 2,
 * 3 steps at 8), and the next submit waits its timeout and says so; a release makes room
 * for exactly one more, and every value comes back. */
TEST_F(Dag, MaxInflightBoundsTheExecutionsNotReleased) {
    tr_actor_id actors[3] = {actor(), actor(), actor()};
    for (int steps = 1; steps <= 3; steps++) {
        for (uint32_t inflight : {1u, 3u, 8u}) {
            tr_dag *g;
            tr_dag_node in, prev;
            ASSERT_EQ(tr_dag_create(rt, &g), 0);
            ASSERT_EQ(tr_dag_input(g, &in), 0);
            prev = in;
            for (int s = 0; s < steps; s++) {
                tr_dag_node next;
                ASSERT_EQ(tr_dag_bind(g, actors[s], "echo", &prev, 1, &next), 0);
                prev = next;
            }
            ASSERT_EQ(tr_dag_output(g, &prev, 1), 0);
            tr_dag_options o = TR_DAG_OPTIONS_INIT;
            o.max_inflight = inflight;
            o.slot_bytes = 64;
            o.submit_timeout_ms = 200;
            ASSERT_EQ(tr_dag_compile(g, &o), 0) << tr_last_error();
            uint64_t e;
            for (uint32_t i = 0; i < inflight; i++)
                ASSERT_EQ(tr_dag_execute(g, &i, sizeof i, &e), 0) << tr_last_error();
            usleep(20000); /* the pipeline has moved what it can */
            auto t0 = std::chrono::steady_clock::now();
            EXPECT_EQ(tr_dag_execute(g, "x", 1, &e), TR_ETIMEDOUT)
                << steps << " steps, max_inflight " << inflight;
            double waited =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            EXPECT_GE(waited, 0.19);
            EXPECT_LT(waited, 2.0);
            EXPECT_NE(strstr(tr_last_error(), "max_inflight"), nullptr) << tr_last_error();
            ASSERT_EQ(tr_dag_release(g, 0), 0);
            uint32_t more = inflight;
            ASSERT_EQ(tr_dag_execute(g, &more, sizeof more, &e), 0) << tr_last_error();
            EXPECT_EQ(e, inflight);
            EXPECT_EQ(tr_dag_execute(g, "x", 1, &e), TR_ETIMEDOUT);
            for (uint32_t i = 1; i <= inflight; i++) {
                const void *v;
                size_t n;
                ASSERT_EQ(tr_dag_get(g, i, 0, 5000, &v, &n), 0) << tr_last_error();
                ASSERT_EQ(n, sizeof i);
                uint32_t got;
                memcpy(&got, v, sizeof got);
                EXPECT_EQ(got, i);
                ASSERT_EQ(tr_dag_release(g, i), 0);
            }
            EXPECT_EQ(tr_dag_destroy(g), 0);
        }
    }
    expect_no_segments();
}

/* With no submit timeout, a submit past max_inflight says so at once: only this thread's
 * tr_dag_release could free a slot, so a wait for ever would never end. */
TEST_F(Dag, MaxInflightWithNoTimeoutSaysSoAtOnce) {
    tr_dag *g;
    tr_dag_node in, out;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, actor(), "echo", &in, 1, &out), 0);
    ASSERT_EQ(tr_dag_output(g, &out, 1), 0);
    tr_dag_options o = TR_DAG_OPTIONS_INIT;
    o.max_inflight = 2;
    o.submit_timeout_ms = -1;
    ASSERT_EQ(tr_dag_compile(g, &o), 0) << tr_last_error();
    uint64_t e;
    for (int i = 0; i < 2; i++)
        ASSERT_EQ(tr_dag_execute(g, "x", 1, &e), 0) << tr_last_error();
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(tr_dag_execute(g, "x", 1, &e), TR_ETIMEDOUT);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
    EXPECT_NE(strstr(tr_last_error(), "max_inflight"), nullptr) << tr_last_error();
    ASSERT_EQ(tr_dag_release(g, 0), 0);
    EXPECT_EQ(tr_dag_execute(g, "y", 1, &e), 0) << tr_last_error();
    EXPECT_EQ(e, 2u);
    for (uint64_t k = 1; k <= 2; k++)
        ASSERT_EQ(tr_dag_release(g, k), 0);
    EXPECT_EQ(tr_dag_destroy(g), 0);
}

} // namespace

namespace {

/* A graph still compiled when its runtime shuts down is torn down with it (ASan sees any
 * leak), and the shutdown does not wait for anything. */
TEST(DagShutdown, TearsDownTheGraphsLeft) {
    tr_runtime *rt;
    ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "c", 1, &a), 0);
    tr_dag *g;
    tr_dag_node in, n;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, a, "plus1", &in, 1, &n), 0);
    ASSERT_EQ(tr_dag_output(g, &n, 1), 0);
    ASSERT_EQ(tr_dag_compile(g, nullptr), 0) << tr_last_error();
    uint64_t e;
    int64_t x = 1;
    ASSERT_EQ(tr_dag_execute(g, &x, 8, &e), 0); /* in flight, never read */
    tr_dag *unbuilt;
    ASSERT_EQ(tr_dag_create(rt, &unbuilt), 0); /* and one never compiled */
    auto t0 = std::chrono::steady_clock::now();
    tr_shutdown(rt);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

} // namespace

extern "C" {
#include "core/codec.h"
}

namespace {

/* What a hostile process of the same user could send an actor as an attach message: each
 * is refused with an error, and the actor goes on serving. */
TEST_F(Dag, MalformedAttachMessagesAreRefused) {
    tr_actor_id a = actor();
    auto attach = [&](int bytes, int world, int rank, int64_t timeout, const char *method) {
        tr__buf b = TR__BUF_INIT;
        tr__enc_map(&b, 7);
        tr__enc_str(&b, "name");
        tr__enc_str(&b, "dag-hostile");
        tr__enc_str(&b, "world");
        tr__enc_int(&b, world);
        tr__enc_str(&b, "rank");
        tr__enc_int(&b, rank);
        tr__enc_str(&b, "bytes");
        tr__enc_uint(&b, (uint64_t)bytes);
        tr__enc_str(&b, "timeout_ms");
        tr__enc_int(&b, timeout);
        tr__enc_str(&b, "spin_ns");
        tr__enc_int(&b, 0);
        tr__enc_str(&b, "steps");
        tr__enc_array(&b, 1);
        tr__enc_array(&b, 3);
        tr__enc_str(&b, method);
        tr__enc_uint(&b, 64);
        tr__enc_array(&b, 1);
        tr__enc_array(&b, 2);
        tr__enc_uint(&b, 64);
        tr__enc_uint(&b, 0);
        tr_ref r;
        int rc = tr_call(rt, a, "__troupe_dag_attach", b.data, b.len, &r);
        tr__buf_free(&b);
        if (!rc) rc = tr_get(rt, r, 5000, nullptr, nullptr);
        tr_ref_release(rt, r);
        return rc;
    };
    EXPECT_EQ(attach(0, 2, 1, 1000, "plus1"), TR_EPROTO) << "no room for the graph's header";
    EXPECT_EQ(attach(100, 2, 1, 1000, "plus1"), TR_EPROTO) << "not a multiple of 64";
    EXPECT_EQ(attach(4096, 1, 0, 1000, "plus1"), TR_EPROTO) << "rank 0 is the driver's";
    EXPECT_EQ(attach(4096, 1000, 1, 1000, "plus1"), TR_EPROTO) << "world too large";
    EXPECT_EQ(attach(4096, 2, 1, -1, "plus1"), TR_EPROTO) << "a wait with no end";
    EXPECT_EQ(attach(4096, 2, 1, 1000, "nope"), TR_ENOMETHOD);
    tr_ref r;
    ASSERT_EQ(tr_call(rt, a, "__troupe_dag_attach", "\xc1\xc1", 2, &r), 0);
    EXPECT_EQ(tr_get(rt, r, 5000, nullptr, nullptr), TR_EPROTO) << "not msgpack";
    tr_ref_release(rt, r);
    int64_t v;
    EXPECT_EQ(call_i64(rt, a, "plus1", 1, &v, 5000), 0) << tr_last_error();
    EXPECT_EQ(v, 2);
}

} // namespace

namespace {

/* A collective node: four actors' values allreduced, the sum to each; a failed input
 * fails every output of that execution, and the next one works. */
TEST_F(Dag, ACollectiveNodeAllreducesTheActorsValues) {
    std::vector<tr_actor_id> a;
    for (int i = 0; i < 4; i++)
        a.push_back(actor());
    tr_dag *g;
    tr_dag_node in, n[4], r[4];
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    for (int i = 0; i < 4; i++)
        ASSERT_EQ(tr_dag_bind(g, a[(size_t)i], i == 3 ? "echo" : "plus1", &in, 1, &n[i]), 0);
    tr_dag_node same[] = {n[0], n[0]};
    EXPECT_EQ(tr_dag_allreduce(g, same, 2, TR_INT64, TR_SUM, r), TR_EINVAL) << "one actor twice";
    ASSERT_EQ(tr_dag_allreduce(g, n, 4, TR_INT64, TR_SUM, r), 0) << tr_last_error();
    ASSERT_EQ(tr_dag_output(g, r, 4), 0);
    ASSERT_EQ(tr_dag_compile(g, nullptr), 0) << tr_last_error();
    for (int64_t x = 0; x < 100; x++) {
        std::vector<int64_t> got;
        run(g, x, 4, &got);
        ASSERT_EQ(got, std::vector<int64_t>(4, 3 * (x + 1) + x)) << x;
    }
    /* plus1 fails (TR_ETASK); echo gives 3 bytes: every output has plus1's error, its code
     * and its message (before: the echo's and the others' got TR_EINVAL, no message) */
    uint64_t e;
    ASSERT_EQ(tr_dag_execute(g, "abc", 3, &e), 0);
    for (size_t k = 0; k < 4; k++) {
        const void *d;
        size_t len;
        EXPECT_EQ(tr_dag_get(g, e, k, 10000, &d, &len), TR_ETASK) << k;
        EXPECT_NE(strstr(tr_last_error(), "plus1 wants 8 bytes, got 3"), nullptr)
            << k << ": " << tr_last_error();
    }
    ASSERT_EQ(tr_dag_release(g, e), 0);
    std::vector<int64_t> got;
    run(g, 1, 4, &got);
    EXPECT_EQ(got, std::vector<int64_t>(4, 7));
    EXPECT_EQ(tr_dag_destroy(g), 0);
    expect_no_segments();
}

} // namespace

namespace {

/* A collective node whose input no one else reads reduces in that input's slot and
 * forwards it: with max_inflight executions in flight all along, each sum is its own
 * (slots of exactly max_inflight, and with slack); where the driver reads the input too,
 * its value stays as it was. */
TEST_F(Dag, ACollectiveNodeReducesInItsInputsSlotWithExecutionsInFlight) {
    tr_actor_id a = actor(), b = actor();
    for (uint64_t slot_bytes : {(uint64_t)4096, (uint64_t)(1 << 20)}) {
        for (int shape = 0; shape < 2; shape++) { /* 1: the driver reads a's input too */
            SCOPED_TRACE("slot_bytes " + std::to_string(slot_bytes) + ", shape " +
                         std::to_string(shape));
            tr_dag *g;
            tr_dag_node in, n[2], r[2], outs[3];
            ASSERT_EQ(tr_dag_create(rt, &g), 0);
            ASSERT_EQ(tr_dag_input(g, &in), 0);
            ASSERT_EQ(tr_dag_bind(g, a, "pass", &in, 1, &n[0]), 0);
            ASSERT_EQ(tr_dag_bind(g, b, "pass", &in, 1, &n[1]), 0);
            ASSERT_EQ(tr_dag_allreduce(g, n, 2, TR_INT64, TR_SUM, r), 0) << tr_last_error();
            outs[0] = r[0], outs[1] = r[1], outs[2] = n[0];
            size_t n_out = shape ? 3 : 2;
            ASSERT_EQ(tr_dag_output(g, outs, n_out), 0);
            tr_dag_options o = TR_DAG_OPTIONS_INIT;
            o.max_inflight = 4;
            o.slot_bytes = slot_bytes;
            ASSERT_EQ(tr_dag_compile(g, &o), 0) << tr_last_error();
            auto value = [](uint64_t x) { /* each execution's own: 64 to 68 int64s */
                                          std::vector<int64_t> v(64 + x % 5);
                                          for (size_t i = 0; i < v.size(); i++)
                                              v[i] = (int64_t)(x * 1000 + i);
                                          return v;
            };
            std::vector<uint64_t> inflight;
            const uint64_t total = 120;
            for (uint64_t x = 0; x < total; x++) {
                std::vector<int64_t> v = value(x);
                uint64_t e;
                ASSERT_EQ(tr_dag_execute(g, v.data(), v.size() * 8, &e), 0) << tr_last_error();
                inflight.push_back(e);
                if (inflight.size() < 4 && x + 1 < total) continue;
                size_t done = x + 1 < total ? 1 : inflight.size();
                for (size_t k = 0; k < done; k++) {
                    std::vector<int64_t> in_v = value(x + 1 - inflight.size() + k), sum = in_v;
                    for (auto &y : sum)
                        y *= 2;
                    for (size_t i = 0; i < n_out; i++) {
                        const void *d;
                        size_t len;
                        ASSERT_EQ(tr_dag_get(g, inflight[k], i, 10000, &d, &len), 0)
                            << tr_last_error();
                        const std::vector<int64_t> &want = i < 2 ? sum : in_v;
                        ASSERT_EQ(len, want.size() * 8) << "output " << i;
                        ASSERT_EQ(memcmp(d, want.data(), len), 0)
                            << "execution " << inflight[k] << ", output " << i;
                    }
                }
                for (size_t k = 0; k < done; k++)
                    ASSERT_EQ(tr_dag_release(g, inflight[k]), 0);
                inflight.erase(inflight.begin(), inflight.begin() + (long)done);
            }
            EXPECT_EQ(tr_dag_destroy(g), 0);
        }
    }
    expect_no_segments();
}

} // namespace

namespace {

/* tr_ctx_reply_alloc: a reply written in place - in the slot, in an object over a slot, in
 * a classic call's result - replaced by a later reply, and let go of when the method fails
 * after it (nothing left in the store). */
TEST_F(Dag, AReplyWrittenInPlace) {
    tr_actor_id a = actor();
    tr_store_stats before = TR_STORE_STATS_INIT;
    ASSERT_EQ(tr_object_stats(rt, &before), 0);
    tr_dag *g;
    tr_dag_node in, n;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, a, "echo_alloc", &in, 1, &n), 0);
    ASSERT_EQ(tr_dag_output(g, &n, 1), 0);
    tr_dag_options o = TR_DAG_OPTIONS_INIT;
    o.max_inflight = 2;
    o.slot_bytes = 4096;
    ASSERT_EQ(tr_dag_compile(g, &o), 0) << tr_last_error();
    for (size_t size : {(size_t)8, (size_t)4096, (size_t)4097, (size_t)(3 << 20)}) {
        for (int round = 0; round < 3; round++) { /* (slots reused) */
            std::string v(size, (char)('a' + round));
            v[size / 2] = 'Z';
            uint64_t e;
            ASSERT_EQ(tr_dag_execute(g, v.data(), v.size(), &e), 0) << tr_last_error();
            const void *d;
            size_t len;
            ASSERT_EQ(tr_dag_get(g, e, 0, 10000, &d, &len), 0) << tr_last_error();
            ASSERT_EQ(len, size);
            EXPECT_EQ(memcmp(d, v.data(), len), 0) << size;
            ASSERT_EQ(tr_dag_release(g, e), 0);
        }
    }
    for (std::string v : {std::string("fail") + std::string(8000, 'x'), std::string("fail"),
                          std::string("twice") + std::string(9000, 'y')}) {
        uint64_t e;
        ASSERT_EQ(tr_dag_execute(g, v.data(), v.size(), &e), 0) << tr_last_error();
        const void *d;
        size_t len;
        int rc = tr_dag_get(g, e, 0, 10000, &d, &len);
        if (v[0] == 'f') {
            EXPECT_EQ(rc, TR_ETASK);
            EXPECT_NE(strstr(tr_last_error(), "failing after alloc"), nullptr) << tr_last_error();
        } else {
            ASSERT_EQ(rc, 0) << tr_last_error();
            EXPECT_EQ(std::string((const char *)d, len), "again");
        }
        ASSERT_EQ(tr_dag_release(g, e), 0);
    }
    EXPECT_EQ(tr_dag_destroy(g), 0);
    /* a classic call: the result buffer, small or over the socket's limit */
    for (size_t size : {(size_t)0, (size_t)100, (size_t)(1 << 20)}) {
        std::string v(size, 'c');
        tr_ref r;
        ASSERT_EQ(tr_call(rt, a, "echo_alloc", v.data(), v.size(), &r), 0) << tr_last_error();
        const void *d;
        size_t len;
        ASSERT_EQ(tr_get(rt, r, 10000, &d, &len), 0) << tr_last_error();
        EXPECT_EQ(std::string((const char *)d, len), v);
        ASSERT_EQ(tr_ref_release(rt, r), 0);
    }
    expect_store_back_to(before);
}

/* A step whose output only the driver reads may forward its input: its reply, where it lies
 * within the input's slot, goes on as that place, not a copy (dag/exec.c: parse_fwd). The
 * value must stay intact while the driver holds it: executions are kept in flight up to
 * max_inflight, with channels of max_inflight slots (1 MiB slots) and of twice that (4 KiB
 * slots), through one step and a chain of two (the second's input written by an actor),
 * and beside a step whose output an actor reads too. Part of the input, a reply replaced
 * after it, a failure after it, and inputs over a slot come back as the method said. */
TEST_F(Dag, AForwardedInputStaysIntactWhileTheDriverHoldsIt) {
    tr_actor_id a = actor(), b = actor();
    for (uint64_t slot_bytes : {(uint64_t)4096, (uint64_t)(1 << 20)}) {
        for (int shape = 0; shape < 3; shape++) {
            SCOPED_TRACE("slot_bytes " + std::to_string(slot_bytes) + ", shape " +
                         std::to_string(shape));
            tr_dag *g;
            tr_dag_node in, na, nb, outs[2];
            size_t n_out = 1;
            ASSERT_EQ(tr_dag_create(rt, &g), 0);
            ASSERT_EQ(tr_dag_input(g, &in), 0);
            ASSERT_EQ(tr_dag_bind(g, a, "pass", &in, 1, &na), 0);
            outs[0] = na;
            if (shape == 1) { /* a chain: b reads a's output, the driver b's */
                ASSERT_EQ(tr_dag_bind(g, b, "pass", &na, 1, &nb), 0);
                outs[0] = nb;
            } else if (shape == 2) { /* a's output read by b and the driver */
                ASSERT_EQ(tr_dag_bind(g, b, "pass", &na, 1, &nb), 0);
                outs[1] = nb;
                n_out = 2;
            }
            ASSERT_EQ(tr_dag_output(g, outs, n_out), 0);
            tr_dag_options o = TR_DAG_OPTIONS_INIT;
            o.max_inflight = 4;
            o.slot_bytes = slot_bytes;
            ASSERT_EQ(tr_dag_compile(g, &o), 0) << tr_last_error();
            auto value = [](uint64_t x) { /* a value of its own for each execution */
                                          std::string v(3000 + x % 7, '\0');
                                          for (size_t i = 0; i < v.size(); i++)
                                              v[i] = (char)('A' + (x * 7 + i) % 26);
                                          return v;
            };
            std::vector<uint64_t> inflight;
            for (uint64_t x = 0; x < 200; x++) { /* max_inflight in flight all along */
                std::string v = value(x);
                uint64_t e;
                ASSERT_EQ(tr_dag_execute(g, v.data(), v.size(), &e), 0) << tr_last_error();
                inflight.push_back(e);
                if (inflight.size() < 4 && x + 1 < 200) continue;
                for (size_t k = 0; k < (x + 1 < 200 ? 1 : inflight.size()); k++) {
                    uint64_t old = inflight[k];
                    std::string want = value(x + 1 - inflight.size() + k);
                    for (size_t i = 0; i < n_out; i++) {
                        const void *d;
                        size_t len;
                        ASSERT_EQ(tr_dag_get(g, old, i, 10000, &d, &len), 0) << tr_last_error();
                        ASSERT_EQ(std::string((const char *)d, len), want) << old;
                    }
                }
                for (size_t k = 0; k < (x + 1 < 200 ? 1 : inflight.size()); k++)
                    ASSERT_EQ(tr_dag_release(g, inflight[k]), 0);
                inflight.erase(inflight.begin(),
                               inflight.begin() + (x + 1 < 200 ? 1 : (long)inflight.size()));
            }
            struct {
                std::string in, out;
                int rc;
            } cases[] = {
                {"tail-of-it", "-of-it", 0},
                {"twice, then again", "again", 0},
                {"fail after it", "failing after a reply", TR_ETASK},
                {std::string(slot_bytes + 100, 'o'), std::string(slot_bytes + 100, 'o'), 0},
                {"", "", 0}};
            for (auto &c : cases) {
                uint64_t e;
                ASSERT_EQ(tr_dag_execute(g, c.in.data(), c.in.size(), &e), 0) << tr_last_error();
                for (size_t i = 0; i < n_out; i++) {
                    const void *d;
                    size_t len;
                    int rc = tr_dag_get(g, e, i, 10000, &d, &len);
                    ASSERT_EQ(rc, c.rc) << c.in.substr(0, 20) << ": " << tr_last_error();
                    if (rc) {
                        EXPECT_NE(strstr(tr_last_error(), c.out.c_str()), nullptr)
                            << tr_last_error();
                        continue;
                    }
                    EXPECT_EQ(std::string((const char *)d, len), c.out) << c.in.substr(0, 20);
                }
                ASSERT_EQ(tr_dag_release(g, e), 0);
            }
            EXPECT_EQ(tr_dag_destroy(g), 0);
        }
    }
}

/* A collective node takes values over a slot: its inputs went as objects, and its outputs
 * go as objects of the participants' store (issue 26: the demo's graph column to 64 MiB);
 * small values in the same graph still go in the slots; nothing is left in the store. */
TEST_F(Dag, ACollectiveNodeReducesValuesOverASlot) {
    std::vector<tr_actor_id> a;
    for (int i = 0; i < 3; i++)
        a.push_back(actor());
    tr_store_stats before = TR_STORE_STATS_INIT;
    ASSERT_EQ(tr_object_stats(rt, &before), 0);
    tr_dag *g;
    tr_dag_node in, n[3], r[3];
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(tr_dag_bind(g, a[(size_t)i], "echo", &in, 1, &n[i]), 0);
    ASSERT_EQ(tr_dag_allreduce(g, n, 3, TR_INT64, TR_SUM, r), 0) << tr_last_error();
    ASSERT_EQ(tr_dag_output(g, r, 3), 0);
    tr_dag_options o = TR_DAG_OPTIONS_INIT;
    o.max_inflight = 2;
    o.slot_bytes = 64;
    ASSERT_EQ(tr_dag_compile(g, &o), 0) << tr_last_error();
    for (int round = 0; round < 5; round++) {             /* (more executions than slots) */
        size_t count = (size_t)(1 << 17) + (size_t)round; /* 1 MiB and a few int64 */
        std::vector<int64_t> v(count);
        for (size_t k = 0; k < count; k++)
            v[k] = (int64_t)(k * 7 + (size_t)round);
        uint64_t e;
        ASSERT_EQ(tr_dag_execute(g, v.data(), count * 8, &e), 0) << tr_last_error();
        for (size_t k = 0; k < 3; k++) {
            const void *d;
            size_t len;
            ASSERT_EQ(tr_dag_get(g, e, k, 10000, &d, &len), 0) << tr_last_error();
            ASSERT_EQ(len, count * 8);
            const int64_t *x = (const int64_t *)d;
            for (size_t at : {(size_t)0, (size_t)1, count / 2, count - 1})
                EXPECT_EQ(x[at], 3 * v[at]) << round << " output " << k << " at " << at;
        }
        ASSERT_EQ(tr_dag_release(g, e), 0);
        std::vector<int64_t> got; /* a small value: in the slots */
        run(g, round, 3, &got);
        EXPECT_EQ(got, std::vector<int64_t>(3, 3 * round));
    }
    EXPECT_EQ(tr_dag_destroy(g), 0);
    expect_store_back_to(before);
    expect_no_segments();
}

/* A collective node whose input object was made for it alone by a step of the same actor
 * reduces into that object and passes it on (no second object of its size): three
 * objects for three sums, where a copy would make six. An input that another also reads
 * (the driver reads actor 0's echo too) is not written: the echo still reads as it was.
 * Executions in flight together keep their own values; nothing is left in the store. */
TEST_F(Dag, ACollectiveNodeReducesItsOwnInputObjectInPlace) {
    std::vector<tr_actor_id> a;
    for (int i = 0; i < 3; i++)
        a.push_back(actor());
    tr_store_stats before = TR_STORE_STATS_INIT;
    ASSERT_EQ(tr_object_stats(rt, &before), 0);
    for (int shared = 0; shared < 2; shared++) {
        tr_dag *g;
        tr_dag_node in, n[3], r[4];
        ASSERT_EQ(tr_dag_create(rt, &g), 0);
        ASSERT_EQ(tr_dag_input(g, &in), 0);
        for (int i = 0; i < 3; i++)
            ASSERT_EQ(tr_dag_bind(g, a[(size_t)i], "echo", &in, 1, &n[i]), 0);
        ASSERT_EQ(tr_dag_allreduce(g, n, 3, TR_INT64, TR_SUM, r), 0) << tr_last_error();
        r[3] = n[0]; /* (shared: actor 0's echo is an output too) */
        ASSERT_EQ(tr_dag_output(g, r, shared ? 4 : 3), 0);
        tr_dag_options o = TR_DAG_OPTIONS_INIT;
        o.max_inflight = 2;
        o.slot_bytes = 64;
        ASSERT_EQ(tr_dag_compile(g, &o), 0) << tr_last_error();
        size_t count = (size_t)1 << 17; /* 1 MiB of int64 */
        for (int round = 0; round < 6; round += 2) {
            std::vector<int64_t> v[2];
            uint64_t e[2];
            for (int j = 0; j < 2; j++) { /* two in flight */
                v[j].resize(count);
                for (size_t k = 0; k < count; k++)
                    v[j][k] = (int64_t)(k * 5 + (size_t)(round + j) * 1000);
                ASSERT_EQ(tr_dag_execute(g, v[j].data(), count * 8, &e[j]), 0) << tr_last_error();
            }
            for (int j = 0; j < 2; j++) {
                for (size_t k = 0; k < (shared ? 4u : 3u); k++) {
                    const void *d;
                    size_t len;
                    ASSERT_EQ(tr_dag_get(g, e[j], k, 10000, &d, &len), 0) << tr_last_error();
                    ASSERT_EQ(len, count * 8);
                    const int64_t *x = (const int64_t *)d;
                    int64_t times = k == 3 ? 1 : 3; /* (the echo itself, or a sum) */
                    for (size_t at : {(size_t)0, (size_t)1, count / 2, count - 1})
                        EXPECT_EQ(x[at], times * v[j][at])
                            << "shared " << shared << " round " << round + j << " output " << k;
                }
                if (round == 0 && j == 0 && !shared) {
                    /* the 3 sums are the 3 echoes' objects (and the input's one, if it is
                     * still held): a copy would hold 6 more */
                    tr_store_stats now = TR_STORE_STATS_INIT;
                    ASSERT_EQ(tr_object_stats(rt, &now), 0);
                    EXPECT_LE(now.n_objects, before.n_objects + 2 * 4)
                        << "two executions: at most 3 results and an input each";
                }
                ASSERT_EQ(tr_dag_release(g, e[j]), 0);
            }
        }
        EXPECT_EQ(tr_dag_destroy(g), 0);
    }
    expect_store_back_to(before);
    expect_no_segments();
}

/* Values over slot_bytes travel as objects in the store, by reference, through a chain:
 * 1 MiB through 64-byte slots, more executions than slots (each slot's object let go of
 * when the slot is reused), then nothing left in the store once the graph is gone. */
TEST_F(Dag, ValuesOverASlotTravelAsObjects) {
    tr_actor_id a = actor(), b = actor();
    tr_store_stats before = TR_STORE_STATS_INIT;
    ASSERT_EQ(tr_object_stats(rt, &before), 0);
    tr_dag *g;
    tr_dag_node in, na, nb;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, a, "echo", &in, 1, &na), 0);
    ASSERT_EQ(tr_dag_bind(g, b, "echo", &na, 1, &nb), 0);
    tr_dag_node outs[] = {nb, na};
    ASSERT_EQ(tr_dag_output(g, outs, 2), 0);
    tr_dag_options o = TR_DAG_OPTIONS_INIT;
    o.max_inflight = 2;
    o.slot_bytes = 64;
    ASSERT_EQ(tr_dag_compile(g, &o), 0) << tr_last_error();
    for (int i = 0; i < 6; i++) {
        std::string big((size_t)(1 << 20) + (size_t)i, (char)('a' + i));
        big[12345] = 'Z';
        uint64_t e;
        ASSERT_EQ(tr_dag_execute(g, big.data(), big.size(), &e), 0) << tr_last_error();
        for (size_t k = 0; k < 2; k++) {
            const void *d, *again;
            size_t n, n2;
            ASSERT_EQ(tr_dag_get(g, e, k, 10000, &d, &n), 0) << tr_last_error();
            ASSERT_EQ(n, big.size());
            EXPECT_EQ(memcmp(d, big.data(), n), 0) << i << " " << k;
            ASSERT_EQ(tr_dag_get(g, e, k, 10000, &again, &n2), 0) << "asked twice";
            EXPECT_EQ(again, d);
            EXPECT_EQ(memcmp(d, big.data(), n), 0) << "the first view still holds";
        }
        ASSERT_EQ(tr_dag_release(g, e), 0);
        EXPECT_EQ(run(g, 5), 5) << "small values still go in the slots"; /* echo of 8 bytes */
    }
    /* inputs and outputs as objects: a put passed by ref (released at once), and each
     * output taken as a ref of our own, large (the same object) and small (put) */
    std::string big((size_t)(3 << 20), 'q');
    tr_ref in_ref, out_ref[2];
    ASSERT_EQ(tr_put(rt, big.data(), big.size(), &in_ref), 0);
    uint64_t e;
    ASSERT_EQ(tr_dag_execute_ref(g, in_ref, &e), 0) << tr_last_error();
    ASSERT_EQ(tr_ref_release(rt, in_ref), 0); /* the graph pins it while it needs it */
    for (size_t k = 0; k < 2; k++) {
        ASSERT_EQ(tr_dag_get_ref(g, e, k, 10000, &out_ref[k]), 0) << tr_last_error();
    }
    ASSERT_EQ(tr_dag_release(g, e), 0);
    EXPECT_EQ(run(g, 6), 6);
    EXPECT_EQ(run(g, 7), 7); /* the slots have been reused: our refs still hold */
    for (auto &r : out_ref) {
        const void *d;
        size_t n;
        ASSERT_EQ(tr_get(rt, r, 5000, &d, &n), 0) << tr_last_error();
        EXPECT_EQ(n, big.size());
        EXPECT_EQ(memcmp(d, big.data(), n), 0);
        ASSERT_EQ(tr_ref_release(rt, r), 0);
    }
    tr_ref small;
    ASSERT_EQ(tr_dag_execute(g, "12345678", 8, &e), 0);
    ASSERT_EQ(tr_dag_get_ref(g, e, 0, 10000, &small), 0);
    ASSERT_EQ(tr_dag_release(g, e), 0);
    const void *sd;
    size_t sn;
    ASSERT_EQ(tr_get(rt, small, 5000, &sd, &sn), 0);
    EXPECT_EQ(std::string((const char *)sd, sn), "12345678");
    ASSERT_EQ(tr_ref_release(rt, small), 0);
    tr_ref gone = in_ref; /* released and unreferenced: gone from the store */
    ASSERT_EQ(tr_dag_execute_ref(g, gone, &e), 0);
    const void *gd;
    size_t gn;
    EXPECT_NE(tr_dag_get(g, e, 0, 10000, &gd, &gn), 0) << "a ref not in the store";
    ASSERT_EQ(tr_dag_release(g, e), 0);
    EXPECT_EQ(tr_dag_destroy(g), 0);
    expect_store_back_to(before);
}

} // namespace

#include <poll.h>

namespace {

/* tr_dag_fd for event loops: readable once executions are ready, the count in submission
 * order; quiet when none is pending; readable for good once an actor dies under it. */
TEST_F(Dag, APollableFdCountsReadyExecutions) {
    tr_actor_id a = actor();
    tr_dag *g;
    tr_dag_node in, na;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    EXPECT_EQ(tr_dag_fd(g), TR_ESTATE) << "not compiled";
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, a, "plus1", &in, 1, &na), 0);
    ASSERT_EQ(tr_dag_output(g, &na, 1), 0);
    ASSERT_EQ(tr_dag_compile(g, nullptr), 0) << tr_last_error();
    for (int64_t i = 0; i < 5; i++) /* run and let go of before the fd exists: not counted */
        ASSERT_EQ(run(g, i), i + 1);
    int fd = tr_dag_fd(g);
    ASSERT_GE(fd, 0) << tr_last_error();
    EXPECT_EQ(tr_dag_fd(g), fd) << "one per graph";
    struct pollfd p = {fd, POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 50), 0) << "nothing submitted: quiet";
    for (int round = 0; round < 3; round++) {
        uint64_t e[3];
        for (int64_t i = 0; i < 3; i++)
            ASSERT_EQ(tr_dag_execute(g, &i, 8, &e[i]), 0);
        uint64_t ready = 0;
        while (ready < 3) {
            ASSERT_EQ(poll(&p, 1, 5000), 1) << "ready " << ready;
            uint64_t n;
            ASSERT_EQ(read(fd, &n, sizeof n), (ssize_t)sizeof n);
            ready += n;
        }
        EXPECT_EQ(ready, 3u);
        for (int64_t i = 0; i < 3; i++) {
            EXPECT_EQ(tr_dag_ready(g, e[i]), 1);
            const void *d;
            size_t n;
            ASSERT_EQ(tr_dag_get(g, e[i], 0, 0, &d, &n), 0);
            int64_t v;
            memcpy(&v, d, 8);
            EXPECT_EQ(v, i + 1);
            ASSERT_EQ(tr_dag_release(g, e[i]), 0);
        }
        EXPECT_EQ(poll(&p, 1, 20), 0) << "all taken: quiet again";
    }
    EXPECT_EQ(tr_dag_destroy(g), 0);
    /* an execution that never comes back: its actor is killed while it sleeps */
    tr_actor_id b = actor();
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, b, "sleep_ms", &in, 1, &na), 0);
    ASSERT_EQ(tr_dag_output(g, &na, 1), 0);
    ASSERT_EQ(tr_dag_compile(g, nullptr), 0) << tr_last_error();
    fd = tr_dag_fd(g);
    ASSERT_GE(fd, 0);
    p.fd = fd;
    uint64_t e;
    int64_t ms = 3000;
    ASSERT_EQ(tr_dag_execute(g, &ms, 8, &e), 0);
    EXPECT_EQ(poll(&p, 1, 50), 0) << "still sleeping";
    ASSERT_EQ(tr_actor_kill(rt, b, 1), 0);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(poll(&p, 1, 2500), 1) << "a dead actor: readable";
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
    for (int i = 0; i < 3; i++) { /* and stays so, read after read */
        uint64_t one;
        EXPECT_EQ(read(fd, &one, sizeof one), (ssize_t)sizeof one);
        EXPECT_EQ(poll(&p, 1, 0), 1);
    }
    const void *d;
    size_t n;
    EXPECT_EQ(tr_dag_get(g, e, 0, 5000, &d, &n), TR_EACTOR_DIED);
    EXPECT_EQ(tr_dag_destroy(g), 0);
    expect_no_segments();
}

} // namespace
