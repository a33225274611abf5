/* tests/objects_test.cc - the shared-memory object store through the public API, with
 * real processes: integrity across processes, zero-copy views, reference counting and
 * reclaim of a dead process's objects, create/seal, limits, tr_wait on objects. */
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_actors.h"

extern "C" {
#include "objectstore/segment.h"
}

namespace {

using Clock = std::chrono::steady_clock;

class ObjectsTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    }
    void TearDown() override {
        tr_shutdown(rt);
    }
    tr_store_stats stats() {
        tr_store_stats s = TR_STORE_STATS_INIT;
        EXPECT_EQ(tr_object_stats(rt, &s), 0);
        return s;
    }
    /* The store empties once every holder is gone; a dead worker is reclaimed by the
     * node shortly after its connection closes. */
    void expect_empty() {
        auto t0 = Clock::now();
        tr_store_stats s = stats();
        while ((s.n_objects || s.bytes_used) && Clock::now() - t0 < std::chrono::seconds(3)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            s = stats();
        }
        EXPECT_EQ(s.n_objects, 0u);
        EXPECT_EQ(s.bytes_used, 0u);
        EXPECT_EQ(s.bytes_objects, 0u);
    }
    tr_actor_id make() {
        tr_actor_id id;
        EXPECT_EQ(tr_actor_create(rt, "Counter", nullptr, "o", 1, &id), 0) << tr_last_error();
        return id;
    }
    tr_runtime *rt = nullptr;
};

TEST_F(ObjectsTest, PutGetIsZeroCopyAndReleaseFrees) {
    std::string data = pattern(100000, 1);
    tr_ref r;
    ASSERT_EQ(tr_put(rt, data.data(), data.size(), &r), 0) << tr_last_error();
    const void *v1, *v2;
    size_t n1, n2;
    ASSERT_EQ(tr_get(rt, r, 0, &v1, &n1), 0);
    ASSERT_EQ(tr_get(rt, r, 0, &v2, &n2), 0);
    EXPECT_EQ(v1, v2) << "a view, not a copy";
    EXPECT_NE(v1, (const void *)data.data());
    ASSERT_EQ(n1, data.size());
    EXPECT_EQ(memcmp(v1, data.data(), n1), 0);
    tr_store_stats s = stats();
    EXPECT_EQ(s.n_objects, 1u);
    EXPECT_EQ(s.bytes_objects, data.size());
    EXPECT_GE(s.bytes_used, data.size());
    /* the view is read-only: writing through it faults instead of corrupting the object */
    EXPECT_DEATH(((volatile char *)v1)[0] = 1, "");
    ASSERT_EQ(tr_ref_release(rt, r), 0);
    EXPECT_EQ(tr_ref_release(rt, r), TR_ESTALE);
    EXPECT_EQ(tr_get(rt, r, 0, &v1, &n1), TR_ENOTFOUND);
    expect_empty();
    /* empty objects are objects too */
    ASSERT_EQ(tr_put(rt, nullptr, 0, &r), 0);
    ASSERT_EQ(tr_get(rt, r, 0, &v1, &n1), 0);
    EXPECT_EQ(n1, 0u);
    tr_ref_release(rt, r);
    expect_empty();
}

TEST_F(ObjectsTest, UnknownRefsAndBadArguments) {
    tr_ref fake;
    memset(&fake, 0x33, sizeof fake);
    fake.b[15] |= 0x80;
    EXPECT_EQ(tr_get(rt, fake, 0, nullptr, nullptr), TR_ENOTFOUND);
    EXPECT_EQ(tr_ref_release(rt, fake), TR_ESTALE);
    EXPECT_EQ(tr_object_seal(rt, fake), TR_ENOTFOUND);
    tr_ref r;
    EXPECT_EQ(tr_put(rt, nullptr, 5, &r), TR_EINVAL);
    EXPECT_EQ(tr_put(rt, "x", 1, nullptr), TR_EINVAL);
    tr_store_stats bad = TR_STORE_STATS_INIT;
    bad.struct_size = 3;
    EXPECT_EQ(tr_object_stats(rt, &bad), TR_EINVAL);
}

TEST_F(ObjectsTest, TooBigAndFull) {
    tr_store_stats s = stats();
    tr_ref r;
    std::string huge(s.capacity + 1, 'h');
    EXPECT_EQ(tr_put(rt, huge.data(), huge.size(), &r), TR_ENOMEM);
    EXPECT_NE(std::string(tr_last_error()).find("can never fit"), std::string::npos)
        << tr_last_error();
    /* fragment it with mixed sizes (a full store spills: see the spill tests) */
    std::vector<tr_ref> held;
    for (int i = 0; i < 40; i++) {
        std::string chunk((size_t)(1 + i % 7) << 18, 'c');
        ASSERT_EQ(tr_put(rt, chunk.data(), chunk.size(), &r), 0) << tr_last_error();
        held.push_back(r);
    }
    for (size_t i = 0; i < held.size(); i += 2)
        tr_ref_release(rt, held[i]);
    for (size_t i = 1; i < held.size(); i += 2)
        tr_ref_release(rt, held[i]);
    expect_empty();
    /* after all that, the biggest object fits again (free blocks merged) */
    std::string max(s.capacity, 'm');
    ASSERT_EQ(tr_put(rt, max.data(), max.size(), &r), 0) << tr_last_error();
    tr_ref_release(rt, r);
    expect_empty();
}

TEST_F(ObjectsTest, CreateThenSeal) {
    tr_ref r;
    void *buf;
    ASSERT_EQ(tr_object_create(rt, 4096, &r, &buf), 0);
    /* not visible yet: a get waits, then times out */
    EXPECT_EQ(tr_get(rt, r, 20, nullptr, nullptr), TR_ETIMEDOUT);
    uint8_t ready = 9;
    size_t n = 9;
    ASSERT_EQ(tr_wait(rt, &r, 1, 1, 10, &ready, &n), 0);
    EXPECT_EQ(n, 0u);
    memset(buf, 0x5c, 4096);
    /* another process waiting for it sees it once sealed */
    tr_actor_id a = make();
    std::string arg((const char *)&r, sizeof r);
    tr_ref sum_ref;
    ASSERT_EQ(tr_call(rt, a, "sum", arg.data(), arg.size(), &sum_ref), 0);
    EXPECT_EQ(tr_get(rt, sum_ref, 100, nullptr, nullptr), TR_ETIMEDOUT) << "done before the seal";
    ASSERT_EQ(tr_object_seal(rt, r), 0);
    EXPECT_EQ(tr_object_seal(rt, r), TR_ESTATE);
    const void *d;
    size_t len;
    ASSERT_EQ(tr_get(rt, sum_ref, 5000, &d, &len), 0) << tr_last_error();
    std::string expect(4096, (char)0x5c);
    EXPECT_EQ(*(const uint64_t *)d, checksum(expect.data(), expect.size()));
    tr_ref_release(rt, sum_ref);
    ASSERT_EQ(tr_wait(rt, &r, 1, 1, 0, &ready, &n), 0);
    EXPECT_EQ(n, 1u);
    tr_ref_release(rt, r);
    expect_empty();
}

