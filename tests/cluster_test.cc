/* tests/cluster_test.cc - a cluster of real nodes on a real network, on one machine: a head
 * and two nodes, each in a network namespace of its own (veth pairs on a bridge in a fourth
 * namespace, 10.213.0.0/24) and a mount namespace of its own with a private /tmp, so no
 * node can reach another's Unix socket: what passes here crossed the network. Membership
 * (`troupe start --head --bind --port --token`, `troupe start --address --token`,
 * `troupe status`): every node listed with the address it faces the head with; a wrong or
 * missing token refused; a node killed, a link cut and brought back, the head killed.
 * Skips, saying why, where namespaces cannot be made (not root, no `ip`). */
#include <gtest/gtest.h>

#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "tests/test_actors.h"
#include "tools/netns.h"

namespace {

/* No sanitizer's report in a driver's output (ASan, TSan: "...Sanitizer"; UBSan:
 * "runtime error"): the drivers run as processes of their own. */
bool clean(const std::string &out) {
    return out.find("Sanitizer") == std::string::npos &&
           out.find("runtime error") == std::string::npos;
}

/* A whole file ("" if it cannot be read): a driver's log. */
std::string read_all(const std::string &path) {
    std::string s;
    if (FILE *f = fopen(path.c_str(), "r")) {
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0)
            s.append(buf, n);
        fclose(f);
    }
    return s;
}

class Cluster : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        char real[4096], why[512];
        if (g_troupe_cli.empty() || !realpath(g_troupe_cli.c_str(), real)) {
            skip_why = "no troupe CLI path given to the test";
            return;
        }
        cli = real;
        /* TSan builds: the nodes run gRPC too. core/tsan_grpc.supp, copied where a node
         * sees it (its /tmp is its own, and the sources may live under /tmp) */
        FILE *in_f = fopen("core/tsan_grpc.supp", "r");
        const char *tdir = getenv("TEST_TMPDIR");
        std::string supp = std::string(tdir && strncmp(tdir, "/tmp/", 5) != 0 ? tdir : "/dev/shm") +
                           "/tsan_grpc." + std::to_string(getpid()) + ".supp";
        FILE *out_f = in_f ? fopen(supp.c_str(), "w") : nullptr;
        for (int c; in_f && out_f && (c = fgetc(in_f)) != EOF;)
            fputc(c, out_f);
        if (in_f) fclose(in_f);
        if (out_f) {
            fclose(out_f);
            setenv("TSAN_OPTIONS", ("suppressions=" + supp).c_str(), 1);
            supp_path = supp;
        }
        if (tr_netns_up(&net, 3, why, sizeof why) != 0) skip_why = why;
    }

    static void TearDownTestSuite() {
        for (int i = 0; i < net.n; i++) /* the nodes first, then the namespaces */
            in(i, "sh -c 'for s in /tmp/troupe-*/n*/node.sock; do " + cli +
                      " stop --address $s; done'");
        tr_netns_down(&net);
        if (!supp_path.empty()) unlink(supp_path.c_str());
    }

    void SetUp() override {
        if (!skip_why.empty()) GTEST_SKIP() << skip_why;
    }

    /* cmd inside node i's namespaces (network, and mount: its own /tmp) */
    static std::string in(int i, const std::string &cmd, int *status = nullptr) {
        char *out = nullptr;
        int st = tr_netns_run(&net, i, cmd.c_str(), &out);
        std::string s = out ? out : "";
        free(out);
        if (status) *status = st;
        return s;
    }
    static std::string status_of(int i) {
        return in(i, cli + " status");
    }
    static std::string link_of(int i) {
        return std::string(net.tag) + "v" + std::to_string(i);
    }

    static std::string skip_why, cli, supp_path;
    static tr_netns net;
};

std::string Cluster::skip_why, Cluster::cli, Cluster::supp_path;
tr_netns Cluster::net;

/* Actors across nodes: a driver on node a (its own node's socket, nothing else) places
 * actors on node b and on the head by their "node:IP" resources and calls them over the
 * network (the checks are the driver's: run_cluster_driver); then node b is killed under a
 * call in flight, and a new node b's link is cut under another. These nodes keep their sessions in
 * /tmp/c2 and are stopped at the end. */
