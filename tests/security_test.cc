/* tests/security_test.cc - a node attacked from outside, on loopback, as a local user or a
 * network peer without the cluster's secret would: a cluster port without a token, no
 * random bytes, programs a peer names for a node to run. Each case is an attack that worked
 * once (issue 21). */
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_actors.h"

extern "C" {
#include "core/buf.h"
#include "core/codec.h"
#include "core/rpc.h"
#include "core/status.h"
}

namespace {

/* The value after `key` in text, up to the first character in `end`. */
std::string after(const std::string &text, const std::string &key, const char *end = "\n\"") {
    size_t at = text.find(key);
    if (at == std::string::npos) return "";
    at += key.size();
    return text.substr(at, text.find_first_of(end, at) - at);
}

std::string slurp(const std::string &path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

/* A standalone head started by the CLI in a tmpdir of its own, stopped at the end. */
struct Head {
    std::string tmp, cli, td, out, sock, token_file, cluster;
    int st = -1;
    explicit Head(const std::string &args) {
        char tmpl[] = "/tmp/trsec-XXXXXX";
        if (!mkdtemp(tmpl)) return;
        tmp = tmpl;
        cli = g_troupe_cli + " ";
        td = " --tmpdir " + tmp;
        out = run_cmd(cli + "start --head " + args + td, &st);
        sock = after(out, "address: ");
        token_file = after(out, "cluster token: ", " \n");
        std::string status = run_cmd(cli + "status" + td, nullptr);
        cluster = after(after(status, "\"cluster\":{", "}"), "\"address\":\"");
    }
    ~Head() {
        run_cmd(cli + "stop" + td, nullptr);
        run_cmd("rm -rf " + tmp, nullptr);
    }
};

/* One request to a cluster port; its code. */
int rpc(const std::string &target, const char *token, const tr__buf &req) {
    tr__rpc_client *c;
    int rc = tr__rpc_client_create(target.c_str(), token, 1 << 20, &c);
    if (rc) return rc;
    tr__buf r = TR__BUF_INIT;
    rc = tr__rpc_call(c, req.data, req.len, 5000, &r);
    tr__buf_free(&r);
    tr__rpc_client_destroy(c);
    return rc;
}

/* A "create" as a head sends it to a node: the node's worker is `exe`. */
void create_request(tr__buf *b, const std::string &exe) {
    tr__enc_map(b, 8);
    tr__enc_str(b, "op");
    tr__enc_str(b, "create");
    tr__enc_str(b, "max_restarts");
    tr__enc_int(b, 0);
    tr__enc_str(b, "owner");
    tr__enc_str(b, "0123456789abcdef/1");
    tr__enc_str(b, "node");
    tr__enc_str(b, "0123456789abcdef");
    tr__enc_str(b, "exe");
    tr__enc_str(b, exe.c_str());
    tr__enc_str(b, "res");
    tr__enc_str(b, "");
    tr__enc_str(b, "class");
    tr__enc_str(b, "Counter");
    tr__enc_str(b, "args");
    tr__enc_bin(b, "", 0);
}

/* An attacker's program: it leaves a marker if it ever runs. */
std::string evil_script(const std::string &dir, const std::string &marker) {
    std::string path = dir + "/evil.sh";
    FILE *f = fopen(path.c_str(), "w");
    fprintf(f, "#!/bin/sh\ntouch %s\nsleep 5\n", marker.c_str());
    fclose(f);
    chmod(path.c_str(), 0755);
    return path;
}

/* Before: `troupe start --head --port P` without --token ran a port that checked nothing;
 * a "create" naming a script of the attacker's ran it as the node's user. Now the head
 * makes a token, keeps it 0600 in its session directory, and the port refuses anyone
 * without it; this machine's CLI finds it there. */
TEST(Token, AHeadGivenNoTokenMakesOneAndRefusesCallersWithoutIt) {
    ASSERT_FALSE(g_troupe_cli.empty()) << "pass the troupe CLI path as argv[1]";
    Head h("--port 0");
    ASSERT_EQ(h.st, 0) << h.out;
    ASSERT_FALSE(h.token_file.empty()) << "no token file printed: " << h.out;
    ASSERT_FALSE(h.cluster.empty()) << "no cluster address in the status";
    struct stat sb;
    ASSERT_EQ(stat(h.token_file.c_str(), &sb), 0) << h.token_file;
    EXPECT_TRUE(S_ISREG(sb.st_mode));
    EXPECT_EQ(sb.st_mode & 0777, 0600u);
    std::string token = slurp(h.token_file);
    token = token.substr(0, token.find('\n'));
    EXPECT_EQ(token.size(), 64u) << token;
    EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;

    std::string marker = h.tmp + "/ran";
    std::string evil = evil_script(h.tmp, marker);
    tr__buf b = TR__BUF_INIT;
    create_request(&b, evil);
    EXPECT_EQ(rpc(h.cluster, "", b), TR_EPERM) << tr_last_error();
    EXPECT_EQ(rpc(h.cluster, "wrong", b), TR_EPERM) << tr_last_error();
    tr__buf_free(&b);
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "op");
    tr__enc_str(&b, "status");
    EXPECT_EQ(rpc(h.cluster, "", b), TR_EPERM);
    EXPECT_EQ(rpc(h.cluster, token.c_str(), b), 0) << tr_last_error();
    tr__buf_free(&b);
    usleep(300000);
    EXPECT_NE(access(marker.c_str(), F_OK), 0) << "the attacker's program ran";

    /* this machine's user: found in the session directory; a token file; the environment */
    int st;
    std::string out = run_cmd(h.cli + "status --address " + h.cluster + h.td, &st);
    EXPECT_EQ(st, 0) << out;
    EXPECT_NE(out.find("\"role\":\"head\""), std::string::npos) << out;
    out = run_cmd(h.cli + "status --address " + h.cluster + " --token-file " + h.token_file, &st);
    EXPECT_EQ(st, 0) << out;
    out = run_cmd("TROUPE_CLUSTER_TOKEN=" + token + " " + h.cli + "status --address " + h.cluster,
                  &st);
    EXPECT_EQ(st, 0) << out;
    out = run_cmd("TROUPE_CLUSTER_TOKEN=wrong " + h.cli + "status --address " + h.cluster, &st);
    EXPECT_NE(st, 0) << out;
    EXPECT_NE(out.find("refused"), std::string::npos) << out;
    /* another tmpdir (another user's view): no token to be found, and it says how to give one */
    out =
        run_cmd(h.cli + "status --address " + h.cluster + " --tmpdir " + h.tmp + "/elsewhere", &st);
    EXPECT_NE(st, 0) << out;
    EXPECT_NE(out.find("--token-file"), std::string::npos) << out;

    /* a node of this machine joins without being given the token: it finds the head's */
    out = run_cmd(h.cli + "start --address " + h.cluster + h.td, &st);
    EXPECT_EQ(st, 0) << out;
    std::string node = after(out, "address: ");
    out = run_cmd(h.cli + "status" + h.td, &st);
    EXPECT_TRUE(eventually(5000, [&] {
        std::string s = run_cmd(h.cli + "status" + h.td, nullptr);
        return count(s, "\"alive\":true") == 2;
    })) << run_cmd(h.cli + "status" + h.td, nullptr);
    run_cmd(h.cli + "stop --address " + node, nullptr);
}

/* Before: a peer with the token named any file in "create" and the node ran it. Now a node
 * runs for another node's driver only its own command, what --worker-path lists, and the
 * generic worker with a library it lists; a refusal names the setting. */
TEST(WorkerPath, ANodeRunsOnlyTheProgramsItAllows) {
    ASSERT_FALSE(g_troupe_cli.empty());
    char tmpl[] = "/tmp/trsec-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    std::string dir = tmpl, allowed = dir + "/app";
    ASSERT_EQ(mkdir(allowed.c_str(), 0700), 0);
    std::string evil = evil_script(dir, dir + "/ran");
    std::string good = evil_script(allowed, allowed + "/ran");
    std::string lib = dir + "/evil.so";
    FILE *f = fopen(lib.c_str(), "w");
    fclose(f);
    {
        Head h("--port 0 --token t0k --worker-path " + allowed);
        ASSERT_EQ(h.st, 0) << h.out;
        tr__buf b = TR__BUF_INIT;
        create_request(&b, evil);
        EXPECT_EQ(rpc(h.cluster, "t0k", b), TR_EPERM);
        EXPECT_NE(strstr(tr_last_error(), "--worker-path"), nullptr) << tr_last_error();
        tr__buf_reset(&b);
        char worker[4096];
        ASSERT_NE(realpath("api/cmd/troupe-worker", worker), nullptr);
        create_request(&b, std::string(worker) + "\x1f" + lib); /* the generic worker, a library */
        EXPECT_EQ(rpc(h.cluster, "t0k", b), TR_EPERM);
        EXPECT_NE(strstr(tr_last_error(), "worker_library"), nullptr) << tr_last_error();
        tr__buf_reset(&b);
        create_request(&b, dir + "/../" + dir.substr(5) + "/app/../evil.sh"); /* a way round */
        EXPECT_EQ(rpc(h.cluster, "t0k", b), TR_EPERM);
        tr__buf_reset(&b);
        create_request(&b, good); /* listed: it runs */
        EXPECT_EQ(rpc(h.cluster, "t0k", b), 0) << tr_last_error();
        tr__buf_free(&b);
        EXPECT_TRUE(
            eventually(5000, [&] { return access((allowed + "/ran").c_str(), F_OK) == 0; }));
        EXPECT_NE(access((dir + "/ran").c_str(), F_OK), 0) << "a program not allowed ran";
    }
    run_cmd("rm -rf " + dir, nullptr);
}

/* Raw TCP connections to host:port that send nothing, n of them (fds; -1 where connect
 * failed at once). */
std::vector<int> flood(const std::string &address, int n) {
    std::string host = address.substr(0, address.rfind(':'));
    int port = atoi(address.c_str() + address.rfind(':') + 1);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    std::vector<int> fds;
    for (int i = 0; i < n; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) {
            close(fd);
            fd = -1;
        }
        fds.push_back(fd);
    }
    return fds;
}