TEST_F(ObjectsTest, ManyProcessesPutAndGetWithIntegrity) {
    const int kActors = 4, kObjects = 40;
    std::vector<tr_actor_id> actors;
    for (int i = 0; i < kActors; i++)
        actors.push_back(make());
    /* each actor puts objects; the driver and another actor check every byte */
    std::vector<tr_ref> calls;
    std::vector<std::pair<uint64_t, uint64_t>> spec;
    for (int i = 0; i < kObjects; i++) {
        uint64_t args[2] = {(uint64_t)(1 + (i * 7919) % 300000), (uint64_t)i};
        tr_ref c;
        ASSERT_EQ(tr_call(rt, actors[i % kActors], "put", args, sizeof args, &c), 0);
        calls.push_back(c);
        spec.push_back({args[0], args[1]});
    }
    std::vector<tr_ref> objs;
    for (int i = 0; i < kObjects; i++) {
        const void *d;
        size_t n;
        ASSERT_EQ(tr_get(rt, calls[i], 10000, &d, &n), 0) << tr_last_error();
        ASSERT_EQ(n, sizeof(tr_ref));
        tr_ref o;
        memcpy(&o, d, sizeof o);
        objs.push_back(o);
        tr_ref_release(rt, calls[i]);
        std::string want = pattern(spec[i].first, spec[i].second);
        ASSERT_EQ(tr_get(rt, o, 5000, &d, &n), 0) << tr_last_error();
        ASSERT_EQ(n, want.size());
        EXPECT_EQ(memcmp(d, want.data(), n), 0) << "object " << i;
    }
    /* a different actor reads each object and checksums it */
    for (int i = 0; i < kObjects; i++) {
        std::string arg((const char *)&objs[i], sizeof objs[i]);
        uint64_t got = 0;
        std::string out;
        ASSERT_EQ(call_str(rt, actors[(i + 1) % kActors], "sum", arg, &out), 0) << tr_last_error();
        memcpy(&got, out.data(), 8);
        std::string want = pattern(spec[i].first, spec[i].second);
        EXPECT_EQ(got, checksum(want.data(), want.size())) << i;
    }
    /* the putters still hold their objects: killing them drops those holds */
    for (auto &o : objs)
        EXPECT_EQ(tr_ref_release(rt, o), 0);
    EXPECT_GT(stats().n_objects, 0u);
    for (auto &a : actors)
        ASSERT_EQ(tr_actor_kill(rt, a, 1), 0);
    expect_empty();
}

TEST_F(ObjectsTest, CrashedWorkersObjectsAreReclaimed) {
    tr_actor_id a = make();
    uint64_t args[2] = {1 << 20, 7};
    std::string out;
    for (int i = 0; i < 5; i++)
        ASSERT_EQ(call_str(rt, a, "put", std::string((const char *)args, 16), &out), 0);
    EXPECT_EQ(stats().n_objects, 5u);
    EXPECT_EQ(call_str(rt, a, "crash", "", &out), TR_EACTOR_DIED);
    expect_empty();
}

TEST_F(ObjectsTest, WaitMixesObjectAndCallRefs) {
    tr_actor_id a = make();
    tr_ref refs[3];
    ASSERT_EQ(tr_put(rt, "abc", 3, &refs[0]), 0);
    int64_t ms = 200;
    ASSERT_EQ(tr_call(rt, a, "sleep_ms", &ms, sizeof ms, &refs[1]), 0);
    void *buf;
    ASSERT_EQ(tr_object_create(rt, 8, &refs[2], &buf), 0);
    uint8_t ready[3];
    size_t n = 0;
    ASSERT_EQ(tr_wait(rt, refs, 3, 1, 5000, ready, &n), 0);
    EXPECT_GE(n, 1u);
    EXPECT_EQ(ready[0], 1);
    EXPECT_EQ(ready[2], 0);
    ASSERT_EQ(tr_wait(rt, refs, 3, 2, 5000, ready, &n), 0);
    EXPECT_EQ(n, 2u);
    EXPECT_EQ(ready[1], 1);
    ASSERT_EQ(tr_object_seal(rt, refs[2]), 0);
    ASSERT_EQ(tr_wait(rt, refs, 3, 3, 5000, ready, &n), 0);
    EXPECT_EQ(n, 3u);
    for (auto &r : refs)
        tr_ref_release(rt, r);
    expect_empty();
}

TEST_F(ObjectsTest, RefsAsCallArgumentsAreResolvedZeroCopy) {
    tr_actor_id a = make();
    std::string d1 = pattern(300000, 11), d2 = pattern(17, 12);
    tr_ref refs[2];
    ASSERT_EQ(tr_put(rt, d1.data(), d1.size(), &refs[0]), 0);
    ASSERT_EQ(tr_put(rt, d2.data(), d2.size(), &refs[1]), 0);
    tr_ref call;
    ASSERT_EQ(tr_call_refs(rt, a, "sum_args", nullptr, 0, refs, 2, &call), 0) << tr_last_error();
    /* the caller may let go at once: the call keeps its arguments alive */
    ASSERT_EQ(tr_ref_release(rt, refs[0]), 0);
    ASSERT_EQ(tr_ref_release(rt, refs[1]), 0);
    const void *out;
    size_t n;
    ASSERT_EQ(tr_get(rt, call, 10000, &out, &n), 0) << tr_last_error();
    ASSERT_EQ(n, 16u);
    EXPECT_EQ(((const uint64_t *)out)[0], checksum(d1.data(), d1.size()));
    EXPECT_EQ(((const uint64_t *)out)[1], checksum(d2.data(), d2.size()));
    tr_ref_release(rt, call);
    expect_empty();
    /* an argument not sealed yet: the worker waits for the seal, and reads what was
     * written by then */
    void *buf;
    ASSERT_EQ(tr_object_create(rt, 1000, &refs[0], &buf), 0);
    ASSERT_EQ(tr_call_refs(rt, a, "sum_args", nullptr, 0, refs, 1, &call), 0);
    EXPECT_EQ(tr_get(rt, call, 100, &out, &n), TR_ETIMEDOUT) << "done before the seal";
    memset(buf, 7, 1000);
    ASSERT_EQ(tr_object_seal(rt, refs[0]), 0);
    ASSERT_EQ(tr_get(rt, call, 10000, &out, &n), 0) << tr_last_error();
    std::string sevens(1000, (char)7);
    EXPECT_EQ(((const uint64_t *)out)[0], checksum(sevens.data(), sevens.size()));
    tr_ref_release(rt, call);
    tr_ref_release(rt, refs[0]);
    expect_empty();
    /* bad arguments: a ref that is neither an object nor a live call result of ours */
    tr_ref not_obj = call;
    not_obj.b[15] &= 0x7f;
    EXPECT_EQ(tr_call_refs(rt, a, "sum_args", nullptr, 0, &not_obj, 1, &call), TR_ESTALE);
    tr_ref gone = refs[0];
    EXPECT_EQ(tr_call_refs(rt, a, "sum_args", nullptr, 0, &gone, 1, &call), TR_ENOTFOUND);
    EXPECT_EQ(tr_call_refs(rt, a, "sum_args", nullptr, 0, nullptr, 1, &call), TR_EINVAL);
}

