/* tests/metrics_test.cc - a node's Prometheus metrics (api/node/metrics.h), read over HTTP
 * from the address its status gives ("dashboard"), against what the test did: calls and
 * their errors by class, tasks, actors by state, restarts (counters never go down when a
 * worker dies), the store's objects and bytes; the text checked by `promtool check
 * metrics` where Prometheus is installed. And its lists (api/node/lists.h): filtered
 * before their limit, the same JSON over HTTP and from `troupe list --json`. */
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_actors.h"
#include "troupe/dag.h"

namespace {

/* A GET of path from the node's HTTP port: the whole reply (headers and body). */
std::string http_get(const std::string &dash, const std::string &path,
                     const std::string &host_header = "") {
    int port = atoi(dash.c_str() + dash.rfind(':') + 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa = {};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return "";
    }
    std::string host = host_header.empty() ? "127.0.0.1:" + std::to_string(port) : host_header;
    std::string req = "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n";
    if (write(fd, req.data(), req.size()) != (ssize_t)req.size()) {
        close(fd);
        return "";
    }
    std::string out;
    char buf[65536];
    for (;;) {
        pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 10000) <= 0) break;
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) break;
        out.append(buf, (size_t)n);
    }
    close(fd);
    return out;
}

std::string metrics(tr_runtime *rt) {
    std::string r = http_get(dashboard(rt), "/metrics");
    size_t body = r.find("\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 200 ", 0), 0u) << r.substr(0, 200);
    EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
    return body == std::string::npos ? "" : r.substr(body + 4);
}

/* The value of the sample whose name and labels are `series` exactly; -1 if absent. */
double value(const std::string &text, const std::string &series) {
    size_t at = 0;
    while ((at = text.find(series + " ", at)) != std::string::npos) {
        if (at == 0 || text[at - 1] == '\n') return atof(text.c_str() + at + series.size() + 1);
        at++;
    }
    return -1;
}

class MetricsTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    }
    void TearDown() override {
        if (rt) tr_shutdown(rt);
    }
    tr_runtime *rt = nullptr;
};