/* How many of fds the other side has closed (EOF or reset). */
int closed_by_peer(const std::vector<int> &fds) {
    int n = 0;
    for (int fd : fds) {
        char c;
        if (fd < 0) continue;
        ssize_t r = recv(fd, &c, 1, MSG_DONTWAIT);
        n += r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    }
    return n;
}

/* Before: ~1,100 idle connections (no token needed) used up the node's descriptors; gRPC's
 * listener stopped accepting for good, heartbeats stopped, the node was counted lost. Now
 * the node raises its descriptor limit, accepts its connections itself within a cap, evicts
 * the oldest connection that proved nothing when a new one comes (and any after 10 s), and
 * keeps accepting past EMFILE. Here the node runs with 512 descriptors: 1,100 idle
 * connections, and this machine's CLI with the token gets the status during the flood and
 * after, the member joined before stays alive, and the flood's connections are closed. */
TEST(Flood, IdleConnectionsNeverCloseTheClusterPort) {
    ASSERT_FALSE(g_troupe_cli.empty());
    struct rlimit rl;
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_max < 2000) GTEST_SKIP() << "this test needs 2,000 descriptors of its own";
    rl.rlim_cur = rl.rlim_max;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
    char tmpl[] = "/tmp/trsec-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    std::string td = std::string(" --tmpdir ") + tmpl;
    int st;
    std::string out = run_cmd(
        "sh -c 'ulimit -n 512 && exec " + g_troupe_cli + " start --head --port 0" + td + "'", &st);
    ASSERT_EQ(st, 0) << out;
    std::string status = run_cmd(g_troupe_cli + " status" + td, nullptr);
    std::string cluster = after(after(status, "\"cluster\":{", "}"), "\"address\":\"");
    ASSERT_FALSE(cluster.empty()) << status;
    out = run_cmd(g_troupe_cli + " start --address " + cluster + td, &st); /* a member */
    ASSERT_EQ(st, 0) << out;
    std::string member = after(out, "address: ");
    auto alive = [&] {
        std::string s = run_cmd(g_troupe_cli + " status --address " + cluster + td, nullptr);
        return count(s, "\"alive\":true") == 2 && count(s, "\"alive\":false") == 0;
    };
    ASSERT_TRUE(eventually(5000, alive));

    std::vector<int> fds = flood(cluster, 1100);
    usleep(200000);
    for (int i = 0; i < 3; i++) { /* during */
        out = run_cmd(g_troupe_cli + " status --address " + cluster + td, &st);
        EXPECT_EQ(st, 0) << out;
        EXPECT_NE(out.find("\"role\":\"head\""), std::string::npos) << out;
    }
    EXPECT_TRUE(alive());
    /* connections that say nothing are dropped (the most recent within 10 s of coming) */
    EXPECT_TRUE(eventually(15000, [&] { return closed_by_peer(fds) == 1100; }))
        << closed_by_peer(fds) << " of 1100 closed";
    for (int fd : fds)
        if (fd >= 0) close(fd);
    fds = flood(cluster, 1100); /* again, and gone at once: the port keeps accepting */
    for (int fd : fds)
        if (fd >= 0) close(fd);
    usleep(500000);
    out = run_cmd(g_troupe_cli + " status --address " + cluster + td, &st); /* after */
    EXPECT_EQ(st, 0) << out;
    EXPECT_TRUE(alive()) << run_cmd(g_troupe_cli + " status" + td, nullptr);
    std::string log =
        slurp(std::string(tmpl) + "/troupe-" + std::to_string(getuid()) + "/node.log");
    EXPECT_EQ(log.find("Failed accept4"), std::string::npos) << log;
    run_cmd(g_troupe_cli + " stop --address " + member, nullptr);
    run_cmd(g_troupe_cli + " stop" + td, nullptr);
    run_cmd(std::string("rm -rf ") + tmpl, nullptr);
}