/* A call's result passed to another call (Ray's b.f.remote(a.g.remote())): the runtime
 * waits for it and passes it on - a small result by value, a large one as the same object
 * in the store - and the consuming call is sent only then, in order with the calls made
 * after it. */
TEST_F(ObjectsTest, CallResultsAsArguments) {
    tr_actor_id a = make(), b = make();
    /* small: not done yet when passed on */
    int64_t ms = 150, one = 1, v;
    tr_ref r1, r2, r3;
    ASSERT_EQ(tr_call(rt, a, "sleep_ms", &ms, sizeof ms, &r1), 0);
    ASSERT_EQ(tr_call_refs(rt, b, "add", nullptr, 0, &r1, 1, &r2), 0) << tr_last_error();
    ASSERT_EQ(tr_call(rt, b, "add", &one, sizeof one, &r3), 0);
    const void *d;
    size_t n;
    ASSERT_EQ(tr_get(rt, r3, 10000, &d, &n), 0) << tr_last_error();
    memcpy(&v, d, 8);
    EXPECT_EQ(v, 151) << "the call made after the one waiting for r1 ran first";
    ASSERT_EQ(tr_get(rt, r2, 10000, &d, &n), 0) << tr_last_error();
    memcpy(&v, d, 8);
    EXPECT_EQ(v, 150);
    /* the same result twice, and to the actor that made it */
    tr_ref r4;
    tr_ref twice[2] = {r1, r1};
    ASSERT_EQ(tr_call_refs(rt, a, "add", nullptr, 0, twice, 2, &r4), 0);
    ASSERT_EQ(tr_get(rt, r4, 10000, &d, &n), 0) << tr_last_error();
    memcpy(&v, d, 8);
    EXPECT_EQ(v, 300);
    for (tr_ref r : {r1, r2, r3, r4})
        ASSERT_EQ(tr_ref_release(rt, r), 0);

    /* large: the consumer reads the producer's object in place, no copy */
    int64_t size = 300000;
    tr_ref big, sum;
    ASSERT_EQ(tr_call(rt, a, "big", &size, sizeof size, &big), 0);
    ASSERT_EQ(tr_call_refs(rt, b, "sum_args", nullptr, 0, &big, 1, &sum), 0);
    ASSERT_EQ(tr_get(rt, sum, 10000, &d, &n), 0) << tr_last_error();
    std::string bs((size_t)size, 'b');
    ASSERT_EQ(n, 8u);
    EXPECT_EQ(*(const uint64_t *)d, checksum(bs.data(), bs.size()));
    EXPECT_EQ(stats().n_objects, 1u) << "the argument was copied";
    EXPECT_EQ(stats().bytes_objects, (uint64_t)size);
    tr_ref_release(rt, sum);
    tr_ref_release(rt, big);
    expect_empty();

    /* mixed with objects, released at once, and a chain: x -> y -> z */
    std::string blob = pattern(5000, 3);
    tr_ref obj, x, y, z;
    ASSERT_EQ(tr_put(rt, blob.data(), blob.size(), &obj), 0);
    ASSERT_EQ(tr_call(rt, a, "big", &size, sizeof size, &x), 0);
    tr_ref mix[3] = {obj, x, x};
    ASSERT_EQ(tr_call_refs(rt, b, "sum_args", nullptr, 0, mix, 3, &y), 0);
    ASSERT_EQ(tr_ref_release(rt, x), 0); /* the pending call keeps it */
    ASSERT_EQ(tr_ref_release(rt, obj), 0);
    ASSERT_EQ(tr_call_refs(rt, a, "sum_args", nullptr, 0, &y, 1, &z), 0);
    ASSERT_EQ(tr_get(rt, z, 10000, &d, &n), 0) << tr_last_error();
    uint64_t want[3] = {checksum(blob.data(), blob.size()), checksum(bs.data(), bs.size()),
                        checksum(bs.data(), bs.size())};
    uint64_t outer = checksum(want, sizeof want);
    ASSERT_EQ(n, 8u);
    EXPECT_EQ(*(const uint64_t *)d, outer);
    for (tr_ref r : {y, z})
        ASSERT_EQ(tr_ref_release(rt, r), 0);
    expect_empty();
}

/* Reading a large result back from disk happens outside the lock that every call to the
 * actor takes: here the restore blocks (its spill file is swapped for a FIFO nobody writes
 * yet), and another thread's call to the same actor must still go through. */
