// dag/chan_test.cc - channels between real processes: values in order through a ring that
// wraps, a writer held back by its slowest reader, malformed fields refused, and every
// wait ended by a stop, a deadline or a dead peer.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

extern "C" {
#include "core/clock.h"
#include "core/status.h"
#include "dag/chan.h"
}

namespace {

// A channel in a MAP_SHARED mapping, as a graph's segment holds it (children see it).
struct Shared {
    void *mem = MAP_FAILED;
    size_t size = 0;
    tr__chan writer; /* the creator's handle */
    Shared(uint32_t slots, uint64_t bytes, uint32_t readers) {
        size = tr__chan_size(slots, bytes, readers);
        mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (mem != MAP_FAILED && tr__chan_init(&writer, mem, size, slots, bytes, readers)) {
            munmap(mem, size);
            mem = MAP_FAILED;
        }
    }
    ~Shared() {
        if (mem != MAP_FAILED) munmap(mem, size);
    }
    tr__chan *c() {
        return &writer;
    }
    tr__chan_hdr *hdr() {
        return static_cast<tr__chan_hdr *>(mem);
    }
};

tr__chan_wait waits(int timeout_ms, const uint32_t *stop = nullptr) {
    tr__chan_wait w = {tr__deadline(timeout_ms), 0, stop, nullptr, nullptr, 0};
    return w;
}

// value v: its length and bytes, computed the same way on both sides
size_t len_of(uint64_t v, size_t cap) {
    return (v * 7919) % (cap + 1);
}
unsigned char byte_of(uint64_t v, size_t i) {
    return (unsigned char)(v * 31 + i * 7);
}

int write_value(tr__chan *c, uint64_t v, const tr__chan_wait *w) {
    void *buf;
    size_t cap;
    int rc = tr__chan_write_begin(c, v, &buf, &cap, w);
    if (rc) return rc;
    size_t n = len_of(v, cap);
    for (size_t i = 0; i < n; i++)
        ((unsigned char *)buf)[i] = byte_of(v, i);
    tr__chan_write_end(c, v, 0, 0, n, v % 2);
    return 0;
}

// 0, or the first value that came wrong, plus one
uint64_t read_values(tr__chan *c, uint32_t reader, uint64_t count, int delay_us) {
    tr__chan_wait w = waits(20000);
    for (uint64_t v = 0; v < count; v++) {
        const void *d;
        size_t n;
        int32_t code;
        uint32_t flags;
        if (tr__chan_read(c, v, &w, &d, &n, &code, &flags)) return v + 1;
        if (code || flags || n != len_of(v, c->slot_bytes)) return v + 1;
        for (size_t i = 0; i < n; i++)
            if (((const unsigned char *)d)[i] != byte_of(v, i)) return v + 1;
        if (delay_us && v % 64 == 0) usleep((useconds_t)delay_us); /* a slow reader */
        tr__chan_release(c, v, reader);
    }
    return 0;
}

TEST(Chan, SizesAndHeaders) {
    EXPECT_EQ(tr__chan_size(0, 64, 1), 0u);
    EXPECT_EQ(tr__chan_size(4, 64, 0), 0u);
    EXPECT_EQ(tr__chan_size(4, 64, TR__CHAN_MAX_READERS + 1), 0u);
    EXPECT_EQ(tr__chan_size(TR__CHAN_MAX_SLOTS + 1, 64, 1), 0u);
    // the header, a reader's line, then slots of 32 + 32 bytes: a line each
    EXPECT_EQ(tr__chan_size(2, 32, 1), 2 * 64u + 2 * 64u);
    Shared s(4, 1000, 2);
    ASSERT_NE(s.mem, MAP_FAILED);
    tr__chan peer;
    EXPECT_EQ(tr__chan_open(&peer, s.mem, s.size), 0) << tr__last_error();
    EXPECT_EQ(peer.slots, 4u);
    EXPECT_EQ(peer.slot_bytes, 1000u);
    EXPECT_EQ(tr__chan_open(&peer, s.mem, s.size - 1), TR_EPROTO); // does not fit the mapping
    EXPECT_EQ(tr__chan_init(&peer, s.mem, 10, 4, 1000, 2), TR_EINVAL);
    void *buf;
    size_t cap;
    tr__chan_wait w = waits(1000);
    ASSERT_EQ(tr__chan_write_begin(s.c(), 0, &buf, &cap, &w), 0);
    EXPECT_EQ(cap, 1000u);
    EXPECT_EQ((uintptr_t)buf % 16, 0u) << "values are 16-byte aligned";
}

// One writer, two reader processes (one slow), a ring of 3 slots wrapping thousands of
// times: every value arrives whole and in order, and the writer never overtakes.
TEST(Chan, ValuesCrossProcessesInOrderThroughAWrappingRing) {
    Shared s(3, 200, 2);
    ASSERT_NE(s.mem, MAP_FAILED);
    const uint64_t count = 20000;
    pid_t kids[2];
    for (int r = 0; r < 2; r++) {
        kids[r] = fork();
        ASSERT_GE(kids[r], 0);
        if (kids[r] == 0) { /* a process of its own, with a handle of its own */
            tr__chan mine;
            if (tr__chan_open(&mine, s.mem, s.size)) _exit(2);
            _exit((int)(read_values(&mine, (uint32_t)r, count, r ? 100 : 0) != 0));
        }
    }
    tr__chan_wait w = waits(20000);
    for (uint64_t v = 0; v < count; v++)
        ASSERT_EQ(write_value(s.c(), v, &w), 0) << v << ": " << tr__last_error();
    for (pid_t k : kids) {
        int st = 0;
        ASSERT_EQ(waitpid(k, &st, 0), k);
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "a reader got a wrong value";
    }
}

// The writer waits for the slowest reader: with 2 slots and a reader that holds value 0,
// value 2 cannot be written (it times out), and goes in once value 0 is released.
TEST(Chan, TheWriterWaitsForTheSlowestReader) {
    Shared s(2, 64, 2);
    ASSERT_NE(s.mem, MAP_FAILED);
    tr__chan_wait w = waits(1000), short_wait = waits(50);
    ASSERT_EQ(write_value(s.c(), 0, &w), 0);
    ASSERT_EQ(write_value(s.c(), 1, &w), 0);
    const void *d;
    size_t n;
    int32_t code;
    uint32_t flags;
    ASSERT_EQ(tr__chan_read(s.c(), 0, &w, &d, &n, &code, &flags), 0);
    tr__chan_release(s.c(), 0, 0); // reader 0 is done, reader 1 is not
    EXPECT_EQ(write_value(s.c(), 2, &short_wait), TR_ETIMEDOUT);
    tr__chan_release(s.c(), 0, 1);
    EXPECT_EQ(write_value(s.c(), 2, &w), 0);
    EXPECT_TRUE(tr__chan_ready(s.c(), 2));
    EXPECT_FALSE(tr__chan_ready(s.c(), 3));
}

TEST(Chan, AnErrorTravelsWithItsMessage) {
    Shared s(2, 64, 1);
    ASSERT_NE(s.mem, MAP_FAILED);
    tr__chan_wait w = waits(1000);
    void *buf;
    size_t cap;
    ASSERT_EQ(tr__chan_write_begin(s.c(), 0, &buf, &cap, &w), 0);
    memcpy(buf, "boom", 5);
    tr__chan_write_end(s.c(), 0, TR_ETASK, 0, 5, 1);
    const void *d;
    size_t n;
    int32_t code;
    uint32_t flags;
    ASSERT_EQ(tr__chan_read(s.c(), 0, &w, &d, &n, &code, &flags), 0);
    EXPECT_EQ(code, TR_ETASK);
    EXPECT_STREQ((const char *)d, "boom");
}

// A hostile process of the same user scribbles on the channel: every field it can reach
// is checked before use, and the reader gets TR_EPROTO, not a read outside the slot.
TEST(Chan, ScribbledFieldsAreRefused) {
    Shared s(2, 64, 1);
    ASSERT_NE(s.mem, MAP_FAILED);
    tr__chan_wait w = waits(1000);
    auto *slot0 = (tr__chan_slot *)((char *)s.mem + 2 * 64); /* the header, one reader */
    const void *d;
    size_t n;
    int32_t code;
    uint32_t flags;
    struct Case {
        const char *what;
        void (*scribble)(tr__chan_slot *);
    } cases[] = {
        {"length over the slot", [](tr__chan_slot *x) { x->len = 1ull << 40; }},
        {"a positive code", [](tr__chan_slot *x) { x->code = 7; }},
        {"an unknown code", [](tr__chan_slot *x) { x->code = -9999; }},
        {"an unknown flag", [](tr__chan_slot *x) { x->flags = 0x80; }},
        {"a ref of the wrong size",
         [](tr__chan_slot *x) {
             x->flags = TR__CHAN_REF;
             x->len = 3;
         }},
        {"a forwarded value's place of the wrong size",
         [](tr__chan_slot *x) {
             x->flags = TR__CHAN_FWD;
             x->len = 8;
         }},
        {"two flags at once",
         [](tr__chan_slot *x) {
             x->flags = TR__CHAN_FWD | TR__CHAN_REF;
             x->len = 16;
         }},
    };
    uint64_t v = 0;
    for (auto &k : cases) {
        ASSERT_EQ(write_value(s.c(), v, &w), 0);
        k.scribble(v % 2 ? (tr__chan_slot *)((char *)slot0 + s.c()->stride) : slot0);
        EXPECT_EQ(tr__chan_read(s.c(), v, &w, &d, &n, &code, &flags), TR_EPROTO) << k.what;
        tr__chan_release(s.c(), v, 0);
        v++;
    }
    for (auto scribble :
         {+[](tr__chan_hdr *h) { h->magic++; }, +[](tr__chan_hdr *h) { h->version = 9; },
          +[](tr__chan_hdr *h) { h->slots = 0; }, +[](tr__chan_hdr *h) { h->readers = 100; },
          +[](tr__chan_hdr *h) { h->slot_bytes = 1ull << 50; },
          +[](tr__chan_hdr *h) { h->stride = 64; }}) {
        Shared t(2, 64, 1);
        ASSERT_NE(t.mem, MAP_FAILED);
        scribble(t.hdr());
        tr__chan peer;
        EXPECT_EQ(tr__chan_open(&peer, t.mem, t.size), TR_EPROTO);
    }
}

// Scribbling on the header after a process opened the channel changes nothing for it:
// its handle holds the dimensions it checked (else a division by zero, or a slot far
// outside the mapping).
TEST(Chan, AHeaderRewrittenAfterOpeningIsNotTrusted) {
    Shared s(2, 64, 1);
    ASSERT_NE(s.mem, MAP_FAILED);
    tr__chan reader;
    ASSERT_EQ(tr__chan_open(&reader, s.mem, s.size), 0);
    pid_t hostile = fork(); /* another process of the same user rewrites the header */
    if (hostile == 0) {
        s.hdr()->slots = 0;
        s.hdr()->stride = 1u << 30;
        s.hdr()->slot_bytes = 1ull << 40;
        s.hdr()->readers = 1000;
        _exit(0);
    }
    ASSERT_EQ(waitpid(hostile, nullptr, 0), hostile);
    ASSERT_EQ(s.hdr()->slots, 0u) << "the scribbling is in the shared mapping";
    tr__chan_wait w = waits(1000);
    for (uint64_t v = 0; v < 10; v++) {
        ASSERT_EQ(write_value(s.c(), v, &w), 0);
        const void *d;
        size_t n;
        int32_t code;
        uint32_t flags;
        ASSERT_EQ(tr__chan_read(&reader, v, &w, &d, &n, &code, &flags), 0);
        EXPECT_EQ(n, len_of(v, 64));
        tr__chan_release(&reader, v, 0);
    }
}

// A reader waiting for a value that never comes: a stop ends its wait at once (it sleeps,
// and wake_all wakes it), a deadline with TR_ETIMEDOUT, a check with the check's code.
TEST(Chan, EveryWaitEnds) {
    Shared s(2, 64, 1);
    ASSERT_NE(s.mem, MAP_FAILED);
    const void *d;
    size_t n;
    int32_t code;
    uint32_t flags;
    uint32_t stop = 0;
    tr__chan_wait w = waits(-1, &stop);
    std::thread t([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        __atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
        tr__chan_wake_all(s.c());
    });
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(tr__chan_read(s.c(), 0, &w, &d, &n, &code, &flags), TR_ECLOSED);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
    t.join();
    tr__chan_wait tw = waits(30);
    EXPECT_EQ(tr__chan_read(s.c(), 0, &tw, &d, &n, &code, &flags), TR_ETIMEDOUT);
    int calls = 0;
    tr__chan_wait cw = waits(-1);
    cw.arg = &calls;
    cw.check = [](void *arg) -> int {
        return ++*(int *)arg < 3 ? 0 : tr__err(TR_EPEER_DIED, "the writer died");
    };
    EXPECT_EQ(tr__chan_read(s.c(), 0, &cw, &d, &n, &code, &flags), TR_EPEER_DIED);
    EXPECT_EQ(calls, 3);
}

// A lazy wait (the graph's driver's) reads no clock for a value already there, and once
// it must wait its timeout counts from then, not from when the wait was made; each wait
// that finds nothing counts its own, and tr__chan_deadline fixes one for good.
TEST(Chan, ALazyWaitCountsItsTimeoutFromItsFirstLookThatFindsNothing) {
    Shared s(4, 64, 1);
    ASSERT_NE(s.mem, MAP_FAILED);
    tr__chan_wait w = waits(1000);
    ASSERT_EQ(write_value(s.c(), 0, &w), 0);
    tr__chan_wait lazy = waits(0);
    tr__chan_lazy(&lazy, 100);
    const void *d;
    size_t n;
    int32_t code;
    uint32_t flags;
    ASSERT_EQ(tr__chan_read(s.c(), 0, &lazy, &d, &n, &code, &flags), 0);
    EXPECT_EQ(lazy.deadline, TR__CHAN_LAZY) << "a ready value read no clock";
    std::this_thread::sleep_for(std::chrono::milliseconds(150)); // past the timeout, if it ran
    std::thread t([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(40));
        tr__chan_wait ww = waits(1000);
        write_value(s.c(), 1, &ww);
    });
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(tr__chan_read(s.c(), 1, &lazy, &d, &n, &code, &flags), 0)
        << "its 100 ms count from this wait: value 1 comes after 40";
    t.join();
    t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(tr__chan_read(s.c(), 2, &lazy, &d, &n, &code, &flags), TR_ETIMEDOUT);
    auto waited = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(waited, std::chrono::milliseconds(95));
    EXPECT_LT(waited, std::chrono::seconds(5));
    int64_t before = tr__now_ns(), at = tr__chan_deadline(&lazy);
    EXPECT_GE(at, before + 100 * 1000000ll);
    EXPECT_EQ(tr__chan_deadline(&lazy), at) << "fixed once read";
    tr__chan_wait none = waits(0);
    tr__chan_lazy(&none, -1);
    EXPECT_EQ(tr__chan_deadline(&none), TR__NO_DEADLINE);
}

} // namespace