/* Before: another user who made /tmp/troupe-<uid> first stopped every node and driver of
 * that uid from starting, with an error logged to /dev/null. Now they say what is wrong
 * and where, and use a private directory of the user's instead ($HOME/.cache/troupe
 * here): start, status and stop all find it. */
TEST(Squat, AnotherUsersDirectoryIsNamedAndAvoided) {
    ASSERT_FALSE(g_troupe_cli.empty());
    if (getuid() != 0) GTEST_SKIP() << "making a directory of another user needs root";
    char tmpl[] = "/tmp/trsec-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    std::string tmp = tmpl, squat = tmp + "/troupe-" + std::to_string(getuid());
    ASSERT_EQ(chmod(tmpl, 0755), 0);
    ASSERT_EQ(mkdir(squat.c_str(), 0777), 0);
    ASSERT_EQ(chown(squat.c_str(), 65534, 65534), 0);
    ASSERT_EQ(mkdir((tmp + "/home").c_str(), 0700), 0);
    std::string env = "env -u XDG_RUNTIME_DIR HOME=" + tmp + "/home ";
    std::string td = " --tmpdir " + tmp;
    int st;
    std::string out = run_cmd(env + g_troupe_cli + " start --head" + td, &st);
    EXPECT_EQ(st, 0) << out;
    EXPECT_NE(out.find(squat + " is not a directory of uid"), std::string::npos) << out;
    EXPECT_NE(out.find("uid 65534"), std::string::npos) << out;
    std::string addr = after(out, "address: ");
    EXPECT_EQ(addr.rfind(tmp + "/home/.cache/troupe/", 0), 0u) << addr;
    out = run_cmd(env + g_troupe_cli + " status" + td, &st);
    EXPECT_EQ(st, 0) << out;
    out = run_cmd(env + g_troupe_cli + " stop" + td, &st);
    EXPECT_EQ(st, 0) << out;
    struct stat sb;
    ASSERT_EQ(stat(squat.c_str(), &sb), 0);
    EXPECT_EQ(sb.st_uid, 65534u) << "the other user's directory was taken over";
    run_cmd("rm -rf " + tmp, nullptr);
}