TEST(ObjectsRestore, AResultBeingReadBackDoesNotStallOtherCalls) {
    char tmpl[] = "/tmp/troupe-restore-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    std::string dir = tmpl;
    tr_config *cfg = test_config_with({{"spill_dir", tmpl}});
    tr_runtime *rt;
    ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
    tr_config_destroy(cfg);
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "Counter", nullptr, "r", 1, &a), 0);
    int64_t size = 40 << 20, v;
    ASSERT_EQ(call_i64(rt, a, "get", 0, &v), 0); /* connected */
    tr_ref big;
    ASSERT_EQ(tr_call(rt, a, "big", &size, sizeof size, &big), 0);
    /* wait for the worker's result in the store, without reading the reply */
    tr_store_stats st = TR_STORE_STATS_INIT;
    for (int i = 0; i < 2000 && st.bytes_objects != (uint64_t)size; i++) {
        if (i) usleep(5000);
        ASSERT_EQ(tr_object_stats(rt, &st), 0);
    }
    ASSERT_EQ(st.bytes_objects, (uint64_t)size);
    /* a put that needs the room spills the unread result */
    tr_ref filler;
    void *buf;
    ASSERT_EQ(tr_object_create(rt, (size_t)size, &filler, &buf), 0) << tr_last_error();
    ASSERT_EQ(tr_object_stats(rt, &st), 0);
    ASSERT_EQ(st.spills, 1u);
    ASSERT_EQ(tr_ref_release(rt, filler), 0);
    /* the spill file: <spill_dir>/spill-XXXXXX/o-<id> */
    std::string sub, spilled;
    DIR *d = opendir(dir.c_str());
    ASSERT_NE(d, nullptr);
    while (struct dirent *e = readdir(d))
        if (strncmp(e->d_name, "spill-", 6) == 0) sub = dir + "/" + e->d_name;
    closedir(d);
    d = opendir(sub.c_str());
    ASSERT_NE(d, nullptr) << sub;
    while (struct dirent *e = readdir(d))
        if (strncmp(e->d_name, "o-", 2) == 0) spilled = sub + "/" + e->d_name;
    closedir(d);
    ASSERT_FALSE(spilled.empty());
    ASSERT_EQ(unlink(spilled.c_str()), 0);
    ASSERT_EQ(mkfifo(spilled.c_str(), 0600), 0);
    /* what another thread's call will pass: an object, pinned as the call goes out and
     * unpinned as it completes, both under the actor client's lock */
    tr_ref small;
    ASSERT_EQ(tr_put(rt, "abc", 3, &small), 0);
    /* the reader: tr_get reads the reply, then the result back from "disk" */
    int get_rc = -99;
    std::string got_ok;
    std::thread reader([&] {
        const void *d;
        size_t n;
        get_rc = tr_get(rt, big, 60000, &d, &n);
        if (get_rc == 0)
            got_ok =
                n == (size_t)size && ((const char *)d)[0] == 'b' && ((const char *)d)[n - 1] == 'b'
                    ? "yes"
                    : "wrong bytes";
    });
    /* once it has the FIFO open it is inside the restore, reading */
    int wfd = -1;
    for (int i = 0; i < 2000 && wfd < 0; i++) {
        wfd = open(spilled.c_str(), O_WRONLY | O_NONBLOCK);
        if (wfd < 0) usleep(5000);
    }
    ASSERT_GE(wfd, 0) << "the reader never started the restore";
    std::atomic<bool> called{false};
    int call_rc = -99;
    std::thread caller([&] {
        tr_ref c;
        call_rc = tr_call_refs(rt, a, "sum_args", nullptr, 0, &small, 1, &c);
        if (call_rc == 0) call_rc = tr_get(rt, c, 20000, nullptr, nullptr);
        if (call_rc == 0) call_rc = tr_ref_release(rt, c);
        called = true;
    });
    auto t0 = Clock::now();
    while (!called && Clock::now() - t0 < std::chrono::seconds(10))
        usleep(2000);
    bool went_through = called;
    /* now let the restore finish: the spilled bytes are 'b's */
    fcntl(wfd, F_SETFL, 0);
    std::string chunk(1 << 20, 'b');
    for (int64_t left = size; left > 0; left -= (int64_t)chunk.size())
        ASSERT_EQ(write(wfd, chunk.data(), chunk.size()), (ssize_t)chunk.size());
    close(wfd);
    reader.join();
    caller.join();
    EXPECT_TRUE(went_through) << "a call to the actor waited for another thread's restore";
    EXPECT_EQ(call_rc, 0) << tr_last_error();
    EXPECT_EQ(get_rc, 0);
    EXPECT_EQ(got_ok, "yes");
    tr_ref_release(rt, small);
    tr_ref_release(rt, big);
    tr_shutdown(rt);
    std::string rm = "rm -rf " + dir;
    EXPECT_EQ(system(rm.c_str()), 0);
}

/* A failed producing call fails its consumers with its code and message; the consuming
 * method never runs, and its actor lives on. */
TEST_F(ObjectsTest, CallResultArgumentsPropagateErrors) {
    tr_actor_id a = make(), b = make();
    tr_ref bad, use, crash, use2;
    ASSERT_EQ(tr_call(rt, a, "fail", "nope", 4, &bad), 0);
    ASSERT_EQ(tr_call_refs(rt, b, "add", nullptr, 0, &bad, 1, &use), 0);
    EXPECT_EQ(tr_get(rt, use, 10000, nullptr, nullptr), TR_ETASK);
    EXPECT_NE(std::string(tr_last_error()).find("failing on purpose: nope"), std::string::npos)
        << tr_last_error();
    EXPECT_NE(std::string(tr_last_error()).find("argument 0"), std::string::npos);
    ASSERT_EQ(tr_call(rt, a, "crash", nullptr, 0, &crash), 0);
    ASSERT_EQ(tr_call_refs(rt, b, "add", nullptr, 0, &crash, 1, &use2), 0);
    EXPECT_EQ(tr_get(rt, use2, 10000, nullptr, nullptr), TR_EACTOR_DIED) << tr_last_error();
    int64_t v = -1;
    ASSERT_EQ(call_i64(rt, b, "get", 0, &v), 0);
    EXPECT_EQ(v, 0) << "b's add ran with a failed argument";
    for (tr_ref r : {bad, use, crash, use2})
        ASSERT_EQ(tr_ref_release(rt, r), 0);
    /* a released or foreign call ref is refused at once */
    EXPECT_EQ(tr_call_refs(rt, b, "add", nullptr, 0, &use, 1, &use2), TR_ESTALE);
    /* a dead consumer: calls held for their arguments fail too */
    int64_t ms = 200;
    tr_ref slow, held;
    ASSERT_EQ(tr_call(rt, b, "sleep_ms", &ms, sizeof ms, &slow), 0);
    tr_actor_id c = make();
    ASSERT_EQ(tr_call_refs(rt, c, "add", nullptr, 0, &slow, 1, &held), 0);
    ASSERT_EQ(tr_actor_kill(rt, c, 1), 0);
    EXPECT_EQ(tr_get(rt, held, 10000, nullptr, nullptr), TR_EACTOR_DIED) << tr_last_error();
    EXPECT_EQ(tr_get(rt, slow, 10000, nullptr, nullptr), 0);
    tr_ref_release(rt, slow);
    tr_ref_release(rt, held);
    /* tr_wait sees held calls complete */
    tr_ref p, q;
    ASSERT_EQ(tr_call(rt, a, "sleep_ms", &ms, sizeof ms, &p), 0);
    ASSERT_EQ(tr_call_refs(rt, b, "add", nullptr, 0, &p, 1, &q), 0);
    uint8_t ready[2];
    size_t nr = 0;
    ASSERT_EQ(tr_wait(rt, &q, 1, 1, 10000, ready, &nr), 0);
    EXPECT_EQ(nr, 1u);
    ASSERT_EQ(tr_wait(rt, &p, 1, 1, 0, ready, &nr), 0);
    EXPECT_EQ(nr, 1u) << "a consumer finished before its producer";
    tr_ref_release(rt, p);
    tr_ref_release(rt, q);
}

