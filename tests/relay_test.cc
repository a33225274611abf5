/* tests/relay_test.cc - a node's relay (actor/relay.h) against callers that misbehave:
 * a real node (embedded, listening for other nodes on loopback with a token) and an
 * actor on it, reached over a raw core/rpc stream that speaks the link's messages
 * (actor/remote.h) by hand. A call goes through and its result comes back; anything
 * but CALL frames ends that connection with a reason and reaches no worker; short,
 * unknown-kind and stale-generation messages are dropped; an unknown actor gets EOF; a
 * wrong token is refused; and the actor is still fine for a proper caller afterwards. */
#include <gtest/gtest.h>

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/test_actors.h"
#include "troupe/dag.h"

extern "C" {
#include "actor/bulk.h"
#include "actor/protocol.h"
#include "actor/remote.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/codec.h"
#include "core/frame.h"
#include "core/kv.h"
#include "core/nodeconn.h"
#include "core/rpc.h"
#include "core/status.h"
}

namespace {

/* The cluster address of rt's node on loopback, "127.0.0.1:PORT" ("" with a failure). */
std::string cluster_address(tr_runtime *rt) {
    char *json = nullptr;
    EXPECT_EQ(tr_node_status(rt, &json), 0);
    std::string s = json ? json : "";
    tr_free(json);
    size_t at = s.find("\"address\":\"127.0.0.1:");
    EXPECT_NE(at, std::string::npos) << s;
    return at == std::string::npos ? "" : s.substr(at + 11, s.find('"', at + 11) - at - 11);
}

class Relay : public ::testing::Test {
  protected:
    void SetUp() override {
        tr_config *cfg = test_config_with({{"cluster_port", "0"}, {"cluster_token", "tok"}});
        ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
        tr_config_destroy(cfg);
        ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "r", 1, &actor), 0);
        ASSERT_EQ(tr_actor_wait_ready(rt, actor, 20000), 0);
        address = cluster_address(rt);
        ASSERT_FALSE(address.empty());
    }
    void TearDown() override {
        if (st) tr__rpc_stream_close(st);
        if (client) tr__rpc_client_destroy(client);
        tr_shutdown(rt);
    }

    void open(const char *token) {
        ASSERT_EQ(tr__rpc_client_create(address.c_str(), token, 64 << 20, &client), 0);
        ASSERT_EQ(tr__rpc_stream_open(client, &st), 0);
    }
    void send(int kind, const tr_actor_id &id, uint32_t gen, const std::string &payload) {
        std::string m(1, (char)kind);
        m.append((const char *)id.b, 16);
        m.append((const char *)&gen, 4);
        m += payload;
        ASSERT_EQ(tr__rpc_stream_send(st, m.data(), m.size()), 0);
    }
    static std::string call_frame(uint64_t seq, const char *method, int64_t arg) {
        tr__buf b = TR__BUF_INIT;
        tr__call_frame(&b, seq, method, &arg, sizeof arg, nullptr, 0);
        std::string f(b.data + b.off, tr__buf_avail(&b));
        tr__buf_free(&b);
        return f;
    }
    /* The next message: kind, generation and payload; false on a timeout or the end. */
    bool next(int *kind, uint32_t *gen, std::string *payload, int ms = 5000) {
        tr__buf b = TR__BUF_INIT;
        int rc = tr__rpc_stream_recv(st, ms, &b);
        if (rc) last_why = std::string(tr_errname(rc)) + ": " + tr_last_error();
        bool ok = rc == 0 && tr__buf_avail(&b) >= TR__REMOTE_HDR;
        if (ok) {
            const char *p = b.data + b.off;
            *kind = (unsigned char)p[0];
            memcpy(gen, p + 17, 4);
            payload->assign(p + TR__REMOTE_HDR, tr__buf_avail(&b) - TR__REMOTE_HDR);
        }
        tr__buf_free(&b);
        return ok;
    }
    /* Reads DATA messages of generation gen until one whole RESULT frame is in: its rc and
     * int64 value. */
    bool result(uint32_t gen, uint64_t seq, int *rc, int64_t *v) {
        std::string acc;
        for (int i = 0; i < 100; i++) {
            int kind;
            uint32_t g;
            std::string p;
            if (!next(&kind, &g, &p)) return false;
            if (kind != TR__REMOTE_DATA || g != gen) continue;
            acc += p;
            tr__buf b = TR__BUF_INIT;
            tr__buf_append(&b, acc.data(), acc.size());
            tr__frame_hdr h;
            const char *body;
            int r = tr__frame_parse(&b, 1 << 20, &h, &body);
            bool done = false;
            if (r == 1 && h.type == TR__MSG_RESULT && h.seq == seq) {
                const void *data;
                size_t n;
                const void *kept;
                int is_ref = 0;
                done = tr__result_parse(body, h.len, rc, &data, &n, &is_ref, &kept) == 0 && n == 8;
                if (done) memcpy(v, data, 8);
            }
            tr__buf_free(&b);
            if (r < 0) return false;
            if (done) return true;
        }
        return false;
    }

    tr_runtime *rt = nullptr;
    tr_actor_id actor;
    std::string address;
    tr__rpc_client *client = nullptr;
    tr__rpc_stream *st = nullptr;
    std::string last_why; /* why the last receive failed */
};

