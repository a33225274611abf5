/* core/rpc_test.cc - core/rpc over real gRPC on loopback: echo (small, 1 MiB, from
 * threads), the token (wrong or missing: refused, the handler never runs), a handler's
 * error code and message, a deadline, nothing listening, size limits, the loopback rule. */
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "core/rpc.h"
#include "core/status.h"
}

namespace {

struct Served {
    std::atomic<int> calls{0};
    std::atomic<int> sleep_ms{0};
};

int handler(void *ctx, tr__rpc_req *call, const void *req, size_t len, tr__buf *reply) {
    auto *s = (Served *)ctx;
    s->calls++;
    if (len == 5 && memcmp(req, "later", 5) == 0) { /* answered from elsewhere, 300 ms on */
        std::thread([call] {
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            tr__buf b = TR__BUF_INIT;
            tr__buf_append(&b, "late", 4);
            tr__rpc_answer(call, 0, &b);
            tr__buf_free(&b);
        }).detach();
        return TR__RPC_LATER;
    }
    if (s->sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(s->sleep_ms));
    std::string r((const char *)req, len);
    if (r == "missing") return tr__err(TR_ENOTFOUND, "no such key: missing");
    return tr__buf_append(reply, req, len);
}

/* Streams: every message echoed back on its stream; ends counted. */
struct Streams {
    std::atomic<int> msgs{0}, ends{0};
};

void on_msg(void *ctx, tr__rpc_stream *st, const void *msg, size_t len) {
    ((Streams *)ctx)->msgs++;
    tr__rpc_stream_send(st, msg, len);
}

void on_end(void *ctx, tr__rpc_stream *) {
    ((Streams *)ctx)->ends++;
}

struct Rpc : ::testing::Test {
    void SetUp() override {
        ASSERT_EQ(
            tr__rpc_server_create("127.0.0.1:0", "s3cret", 4 << 20, handler, &served, &srv, &port),
            0)
            << tr__last_error();
        tr__rpc_server_on_stream(srv, &handlers);
        target = "127.0.0.1:" + std::to_string(port);
    }
    void TearDown() override {
        tr__rpc_server_destroy(srv);
    }
    int call(tr__rpc_client *c, const std::string &req, std::string *out, int timeout = 5000) {
        tr__buf b = TR__BUF_INIT;
        int rc = tr__rpc_call(c, req.data(), req.size(), timeout, &b);
        if (out) *out = std::string((const char *)b.data, b.len);
        tr__buf_free(&b);
        return rc;
    }
    Served served;
    Streams streams;
    tr__rpc_stream_handlers handlers = {on_msg, on_end, &streams, nullptr};
    tr__rpc_server *srv = nullptr;
    int port = 0;
    std::string target;
};

TEST_F(Rpc, EchoesSmallAndLargeMessagesFromManyThreads) {
    tr__rpc_client *c;
    ASSERT_EQ(tr__rpc_client_create(target.c_str(), "s3cret", 4 << 20, &c), 0);
    std::string out;
    ASSERT_EQ(call(c, "hello", &out), 0) << tr__last_error();
    EXPECT_EQ(out, "hello");
    std::string big(1 << 20, 'x');
    for (size_t i = 0; i < big.size(); i += 4093)
        big[i] = (char)('a' + i % 26);
    ASSERT_EQ(call(c, big, &out), 0) << tr__last_error();
    EXPECT_EQ(out, big);
    ASSERT_EQ(call(c, "", &out), 0) << tr__last_error();
    EXPECT_EQ(out, "");
    std::vector<std::thread> ts;
    std::atomic<int> bad{0};
    for (int t = 0; t < 4; t++)
        ts.emplace_back([&, t] {
            for (int i = 0; i < 200; i++) {
                std::string req = std::to_string(t) + ":" + std::to_string(i), got;
                if (call(c, req, &got) || got != req) bad++;
            }
        });
    for (auto &t : ts)
        t.join();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(served.calls.load(), 3 + 800);
    tr__rpc_client_destroy(c);
}

TEST_F(Rpc, AWrongOrMissingTokenIsRefusedAndNothingRuns) {
    for (const char *tok : {"wrong", "", "s3cre", "s3cret!"}) {
        tr__rpc_client *c;
        ASSERT_EQ(tr__rpc_client_create(target.c_str(), tok, 1 << 20, &c), 0);
        EXPECT_EQ(call(c, "hello", nullptr), TR_EPERM) << "token '" << tok << "'";
        tr__rpc_client_destroy(c);
    }
    EXPECT_EQ(served.calls.load(), 0);
}

TEST_F(Rpc, AHandlersErrorReachesTheCallerWithItsMessage) {
    tr__rpc_client *c;
    ASSERT_EQ(tr__rpc_client_create(target.c_str(), "s3cret", 1 << 20, &c), 0);
    EXPECT_EQ(call(c, "missing", nullptr), TR_ENOTFOUND);
    EXPECT_NE(strstr(tr__last_error(), "no such key: missing"), nullptr) << tr__last_error();
    tr__rpc_client_destroy(c);
}

TEST_F(Rpc, ACallEndsAtItsDeadline) {
    served.sleep_ms = 600;
    tr__rpc_client *c;
    ASSERT_EQ(tr__rpc_client_create(target.c_str(), "s3cret", 1 << 20, &c), 0);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(call(c, "slow", nullptr, 100), TR_ETIMEDOUT);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 0.5);
    tr__rpc_client_destroy(c);
}