TEST_F(ObjectsTest, LargeResultsTravelThroughTheStore) {
    tr_actor_id a = make();
    int64_t size = 2 << 20;
    tr_ref call;
    ASSERT_EQ(tr_call(rt, a, "big", &size, sizeof size, &call), 0);
    const void *out;
    size_t n;
    ASSERT_EQ(tr_get(rt, call, 10000, &out, &n), 0) << tr_last_error();
    ASSERT_EQ(n, (size_t)size);
    std::string want((size_t)size, 'b');
    EXPECT_EQ(memcmp(out, want.data(), n), 0);
    tr_store_stats st = stats();
    EXPECT_EQ(st.n_objects, 1u) << "the result is an object in the store";
    EXPECT_EQ(st.bytes_objects, (uint64_t)size);
    const void *again;
    ASSERT_EQ(tr_get(rt, call, 0, &again, &n), 0);
    EXPECT_EQ(again, out);
    tr_ref_release(rt, call);
    expect_empty(); /* the worker handed its hold over: nothing is left */
    /* small results stay inline */
    size = 1000;
    ASSERT_EQ(tr_call(rt, a, "big", &size, sizeof size, &call), 0);
    ASSERT_EQ(tr_get(rt, call, 10000, &out, &n), 0);
    EXPECT_EQ(n, 1000u);
    EXPECT_EQ(stats().n_objects, 0u);
    tr_ref_release(rt, call);
    /* released before it arrives: freed on arrival */
    size = 1 << 20;
    ASSERT_EQ(tr_call(rt, a, "big", &size, sizeof size, &call), 0);
    tr_ref_release(rt, call);
    int64_t v;
    ASSERT_EQ(call_i64(rt, a, "get", 0, &v), 0); /* the big reply came before this one */
    expect_empty();
}

/* Files in the node's spill directory (<session>/spill-*). */
int spill_files(tr_runtime *rt) {
    std::string addr = tr_runtime_address(rt);
    std::string session = addr.substr(0, addr.rfind('/'));
    int n = 0;
    DIR *d = opendir(session.c_str());
    if (!d) return -1;
    while (struct dirent *e = readdir(d)) {
        if (strncmp(e->d_name, "spill-", 6) != 0) continue;
        std::string sub = session + "/" + e->d_name;
        DIR *s = opendir(sub.c_str());
        while (s && readdir(s))
            n++;
        if (s) closedir(s);
        n -= 2; /* . and .. */
    }
    closedir(d);
    return n;
}

TEST_F(ObjectsTest, SpillAndRestoreKeepEveryByte) {
    const int kObjects = 24;
    const size_t kSize = 8 << 20; /* 192 MiB through a 64 MiB store */
    std::vector<tr_ref> refs(kObjects);
    for (int i = 0; i < kObjects; i++) {
        std::string d = pattern(kSize, 100 + i);
        ASSERT_EQ(tr_put(rt, d.data(), d.size(), &refs[i]), 0) << i << ": " << tr_last_error();
    }
    tr_store_stats st = stats();
    EXPECT_EQ(st.n_objects, (uint64_t)kObjects);
    EXPECT_GT(st.spills, 0u);
    EXPECT_GT(st.bytes_spilled, 0u);
    EXPECT_LE(st.bytes_objects, st.capacity);
    EXPECT_GT(spill_files(rt), 0);
    /* another process reads a spilled one (the first put is the least recently used) */
    tr_actor_id a = make();
    std::string out, arg((const char *)&refs[0], sizeof refs[0]);
    ASSERT_EQ(call_str(rt, a, "sum", arg, &out), 0) << tr_last_error();
    std::string want = pattern(kSize, 100);
    EXPECT_EQ(*(const uint64_t *)out.data(), checksum(want.data(), want.size()));
    /* and here, every one of them, in reverse */
    for (int i = kObjects - 1; i >= 0; i--) {
        const void *v;
        size_t n;
        ASSERT_EQ(tr_get(rt, refs[i], 5000, &v, &n), 0) << i << ": " << tr_last_error();
        want = pattern(kSize, 100 + i);
        ASSERT_EQ(n, kSize);
        EXPECT_EQ(checksum(v, n), checksum(want.data(), want.size())) << "object " << i;
        ASSERT_EQ(tr_ref_release(rt, refs[i]), 0); /* viewed objects stay; release frees */
    }
    EXPECT_GT(stats().restores, 0u);
    expect_empty();
    EXPECT_EQ(spill_files(rt), 0);
}

TEST_F(ObjectsTest, SealingASpilledObjectAgainIsRefused) {
    tr_ref first;
    void *buf;
    ASSERT_EQ(tr_object_create(rt, 8 << 20, &first, &buf), 0);
    memset(buf, 0x42, 8 << 20);
    ASSERT_EQ(tr_object_seal(rt, first), 0);
    std::vector<tr_ref> more(10); /* push `first` out to disk */
    std::string chunk(8 << 20, 'm');
    for (auto &r : more)
        ASSERT_EQ(tr_put(rt, chunk.data(), chunk.size(), &r), 0);
    ASSERT_GT(stats().spills, 0u);
    EXPECT_EQ(tr_object_seal(rt, first), TR_ESTATE);
    const void *v;
    size_t n;
    ASSERT_EQ(tr_get(rt, first, 5000, &v, &n), 0) << tr_last_error();
    std::string want(8 << 20, 0x42);
    EXPECT_EQ(checksum(v, n), checksum(want.data(), want.size()));
    tr_ref_release(rt, first);
    for (auto &r : more)
        tr_ref_release(rt, r);
    expect_empty();
    EXPECT_EQ(spill_files(rt), 0);
}

TEST_F(ObjectsTest, ViewedObjectsAreNeverSpilled) {
    std::vector<tr_ref> refs;
    std::string chunk(8 << 20, 'v');
    tr_ref r;
    int rc;
    /* view everything we put: once the store is full of views, a put must fail */
    while ((rc = tr_put(rt, chunk.data(), chunk.size(), &r)) == 0) {
        refs.push_back(r);
        const void *v;
        size_t n;
        ASSERT_EQ(tr_get(rt, r, 0, &v, &n), 0);
        ASSERT_LT(refs.size(), 100u);
    }
    EXPECT_EQ(rc, TR_ENOMEM);
    EXPECT_NE(std::string(tr_last_error()).find("viewed"), std::string::npos) << tr_last_error();
    EXPECT_EQ(stats().spills, 0u);
    for (auto &x : refs)
        tr_ref_release(rt, x);
    expect_empty();
}

