/* tests/ownership_test.cc - refs owned and borrowed anywhere on one node (docs/OWNERSHIP.md),
 * with real worker processes: a call's result passed inside a value, an object or another
 * call's result reaches every process that gets it; it lives while anyone holds it and no
 * longer (the store's counters are 0 after each test); an owner that dies before its
 * result is in makes the borrowers fail with TR_EOWNER_DIED, at once; forged refs are
 * errors that name them. */
#include <gtest/gtest.h>
#include <stdio.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_actors.h"

namespace {

using Clock = std::chrono::steady_clock;

class OwnershipTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    }
    void TearDown() override {
        tr_shutdown(rt);
    }
    tr_actor_id make(const char *name = nullptr) {
        tr_actor_options o;
        tr_actor_options_init(&o);
        o.name = name;
        tr_actor_id id;
        EXPECT_EQ(tr_actor_create(rt, "Counter", &o, "o", 1, &id), 0) << tr_last_error();
        return id;
    }
    /* The store holds nothing once every holder let go (a dead worker's holds go shortly
     * after its connection closes). */
    void expect_empty() {
        tr_store_stats s = TR_STORE_STATS_INIT;
        bool empty = eventually(3000, [&] {
            EXPECT_EQ(tr_object_stats(rt, &s), 0);
            return s.n_objects == 0 && s.bytes_used == 0;
        });
        EXPECT_TRUE(empty) << s.n_objects << " objects, " << s.bytes_used << " bytes left";
    }
    /* Calls actor.deref_sum(ref, depth) with the ref passed contained; its checksum. */
    int deref(tr_actor_id a, tr_ref ref, int32_t depth, uint64_t *sum, std::string *err) {
        char args[20];
        memcpy(args, &ref, 16);
        memcpy(args + 16, &depth, 4);
        tr_ref r;
        int rc = tr_call_contains(rt, a, "deref_sum", args, sizeof args, nullptr, 0, &ref, 1, &r);
        if (rc) {
            *err = tr_last_error();
            return rc;
        }
        const void *d;
        size_t n;
        rc = tr_get(rt, r, 20000, &d, &n);
        if (rc == 0 && n == 8) memcpy(sum, d, 8);
        if (rc) *err = d ? std::string((const char *)d, n) : tr_last_error();
        tr_ref_release(rt, r);
        return rc;
    }
    int call_ref_arg(tr_actor_id a, const char *method, tr_ref ref, std::string *out,
                     int64_t extra = -1) {
        std::string args((const char *)&ref, 16);
        if (extra >= 0) args.append((const char *)&extra, 8);
        tr_ref r;
        int rc = tr_call_contains(rt, a, method, args.data(), args.size(), nullptr, 0, &ref, 1, &r);
        if (rc) {
            *out = tr_last_error();
            return rc;
        }
        const void *d;
        size_t n;
        rc = tr_get(rt, r, 20000, &d, &n);
        *out = d ? std::string((const char *)d, n) : tr_last_error();
        tr_ref_release(rt, r);
        return rc;
    }
    /* Has actor `sharer` call sleeper's sleep_ms(ms) and return that call's ref inside its
     * result (share_call); borrows the ref while the result holds it, then lets go of the
     * result: *inner is another process's call, still running, held by us. */
    void borrow_shared_call(tr_actor_id sharer, tr_actor_id sleeper, int64_t ms, tr_ref *inner) {
        std::string args((const char *)&sleeper, sizeof sleeper);
        args.append((const char *)&ms, 8);
        tr_ref c;
        ASSERT_EQ(tr_call(rt, sharer, "share_call", args.data(), args.size(), &c), 0);
        const void *d;
        size_t n;
        ASSERT_EQ(tr_get(rt, c, 10000, &d, &n), 0) << tr_last_error();
        ASSERT_EQ(n, 16u);
        memcpy(inner, d, 16);
        ASSERT_EQ(tr_ref_borrow(rt, *inner), 0) << tr_last_error(); /* while c holds it */
        ASSERT_EQ(tr_ref_release(rt, c), 0);
    }
    tr_runtime *rt = nullptr;
};

uint64_t sum_of(const std::string &s) {
    return checksum(s.data(), s.size());
}

std::string i64(int64_t v) {
    return std::string((const char *)&v, 8);
}

/* A call's result, small and large, done and still running, reaches an actor that gets
 * it nested in its arguments. */
TEST_F(OwnershipTest, CallResultNestedInArgumentsResolvesInTheCallee) {
    tr_actor_id a = make(), b = make();
    struct Case {
        const char *method;
        std::string args, expect;
        bool wait_first;
    } cases[] = {
        {"echo", "hello", "hello", true},
        {"echo", "pending", "pending", false},
        {"big", i64(300000), std::string(300000, 'b'), true},  /* a store object: renamed */
        {"big", i64(300000), std::string(300000, 'b'), false}, /* ...into a promise */
        {"sleep_ms", i64(300), i64(300), false},               /* long pending: a promise */
    };
    for (const Case &c : cases) {
        tr_ref r;
        ASSERT_EQ(tr_call(rt, a, c.method, c.args.data(), c.args.size(), &r), 0);
        if (c.wait_first) {
            ASSERT_EQ(tr_get(rt, r, 10000, nullptr, nullptr), 0);
        }
        uint64_t sum = 0;
        std::string err;
        ASSERT_EQ(deref(b, r, 0, &sum, &err), 0) << c.method << ": " << err;
        EXPECT_EQ(sum, sum_of(c.expect)) << c.method;
        /* the owner still reads its own result as before */
        const void *d;
        size_t n;
        ASSERT_EQ(tr_get(rt, r, 10000, &d, &n), 0) << tr_last_error();
        EXPECT_EQ(std::string((const char *)d, n), c.expect) << c.method;
        ASSERT_EQ(tr_ref_release(rt, r), 0);
    }
    expect_empty();
}

/* The Ray blog's object-store allreduce: a method returns `ray.put(x)`; its call's ref
 * goes inside a list to several actors; each gets it, then the ref inside. */