TEST_F(MetricsTest, WhatTheTestDidIsCounted) {
    ASSERT_NE(dashboard(rt), "") << "an embedded node serves metrics by default";
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.max_restarts = 1;
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &o, "c", 1, &a), 0) << tr_last_error();
    for (int i = 0; i < 100; i++)
        ASSERT_EQ(call_i64(rt, a, "add", 1, nullptr), 0);
    std::string out;
    for (int i = 0; i < 2; i++)
        EXPECT_EQ(call_str(rt, a, "fail", "x", &out), TR_ETASK);
    for (int i = 0; i < 5; i++) {
        tr_ref t;
        ASSERT_EQ(tr_task_submit(rt, "t_echo", "e", 1, nullptr, 0, nullptr, &t), 0);
        ASSERT_EQ(tr_get(rt, t, 30000, nullptr, nullptr), 0);
        tr_ref_release(rt, t);
    }
    std::string big(1 << 20, 'x');
    tr_ref obj;
    ASSERT_EQ(tr_put(rt, big.data(), big.size(), &obj), 0);

    std::string m = metrics(rt);
    EXPECT_EQ(value(m, "troupe_calls_total{class=\"Counter\"}"), 102) << m;
    EXPECT_EQ(value(m, "troupe_call_errors_total{class=\"Counter\"}"), 2);
    EXPECT_EQ(value(m, "troupe_call_duration_seconds_count{class=\"Counter\"}"), 102);
    EXPECT_EQ(value(m, "troupe_call_duration_seconds_bucket{class=\"Counter\",le=\"+Inf\"}"), 102);
    EXPECT_GT(value(m, "troupe_call_duration_seconds_sum{class=\"Counter\"}"), 0);
    EXPECT_EQ(value(m, "troupe_tasks_total"), 5);
    EXPECT_EQ(value(m, "troupe_task_errors_total"), 0);
    EXPECT_EQ(value(m, "troupe_actors_created_total"), value(m, "troupe_actors{state=\"ALIVE\"}"))
        << "the Counter and the task pool's workers, all alive";
    EXPECT_EQ(value(m, "troupe_actor_restarts_total"), 0);
    EXPECT_EQ(value(m, "troupe_object_store_objects"), 1);
    EXPECT_GE(value(m, "troupe_object_store_object_bytes"), (double)big.size());
    EXPECT_GT(value(m, "troupe_object_store_capacity_bytes"), 0);
    EXPECT_GT(value(m, "process_resident_memory_bytes"), 0);
    EXPECT_GE(value(m, "troupe_workers"), 2);

    /* the actor's worker dies and restarts: what it counted stays counted */
    EXPECT_EQ(call_i64(rt, a, "crash", 0, nullptr), TR_EACTOR_DIED);
    EXPECT_TRUE(eventually(10000, [&] { return call_i64(rt, a, "add", 1, nullptr) == 0; }));
    m = metrics(rt);
    EXPECT_EQ(value(m, "troupe_actor_restarts_total"), 1) << m;
    EXPECT_EQ(value(m, "troupe_calls_total{class=\"Counter\"}"), 103)
        << "102 before the crash (the crashing call never ended), 1 after";
    EXPECT_EQ(value(m, "troupe_call_errors_total{class=\"Counter\"}"), 2);
    EXPECT_EQ(tr_actor_kill(rt, a, 1), 0);
    EXPECT_TRUE(eventually(
        10000, [&] { return value(metrics(rt), "troupe_actors{state=\"DEAD\"}") == 1; }));
    EXPECT_EQ(value(metrics(rt), "troupe_calls_total{class=\"Counter\"}"), 103);
    tr_ref_release(rt, obj);

    /* Prometheus' own check of the text, where it is installed (tools/deps.sh) */
    FILE *p = popen("command -v promtool", "r");
    char path[256] = "";
    if (p) {
        if (!fgets(path, sizeof path, p)) path[0] = '\0';
        pclose(p);
    }
    if (!path[0]) {
        printf("SKIP promtool check metrics: promtool is not installed (Debian's prometheus)\n");
        return;
    }
    char tmp[] = "/tmp/troupe-metrics-XXXXXX";
    int fd = mkstemp(tmp);
    ASSERT_GE(fd, 0);
    m = metrics(rt);
    ASSERT_EQ(write(fd, m.data(), m.size()), (ssize_t)m.size());
    close(fd);
    std::string cmd = std::string("promtool check metrics < ") + tmp + " 2>&1";
    p = popen(cmd.c_str(), "r");
    std::string said;
    char line[512];
    while (p && fgets(line, sizeof line, p))
        said += line;
    int st = p ? pclose(p) : -1;
    unlink(tmp);
    EXPECT_EQ(st, 0) << said;
}

/* Collective ops are counted by backend and op on each rank, with their bytes; a group's
 * ops on two ranks count twice. */