/* A call its handler takes (TR__RPC_LATER) is answered from another thread; the server's
 * thread serves other calls meanwhile, and its destroy waits for the answer. */
TEST_F(Rpc, ATakenCallIsAnsweredLaterAndHoldsNothingBack) {
    tr__rpc_client *c;
    ASSERT_EQ(tr__rpc_client_create(target.c_str(), "s3cret", 1 << 20, &c), 0);
    std::string late;
    int late_rc = -1;
    auto t0 = std::chrono::steady_clock::now();
    std::thread t([&] { late_rc = call(c, "later", &late); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::string out;
    for (int i = 0; i < 20; i++) { /* while "later" waits: served at once */
        ASSERT_EQ(call(c, "ping", &out), 0) << tr__last_error();
        EXPECT_EQ(out, "ping");
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.25);
    t.join();
    EXPECT_EQ(late_rc, 0) << tr__last_error();
    EXPECT_EQ(late, "late");
    /* taken, then the server goes: destroy waits for the answer, the caller gets it or an
     * end, never a hang */
    std::thread t2([&] { late_rc = call(c, "later", &late, 5000); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    t0 = std::chrono::steady_clock::now();
    tr__rpc_server_destroy(srv);
    srv = nullptr;
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GT(waited, 0.1);
    EXPECT_LT(waited, 3.0);
    t2.join();
    EXPECT_TRUE(late_rc == 0 || late_rc == TR_ECLOSED || late_rc == TR_ECONNECT ||
                late_rc == TR_EIO)
        << tr__errname(late_rc);
    tr__rpc_client_destroy(c);
}

TEST_F(Rpc, SizeLimitsHoldOnBothSides) {
    tr__rpc_client *c;
    ASSERT_EQ(tr__rpc_client_create(target.c_str(), "s3cret", 1024, &c), 0);
    EXPECT_EQ(call(c, std::string(2048, 'y'), nullptr), TR_EMSGSIZE);
    tr__rpc_client_destroy(c);
    ASSERT_EQ(tr__rpc_client_create(target.c_str(), "s3cret", 16 << 20, &c), 0);
    EXPECT_EQ(call(c, std::string(8 << 20, 'y'), nullptr), TR_EMSGSIZE); /* the server's 4 MiB */
    tr__rpc_client_destroy(c);
}

bool eventually(int ms, const std::function<bool()> &pred) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!pred() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return pred();
}

/* 10,000 messages sent without waiting come back in order; two streams at once. */
TEST_F(Rpc, StreamsCarryPipelinedMessagesInOrder) {
    tr__rpc_client *c;
    ASSERT_EQ(tr__rpc_client_create(target.c_str(), "s3cret", 4 << 20, &c), 0);
    std::vector<std::thread> ts;
    std::atomic<int> bad{0};
    for (int t = 0; t < 2; t++)
        ts.emplace_back([&, t] {
            tr__rpc_stream *st;
            if (tr__rpc_stream_open(c, &st)) {
                bad++;
                return;
            }
            const int n = 10000;
            for (int i = 0; i < n; i++) {
                std::string m = std::to_string(t) + "/" + std::to_string(i);
                if (tr__rpc_stream_send(st, m.data(), m.size())) bad++;
            }
            tr__buf b = TR__BUF_INIT;
            for (int i = 0; i < n; i++) {
                tr__buf_reset(&b);
                std::string want = std::to_string(t) + "/" + std::to_string(i);
                if (tr__rpc_stream_recv(st, 10000, &b) ||
                    std::string((const char *)b.data, b.len) != want)
                    bad++;
            }
            tr__buf_reset(&b);
            if (tr__rpc_stream_recv(st, 50, &b) != TR_ETIMEDOUT) bad++; /* nothing more */
            tr__buf_free(&b);
            tr__rpc_stream_close(st);
        });
    for (auto &t : ts)
        t.join();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(streams.msgs.load(), 20000);
    EXPECT_TRUE(eventually(3000, [&] { return streams.ends.load() == 2; })) << streams.ends;
    tr__rpc_client_destroy(c);
}

TEST_F(Rpc, AStreamWithoutTheTokenEndsRefused) {
    tr__rpc_client *c;
    ASSERT_EQ(tr__rpc_client_create(target.c_str(), "wrong", 1 << 20, &c), 0);
    tr__rpc_stream *st;
    ASSERT_EQ(tr__rpc_stream_open(c, &st), 0);
    tr__rpc_stream_send(st, "x", 1);
    tr__buf b = TR__BUF_INIT;
    EXPECT_EQ(tr__rpc_stream_recv(st, 5000, &b), TR_EPERM) << tr__last_error();
    EXPECT_NE(tr__rpc_stream_send(st, "y", 1), 0); /* ended */
    tr__buf_free(&b);
    tr__rpc_stream_close(st);
    tr__rpc_client_destroy(c);
    EXPECT_EQ(streams.msgs.load(), 0);
}

/* A message over the server's limit ends the stream (the client hears it, no hang); one
 * over the client's own limit is refused at once. */
TEST_F(Rpc, AStreamMessageOverALimitEndsOrIsRefused) {
    tr__rpc_client *c;
    ASSERT_EQ(tr__rpc_client_create(target.c_str(), "s3cret", 16 << 20, &c), 0);
    tr__rpc_stream *st;
    ASSERT_EQ(tr__rpc_stream_open(c, &st), 0);
    std::string big(8 << 20, 'z'); /* the server takes 4 MiB */
    EXPECT_EQ(tr__rpc_stream_send(st, big.data(), big.size()), 0);
    tr__buf b = TR__BUF_INIT;
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_NE(tr__rpc_stream_recv(st, 10000, &b), 0);
    EXPECT_NE(tr__last_error(), std::string()); /* says why */
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
    std::string huge(17 << 20, 'z');
    EXPECT_EQ(tr__rpc_stream_send(st, huge.data(), huge.size()), TR_EMSGSIZE);
    tr__buf_free(&b);
    tr__rpc_stream_close(st);
    tr__rpc_client_destroy(c);
    EXPECT_EQ(streams.msgs.load(), 0);
}

TEST(RpcAlone, AStreamSeesItsServerGo) {
    tr__rpc_server *s;
    int port = 0;
    Served served;
    Streams streams;
    tr__rpc_stream_handlers h = {on_msg, on_end, &streams, nullptr};
    ASSERT_EQ(tr__rpc_server_create("127.0.0.1:0", "t", 1 << 20, handler, &served, &s, &port), 0);
    tr__rpc_server_on_stream(s, &h);
    tr__rpc_client *c;
    std::string target = "127.0.0.1:" + std::to_string(port);
    ASSERT_EQ(tr__rpc_client_create(target.c_str(), "t", 1 << 20, &c), 0);
    tr__rpc_stream *st;
    ASSERT_EQ(tr__rpc_stream_open(c, &st), 0);
    tr__buf b = TR__BUF_INIT;
    ASSERT_EQ(tr__rpc_stream_send(st, "ping", 4), 0);
    ASSERT_EQ(tr__rpc_stream_recv(st, 5000, &b), 0) << tr__last_error();
    tr__rpc_server_destroy(s); /* with the stream open: it ends on both sides */
    EXPECT_EQ(streams.ends.load(), 1);
    auto t0 = std::chrono::steady_clock::now();
    int rc = tr__rpc_stream_recv(st, 10000, &b);
    EXPECT_TRUE(rc == TR_ECLOSED || rc == TR_ECONNECT || rc == TR_EIO) << tr__errname(rc);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
    tr__buf_free(&b);
    tr__rpc_stream_close(st);
    tr__rpc_client_destroy(c);
}

TEST(RpcAlone, NothingListeningIsAConnectError) {
    tr__rpc_server *s;
    int port = 0;
    Served served;
    ASSERT_EQ(tr__rpc_server_create("127.0.0.1:0", "t", 1 << 20, handler, &served, &s, &port), 0);
    tr__rpc_server_destroy(s); /* the port is free again */
    tr__rpc_client *c;
    std::string target = "127.0.0.1:" + std::to_string(port);
    ASSERT_EQ(tr__rpc_client_create(target.c_str(), "t", 1 << 20, &c), 0);
    tr__buf b = TR__BUF_INIT;
    int rc = tr__rpc_call(c, "x", 1, 3000, &b);
    EXPECT_TRUE(rc == TR_ECONNECT) << tr__errname(rc) << ": " << tr__last_error();
    tr__buf_free(&b);
    tr__rpc_client_destroy(c);
}

/* Loopback is no exception: any local user reaches a loopback port. */
TEST(RpcAlone, EveryServerNeedsAToken) {
    tr__rpc_server *s = nullptr;
    Served served;
    for (const char *bind : {"0.0.0.0:0", "127.0.0.1:0", "[::1]:0"}) {
        EXPECT_EQ(tr__rpc_server_create(bind, "", 1 << 20, handler, &served, &s, nullptr),
                  TR_EINVAL)
            << bind;
        EXPECT_EQ(tr__rpc_server_create(bind, nullptr, 1 << 20, handler, &served, &s, nullptr),
                  TR_EINVAL)
            << bind;
        EXPECT_EQ(s, nullptr);
    }
    EXPECT_EQ(tr__rpc_server_create("0.0.0.0:0", "tok", 1 << 20, handler, &served, &s, nullptr), 0)
        << tr__last_error();
    tr__rpc_server_destroy(s);
}

} // namespace

namespace {

/* TLS: the test certificates (core/testdata: a CA, a node certificate it signed for
 * "troupe-node", another CA). */
TEST(RpcTls, CallsAndStreamsGoOverTlsAndMismatchesAreRefused) {
    tr__rpc_tls srv_tls, cli_tls, wrong_ca, anonymous, stranger;
    ASSERT_EQ(tr__rpc_tls_load("core/testdata/node.pem", "core/testdata/node.key",
                               "core/testdata/ca.pem", &srv_tls),
              0)
        << tr__last_error();
    ASSERT_EQ(tr__rpc_tls_load("core/testdata/node.pem", "core/testdata/node.key",
                               "core/testdata/ca.pem", &cli_tls),
              0);
    ASSERT_EQ(tr__rpc_tls_load(nullptr, nullptr, "core/testdata/ca.pem", &anonymous), 0);
    /* a certificate for the right name, that the CA did not sign (self-signed) */
    ASSERT_EQ(tr__rpc_tls_load("core/testdata/stranger.pem", "core/testdata/stranger.key",
                               "core/testdata/ca.pem", &stranger),
              0);
    ASSERT_EQ(tr__rpc_tls_load(nullptr, nullptr, "core/testdata/other_ca.pem", &wrong_ca), 0);
    tr__rpc_tls none;
    EXPECT_EQ(tr__rpc_tls_load("core/testdata/nope.pem", nullptr, nullptr, &none), TR_EINVAL);
    EXPECT_NE(std::string(tr__last_error()).find("nope.pem"), std::string::npos);
    tr__rpc_tls half = {srv_tls.cert, nullptr, srv_tls.ca},
                no_ca = {srv_tls.cert, srv_tls.key, nullptr};
    Served served;
    tr__rpc_server *srv = nullptr;
    int port = 0;
    EXPECT_EQ(tr__rpc_server_create_tls("127.0.0.1:0", "t", &half, 1 << 20, handler, &served, &srv,
                                        &port),
              TR_EINVAL);
    /* TLS is mutual: a server without the CA that signs its clients is refused */
    EXPECT_EQ(tr__rpc_server_create_tls("127.0.0.1:0", "t", &no_ca, 1 << 20, handler, &served, &srv,
                                        &port),
              TR_EINVAL);
    ASSERT_EQ(tr__rpc_server_create_tls("127.0.0.1:0", "t", &srv_tls, 1 << 20, handler, &served,
                                        &srv, &port),
              0)
        << tr__last_error();
    Streams streams;
    tr__rpc_stream_handlers h = {on_msg, on_end, &streams, nullptr};
    tr__rpc_server_on_stream(srv, &h);
    std::string target = "127.0.0.1:" + std::to_string(port);
    auto call = [&](const tr__rpc_tls *tls, const char *token, std::string *out) {
        tr__rpc_client *c;
        EXPECT_EQ(tr__rpc_client_create_tls(target.c_str(), token, tls, 1 << 20, &c), 0);
        tr__buf r = TR__BUF_INIT;
        int rc = tr__rpc_call(c, "over tls", 8, 3000, &r);
        if (out) out->assign(r.data ? r.data + r.off : "", tr__buf_avail(&r));
        tr__buf_free(&r);
        tr__rpc_client_destroy(c);
        return rc;
    };
    std::string out;
    EXPECT_EQ(call(&cli_tls, "t", &out), 0) << tr__last_error();
    EXPECT_EQ(out, "over tls");
    EXPECT_EQ(call(&cli_tls, "wrong", nullptr), TR_EPERM); /* the token still counts */
    EXPECT_EQ(call(nullptr, "t", nullptr), TR_ECONNECT);   /* plain to a TLS server */
    EXPECT_EQ(call(&wrong_ca, "t", nullptr), TR_ECONNECT); /* a CA that did not sign it */
    /* before: any client that trusted the CA was taken; now it must show a certificate
     * the CA signed, token or not */
    EXPECT_EQ(call(&anonymous, "t", nullptr), TR_ECONNECT);
    EXPECT_EQ(call(&stranger, "t", nullptr), TR_ECONNECT);
    EXPECT_EQ(served.calls, 1); /* only the first ran: the rest were refused before it */
    /* a stream over TLS */
    tr__rpc_client *c;
    tr__rpc_stream *st;
    ASSERT_EQ(tr__rpc_client_create_tls(target.c_str(), "t", &cli_tls, 1 << 20, &c), 0);
    ASSERT_EQ(tr__rpc_stream_open(c, &st), 0);
    ASSERT_EQ(tr__rpc_stream_send(st, "ping", 4), 0);
    tr__buf b = TR__BUF_INIT;
    EXPECT_EQ(tr__rpc_stream_recv(st, 5000, &b), 0) << tr__last_error();
    EXPECT_EQ(std::string(b.data ? b.data + b.off : "", tr__buf_avail(&b)), "ping");
    tr__buf_free(&b);
    tr__rpc_stream_close(st);
    tr__rpc_client_destroy(c);
    tr__rpc_server_destroy(srv);
    /* a TLS client to a plain server */
    ASSERT_EQ(tr__rpc_server_create("127.0.0.1:0", "t", 1 << 20, handler, &served, &srv, &port), 0);
    target = "127.0.0.1:" + std::to_string(port);
    EXPECT_EQ(call(&cli_tls, "t", nullptr), TR_ECONNECT);
    tr__rpc_server_destroy(srv);
    tr__rpc_tls_free(&srv_tls);
    tr__rpc_tls_free(&cli_tls);
    tr__rpc_tls_free(&wrong_ca);
    tr__rpc_tls_free(&anonymous);
    tr__rpc_tls_free(&stranger);
}

/* Idle connections, more than the server's cap (its descriptor limit made small here): a
 * caller with the token is served while they are held and after, over TLS and plain; the
 * server closes the ones that never send a request. */
void flood_then_call(const tr__rpc_tls *srv_tls, const tr__rpc_tls *cli_tls) {
    struct rlimit was, small;
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &was), 0);
    if (was.rlim_max < 2000) GTEST_SKIP() << "needs 2,000 descriptors";
    small = was;
    small.rlim_cur = 900; /* the server's cap: (900 - 256) / 3 = 214 connections */
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &small), 0);
    Served served;
    tr__rpc_server *srv = nullptr;
    int port = 0;
    int rc = tr__rpc_server_create_tls("127.0.0.1:0", "t", srv_tls, 1 << 20, handler, &served, &srv,
                                       &port);
    was.rlim_cur = was.rlim_max;
    setrlimit(RLIMIT_NOFILE, &was);
    ASSERT_EQ(rc, 0) << tr__last_error();
    std::string target = "127.0.0.1:" + std::to_string(port);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    std::vector<int> fds;
    for (int i = 0; i < 700; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(connect(fd, (sockaddr *)&a, sizeof a), 0) << i << ": " << strerror(errno);
        fds.push_back(fd);
    }
    auto call = [&] {
        tr__rpc_client *c;
        EXPECT_EQ(tr__rpc_client_create_tls(target.c_str(), "t", cli_tls, 1 << 20, &c), 0);
        tr__buf r = TR__BUF_INIT;
        int rc = tr__rpc_call(c, "hello", 5, 5000, &r);
        tr__buf_free(&r);
        tr__rpc_client_destroy(c);
        return rc;
    };
    for (int i = 0; i < 3; i++)
        EXPECT_EQ(call(), 0) << "during the flood: " << tr__last_error();
    int closed = 0; /* evicted at once, or within 10 s for the last ones */
    for (int w = 0; w < 150 && closed < 700; w++) {
        closed = 0;
        for (int fd : fds) {
            char ch;
            ssize_t r = recv(fd, &ch, 1, MSG_DONTWAIT);
            closed += r == 0 || (r < 0 && errno != EAGAIN);
        }
        if (closed < 700) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(closed, 700);
    for (int fd : fds)
        close(fd);
    EXPECT_EQ(call(), 0) << "after the flood: " << tr__last_error();
    tr__rpc_server_destroy(srv);
}

TEST(RpcFlood, IdleConnectionsPastTheCapDoNotShutOutACallerPlain) {
    flood_then_call(nullptr, nullptr);
}

TEST(RpcFlood, IdleConnectionsPastTheCapDoNotShutOutACallerTls) {
    tr__rpc_tls srv_tls, cli_tls;
    ASSERT_EQ(tr__rpc_tls_load("core/testdata/node.pem", "core/testdata/node.key",
                               "core/testdata/ca.pem", &srv_tls),
              0);
    ASSERT_EQ(tr__rpc_tls_load("core/testdata/node.pem", "core/testdata/node.key",
                               "core/testdata/ca.pem", &cli_tls),
              0);
    flood_then_call(&srv_tls, &cli_tls);
    tr__rpc_tls_free(&srv_tls);
    tr__rpc_tls_free(&cli_tls);
}

} // namespace
