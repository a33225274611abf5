/* tests/node_test.cc - the node service against hostile input (raw bytes on its socket and
 * on a worker's socket), and a standalone node started by `troupe start` and reached by
 * address. */
#include <dirent.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include "tests/test_actors.h"

extern "C" {
#include "actor/protocol.h"
#include "actor/tasks.h"
#include "core/codec.h"
#include "core/clock.h"
#include "core/frame.h"
#include "core/kv.h"
#include "core/log.h"
#include "core/nodeconn.h"
#include "core/ring.h"
}

namespace {

struct Raw {
    int fd = -1;
    tr__buf in = TR__BUF_INIT;
    explicit Raw(const std::string &path) {
        fd = tr__unix_connect(path.c_str());
    }
    ~Raw() {
        if (fd >= 0) close(fd);
        tr__buf_free(&in);
    }
    void send_bytes(const void *p, size_t n) {
        ASSERT_EQ((size_t)::send(fd, p, n, MSG_NOSIGNAL), n);
    }
    void send_frame(uint8_t type, uint64_t seq, const std::string &body,
                    uint32_t len_override = 0) {
        tr__frame_hdr h = {TR__FRAME_MAGIC, TR__FRAME_VERSION, type,
                           len_override ? len_override : (uint32_t)body.size(), seq};
        send_bytes(&h, sizeof h);
        if (!body.empty()) send_bytes(body.data(), body.size());
    }
    /* Reads one reply; returns its rc, or a transport code. */
    int reply_rc(uint64_t *seq = nullptr, int timeout_ms = 3000) {
        tr__frame_hdr h;
        const char *body;
        int rc = tr__read_frame(fd, &in, 1 << 20, tr__deadline_ms(timeout_ms), &h, &body);
        if (rc < 0) return rc;
        tr__dec d;
        EXPECT_EQ(tr__dec_init(&d, body, h.len), 0);
        int64_t code = 999;
        EXPECT_EQ(tr__get_int(d.root, "rc", &code), 0);
        tr__dec_free(&d);
        tr__buf_consume(&in, TR__FRAME_HDR + h.len);
        if (seq) *seq = h.seq;
        return (int)code;
    }
    /* True once the peer has closed the connection. */
    bool closed_by_peer(int timeout_ms = 3000) {
        struct pollfd p = {fd, POLLIN, 0};
        while (poll(&p, 1, timeout_ms) > 0) {
            char buf[4096];
            ssize_t n = recv(fd, buf, sizeof buf, 0);
            if (n <= 0) return true;
        }
        return false;
    }
    static int64_t tr__deadline_ms(int ms) {
        return tr__deadline(ms);
    }
};

std::string map_body(std::initializer_list<std::pair<std::string, std::string>> kv) {
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, (uint32_t)kv.size());
    for (auto &p : kv) {
        tr__enc_str(&b, p.first.c_str());
        tr__enc_str(&b, p.second.c_str());
    }
    std::string s(b.data, b.len);
    tr__buf_free(&b);
    return s;
}

/* Says HELLO on r as a driver whose workers run this test's program (its actors'). */
void hello_as_driver(Raw &r) {
    char self[4096];
    ASSERT_TRUE(realpath("/proc/self/exe", self));
    r.send_frame(TR__MSG_HELLO, 1, map_body({{"role", "driver"}, {"exe", self}}));
    ASSERT_EQ(r.reply_rc(), 0);
}

/* Sends an ACTOR_CREATE of class cls named name (no restarts, no resources) with one key
 * more, whose value `value` encodes (a forged one), and returns the reply's code. */
int forged_create(Raw &r, uint64_t seq, const char *cls, const char *name, const char *key,
                  const std::function<void(tr__buf *)> &value) {
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 6);
    tr__enc_str(&b, "class");
    tr__enc_str(&b, cls);
    tr__enc_str(&b, "args");
    tr__enc_bin(&b, "n", 1);
    tr__enc_str(&b, "max_restarts");
    tr__enc_int(&b, 0);
    tr__enc_str(&b, "res");
    tr__enc_str(&b, "");
    tr__enc_str(&b, "name");
    tr__enc_str(&b, name);
    tr__enc_str(&b, key);
    value(&b);
    r.send_frame(TR__MSG_ACTOR_CREATE, seq, std::string(b.data, b.len));
    tr__buf_free(&b);
    return r.reply_rc(nullptr, 10000);
}

/* Connects to a node, says HELLO claiming to own it, and hangs up: what an embedded
 * node's owner does when it exits. */
void claim_ownership_and_leave(const std::string &addr) {
    Raw r(addr);
    ASSERT_GE(r.fd, 0);
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 2);
    tr__enc_str(&b, "role");
    tr__enc_str(&b, "driver");
    tr__enc_str(&b, "owner");
    tr__enc_int(&b, 1);
    r.send_frame(TR__MSG_HELLO, 1, std::string(b.data, b.len));
    tr__buf_free(&b);
    EXPECT_EQ(r.reply_rc(), 0);
}

class NodeTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
        addr = tr_runtime_address(rt);
    }
    void TearDown() override {
        tr_shutdown(rt);
    }
    void expect_node_serves() {
        ASSERT_EQ(tr_kv_put(rt, "still", "alive", 5), 0) << tr_last_error();
        void *v;
        size_t n;
        ASSERT_EQ(tr_kv_get(rt, "still", &v, &n), 0);
        EXPECT_EQ(std::string((char *)v, n), "alive");
        tr_free(v);
        char *json;
        ASSERT_EQ(tr_node_status(rt, &json), 0);
        tr_free(json);
    }
    /* An actor's worker socket in the node's session directory ("" if none). */
    std::string worker_socket() const {
        std::string session = addr.substr(0, addr.rfind('/')), found;
        DIR *d = opendir(session.c_str());
        while (struct dirent *e = d ? readdir(d) : nullptr)
            if (strncmp(e->d_name, "a-", 2) == 0) found = session + "/" + e->d_name;
        if (d) closedir(d);
        return found;
    }
    tr_runtime *rt = nullptr;
    std::string addr;
};

TEST_F(NodeTest, GarbageBytesCloseOnlyThatConnection) {
    Raw r(addr);
    ASSERT_GE(r.fd, 0);
    const char junk[] = "GET / HTTP/1.1\r\nHost: troupe\r\n\r\n";
    r.send_bytes(junk, sizeof junk);
    EXPECT_TRUE(r.closed_by_peer());
    expect_node_serves();
}

TEST_F(NodeTest, BadVersionAndOversizedFrames) {
    {
        Raw r(addr);
        tr__frame_hdr h = {TR__FRAME_MAGIC, 99, TR__MSG_KV_GET, 0, 1};
        r.send_bytes(&h, sizeof h);
        EXPECT_TRUE(r.closed_by_peer());
    }
    {
        Raw r(addr);
        r.send_frame(TR__MSG_KV_PUT, 7, "", 0xfffffff0u);
        uint64_t seq = 0;
        EXPECT_EQ(r.reply_rc(&seq), TR_EMSGSIZE);
        EXPECT_EQ(seq, 7u);
        EXPECT_TRUE(r.closed_by_peer());
    }
    expect_node_serves();
}

TEST_F(NodeTest, MalformedBodiesGetErrorRepliesAndTheConnectionLivesOn) {
    Raw r(addr);
    r.send_frame(TR__MSG_KV_GET, 1, std::string("\xc1\xc1\xc1", 3)); /* 0xc1: never used */
    EXPECT_EQ(r.reply_rc(), TR_EPROTO);
    r.send_frame(TR__MSG_KV_GET, 2, std::string("\x93\x01\x02", 3)); /* truncated array */
    EXPECT_EQ(r.reply_rc(), TR_EPROTO);
    r.send_frame(TR__MSG_KV_GET, 3, std::string("\x01", 1)); /* not a map */
    EXPECT_EQ(r.reply_rc(), TR_EPROTO);
    r.send_frame(200, 4, map_body({})); /* unknown type */
    EXPECT_EQ(r.reply_rc(), TR_EPROTO);
    r.send_frame(TR__MSG_KV_PUT, 5, map_body({{"value", "x"}})); /* no key */
    EXPECT_EQ(r.reply_rc(), TR_EPROTO);
    r.send_frame(TR__MSG_HELLO, 6, map_body({{"role", "emperor"}}));
    EXPECT_EQ(r.reply_rc(), TR_EINVAL);
    r.send_frame(TR__MSG_ACTOR_CREATE, 7, map_body({{"class", "Counter"}})); /* no HELLO */
    EXPECT_EQ(r.reply_rc(), TR_ESTATE);
    r.send_frame(TR__MSG_ACTOR_RESOLVE, 8, map_body({{"id", "short"}}));
    EXPECT_EQ(r.reply_rc(), TR_EPROTO);
    r.send_frame(TR__MSG_ACTOR_KILL, 9, map_body({{"id", std::string(16, 'z')}}));
    EXPECT_EQ(r.reply_rc(), TR_ENOTFOUND); /* well-formed, but no such actor */
    /* a real actor id, but this connection is not its worker */
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "x", 1, &a), 0);
    ASSERT_EQ(tr_actor_wait_ready(rt, a, 10000), 0);
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "id");
    tr__enc_bin(&b, a.b, 16);
    r.send_frame(TR__MSG_WORKER_START, 10, std::string(b.data, b.len));
    tr__buf_free(&b);
    EXPECT_EQ(r.reply_rc(), TR_EPERM);
    /* still the same connection, still served */
    r.send_frame(TR__MSG_KV_PUT, 11, map_body({{"key", "k"}, {"value", "v"}}));
    EXPECT_EQ(r.reply_rc(), 0);
    expect_node_serves();
    int64_t v;
    EXPECT_EQ(call_i64(rt, a, "add", 2, &v), 0);
}