TEST_F(MetricsTest, CollectiveOpsAreCounted) {
    tr_actor_id r[2];
    for (auto &a : r)
        ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "c", 1, &a), 0) << tr_last_error();
    struct {
        const char *name, *backend;
        int ops;
    } groups[] = {{"mshm", "shm", 5}, {"mgloo", "gloo", 3}};
    for (const auto &g : groups) {
        tr_ref j[2];
        for (int k = 0; k < 2; k++) {
            std::string spec = std::string(g.name) + "|2|" + std::to_string(k) + "|" + g.backend;
            ASSERT_EQ(tr_call(rt, r[k], "join_group", spec.data(), spec.size(), &j[k]), 0);
        }
        for (auto &ref : j) {
            ASSERT_EQ(tr_get(rt, ref, 30000, nullptr, nullptr), 0) << tr_last_error();
            tr_ref_release(rt, ref);
        }
        for (int i = 0; i < g.ops; i++) {
            tr_ref o[2];
            std::string spec = std::string(g.name) + "|256";
            for (int k = 0; k < 2; k++)
                ASSERT_EQ(tr_call(rt, r[k], "allreduce_by_name", spec.data(), spec.size(), &o[k]),
                          0);
            for (auto &ref : o) {
                const void *d;
                size_t n;
                ASSERT_EQ(tr_get(rt, ref, 30000, &d, &n), 0) << tr_last_error();
                int64_t v = 0;
                memcpy(&v, d, 8);
                EXPECT_EQ(v, 3) << "1 + 2";
                tr_ref_release(rt, ref);
            }
        }
    }
    std::string m = metrics(rt);
    EXPECT_EQ(value(m, "troupe_collective_ops_total{backend=\"shm\",op=\"allreduce\"}"), 10) << m;
    EXPECT_EQ(value(m, "troupe_collective_bytes_total{backend=\"shm\",op=\"allreduce\"}"),
              10 * 256 * 4);
    EXPECT_EQ(value(m, "troupe_collective_ops_total{backend=\"gloo\",op=\"allreduce\"}"), 6);
    EXPECT_GT(value(m, "troupe_collective_seconds_total{backend=\"gloo\",op=\"allreduce\"}"), 0);
    EXPECT_EQ(value(m, "troupe_collective_errors_total{backend=\"shm\"}"), 0);
    EXPECT_EQ(value(m, "troupe_collective_timeouts_total{backend=\"gloo\"}"), 0);
    /* each rank's op durations, from every process's counters (core/trace.h) */
    EXPECT_EQ(value(m, "troupe_collective_op_seconds_count{backend=\"shm\"}"), 10) << m;
    EXPECT_EQ(value(m, "troupe_collective_op_seconds_bucket{backend=\"gloo\",le=\"+Inf\"}"), 6);
    EXPECT_GT(value(m, "troupe_collective_op_seconds_sum{backend=\"gloo\"}"), 0);
    EXPECT_EQ(value(m, "troupe_calls_pending"), 0) << "every call completed";
    EXPECT_EQ(value(m, "troupe_rpc_errors_total"), 0);
    /* the groups' list: each rank's last op, from the group's shared header */
    std::string dash = dashboard(rt);
    std::string g = http_get(dash, "/api/v1/groups?filter=id%3Dmshm");
    EXPECT_NE(g.find("\"matched\":1"), std::string::npos) << g;
    EXPECT_NE(g.find("\"backend\":\"shm\",\"state\":\"ALIVE\",\"world\":2"), std::string::npos)
        << g;
    EXPECT_NE(g.find("{\"rank\":0,\"pid\":"), std::string::npos) << g;
    size_t fifth = 0;
    for (size_t at = 0;
         (at = g.find("\"last_op\":5,\"last_kind\":\"allreduce\"", at)) != std::string::npos; at++)
        fifth++;
    EXPECT_EQ(fifth, 2u) << "both ranks' last op: the 5th allreduce\n" << g;
    /* a rank's worker goes: what it counted stays */
    EXPECT_EQ(tr_actor_kill(rt, r[0], 1), 0);
    EXPECT_TRUE(eventually(
        10000, [&] { return value(metrics(rt), "troupe_actors{state=\"DEAD\"}") == 1; }));
    m = metrics(rt);
    EXPECT_EQ(value(m, "troupe_collective_ops_total{backend=\"shm\",op=\"allreduce\"}"), 10) << m;
    EXPECT_EQ(value(m, "troupe_collective_op_seconds_count{backend=\"shm\"}"), 10) << m;
}