TEST_F(OwnershipTest, RayBlogReduceThenFanOut) {
    tr_actor_id reducer = make();
    std::vector<tr_actor_id> workers;
    for (int i = 0; i < 4; i++)
        workers.push_back(make());
    const uint64_t size = 1 << 20, seed = 7;
    uint64_t args[2] = {size, seed};
    tr_ref r;
    ASSERT_EQ(tr_call(rt, reducer, "put_ref", args, sizeof args, &r), 0);
    /* the list [r], as the driver sends it: an object containing the ref */
    tr_ref list;
    ASSERT_EQ(tr_put_refs(rt, &r, sizeof r, &r, 1, &list), 0) << tr_last_error();
    std::vector<tr_ref> calls(workers.size());
    for (size_t i = 0; i < workers.size(); i++) {
        char a[20];
        int32_t depth = 2; /* the list -> r's value (the ref inside) -> the object */
        memcpy(a, &list, 16);
        memcpy(a + 16, &depth, 4);
        ASSERT_EQ(tr_call_contains(rt, workers[i], "deref_sum", a, sizeof a, nullptr, 0, &list, 1,
                                   &calls[i]),
                  0)
            << tr_last_error();
    }
    ASSERT_EQ(tr_ref_release(rt, list), 0); /* in flight, the calls keep it */
    const uint64_t expect = sum_of(pattern(size, seed));
    for (tr_ref c : calls) {
        const void *d;
        size_t n;
        ASSERT_EQ(tr_get(rt, c, 20000, &d, &n), 0) << tr_last_error();
        ASSERT_EQ(n, 8u);
        uint64_t got;
        memcpy(&got, d, 8);
        EXPECT_EQ(got, expect);
        tr_ref_release(rt, c);
    }
    /* and the driver itself: r's value is the ref inside, which it may get too */
    const void *d;
    size_t n;
    ASSERT_EQ(tr_get(rt, r, 10000, &d, &n), 0);
    ASSERT_EQ(n, 16u);
    tr_ref inner;
    memcpy(&inner, d, 16);
    ASSERT_EQ(tr_get(rt, inner, 10000, &d, &n), 0) << tr_last_error();
    EXPECT_EQ(checksum(d, n), expect);
    tr_ref_release(rt, inner);
    tr_ref_release(rt, r);
    expect_empty();
}

/* A borrower keeps the value after its owner released the ref, until it lets go. */
TEST_F(OwnershipTest, BorrowOutlivesTheOwnersRelease) {
    tr_actor_id a = make(), keeper = make();
    for (const char *method : {"echo", "big"}) {
        std::string args = strcmp(method, "echo") == 0 ? std::string("kept") : i64(200000);
        std::string expect = strcmp(method, "echo") == 0 ? args : std::string(200000, 'b');
        tr_ref r;
        ASSERT_EQ(tr_call(rt, a, method, args.data(), args.size(), &r), 0);
        std::string out;
        ASSERT_EQ(call_ref_arg(keeper, "keep", r, &out), 0) << out;
        ASSERT_EQ(tr_ref_release(rt, r), 0);
        int64_t got = 0;
        std::string sum;
        ASSERT_EQ(call_str(rt, keeper, "kept_sum", "", &sum), 0) << sum;
        ASSERT_EQ(sum.size(), 8u);
        uint64_t s;
        memcpy(&s, sum.data(), 8);
        EXPECT_EQ(s, sum_of(expect)) << method;
        ASSERT_EQ(call_i64(rt, keeper, "drop_kept", 0, &got), 0);
    }
    expect_empty();
}

/* tr_object_holders counts who else holds an object: nobody at first; a borrower in
 * another process; an object that contains it; our own call in flight that passes it;
 * nobody again once each lets go. */
TEST_F(OwnershipTest, HoldersOfAnObjectAreCounted) {
    tr_actor_id keeper = make(), slow = make();
    tr_ref obj;
    ASSERT_EQ(tr_put(rt, "token", 5, &obj), 0);
    size_t n = 99;
    ASSERT_EQ(tr_object_holders(rt, obj, &n), 0) << tr_last_error();
    EXPECT_EQ(n, 0u);
    std::string out;
    ASSERT_EQ(call_ref_arg(keeper, "keep", obj, &out), 0) << out; /* a borrower */
    ASSERT_EQ(tr_object_holders(rt, obj, &n), 0);
    EXPECT_EQ(n, 1u);
    tr_ref box; /* an object that contains it */
    ASSERT_EQ(tr_put_refs(rt, &obj, 16, &obj, 1, &box), 0);
    ASSERT_EQ(tr_object_holders(rt, obj, &n), 0);
    EXPECT_EQ(n, 2u);
    ASSERT_EQ(tr_ref_release(rt, box), 0);
    int64_t ms = 1500; /* a call of ours in flight that passes it (queued behind a sleep) */
    tr_ref sleeping, passing;
    ASSERT_EQ(tr_call(rt, slow, "sleep_ms", &ms, 8, &sleeping), 0);
    ASSERT_EQ(tr_call_contains(rt, slow, "echo", &obj, 16, nullptr, 0, &obj, 1, &passing), 0);
    int64_t got = 0;
    ASSERT_EQ(call_i64(rt, keeper, "drop_kept", 0, &got), 0);
    ASSERT_EQ(tr_object_holders(rt, obj, &n), 0);
    EXPECT_EQ(n, 1u) << "the call in flight holds it";
    ASSERT_EQ(tr_get(rt, passing, 10000, nullptr, nullptr), 0) << tr_last_error();
    ASSERT_EQ(tr_object_holders(rt, obj, &n), 0);
    EXPECT_EQ(n, 0u);
    for (tr_ref r : {sleeping, passing})
        tr_ref_release(rt, r);
    ASSERT_EQ(tr_ref_release(rt, obj), 0);
    EXPECT_EQ(tr_object_holders(rt, obj, &n), TR_ENOTFOUND);
    expect_empty();
}

/* An actor given a handle (tr_actor_handle) ends with its last one, as Ray's
 * actors do: after the calls sent before; not while a borrower, an object or a call in
 * flight holds a copy; orderly (its destructor runs), DEAD for good with the reason. */
/* Calls nobody waits for run all the same (Ray's): a caller that queues more than its
 * socket or ring to the actor takes and then goes off without waiting on that actor, its
 * refs kept or released at once; and an actor's end queued behind such calls when its
 * last handle goes. Nothing here waits on the actor: a file its last call writes (or
 * its destructor) says what ran. */