TEST_F(Relay, CallsGoThroughAndAnythingElseIsRefused) {
    open("tok");
    /* a call, as a caller on another node makes it */
    send(TR__REMOTE_DATA, actor, 1, call_frame(1, "add", 5));
    int rc = -1;
    int64_t v = 0;
    ASSERT_TRUE(result(1, 1, &rc, &v)) << last_why;
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(v, 5);
    /* its CALL frame cut in three messages still makes one call */
    std::string f = call_frame(2, "add", 2);
    send(TR__REMOTE_DATA, actor, 1, f.substr(0, 3));
    send(TR__REMOTE_DATA, actor, 1, f.substr(3, 15));
    send(TR__REMOTE_DATA, actor, 1, f.substr(18));
    ASSERT_TRUE(result(1, 2, &rc, &v));
    EXPECT_EQ(v, 7);

    /* a CALLER frame (it would point the worker at another process's store): the
     * connection ends with a reason, and the frame reaches no worker */
    tr__buf b = TR__BUF_INIT;
    tr__caller_frame(&b, 0, 0, 0);
    send(TR__REMOTE_DATA, actor, 2, std::string(b.data + b.off, tr__buf_avail(&b)));
    tr__buf_free(&b);
    int kind;
    uint32_t gen;
    std::string p;
    ASSERT_TRUE(next(&kind, &gen, &p));
    EXPECT_EQ(kind, TR__REMOTE_EOF);
    EXPECT_EQ(gen, 2u);
    EXPECT_NE(p.find("other than CALL frames"), std::string::npos) << p;
    /* ...and what still comes for that generation is dropped (no answer) */
    send(TR__REMOTE_DATA, actor, 2, call_frame(1, "add", 100));
    /* garbage bytes (a bad frame header) end generation 3 the same way */
    send(TR__REMOTE_DATA, actor, 3, std::string(40, '\xff'));
    ASSERT_TRUE(next(&kind, &gen, &p));
    EXPECT_EQ(kind, TR__REMOTE_EOF);
    EXPECT_EQ(gen, 3u);
    /* short messages and unknown kinds are dropped, as are CANCELs of the wrong size or
     * for a generation that is not there */
    ASSERT_EQ(tr__rpc_stream_send(st, "\x01xyz", 4), 0);
    send(9, actor, 1, call_frame(3, "add", 1000));
    send(TR__REMOTE_CANCEL, actor, 1, std::string(8, '\0'));
    send(TR__REMOTE_CANCEL, actor, 1, std::string(TR__REMOTE_CANCEL_LEN + 1, '\0'));
    send(TR__REMOTE_CANCEL, actor, 77, std::string(TR__REMOTE_CANCEL_LEN, '\x03'));
    /* an actor nobody knows: EOF with the reason */
    tr_actor_id nobody;
    memset(nobody.b, 0x5a, 16);
    send(TR__REMOTE_DATA, nobody, 4, call_frame(1, "add", 1));
    ASSERT_TRUE(next(&kind, &gen, &p));
    EXPECT_EQ(kind, TR__REMOTE_EOF);
    EXPECT_EQ(gen, 4u);
    EXPECT_NE(p.find("no such actor"), std::string::npos) << p;
    /* generation 1 went on untouched: the dropped messages never ran (7 + 1 = 8) */
    send(TR__REMOTE_DATA, actor, 1, call_frame(3, "add", 1));
    ASSERT_TRUE(result(1, 3, &rc, &v));
    EXPECT_EQ(v, 8);
    /* and the actor answers a proper caller */
    int64_t out = 0;
    EXPECT_EQ(call_i64(rt, actor, "add", 2, &out), 0);
    EXPECT_EQ(out, 10);
}

/* Whether a node's resident memory says what it holds (not under TSan, where it is mostly
 * shadow, nor ASan, whose quarantine keeps what was freed). */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
const bool kRssMeans = false;
const int kSlow = 3; /* a sanitizer's build sends several times slower */
#else
const bool kRssMeans = true;
const int kSlow = 1;
#endif

/* The RSS of this process's embedded node (its child with TROUPE_ROLE=node), in MiB. */
long node_rss_mib() {
    DIR *d = opendir("/proc");
    long rss = -1;
    while (struct dirent *e = d ? readdir(d) : nullptr) {
        std::string dir = std::string("/proc/") + e->d_name;
        FILE *f = fopen((dir + "/stat").c_str(), "r");
        int pid = 0, ppid = 0;
        char state;
        if (f && fscanf(f, "%d %*s %c %d", &pid, &state, &ppid) == 3 && ppid == getpid()) {
            FILE *s = fopen((dir + "/status").c_str(), "r");
            char line[256];
            long kb = -1;
            while (s && fgets(line, sizeof line, s))
                if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
            if (s) fclose(s);
            FILE *env = fopen((dir + "/environ").c_str(), "r");
            std::string all;
            int c;
            while (env && (c = fgetc(env)) != EOF)
                all += (char)c;
            if (env) fclose(env);
            if (all.find("TROUPE_ROLE=node") != std::string::npos) rss = kb / 1024;
        }
        if (f) fclose(f);
    }
    if (d) closedir(d);
    return rss;
}