TEST_F(MetricsTest, GraphsAndPendingCallsAreCounted) {
    tr_actor_id a[2];
    for (auto &x : a) {
        ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "g", 1, &x), 0) << tr_last_error();
        ASSERT_EQ(tr_actor_wait_ready(rt, x, 10000), 0);
    }
    tr_dag *g;
    tr_dag_node in, na, nb;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, a[0], "plus1", &in, 1, &na), 0);
    ASSERT_EQ(tr_dag_bind(g, a[1], "plus1", &na, 1, &nb), 0);
    ASSERT_EQ(tr_dag_output(g, &nb, 1), 0);
    ASSERT_EQ(tr_dag_compile(g, nullptr), 0) << tr_last_error();
    for (int64_t x = 0; x < 7; x++) {
        uint64_t e;
        ASSERT_EQ(tr_dag_execute(g, &x, sizeof x, &e), 0) << tr_last_error();
        const void *d;
        size_t n;
        ASSERT_EQ(tr_dag_get(g, e, 0, 10000, &d, &n), 0) << tr_last_error();
        EXPECT_EQ(tr_dag_release(g, e), 0);
    }
    /* counted while the graph runs: its driver's executions once it caught up, its actors'
     * steps once their loops wait (they count in bursts: dag/exec.c, count_steps) */
    std::string live = metrics(rt);
    for (int i = 0; i < 100 && value(live, "troupe_graph_step_seconds_count") < 14; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        live = metrics(rt);
    }
    EXPECT_EQ(value(live, "troupe_graph_executions_total"), 7) << live;
    EXPECT_EQ(value(live, "troupe_graph_step_seconds_count"), 14) << live;
    /* listed as a graph (its segment), not as a collective group */
    std::string dash = dashboard(rt);
    std::string l = http_get(dash, "/api/v1/graphs");
    EXPECT_NE(l.find("\"state\":\"RUNNING\",\"processes\":3"), std::string::npos) << l;
    EXPECT_NE(http_get(dash, "/api/v1/groups").find("\"total\":0"), std::string::npos);
    EXPECT_NE(http_get(dash, "/api/v1/summary/graphs").find("\"RUNNING\":1"), std::string::npos);
    EXPECT_EQ(tr_dag_destroy(g), 0);
    std::string m = metrics(rt);
    EXPECT_EQ(value(m, "troupe_graph_executions_total"), 7) << m;
    EXPECT_EQ(value(m, "troupe_graph_step_seconds_count"), 14) << "2 steps an execution\n" << m;
    /* three calls wait behind one that sleeps: four pending until it wakes */
    tr_ref r[4];
    int64_t ms = 1500;
    ASSERT_EQ(tr_call(rt, a[0], "sleep_ms", &ms, sizeof ms, &r[0]), 0) << tr_last_error();
    for (int i = 1; i < 4; i++)
        ASSERT_EQ(tr_call(rt, a[0], "pid", "", 0, &r[i]), 0);
    EXPECT_EQ(value(metrics(rt), "troupe_calls_pending"), 4);
    for (auto &ref : r)
        ASSERT_EQ(tr_get(rt, ref, 10000, nullptr, nullptr), 0) << tr_last_error();
    EXPECT_EQ(value(metrics(rt), "troupe_calls_pending"), 0);
}

/* The body of an HTTP reply. */
std::string body_of(const std::string &r) {
    size_t at = r.find("\r\n\r\n");
    return at == std::string::npos ? "" : r.substr(at + 4);
}