/* A create that speaks the protocol itself: binding data over the limit is refused at
 * the node (the C API refuses it before sending), and a wrong-typed one is not kept. */
TEST_F(NodeTest, BindingDataIsBoundedAtTheNode) {
    Raw r(addr);
    hello_as_driver(r);
    auto create = [&](uint64_t seq, bool as_string, size_t n) {
        return forged_create(r, seq, "Counter", "raw-bdata", "bdata", [&](tr__buf *b) {
            std::string big(n, 'x');
            if (as_string)
                tr__enc_strn(b, big.data(), big.size());
            else
                tr__enc_int(b, 7);
        });
    };
    EXPECT_EQ(create(2, true, TR_ACTOR_BINDING_DATA_MAX + 1), TR_EINVAL);
    EXPECT_EQ(create(3, false, 0), 0); /* (not a string: the actor has none) */
    tr_actor_id a;
    ASSERT_EQ(tr_actor_get(rt, "raw-bdata", &a), 0) << tr_last_error();
    char *got = (char *)"untouched";
    EXPECT_EQ(tr_actor_binding_data(rt, a, &got), 0) << tr_last_error();
    EXPECT_EQ(got, nullptr);
    EXPECT_EQ(tr_actor_kill(rt, a, 1), 0);
    expect_node_serves();
}

/* A create that speaks the protocol itself with a forged max_task_retries ("tretries"):
 * below -1 or past an int is refused, a wrong type is a protocol error, and the node
 * serves on; a good one is kept and answered at resolve (the C API refuses -2 before
 * sending: actor_test). */
TEST_F(NodeTest, TaskRetriesAreBoundedAtTheNode) {
    Raw r(addr);
    hello_as_driver(r);
    auto create = [&](uint64_t seq, const char *name, int kind, int64_t v) {
        return forged_create(r, seq, "Counter", name, "tretries", [&](tr__buf *b) {
            if (kind)
                tr__enc_int(b, v);
            else
                tr__enc_str(b, "many");
        });
    };
    EXPECT_EQ(create(2, "t-low", 1, -5), TR_EINVAL);
    EXPECT_EQ(create(3, "t-high", 1, (int64_t)1 << 40), TR_EINVAL);
    EXPECT_EQ(create(4, "t-type", 0, 0), TR_EPROTO);
    EXPECT_EQ(create(5, "t-good", 1, 3), 0);
    tr_actor_id a, none;
    EXPECT_EQ(tr_actor_get(rt, "t-low", &none), TR_ENOTFOUND);
    ASSERT_EQ(tr_actor_get(rt, "t-good", &a), 0) << tr_last_error();
    int64_t v;
    EXPECT_EQ(call_i64(rt, a, "add", 2, &v), 0);
    EXPECT_EQ(tr_actor_kill(rt, a, 1), 0);
    expect_node_serves();
}

/* A create that speaks the protocol itself with a forged creator's namespace ("ns"): over
 * 255 bytes or holding a 0 byte is refused, another type is no namespace, and a good one is
 * its worker's (its runtime's namespace); the node serves on. */
TEST_F(NodeTest, AnActorsNamespaceIsBoundedAtTheNode) {
    Raw r(addr);
    hello_as_driver(r);
    auto create = [&](uint64_t seq, const char *name, const std::string *ns) {
        return forged_create(r, seq, "Counter", name, "ns", [&](tr__buf *b) {
            if (ns)
                tr__enc_strn(b, ns->data(), ns->size());
            else
                tr__enc_int(b, 7);
        });
    };
    std::string too_long(256, 'n'), with_zero("a\0b", 3), good = "forged";
    EXPECT_EQ(create(2, "ns-long", &too_long), TR_EINVAL);
    EXPECT_EQ(create(3, "ns-zero", &with_zero), TR_EINVAL);
    EXPECT_EQ(create(4, "ns-type", nullptr), 0);
    EXPECT_EQ(create(5, "ns-good", &good), 0);
    tr_actor_id a, none;
    EXPECT_EQ(tr_actor_get(rt, "ns-long", &none), TR_ENOTFOUND);
    for (auto [name, want] : {std::pair{"ns-type", ""}, std::pair{"ns-good", "forged"}}) {
        ASSERT_EQ(tr_actor_get(rt, name, &a), 0) << tr_last_error();
        std::string out;
        EXPECT_EQ(call_str(rt, a, "namespace", "", &out), 0) << tr_last_error();
        EXPECT_EQ(out, want) << name;
        EXPECT_EQ(tr_actor_kill(rt, a, 1), 0);
    }
    expect_node_serves();
}

