/* api/node/cluster_test.cc - the head's side of membership against hostile and odd peers, on
 * loopback: bytes that are not msgpack, unknown ops, registrations with bad fields, a
 * heartbeat from a stranger, a member pretending to be the head, garbage on the TCP port;
 * the head answers each with an error and keeps serving. */
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

extern "C" {
#include "api/node/cluster.h"
#include "core/codec.h"
#include "core/config.h"
#include "core/rpc.h"
#include "core/status.h"
}

namespace {

int count_of(const std::string &s, const std::string &what) {
    int n = 0;
    for (size_t at = 0; (at = s.find(what, at)) != std::string::npos; at += what.size())
        n++;
    return n;
}

struct Head : ::testing::Test {
    void SetUp() override {
        ASSERT_EQ(tr__config_create(&cfg), 0);
        ASSERT_EQ(tr__config_set(cfg, "cluster_port", "0"), 0);
        ASSERT_EQ(tr__config_set(cfg, "cluster_token", "tok"), 0);
        tr__res total = {};
        tr__res_add(&total, "CPU", 2);
        ASSERT_EQ(tr__cluster_start(cfg, "/nowhere/node.sock", &total, 0, NULL, &cl), 0)
            << tr__last_error();
        tr__buf j = TR__BUF_INIT;
        tr__cluster_status_json(cl, &j);
        std::string s((const char *)j.data, j.len);
        tr__buf_free(&j);
        size_t at = s.find("\"address\":\"") + 11;
        address = s.substr(at, s.find('"', at) - at);
        ASSERT_EQ(tr__rpc_client_create(address.c_str(), "tok", 1 << 20, &c), 0);
    }
    void TearDown() override {
        tr__rpc_client_destroy(c);
        tr__cluster_stop(cl);
        tr__config_destroy(cfg);
    }
    int send(const tr__buf &b) {
        tr__buf r = TR__BUF_INIT;
        int rc = tr__rpc_call(c, b.data, b.len, 5000, &r);
        tr__buf_free(&r);
        return rc;
    }
    /* A registration with one field replaced (key "": none). */
    int reg(const char *id, double cpus, int64_t gpus, const char *addr = "10.0.0.9:1",
            const char *resources = "CPU=1", int client = 0) {
        tr__buf b = TR__BUF_INIT;
        tr__enc_map(&b, 8);
        tr__enc_str(&b, "client");
        tr__enc_int(&b, client);
        tr__enc_str(&b, "op");
        tr__enc_str(&b, "register");
        tr__enc_str(&b, "id");
        tr__enc_str(&b, id);
        tr__enc_str(&b, "address");
        tr__enc_str(&b, addr);
        tr__enc_str(&b, "sock");
        tr__enc_str(&b, "/s");
        tr__enc_str(&b, "cpus");
        tr__enc_double(&b, cpus);
        tr__enc_str(&b, "gpus");
        tr__enc_int(&b, gpus);
        tr__enc_str(&b, "resources");
        tr__enc_str(&b, resources);
        int rc = send(b);
        tr__buf_free(&b);
        return rc;
    }
    int nodes() {
        tr__buf j = TR__BUF_INIT;
        tr__cluster_status_json(cl, &j);
        std::string s((const char *)j.data, j.len);
        tr__buf_free(&j);
        int n = 0;
        for (size_t at = 0; (at = s.find("\"alive\":", at)) != std::string::npos; at++)
            n++;
        return n;
    }
    tr_config *cfg = nullptr;
    tr__cluster *cl = nullptr;
    tr__rpc_client *c = nullptr;
    std::string address;
};

TEST_F(Head, HostilePeersGetErrorsAndTheHeadGoesOn) {
    tr__buf b = TR__BUF_INIT;
    tr__buf_append(&b, "\xc1\xff\x00garbage", 10); /* not msgpack */
    EXPECT_NE(send(b), 0);
    tr__buf_reset(&b);
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "op");
    tr__enc_str(&b, "launch_missiles");
    EXPECT_EQ(send(b), TR_EINVAL);
    tr__buf_reset(&b);
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "op");
    tr__enc_int(&b, 42); /* op of the wrong type */
    EXPECT_NE(send(b), 0);
    tr__buf_reset(&b);
    tr__enc_map(&b, 2);
    tr__enc_str(&b, "op");
    tr__enc_str(&b, "heartbeat");
    tr__enc_str(&b, "id");
    tr__enc_str(&b, "0123456789abcdef"); /* a stranger */
    EXPECT_EQ(send(b), TR_ENOTFOUND);
    tr__buf_free(&b);

    EXPECT_EQ(reg("", 1, 0), TR_EPROTO);                           /* no id */
    EXPECT_EQ(reg("aaaaaaaaaaaaaaaa", NAN, 0), TR_EPROTO);         /* NaN CPUs */
    EXPECT_EQ(reg("aaaaaaaaaaaaaaaa", -1, 0), TR_EPROTO);          /* negative */
    EXPECT_EQ(reg("aaaaaaaaaaaaaaaa", 1, -3), TR_EPROTO);          /* negative GPUs */
    EXPECT_EQ(reg("aaaaaaaaaaaaaaaa", 1, 0, "a\"b:1"), TR_EPROTO); /* a quote in JSON */
    EXPECT_EQ(reg("this-id-is-far-too-long-for-a-node", 1, 0), TR_EPROTO);
    EXPECT_EQ(nodes(), 1); /* the head alone */

    /* garbage straight on the TCP port: the connection dies, the head does not */
    std::string host = address.substr(0, address.rfind(':'));
    int port = atoi(address.c_str() + address.rfind(':') + 1);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    ASSERT_EQ(connect(s, (sockaddr *)&a, sizeof a), 0);
    std::string junk(4096, '\x7f');
    EXPECT_GT(write(s, junk.data(), junk.size()), 0);
    close(s);

    /* status relays this node's own socket: here there is none, so an error, not a hang */
    tr__buf_reset(&b);
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "op");
    tr__enc_str(&b, "status");
    EXPECT_EQ(send(b), TR_ECONNECT);
    tr__buf_free(&b);

    /* a sound registration still works, and twice is one node */
    EXPECT_EQ(reg("bbbbbbbbbbbbbbbb", 4, 1), 0) << tr__last_error();
    EXPECT_EQ(reg("bbbbbbbbbbbbbbbb", 4, 1), 0) << tr__last_error();
    EXPECT_EQ(nodes(), 2);
}