TEST_F(Cluster, ActorsAreCalledAcrossNodes) {
    int st;
    char self[4096]; /* the drivers: each node runs their actors (--worker-path) */
    ASSERT_TRUE(realpath("/proc/self/exe", self));
    const std::string tmp = " --tmpdir /tmp/c2 --worker-path " + std::string(self);
    for (int i = 0; i < 3; i++)
        in(i, "mkdir -p /tmp/c2");
    std::string out =
        in(0, cli + " start --head --bind 10.213.0.1 --port 7401 --token t0k" + tmp, &st);
    ASSERT_EQ(st, 0) << out;
    for (int i = 1; i < 3; i++) {
        out = in(i, cli + " start --address 10.213.0.1:7401 --token t0k" + tmp, &st);
        ASSERT_EQ(st, 0) << out;
    }
    auto status_c2 = [&](int i) { return in(i, cli + " status --tmpdir /tmp/c2"); };
    ASSERT_TRUE(eventually(5000, [&] { return count(status_c2(0), "\"alive\":true") == 3; }))
        << status_c2(0);
    auto driver = [&](const std::string &spec, const std::string &tail) {
        return "sh -c 'CLUSTER_DRIVER=\"" + spec +
               "\" TR_NODE=$(ls /tmp/c2/troupe-*/n*/node.sock | head -1) " + self + tail + "'";
    };
    out = in(1, driver("calls|10.213.0.3|10.213.0.1", " 2>&1"), &st);
    EXPECT_EQ(st, 0) << out;
    for (const char *what : {"placed",
                             "info names the node",
                             "call",
                             "10000 calls in order",
                             "echo 1",
                             "echo 1000",
                             "echo 102401",
                             "echo 1048576",
                             "echo 16777216",
                             "object argument 1",
                             "object argument 1048579",
                             "object argument 67108864",
                             "tr_get there of an object here",
                             "tr_get here of an object there",
                             "an object whose maker died: its owner died",
                             "shm across nodes is refused",
                             "a gloo group over three nodes: every op",
                             "a two-level group over three nodes: every op",
                             "auto across nodes",
                             "a compiled graph across three nodes",
                             "a graph across nodes torn down",
                             "a graph's value of 100 bytes across nodes",
                             "a graph's value of 5000 bytes across nodes",
                             "a graph's value of 3145728 bytes across nodes",
                             "a graph whose actor on another node dies fails",
                             "an object from one node, through here, to a third",
                             "an object borrowed on another node outlives our release, and "
                             "goes after theirs",
                             "what a borrower on another node held goes when it dies",
                             "an actor whose handle is borrowed on another node lives on "
                             "after ours goes, and ends when theirs does",
                             "a task placed on another node by its resources, with an object "
                             "from here",
                             "another node's ref inside an object made here stays while the "
                             "object does",
                             "a result with a ref in it, from another node, got here and on a "
                             "third",
                             "several results with refs in them, from another node",
                             "an actor on another node keeps its max_concurrency, groups "
                             "and binding data",
                             "a call in flight to an actor on another node that dies goes "
                             "again (max_task_retries)",
                             "a method's error",
                             "an unknown method",
                             "fits nowhere",
                             "by name",
                             "actor to actor across nodes",
                             "killed"})
        EXPECT_NE(out.find(std::string("OK ") + what), std::string::npos) << what << "\n" << out;
    if (!kSanitized) { /* (256 MiB: the plain build's only) */
        EXPECT_NE(out.find("OK object argument 268435456"), std::string::npos) << out;
    }
    printf("%s", out.c_str()); /* the driver's figures, for the log */
    /* (sanitizer builds: a driver's report is in its output, not this process's) */
    EXPECT_TRUE(clean(out)) << out;
    /* a driver given the head's address (no node of its own started by hand) */
    out = in(1,
             "sh -c 'CLUSTER_DRIVER=\"remote|10.213.0.3|10.213.0.1\" TR_NODE=10.213.0.1:7401 "
             "TR_TOKEN=t0k " +
                 std::string(self) + " 2>&1'",
             &st);
    EXPECT_EQ(st, 0) << out;
    for (const char *what :
         {"an actor placed by the head", "a driver that joined by the head's address calls and "
                                         "passes objects"})
        EXPECT_NE(out.find(std::string("OK ") + what), std::string::npos) << what << "\n" << out;
    printf("%s", out.c_str());
    EXPECT_TRUE(clean(out)) << out;
    /* the driver has left: the actors it made on b and on the head go with it */
    /* (but task workers: a node's pools are shared by every process, and stay warm) */
    auto alive_actors = [&](int i) {
        std::string st = status_c2(i);
        return count(st, "\"state\":\"ALIVE\"") - count(st, "\"class\":\"__troupe_tasks\"");
    };
    EXPECT_TRUE(eventually(5000, [&] { return alive_actors(0) == 0 && alive_actors(2) == 0; }))
        << status_c2(0) << "\n"
        << status_c2(2);

    /* a detached actor made on b by a driver here outlives that driver; an ordinary one
     * does not */
    out = in(1, driver("detach|10.213.0.3|10.213.0.1", " 2>&1"), &st);
    EXPECT_EQ(st, 0) << out;
    out = in(1, driver("finddetached|10.213.0.3|10.213.0.1", " 2>&1"), &st);
    EXPECT_EQ(st, 0) << out;
    for (const char *what : {"a detached actor on another node outlives its creator",
                             "an ordinary one there went with it"})
        EXPECT_NE(out.find(std::string("OK ") + what), std::string::npos) << what << "\n" << out;
    EXPECT_TRUE(clean(out)) << out;
    EXPECT_TRUE(eventually(5000, [&] { return alive_actors(2) == 0; })) << status_c2(2);

    /* node b killed under a call in flight: the caller hears within seconds */
    std::string marker = "/dev/shm/trc" + std::to_string(getpid());
    std::string log = marker + ".log";
    unlink(marker.c_str());
    in(1, driver("hold|10.213.0.3|10.213.0.1|" + marker, " >" + log + " 2>&1 &"));
    EXPECT_TRUE(eventually(30000, [&] { return access(marker.c_str(), F_OK) == 0; }));
    /* the head's table counts each node's actors (b: the held actor and two ranks) */
    auto actors_at = [&](const std::string &st, const std::string &ip) {
        size_t at = st.find("\"address\":\"" + ip + ":");
        at = at == std::string::npos ? at : st.find("\"actors\":", at);
        return at == std::string::npos ? -1 : atoi(st.c_str() + at + 9);
    };
    int pooled = count(status_c2(2), "\"class\":\"__troupe_tasks\""); /* (warm task workers) */
    EXPECT_TRUE(eventually(5000, [&] {
        return actors_at(status_c2(0), "10.213.0.3") == 3 + pooled;
    })) << status_c2(0);
    EXPECT_NE(status_c2(0).find("\"objects\":"), std::string::npos);
    std::string b = status_c2(2);
    std::string pid = b.substr(b.find("\"pid\":") + 6);
    pid = pid.substr(0, pid.find(','));
    in(2, "kill -9 " + pid);
    auto read_log = [&] { return read_all(log); };
    EXPECT_TRUE(eventually(60000, [&] {
        return read_log().find("the cluster goes on") != std::string::npos;
    })) << read_log();
    out = read_log();
    EXPECT_NE(out.find("OK an allreduce in flight fails when a rank's node dies: TR_ETASK"),
              std::string::npos)
        << out;
    /* the four ranks left in allreduces hear it at once, not at a timeout */
    EXPECT_EQ(count(out, "fails when a rank's node dies: TR_ETASK: allreduce TR_EPEER_DIED"), 4)
        << out;
    for (const char *what :
         {"placed", "call", "a group across the nodes", "the call in flight dies with its node",
          "an allreduce in flight fails when a rank's node dies",
          "a two-level allreduce in flight fails when a rank's node dies", "a later call fails too",
          "an object made there", "an object of the lost node: its owner died",
          "the cluster goes on"})
        EXPECT_NE(out.find(std::string("OK ") + what), std::string::npos) << what << "\n" << out;
    printf("%s", out.c_str());
    EXPECT_TRUE(clean(out)) << out;
    unlink(marker.c_str());
    unlink(log.c_str());

    /* a new node b, and its link cut under a call in flight: the same, within seconds */
    out = in(2, cli + " start --address 10.213.0.1:7401 --token t0k" + tmp, &st);
    ASSERT_EQ(st, 0) << out;
    in(1, driver("hold|10.213.0.3|10.213.0.1|" + marker, " >" + log + " 2>&1 &"));
    EXPECT_TRUE(eventually(30000, [&] { return access(marker.c_str(), F_OK) == 0; })) << read_log();
    in(2, "ip link set " + link_of(2) + " down");
    EXPECT_TRUE(eventually(60000, [&] {
        return read_log().find("the cluster goes on") != std::string::npos;
    })) << read_log();
    in(2, "ip link set " + link_of(2) + " up");
    out = read_log();
    /* the head counts b lost (3 s): the ranks here stop waiting on b's then, not at their
     * ops' timeout (10 s) */
    EXPECT_EQ(count(out, "fails when a rank's node dies: TR_ETASK: allreduce TR_EPEER_DIED"), 4)
        << out;
    for (const char *what :
         {"placed", "call", "a group across the nodes", "the call in flight dies with its node",
          "an allreduce in flight fails when a rank's node dies",
          "a two-level allreduce in flight fails when a rank's node dies", "a later call fails too",
          "an object made there", "an object of the lost node: its owner died",
          "the cluster goes on"})
        EXPECT_NE(out.find(std::string("OK ") + what), std::string::npos) << what << "\n" << out;
    printf("%s", out.c_str());
    EXPECT_TRUE(clean(out)) << out;
    unlink(marker.c_str());
    unlink(log.c_str());
    for (int i = 0; i < 3; i++)
        in(i, "sh -c 'for s in /tmp/c2/troupe-*/n*/node.sock; do " + cli +
                  " stop --address $s; done'");
}