/* No token on a command line, where every user reads it (/proc/PID/cmdline): the node
 * runs with none in its arguments, given the token by file. */
TEST(Token, ATokenFileKeepsTheTokenOffCommandLines) {
    ASSERT_FALSE(g_troupe_cli.empty());
    char tmpl[] = "/tmp/trsec-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    std::string file = std::string(tmpl) + "/tok";
    FILE *f = fopen(file.c_str(), "w");
    fprintf(f, "s3cret-from-a-file\n");
    fclose(f);
    Head h("--port 0 --token-file " + file);
    ASSERT_EQ(h.st, 0) << h.out;
    std::string pid = after(h.out, "pid ", ",");
    std::string cmdline = slurp("/proc/" + pid + "/cmdline");
    EXPECT_FALSE(cmdline.empty()) << pid;
    EXPECT_EQ(cmdline.find("s3cret"), std::string::npos) << cmdline;
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "op");
    tr__enc_str(&b, "status");
    EXPECT_EQ(rpc(h.cluster, "s3cret-from-a-file", b), 0) << tr_last_error();
    EXPECT_EQ(rpc(h.cluster, "", b), TR_EPERM);
    tr__buf_free(&b);
    int st;
    std::string out =
        run_cmd(h.cli + "start --head --port 0 --token-file /nonexistent" + h.td, &st);
    EXPECT_NE(st, 0) << out;
    EXPECT_NE(out.find("/nonexistent"), std::string::npos) << out;
    run_cmd(std::string("rm -rf ") + tmpl, nullptr);
}

/* Before: with getrandom refused, ids, tickets and graph names fell back to the time and
 * the pid. Now nothing starts. */
TEST(Token, NoRandomBytesNoNode) {
    ASSERT_FALSE(g_troupe_cli.empty());
    char tmpl[] = "/tmp/trsec-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    int st;
    std::string out = run_cmd(
        "tools/without_getrandom " + g_troupe_cli + " start --head --port 0 --tmpdir " + tmpl, &st);
    EXPECT_NE(st, 0) << out;
    EXPECT_NE(out.find("getrandom"), std::string::npos) << out;
    out = run_cmd(g_troupe_cli + " status --tmpdir " + tmpl, &st);
    EXPECT_NE(st, 0) << "a node runs: " << out;
    run_cmd(std::string("rm -rf ") + tmpl, nullptr);
}

} // namespace