/* Before: a caller's bytes for a live actor that took none were appended to the relay's
 * buffer with no cap: a caller could grow the node's memory without bound. Now a link whose
 * actors are 16 MiB behind is told HOLD; this caller (by hand) sends on regardless, and the
 * connection it sends on is ended at 256 MiB: 500 MiB sent, the node's memory stays within
 * that, and the actor still serves its other callers. */
TEST_F(Relay, ACallerThatOutrunsItsActorIsHeldBack) {
    open("tok");
    long before = node_rss_mib();
    ASSERT_GT(before, 0) << "no embedded node found";
    /* the actor is busy for longer than the caller sends: until the file at busy is made
     * (at most 30 s) */
    std::string busy = "/dev/shm/trbusy" + std::to_string(getpid());
    unlink(busy.c_str());
    {
        int64_t ms = 30000;
        std::string wait((const char *)&ms, sizeof ms);
        wait += busy;
        tr__buf f = TR__BUF_INIT;
        tr__call_frame(&f, 1, "wait_file", wait.data(), wait.size(), nullptr, 0);
        send(TR__REMOTE_DATA, actor, 1, std::string(f.data + f.off, tr__buf_avail(&f)));
        tr__buf_free(&f);
    }
    std::string arg(1 << 20, 'x');
    tr__buf b = TR__BUF_INIT;
    tr__call_frame(&b, 2, "echo", arg.data(), arg.size(), nullptr, 0);
    std::string m(1, (char)TR__REMOTE_DATA);
    m.append((const char *)actor.b, 16);
    uint32_t gen = 1;
    m.append((const char *)&gen, 4);
    m.append(b.data + b.off, tr__buf_avail(&b));
    tr__buf_free(&b);
    int sent = 0;
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(7000 * kSlow);
    while (sent < 500 && std::chrono::steady_clock::now() < until) {
        int rc = tr__rpc_stream_send(st, m.data(), m.size());
        if (rc == 0)
            sent++;
        else
            usleep(10000);
    }
    usleep(300000);
    long during = node_rss_mib();
    EXPECT_GT(sent, 280);
    if (!kRssMeans) GTEST_LOG_(INFO) << "(a sanitizer's memory in a node's: not checked)";
    EXPECT_TRUE(!kRssMeans || during - before < 320)
        << "the node grew from " << before << " to " << during << " MiB under " << sent
        << " MiB of calls";
    bool held = false, cut = false;
    for (int i = 0; i < 50 && !cut; i++) {
        int kind;
        uint32_t g;
        std::string p;
        if (!next(&kind, &g, &p, 5000)) break;
        held |= kind == TR__REMOTE_HOLD;
        cut |= kind == TR__REMOTE_EOF && g == 1 && p.find("hold") != std::string::npos;
    }
    EXPECT_TRUE(held) << "no HOLD came";
    EXPECT_TRUE(cut) << "the connection that sent on was not ended";
    FILE *f = fopen(busy.c_str(), "w"); /* (the actor is free again) */
    if (f) fclose(f);
    int64_t out = 0; /* the actor serves its other callers */
    EXPECT_EQ(call_i64(rt, actor, "add", 3, &out, 20000 * kSlow), 0) << tr_last_error();
    unlink(busy.c_str());
}

/* Pieces of our objects, as a node pulling one asks for them: the size, a piece, and
 * errors (not an object, out of range, unknown) as OBJ_ERR; a wrong-sized request is
 * dropped. */