TEST_F(OwnershipTest, CallsNobodyWaitsForStillRun) {
    char dir[] = "/tmp/tr_unwaited_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    auto read_file = [](const std::string &path) {
        std::string s;
        if (FILE *f = fopen(path.c_str(), "r")) {
            char buf[64];
            size_t n = fread(buf, 1, sizeof buf, f);
            s.assign(buf, n);
            fclose(f);
        }
        return s;
    };
    const std::string big(256 << 10, 'x'); /* 64 of them: 16 MiB, over any socket or ring */
    for (int keep = 0; keep < 3; keep++) {
        std::string path = std::string(dir) + "/note" + std::to_string(keep);
        tr_actor_id a;
        tr_ref h;
        if (keep == 2) { /* its end, behind them, once its only handle goes */
            std::string name = "dtor:" + path;
            ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, name.data(), name.size(), &a), 0)
                << tr_last_error();
            ASSERT_EQ(tr_actor_handle(rt, a, &h), 0) << tr_last_error();
        } else {
            a = make();
        }
        std::vector<tr_ref> kept;
        auto sent = [&](int rc, tr_ref r) {
            ASSERT_EQ(rc, 0) << tr_last_error();
            if (keep == 1)
                kept.push_back(r);
            else
                EXPECT_EQ(tr_ref_release(rt, r), 0);
        };
        tr_ref r;
        for (int i = 0; i < 64; i++)
            sent(tr_call(rt, a, "echo", big.data(), big.size(), &r), r);
        int64_t one = 1;
        sent(tr_call(rt, a, "add", &one, 8, &r), r);
        if (keep == 2)
            ASSERT_EQ(tr_ref_release(rt, h), 0);
        else
            sent(tr_call(rt, a, "note", path.data(), path.size(), &r), r);
        const char *how = keep == 0 ? "refs released" : keep == 1 ? "refs kept" : "an end";
        /* (the note's file is made before its value is in it: wait for the value) */
        EXPECT_TRUE(eventually(
            10000,
            [&] { return keep < 2 ? read_file(path) == "1" : access(path.c_str(), F_OK) == 0; }))
            << how << ": " << read_file(path);
        for (tr_ref k : kept)
            tr_ref_release(rt, k);
        unlink(path.c_str());
    }
    rmdir(dir);
}