TEST_F(ObjectsTest, DeadPuttersSpilledObjectsAreReclaimed) {
    tr_actor_id a = make();
    uint64_t args[2] = {8 << 20, 3};
    std::string out;
    for (int i = 0; i < 12; i++)
        ASSERT_EQ(call_str(rt, a, "put", std::string((const char *)args, 16), &out), 0)
            << tr_last_error();
    EXPECT_GT(stats().spills, 0u);
    EXPECT_EQ(call_str(rt, a, "crash", "", &out), TR_EACTOR_DIED);
    expect_empty();
    EXPECT_EQ(spill_files(rt), 0);
}

/* The driver's read-write mapping of the object store's segment (every attached process
 * has one), from /proc/self/maps; NULL if none. */
char *store_mapping() {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return nullptr;
    char line[1024], perms[8];
    unsigned long lo, hi, off;
    char *found = nullptr;
    while (!found && fgets(line, sizeof line, f))
        if (sscanf(line, "%lx-%lx %7s %lx", &lo, &hi, perms, &off) == 4 &&
            strstr(line, "memfd:troupe-objects") && strcmp(perms, "rw-s") == 0 && off == 0)
            found = (char *)lo;
    fclose(f);
    return found;
}

/* Names in a directory, . and .. aside. */
std::vector<std::string> dir_names(const std::string &dir) {
    std::vector<std::string> names;
    if (DIR *d = opendir(dir.c_str())) {
        while (struct dirent *e = readdir(d))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names.push_back(e->d_name);
        closedir(d);
    }
    return names;
}

/* Every process that attaches may write the whole segment, its header included. Here one
 * (the driver itself) rewrites, once all have attached, where the header says the table
 * and the data are, and points the spill directory (wherever the header holds it: a
 * hostile client need not know the layout) at a directory of its own. Each process works
 * through the geometry it copied when it attached: the worker and the node go on serving
 * - puts, spills, restores, reads, a dead worker's reclaim - and no spill file is made or
 * removed outside the node's spill directory. (Before, the next put dereferenced the data
 * region at 2^46 bytes past the header.) */
TEST_F(ObjectsTest, AClientRewritingTheSharedHeaderMisleadsNoOne) {
    tr_actor_id a = make();
    std::string out, mine = pattern(1 << 20, 77);
    tr_ref before;
    ASSERT_EQ(tr_put(rt, mine.data(), mine.size(), &before), 0) << tr_last_error();
    uint64_t args[2] = {4096, 1};
    ASSERT_EQ(call_str(rt, a, "put", std::string((const char *)args, 16), &out), 0)
        << tr_last_error(); /* the worker has attached */
    char tmpl[] = "/tmp/troupe-decoy-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    std::string decoy = tmpl;
    int fd = open((decoy + "/keep").c_str(), O_WRONLY | O_CREAT, 0600);
    ASSERT_GE(fd, 0);
    close(fd);
    std::string addr = tr_runtime_address(rt), spill;
    std::string session = addr.substr(0, addr.rfind('/'));
    for (auto &n : dir_names(session))
        if (n.compare(0, 6, "spill-") == 0) spill = session + "/" + n;
    ASSERT_FALSE(spill.empty());

    char *seg = store_mapping();
    ASSERT_NE(seg, nullptr);
    tr__seg_hdr *h = (tr__seg_hdr *)seg;
    h->table_off = 1ull << 45;
    h->table_cap = 1ull << 40;
    h->data_off = 1ull << 46;
    h->data_size = 1ull << 46;
    for (size_t i = 0; i + spill.size() < sizeof *h; i++)
        if (memcmp(seg + i, spill.c_str(), spill.size() + 1) == 0)
            memcpy(seg + i, decoy.c_str(), decoy.size() + 1);

    /* the worker puts 96 MiB through the 64 MiB store: it spills */
    std::vector<tr_ref> objs;
    for (int i = 0; i < 12; i++) {
        uint64_t big[2] = {8 << 20, (uint64_t)(200 + i)};
        ASSERT_EQ(call_str(rt, a, "put", std::string((const char *)big, 16), &out), 0)
            << i << ": " << tr_last_error();
        ASSERT_EQ(out.size(), sizeof(tr_ref));
        tr_ref r;
        memcpy(&r, out.data(), sizeof r);
        objs.push_back(r);
    }
    tr_store_stats st = stats();
    EXPECT_GT(st.spills, 0u);
    EXPECT_GT(spill_files(rt), 0);
    EXPECT_EQ(dir_names(decoy), std::vector<std::string>{"keep"});
    /* here, every byte of each (the spilled ones restored by this process) */
    for (int i = 0; i < 12; i++) {
        const void *v;
        size_t n;
        ASSERT_EQ(tr_get(rt, objs[i], 5000, &v, &n), 0) << i << ": " << tr_last_error();
        std::string want = pattern(8 << 20, 200 + i);
        ASSERT_EQ(n, want.size());
        EXPECT_EQ(checksum(v, n), checksum(want.data(), want.size())) << "object " << i;
        ASSERT_EQ(tr_ref_release(rt, objs[i]), 0);
    }
    /* there, ours: the first put, spilled long since */
    std::string arg((const char *)&before, sizeof before);
    ASSERT_EQ(call_str(rt, a, "sum", arg, &out), 0) << tr_last_error();
    ASSERT_EQ(out.size(), 8u);
    EXPECT_EQ(*(const uint64_t *)out.data(), checksum(mine.data(), mine.size()));
    EXPECT_GT(stats().restores, 0u);
    EXPECT_EQ(stats().capacity, st.capacity);
    /* the worker dies holding its objects, some of them on disk: the node reclaims them */
    ASSERT_EQ(tr_ref_release(rt, before), 0);
    ASSERT_EQ(tr_actor_kill(rt, a, 1), 0);
    expect_empty();
    EXPECT_EQ(spill_files(rt), 0);
    EXPECT_EQ(dir_names(decoy), std::vector<std::string>{"keep"});
    unlink((decoy + "/keep").c_str());
    rmdir(decoy.c_str());
}

std::vector<tr_ref> start_objar(tr_runtime *rt, const std::vector<tr_actor_id> &actors,
                                ObjarArgs base) {
    std::vector<tr_ref> calls;
    for (size_t r = 0; r < actors.size(); r++) {
        ObjarArgs a = base;
        a.rank = (int32_t)r;
        tr_ref c;
        EXPECT_EQ(tr_call(rt, actors[r], "objar", &a, sizeof a, &c), 0);
        calls.push_back(c);
    }
    return calls;
}

