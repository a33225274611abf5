/* actor/bulk_test.cc - bulk connections (actor/bulk.h) on loopback: a whole offer comes
 * through byte for byte and is released once; a wrong or spent ticket, or silence, gets a
 * closed connection; a puller told to stop stops; an offer nobody takes is released at
 * destroy; destroy does not wait on a puller that stopped reading. */
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>

extern "C" {
#include "actor/bulk.h"
#include "core/clock.h"
#include "core/status.h"
}

namespace {

std::atomic<int> released{0};
void release(void *arg) {
    (void)arg;
    released++;
}

std::string bytes(size_t n) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; i++)
        s[i] = (char)(i * 2654435761u >> 13);
    return s;
}

int raw_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

TEST(Bulk, AnOfferIsServedOnceByItsTicket) {
    released = 0;
    tr__bulk *b;
    ASSERT_EQ(tr__bulk_create("127.0.0.1", &b), 0) << tr__last_error();
    std::string v = bytes((3 << 20) + 5), got(v.size(), '\0');
    uint8_t t[16], wrong[16];
    ASSERT_EQ(tr__bulk_offer(b, v.data(), v.size(), release, nullptr, t), 0);
    memcpy(wrong, t, 16);
    wrong[15] ^= 0x40;
    int64_t dl = tr__deadline(10000);
    int port = tr__bulk_port(b);
    EXPECT_EQ(tr__bulk_fetch("127.0.0.1", port, wrong, &got[0], got.size(), dl, nullptr, nullptr),
              TR_ECLOSED);
    EXPECT_EQ(released, 0); /* a wrong ticket takes nothing */
    ASSERT_EQ(tr__bulk_fetch("127.0.0.1", port, t, &got[0], got.size(), dl, nullptr, nullptr), 0)
        << tr__last_error();
    EXPECT_TRUE(got == v);
    EXPECT_EQ(tr__bulk_fetch("127.0.0.1", port, t, &got[0], got.size(), dl, nullptr, nullptr),
              TR_ECLOSED);
    /* a zero-byte offer, and a puller that wants more than is offered */
    uint8_t t0[16], t1[16];
    ASSERT_EQ(tr__bulk_offer(b, v.data(), 0, release, nullptr, t0), 0);
    EXPECT_EQ(tr__bulk_fetch("127.0.0.1", port, t0, &got[0], 0, dl, nullptr, nullptr), 0);
    ASSERT_EQ(tr__bulk_offer(b, v.data(), 100, release, nullptr, t1), 0);
    EXPECT_EQ(tr__bulk_fetch("127.0.0.1", port, t1, &got[0], 200, dl, nullptr, nullptr),
              TR_ECLOSED);
    EXPECT_NE(std::string(tr__last_error()).find("100 of 200"), std::string::npos)
        << tr__last_error();
    tr__bulk_destroy(b);
    EXPECT_EQ(released, 3); /* each offer once: every one served */
}

TEST(Bulk, SilenceStopsAndDestroyNeverWaitOnAPeer) {
    released = 0;
    tr__bulk *b;
    ASSERT_EQ(tr__bulk_create("127.0.0.1", &b), 0);
    int port = tr__bulk_port(b);
    /* a connection that never says its ticket is closed within about a second */
    int fd = raw_connect(port);
    ASSERT_GE(fd, 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    auto t0 = std::chrono::steady_clock::now();
    char c;
    EXPECT_EQ(read(fd, &c, 1), 0);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
    close(fd);
    /* a puller told to stop stops (the offer is larger than the socket buffers) */
    std::string v = bytes(64 << 20), got(v.size(), '\0');
    uint8_t t[16];
    ASSERT_EQ(tr__bulk_offer(b, v.data(), v.size(), release, nullptr, t), 0);
    auto stop = [](void *) { return 1; };
    EXPECT_EQ(tr__bulk_fetch("127.0.0.1", port, t, &got[0], got.size(), tr__deadline(10000), stop,
                             nullptr),
              TR_ECANCELED);
    /* one that takes its ticket's bytes and stops reading; one offer nobody takes */
    ASSERT_EQ(tr__bulk_offer(b, v.data(), v.size(), release, nullptr, t), 0);
    fd = raw_connect(port);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, t, 16), 16);
    ASSERT_EQ(tr__bulk_offer(b, v.data(), v.size(), release, nullptr, t), 0);
    usleep(200000);
    t0 = std::chrono::steady_clock::now();
    tr__bulk_destroy(b);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
    EXPECT_EQ(released, 3);
    close(fd);
}

/* Before: the hello's 1 s was per read, so a byte every 0.9 s held a connection (and one of
 * its 32 slots) for ~16 s. Now the whole ticket is due within one second. */
TEST(Bulk, ATicketThatTricklesInIsCutOffAtOneDeadline) {
    tr__bulk *b;
    ASSERT_EQ(tr__bulk_create("127.0.0.1", &b), 0);
    int fd = raw_connect(tr__bulk_port(b));
    ASSERT_GE(fd, 0);
    auto t0 = std::chrono::steady_clock::now();
    int sent = 0;
    for (; sent < 16; sent++) { /* a byte every 0.3 s, until the node hangs up */
        char c = 'x';
        if (send(fd, &c, 1, MSG_NOSIGNAL) != 1) break;
        usleep(300000);
        char r;
        if (recv(fd, &r, 1, MSG_DONTWAIT) == 0) break;
    }
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(sent, 8) << "the node took " << sent << " bytes over " << took << " s";
    EXPECT_LT(took, 2.5);
    close(fd);
    tr__bulk_destroy(b);
}

TEST(Bulk, AnOfferNobodyTakesIsReleasedOnceItsTimeIsPast) {
    released = 0;
    tr__bulk *b;
    ASSERT_EQ(tr__bulk_create("127.0.0.1", &b), 0);
    uint8_t t[16];
    ASSERT_EQ(tr__bulk_offer(b, "x", 1, release, nullptr, t), 0);
    tr__bulk_sweep(b);
    EXPECT_EQ(released, 0); /* (good for 10 s) */
    tr__bulk_destroy(b);
    EXPECT_EQ(released, 1);
}

TEST(Bulk, BadAddresses) {
    tr__bulk *b = nullptr;
    EXPECT_EQ(tr__bulk_create("not an address", &b), TR_EINVAL);
    EXPECT_EQ(b, nullptr);
    uint8_t t[16] = {0};
    char buf[4];
    EXPECT_EQ(tr__bulk_fetch("127.0.0.1", 0, t, buf, 4, tr__deadline(1000), nullptr, nullptr),
              TR_ECONNECT);
    EXPECT_EQ(tr__bulk_fetch("nowhere", 80, t, buf, 4, tr__deadline(1000), nullptr, nullptr),
              TR_ECONNECT);
    /* a port nobody listens on */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t al = sizeof a;
    ASSERT_EQ(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    ASSERT_EQ(getsockname(s, (struct sockaddr *)&a, &al), 0);
    int port = ntohs(a.sin_port);
    close(s);
    EXPECT_EQ(tr__bulk_fetch("127.0.0.1", port, t, buf, 4, tr__deadline(1000), nullptr, nullptr),
              TR_ECONNECT);
}

} // namespace