/* A create's task_res (the CPUs a task worker holds while it runs a task): another class's
 * is ignored; a malformed, oversized or other than CPU one refused, one no node could hold
 * refused; and the node serves on. */
TEST_F(NodeTest, ATaskWorkersResourcesAreCheckedAtTheNode) {
    Raw r(addr);
    hello_as_driver(r);
    auto create = [&](uint64_t seq, const char *cls, const char *name, const std::string &tres) {
        return forged_create(r, seq, cls, name, "task_res",
                             [&](tr__buf *b) { tr__enc_strn(b, tres.data(), tres.size()); });
    };
    EXPECT_EQ(create(2, "Counter", "tres-other", "CPU=1000"), 0); /* (not a task worker's) */
    EXPECT_EQ(create(3, TR__TASKS_CLASS, "tres-bad", "CPU=x,=,"), TR_EINVAL);
    EXPECT_EQ(create(4, TR__TASKS_CLASS, "tres-long", std::string(5000, 'a')), TR_EINVAL);
    EXPECT_EQ(create(5, TR__TASKS_CLASS, "tres-zero", std::string("CPU=1\0x", 7)), TR_EINVAL);
    EXPECT_EQ(create(6, TR__TASKS_CLASS, "tres-big", "CPU=1e308"), TR_ERESOURCES);
    EXPECT_EQ(create(8, TR__TASKS_CLASS, "tres-quote", "x\"}=1"), TR_EINVAL); /* (CPU alone) */
    EXPECT_EQ(create(9, TR__TASKS_CLASS, "tres-more", "CPU=1,slot=1"), TR_EINVAL);
    EXPECT_EQ(create(7, TR__TASKS_CLASS, "tres-neg", "CPU=-1"), TR_EINVAL);
    tr_actor_id a;
    ASSERT_EQ(tr_actor_get(rt, "tres-other", &a), 0) << tr_last_error();
    EXPECT_EQ(tr_actor_wait_ready(rt, a, 30000), 0) << tr_last_error();
    EXPECT_EQ(tr_actor_kill(rt, a, 1), 0);
    for (const char *gone :
         {"tres-bad", "tres-long", "tres-zero", "tres-big", "tres-neg", "tres-quote", "tres-more"})
        EXPECT_EQ(tr_actor_get(rt, gone, &a), TR_ENOTFOUND) << gone;
    expect_node_serves();
}

TEST_F(NodeTest, RandomFramesNeverCrashTheNode) {
    std::mt19937_64 rng(12345);
    for (int round = 0; round < 20; round++) {
        Raw r(addr);
        for (int i = 0; i < 100; i++) {
            std::string body(rng() % 64, '\0');
            for (auto &ch : body)
                ch = (char)rng();
            if (i % 3 == 0 && !body.empty()) body[0] = (char)(0x80 | (rng() % 16)); /* a map */
            uint8_t type = (uint8_t)(rng() % 8 == 0 ? rng() : 2 + rng() % 70);
            if (type == TR__MSG_SHUTDOWN) type = TR__MSG_KV_GET;
            r.send_frame(type, (uint64_t)i, body);
        }
    }
    expect_node_serves();
}

TEST_F(NodeTest, GarbageOnAWorkerSocketDropsOnlyThatCaller) {
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "w", 1, &a), 0);
    int64_t v;
    ASSERT_EQ(call_i64(rt, a, "add", 1, &v), 0);
    std::string wsock = worker_socket();
    ASSERT_FALSE(wsock.empty()) << "no actor's socket in the node's session";
    {
        Raw r(wsock);
        ASSERT_GE(r.fd, 0);
        r.send_bytes("\x00\x01garbage-garbage-garbage", 24);
        EXPECT_TRUE(r.closed_by_peer());
    }
    {
        Raw r(wsock); /* a well-formed header with a body that is not a call */
        r.send_frame(TR__MSG_CALL, 1, std::string("\x92\x01\x02", 3));
        EXPECT_TRUE(r.closed_by_peer());
    }
    {
        Raw r(wsock); /* oversized */
        r.send_frame(TR__MSG_CALL, 1, "", 0xfffffff0u);
        EXPECT_TRUE(r.closed_by_peer());
    }
    {
        Raw r(wsock); /* a stream's item, which only a worker sends */
        r.send_frame(TR__MSG_ITEM, 1, std::string("\x92\x00\xc4\x01x", 5));
        EXPECT_TRUE(r.closed_by_peer());
    }
    ASSERT_EQ(call_i64(rt, a, "add", 1, &v), 0);
    EXPECT_EQ(v, 2);
}

/* Call rings offered to a worker by hand (docs/ARCHITECTURE.md, call rings): one without
 * a descriptor, or with one that is not a sealed ring, is refused and the socket serves
 * on; a proper one carries a call both ways; a ring whose writer lies about its position,
 * or a frame other than WAKE on the socket once the rings are on, drops only that caller. */
