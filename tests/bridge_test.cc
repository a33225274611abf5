/* tests/bridge_test.cc - a compiled graph's bridge (dag/bridge.h) on loopback, its sender
 * played by hand over raw TCP: a hello must prove the graph's secret, hellos are read side
 * by side within one deadline, and a frame's declared length is bounded by the store (no
 * buffer of it is made). Each case is an attack that worked once (issue 21). */
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "tests/test_actors.h"

extern "C" {
#include "api/rt.h"
#include "core/clock.h"
#include "core/kv.h"
#include "core/mac.h"
#include "core/nodeconn.h"
#include "core/status.h"
#include "dag/bridge.h"
#include "dag/chan.h"
#include "dag/plan.h"
#include "objectstore/client.h"
}

namespace {

#define GRAPH "dag-bridgetest01"

struct Wire {
    uint64_t magic;
    uint8_t nonce[16];
};
struct Hello {
    uint64_t magic;
    uint32_t v, src;
    char graph[32];
    uint8_t mac[32];
};
struct Frame {
    uint64_t e;
    int32_t code;
    uint32_t flags;
    uint64_t len;
};
const uint64_t kHello = 0x32676472627274ull; /* "trbrdg2" */

/* A receiving bridge (node 1, value 7 from node 0) with one channel of 4 slots of 64
 * bytes, started on a thread of its own (start returns once its one link is in). */
struct Bridge : ::testing::Test {
    tr_runtime *rt = nullptr;
    void *mem = nullptr;
    tr__dag_hdr *h = nullptr;
    tr__chan chan;
    uint8_t secret[TR__DAG_SECRET];
    tr__dag_bridge *br = nullptr;
    std::thread starter;
    std::atomic<int> start_rc{1}, failed{0};
    const uint64_t off = 128, bytes = 1 << 20;