TEST_F(Relay, ObjectPiecesAndBadRequests) {
    open("tok");
    std::string v = pattern(100000, 3);
    tr_ref obj;
    ASSERT_EQ(tr_put(rt, v.data(), v.size(), &obj), 0);
    auto get = [&](const tr_ref &ref, uint32_t req, uint64_t off, uint64_t len) {
        uint64_t body[2] = {off, len};
        std::string m(1, (char)TR__REMOTE_OBJ_GET);
        m.append((const char *)ref.b, 16);
        m.append((const char *)&req, 4);
        m.append((const char *)body, sizeof body);
        ASSERT_EQ(tr__rpc_stream_send(st, m.data(), m.size()), 0);
    };
    int kind;
    uint32_t req;
    std::string p;
    get(obj, 7, 0, 0); /* its size */
    ASSERT_TRUE(next(&kind, &req, &p));
    EXPECT_EQ(kind, TR__REMOTE_OBJ_DATA);
    EXPECT_EQ(req, 7u);
    ASSERT_EQ(p.size(), 16u);
    uint64_t off, total;
    memcpy(&off, p.data(), 8);
    memcpy(&total, p.data() + 8, 8);
    EXPECT_EQ(total, v.size());
    get(obj, 8, 1000, 5000); /* a piece */
    ASSERT_TRUE(next(&kind, &req, &p));
    EXPECT_EQ(kind, TR__REMOTE_OBJ_DATA);
    ASSERT_EQ(p.size(), 16u + 5000);
    EXPECT_EQ(p.substr(16), v.substr(1000, 5000));
    get(obj, 9, 99000, 5000); /* past its end: why, and nothing else */
    ASSERT_TRUE(next(&kind, &req, &p));
    EXPECT_EQ(kind, TR__REMOTE_OBJ_ERR);
    EXPECT_EQ(req, 9u);
    ASSERT_GE(p.size(), 4u);
    EXPECT_EQ(p.substr(4), "a piece [99000, +5000) of an object of 100000 bytes");
    tr_ref nothing;
    memset(nothing.b, 0x11, 16);
    nothing.b[15] |= 0x80;
    get(nothing, 10, 0, 0); /* no such object */
    ASSERT_TRUE(next(&kind, &req, &p));
    EXPECT_EQ(kind, TR__REMOTE_OBJ_ERR);
    int32_t code;
    memcpy(&code, p.data(), 4);
    EXPECT_EQ(code, TR_ENOTFOUND);
    memset(nothing.b, 0x11, 16); /* not an object ref at all */
    get(nothing, 11, 0, 0);
    ASSERT_TRUE(next(&kind, &req, &p));
    EXPECT_EQ(kind, TR__REMOTE_OBJ_ERR);
    EXPECT_EQ(req, 11u);
    /* a request of the wrong size: dropped (the next answer is the next request's) */
    std::string bad(1, (char)TR__REMOTE_OBJ_GET);
    bad.append((const char *)obj.b, 16);
    bad.append(12, '\0');
    ASSERT_EQ(tr__rpc_stream_send(st, bad.data(), bad.size()), 0);
    get(obj, 12, 0, 10);
    ASSERT_TRUE(next(&kind, &req, &p));
    EXPECT_EQ(req, 12u);
    EXPECT_EQ(p.substr(16), v.substr(0, 10));
    /* the relay let go of what it read: our hold is the only one, and the object goes */
    EXPECT_EQ(tr_ref_release(rt, obj), 0);
}

/* A whole object on a bulk connection (actor/bulk.h): the offer names its size, a port
 * and a ticket; the ticket gives the bytes once; another ticket, or the same one again,
 * gets a closed connection; an object that is not there is refused on the link. */
TEST_F(Relay, BulkOffersServeAWholeObjectOnce) {
    open("tok");
    std::string v = pattern((5 << 20) + 7, 4);
    tr_ref obj;
    ASSERT_EQ(tr_put(rt, v.data(), v.size(), &obj), 0);
    auto ask = [&](const tr_ref &ref, uint32_t req) {
        std::string m(1, (char)TR__REMOTE_OBJ_BULK);
        m.append((const char *)ref.b, 16);
        m.append((const char *)&req, 4);
        m.append(16, '\0');
        ASSERT_EQ(tr__rpc_stream_send(st, m.data(), m.size()), 0);
    };
    int kind;
    uint32_t req;
    std::string p;
    ask(obj, 21);
    ASSERT_TRUE(next(&kind, &req, &p)) << last_why;
    ASSERT_EQ(kind, TR__REMOTE_OBJ_BULK) << p;
    EXPECT_EQ(req, 21u);
    ASSERT_EQ(p.size(), 28u);
    uint64_t total;
    uint32_t port;
    uint8_t ticket[16];
    memcpy(&total, p.data(), 8);
    memcpy(&port, p.data() + 8, 4);
    memcpy(ticket, p.data() + 12, 16);
    EXPECT_EQ(total, v.size());
    std::string got(v.size(), '\0');
    int64_t deadline = tr__deadline(10000);
    uint8_t wrong[16];
    memcpy(wrong, ticket, 16);
    wrong[3] ^= 1;
    EXPECT_EQ(tr__bulk_fetch("127.0.0.1", (int)port, wrong, &got[0], got.size(), deadline, nullptr,
                             nullptr),
              TR_ECLOSED);
    ASSERT_EQ(tr__bulk_fetch("127.0.0.1", (int)port, ticket, &got[0], got.size(), deadline, nullptr,
                             nullptr),
              0)
        << tr_last_error();
    EXPECT_TRUE(got == v);
    EXPECT_EQ(tr__bulk_fetch("127.0.0.1", (int)port, ticket, &got[0], got.size(), deadline, nullptr,
                             nullptr),
              TR_ECLOSED); /* once */
    tr_ref nothing;
    memset(nothing.b, 0x11, 16);
    nothing.b[15] |= 0x80;
    ask(nothing, 22);
    ASSERT_TRUE(next(&kind, &req, &p)) << last_why;
    EXPECT_EQ(kind, TR__REMOTE_OBJ_ERR);
    EXPECT_EQ(req, 22u);
    int32_t code;
    ASSERT_GE(p.size(), 4u);
    memcpy(&code, p.data(), 4);
    EXPECT_EQ(code, TR_ENOTFOUND);
    /* the relay let go of the object once served: it goes with our hold */
    EXPECT_EQ(tr_ref_release(rt, obj), 0);
    tr_store_stats stats = TR_STORE_STATS_INIT;
    for (int i = 0; i < 100; i++) {
        ASSERT_EQ(tr_object_stats(rt, &stats), 0);
        if (stats.n_objects == 0) break;
        usleep(20000);
    }
    EXPECT_EQ(stats.n_objects, 0u);
}

