/* tests/cluster_test.cc - a cluster of real nodes on a real network, on one machine: a head
 * and two nodes, each in a network namespace of its own (veth pairs on a bridge in a fourth
 * namespace, 10.213.0.0/24) and a mount namespace of its own with a private /tmp, so no
 * node can reach another's Unix socket: what passes here crossed the network. Membership
 * (`troupe start --head --bind --port --token`, `troupe start --address --token`,
 * `troupe status`): every node listed with the address it faces the head with; a wrong or
 * missing token refused; a node killed, a link cut and brought back, the head killed.
 * Skips, saying why, where namespaces cannot be made (not root, no `ip`). */
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "tests/test_actors.h"

namespace {

std::string run(const std::string &cmd, int *status = nullptr) {
    std::string out;
    FILE *p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) return out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0)
        out.append(buf, n);
    int st = pclose(p);
    if (status) *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

int count(const std::string &s, const std::string &what) {
    int n = 0;
    for (size_t at = 0; (at = s.find(what, at)) != std::string::npos; at += what.size())
        n++;
    return n;
}

/* Until pred() holds or ms pass; whether it held. */
bool eventually(int ms, const std::function<bool()> &pred) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < until) {
        if (pred()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return pred();
}

class Cluster : public ::testing::Test {
  protected:
    static constexpr const char *kNames[3] = {"h", "a", "b"};

    static void SetUpTestSuite() {
        if (geteuid() != 0) {
            skip_why = "needs root to make network namespaces";
            return;
        }
        int st = 0;
        run("command -v ip && command -v nsenter && command -v unshare", &st);
        if (st != 0) {
            skip_why = "needs ip (iproute2), nsenter and unshare (util-linux)";
            return;
        }
        char real[4096];
        if (g_troupe_cli.empty() || !realpath(g_troupe_cli.c_str(), real)) {
            skip_why = "no troupe CLI path given to the test";
            return;
        }
        cli = real;
        /* TSan builds: the nodes run gRPC too (core/tsan_grpc.supp, by absolute path) */
        if (realpath("core/tsan_grpc.supp", real))
            setenv("TSAN_OPTIONS", (std::string("suppressions=") + real).c_str(), 1);
        /* namespaces an earlier run left (killed before its teardown): its pid is gone */
        std::string old = run("ip netns list | grep -o '^trc[0-9]*[a-z]*'");
        for (size_t at = 0; at < old.size();) {
            size_t nl = old.find('\n', at);
            std::string ns = old.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
            at = nl == std::string::npos ? old.size() : nl + 1;
            int opid = atoi(ns.c_str() + 3);
            if (ns.size() > 3 && opid > 0 && kill(opid, 0) != 0)
                run("ip netns pids " + ns + " | xargs -r kill -9; ip netns del " + ns);
        }
        tag = "trc" + std::to_string(getpid());
        std::string br = tag + "br";
        std::string script = "set -e; ip netns add " + br + "; ip -n " + br +
                             " link add br0 type bridge; ip -n " + br + " link set br0 up; ";
        for (int i = 0; i < 3; i++) {
            std::string ns = tag + kNames[i], v = tag + "v" + kNames[i], p = tag + "p" + kNames[i];
            script += "ip netns add " + ns + "; ip link add " + v + " type veth peer name " + p +
                      "; ip link set " + v + " netns " + ns + "; ip link set " + p + " netns " +
                      br + "; ip -n " + br + " link set " + p + " master br0 up; ip -n " + ns +
                      " addr add 10.213.0." + std::to_string(i + 1) + "/24 dev " + v + "; ip -n " +
                      ns + " link set " + v + " up; ip -n " + ns + " link set lo up; ";
        }
        std::string out = run(script, &st);
        if (st != 0) {
            skip_why = "cannot make network namespaces here: " + out;
            teardown_net();
            return;
        }
        /* a holder per node: its network namespace, and a mount namespace with its own /tmp */
        for (int i = 0; i < 3; i++) {
            int p[2];
            if (pipe(p)) abort();
            pid_t pid = fork();
            if (pid == 0) {
                dup2(p[1], 1);
                close(p[0]);
                std::string c = "ip netns exec " + tag + kNames[i] +
                                " unshare -m --propagation private sh -c 'mount -t tmpfs tmpfs "
                                "/tmp && echo $$ && exec sleep 100000'";
                execl("/bin/sh", "sh", "-c", c.c_str(), (char *)nullptr);
                _exit(127);
            }
            close(p[1]);
            char buf[32] = {0};
            struct pollfd pf = {p[0], POLLIN, 0};
            ssize_t n = poll(&pf, 1, 15000) == 1 ? read(p[0], buf, sizeof buf - 1) : -1;
            close(p[0]);
            holder[i] = pid;
            inner[i] = n > 0 ? atoi(buf) : 0; /* the process in the node's namespaces */
            if (inner[i] <= 0) {
                skip_why = "cannot give a node a private /tmp (unshare -m)";
                TearDownTestSuite();
                return;
            }
        }
    }

    static void teardown_net() {
        std::string s;
        for (int i = 0; i < 3; i++) /* whatever still runs there (nodes a test left) */
            s += " ip netns pids " + tag + kNames[i] + " | xargs -r kill -9;";
        s += " ip netns del " + tag + "br;";
        for (int i = 0; i < 3; i++)
            s += " ip netns del " + tag + kNames[i] + ";";
        run(s);
    }

    static void TearDownTestSuite() {
        for (int i = 0; i < 3; i++)
            if (holder[i] > 0) {
                /* the nodes first (each in its holder's namespaces), then the holders */
                in(i, "sh -c 'for s in /tmp/troupe-*/n*/node.sock; do " + cli +
                          " stop --address $s; done'");
                kill(holder[i], SIGKILL);
                waitpid(holder[i], nullptr, 0);
                holder[i] = 0;
            }
        if (!tag.empty()) teardown_net();
    }

    void SetUp() override {
        if (!skip_why.empty()) GTEST_SKIP() << skip_why;
    }

    /* cmd inside node i's namespaces (the holder's: network, mount). The holder is `sleep`
     * after exec, a child of sh; its pid is the sh's, which exec'd. */
    static std::string in(int i, const std::string &cmd, int *status = nullptr) {
        return run("nsenter -t " + std::to_string(inner[i]) + " -m -n -- " + cmd, status);
    }
    static std::string status_of(int i) {
        return in(i, cli + " status");
    }

    static std::string skip_why, cli, tag;
    static pid_t holder[3], inner[3];
};

std::string Cluster::skip_why, Cluster::cli, Cluster::tag;
pid_t Cluster::holder[3], Cluster::inner[3];

TEST_F(Cluster, NodesJoinOverTheNetworkAndFailuresAreSeen) {
    int st;
    for (int i = 0; i < 3; i++) /* tmpdirs for the starts that must fail (their logs) */
        in(i, "mkdir -p /tmp/x /tmp/w /tmp/w2");
    std::string out =
        in(0, cli + " start --head --bind 10.213.0.1 --port 7301 --token s3cret", &st);
    ASSERT_EQ(st, 0) << out;
    /* without a token, a non-loopback head does not start */
    out = in(0, cli + " start --head --bind 10.213.0.1 --port 7302 --tmpdir /tmp/x", &st);
    EXPECT_NE(st, 0) << out;
    EXPECT_NE(out.find("token"), std::string::npos) << out;
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
    /* each node sees only its own /tmp: one session in each */
    EXPECT_EQ(count(in(1, "sh -c 'ls -d /tmp/troupe-*/n[0-9]*-*'"), "/tmp/troupe-"), 1);

    /* a node killed: the head says it is lost within seconds */
    std::string a = status_of(1);
    std::string pid = a.substr(a.find("\"pid\":") + 6);
    pid = pid.substr(0, pid.find(','));
    in(1, "kill -9 " + pid);
    EXPECT_TRUE(eventually(6000, [] { return count(status_of(0), "\"alive\":false") == 1; }))
        << status_of(0);

    /* node b's link cut: both sides notice; back up: b is alive again */
    in(2, "ip link set " + tag + "vb down");
    EXPECT_TRUE(eventually(6000, [] { return count(status_of(0), "\"alive\":false") == 2; }))
        << status_of(0);
    EXPECT_TRUE(eventually(6000, [] {
        return status_of(2).find("\"head_alive\":false") != std::string::npos;
    })) << status_of(2);
    in(2, "ip link set " + tag + "vb up");
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
}

} // namespace