TEST_F(NodeTest, CallRingsAreTakenOnlyWholeAndAPeerThatBreaksThemIsDropped) {
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "w", 1, &a), 0);
    int64_t v;
    ASSERT_EQ(call_i64(rt, a, "add", 1, &v), 0);
    std::string wsock = worker_socket();
    ASSERT_FALSE(wsock.empty()) << "no actor's socket in the node's session";
    auto call_frame = [](uint64_t seq, int64_t arg) {
        tr__buf b = TR__BUF_INIT;
        tr__call_frame(&b, seq, "add", &arg, sizeof arg, nullptr, 0);
        std::string f(b.data + b.off, tr__buf_avail(&b));
        tr__buf_free(&b);
        return f;
    };
    /* the next frame on the socket: its type and seq, and a RESULT's value */
    auto next = [](Raw &r, int *type, uint64_t *seq, int64_t *value) {
        tr__frame_hdr h;
        const char *body;
        int rc = tr__read_frame(r.fd, &r.in, 1 << 20, tr__deadline(5000), &h, &body);
        if (rc < 0) return rc;
        *type = h.type;
        *seq = h.seq;
        int res = -1, is_ref = 0;
        const void *data = nullptr, *kept = nullptr;
        size_t n = 0;
        if (h.type == TR__MSG_RESULT &&
            tr__result_parse(body, h.len, &res, &data, &n, &is_ref, &kept) == 0 && n == 8)
            memcpy(value, data, 8);
        tr__buf_consume(&r.in, TR__FRAME_HDR + h.len);
        return 0;
    };
    int type = 0;
    uint64_t seq = 0;
    int64_t out = 0;
    {
        Raw r(wsock); /* no descriptor: refused (seq: a code), the socket serves on */
        r.send_frame(TR__MSG_RING, 0, "");
        ASSERT_EQ(next(r, &type, &seq, &out), 0);
        EXPECT_EQ(type, TR__MSG_RING);
        EXPECT_NE(seq, 0u);
        std::string f = call_frame(1, 10);
        r.send_bytes(f.data(), f.size());
        ASSERT_EQ(next(r, &type, &seq, &out), 0);
        EXPECT_EQ(type, TR__MSG_RESULT);
        EXPECT_EQ(out, 11);
    }
    {
        Raw r(wsock); /* a pipe, not a ring: refused */
        int p[2];
        ASSERT_EQ(pipe(p), 0);
        ASSERT_EQ(tr__send_frame_fd(r.fd, TR__MSG_RING, 0, nullptr, 0, p[0]), 0);
        close(p[0]);
        close(p[1]);
        ASSERT_EQ(next(r, &type, &seq, &out), 0);
        EXPECT_EQ(type, TR__MSG_RING);
        EXPECT_NE(seq, 0u);
    }
    for (int attack = 0; attack < 3; attack++) {
        SCOPED_TRACE(attack);
        Raw r(wsock);
        tr__ring *ring = nullptr;
        int mfd = -1;
        ASSERT_EQ(tr__ring_create(TR__RING_CAP, &ring, &mfd), 0);
        ASSERT_EQ(tr__send_frame_fd(r.fd, TR__MSG_RING, 0, nullptr, 0, mfd), 0);
        ASSERT_EQ(next(r, &type, &seq, &out), 0);
        EXPECT_EQ(type, TR__MSG_RING);
        EXPECT_EQ(seq, 0u) << "a proper ring is taken";
        /* a call on the ring, the doorbell on the socket; its result on the other ring */
        tr__buf o = TR__BUF_INIT, in = TR__BUF_INIT;
        std::string f = call_frame(7, 100);
        tr__buf_append(&o, f.data(), f.size());
        ASSERT_EQ(tr__ring_write(ring, &o, nullptr), (int64_t)f.size());
        r.send_frame(TR__MSG_WAKE, 0, "");
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (tr__buf_avail(&in) < TR__FRAME_HDR && std::chrono::steady_clock::now() < until)
            ASSERT_GE(tr__ring_read(ring, &in, nullptr), 0);
        tr__frame_hdr h;
        const char *body;
        ASSERT_EQ(tr__frame_parse(&in, 1 << 20, &h, &body), 1);
        EXPECT_EQ(h.type, TR__MSG_RESULT);
        EXPECT_EQ(h.seq, 7u);
        if (attack == 0) { /* our side says it wrote more than the ring holds */
            auto *hdr = (uint64_t *)mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
            ASSERT_NE(hdr, MAP_FAILED);
            __atomic_store_n(hdr + 64 / 8, (uint64_t)1 << 40, __ATOMIC_RELEASE);
            munmap(hdr, 4096);
            /* (the doorbell; a worker polling its rings may have dropped us already) */
            tr__buf wb = TR__BUF_INIT;
            tr__frame_put_hdr(&wb, TR__MSG_WAKE, 0, 0);
            ssize_t sent = ::send(r.fd, wb.data + wb.off, tr__buf_avail(&wb), MSG_NOSIGNAL);
            (void)sent;
            tr__buf_free(&wb);
        } else if (attack == 1) { /* a call on the socket once the rings are on */
            std::string g = call_frame(8, 1);
            r.send_bytes(g.data(), g.size());
        } else { /* garbage on the ring */
            tr__buf_append(&o, "\x01\x02garbage-garbage-garbage", 26);
            ASSERT_GE(tr__ring_write(ring, &o, nullptr), 0);
            r.send_frame(TR__MSG_WAKE, 0, "");
        }
        EXPECT_TRUE(r.closed_by_peer());
        close(mfd);
        tr__ring_free(ring);
        tr__buf_free(&o);
        tr__buf_free(&in);
    }
    ASSERT_EQ(call_i64(rt, a, "add", 1, &v), 0); /* the actor serves on (1 + 10 + 3 * 100 + 1) */
    EXPECT_EQ(v, 312);
}