TEST_F(OwnershipTest, ActorEndsWithItsLastHandle) {
    auto state = [&](tr_actor_id a, std::string *reason = nullptr) {
        tr_actor_details d;
        tr_actor_details_init(&d);
        EXPECT_EQ(tr_actor_info(rt, a, &d), 0) << tr_last_error();
        if (reason) *reason = d.reason;
        return d.state;
    };
    auto make_handled = [&](const std::string &name, tr_ref *h) {
        tr_actor_id id;
        EXPECT_EQ(tr_actor_create(rt, "Counter", nullptr, name.data(), name.size(), &id), 0)
            << tr_last_error();
        EXPECT_EQ(tr_actor_handle(rt, id, h), 0) << tr_last_error();
        tr_ref again;
        EXPECT_EQ(tr_actor_handle(rt, id, &again), TR_EEXIST);
        return id;
    };
    /* the only handle, released right after a slow call: the call's result comes; the
     * destructor runs; later calls fail; no restart */
    char dir[] = "/tmp/tr_handle_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    std::string mark = std::string(dir) + "/dtor";
    tr_ref h;
    tr_actor_id a = make_handled("dtor:" + mark, &h);
    tr_actor_id named;
    ASSERT_EQ(tr_actor_from_handle(rt, h, &named), 0) << tr_last_error();
    EXPECT_EQ(memcmp(named.b, a.b, 16), 0);
    int64_t ms = 300, got = 0;
    tr_ref slow;
    ASSERT_EQ(tr_call(rt, a, "sleep_ms", &ms, 8, &slow), 0);
    ASSERT_EQ(tr_ref_release(rt, h), 0);
    EXPECT_EQ(tr_ref_release(rt, h), TR_ESTALE);
    const void *d_;
    size_t n;
    ASSERT_EQ(tr_get(rt, slow, 10000, &d_, &n), 0) << tr_last_error();
    ASSERT_EQ(n, 8u);
    memcpy(&got, d_, 8);
    EXPECT_EQ(got, 300);
    tr_ref_release(rt, slow);
    std::string reason;
    EXPECT_TRUE(eventually(5000, [&] { return state(a, &reason) == TR_ACTOR_DEAD; }));
    EXPECT_NE(reason.find("no handle of it was left"), std::string::npos) << reason;
    EXPECT_EQ(access(mark.c_str(), F_OK), 0) << "the destructor did not run";
    unlink(mark.c_str());
    rmdir(dir);
    EXPECT_EQ(call_i64(rt, a, "get", 0, &got), TR_EACTOR_DIED);

    /* a borrower's copy keeps it alive after ours goes; its release ends it */
    tr_actor_id keeper = make();
    tr_actor_id b = make_handled("b", &h);
    std::string out;
    ASSERT_EQ(call_ref_arg(keeper, "keep", h, &out), 0) << out;
    ASSERT_EQ(tr_ref_release(rt, h), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    EXPECT_EQ(state(b), TR_ACTOR_ALIVE);
    EXPECT_EQ(call_i64(rt, b, "add", 5, &got), 0) << tr_last_error();
    EXPECT_EQ(got, 5);
    ASSERT_EQ(call_i64(rt, keeper, "drop_kept", 0, &got), 0);
    EXPECT_TRUE(eventually(5000, [&] { return state(b) == TR_ACTOR_DEAD; }));

    /* an object that contains it keeps it alive; so does a call in flight that passes it */
    tr_actor_id c = make_handled("c", &h);
    tr_ref box;
    ASSERT_EQ(tr_put_refs(rt, &h, 16, &h, 1, &box), 0);
    ms = 600;
    tr_ref sleeping, passing;
    ASSERT_EQ(tr_call(rt, keeper, "sleep_ms", &ms, 8, &sleeping), 0);
    ASSERT_EQ(tr_call_contains(rt, keeper, "echo", &h, 16, nullptr, 0, &h, 1, &passing), 0);
    ASSERT_EQ(tr_ref_release(rt, h), 0);
    ASSERT_EQ(tr_ref_release(rt, box), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(state(c), TR_ACTOR_ALIVE) << "a call in flight passes its handle";
    ASSERT_EQ(tr_get(rt, passing, 10000, nullptr, nullptr), 0) << tr_last_error();
    EXPECT_TRUE(eventually(5000, [&] { return state(c) == TR_ACTOR_DEAD; }));
    for (tr_ref r : {sleeping, passing})
        tr_ref_release(rt, r);

    /* an actor that runs calls side by side (a pool of threads): the calls it took before
     * its end still reply; the end wakes its loop */
    tr_actor_options po;
    tr_actor_options_init(&po);
    po.max_concurrency = 4;
    tr_actor_id d;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &po, "d", 1, &d), 0) << tr_last_error();
    ASSERT_EQ(tr_actor_handle(rt, d, &h), 0);
    ms = 400;
    tr_ref slow2;
    ASSERT_EQ(tr_call(rt, d, "sleep_ms", &ms, 8, &slow2), 0);
    ASSERT_EQ(tr_actor_wait_ready(rt, d, 10000), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100)); /* (it runs) */
    ASSERT_EQ(tr_ref_release(rt, h), 0);
    int64_t five = 5; /* (sent right behind the end: a pool thread is free to take it) */
    tr_ref late;
    ASSERT_EQ(tr_call(rt, d, "add", &five, 8, &late), 0);
    ASSERT_EQ(tr_get(rt, slow2, 10000, &d_, &n), 0) << tr_last_error();
    tr_ref_release(rt, slow2);
    EXPECT_EQ(tr_get(rt, late, 10000, &d_, &n), TR_EACTOR_DIED) << "a call after the end ran";
    tr_ref_release(rt, late);
    EXPECT_TRUE(eventually(5000, [&] { return state(d) == TR_ACTOR_DEAD; }));

    /* a concurrency group's pool: the calls it queued before the end (which runs in the
     * default pool, at once) still run and reply */
    const char *io_methods[] = {"sleep_ms"};
    tr_concurrency_group io = {"io", 1, io_methods, 1};
    tr_actor_options go;
    tr_actor_options_init(&go);
    go.concurrency_groups = &io;
    go.n_concurrency_groups = 1;
    tr_actor_id gr;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &go, "g", 1, &gr), 0) << tr_last_error();
    ASSERT_EQ(tr_actor_handle(rt, gr, &h), 0);
    ASSERT_EQ(tr_actor_wait_ready(rt, gr, 10000), 0) << tr_last_error();
    ms = 300;
    tr_ref slow3, queued;
    ASSERT_EQ(tr_call(rt, gr, "sleep_ms", &ms, 8, &slow3), 0);
    ASSERT_EQ(tr_call(rt, gr, "add@io", &five, 8, &queued), 0); /* (behind it, in "io") */
    ASSERT_EQ(tr_ref_release(rt, h), 0);
    EXPECT_EQ(tr_get(rt, slow3, 10000, &d_, &n), 0) << tr_last_error();
    ASSERT_EQ(tr_get(rt, queued, 10000, &d_, &n), 0)
        << "a call before the end did not run: " << tr_last_error();
    ASSERT_EQ(n, 8u);
    memcpy(&got, d_, 8);
    EXPECT_EQ(got, 5);
    for (tr_ref r : {slow3, queued})
        tr_ref_release(rt, r);
    EXPECT_TRUE(eventually(5000, [&] { return state(gr) == TR_ACTOR_DEAD; }));

    /* the handle comes back to its creator after it let go: its copy counts again */
    tr_actor_id e = make_handled("e", &h);
    ASSERT_EQ(call_ref_arg(keeper, "keep", h, &out), 0) << out;
    ASSERT_EQ(tr_ref_release(rt, h), 0);
    ASSERT_EQ(tr_ref_borrow(rt, h), 0); /* (as a value that holds it comes back) */
    ASSERT_EQ(call_i64(rt, keeper, "drop_kept", 0, &got), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(state(e), TR_ACTOR_ALIVE) << "its creator holds it again";
    ASSERT_EQ(tr_ref_release(rt, h), 0);
    EXPECT_TRUE(eventually(5000, [&] { return state(e) == TR_ACTOR_DEAD; }));

    /* a plain object is no handle */
    tr_actor_id x;
    tr_ref plain;
    ASSERT_EQ(tr_put(rt, "not a handle", 12, &plain), 0);
    EXPECT_EQ(tr_actor_from_handle(rt, plain, &x), TR_EINVAL);
    tr_ref_release(rt, plain);
    EXPECT_EQ(state(keeper), TR_ACTOR_ALIVE);
    expect_empty();
}

/* Our own result, released after we shared it, comes back to us in a value: we borrow it
 * like anyone (its twin lives in the store while the object holds it). */
TEST_F(OwnershipTest, OwnReleasedResultComesBack) {
    tr_actor_id a = make();
    tr_ref r, list;
    ASSERT_EQ(tr_call(rt, a, "echo", "again", 5, &r), 0);
    ASSERT_EQ(tr_put_refs(rt, &r, sizeof r, &r, 1, &list), 0) << tr_last_error();
    ASSERT_EQ(tr_ref_release(rt, r), 0);
    const void *d;
    size_t n;
    tr_ref back;
    size_t nr = 0;
    ASSERT_EQ(tr_object_refs(rt, list, &back, 1, &nr), 0);
    ASSERT_EQ(nr, 1u);
    ASSERT_EQ(memcmp(&back, &r, 16), 0) << "the ref comes back as it went";
    ASSERT_EQ(tr_ref_borrow(rt, back), 0) << tr_last_error();
    ASSERT_EQ(tr_ref_release(rt, list), 0);
    ASSERT_EQ(tr_get(rt, back, 10000, &d, &n), 0) << tr_last_error();
    EXPECT_EQ(std::string((const char *)d, n), "again");
    uint8_t ready = 0;
    size_t n_ready = 0;
    ASSERT_EQ(tr_wait(rt, &back, 1, 1, 1000, &ready, &n_ready), 0) << tr_last_error();
    EXPECT_EQ(n_ready, 1u);
    ASSERT_EQ(tr_ref_release(rt, back), 0);
    EXPECT_EQ(tr_ref_release(rt, back), TR_ESTALE);
    expect_empty();
}