TEST_F(Cluster, NodesJoinOverTheNetworkAndFailuresAreSeen) {
    int st;
    for (int i = 0; i < 3; i++) /* tmpdirs for the starts that must fail (their logs) */
        in(i, "mkdir -p /tmp/x /tmp/w /tmp/w2");
    std::string out =
        in(0, cli + " start --head --bind 10.213.0.1 --port 7301 --token s3cret", &st);
    ASSERT_EQ(st, 0) << out;
    /* given no token, a head makes one; another machine's node needs it given */
    out = in(0, cli + " start --head --bind 10.213.0.1 --port 7302 --tmpdir /tmp/x", &st);
    EXPECT_EQ(st, 0) << out;
    size_t at = out.find("cluster token: ");
    ASSERT_NE(at, std::string::npos) << out;
    std::string file = out.substr(at + 15, out.find(' ', at + 15) - (at + 15));
    std::string made = in(0, "cat " + file);
    EXPECT_EQ(made.size(), 65u) << made; /* 64 hex digits and a newline */
    out = in(2, cli + " start --address 10.213.0.1:7302 --tmpdir /tmp/w", &st);
    EXPECT_NE(st, 0) << out;
    EXPECT_NE(out.find("--token-file"), std::string::npos) << out;
    in(2, "sh -c 'umask 077; printf %s " + made.substr(0, 64) + " > /tmp/w/tok'");
    out = in(2, cli + " start --address 10.213.0.1:7302 --token-file /tmp/w/tok --tmpdir /tmp/w",
             &st);
    EXPECT_EQ(st, 0) << out;
    in(2, cli + " stop --tmpdir /tmp/w");
    in(0, cli + " stop --tmpdir /tmp/x");
    for (int i = 1; i < 3; i++) {
        out = in(i, cli + " start --address 10.213.0.1:7301 --token s3cret", &st);
        ASSERT_EQ(st, 0) << out;
    }
    /* a wrong token, and none: refused, and the head's table does not change */
    out = in(2, cli + " start --address 10.213.0.1:7301 --token wrong --tmpdir /tmp/w", &st);
    EXPECT_NE(st, 0);
    EXPECT_NE(out.find("refused"), std::string::npos) << out;
    out = in(2, cli + " start --address 10.213.0.1:7301 --tmpdir /tmp/w2", &st);
    EXPECT_NE(st, 0);
    std::string head = status_of(0);
    EXPECT_EQ(count(head, "\"alive\":true"), 3) << head;
    EXPECT_NE(head.find("\"address\":\"10.213.0.2:"), std::string::npos) << head;
    EXPECT_NE(head.find("\"address\":\"10.213.0.3:"), std::string::npos) << head;
    EXPECT_NE(head.find("\"role\":\"head\""), std::string::npos) << head;
    EXPECT_TRUE(eventually(3000, [] {
        std::string a = status_of(1);
        return count(a, "\"alive\":true") == 3 && a.find("\"head_alive\":true") != a.npos;
    })) << status_of(1);
    /* each node sees only its own /tmp: one live session in each (ended ones keep their
     * event log, not their socket) */
    EXPECT_EQ(count(in(1, "sh -c 'ls /tmp/troupe-*/n[0-9]*-*/node.sock'"), "/tmp/troupe-"), 1);
    /* the head's status, asked over the network from node b (its socket is out of reach) */
    std::string remote = in(2, cli + " status --address 10.213.0.1:7301 --token s3cret", &st);
    EXPECT_EQ(st, 0) << remote;
    EXPECT_NE(remote.find("\"role\":\"head\""), std::string::npos) << remote;
    EXPECT_EQ(count(remote, "\"alive\":true"), 3) << remote;
    remote = in(2, cli + " status --address 10.213.0.1:7301 --token nope", &st);
    EXPECT_NE(st, 0);
    EXPECT_NE(remote.find("refused"), std::string::npos) << remote;

    /* a node killed: the head says it is lost within seconds */
    std::string a = status_of(1);
    std::string pid = a.substr(a.find("\"pid\":") + 6);
    pid = pid.substr(0, pid.find(','));
    in(1, "kill -9 " + pid);
    EXPECT_TRUE(eventually(6000, [] { return count(status_of(0), "\"alive\":false") == 1; }))
        << status_of(0);

    /* node b's link cut: both sides notice; back up: b is alive again */
    in(2, "ip link set " + link_of(2) + " down");
    EXPECT_TRUE(eventually(6000, [] { return count(status_of(0), "\"alive\":false") == 2; }))
        << status_of(0);
    EXPECT_TRUE(eventually(6000, [] {
        return status_of(2).find("\"head_alive\":false") != std::string::npos;
    })) << status_of(2);
    in(2, "ip link set " + link_of(2) + " up");
    EXPECT_TRUE(eventually(15000, [] { return count(status_of(0), "\"alive\":true") == 2; }))
        << status_of(0);

    /* the head killed: b says so within seconds, and keeps running */
    std::string h = status_of(0);
    pid = h.substr(h.find("\"pid\":") + 6);
    pid = pid.substr(0, pid.find(','));
    in(0, "kill -9 " + pid);
    EXPECT_TRUE(eventually(6000, [] {
        return status_of(2).find("\"head_alive\":false") != std::string::npos;
    })) << status_of(2);
    /* a driver on b without its head: its own node's actors work; what needs the head
     * fails within seconds, saying so */
    char self[4096];
    ASSERT_TRUE(realpath("/proc/self/exe", self));
    out = in(2,
             std::string("sh -c 'CLUSTER_DRIVER=\"headless|10.213.0.1|10.213.0.1\" "
                         "TR_NODE=$(ls /tmp/troupe-*/n*/node.sock | head -1) ") +
                 self + " 2>&1'",
             &st);
    EXPECT_EQ(st, 0) << out;
    EXPECT_NE(out.find("OK a local actor works"), std::string::npos) << out;
    EXPECT_NE(out.find("OK placing elsewhere fails in seconds"), std::string::npos) << out;
    printf("%s", out.c_str());
    EXPECT_TRUE(clean(out)) << out;
}

} // namespace