TEST_F(Head, AClientWithoutTheTokenIsRefused) {
    tr__rpc_client *bad;
    ASSERT_EQ(tr__rpc_client_create(address.c_str(), "nope", 1 << 20, &bad), 0);
    tr__buf b = TR__BUF_INIT, r = TR__BUF_INIT;
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "op");
    tr__enc_str(&b, "nodes");
    EXPECT_EQ(tr__rpc_call(bad, b.data, b.len, 5000, &r), TR_EPERM);
    EXPECT_EQ(tr__rpc_call(c, b.data, b.len, 5000, &r), 0) << tr__last_error();
    tr__buf_free(&b);
    tr__buf_free(&r);
    tr__rpc_client_destroy(bad);
}

/* A "place" request for an actor of class C asking for res ("": nothing). */
void enc_place(tr__buf *b, const char *res) {
    tr__enc_map(b, 8);
    for (auto kv : {std::make_pair("op", "place"), std::make_pair("owner", "x/1"),
                    std::make_pair("node", "0123456789abcdef"), std::make_pair("exe", "/bin/true"),
                    std::make_pair("class", "C"), std::make_pair("res", res)}) {
        tr__enc_str(b, kv.first);
        tr__enc_str(b, kv.second);
    }
    tr__enc_str(b, "args");
    tr__enc_bin(b, "", 0);
    tr__enc_str(b, "max_restarts");
    tr__enc_int(b, 0);
}

/* A "place" request for an actor asking nothing: its code, the error's text in *why. */
int place_any(tr__rpc_client *c, std::string *why) {
    tr__buf b = TR__BUF_INIT, r = TR__BUF_INIT;
    enc_place(&b, "");
    int rc = tr__rpc_call(c, b.data, b.len, 10000, &r);
    *why = tr__last_error();
    tr__buf_free(&b);
    tr__buf_free(&r);
    return rc;
}

/* Before: a driver's node that joined by the head's address (a client: it runs no actors)
 * was chosen like any other node for an actor that asks nothing, and the actor failed
 * there with TR_ERESOURCES. Now placements skip clients: of 8, spread over the head and
 * the other node (each failing here for its own reason: no node behind them), none goes
 * to the client. */