TEST_F(Relay, AWrongTokenIsRefused) {
    open("wrong");
    std::string m(1, (char)TR__REMOTE_DATA); /* (the refusal may be in before this) */
    m.append((const char *)actor.b, 16);
    m.append(4, '\0');
    m += call_frame(1, "add", 5);
    int src = tr__rpc_stream_send(st, m.data(), m.size());
    EXPECT_TRUE(src == 0 || src == TR_EPERM) << tr_errname(src);
    tr__buf b = TR__BUF_INIT;
    EXPECT_EQ(tr__rpc_stream_recv(st, 5000, &b), TR_EPERM);
    tr__buf_free(&b);
    int64_t out = 0;
    EXPECT_EQ(call_i64(rt, actor, "add", 0, &out), 0);
    EXPECT_EQ(out, 0); /* the refused call never ran */
}

/* The cluster's KV store (the head's, which collective groups across nodes rendezvous in),
 * through the node's CLUSTER_KV: put, get, replace, del, del_prefix; bad requests refused
 * with a reason; a node in no cluster says so. */
TEST_F(Relay, TheClusterKvStoreAndBadRequests) {
    tr__nodeconn *c;
    ASSERT_EQ(tr__nodeconn_open(tr_runtime_address(rt), 64 << 20, &c), 0);
    auto get = [&](const char *key, std::string *v) {
        void *p = nullptr;
        size_t n = 0;
        int rc = tr__kv_client_cluster(c, "get", key, nullptr, 0, &p, &n);
        if (!rc) v->assign((const char *)p, n);
        free(p);
        return rc;
    };
    std::string v;
    EXPECT_EQ(get("k/1", &v), TR_ENOTFOUND);
    EXPECT_EQ(tr__kv_client_cluster(c, "put", "k/1", "one", 3, nullptr, nullptr), 0);
    EXPECT_EQ(tr__kv_client_cluster(c, "put", "k/2", "", 0, nullptr, nullptr), 0);
    EXPECT_EQ(tr__kv_client_cluster(c, "put", "j/1", "x", 1, nullptr, nullptr), 0);
    ASSERT_EQ(get("k/1", &v), 0) << tr_last_error();
    EXPECT_EQ(v, "one");
    ASSERT_EQ(get("k/2", &v), 0);
    EXPECT_EQ(v, "");
    EXPECT_EQ(tr__kv_client_cluster(c, "put", "k/1", "uno", 3, nullptr, nullptr), 0);
    ASSERT_EQ(get("k/1", &v), 0);
    EXPECT_EQ(v, "uno");
    EXPECT_EQ(tr__kv_client_cluster(c, "del", "k/2", nullptr, 0, nullptr, nullptr), 0);
    EXPECT_EQ(get("k/2", &v), TR_ENOTFOUND);
    EXPECT_EQ(tr__kv_client_cluster(c, "put", "k/3", "3", 1, nullptr, nullptr), 0);
    EXPECT_EQ(tr__kv_client_cluster(c, "del_prefix", "k/", nullptr, 0, nullptr, nullptr), 0);
    EXPECT_EQ(get("k/1", &v), TR_ENOTFOUND);
    EXPECT_EQ(get("k/3", &v), TR_ENOTFOUND);
    ASSERT_EQ(get("j/1", &v), 0); /* another prefix stays */
    EXPECT_EQ(v, "x");
    /* bad requests: an unknown op, a key too long, a missing key field */
    EXPECT_EQ(tr__kv_client_cluster(c, "list", "k", nullptr, 0, nullptr, nullptr), TR_EINVAL);
    EXPECT_NE(std::string(tr_last_error()).find("unknown op"), std::string::npos);
    std::string big(2000, 'k');
    EXPECT_EQ(tr__kv_client_cluster(c, "put", big.c_str(), "v", 1, nullptr, nullptr), TR_EINVAL);
    EXPECT_NE(std::string(tr_last_error()).find("key"), std::string::npos) << tr_last_error();
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "op");
    tr__enc_str(&b, "get");
    EXPECT_EQ(tr__nodeconn_call(c, TR__MSG_CLUSTER_KV, &b, 5000, nullptr), TR_EPROTO);
    tr__buf_free(&b);
    tr__nodeconn_close(c);
    /* a node in no cluster */
    tr_config *cfg = test_config_with({});
    tr_runtime *lone;
    ASSERT_EQ(tr_init(cfg, &lone), 0) << tr_last_error();
    tr_config_destroy(cfg);
    ASSERT_EQ(tr__nodeconn_open(tr_runtime_address(lone), 1 << 20, &c), 0);
    EXPECT_EQ(tr__kv_client_cluster(c, "put", "k", "v", 1, nullptr, nullptr), TR_ESTATE);
    EXPECT_NE(std::string(tr_last_error()).find("no cluster"), std::string::npos);
    tr__nodeconn_close(c);
    tr_shutdown(lone);
}

} // namespace