/* A large result already passed by its object's name (to a call that pins it) and then
 * shared: it is copied into its twin, never renamed under the call that reads it; nothing
 * leaks. */
TEST_F(OwnershipTest, LargeResultInUseIsCopiedNotRenamed) {
    tr_actor_id a = make(), b = make(), c = make();
    tr_ref r;
    ASSERT_EQ(tr_call(rt, a, "big", i64(300000).data(), 8, &r), 0);
    ASSERT_EQ(tr_get(rt, r, 10000, nullptr, nullptr), 0);
    int64_t ms = 300;
    tr_ref slow, sum;
    ASSERT_EQ(tr_call(rt, b, "sleep_ms", &ms, 8, &slow), 0); /* b busy: the next call waits */
    ASSERT_EQ(tr_call_refs(rt, b, "sum_args", nullptr, 0, &r, 1, &sum), 0);
    uint64_t got = 0;
    std::string err;
    ASSERT_EQ(deref(c, r, 0, &got, &err), 0) << err; /* shared while b's call holds it */
    const std::string expect(300000, 'b');
    EXPECT_EQ(got, sum_of(expect));
    const void *d;
    size_t n;
    ASSERT_EQ(tr_get(rt, sum, 10000, &d, &n), 0) << tr_last_error();
    ASSERT_EQ(n, 8u);
    memcpy(&got, d, 8);
    EXPECT_EQ(got, sum_of(expect));
    ASSERT_EQ(tr_get(rt, r, 10000, &d, &n), 0);
    EXPECT_EQ(std::string((const char *)d, n), expect);
    for (tr_ref x : {r, slow, sum})
        tr_ref_release(rt, x);
    expect_empty();
}

std::string part(int i) {
    std::string one = "part-" + std::to_string(i), s;
    for (int r = 0; r <= (i == 2 ? 30000 : i); r++)
        s += one;
    return s;
}

/* num_returns: one ref per result, each its own (get, release, pass on, share); a method
 * that replies one value fails them all with a clear error. */
TEST_F(OwnershipTest, SeveralResultsOneRefEach) {
    tr_actor_id a = make(), b = make();
    int32_t k = 4;
    tr_ref r[4];
    ASSERT_EQ(tr_call_multi(rt, a, "parts", &k, 4, nullptr, 0, 4, r), 0) << tr_last_error();
    /* the third one nested in another call's arguments before it is in */
    uint64_t sum = 0;
    std::string err;
    ASSERT_EQ(deref(b, r[2], 0, &sum, &err), 0) << err;
    EXPECT_EQ(sum, sum_of(part(2)));
    for (int i = 0; i < 4; i++) {
        const void *d;
        size_t n;
        ASSERT_EQ(tr_get(rt, r[i], 10000, &d, &n), 0) << tr_last_error();
        EXPECT_EQ(std::string((const char *)d, n), part(i)) << i;
    }
    /* a result as another call's argument */
    tr_ref echo;
    ASSERT_EQ(tr_call_refs(rt, b, "sum_args", nullptr, 0, &r[1], 1, &echo), 0);
    const void *d;
    size_t n;
    ASSERT_EQ(tr_get(rt, echo, 10000, &d, &n), 0) << tr_last_error();
    memcpy(&sum, d, 8);
    EXPECT_EQ(sum, sum_of(part(1)));
    tr_ref_release(rt, echo);
    for (tr_ref x : r)
        EXPECT_EQ(tr_ref_release(rt, x), 0);
    /* released before the results are in: nothing leaks */
    ASSERT_EQ(tr_call_multi(rt, a, "parts", &k, 4, nullptr, 0, 4, r), 0);
    for (tr_ref x : r)
        EXPECT_EQ(tr_ref_release(rt, x), 0);
    char plain[5] = {4, 0, 0, 0, 1};
    ASSERT_EQ(tr_call_multi(rt, a, "parts", plain, 5, nullptr, 0, 4, r), 0);
    for (tr_ref x : r) {
        EXPECT_EQ(tr_get(rt, x, 10000, &d, &n), TR_ETASK);
        EXPECT_NE(std::string(tr_last_error()).find("asked for 4 results"), std::string::npos)
            << tr_last_error();
        tr_ref_release(rt, x);
    }
    EXPECT_EQ(tr_call_multi(rt, a, "parts", &k, 4, nullptr, 0, 0, r), TR_EINVAL);
    expect_empty();
}

std::string stream_args(int32_t k, int32_t mode, const std::string &path = "") {
    std::string a((const char *)&k, 4);
    a.append((const char *)&mode, 4);
    return a + path;
}

/* Takes a stream's items until its end (tr_stream_next's 1): their values (item `first`
 * first). Item 3 is read through the ref in it. */
std::vector<std::string> drain(tr_runtime *rt, tr_ref st, int *end_rc, size_t first = 0) {
    std::vector<std::string> out;
    tr_ref it;
    int rc;
    while ((rc = tr_stream_next(rt, st, 20000, &it)) == 0) {
        const void *d;
        size_t n;
        int g = tr_get(rt, it, 10000, &d, &n);
        std::string v =
            g ? std::string("error: ") + tr_last_error() : std::string((const char *)d, n);
        if (!g && first + out.size() == 3 && n == 16) { /* the ref inside */
            tr_ref inner;
            memcpy(&inner, d, 16);
            g = tr_get(rt, inner, 10000, &d, &n);
            v = g ? std::string("error: ") + tr_last_error() : std::string((const char *)d, n);
            if (!g) tr_ref_release(rt, inner);
        }
        out.push_back(v);
        tr_ref_release(rt, it);
    }
    *end_rc = rc;
    return out;
}

std::vector<std::string> items(int k) {
    std::vector<std::string> v;
    for (int i = 0; i < k; i++)
        v.push_back(stream_item(i));
    return v;
}

/* Streams (num_returns TR_STREAMING): each item reaches the caller as the method yields it,
 * while the method runs on - inline, through the store (item 2), or with a ref in it
 * (item 3) - in order, once; the stream ref's own value is the method's reply; a plain
 * call of the same method drops the items; releasing a stream with items not taken leaves
 * nothing behind. */