    static void on_fail(void *arg, int code, const char *) {
        ((Bridge *)arg)->failed = code;
    }
    void SetUp() override {
        tr_config *cfg = test_config_with(
            {{"cluster_port", "0"}, {"cluster_token", "tok"}, {"object_store_bytes", "16777216"}});
        ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
        tr_config_destroy(cfg);
        mem = aligned_alloc(64, bytes);
        memset(mem, 0, bytes);
        h = (tr__dag_hdr *)mem;
        ASSERT_EQ(tr__chan_init(&chan, (char *)mem + off, bytes - off, 4, 64, 1), 0);
        for (size_t i = 0; i < sizeof secret; i++)
            secret[i] = (uint8_t)(i * 7 + 1);
        starter = std::thread([this] {
            tr__dag_recv rv = {7, off, 0};
            tr__dag_bridge_spec s = {};
            s.graph = GRAPH;
            s.secret = secret;
            s.node = 1;
            s.host = "127.0.0.1";
            s.node_path = tr_runtime_address(rt);
            s.max_msg = 1 << 20;
            s.h = h;
            s.bytes = bytes;
            s.recvs = &rv;
            s.n_recvs = 1;
            s.objects = (rt)->objects;
            s.timeout_ms = 5000;
            s.on_fail = on_fail;
            s.fail_arg = this;
            start_rc = tr__dag_bridge_start(&s, &br);
        });
    }
    void TearDown() override {
        if (starter.joinable()) starter.join();
        __atomic_store_n(&h->stop, 1, __ATOMIC_SEQ_CST);
        tr__chan_wake_all(&chan);
        tr__dag_bridge_stop(br);
        free(mem);
        tr_shutdown(rt);
    }
    /* The bridge's address, as it published it. */
    sockaddr_in where() {
        tr__nodeconn *kv;
        sockaddr_in a = {};
        EXPECT_EQ(tr__nodeconn_open(tr_runtime_address(rt), 1 << 20, &kv), 0);
        for (int i = 0; i < 200; i++) {
            void *v = nullptr;
            size_t n = 0;
            if (tr__kv_client_cluster(kv, "get", "troupe/dag/" GRAPH "/1", nullptr, 0, &v, &n) ==
                0) {
                std::string s((const char *)v, n);
                free(v);
                a.sin_family = AF_INET;
                a.sin_port = htons((uint16_t)atoi(s.c_str() + s.rfind(':') + 1));
                inet_pton(AF_INET, s.substr(0, s.rfind(':')).c_str(), &a.sin_addr);
                break;
            }
            usleep(10000);
        }
        tr__nodeconn_close(kv);
        return a;
    }
    /* A connection that has read its challenge (-1 if none came). */
    int dial(const sockaddr_in &a, Wire *ch) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct timeval tv = {3, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        if (connect(fd, (const sockaddr *)&a, sizeof a) != 0 ||
            recv(fd, ch, sizeof *ch, MSG_WAITALL) != (ssize_t)sizeof *ch) {
            close(fd);
            return -1;
        }
        return fd;
    }
    /* The hello a sender of value 7 from node 0 owes nonce (the proof computed here from
     * the protocol's definition: HMAC-SHA256(secret, label, nonce, value, node, graph)). */
    Hello hello(const uint8_t nonce[16], const uint8_t *key) {
        Hello hl = {kHello, 7, 0, {0}, {0}};
        strncpy(hl.graph, GRAPH, sizeof hl.graph);
        static const char what[] = "troupe dag bridge hello";
        const void *parts[] = {what, nonce, &hl.v, &hl.src, hl.graph};
        size_t lens[] = {sizeof what, 16, 4, 4, 32};
        tr__mac(key, TR__DAG_SECRET, parts, lens, 5, hl.mac);
        return hl;
    }
    /* A link of value 7 from node 0 that proved the secret, once the bridge is up (-1 if
     * it could not be made). */
    int link_in(const sockaddr_in &a) {
        Wire ch;
        int fd = dial(a, &ch);
        if (fd < 0) return -1;
        Hello hl = hello(ch.nonce, secret);
        EXPECT_EQ(send(fd, &hl, sizeof hl, MSG_NOSIGNAL), (ssize_t)sizeof hl);
        return fd;
    }
    /* Execution e's frame and value v, as a sender writes them. */
    static void send_value(int fd, uint64_t e, const std::string &v) {
        Frame f = {e, 0, 0, v.size()};
        ASSERT_EQ(send(fd, &f, sizeof f, MSG_NOSIGNAL), (ssize_t)sizeof f);
        ASSERT_EQ(send(fd, v.data(), v.size(), MSG_NOSIGNAL), (ssize_t)v.size());
    }
    /* Execution e's slot holds a ref to an object of this node whose bytes are v. */
    void expect_object(uint64_t e, const std::string &v) {
        tr__chan_wait w = {tr__deadline(5000), 0, &h->stop, nullptr, nullptr, 0};
        const void *d;
        size_t n;
        int32_t code;
        uint32_t flags;
        ASSERT_EQ(tr__chan_read(&chan, e, &w, &d, &n, &code, &flags), 0);
        ASSERT_EQ(code, 0);
        ASSERT_EQ(flags, (uint32_t)TR__CHAN_REF);
        tr_ref r;
        memcpy(r.b, d, sizeof r.b);
        const void *obj;
        size_t on;
        ASSERT_EQ(tr__objects_get((rt)->objects, r, 1000, &obj, &on), 0) << tr_last_error();
        EXPECT_EQ(std::string((const char *)obj, on), v);
        tr__objects_release((rt)->objects, r);
        tr__chan_release(&chan, e, 0);
    }
    static bool closed(int fd, int ms) {
        struct pollfd p = {fd, POLLIN, 0};
        char c;
        return poll(&p, 1, ms) == 1 && recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
    }
};

/* Before: the graph's name, sent in the clear, was the only credential, and the first
 * connection to name it was taken. Now a hello without the proof of the graph's secret is
 * closed and takes nothing: the right sender still gets in. */
TEST_F(Bridge, AHelloWithoutTheSecretIsRefused) {
    sockaddr_in a = where();
    ASSERT_NE(a.sin_port, 0) << "the bridge published no address";
    Wire ch;
    int bad = dial(a, &ch);
    ASSERT_GE(bad, 0);
    uint8_t wrong[TR__DAG_SECRET];
    memset(wrong, 0x42, sizeof wrong);
    Hello forged = hello(ch.nonce, wrong);
    ASSERT_EQ(send(bad, &forged, sizeof forged, MSG_NOSIGNAL), (ssize_t)sizeof forged);
    EXPECT_TRUE(closed(bad, 2000)) << "a forged hello was kept";
    close(bad);
    int replay = dial(a, &ch); /* a proof for another nonce is no proof */
    ASSERT_GE(replay, 0);
    uint8_t other[16] = {1};
    Hello old = hello(other, secret);
    ASSERT_EQ(send(replay, &old, sizeof old, MSG_NOSIGNAL), (ssize_t)sizeof old);
    EXPECT_TRUE(closed(replay, 2000)) << "a replayed hello was kept";
    close(replay);
    int fd = link_in(a);
    ASSERT_GE(fd, 0);
    starter.join();
    EXPECT_EQ(start_rc.load(), 0) << tr_last_error();
    std::string v = pattern(1000, 3); /* over a slot: into the store, its ref in the slot */
    send_value(fd, 0, v);
    expect_object(0, v);
    close(fd);
}

/* Before: hellos were read one at a time with 2 s per read, so a connection that trickled
 * its hello held compile past its deadline. Now they are read side by side: a trickler and
 * a silent one hold nothing back. */
TEST_F(Bridge, ATricklingHelloHoldsNothingBack) {
    sockaddr_in a = where();
    ASSERT_NE(a.sin_port, 0);
    Wire ch;
    int silent = dial(a, &ch), slow = dial(a, &ch);
    ASSERT_GE(silent, 0);
    ASSERT_GE(slow, 0);
    std::atomic<bool> stop{false};
    std::thread trickle([&] {
        for (int i = 0; i < 40 && !stop; i++) {
            char c = 'x';
            send(slow, &c, 1, MSG_NOSIGNAL);
            usleep(100000);
        }
    });
    usleep(300000);
    auto t0 = std::chrono::steady_clock::now();
    int fd = link_in(a);
    ASSERT_GE(fd, 0);
    starter.join();
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(start_rc.load(), 0) << tr_last_error();
    EXPECT_LT(took, 1.0);
    stop = true;
    trickle.join();
    EXPECT_TRUE(closed(silent, 2000)); /* the bridge is up: the others are let go */
    close(silent);
    close(slow);
    close(fd);
}

/* Before: a frame could declare up to 16 GiB and got a buffer of that size. Now a value goes
 * straight into the store, which bounds it: one the store (16 MiB here) can never hold is
 * that execution's error, its bytes read and let go of, and the graph goes on; a length
 * past 16 GiB is malformed and fails the link at once. Nothing of either is allocated. */
TEST_F(Bridge, AValueLargerThanTheStoreIsAnErrorAndNothingIsAllocated) {
    sockaddr_in a = where();
    ASSERT_NE(a.sin_port, 0);
    int fd = link_in(a);
    ASSERT_GE(fd, 0);
    starter.join();
    ASSERT_EQ(start_rc.load(), 0) << tr_last_error();
    send_value(fd, 0, std::string(20 << 20, 'b')); /* over the store: execution 0's error */
    std::string v = pattern(100, 5);               /* execution 1 comes through */
    send_value(fd, 1, v);
    tr__chan_wait w = {tr__deadline(5000), 0, &h->stop, nullptr, nullptr, 0};
    const void *d;
    size_t n;
    int32_t code;
    uint32_t flags;
    ASSERT_EQ(tr__chan_read(&chan, 0, &w, &d, &n, &code, &flags), 0);
    EXPECT_NE(code, 0);
    EXPECT_NE(std::string((const char *)d, n).find("value 7"), std::string::npos);
    tr__chan_release(&chan, 0, 0);
    expect_object(1, v);
    EXPECT_EQ(failed.load(), 0);
    Frame f = {2, 0, 0, 64ull << 30}; /* 64 GiB: malformed */
    ASSERT_EQ(send(fd, &f, sizeof f, MSG_NOSIGNAL), (ssize_t)sizeof f);
    EXPECT_TRUE(eventually(3000, [&] { return failed.load() != 0; }));
    EXPECT_EQ(failed.load(), TR_EPROTO);
    EXPECT_TRUE(closed(fd, 2000));
    close(fd);
}

} // namespace