namespace {

/* resources_available (or _total) CPU in a node's status JSON; -1 if absent. */
double cpus_in(const std::string &st, const char *which = "resources_available") {
    size_t at = st.find(std::string("\"") + which + "\":{");
    if (at == std::string::npos) return -1;
    size_t end = st.find('}', at), k = st.find("\"CPU\":", at);
    return k == std::string::npos || k > end ? -1 : atof(st.c_str() + k + 6);
}

} // namespace

/* Placement groups across the nodes (nodes of 2 CPUs each; the driver on node a, not the
 * head; its checks are run_cluster_driver's "pg"): STRICT_PACK larger than any node stays
 * pending with its reason and reserves nothing anywhere; STRICT_SPREAD puts a bundle on
 * each of two nodes and its actors there; a driver on node b finds the group by name and
 * puts an actor in it; remove kills the actors and gives both nodes their CPUs back;
 * PACK and SPREAD; a task in a bundle on another node; node b cut off, then killed, under
 * a group with a bundle there: the group is PENDING again, its other part kept with its
 * actor running, and b's bundle placed again when b is back. Then the driver exits: its groups go.
 * These nodes keep their sessions in /tmp/c3. */
TEST_F(Cluster, PlacementGroupsSpanTheNodes) {
    int st;
    char self[4096];
    ASSERT_TRUE(realpath("/proc/self/exe", self));
    const std::string tmp = " --tmpdir /tmp/c3 --num-cpus 2 --worker-path " + std::string(self);
    for (int i = 0; i < 3; i++)
        in(i, "mkdir -p /tmp/c3");
    std::string out =
        in(0, cli + " start --head --bind 10.213.0.1 --port 7501 --token pgt" + tmp, &st);
    ASSERT_EQ(st, 0) << out;
    for (int i = 1; i < 3; i++) { /* node b alone has "special" */
        out = in(i,
                 cli + " start --address 10.213.0.1:7501 --token pgt" + tmp +
                     (i == 2 ? " --resources special=1" : ""),
                 &st);
        ASSERT_EQ(st, 0) << out;
    }
    auto status_c3 = [&](int i) { return in(i, cli + " status --tmpdir /tmp/c3"); };
    ASSERT_TRUE(eventually(5000, [&] { return count(status_c3(0), "\"alive\":true") == 3; }))
        << status_c3(0);
    std::string marker = "/dev/shm/trpg" + std::to_string(getpid());
    std::string log = marker + ".log";
    auto driver = [&](int i, const std::string &spec, const std::string &tail) {
        return in(i, "sh -c 'CLUSTER_DRIVER=\"" + spec +
                         "\" TR_NODE=$(ls /tmp/c3/troupe-*/n*/node.sock | head -1) " + self + tail +
                         "'");
    };
    auto read_log = [&] { return read_all(log); };
    auto at_step = [&](int k) {
        return eventually(
            60000, [&] { return access((marker + "." + std::to_string(k)).c_str(), F_OK) == 0; });
    };
    auto go = [&](int k) {
        if (FILE *f = fopen((marker + ".go" + std::to_string(k)).c_str(), "w")) fclose(f);
    };
    auto free_cpus = [&](int nodes) {
        double sum = 0;
        for (int i = 0; i < nodes; i++)
            sum += cpus_in(status_c3(i));
        return sum;
    };
    driver(1, "pg|10.213.0.3|10.213.0.1|" + marker, " >" + log + " 2>&1 &");

    /* 1: a STRICT_PACK group of 3 CPUs pending: no node reserved any of it */
    ASSERT_TRUE(at_step(1)) << read_log();
    for (int i = 0; i < 3; i++)
        EXPECT_EQ(cpus_in(status_c3(i)), 2) << i << ": " << status_c3(i);
    std::string head = status_c3(0);
    EXPECT_NE(head.find("\"state\":\"PENDING\",\"strategy\":\"STRICT_PACK\""), std::string::npos)
        << head;
    EXPECT_NE(head.find("infeasible"), std::string::npos) << head;
    go(1);

    /* 2: STRICT_SPREAD of 2 CPUs placed: two nodes have one CPU less; a driver on node b
     * finds it by name */
    ASSERT_TRUE(at_step(2)) << read_log();
    EXPECT_TRUE(eventually(3000, [&] { return free_cpus(3) == 4; })) << free_cpus(3);
    int with_one = 0;
    for (int i = 0; i < 3; i++)
        with_one += cpus_in(status_c3(i)) == 1;
    EXPECT_EQ(with_one, 2);
    EXPECT_NE(status_c3(0).find("\"state\":\"CREATED\",\"strategy\":\"STRICT_SPREAD\""),
              std::string::npos)
        << status_c3(0);
    out = driver(2, "pgname|10.213.0.3|10.213.0.1", " 2>&1");
    for (const char *what :
         {"a group is found by name from another node", "an actor goes into it from there"})
        EXPECT_NE(out.find(std::string("OK ") + what), std::string::npos) << what << "\n" << out;
    printf("%s", out.c_str());
    EXPECT_TRUE(clean(out)) << out;
    /* ... and so does a driver that joined by the head's address (a client node) */
    out = in(2, "sh -c 'CLUSTER_DRIVER=\"pgname|10.213.0.3|10.213.0.1\" TR_NODE=10.213.0.1:7501 "
                "TR_TOKEN=pgt " +
                    std::string(self) + " 2>&1'");
    for (const char *what :
         {"a group is found by name from another node", "an actor goes into it from there"})
        EXPECT_NE(out.find(std::string("OK ") + what), std::string::npos)
            << "client: " << what << "\n"
            << out;
    printf("%s", out.c_str());
    EXPECT_TRUE(clean(out)) << out;
    go(2);

    /* 3: removed: every node has its CPUs back and no actor left */
    ASSERT_TRUE(at_step(3)) << read_log();
    EXPECT_TRUE(eventually(5000, [&] { return free_cpus(3) == 6; })) << free_cpus(3);
    EXPECT_TRUE(eventually(5000, [&] {
        return count(status_c3(0) + status_c3(1) + status_c3(2), "\"state\":\"ALIVE\"") == 0;
    }));
    go(3);

    /* 4: node b (holding a bundle) cut off; 5: the group's part on the other node kept
     * (its actor runs on), b's kept (b cannot be told) until b is back; 6: b's bundle
     * placed again, b's old part undone first (b holds one bundle, not two); then b
     * killed; 7: the other part still kept */
    ASSERT_TRUE(at_step(4)) << read_log();
    EXPECT_TRUE(eventually(3000, [&] { return free_cpus(2) == 3; })) << free_cpus(2);
    in(2, "ip link set " + link_of(2) + " down");
    go(4);
    ASSERT_TRUE(at_step(5)) << read_log();
    EXPECT_EQ(free_cpus(2), 3);
    EXPECT_EQ(cpus_in(status_c3(2)), 1) << status_c3(2);
    EXPECT_NE(status_c3(0).find("\"state\":\"PENDING\",\"strategy\":\"STRICT_SPREAD\""),
              std::string::npos)
        << status_c3(0);
    in(2, "ip link set " + link_of(2) + " up");
    go(5);
    ASSERT_TRUE(at_step(6)) << read_log();
    EXPECT_EQ(cpus_in(status_c3(2)), 1) << status_c3(2);
    EXPECT_EQ(free_cpus(3), 4);
    std::string b = status_c3(2);
    std::string pid = b.substr(b.find("\"pid\":") + 6);
    pid = pid.substr(0, pid.find(','));
    in(2, "kill -9 " + pid);
    go(6);
    ASSERT_TRUE(at_step(7)) << read_log();
    EXPECT_EQ(free_cpus(2), 3);
    go(7);

    EXPECT_TRUE(eventually(60000, [&] {
        std::string s = read_log();
        return s.find("when the node is killed") != std::string::npos ||
               s.find("FAIL") != std::string::npos;
    })) << read_log();
    out = read_log();
    for (const char *what : {"STRICT_PACK bigger than any node stays pending with the reason",
                             "an actor into a pending group is refused",
                             "a pending group is removed",
                             "STRICT_SPREAD places one bundle per node",
                             "actors in bundles 0 and 1 run on different nodes",
                             "a bundle index out of range",
                             "STRICT_SPREAD of more bundles than nodes stays pending",
                             "bad input is refused by the node",
                             "a name is the cluster's",
                             "remove kills the group's actors on every node",
                             "PACK of 3 CPUs takes two nodes",
                             "PACK of 2 CPUs takes one node",
                             "an actor in any bundle runs on the group's node",
                             "SPREAD puts its bundles on two nodes",
                             "a task runs in a bundle on another node",
                             "a bundle goes to the node with its resource",
                             "an actor goes into the bundle not on b",
                             "a group with a bundle on a lost node is pending again",
                             "its other bundle's actor runs on",
                             "it is placed again once the node is back",
                             "and its other bundle's actor is the same one",
                             "and pending again when the node is killed"})
        EXPECT_NE(out.find(std::string("OK ") + what), std::string::npos) << what << "\n" << out;
    EXPECT_EQ(out.find("FAIL"), std::string::npos) << out;
    printf("%s", out.c_str());
    EXPECT_TRUE(clean(out)) << out;
    /* the driver has left: its groups go from the head and every node */
    EXPECT_TRUE(eventually(8000, [&] {
        /* (the head's own node's table of parts, and the cluster's) */
        return free_cpus(2) == 4 && count(status_c3(0), "\"placement_groups\":[]") == 2;
    })) << status_c3(0);
    for (int k = 1; k <= 7; k++) {
        unlink((marker + "." + std::to_string(k)).c_str());
        unlink((marker + ".go" + std::to_string(k)).c_str());
    }
    unlink(log.c_str());
    for (int i = 0; i < 3; i++)
        in(i, "sh -c 'for s in /tmp/c3/troupe-*/n*/node.sock; do " + cli +
                  " stop --address $s; done'");
}