TEST_F(OwnershipTest, StreamItemsComeAsTheMethodYieldsThem) {
    tr_actor_id a = make();
    char dir[] = "/tmp/trstreamXXXXXX";
    ASSERT_TRUE(mkdtemp(dir));
    std::string go = std::string(dir) + "/go";
    std::string args = stream_args(5, 1, go);
    tr_ref st, it;
    ASSERT_EQ(
        tr_call_multi(rt, a, "stream", args.data(), args.size(), nullptr, 0, TR_STREAMING, &st), 0)
        << tr_last_error();
    ASSERT_EQ(tr_stream_next(rt, st, 20000, &it), 0) << tr_last_error();
    const void *d;
    size_t n;
    ASSERT_EQ(tr_get(rt, it, 10000, &d, &n), 0) << tr_last_error();
    EXPECT_EQ(std::string((const char *)d, n), stream_item(0));
    EXPECT_EQ(tr_get(rt, st, 0, &d, &n), TR_ETIMEDOUT); /* the method waits for "go" */
    EXPECT_EQ(tr_stream_next(rt, st, 50, &it), TR_ETIMEDOUT);
    tr_ref_release(rt, it);
    if (FILE *f = fopen(go.c_str(), "w")) fclose(f);
    int end = 0;
    std::vector<std::string> rest = drain(rt, st, &end, 1);
    EXPECT_EQ(end, 1) << tr_last_error();
    std::vector<std::string> want = items(5);
    want.erase(want.begin());
    EXPECT_TRUE(rest == want) << rest.size() << " items";
    ASSERT_EQ(tr_get(rt, st, 10000, &d, &n), 0) << tr_last_error();
    EXPECT_EQ(std::string((const char *)d, n), "done-5");
    EXPECT_EQ(tr_stream_next(rt, st, 0, &it), 1); /* (the end, again) */
    EXPECT_EQ(tr_ref_release(rt, st), 0);
    EXPECT_EQ(tr_stream_next(rt, st, 0, &it), TR_ESTALE);
    /* a plain call's ref is no stream; a plain call of a streaming method drops the items */
    tr_ref plain;
    args = stream_args(4, 0);
    ASSERT_EQ(tr_call(rt, a, "stream", args.data(), args.size(), &plain), 0);
    EXPECT_EQ(tr_stream_next(rt, plain, 0, &it), TR_ESTALE);
    ASSERT_EQ(tr_get(rt, plain, 10000, &d, &n), 0) << tr_last_error();
    EXPECT_EQ(std::string((const char *)d, n), "done-4");
    tr_ref_release(rt, plain);
    /* released with its items untaken, after its end and before */
    for (int early = 0; early < 2; early++) {
        ASSERT_EQ(
            tr_call_multi(rt, a, "stream", args.data(), args.size(), nullptr, 0, TR_STREAMING, &st),
            0);
        if (!early) {
            ASSERT_EQ(tr_get(rt, st, 10000, &d, &n), 0) << tr_last_error();
        }
        EXPECT_EQ(tr_ref_release(rt, st), 0);
    }
    ASSERT_EQ(call_str(rt, a, "echo", "after", nullptr), 0); /* (the last one's end is in) */
    unlink(go.c_str());
    rmdir(dir);
    expect_empty();
}

/* Two streams at once on an actor with max_concurrency 2 (its pool's threads yield): both
 * have their first item while both methods wait, then all their items, each whole. */
TEST_F(OwnershipTest, StreamsOfAThreadedActorRunSideBySide) {
    tr_actor_options o;
    tr_actor_options_init(&o);
    o.max_concurrency = 2;
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &o, "o", 1, &a), 0) << tr_last_error();
    char dir[] = "/tmp/trstreamXXXXXX";
    ASSERT_TRUE(mkdtemp(dir));
    std::string go = std::string(dir) + "/go", args = stream_args(5, 1, go);
    tr_ref st[2], it;
    for (tr_ref &r : st)
        ASSERT_EQ(
            tr_call_multi(rt, a, "stream", args.data(), args.size(), nullptr, 0, TR_STREAMING, &r),
            0);
    for (tr_ref r : st) {
        ASSERT_EQ(tr_stream_next(rt, r, 20000, &it), 0) << tr_last_error();
        tr_ref_release(rt, it);
    }
    if (FILE *f = fopen(go.c_str(), "w")) fclose(f);
    std::vector<std::string> want = items(5);
    want.erase(want.begin());
    for (tr_ref r : st) {
        int end = 0;
        EXPECT_TRUE(drain(rt, r, &end, 1) == want);
        EXPECT_EQ(end, 1);
        tr_ref_release(rt, r);
    }
    unlink(go.c_str());
    rmdir(dir);
    expect_empty();
}

/* A stream that fails, dies or is canceled ends after the items it yielded: the stream
 * ref says why. */
TEST_F(OwnershipTest, StreamThatFailsDiesOrIsCanceledEndsWithWhy) {
    tr_actor_id a = make();
    tr_ref st, it;
    const void *d;
    size_t n;
    int end = 0;
    std::string args = stream_args(3, 2);
    ASSERT_EQ(
        tr_call_multi(rt, a, "stream", args.data(), args.size(), nullptr, 0, TR_STREAMING, &st), 0);
    EXPECT_TRUE(drain(rt, st, &end) == items(3));
    EXPECT_EQ(end, 1);
    EXPECT_EQ(tr_get(rt, st, 10000, &d, &n), TR_ETASK);
    EXPECT_NE(std::string(tr_last_error()).find("failed after 3 items"), std::string::npos)
        << tr_last_error();
    tr_ref_release(rt, st);
    args = stream_args(5, 3, "/dev/null");
    ASSERT_EQ(
        tr_call_multi(rt, a, "stream", args.data(), args.size(), nullptr, 0, TR_STREAMING, &st), 0);
    EXPECT_TRUE(drain(rt, st, &end) == items(2));
    EXPECT_EQ(end, 1);
    EXPECT_EQ(tr_get(rt, st, 10000, &d, &n), TR_EACTOR_DIED);
    tr_ref_release(rt, st);
    tr_actor_id b = make();
    args = stream_args(5, 1, "/nonexistent/never");
    ASSERT_EQ(
        tr_call_multi(rt, b, "stream", args.data(), args.size(), nullptr, 0, TR_STREAMING, &st), 0);
    ASSERT_EQ(tr_stream_next(rt, st, 20000, &it), 0) << tr_last_error();
    tr_ref_release(rt, it);
    auto t0 = Clock::now();
    EXPECT_EQ(tr_cancel(rt, st, 0), 0);
    EXPECT_EQ(tr_stream_next(rt, st, 10000, &it), 1);
    EXPECT_EQ(tr_get(rt, st, 0, &d, &n), TR_ECANCELED);
    tr_ref_release(rt, st);
    /* the method saw its cancel and ended: the actor serves the next call at once */
    ASSERT_EQ(call_str(rt, b, "echo", "after", nullptr, 10000), 0) << tr_last_error();
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
    expect_empty();
}