TEST_F(MetricsTest, ListsFilterBeforeTheirLimit) {
    std::vector<tr_actor_id> ids;
    for (int i = 0; i < 8; i++) {
        tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
        o.class_label = i < 5 ? "Wide" : "Narrow"; /* what lists and metrics call the class */
        tr_actor_id a;
        ASSERT_EQ(tr_actor_create(rt, "Counter", &o, "c", 1, &a), 0) << tr_last_error();
        ASSERT_EQ(call_i64(rt, a, "add", 1, nullptr), 0);
        ids.push_back(a);
    }
    EXPECT_EQ(tr_actor_kill(rt, ids[0], 1), 0);
    std::string dash = dashboard(rt);
    std::string path = "/api/v1/actors?filter=class_name%3DWide&filter=state%3DALIVE&limit=2";
    std::string r = http_get(dash, path);
    EXPECT_TRUE(eventually(5000, [&] {
        r = body_of(http_get(dash, path));
        return r.find("\"matched\":4") != std::string::npos;
    })) << r;
    EXPECT_NE(r.find("\"total\":8,\"matched\":4,\"offset\":0,\"limit\":2}"), std::string::npos)
        << "8 in all, 4 match, 2 shown: " << r;
    size_t shown = 0;
    for (size_t at = 0; (at = r.find("\"class_name\":\"Wide\"", at)) != std::string::npos; at++)
        shown++;
    EXPECT_EQ(shown, 2u) << r;
    EXPECT_EQ(r.find("Narrow"), std::string::npos);
    /* the same JSON from the CLI (over the node's socket) */
    ASSERT_FALSE(g_troupe_cli.empty()) << "pass the troupe CLI path as argv[1]";
    int st;
    std::string cli =
        run_cmd(g_troupe_cli + " list actors --filter class_name=Wide --filter " +
                    "state=ALIVE --limit 2 --json --address " + tr_runtime_address(rt),
                &st);
    EXPECT_EQ(st, 0) << cli;
    EXPECT_EQ(cli, r + "\n");
    /* get by a prefix of the id; summary by state and class; bad queries refused */
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", ids[5].b[i]);
    r = body_of(http_get(dash, std::string("/api/v1/actors/") + std::string(hex, 8)));
    EXPECT_NE(r.find(std::string("\"item\":{\"id\":\"") + hex + "\",\"class_name\":\"Narrow\""),
              std::string::npos)
        << r;
    r = body_of(http_get(dash, "/api/v1/summary/actors"));
    EXPECT_NE(r.find("\"by_state\":{\"PENDING\":0,\"STARTING\":0,\"ALIVE\":7,\"RESTARTING\":0,"
                     "\"DEAD\":1}"),
              std::string::npos)
        << r;
    EXPECT_NE(r.find("\"Wide\":{\"ALIVE\":4,\"DEAD\":1}"), std::string::npos) << r;
    for (const char *bad : {"/api/v1/actors?filter=nofield%3D1", "/api/v1/actors?limit=-1",
                            "/api/v1/actors?filter=state", "/api/v1/actors?what=1",
                            "/api/v1/actors?filter=state%3DA%ZZ"})
        EXPECT_EQ(http_get(dash, bad).rfind("HTTP/1.1 400 ", 0), 0u) << bad;
    EXPECT_EQ(http_get(dash, "/api/v1/nothing").rfind("HTTP/1.1 404 ", 0), 0u);
    EXPECT_EQ(http_get(dash, "/api/v1/actors/ffffffff").rfind("HTTP/1.1 404 ", 0), 0u);
    r = body_of(http_get(dash, "/api/v1/objects"));
    EXPECT_NE(r.find("\"total\":0"), std::string::npos) << r;
    r = body_of(http_get(dash, "/api/v1/nodes"));
    EXPECT_NE(r.find("\"role\":\"head\""), std::string::npos) << r;
    for (size_t i = 1; i < ids.size(); i++)
        tr_actor_kill(rt, ids[i], 1);
}

/* A rank that never enters an op: the node's verdict (from the ranks' last ops in the
 * group's header) names it while the others wait, over HTTP and `troupe debug
 * collectives`; once it enters, the ranks are in step; once it dies, the verdict says
 * during which op. */
