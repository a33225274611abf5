/* tests/timeline_test.cc - the timeline and the collective flight recorder (core/trace.h)
 * over real actor processes. The timeline of a run with calls, a collective group and a
 * compiled graph, from tr_timeline_dump and from `troupe timeline`, keeps Perfetto's JSON
 * rules (tools/trace_check.py: slices nest per track, every flow has both ends) and shows
 * what the run did. A rank that skips an allreduce is named by `troupe debug collectives`
 * while the others wait, and in the dump their timeout writes; a rank killed with SIGKILL
 * inside an op is named, with the op, in the survivors' dump.
 *
 * argv[1]: the troupe CLI; $TRACE_CHECK: tools/trace_check.py. */
#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_actors.h"
#include "troupe/dag.h"

namespace {

const char *checker() {
    const char *p = getenv("TRACE_CHECK");
    return p ? p : "";
}

std::string slurp(const std::string &path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

std::string session_of(tr_runtime *rt) {
    std::string dir = tr_runtime_address(rt);
    return dir.substr(0, dir.rfind('/'));
}

/* The flight recorder's dumps in the session, concatenated. */
std::string dumps(tr_runtime *rt) {
    std::string dir = session_of(rt) + "/flight", all;
    DIR *d = opendir(dir.c_str());
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.') all += slurp(dir + "/" + e->d_name) + "\n";
    if (d) closedir(d);
    return all;
}

/* trace_check.py's verdict on path: its output, and status through *st. */
std::string check_trace(const std::string &path, const std::string &expects, int *st) {
    return run_cmd("python3 " + std::string(checker()) + " " + path + " " + expects + " 2>&1", st);
}

class Timeline : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    }
    void TearDown() override {
        tr_shutdown(rt);
    }
    std::vector<tr_actor_id> counters(int n) {
        std::vector<tr_actor_id> v(n);
        for (auto &a : v) {
            EXPECT_EQ(tr_actor_create(rt, "Counter", nullptr, "c", 1, &a), 0) << tr_last_error();
            EXPECT_EQ(tr_actor_wait_ready(rt, a, 10000), 0) << tr_last_error();
        }
        return v;
    }
    /* joins actors a to group `name` (shm), as ranks 0.. */
    void join(const std::vector<tr_actor_id> &a, const std::string &name) {
        std::vector<tr_ref> j(a.size());
        for (size_t k = 0; k < a.size(); k++) {
            std::string spec =
                name + "|" + std::to_string(a.size()) + "|" + std::to_string(k) + "|shm";
            ASSERT_EQ(tr_call(rt, a[k], "join_group", spec.data(), spec.size(), &j[k]), 0);
        }
        for (auto &ref : j)
            ASSERT_EQ(tr_get(rt, ref, 30000, nullptr, nullptr), 0) << tr_last_error();
    }
    /* every actor of a allreduces in group `spec` once */
    void allreduce(const std::vector<tr_actor_id> &a, const std::string &spec) {
        std::vector<tr_ref> o(a.size());
        for (size_t k = 0; k < a.size(); k++)
            ASSERT_EQ(tr_call(rt, a[k], "allreduce_by_name", spec.data(), spec.size(), &o[k]), 0);
        for (auto &ref : o)
            ASSERT_EQ(tr_get(rt, ref, 30000, nullptr, nullptr), 0) << tr_last_error();
    }
    std::string debug_collectives() {
        int st;
        std::string out = run_cmd(
            g_troupe_cli + " debug collectives --address " + tr_runtime_address(rt) + " 2>&1", &st);
        EXPECT_EQ(st, 0) << out;
        return out;
    }
    tr_runtime *rt = nullptr;
};