TEST_F(Head, AClientIsNeverChosenForAnActor) {
    ASSERT_EQ(reg("cccccccccccccccc", 0, 0, "127.0.0.1:2", "CPU=0", 1), 0) << tr__last_error();
    ASSERT_EQ(reg("nnnnnnnnnnnnnnnn", 4, 0, "127.0.0.1:1"), 0) << tr__last_error();
    int at_node = 0;
    for (int i = 0; i < 8; i++) {
        std::string why;
        EXPECT_NE(place_any(c, &why), 0);
        EXPECT_EQ(why.find("127.0.0.1:2"), std::string::npos) << why;
        at_node += why.find("127.0.0.1:1") != std::string::npos;
    }
    EXPECT_EQ(at_node, 4);
    tr__buf j = TR__BUF_INIT;
    tr__cluster_status_json(cl, &j);
    std::string s((const char *)j.data, j.len);
    tr__buf_free(&j);
    EXPECT_EQ(count_of(s, "\"client\":true"), 1) << s;
}

/* A node that never answers a placement ("create" takes 3 s, past the head's 2.5 s) */
int hung(void *, tr__rpc_req *, const void *, size_t, tr__buf *reply) {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    tr__enc_map(reply, 0);
    return 0;
}

int beat(tr__rpc_client *c, const char *id) {
    tr__buf b = TR__BUF_INIT, r = TR__BUF_INIT;
    tr__enc_map(&b, 2);
    tr__enc_str(&b, "op");
    tr__enc_str(&b, "heartbeat");
    tr__enc_str(&b, "id");
    tr__enc_str(&b, id);
    int rc = tr__rpc_call(c, b.data, b.len, 1000, &r);
    tr__buf_free(&b);
    tr__buf_free(&r);
    return rc;
}

/* Before: every request ran on the head's one RPC thread, so each placement aimed at a hung
 * node held heartbeats back 2.5 s, two in a row made a healthy node "lost" and its drivers'
 * actors were killed. Now placements wait off that thread: 30 s of them, back to back from
 * two callers, and the healthy node's heartbeats are answered in time and it stays alive. */
TEST_F(Head, AHungNodeDoesNotMakeHealthyNodesLost) {
    tr__rpc_server *h;
    int port = 0;
    ASSERT_EQ(tr__rpc_server_create("127.0.0.1:0", "tok", 1 << 20, hung, nullptr, &h, &port), 0);
    std::string hung_at = "127.0.0.1:" + std::to_string(port);
    ASSERT_EQ(reg("hhhhhhhhhhhhhhhh", 1, 0, hung_at.c_str(), "CPU=1,hung=1"), 0)
        << tr__last_error();
    ASSERT_EQ(reg("gggggggggggggggg", 1, 0, "10.0.0.8:1"), 0) << tr__last_error();
    std::atomic<bool> done{false};
    std::atomic<int> late_beats{0}, placed{0}, refused{0};
    std::thread beats([&] { /* both nodes beat (the hung one answers all but placements) */
                            while (!done) {
                                for (const char *id : {"hhhhhhhhhhhhhhhh", "gggggggggggggggg"})
                                    if (beat(c, id) != 0) late_beats++;
                                std::this_thread::sleep_for(std::chrono::milliseconds(500));
                            }
    });
    auto place = [&] {
        tr__buf b = TR__BUF_INIT, r = TR__BUF_INIT;
        enc_place(&b, "hung=1");
        while (!done) {
            tr__buf_reset(&r);
            if (tr__rpc_call(c, b.data, b.len, 10000, &r) == 0)
                placed++;
            else
                refused++;
        }
        tr__buf_free(&b);
        tr__buf_free(&r);
    };
    std::thread p1(place), p2(place);
    int lost_seen = 0;
    for (int i = 0; i < 60; i++) { /* 30 s */
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        tr__buf j = TR__BUF_INIT;
        tr__cluster_status_json(cl, &j);
        lost_seen +=
            std::string((const char *)j.data, j.len).find("\"alive\":false") != std::string::npos;
        tr__buf_free(&j);
    }
    done = true;
    p1.join();
    p2.join();
    beats.join();
    tr__rpc_server_destroy(h);
    EXPECT_EQ(lost_seen, 0) << "a node was counted lost";
    EXPECT_EQ(late_beats.load(), 0) << "heartbeats not answered within 1 s";
    EXPECT_EQ(placed.load(), 0);
    EXPECT_GE(refused.load(), 10) << "placements did not reach the hung node";
    EXPECT_EQ(nodes(), 3);
}

} // namespace