namespace {

/* A real Prometheus (Debian's) scrapes a head and a node, each serving /metrics on its
 * own address with the cluster's token, found through the head's file_sd file
 * (`troupe metrics prometheus-config`); its HTTP API (promtool query) says both are up
 * and shows what a driver did: its calls, its collective ops across the nodes, its
 * object's bytes. Skips, saying why, without Prometheus. */
TEST_F(Cluster, PrometheusScrapesTheNodes) {
    if (in(0, "sh -c 'command -v prometheus && command -v promtool'").find("promtool") ==
        std::string::npos)
        GTEST_SKIP() << "no prometheus/promtool (Debian's prometheus, tools/deps.sh)";
    int st;
    char self[4096];
    ASSERT_TRUE(realpath("/proc/self/exe", self));
    const std::string tmp = " --tmpdir /tmp/c4 --worker-path " + std::string(self);
    for (int i = 0; i < 2; i++)
        in(i, "mkdir -p /tmp/c4");
    std::string out = in(0,
                         cli + " start --head --bind 10.213.0.1 --port 7601 --token t0k" +
                             " --metrics-host 10.213.0.1" + tmp,
                         &st);
    ASSERT_EQ(st, 0) << out;
    EXPECT_NE(out.find("dashboard: http://10.213.0.1:"), std::string::npos) << out;
    out =
        in(1, cli + " start --address 10.213.0.1:7601 --token t0k --metrics-host 10.213.0.2" + tmp,
           &st);
    ASSERT_EQ(st, 0) << out;
    std::string marker = "/dev/shm/trp" + std::to_string(getpid());
    std::string log = marker + ".log";
    unlink(marker.c_str());
    in(1, "sh -c 'CLUSTER_DRIVER=\"prom|10.213.0.2|10.213.0.1|" + marker +
              "\" TR_NODE=$(ls /tmp/c4/troupe-*/n*/node.sock | head -1) " + self + " >" + log +
              " 2>&1 &'");
    EXPECT_TRUE(eventually(60000, [&] { return access(marker.c_str(), F_OK) == 0; }))
        << read_all(log);
    /* Prometheus beside the head, configured by the head */
    out = in(0, cli + " metrics prometheus-config --tmpdir /tmp/c4", &st);
    ASSERT_EQ(st, 0) << out;
    EXPECT_NE(out.find("credentials_file:"), std::string::npos) << out;
    std::string cfg = "global: {scrape_interval: 1s, scrape_timeout: 1s}\n" + out;
    FILE *f = fopen("/dev/shm/trp.yml", "w");
    ASSERT_TRUE(f);
    fputs(cfg.c_str(), f);
    fclose(f);
    out = in(0, "promtool check config /dev/shm/trp.yml", &st);
    EXPECT_EQ(st, 0) << out;
    in(0, "sh -c 'prometheus --config.file=/dev/shm/trp.yml --storage.tsdb.path=/tmp/c4/prom "
          "--web.listen-address=127.0.0.1:9391 >/tmp/c4/prom.log 2>&1 &'");
    auto query = [&](const std::string &expr) {
        return in(0, "promtool query instant http://127.0.0.1:9391 '" + expr + "'");
    };
    /* promtool prints each sample as {labels} => value @[time] */
    auto number = [&](const std::string &expr) {
        std::string r = query(expr);
        size_t at = r.find("=> ");
        return at == std::string::npos ? -1.0 : atof(r.c_str() + at + 3);
    };
    EXPECT_TRUE(eventually(60000, [&] { return number("count(up == 1)") == 2; }))
        << query("up") << in(0, "cat /tmp/c4/prom.log | tail -20")
        << in(0, "sh -c 'cat /tmp/c4/troupe-*/n*/prometheus_sd.json'");
    /* what the driver did: 30 calls of Counter, 4 allreduces on each of 2 ranks, 1 MiB */
    EXPECT_TRUE(eventually(
        30000,
        [&] {
            return number("sum(troupe_calls_total{class=\"Counter\"})") == 30 + 8 &&
                   number("sum(troupe_collective_ops_total{backend=\"gloo\",op=\"allreduce\"})") ==
                       8;
        }))
        << query("troupe_calls_total") << query("troupe_collective_ops_total");
    EXPECT_EQ(number("count(troupe_actors{state=\"ALIVE\"} > 0)"), 2) << "actors on both nodes";
    EXPECT_GE(number("sum(troupe_actors{state=\"ALIVE\"})"), 3);
    EXPECT_GE(number("sum(troupe_object_store_object_bytes)"), 1 << 20);
    EXPECT_EQ(number("troupe_cluster_nodes{state=\"alive\"}"), 2);
    /* the head's CLI merges every node's rings (core/trace.h): the flight recorder sees both
     * ranks of the group across the nodes, the timeline both nodes' processes */
    out = in(0, cli + " debug collectives --tmpdir /tmp/c4", &st);
    EXPECT_EQ(st, 0) << out;
    EXPECT_NE(out.find("group prom: every rank completed op #4 allreduce\n"), std::string::npos)
        << out;
    out = in(0, cli + " timeline -o /dev/shm/trtl.json --tmpdir /tmp/c4", &st);
    EXPECT_EQ(st, 0) << out;
    std::string tl = read_all("/dev/shm/trtl.json");
    EXPECT_NE(tl.find(" @10.213.0.2:"), std::string::npos) << "the other node's processes";
    const char *checker = getenv("TRACE_CHECK");
    ASSERT_TRUE(checker) << "set TRACE_CHECK to tools/trace_check.py";
    /* (here, not in a node's namespace: its /tmp is its own, and the checker may live there) */
    out = run_cmd(std::string("python3 ") + checker +
                      " /dev/shm/trtl.json --expect cat:collective=8 --expect flows=4 2>&1",
                  &st);
    EXPECT_EQ(st, 0) << out << "\n" << in(0, cli + " debug collectives --json --tmpdir /tmp/c4");
    unlink("/dev/shm/trtl.json");
    /* the head's lists are the cluster's (api/cmd/merge.h): every node's items, each with
     * its node; a filter goes to every node, a get finds an item wherever it is */
    out = in(0, cli + " list actors --json --tmpdir /tmp/c4", &st);
    EXPECT_EQ(st, 0) << out;
    EXPECT_NE(out.find("\"node\":\"10.213.0.1:7601\""), std::string::npos) << out;
    size_t there = out.find("\"node\":\"10.213.0.2:");
    ASSERT_NE(there, std::string::npos) << "the other node's actors: " << out;
    size_t id_at = out.rfind("{\"id\":\"", there);
    ASSERT_NE(id_at, std::string::npos) << out;
    std::string far_id = out.substr(id_at + 7, 32);
    long total = atol(out.c_str() + out.find("\"total\":") + 8);
    EXPECT_GE(total, 3) << out;
    out = in(0, cli + " get actors " + far_id + " --json --tmpdir /tmp/c4", &st);
    EXPECT_EQ(st, 0) << out;
    EXPECT_NE(out.find("\"node\":\"10.213.0.2:"), std::string::npos) << out;
    out = in(0, cli + " summary actors --tmpdir /tmp/c4", &st);
    EXPECT_EQ(st, 0) << out;
    EXPECT_NE(out.find("\"total\":" + std::to_string(total) + ","), std::string::npos) << out;
    out = in(0, cli + " list groups --filter id=prom --json --tmpdir /tmp/c4", &st);
    EXPECT_NE(out.find("\"matched\":2,"), std::string::npos) << "a rank on each node: " << out;
    out = in(0, cli + " list actors --filter node=10.213.0.1:7601 --limit 1 --tmpdir /tmp/c4", &st);
    EXPECT_EQ(st, 0) << out;
    EXPECT_NE(out.find("(1 shown of "), std::string::npos) << out;
    EXPECT_EQ(out.find("10.213.0.2:"), std::string::npos) << out;
    unlink(marker.c_str()); /* the driver leaves */
    out = read_all(log);
    for (const char *what :
         {"30 calls", "4 allreduces in a gloo group across the nodes", "an object of 1 MiB"})
        EXPECT_NE(out.find(std::string("OK ") + what), std::string::npos) << what << "\n" << out;
    EXPECT_TRUE(clean(out)) << out;
    in(0, "pkill -f 'prometheus --config.file=/dev/shm/trp.yml'");
    unlink("/dev/shm/trp.yml");
    unlink(log.c_str());
    for (int i = 0; i < 2; i++)
        in(i, "sh -c 'for s in /tmp/c4/troupe-*/n*/node.sock; do " + cli +
                  " stop --address $s; done'");
}

} // namespace