namespace {

/* A cluster of two nodes on loopback over TLS (core/testdata's certificates): the head
 * embedded here, a node started by the CLI on 127.0.0.2. An actor placed there is called
 * over a TLS link and given an object put here (pulled there over TLS, in pieces on the
 * link: no bulk connection, whose bytes would travel in the clear); a node with a CA
 * that did not sign the head's certificate cannot join. */
TEST(TlsCluster, ActorsCallsAndObjectsOverTls) {
    if (g_troupe_cli.empty()) GTEST_SKIP() << "no troupe CLI path given to the test";
    char cert[4096], key[4096], ca[4096], other[4096];
    ASSERT_TRUE(realpath("core/testdata/node.pem", cert) &&
                realpath("core/testdata/node.key", key) && realpath("core/testdata/ca.pem", ca) &&
                realpath("core/testdata/other_ca.pem", other));
    tr_config *cfg = test_config_with({{"cluster_port", "0"},
                                       {"cluster_token", "tok"},
                                       {"cluster_tls_cert", cert},
                                       {"cluster_tls_key", key},
                                       {"cluster_tls_ca", ca}});
    tr_runtime *rt;
    ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
    tr_config_destroy(cfg);
    std::string head = cluster_address(rt);
    ASSERT_FALSE(head.empty());
    std::string tmp = "/tmp/trtls" + std::to_string(getpid()); /* (socket paths are short) */
    char self[4096];                                           /* this driver's actors run there */
    ASSERT_NE(realpath("/proc/self/exe", self), nullptr);
    std::string start = g_troupe_cli + " start --address " + head +
                        " --bind 127.0.0.2 --token tok --worker-path " + self + " --tls-cert " +
                        cert + " --tls-key " + key + " --tmpdir " + tmp;
    ASSERT_EQ(system(("mkdir -p " + tmp + "/a " + tmp + "/b").c_str()), 0);
    /* the wrong CA: the node cannot join (it does not trust the head) */
    int st = system((start + "/b --tls-ca " + other + " >" + tmp + "/b.out 2>&1").c_str());
    EXPECT_NE(st, 0);
    std::string said;
    if (FILE *f = fopen((tmp + "/b.out").c_str(), "r")) {
        char line[1024];
        while (fgets(line, sizeof line, f))
            said += line;
        fclose(f);
    }
    EXPECT_NE(said.find("cannot join"), std::string::npos) << said;
    ASSERT_EQ(system((start + "/a --tls-ca " + ca + " >/dev/null").c_str()), 0);
    tr_resource r = {"node:127.0.0.2", 1};
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.resources = &r;
    o.n_resources = 1;
    tr_actor_id far;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &o, "t", 1, &far), 0) << tr_last_error();
    ASSERT_EQ(tr_actor_wait_ready(rt, far, 30000), 0) << tr_last_error();
    tr_actor_details d = TR_ACTOR_DETAILS_INIT;
    ASSERT_EQ(tr_actor_info(rt, far, &d), 0);
    EXPECT_EQ(std::string(d.node).rfind("127.0.0.2:", 0), 0u) << d.node;
    int64_t out = 0;
    EXPECT_EQ(call_i64(rt, far, "add", 7, &out), 0) << tr_last_error();
    EXPECT_EQ(out, 7);
    std::string v = pattern(5 << 20, 9); /* (over TLS even this goes in pieces, not bulk) */
    tr_ref obj, ref;
    ASSERT_EQ(tr_put(rt, v.data(), v.size(), &obj), 0);
    ASSERT_EQ(tr_call_refs(rt, far, "sum_args", nullptr, 0, &obj, 1, &ref), 0);
    const void *p;
    size_t n;
    ASSERT_EQ(tr_get(rt, ref, 30000, &p, &n), 0) << tr_last_error();
    ASSERT_EQ(n, 8u);
    uint64_t got;
    memcpy(&got, p, 8);
    EXPECT_EQ(got, checksum(v.data(), v.size()));
    /* a compiled graph across the two nodes: its bridges would carry values in the clear,
     * so compile refuses it and says why */
    tr_actor_id near;
    ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "n", 1, &near), 0) << tr_last_error();
    tr_dag *g;
    tr_dag_node in, a, b2;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, near, "echo", &in, 1, &a), 0);
    ASSERT_EQ(tr_dag_bind(g, far, "echo", &a, 1, &b2), 0);
    ASSERT_EQ(tr_dag_output(g, &b2, 1), 0);
    EXPECT_EQ(tr_dag_compile(g, nullptr), TR_EINVAL);
    EXPECT_NE(std::string(tr_last_error()).find("TLS"), std::string::npos) << tr_last_error();
    tr_dag_destroy(g);
    tr_shutdown(rt);
    EXPECT_EQ(system((g_troupe_cli + " stop --tmpdir " + tmp + "/a >/dev/null 2>&1").c_str()), 0);
    EXPECT_EQ(system(("rm -rf " + tmp).c_str()), 0);
}

