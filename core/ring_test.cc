// core/ring_test.cc - call rings: bytes across processes in order through wrap-around,
// the doorbell handshake, and a peer that lies about its positions or passes a wrong
// descriptor.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

extern "C" {
#include "core/buf.h"
#include "core/ring.h"
#include "core/status.h"
}

namespace {

std::string pattern(size_t n, unsigned seed) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; i++)
        s[i] = (char)((i * 131 + seed * 7) % 251);
    return s;
}

/* Side B of a pair made here, through a second mapping of the same memfd. */
struct Pair {
    tr__ring *a = nullptr, *b = nullptr;
    Pair(size_t cap = 4096) {
        int fd = -1;
        EXPECT_EQ(tr__ring_create(cap, &a, &fd), 0) << tr__last_error();
        EXPECT_EQ(tr__ring_attach(fd, &b), 0) << tr__last_error();
    }
    ~Pair() {
        tr__ring_free(a);
        tr__ring_free(b);
    }
};

TEST(Ring, BytesGoBothWaysInOrderThroughWrapAround) {
    Pair p;
    for (int dir = 0; dir < 2; dir++) {
        tr__ring *w = dir ? p.b : p.a, *r = dir ? p.a : p.b;
        std::string sent, got;
        tr__buf out = TR__BUF_INIT, in = TR__BUF_INIT;
        for (unsigned i = 0; i < 200; i++) { /* pieces of odd sizes: the ring wraps often */
            std::string piece = pattern(1 + (i * 97) % 3000, i);
            sent += piece;
            ASSERT_EQ(tr__buf_append(&out, piece.data(), piece.size()), 0);
            while (tr__buf_avail(&out)) {
                int wake = 0;
                int64_t n = tr__ring_write(w, &out, &wake);
                ASSERT_GE(n, 0);
                EXPECT_EQ(wake, 0) << "nobody sleeps";
                if (tr__buf_avail(&out)) {
                    EXPECT_FALSE(tr__ring_writable(w)) << "full";
                }
                EXPECT_TRUE(tr__ring_readable(r));
                ASSERT_GT(tr__ring_read(r, &in, &wake), 0);
                EXPECT_FALSE(tr__ring_readable(r));
            }
        }
        got.assign(in.data + in.off, tr__buf_avail(&in));
        EXPECT_EQ(got, sent);
        tr__buf_free(&out);
        tr__buf_free(&in);
    }
}

TEST(Ring, ASleeperIsRungOnceAndARoomWaiterAfterTheRead) {
    Pair p;
    tr__buf out = TR__BUF_INIT, in = TR__BUF_INIT;
    ASSERT_EQ(tr__buf_append(&out, "abc", 3), 0);
    tr__ring_sleep(p.b); /* B sleeps: A's write rings, once */
    int wake = 0;
    EXPECT_EQ(tr__ring_write(p.a, &out, &wake), 3);
    EXPECT_EQ(wake, 1);
    ASSERT_EQ(tr__buf_append(&out, "de", 2), 0);
    wake = 0;
    EXPECT_EQ(tr__ring_write(p.a, &out, &wake), 2);
    EXPECT_EQ(wake, 0) << "the first ring woke it";
    tr__ring_wake(p.b);
    /* A fills the ring and waits for room: B's read rings A */
    std::string big = pattern(5000, 1);
    ASSERT_EQ(tr__buf_append(&out, big.data(), big.size()), 0);
    EXPECT_EQ(tr__ring_write(p.a, &out, &wake), 4096 - 5);
    tr__ring_want_room(p.a);
    wake = 0;
    EXPECT_EQ(tr__ring_read(p.b, &in, &wake), 4096);
    EXPECT_EQ(wake, 1);
    EXPECT_EQ(tr__ring_write(p.a, &out, &wake), 5000 - (4096 - 5));
    EXPECT_EQ(tr__ring_read(p.b, &in, &wake), 5000 - (4096 - 5));
    EXPECT_EQ(std::string(in.data + in.off, tr__buf_avail(&in)), "abcde" + big);
    tr__buf_free(&out);
    tr__buf_free(&in);
}

/* A peer that writes its positions into the shared header as it likes: each lie is
 * TR_EPROTO, never a read or write out of bounds. The header's layout is the ring's
 * own (ring.c): side words at 64-byte lines from offset 64, A's then B's. */