TEST_F(NodeTest, OnlyTheSpawningDriverOwnsAnEmbeddedNode) {
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "o", 1, &a), 0);
    int64_t v;
    ASSERT_EQ(call_i64(rt, a, "add", 1, &v), 0);
    /* another process claims to own the node, and goes */
    pid_t child = fork(); /* this process runs no threads of troupe's: fork is safe */
    ASSERT_GE(child, 0);
    if (child == 0) {
        claim_ownership_and_leave(addr);
        _exit(::testing::Test::HasFailure() ? 1 : 0);
    }
    int st;
    ASSERT_EQ(waitpid(child, &st, 0), child);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* a node that took the claim would be stopping now: give it the time to */
    Raw probe(addr);
    EXPECT_FALSE(probe.closed_by_peer(300)) << "the node went away";
    expect_node_serves();
    ASSERT_EQ(call_i64(rt, a, "add", 1, &v), 0) << tr_last_error();
    EXPECT_EQ(v, 2);
}

/* Before: a second connection from the owner itself that claimed ownership stopped the
 * node when it closed, and the driver's runtime lost its node (the node stayed up,
 * refusing connections, while it stopped). Now ownership ends with the owner process
 * (pidfd), not with any connection: the node serves on, then stops when the owner's child
 * that owns a node of its own exits without tr_shutdown. */
TEST_F(NodeTest, TheOwnersOtherConnectionsDoNotStopItsNode) {
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "o2", 1, &a), 0);
    for (int i = 0; i < 3; i++)
        claim_ownership_and_leave(addr);
    Raw probe(addr);
    EXPECT_FALSE(probe.closed_by_peer(500)) << "the node went away";
    expect_node_serves();
    int64_t v;
    ASSERT_EQ(call_i64(rt, a, "add", 5, &v), 0) << tr_last_error();
    EXPECT_EQ(v, 5);
    /* a process that owns a node and leaves without a word: its node goes too */
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        close(p[0]);
        tr_runtime *mine;
        if (tr_init(test_config(), &mine) != 0) _exit(1);
        std::string where = tr_runtime_address(mine);
        if (write(p[1], where.c_str(), where.size()) != (ssize_t)where.size()) _exit(2);
        _exit(0); /* no tr_shutdown: its connection closes as the process goes */
    }
    close(p[1]);
    char buf[600] = "";
    ssize_t n = read(p[0], buf, sizeof buf - 1);
    close(p[0]);
    int st;
    ASSERT_EQ(waitpid(child, &st, 0), child);
    ASSERT_GT(n, 0);
    std::string sock(buf, (size_t)n);
    EXPECT_TRUE(eventually(5000,
                           [&] {
                               struct stat sb;
                               return stat(sock.c_str(), &sb) != 0;
                           }))
        << "the node of an owner that exited is still there: " << sock;
}

TEST_F(NodeTest, KeyValueWaitIsAnsweredByThePut) {
    tr__nodeconn *c;
    ASSERT_EQ(tr__nodeconn_open(addr.c_str(), 1 << 20, &c), 0);
    void *v = nullptr;
    size_t n = 0;
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(tr__kv_client_wait(c, "later", 100, &v, &n), TR_ENOTFOUND);
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(90));
    std::thread putter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        EXPECT_EQ(tr_kv_put(rt, "later", "here", 4), 0);
    });
    auto t1 = std::chrono::steady_clock::now();
    ASSERT_EQ(tr__kv_client_wait(c, "later", 5000, &v, &n), 0) << tr_last_error();
    /* it was the put that answered: the key was not there when the wait began */
    EXPECT_GE(std::chrono::steady_clock::now() - t1, std::chrono::milliseconds(20));
    EXPECT_EQ(std::string((char *)v, n), "here");
    free(v);
    putter.join();
    /* a waiter whose connection goes away is dropped, and the node keeps serving */
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 2);
    tr__enc_str(&b, "key");
    tr__enc_str(&b, "never");
    tr__enc_str(&b, "wait_ms");
    tr__enc_int(&b, 60000);
    {
        Raw r(addr);
        r.send_frame(TR__MSG_KV_GET, 1, std::string(b.data, b.len));
    }
    tr__buf_free(&b);
    tr__nodeconn_close(c);
    expect_node_serves();
}