/* Starts a node on this machine that joins head (token "tok") from address bind, keeping
 * its session in tmp (made here) and running this test binary as its workers: `troupe start
 * --address`'s output, its exit status in *st. */
std::string join_node(const std::string &head, const char *bind, const std::string &tmp, int *st) {
    char self[4096];
    if (!realpath("/proc/self/exe", self) || system(("mkdir -p " + tmp).c_str()) != 0) {
        *st = -1;
        return "no /proc/self/exe, or no " + tmp;
    }
    return run_cmd(g_troupe_cli + " start --address " + head + " --bind " + bind +
                       " --token tok --worker-path " + self + " --tmpdir " + tmp,
                   st);
}

/* The same, with a caller that heeds the hold (the driver's own link, actor/remote.c): a
 * node on 127.0.0.2 runs an actor that sleeps 6 s while 400 calls of 1 MiB (100 under a
 * sanitizer: several times slower, and the memory is not checked there) come for it;
 * the node holds what was in flight when its HOLD came (the link's queue) and no more (the
 * driver keeps the rest), then every call runs and comes back right. */
TEST(HeldLink, ADriverThatOutrunsAnActorElsewhereWaitsAndLosesNothing) {
    if (g_troupe_cli.empty()) GTEST_SKIP() << "no troupe CLI path given to the test";
    tr_config *cfg = test_config_with({{"cluster_port", "0"}, {"cluster_token", "tok"}});
    tr_runtime *rt;
    ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
    tr_config_destroy(cfg);
    std::string head = cluster_address(rt);
    ASSERT_FALSE(head.empty());
    std::string tmp = "/tmp/trheld" + std::to_string(getpid());
    int st;
    std::string out = join_node(head, "127.0.0.2", tmp, &st);
    ASSERT_EQ(st, 0) << out;
    std::string pid = out.substr(out.find("pid ") + 4);
    pid = pid.substr(0, pid.find_first_not_of("0123456789"));
    auto rss = [&] {
        std::string st2 = run_cmd("grep VmRSS /proc/" + pid + "/status", nullptr);
        return atol(st2.c_str() + st2.find_first_of("0123456789")) / 1024;
    };
    tr_resource r = {"node:127.0.0.2", 1};
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.resources = &r;
    o.n_resources = 1;
    tr_actor_id far;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &o, "h", 1, &far), 0) << tr_last_error();
    ASSERT_EQ(tr_actor_wait_ready(rt, far, 30000), 0) << tr_last_error();
    int64_t x = 0;
    ASSERT_EQ(call_i64(rt, far, "add", 1, &x), 0) << tr_last_error(); /* the link is up */
    long before = rss();
    int64_t ms = 6000; /* (longer than the calls take to send: no result comes meanwhile) */
    tr_ref sleep_ref;
    ASSERT_EQ(tr_call(rt, far, "sleep_ms", &ms, sizeof ms, &sleep_ref), 0);
    std::vector<tr_ref> refs(kRssMeans ? 400 : 100); /* (sanitizers: 100 MiB, still HOLD) */
    std::vector<std::string> args(refs.size());
    for (size_t i = 0; i < refs.size(); i++) {
        args[i] = pattern(1 << 20, i);
        ASSERT_EQ(tr_call(rt, far, "echo", args[i].data(), args[i].size(), &refs[i]), 0)
            << i << ": " << tr_last_error();
    }
    usleep(2000000);
    long during = rss();
    if (!kRssMeans) GTEST_LOG_(INFO) << "(a sanitizer's memory in a node's: not checked)";
    EXPECT_TRUE(!kRssMeans || during - before < 100)
        << "the node grew from " << before << " to " << during << " MiB under 150 MiB of calls";
    ASSERT_EQ(tr_get(rt, sleep_ref, 30000, nullptr, nullptr), 0) << tr_last_error();
    for (size_t i = 0; i < refs.size(); i++) {
        const void *p;
        size_t n;
        ASSERT_EQ(tr_get(rt, refs[i], 60000, &p, &n), 0) << i << ": " << tr_last_error();
        ASSERT_TRUE(n == args[i].size() && memcmp(p, args[i].data(), n) == 0) << i;
        tr_ref_release(rt, refs[i]);
    }
    tr_ref_release(rt, sleep_ref);
    tr_shutdown(rt);
    run_cmd(g_troupe_cli + " stop --tmpdir " + tmp, nullptr);
    run_cmd("rm -rf " + tmp, nullptr);
}