/* Several results with refs in them (tr_ctx_reply_multi_contains): each result keeps the
 * refs alive on its own - dropped, got, passed on inside another call - and nothing is
 * left once all go. */
TEST_F(OwnershipTest, SeveralResultsWithRefsInThem) {
    tr_actor_id a = make(), b = make();
    int32_t k = 3;
    tr_ref r[3];
    ASSERT_EQ(tr_call_multi(rt, a, "put_parts", &k, 4, nullptr, 0, 3, r), 0) << tr_last_error();
    auto obj = [](int i) {
        std::string v;
        for (int j = 0; j < 1000; j++)
            v += "obj-" + std::to_string(i);
        return v;
    };
    const void *d;
    size_t n;
    ASSERT_EQ(tr_get(rt, r[0], 10000, &d, &n), 0) << tr_last_error();
    ASSERT_EQ(n, 16u);
    EXPECT_EQ(tr_ref_release(rt, r[0]), 0); /* result 0 goes before its ref is read */
    uint64_t sum = 0;
    std::string err;
    for (int i = 1; i < 3; i++) { /* the others, read through another actor */
        ASSERT_EQ(deref(b, r[i], 1, &sum, &err), 0) << i << ": " << err;
        EXPECT_EQ(sum, sum_of(obj(i))) << i;
    }
    for (int i = 1; i < 3; i++) { /* and here */
        tr_ref inner;
        ASSERT_EQ(tr_get(rt, r[i], 10000, &d, &n), 0) << tr_last_error();
        ASSERT_EQ(n, 16u);
        memcpy(&inner, d, 16);
        ASSERT_EQ(tr_get(rt, inner, 10000, &d, &n), 0) << i << ": " << tr_last_error();
        EXPECT_EQ(std::string((const char *)d, n), obj(i));
        tr_ref_release(rt, inner);
    }
    tr_store_stats s = TR_STORE_STATS_INIT;
    ASSERT_EQ(tr_object_stats(rt, &s), 0);
    EXPECT_GE(s.n_objects, 3u); /* (the objects and the results' containers) */
    for (int i = 1; i < 3; i++)
        EXPECT_EQ(tr_ref_release(rt, r[i]), 0);
    expect_empty();
}

/* A failed call's error reaches the borrower with its code and message. */
TEST_F(OwnershipTest, ErrorResultReachesTheBorrower) {
    tr_actor_id a = make(), b = make();
    tr_ref r;
    ASSERT_EQ(tr_call(rt, a, "fail", "boom-42", 7, &r), 0);
    uint64_t sum;
    std::string err;
    EXPECT_EQ(deref(b, r, 0, &sum, &err), TR_ETASK);
    EXPECT_NE(err.find("TR_ETASK"), std::string::npos) << err;
    EXPECT_NE(err.find("boom-42"), std::string::npos) << err;
    tr_ref_release(rt, r);
    expect_empty();
}

/* A worker returns the ref of a call it made and released, not yet done: the caller gets
 * the result once it is in (the worker reads it for its borrowers). */
TEST_F(OwnershipTest, WorkerSharesItsOwnPendingCall) {
    tr_actor_id a = make(), sleeper = make();
    tr_ref inner;
    ASSERT_NO_FATAL_FAILURE(borrow_shared_call(a, sleeper, 300, &inner));
    const void *d;
    size_t n;
    int rc = tr_get(rt, inner, 10000, &d, &n);
    ASSERT_EQ(rc, 0) << tr_errname(rc) << ": " << tr_last_error();
    ASSERT_EQ(n, 8u);
    int64_t v;
    memcpy(&v, d, 8);
    EXPECT_EQ(v, 300);
    tr_ref_release(rt, inner);
    expect_empty();
}

/* Another process's result still running, passed as a top-level argument: the callee
 * waits for it as long as the call takes (here past the 10 s an object being written is
 * waited for), not failing at a fixed timeout. */
TEST_F(OwnershipTest, BorrowedPendingResultAsArgumentIsWaitedFor) {
    tr_actor_id a = make(), sleeper = make(), reader = make();
    tr_ref inner, r;
    ASSERT_NO_FATAL_FAILURE(borrow_shared_call(a, sleeper, 10500, &inner));
    const void *d;
    size_t n;
    ASSERT_EQ(tr_call_refs(rt, reader, "sum_args", nullptr, 0, &inner, 1, &r), 0)
        << tr_last_error();
    int rc = tr_get(rt, r, 30000, &d, &n);
    ASSERT_EQ(rc, 0) << tr_errname(rc) << ": " << (d ? std::string((const char *)d, n) : "");
    ASSERT_EQ(n, 8u);
    int64_t ms = 10500;
    uint64_t got;
    memcpy(&got, d, 8);
    EXPECT_EQ(got, checksum(&ms, 8));
    tr_ref_release(rt, r);
    tr_ref_release(rt, inner);
    expect_empty();
}