TEST_F(Timeline, CallsACollectiveAndAGraphKeepPerfettosRules) {
    ASSERT_TRUE(*checker()) << "set TRACE_CHECK to tools/trace_check.py";
    auto a = counters(3);
    for (int i = 0; i < 20; i++) { /* calls, each a flow from its submission to its run */
        int64_t out;
        ASSERT_EQ(call_i64(rt, a[i % 3], "plus1", i, &out), 0) << tr_last_error();
        ASSERT_EQ(out, i + 1);
    }
    join({a[0], a[1]}, "tl");
    for (int i = 0; i < 3; i++)
        allreduce({a[0], a[1]}, "tl|256");
    tr_dag *g;
    tr_dag_node in, na, nb;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, a[2], "plus1", &in, 1, &na), 0);
    ASSERT_EQ(tr_dag_bind(g, a[0], "plus1", &na, 1, &nb), 0);
    ASSERT_EQ(tr_dag_output(g, &nb, 1), 0);
    ASSERT_EQ(tr_dag_compile(g, nullptr), 0) << tr_last_error();
    for (int64_t x = 0; x < 4; x++) {
        uint64_t e;
        ASSERT_EQ(tr_dag_execute(g, &x, sizeof x, &e), 0) << tr_last_error();
        const void *d;
        size_t n;
        ASSERT_EQ(tr_dag_get(g, e, 0, 10000, &d, &n), 0) << tr_last_error();
        int64_t v;
        memcpy(&v, d, 8);
        EXPECT_EQ(v, x + 2);
        EXPECT_EQ(tr_dag_release(g, e), 0);
    }
    /* pipelined (4 in flight): steps that find their input waiting, stamped in ticks and
     * recorded in bursts (core/trace.h), keep the same rules */
    uint64_t pending[40];
    int head = 0, tail = 0;
    for (int64_t x = 0; x < 40 || head < tail;) {
        if (x < 40 && tail - head < 4) {
            ASSERT_EQ(tr_dag_execute(g, &x, sizeof x, &pending[tail++]), 0) << tr_last_error();
            x++;
            continue;
        }
        const void *d;
        size_t n;
        ASSERT_EQ(tr_dag_get(g, pending[head], 0, 10000, &d, &n), 0) << tr_last_error();
        int64_t v;
        memcpy(&v, d, 8);
        EXPECT_EQ(v, head + 2) << "execution " << head << " of the pipelined 40";
        EXPECT_EQ(tr_dag_release(g, pending[head++]), 0);
    }
    EXPECT_EQ(tr_dag_destroy(g), 0) << tr_last_error();
    tr_ref obj;
    std::string big(100000, 'x');
    ASSERT_EQ(tr_put(rt, big.data(), big.size(), &obj), 0);
    const void *d;
    size_t n;
    ASSERT_EQ(tr_get(rt, obj, 1000, &d, &n), 0);
    EXPECT_EQ(n, big.size());
    tr_ref_release(rt, obj);

    std::string path = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
                       "/timeline-" + std::to_string(getpid()) + ".json";
    ASSERT_EQ(tr_timeline_dump(rt, path.c_str()), 0) << tr_last_error();
    int st;
    /* (each call: a submission slice, a run slice, a flow; each rank's op; each step) */
    std::string out = check_trace(path,
                                  "--expect cat:submit=20 --expect name:plus1=40 "
                                  "--expect flows=23 --expect cat:collective=6 "
                                  "--expect cat:graph=88 --expect cat:put=1 --expect cat:get=1 "
                                  "--expect processes=4",
                                  &st);
    EXPECT_EQ(st, 0) << out;
    std::string json = slurp(path);
    EXPECT_NE(json.find("\"name\":\"Counter actor "), std::string::npos) << "a track per actor";
    EXPECT_NE(json.find("\"name\":\"allreduce\""), std::string::npos);
    EXPECT_NE(json.find("\"bytes\":100000"), std::string::npos) << "the put's size";
    EXPECT_NE(json.find("\"ph\":\"s\",\"cat\":\"flow\",\"name\":\"op\""), std::string::npos)
        << "arrows between the ranks of an op";
    /* times count from the first event (doubles keep ns there), whose wall clock is given */
    size_t at = json.find("\"base_unix_ns\":");
    ASSERT_NE(at, std::string::npos) << json.substr(0, 300);
    long long base = strtoll(json.c_str() + at + 15, nullptr, 10);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    EXPECT_LT(llabs(now.tv_sec - base / 1000000000), 300) << base;
    unlink(path.c_str());

    /* the CLI reads the same rings */
    std::string cli = path + ".cli";
    out = run_cmd(g_troupe_cli + " timeline --address " + tr_runtime_address(rt) + " -o " + cli +
                      " 2>&1",
                  &st);
    ASSERT_EQ(st, 0) << out;
    out = check_trace(cli, "--expect cat:submit=20 --expect cat:collective=6", &st);
    EXPECT_EQ(st, 0) << out;
    unlink(cli.c_str());
    EXPECT_EQ(tr_timeline_dump(rt, nullptr), TR_EINVAL);
    EXPECT_EQ(tr_timeline_dump(rt, "/nonexistent-dir/x.json"), TR_EIO);
}