TEST(Ring, APeerThatLiesAboutItsPositionsBreaksTheRing) {
    int fd = -1;
    tr__ring *a = nullptr;
    ASSERT_EQ(tr__ring_create(4096, &a, &fd), 0);
    auto *h = (uint64_t *)mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_NE(h, MAP_FAILED);
    uint64_t *b_wrote = h + (64 + 3 * 64) / 8, *b_read = h + (64 + 4 * 64) / 8;
    tr__buf in = TR__BUF_INIT, out = TR__BUF_INIT;
    int wake = 0;
    *b_wrote = 1 << 20; /* more than the ring holds */
    EXPECT_EQ(tr__ring_read(a, &in, &wake), TR_EPROTO);
    EXPECT_NE(std::string(tr__last_error()).find("wrote"), std::string::npos) << tr__last_error();
    *b_wrote = (uint64_t)-5; /* backwards */
    EXPECT_EQ(tr__ring_read(a, &in, &wake), TR_EPROTO);
    *b_wrote = 0;
    EXPECT_EQ(tr__ring_read(a, &in, &wake), 0);
    ASSERT_EQ(tr__buf_append(&out, "xyz", 3), 0);
    *b_read = 100; /* read bytes never written: seen when the writer looks at the reader's
                    * position again, i.e. when the room it counted runs out */
    EXPECT_EQ(tr__ring_write(a, &out, &wake), 3); /* (room counted from its last look) */
    std::string big(4096, 'x');
    ASSERT_EQ(tr__buf_append(&out, big.data(), big.size()), 0);
    EXPECT_EQ(tr__ring_write(a, &out, &wake), TR_EPROTO);
    EXPECT_EQ(tr__buf_avail(&out), big.size()) << "nothing written past the lie";
    *b_read = 0;
    EXPECT_EQ(tr__ring_write(a, &out, &wake), 4096 - 3); /* up to the room there is */
    EXPECT_EQ(tr__buf_avail(&in), 0u);
    munmap(h, 4096);
    close(fd);
    tr__ring_free(a);
    tr__buf_free(&in);
    tr__buf_free(&out);
}

TEST(Ring, OnlyASealedPairOfTheRightSizeIsAttached) {
    tr__ring *r = nullptr;
    int f = memfd_create("not-a-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_GE(f, 0);
    ASSERT_EQ(ftruncate(f, 4096 + 2 * 4096), 0);
    EXPECT_EQ(tr__ring_attach(f, &r), TR_EPROTO) << "not sealed"; /* (closes f) */
    f = memfd_create("not-a-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_EQ(ftruncate(f, 4096 + 3000), 0);
    ASSERT_EQ(fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    EXPECT_EQ(tr__ring_attach(f, &r), TR_EPROTO) << "a size no pair has";
    f = memfd_create("not-a-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_EQ(ftruncate(f, 4096 + 2 * 4096), 0);
    ASSERT_EQ(fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    EXPECT_EQ(tr__ring_attach(f, &r), TR_EPROTO) << "no header";
    EXPECT_NE(std::string(tr__last_error()).find("header"), std::string::npos);
    int pipefd[2];
    ASSERT_EQ(pipe(pipefd), 0);
    close(pipefd[1]);
    EXPECT_EQ(tr__ring_attach(pipefd[0], &r), TR_EPROTO) << "not a memfd";
    EXPECT_EQ(r, nullptr);
    int fd = -1;
    EXPECT_EQ(tr__ring_create(3000, &r, &fd), TR_EINVAL);
    EXPECT_EQ(tr__ring_create((size_t)128 << 20, &r, &fd), TR_EINVAL);
}

/* Two processes, one ring each way: a child echoes what it reads, polling; 2 MiB go
 * through a 4 KiB ring and come back whole. */
TEST(Ring, TwoProcessesEchoThroughSmallRings) {
    int fd = -1;
    tr__ring *a = nullptr;
    ASSERT_EQ(tr__ring_create(4096, &a, &fd), 0);
    std::string sent = pattern(2 << 20, 3);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        tr__ring *b = nullptr;
        if (tr__ring_attach(fd, &b)) _exit(2);
        tr__buf buf = TR__BUF_INIT;
        size_t moved = 0;
        while (moved < sent.size()) {
            int64_t n = tr__ring_read(b, &buf, nullptr);
            if (n < 0) _exit(3);
            int64_t w = tr__ring_write(b, &buf, nullptr);
            if (w < 0) _exit(4);
            moved += (size_t)w;
        }
        _exit(0);
    }
    close(fd);
    tr__buf out = TR__BUF_INIT, in = TR__BUF_INIT;
    ASSERT_EQ(tr__buf_append(&out, sent.data(), sent.size()), 0);
    while (tr__buf_avail(&in) < sent.size()) {
        ASSERT_GE(tr__ring_write(a, &out, nullptr), 0);
        ASSERT_GE(tr__ring_read(a, &in, nullptr), 0);
    }
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
    EXPECT_TRUE(std::string(in.data + in.off, tr__buf_avail(&in)) == sent);
    tr__ring_free(a);
    tr__buf_free(&out);
    tr__buf_free(&in);
}

} // namespace