/* tr_wait and tr_get with a timeout work on another process's call ref. */
TEST_F(OwnershipTest, WaitOnABorrowedRef) {
    tr_actor_id a = make(), sleeper = make();
    tr_ref inner;
    ASSERT_NO_FATAL_FAILURE(borrow_shared_call(a, sleeper, 400, &inner));
    const void *d;
    size_t n;
    uint8_t ready = 9;
    size_t n_ready = 9;
    ASSERT_EQ(tr_wait(rt, &inner, 1, 1, 0, &ready, &n_ready), 0);
    EXPECT_EQ(n_ready, 0u);
    EXPECT_EQ(tr_get(rt, inner, 10, &d, &n), TR_ETIMEDOUT);
    ASSERT_EQ(tr_wait(rt, &inner, 1, 1, 10000, &ready, &n_ready), 0);
    EXPECT_EQ(n_ready, 1u);
    EXPECT_EQ(ready, 1);
    ASSERT_EQ(tr_get(rt, inner, 0, &d, &n), 0);
    tr_ref_release(rt, inner);
    tr_ref_release(rt, inner); /* (the get's hold and the borrow are one hold) */
    expect_empty();
}

/* The owner dies before its result is in: the borrower's wait ends at once with
 * TR_EOWNER_DIED, not at the result's time nor at its timeout. */
TEST_F(OwnershipTest, OwnerDiesBeforeTheResultIsIn) {
    tr_actor_id keeper = make(), sleeper = make();
    char kh[33], sh[33];
    tr_actor_id_str(keeper, kh);
    tr_actor_id_str(sleeper, sh);
    std::string spec =
        std::string("EXPORT_AND_DIE=") + tr_runtime_address(rt) + "|" + kh + "|" + sh;
    int st = run_self(spec);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
    auto t0 = Clock::now();
    std::string out;
    int rc = call_str(rt, keeper, "kept_sum", i64(30000), &out, 40000);
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_EQ(rc, TR_ETASK);
    EXPECT_NE(out.find("TR_EOWNER_DIED"), std::string::npos) << out;
    EXPECT_LT(s, 2.0) << "the borrower waited for the owner's result: " << out;
    int64_t got;
    EXPECT_EQ(call_i64(rt, keeper, "drop_kept", 0, &got), 0);
    expect_empty();
}

/* An object whose maker died, and nobody held: a get says its owner died (Ray's
 * OwnerDiedError), naming the ref; one made by a live process and freed is not found. */
TEST_F(OwnershipTest, AnObjectWhoseMakerDiedSaysSo) {
    tr_actor_id maker = make();
    uint64_t args[2] = {100000, 9};
    tr_ref r, obj;
    const void *d;
    size_t n;
    ASSERT_EQ(tr_call(rt, maker, "put", args, sizeof args, &r), 0);
    ASSERT_EQ(tr_get(rt, r, 10000, &d, &n), 0) << tr_last_error();
    ASSERT_EQ(n, 16u);
    memcpy(&obj, d, 16); /* (its bytes: no hold of ours) */
    tr_ref_release(rt, r);
    ASSERT_EQ(tr_get(rt, obj, 10000, &d, &n), 0) << tr_last_error();
    EXPECT_EQ(n, args[0]);
    tr_ref_release(rt, obj);
    ASSERT_EQ(tr_actor_kill(rt, maker, 1), 0);
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", obj.b[i]);
    int rc = 0;
    /* (the node lets go of a dead worker's holds as it reaps it, a moment after the kill) */
    EXPECT_TRUE(eventually(5000, [&] {
        rc = tr_get(rt, obj, 0, nullptr, nullptr);
        if (rc == 0) tr_ref_release(rt, obj);
        return rc != 0;
    }));
    EXPECT_EQ(rc, TR_EOWNER_DIED) << tr_last_error();
    EXPECT_NE(std::string(tr_last_error()).find(hex), std::string::npos) << tr_last_error();
    tr_ref mine;
    ASSERT_EQ(tr_put(rt, "v", 1, &mine), 0);
    tr_ref_release(rt, mine);
    EXPECT_EQ(tr_get(rt, mine, 0, nullptr, nullptr), TR_ENOTFOUND) << tr_last_error();
    expect_empty();
}

/* Refs nobody made: errors naming them, never a crash or a hang. */
TEST_F(OwnershipTest, ForgedRefsAreErrorsThatNameThem) {
    tr_actor_id a = make();
    tr_ref mine;
    ASSERT_EQ(tr_call(rt, a, "echo", "x", 1, &mine), 0);
    ASSERT_EQ(tr_get(rt, mine, 10000, nullptr, nullptr), 0);
    tr_ref forged = mine; /* our owner bytes, a key never made: a stale ref of ours */
    forged.b[0] ^= 0x5a;
    EXPECT_EQ(tr_get(rt, forged, 0, nullptr, nullptr), TR_ESTALE);
    EXPECT_EQ(tr_ref_borrow(rt, forged), TR_ENOTFOUND);
    EXPECT_EQ(tr_ref_borrow(rt, mine), 0) << "ours: held already"; /* (nothing changes) */
    tr_ref other = mine; /* another owner on this node: index 200, never attached */
    other.b[8] = 200;
    other.b[9] = 0;
    for (int k = 0; k < 2; k++) {
        int rc = k ? tr_ref_borrow(rt, other) : tr_get(rt, other, 100, nullptr, nullptr);
        EXPECT_EQ(rc, TR_EOWNER_DIED) << tr_last_error();
        char hex[33];
        for (int i = 0; i < 16; i++)
            snprintf(hex + 2 * i, 3, "%02x", other.b[i]);
        EXPECT_NE(std::string(tr_last_error()).find(hex), std::string::npos) << tr_last_error();
    }
    tr_ref object = mine; /* an object id nobody put */
    object.b[15] = 0x80;
    EXPECT_EQ(tr_get(rt, object, 0, nullptr, nullptr), TR_ENOTFOUND);
    EXPECT_EQ(tr_ref_borrow(rt, object), TR_ENOTFOUND);
    tr_ref list;
    EXPECT_EQ(tr_put_refs(rt, "l", 1, &other, 1, &list), TR_EOWNER_DIED);
    EXPECT_EQ(tr_put_refs(rt, "l", 1, &forged, 1, &list), TR_ENOTFOUND);
    tr_ref c;
    EXPECT_EQ(tr_call_contains(rt, a, "echo", "y", 1, nullptr, 0, &object, 1, &c), TR_ENOTFOUND);
    tr_ref_release(rt, mine);
    expect_empty();
}

} // namespace