TEST(NodeLog, AFloodOfMalformedMessagesIsSummarisedNotLoggedLineByLine) {
    /* the embedded node writes to the driver's stderr: send that to a file */
    char path[] = "/tmp/troupe-flood-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    unlink(path);
    int saved = dup(2);
    dup2(fd, 2);
    tr_runtime *rt;
    tr_config *cfg = test_config_with({{"log_level", "warn"}});
    int rc = tr_init(cfg, &rt);
    tr_config_destroy(cfg);
    if (rc == 0) {
        Raw r(tr_runtime_address(rt));
        for (int i = 0; i < 300; i++) {
            r.send_frame(TR__MSG_KV_GET, (uint64_t)i, std::string("\xc1", 1));
            EXPECT_EQ(r.reply_rc(), TR_EPROTO);
        }
        tr_shutdown(rt); /* the node says how many lines it left out as it exits */
    }
    dup2(saved, 2);
    close(saved);
    ASSERT_EQ(rc, 0) << tr_last_error();
    std::string out(1 << 20, '\0');
    ssize_t n = pread(fd, &out[0], out.size(), 0);
    close(fd);
    out.resize(n > 0 ? (size_t)n : 0);
    size_t lines = 0;
    for (size_t at = out.find("NODE-BADMSG:"); at != std::string::npos;
         at = out.find("NODE-BADMSG:", at + 1))
        lines++;
    EXPECT_GE(lines, 2u) << out;
    EXPECT_LE(lines, (size_t)TR__LOG_BURST + 1) << out;
    EXPECT_NE(
        out.find(std::to_string(300 - TR__LOG_BURST) + " more NODE-BADMSG line(s) not logged"),
        std::string::npos)
        << out;
}

/* `troupe start --block` (a container's or a batch job's main process): it stays while the
 * node runs, a SIGTERM to it stops the node (and its actors' workers) and it exits 0; a
 * node that dies by itself makes it exit 1. */
TEST(Standalone, StartBlockStaysWithItsNodeAndSigtermStopsBoth) {
    ASSERT_FALSE(g_troupe_cli.empty()) << "pass the troupe CLI path as argv[1]";
    for (int killed_node = 0; killed_node < 2; killed_node++) {
        SCOPED_TRACE(killed_node);
        char tmpl[] = "/tmp/trblock-XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        std::string tmp = tmpl, out = tmp + "/out";
        pid_t cli = fork();
        ASSERT_GE(cli, 0);
        if (cli == 0) {
            int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
            dup2(fd, 1);
            execl(g_troupe_cli.c_str(), g_troupe_cli.c_str(), "start", "--head", "--block",
                  "--tmpdir", tmp.c_str(), (char *)nullptr);
            _exit(127);
        }
        std::string text, addr;
        for (int i = 0; i < 200 && addr.empty(); i++) {
            usleep(50000);
            text = run_cmd("cat " + out, nullptr);
            size_t at = text.find("address: ");
            if (at != std::string::npos && text.find('\n', at) != std::string::npos)
                addr = text.substr(at + 9, text.find('\n', at) - at - 9);
        }
        ASSERT_FALSE(addr.empty()) << text;
        size_t p = text.find("(pid ");
        ASSERT_NE(p, std::string::npos) << text;
        pid_t node = (pid_t)atoi(text.c_str() + p + 5);
        tr_config *cfg = test_config_with({{"address", addr.c_str()}});
        tr_runtime *rt;
        int irc = tr_init(cfg, &rt);
        tr_config_destroy(cfg);
        ASSERT_EQ(irc, 0) << tr_last_error();
        tr_actor_id a;
        ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "b", 1, &a), 0) << tr_last_error();
        int64_t v;
        ASSERT_EQ(call_i64(rt, a, "add", 1, &v), 0) << tr_last_error();
        tr_actor_details d = TR_ACTOR_DETAILS_INIT;
        ASSERT_EQ(tr_actor_info(rt, a, &d), 0);
        pid_t worker = d.pid;
        int st = -1;
        EXPECT_EQ(waitpid(cli, &st, WNOHANG), 0) << "it stays while its node runs";
        kill(killed_node ? node : cli, killed_node ? SIGKILL : SIGTERM);
        ASSERT_EQ(waitpid(cli, &st, 0), cli);
        EXPECT_TRUE(WIFEXITED(st)) << st;
        EXPECT_EQ(WEXITSTATUS(st), killed_node ? 1 : 0);
        EXPECT_NE(kill(node, 0), 0) << "the node is gone";
        if (!killed_node) { /* (stopped: its workers went with it) */
            bool gone = false;
            for (int i = 0; i < 100 && !gone; i++, usleep(50000))
                gone = kill(worker, 0) != 0;
            EXPECT_TRUE(gone) << "worker " << worker << " outlived its node";
        } else {
            kill(worker, SIGKILL); /* (a node killed outright leaves its workers to notice) */
        }
        tr_shutdown(rt);
        run_cmd("rm -rf " + tmp, nullptr);
    }
}