TEST_F(ObjectsTest, ObjectStoreAllreduceEveryRankGetsTheSameAnswer) {
    const int kWorld = 4;
    std::vector<tr_actor_id> actors;
    for (int i = 0; i < kWorld; i++)
        actors.push_back(make());
    struct Case {
        tr_dtype dtype;
        tr_redop op;
        uint64_t count;
    } cases[] = {{TR_FLOAT32, TR_SUM, 1},      {TR_FLOAT32, TR_SUM, 1001}, {TR_INT32, TR_MAX, 333},
                 {TR_INT32, TR_MIN, 64},       {TR_FLOAT32, TR_AVG, 7},    {TR_INT32, TR_PROD, 5},
                 {TR_FLOAT32, TR_SUM, 300000}, {TR_FLOAT32, TR_SUM, 0}};
    int k = 0;
    for (auto &c : cases) {
        ObjarArgs a = {kWorld, 0, 3, (int32_t)c.dtype, (int32_t)c.op, 10000, c.count, {0}};
        snprintf(a.name, sizeof a.name, "t%d", k++);
        auto calls = start_objar(rt, actors, a);
        for (int r = 0; r < kWorld; r++) {
            const void *d;
            size_t n;
            ASSERT_EQ(tr_get(rt, calls[r], 20000, &d, &n), 0) << tr_last_error();
            ASSERT_EQ(n, c.count * 4);
            for (size_t i = 0; i < c.count; i++) {
                double want = objar_value(0, 2, i);
                for (int q = 1; q < kWorld; q++) {
                    double v = objar_value(q, 2, i);
                    if (c.op == TR_SUM || c.op == TR_AVG) want += v;
                    if (c.op == TR_PROD) want *= v;
                    if (c.op == TR_MIN) want = std::min(want, v);
                    if (c.op == TR_MAX) want = std::max(want, v);
                }
                if (c.op == TR_AVG) want /= kWorld;
                double got =
                    c.dtype == TR_FLOAT32 ? ((const float *)d)[i] : ((const int32_t *)d)[i];
                ASSERT_NEAR(got, want, 1e-3) << "case " << k << " rank " << r << " i " << i;
            }
            tr_ref_release(rt, calls[r]);
        }
    }
    /* keys of old rounds are deleted as rounds go by: at most 2 rounds' worth remain */
    char *json;
    ASSERT_EQ(tr_node_status(rt, &json), 0);
    std::string st(json);
    tr_free(json);
    size_t at = st.find("\"kv_keys\":");
    ASSERT_NE(at, std::string::npos);
    EXPECT_LE(atoi(st.c_str() + at + 10), (int)(sizeof cases / sizeof cases[0]) * 2 * 2 * kWorld);
    expect_empty();
}

TEST_F(ObjectsTest, ObjectStoreAllreduceFailuresAreReported) {
    std::vector<tr_actor_id> actors = {make(), make()};
    /* a missing rank: the others time out */
    ObjarArgs a = {3, 0, 1, TR_FLOAT32, TR_SUM, 300, 10, "missing"};
    auto calls = start_objar(rt, actors, a);
    for (auto &c : calls) {
        EXPECT_EQ(tr_get(rt, c, 10000, nullptr, nullptr), TR_ETASK);
        EXPECT_NE(std::string(tr_last_error()).find("TR_ETIMEDOUT"), std::string::npos)
            << tr_last_error();
        tr_ref_release(rt, c);
    }
    /* ranks disagreeing on the count */
    ObjarArgs b = {2, 0, 1, TR_FLOAT32, TR_SUM, 2000, 10, "mismatch"};
    tr_ref c0, c1;
    ASSERT_EQ(tr_call(rt, actors[0], "objar", &b, sizeof b, &c0), 0);
    b.rank = 1;
    b.count = 12;
    ASSERT_EQ(tr_call(rt, actors[1], "objar", &b, sizeof b, &c1), 0);
    int rc0 = tr_get(rt, c0, 10000, nullptr, nullptr);
    std::string m0 = tr_last_error();
    int rc1 = tr_get(rt, c1, 10000, nullptr, nullptr);
    std::string m1 = tr_last_error();
    EXPECT_EQ(rc0, TR_ETASK);
    EXPECT_EQ(rc1, TR_ETASK);
    EXPECT_NE((m0 + m1).find("must match"), std::string::npos) << m0 << " / " << m1;
    tr_ref_release(rt, c0);
    tr_ref_release(rt, c1);
    /* bad arguments, in this process */
    float x = 1;
    EXPECT_EQ(tr_object_allreduce(rt, "", 0, 1, 0, &x, 1, TR_FLOAT32, TR_SUM, 100), TR_EINVAL);
    EXPECT_EQ(tr_object_allreduce(rt, "n", 1, 1, 0, &x, 1, TR_FLOAT32, TR_SUM, 100), TR_EINVAL);
    EXPECT_EQ(tr_object_allreduce(rt, "n", 0, 1, 0, &x, 1, (tr_dtype)99, TR_SUM, 100), TR_EINVAL);
    EXPECT_EQ(tr_object_allreduce(rt, "n", 0, 1, 0, &x, 1, TR_FLOAT32, (tr_redop)9, 100),
              TR_EINVAL);
    /* a world of one is its own answer */
    ASSERT_EQ(tr_object_allreduce(rt, "solo", 0, 1, 0, &x, 1, TR_FLOAT32, TR_SUM, 100), 0);
    EXPECT_EQ(x, 1.0f);
}

TEST_F(ObjectsTest, ObjectsContainingRefsKeepThemAlive) {
    tr_ref a, b, c;
    ASSERT_EQ(tr_put(rt, "alpha", 5, &a), 0);
    ASSERT_EQ(tr_put(rt, "beta", 4, &b), 0);
    tr_ref inner[2] = {a, b};
    ASSERT_EQ(tr_put_refs(rt, "list", 4, inner, 2, &c), 0) << tr_last_error();
    ASSERT_EQ(tr_ref_release(rt, a), 0);
    ASSERT_EQ(tr_ref_release(rt, b), 0);
    EXPECT_EQ(stats().n_objects, 3u) << "a and b live on inside c";
    tr_ref got[4];
    size_t n = 0;
    ASSERT_EQ(tr_object_refs(rt, c, got, 4, &n), 0);
    ASSERT_EQ(n, 2u);
    EXPECT_EQ(memcmp(&got[0], &a, sizeof a), 0);
    const void *v;
    size_t len;
    ASSERT_EQ(tr_get(rt, c, 0, &v, &len), 0);
    EXPECT_EQ(std::string((const char *)v, len), "list");
    ASSERT_EQ(tr_get(rt, got[1], 0, &v, &len), 0);
    EXPECT_EQ(std::string((const char *)v, len), "beta");
    ASSERT_EQ(tr_ref_release(rt, got[1]), 0);
    /* another process reads through the container too */
    tr_actor_id w = make();
    std::string arg((const char *)&got[0], sizeof got[0]), out;
    ASSERT_EQ(call_str(rt, w, "sum", arg, &out), 0) << tr_last_error();
    EXPECT_EQ(*(const uint64_t *)out.data(), checksum("alpha", 5));
    ASSERT_EQ(tr_ref_release(rt, c), 0); /* the last hold on c: a and b go with it */
    expect_empty();
    /* a contained ref that names nothing: refused, nothing leaks */
    EXPECT_EQ(tr_put_refs(rt, "x", 1, inner, 2, &c), TR_ENOTFOUND);
    expect_empty();
    EXPECT_EQ(tr_object_refs(rt, c, got, 4, &n), TR_ENOTFOUND);
}