TEST_F(MetricsTest, AHungGroupNamesTheRankThatNeverEntered) {
    tr_actor_id r[2];
    for (auto &a : r)
        ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "c", 1, &a), 0) << tr_last_error();
    tr_ref j[2];
    for (int k = 0; k < 2; k++) {
        std::string spec = "hang|2|" + std::to_string(k) + "|shm";
        ASSERT_EQ(tr_call(rt, r[k], "join_group", spec.data(), spec.size(), &j[k]), 0);
    }
    for (auto &ref : j)
        ASSERT_EQ(tr_get(rt, ref, 30000, nullptr, nullptr), 0) << tr_last_error();
    auto both = [&] {
        tr_ref o[2];
        for (int k = 0; k < 2; k++)
            ASSERT_EQ(tr_call(rt, r[k], "allreduce_by_name", "hang", 4, &o[k]), 0);
        for (auto &ref : o)
            ASSERT_EQ(tr_get(rt, ref, 30000, nullptr, nullptr), 0) << tr_last_error();
    };
    both();
    both();
    std::string dash = dashboard(rt);
    auto verdicts = [&] {
        return body_of(http_get(dash, "/api/v1/groups?filter=id%3Dhang&format=verdicts"));
    };
    EXPECT_EQ(verdicts(), "group hang: every rank at op #2 allreduce\n");
    tr_ref alone; /* rank 0 enters op #3; rank 1 does not (yet) */
    ASSERT_EQ(tr_call(rt, r[0], "allreduce_by_name", "hang", 4, &alone), 0);
    std::string v;
    EXPECT_TRUE(eventually(5000, [&] {
        v = verdicts();
        return v.find("op #3") != std::string::npos;
    }));
    EXPECT_EQ(v, "group hang, op #3 allreduce: rank 1 never entered; its last op was #2\n");
    int st;
    std::string cli =
        run_cmd(g_troupe_cli + " debug collectives --address " + tr_runtime_address(rt), &st);
    EXPECT_EQ(st, 0) << cli;
    EXPECT_NE(cli.find("group hang, op #3 allreduce: rank 1 never entered; its last completed op "
                       "was #2"),
              std::string::npos)
        << cli;
    tr_ref late;
    ASSERT_EQ(tr_call(rt, r[1], "allreduce_by_name", "hang", 4, &late), 0);
    for (tr_ref ref : {alone, late})
        ASSERT_EQ(tr_get(rt, ref, 30000, nullptr, nullptr), 0) << tr_last_error();
    EXPECT_EQ(verdicts(), "group hang: every rank at op #3 allreduce\n");
    int64_t pid = 0;
    ASSERT_EQ(call_i64(rt, r[1], "pid", 0, &pid), 0);
    EXPECT_EQ(tr_actor_kill(rt, r[1], 1), 0);
    EXPECT_TRUE(eventually(10000, [&] {
        v = verdicts();
        return v.find("died") != std::string::npos;
    })) << v;
    EXPECT_EQ(v,
              "group hang: rank 1 (pid " + std::to_string(pid) + ") died during op #3 allreduce\n");
}

TEST_F(MetricsTest, ItsHttpPortRefusesWhatItShould) {
    std::string dash = dashboard(rt);
    ASSERT_NE(dash, "");
    EXPECT_EQ(http_get(dash, "/nothing").rfind("HTTP/1.1 404 ", 0), 0u);
    EXPECT_EQ(http_get(dash, "/metrics", "evil.example:80").rfind("HTTP/1.1 401 ", 0), 0u)
        << "a web page elsewhere (DNS rebinding) cannot read it without the token";
    std::string r = http_get(dash, "/api/v1/status");
    EXPECT_EQ(r.rfind("HTTP/1.1 200 ", 0), 0u);
    EXPECT_NE(r.find("\"dashboard\":\"" + dash + "\""), std::string::npos) << r;
}

TEST(MetricsOff, NoPortWhenAskedForNone) {
    tr_config *cfg = test_config_with({{"metrics_port", "-1"}});
    tr_runtime *rt;
    ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
    tr_config_destroy(cfg);
    EXPECT_EQ(dashboard(rt), "");
    tr_shutdown(rt);
    /* any address: served with the node's own token, in its session directory (0600) */
    cfg = test_config_with({{"metrics_host", "0.0.0.0"}});
    ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
    tr_config_destroy(cfg);
    EXPECT_EQ(dashboard(rt).rfind("http://0.0.0.0:", 0), 0u) << dashboard(rt);
    std::string dir = tr_runtime_address(rt);
    dir.resize(dir.rfind('/'));
    struct stat sb;
    ASSERT_EQ(stat((dir + "/metrics-token").c_str(), &sb), 0);
    EXPECT_EQ(sb.st_mode & 0777, 0600u);
    EXPECT_EQ(sb.st_size, 65) << "64 hex digits and a newline";
    tr_shutdown(rt);
}

} // namespace