TEST_F(Timeline, ARankThatSkipsAnOpIsNamedWithinItsTimeout) {
    auto a = counters(2);
    join(a, "skip");
    allreduce(a, "skip");
    allreduce(a, "skip");
    EXPECT_NE(debug_collectives().find("group skip: every rank completed op #2 allreduce"),
              std::string::npos)
        << debug_collectives();
    tr_ref alone; /* rank 0 enters op #3 (giving up after 3 s); rank 1 never does */
    ASSERT_EQ(
        tr_call(rt, a[0], "allreduce_by_name", "skip|1|1|3000", strlen("skip|1|1|3000"), &alone),
        0);
    const std::string verdict =
        "group skip, op #3 allreduce: rank 1 never entered; its last completed op was #2";
    std::string v;
    EXPECT_TRUE(eventually(2500, [&] { /* while rank 0 still waits */
                                       v = debug_collectives();
                                       return v.find(verdict) != std::string::npos;
    })) << v;
    int st;
    std::string json = run_cmd(
        g_troupe_cli + " debug collectives --json --address " + tr_runtime_address(rt), &st);
    EXPECT_NE(json.find("\"state\":\"started\""), std::string::npos) << json;
    EXPECT_NE(json.find("\"method\":\"allreduce_by_name\""), std::string::npos) << json;
    /* its timeout: rank 0's op fails, and its dump says why */
    EXPECT_EQ(tr_get(rt, alone, 30000, nullptr, nullptr), TR_ETASK);
    EXPECT_NE(std::string(tr_last_error()).find("TR_ETIMEDOUT"), std::string::npos)
        << tr_last_error();
    std::string dump;
    EXPECT_TRUE(eventually(5000, [&] {
        dump = dumps(rt);
        return dump.find(verdict) != std::string::npos;
    })) << dump;
    EXPECT_NE(dump.find("\"why\":\"timeout\""), std::string::npos) << dump;
}

TEST_F(Timeline, TheSurvivorsDumpSaysWhichRankDiedDuringWhichOp) {
    auto a = counters(3);
    join(a, "k9");
    allreduce(a, "k9");
    int64_t pid = 0;
    ASSERT_EQ(call_i64(rt, a[2], "pid", 0, &pid), 0);
    tr_ref doomed; /* rank 2 enters op #2 and waits in it */
    ASSERT_EQ(
        tr_call(rt, a[2], "allreduce_by_name", "k9|1|1|30000", strlen("k9|1|1|30000"), &doomed), 0);
    std::string v;
    EXPECT_TRUE(eventually(5000, [&] {
        v = debug_collectives();
        return v.find("op #2 allreduce: rank 0 never entered") != std::string::npos;
    })) << v;
    ASSERT_EQ(kill((pid_t)pid, SIGKILL), 0);
    EXPECT_NE(tr_get(rt, doomed, 30000, nullptr, nullptr), 0);
    /* the survivors go on: op #2 may complete (rank 2's part was in before it died), op #3
     * cannot, and they dump */
    std::vector<tr_ref> o(4);
    for (int k = 0; k < 4; k++)
        ASSERT_EQ(tr_call(rt, a[k % 2], "allreduce_by_name", "k9|1|1|20000", strlen("k9|1|1|20000"),
                          &o[k]),
                  0);
    EXPECT_EQ(tr_get(rt, o[2], 30000, nullptr, nullptr), TR_ETASK);
    EXPECT_EQ(tr_get(rt, o[3], 30000, nullptr, nullptr), TR_ETASK);
    const std::string verdict = "group k9, op #2 allreduce: rank 2 (pid " + std::to_string(pid) +
                                ") died during it; its last completed op was #1";
    std::string dump;
    EXPECT_TRUE(eventually(5000, [&] {
        dump = dumps(rt);
        return dump.find(verdict) != std::string::npos;
    })) << dump;
    EXPECT_NE(debug_collectives().find(verdict), std::string::npos) << debug_collectives();
}