/* tr_cancel of calls to an actor on another node (Ray's ray.cancel of an actor task, which
 * reaches wherever the actor runs): the one running there sees it (tr_ctx_canceled) and
 * returns early, one queued behind it is never run, both refs fail at once, and the
 * actor goes on. With max_concurrency 1 and 4, as on one node (concurrency_test). */
TEST(RemoteCancel, CanceledCallsOnAnotherNodeAreToldOrNotRun) {
    if (g_troupe_cli.empty()) GTEST_SKIP() << "no troupe CLI path given to the test";
    tr_config *cfg = test_config_with({{"cluster_port", "0"}, {"cluster_token", "tok"}});
    tr_runtime *rt;
    ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
    tr_config_destroy(cfg);
    std::string head = cluster_address(rt);
    ASSERT_FALSE(head.empty());
    std::string tmp = "/tmp/trcancel" + std::to_string(getpid());
    int st;
    std::string out = join_node(head, "127.0.0.3", tmp, &st);
    ASSERT_EQ(st, 0) << out;
    auto get = [&](tr_ref r, int64_t *v) {
        const void *p;
        size_t n;
        int rc = tr_get(rt, r, 30000, &p, &n);
        if (rc == 0 && n == sizeof *v) memcpy(v, p, sizeof *v);
        tr_ref_release(rt, r);
        return rc;
    };
    for (int conc : {1, 4}) {
        SCOPED_TRACE(conc);
        tr_resource res = {"node:127.0.0.3", 1};
        tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
        o.resources = &res;
        o.n_resources = 1;
        o.max_concurrency = conc;
        tr_actor_id a;
        ASSERT_EQ(tr_actor_create(rt, "Concurrent", &o, nullptr, 0, &a), 0) << tr_last_error();
        ASSERT_EQ(tr_actor_wait_ready(rt, a, 30000), 0) << tr_last_error();
        tr_ref r;
        int64_t v = -1;
        ASSERT_EQ(tr_call(rt, a, "total", nullptr, 0, &r), 0); /* (the link is up) */
        ASSERT_EQ(get(r, &v), 0) << tr_last_error();
        int64_t ms = 20000;
        tr_ref running, queued, blocker;
        ASSERT_EQ(tr_call(rt, a, "until_canceled", &ms, sizeof ms, &running), 0);
        if (conc > 1) { /* (the echo waits behind calls that fill the actor for 1.5 s) */
            int64_t args[2] = {99, 1500};
            for (int i = 0; i < conc - 1; i++) {
                ASSERT_EQ(tr_call(rt, a, "meet", args, sizeof args, &blocker), 0);
                tr_ref_release(rt, blocker);
            }
        }
        int64_t one = 1;
        ASSERT_EQ(tr_call(rt, a, "echo", &one, sizeof one, &queued), 0);
        EXPECT_EQ(tr_get(rt, running, 300, nullptr, nullptr), TR_ETIMEDOUT); /* (it runs) */
        auto t0 = std::chrono::steady_clock::now();
        EXPECT_EQ(tr_cancel(rt, queued, 0), 0) << tr_last_error();
        EXPECT_EQ(tr_cancel(rt, running, 0), 0) << tr_last_error();
        EXPECT_EQ(get(running, &v), TR_ECANCELED);
        EXPECT_EQ(get(queued, &v), TR_ECANCELED);
        /* (the calls after it wait for the canceled one to end: it ended early) */
        ASSERT_EQ(tr_call(rt, a, "canceled", nullptr, 0, &r), 0);
        EXPECT_EQ(get(r, &v), 0) << tr_last_error();
        EXPECT_EQ(v, 1) << "the running call on the other node saw its cancel";
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
        ASSERT_EQ(tr_call(rt, a, "total", nullptr, 0, &r), 0);
        EXPECT_EQ(get(r, &v), 0);
        EXPECT_EQ(v, 0) << "the queued echo never ran there";
        /* a call nobody canceled runs to its end and does not see a cancel */
        int64_t short_ms = 100;
        ASSERT_EQ(tr_call(rt, a, "until_canceled", &short_ms, sizeof short_ms, &r), 0);
        EXPECT_EQ(get(r, &v), 0) << tr_last_error();
        EXPECT_EQ(v, 0);
        EXPECT_EQ(tr_actor_kill(rt, a, 1), 0);
    }
    tr_shutdown(rt);
    run_cmd(g_troupe_cli + " stop --tmpdir " + tmp, nullptr);
    run_cmd("rm -rf " + tmp, nullptr);
}

} // namespace