TEST(Standalone, NodeStartedByTheCliIsReachedByAddress) {
    ASSERT_FALSE(g_troupe_cli.empty()) << "pass the troupe CLI path as argv[1]";
    char tmpl[] = "/tmp/trtest-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    std::string tmp = tmpl, cli = g_troupe_cli + " ", td = " --tmpdir " + tmp;
    int st;
    std::string out = run_cmd(cli + "start --head --num-cpus 2 --resources slot=3" + td, &st);
    ASSERT_EQ(st, 0) << out;
    size_t at = out.find("address: ");
    ASSERT_NE(at, std::string::npos) << out;
    std::string addr = out.substr(at + 9);
    addr = addr.substr(0, addr.find('\n'));
    /* --tmpdir reaches the node: its socket, not only its log, is under DIR */
    std::string base = tmp + "/troupe-" + std::to_string(getuid()) + "/";
    EXPECT_EQ(addr.compare(0, base.size(), base), 0) << addr << " is not under " << base;

    tr_config *cfg = test_config_with({{"address", addr.c_str()}});
    tr_runtime *rt;
    ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
    EXPECT_EQ(std::string(tr_runtime_address(rt)), addr);
    tr_resource slot = {"slot", 3};
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.resources = &slot;
    o.n_resources = 1;
    o.name = "standalone-actor";
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &o, "s", 1, &a), 0) << tr_last_error();
    int64_t v;
    ASSERT_EQ(call_i64(rt, a, "add", 40, &v), 0) << tr_last_error();
    ASSERT_EQ(call_i64(rt, a, "add", 2, &v), 0);
    EXPECT_EQ(v, 42);
    out = run_cmd(cli + "status" + td, &st);
    EXPECT_EQ(st, 0) << out;
    EXPECT_NE(out.find("standalone-actor"), std::string::npos) << out;
    EXPECT_NE(out.find("\"slot\":3"), std::string::npos) << out;
    /* a client that claims to own the shared node, and leaves, does not stop it */
    claim_ownership_and_leave(addr);
    {
        Raw probe(addr);
        EXPECT_FALSE(probe.closed_by_peer(300)) << "the node went away";
    }
    ASSERT_EQ(call_i64(rt, a, "add", 0, &v), 0) << tr_last_error();
    EXPECT_EQ(v, 42);
    tr_shutdown(rt); /* a driver leaving does not stop a standalone node... */
    tr_config_destroy(cfg);
    out = run_cmd(cli + "status --address " + addr, &st);
    EXPECT_EQ(st, 0) << out;
    /* ...but its actors die with it, and once reaped the node forgets them */
    EXPECT_EQ(out.find("\"state\":\"ALIVE\""), std::string::npos) << out;
    for (int i = 0; i < 100 && out.find("\"actors\":[]") == std::string::npos; i++) {
        usleep(20000);
        out = run_cmd(cli + "status --address " + addr, &st);
    }
    EXPECT_NE(out.find("\"actors\":[]"), std::string::npos) << out;
    EXPECT_NE(out.find("\"workers_live\":0"), std::string::npos) << out;
    out = run_cmd(cli + "stop" + td, &st);
    EXPECT_EQ(st, 0) << out;
    struct stat sb;
    EXPECT_NE(stat(addr.c_str(), &sb), 0) << "socket left behind";
    out = run_cmd(cli + "status" + td, &st);
    EXPECT_NE(st, 0) << out;
    run_cmd("rm -rf " + tmp, nullptr);
}

TEST(Standalone, CliRejectsBadUsage) {
    ASSERT_FALSE(g_troupe_cli.empty());
    int st;
    run_cmd(g_troupe_cli + " frobnicate", &st);
    EXPECT_EQ(st, 2);
    run_cmd(g_troupe_cli + " status --address /nonexistent/node.sock", &st);
    EXPECT_EQ(st, 1);
    std::string out = run_cmd(g_troupe_cli + " version", &st);
    EXPECT_EQ(st, 0);
    EXPECT_NE(out.find(tr_version_string()), std::string::npos);
}

} // namespace