TEST_F(Timeline, SIGUSR1ToTheNodeDumpsEveryGroup) {
    auto a = counters(2);
    join(a, "usr1");
    allreduce(a, "usr1");
    int64_t node = status_pid_of(rt);
    ASSERT_GT(node, 0);
    ASSERT_EQ(kill((pid_t)node, SIGUSR1), 0);
    std::string dump;
    EXPECT_TRUE(eventually(5000, [&] {
        dump = dumps(rt);
        return dump.find("\"why\":\"SIGUSR1\"") != std::string::npos;
    })) << dump;
    EXPECT_NE(dump.find("group usr1: every rank completed op #1 allreduce"), std::string::npos)
        << dump;
}

} // namespace

namespace {

/* The durable event log (core/events.h): a session's actors, groups and node as its log
 * leaves them, read by `troupe list --session DIR` after the node is gone. */
TEST(EventLog, ASessionAnswersAfterItsNodeIsGone) {
    tr_runtime *rt;
    ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    std::string dir = session_of(rt);
    std::vector<tr_actor_id> a(3);
    for (auto &x : a) {
        ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "c", 1, &x), 0) << tr_last_error();
        ASSERT_EQ(tr_actor_wait_ready(rt, x, 10000), 0) << tr_last_error();
    }
    std::vector<tr_ref> j(2);
    for (int k = 0; k < 2; k++) {
        std::string spec = "logged|2|" + std::to_string(k) + "|shm";
        ASSERT_EQ(tr_call(rt, a[k], "join_group", spec.data(), spec.size(), &j[k]), 0);
    }
    for (auto &ref : j)
        ASSERT_EQ(tr_get(rt, ref, 30000, nullptr, nullptr), 0) << tr_last_error();
    EXPECT_EQ(tr_actor_kill(rt, a[0], 1), 0);
    EXPECT_TRUE(eventually(10000, [&] {
        tr_actor_details d = TR_ACTOR_DETAILS_INIT;
        return tr_actor_info(rt, a[0], &d) == 0 && d.state == TR_ACTOR_DEAD;
    }));
    /* DEAD is set when the kill is asked for; the group hears of it when the process's
     * connection closes, which a slow (sanitized) worker may do after a prompt shutdown */
    EXPECT_TRUE(eventually(10000, [&] {
        std::ifstream f(dir + "/events.log");
        std::stringstream ss;
        ss << f.rdbuf();
        return ss.str().find("\"group_rank_died\"") != std::string::npos;
    })) << "the node never logged rank 0's death";
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", a[0].b[i]);
    tr_shutdown(rt);

    /* the node is gone: its session keeps the log, nothing else of it */
    EXPECT_EQ(access((dir + "/node.sock").c_str(), F_OK), -1);
    EXPECT_EQ(access((dir + "/events.log").c_str(), R_OK), 0);
    auto list = [&](const std::string &what, int *st) {
        return run_cmd(g_troupe_cli + " list " + what + " --session " + dir + " 2>&1", st);
    };
    int st;
    std::string out = list("actors --json --filter state=DEAD", &st);
    ASSERT_EQ(st, 0) << out;
    EXPECT_NE(out.find("\"total\":3,\"matched\":3"), std::string::npos) << out;
    EXPECT_NE(out.find("\"class_name\":\"Counter\""), std::string::npos) << out;
    out =
        run_cmd(g_troupe_cli + " get actors " + std::string(hex) + " --json --session " + dir, &st);
    ASSERT_EQ(st, 0) << out;
    EXPECT_NE(out.find("\"state\":\"DEAD\""), std::string::npos) << out;
    EXPECT_NE(out.find("\"reason\":\"killed"), std::string::npos) << out;
    out = list("groups --json", &st);
    EXPECT_NE(out.find("\"id\":\"logged\""), std::string::npos) << out;
    EXPECT_NE(out.find("\"state\":\"BROKEN\""), std::string::npos) << "rank 0 was killed: " << out;
    out = list("nodes --json", &st);
    EXPECT_NE(out.find("\"state\":\"STOPPED\""), std::string::npos) << out;
    out = list("events --filter event=actor_created", &st);
    EXPECT_EQ(st, 0) << out;
    EXPECT_NE(out.find("(3 shown of 3 matched"), std::string::npos) << out;
    out = list("objects", &st);
    EXPECT_NE(st, 0) << "a log knows no objects: " << out;
    run_cmd("rm -rf " + dir, &st);
}

} // namespace