TEST_F(ObjectsTest, LongChainsOfContainersAreFreedWithoutRecursion) {
    tr_ref prev;
    ASSERT_EQ(tr_put(rt, "0", 1, &prev), 0);
    for (int i = 1; i < 3000; i++) {
        tr_ref next;
        ASSERT_EQ(tr_put_refs(rt, "n", 1, &prev, 1, &next), 0) << i;
        ASSERT_EQ(tr_ref_release(rt, prev), 0);
        prev = next;
    }
    EXPECT_EQ(stats().n_objects, 3000u);
    ASSERT_EQ(tr_ref_release(rt, prev), 0);
    expect_empty();
}

TEST_F(ObjectsTest, ALargeResultOutlivesItsWorker) {
    tr_actor_id a = make();
    int64_t v;
    ASSERT_EQ(call_i64(rt, a, "get", 0, &v), 0); /* connected: the worker knows us */
    int64_t size = 1 << 20, pid = 0;
    ASSERT_EQ(call_i64(rt, a, "pid", 0, &pid), 0);
    tr_ref big, bye;
    ASSERT_EQ(tr_call(rt, a, "big", &size, sizeof size, &big), 0);
    ASSERT_EQ(tr_call(rt, a, "exit", nullptr, 0, &bye), 0);
    /* do not read yet: the worker replies and exits, and the node reclaims its holds */
    for (int i = 0; i < 2000 && pid_alive((int)pid); i++)
        usleep(5000);
    ASSERT_FALSE(pid_alive((int)pid));
    for (int i = 0; i < 2000 && status_field(rt, "workers_live") != 0; i++)
        usleep(5000);
    ASSERT_EQ(status_field(rt, "workers_live"), 0) << "the node has not reaped the worker";
    const void *d;
    size_t n;
    ASSERT_EQ(tr_get(rt, big, 5000, &d, &n), 0) << tr_last_error();
    EXPECT_EQ(n, (size_t)size);
    EXPECT_EQ(((const char *)d)[n - 1], 'b');
    EXPECT_EQ(tr_get(rt, bye, 5000, nullptr, nullptr), TR_EACTOR_DIED);
    tr_ref_release(rt, big);
    tr_ref_release(rt, bye);
    expect_empty();
}

/* A large result whose caller has gone by the time it is ready: the worker cannot hand it
 * to a process that is no longer attached, so nothing is left in the store. */
TEST_F(ObjectsTest, AResultForACallerThatLeftIsNotLeaked) {
    tr_actor_id a = make();
    int64_t v;
    ASSERT_EQ(call_i64(rt, a, "get", 0, &v), 0);
    char hex[33];
    tr_actor_id_str(a, hex);
    int st = run_self(std::string("CALL_AND_LEAVE=") + tr_runtime_address(rt) + "|" + hex + "|" +
                      std::to_string(1 << 20) + "|300");
    ASSERT_TRUE(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
    /* the worker finishes its 300 ms later; its next call is served after that */
    ASSERT_EQ(call_i64(rt, a, "get", 0, &v, 10000), 0);
    expect_empty();
}

TEST_F(ObjectsTest, ConcurrentPuttersAndGettersInOneProcess) {
    std::vector<std::thread> th;
    std::atomic<int> bad{0};
    for (int t = 0; t < 4; t++) {
        th.emplace_back([&, t] {
            for (int i = 0; i < 500; i++) {
                std::string d = pattern(64 + (i * 31 + t) % 5000, (uint64_t)(t * 1000 + i));
                tr_ref r;
                const void *v;
                size_t n;
                if (tr_put(rt, d.data(), d.size(), &r) || tr_get(rt, r, 0, &v, &n) ||
                    n != d.size() || memcmp(v, d.data(), n) || tr_ref_release(rt, r))
                    bad++;
            }
        });
    }
    for (auto &x : th)
        x.join();
    EXPECT_EQ(bad.load(), 0);
    expect_empty();
}

/* A private mapping is writable and copy-on-write: the object and other views never
 * change; unmapped, the object is held no more. */
TEST_F(ObjectsTest, PrivateMappingsAreWritableCopyOnWrite) {
    std::string data = pattern(300000, 5);
    tr_ref r;
    ASSERT_EQ(tr_put(rt, data.data(), data.size(), &r), 0);
    void *p = nullptr;
    size_t n = 0;
    ASSERT_EQ(tr_object_map_private(rt, r, 1000, &p, &n), 0) << tr_last_error();
    ASSERT_EQ(n, data.size());
    EXPECT_EQ(memcmp(p, data.data(), n), 0);
    memset(p, 0x7e, 100);      /* first page: our own copy now */
    ((char *)p)[n - 1] = 0x11; /* and the last */
    const void *v;
    size_t vn;
    ASSERT_EQ(tr_get(rt, r, 0, &v, &vn), 0);
    EXPECT_EQ(memcmp(v, data.data(), vn), 0) << "the object changed";
    ASSERT_EQ(tr_ref_release(rt, r), 0); /* the mapping still holds it */
    EXPECT_EQ(stats().n_objects, 1u);
    EXPECT_EQ(((unsigned char *)p)[0], 0x7e);
    EXPECT_EQ(((char *)p)[1000], data[1000]);
    ASSERT_EQ(tr_object_unmap_private(rt, r, p, n), 0);
    expect_empty();
    tr_ref none = r; /* a key never made, with our (live) owner bytes */
    none.b[0] ^= 0x5a;
    EXPECT_EQ(tr_object_map_private(rt, none, 0, &p, &n), TR_ENOTFOUND);
    EXPECT_EQ(tr_object_map_private(rt, r, 0, nullptr, &n), TR_EINVAL);
}

} // namespace
