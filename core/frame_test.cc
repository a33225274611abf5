// core/frame_test.cc - frame headers and the socket helpers over socketpairs.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

extern "C" {
#include "core/buf.h"
#include "core/clock.h"
#include "core/frame.h"
#include "core/status.h"
}

namespace {

std::string header(uint16_t magic, uint8_t version, uint8_t type, uint32_t len, uint64_t seq) {
    tr__frame_hdr h;
    memset(&h, 0, sizeof h);
    h.magic = magic;
    h.version = version;
    h.type = type;
    h.len = len;
    h.seq = seq;
    return std::string((const char *)&h, sizeof h);
}

std::string frame(uint8_t type, uint64_t seq, const std::string &body) {
    return header(TR__FRAME_MAGIC, TR__FRAME_VERSION, type, (uint32_t)body.size(), seq) + body;
}

void fill(tr__buf *b, const std::string &s) {
    tr__buf_reset(b);
    ASSERT_EQ(tr__buf_append(b, s.data(), s.size()), 0);
}

struct Pair {
    int fd[2] = {-1, -1};
    Pair() {
        EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd), 0);
    }
    ~Pair() {
        close_end(0);
        close_end(1);
    }
    void close_end(int i) {
        if (fd[i] >= 0) close(fd[i]);
        fd[i] = -1;
    }
};

int write_str(int fd, const std::string &s, int timeout_ms) {
    struct iovec iov = {const_cast<char *>(s.data()), s.size()};
    return tr__write_all(fd, &iov, 1, tr__deadline(timeout_ms));
}

TEST(Frame, HeaderIs16Bytes) {
    EXPECT_EQ(sizeof(tr__frame_hdr), 16u);
    EXPECT_EQ(TR__FRAME_HDR, 16);
}

TEST(Frame, CheckAcceptsGoodHeader) {
    tr__frame_hdr h = {TR__FRAME_MAGIC, TR__FRAME_VERSION, TR__MSG_HELLO, 100, 7};
    EXPECT_EQ(tr__frame_check(&h, 100), 0);
    EXPECT_EQ(tr__frame_check(&h, 99), TR_EMSGSIZE);
    h.magic = 0x5453;
    EXPECT_EQ(tr__frame_check(&h, 100), TR_EPROTO);
    h.magic = TR__FRAME_MAGIC;
    h.version = 2;
    EXPECT_EQ(tr__frame_check(&h, 100), TR_EPROTO);
}

TEST(Frame, ParseNeedsAWholeHeader) {
    std::string f = frame(TR__MSG_KV_GET, 42, "body!");
    tr__buf b = TR__BUF_INIT;
    tr__frame_hdr h;
    const char *body = nullptr;
    for (size_t n = 0; n < TR__FRAME_HDR; n++) {
        fill(&b, f.substr(0, n));
        ASSERT_EQ(tr__frame_parse(&b, 1024, &h, &body), 0) << n;
        ASSERT_EQ(body, nullptr);
    }
    // Header there, body partial.
    for (size_t n = TR__FRAME_HDR; n < f.size(); n++) {
        fill(&b, f.substr(0, n));
        ASSERT_EQ(tr__frame_parse(&b, 1024, &h, &body), 0) << n;
    }
    fill(&b, f);
    ASSERT_EQ(tr__frame_parse(&b, 1024, &h, &body), 1);
    EXPECT_EQ(h.magic, TR__FRAME_MAGIC);
    EXPECT_EQ(h.version, TR__FRAME_VERSION);
    EXPECT_EQ(h.type, TR__MSG_KV_GET);
    EXPECT_EQ(h.len, 5u);
    EXPECT_EQ(h.seq, 42u);
    EXPECT_EQ(std::string(body, h.len), "body!");
    EXPECT_EQ(body, b.data + b.off + TR__FRAME_HDR);
    tr__buf_free(&b);
}

TEST(Frame, ParseAtAnOffsetAndBackToBack) {
    tr__buf b = TR__BUF_INIT;
    fill(&b, frame(3, 1, "one") + frame(4, 2, "") + frame(5, 3, "three"));
    tr__frame_hdr h;
    const char *body;
    ASSERT_EQ(tr__frame_parse(&b, 64, &h, &body), 1);
    EXPECT_EQ(std::string(body, h.len), "one");
    tr__buf_consume(&b, TR__FRAME_HDR + h.len);
    ASSERT_EQ(tr__frame_parse(&b, 64, &h, &body), 1);
    EXPECT_EQ(h.len, 0u);
    EXPECT_EQ(h.seq, 2u);
    tr__buf_consume(&b, TR__FRAME_HDR + h.len);
    ASSERT_EQ(tr__frame_parse(&b, 64, &h, &body), 1);
    EXPECT_EQ(std::string(body, h.len), "three");
    EXPECT_EQ(h.type, 5);
    tr__buf_consume(&b, TR__FRAME_HDR + h.len);
    EXPECT_EQ(tr__buf_avail(&b), 0u);
    EXPECT_EQ(tr__frame_parse(&b, 64, &h, &body), 0);
    tr__buf_free(&b);
}

TEST(Frame, ParseRejectsBadMagic) {
    tr__buf b = TR__BUF_INIT;
    fill(&b, header(0x4547, TR__FRAME_VERSION, 1, 0, 0)); // "GE": an HTTP client, say
    tr__frame_hdr h;
    const char *body;
    EXPECT_EQ(tr__frame_parse(&b, 1024, &h, &body), TR_EPROTO);
    EXPECT_NE(strstr(tr__last_error(), "magic"), nullptr) << tr__last_error();
    tr__buf_free(&b);
}

TEST(Frame, ParseRejectsBadVersion) {
    tr__buf b = TR__BUF_INIT;
    for (int v : {0, 2, 255}) {
        fill(&b, header(TR__FRAME_MAGIC, (uint8_t)v, 1, 0, 0));
        tr__frame_hdr h;
        const char *body;
        EXPECT_EQ(tr__frame_parse(&b, 1024, &h, &body), TR_EPROTO) << v;
        EXPECT_NE(strstr(tr__last_error(), "version"), nullptr) << tr__last_error();
    }
    tr__buf_free(&b);
}

TEST(Frame, ParseRejectsOversizedBeforeTheBodyArrives) {
    tr__buf b = TR__BUF_INIT;
    fill(&b, header(TR__FRAME_MAGIC, TR__FRAME_VERSION, 1, 1025, 0));
    tr__frame_hdr h;
    const char *body;
    EXPECT_EQ(tr__frame_parse(&b, 1024, &h, &body), TR_EMSGSIZE);
    fill(&b, header(TR__FRAME_MAGIC, TR__FRAME_VERSION, 1, UINT32_MAX, 0));
    EXPECT_EQ(tr__frame_parse(&b, TR__DEFAULT_MAX_MSG, &h, &body), TR_EMSGSIZE);
    // Exactly at the limit is fine (just incomplete).
    fill(&b, header(TR__FRAME_MAGIC, TR__FRAME_VERSION, 1, 1024, 0));
    EXPECT_EQ(tr__frame_parse(&b, 1024, &h, &body), 0);
    tr__buf_free(&b);
}

TEST(Frame, PutHdr) {
    tr__buf b = TR__BUF_INIT;
    ASSERT_EQ(tr__frame_put_hdr(&b, TR__MSG_STATUS, 99, 12), 0);
    EXPECT_EQ(std::string(b.data, b.len), header(TR__FRAME_MAGIC, TR__FRAME_VERSION, 6, 12, 99));
    EXPECT_EQ(tr__frame_put_hdr(&b, 1, 1, (size_t)UINT32_MAX + 1), TR_EMSGSIZE);
    EXPECT_EQ(b.len, 16u);
    ASSERT_EQ(tr__frame_put_hdr(&b, 1, 1, UINT32_MAX), 0);
    EXPECT_EQ(b.len, 32u);
    tr__buf_free(&b);
}

TEST(Frame, WriteAllAndReadFrameRoundTrip) {
    Pair p;
    std::string body = "a msgpack body, say";
    tr__buf hdr = TR__BUF_INIT;
    ASSERT_EQ(tr__frame_put_hdr(&hdr, TR__MSG_KV_PUT, 17, body.size()), 0);
    struct iovec iov[2] = {{hdr.data, hdr.len}, {const_cast<char *>(body.data()), body.size()}};
    ASSERT_EQ(tr__write_all(p.fd[0], iov, 2, tr__deadline(1000)), 0);
    tr__buf in = TR__BUF_INIT;
    tr__frame_hdr h;
    const char *got = nullptr;
    ASSERT_EQ(tr__read_frame(p.fd[1], &in, 1024, tr__deadline(1000), &h, &got), 1);
    EXPECT_EQ(h.type, TR__MSG_KV_PUT);
    EXPECT_EQ(h.seq, 17u);
    EXPECT_EQ(std::string(got, h.len), body);
    tr__buf_consume(&in, TR__FRAME_HDR + h.len);
    EXPECT_EQ(tr__buf_avail(&in), 0u);
    tr__buf_free(&hdr);
    tr__buf_free(&in);
}

TEST(Frame, WriteAllWithNoIovecs) {
    Pair p;
    EXPECT_EQ(tr__write_all(p.fd[0], nullptr, 0, tr__deadline(10)), 0);
    struct iovec empty = {nullptr, 0};
    EXPECT_EQ(tr__write_all(p.fd[0], &empty, 1, tr__deadline(10)), 0);
}

TEST(Frame, ReadFrameKeepsTheSecondFrameBuffered) {
    Pair p;
    ASSERT_EQ(write_str(p.fd[0], frame(3, 1, "first") + frame(4, 2, "second"), 1000), 0);
    tr__buf in = TR__BUF_INIT;
    tr__frame_hdr h;
    const char *body;
    ASSERT_EQ(tr__read_frame(p.fd[1], &in, 1024, tr__deadline(1000), &h, &body), 1);
    EXPECT_EQ(std::string(body, h.len), "first");
    tr__buf_consume(&in, TR__FRAME_HDR + h.len);
    p.close_end(0); // the second frame must come from the buffer, not the socket
    ASSERT_EQ(tr__read_frame(p.fd[1], &in, 1024, tr__deadline(1000), &h, &body), 1);
    EXPECT_EQ(std::string(body, h.len), "second");
    EXPECT_EQ(h.seq, 2u);
    tr__buf_consume(&in, TR__FRAME_HDR + h.len);
    EXPECT_EQ(tr__read_frame(p.fd[1], &in, 1024, tr__deadline(1000), &h, &body), TR_ECLOSED);
    tr__buf_free(&in);
}

TEST(Frame, ByteByByteArrival) {
    Pair p;
    std::string f = frame(9, 5, "slowly");
    std::thread writer([&] {
        for (char c : f) {
            ASSERT_EQ(write_str(p.fd[0], std::string(1, c), 1000), 0);
            usleep(200);
        }
    });
    tr__buf in = TR__BUF_INIT;
    tr__frame_hdr h;
    const char *body;
    int rc = tr__read_frame(p.fd[1], &in, 1024, tr__deadline(5000), &h, &body);
    writer.join();
    ASSERT_EQ(rc, 1);
    EXPECT_EQ(std::string(body, h.len), "slowly");
    tr__buf_free(&in);
}

TEST(Frame, LargeFrameThroughAThread) {
    Pair p;
    std::string body(8 << 20, '\0');
    for (size_t i = 0; i < body.size(); i++)
        body[i] = (char)(i * 131 + 7);
    std::string f = frame(70, 1, body);
    int wrc = -100;
    std::thread writer([&] { wrc = write_str(p.fd[0], f, 10000); });
    tr__buf in = TR__BUF_INIT;
    tr__frame_hdr h;
    const char *got;
    int rc = tr__read_frame(p.fd[1], &in, TR__DEFAULT_MAX_MSG, tr__deadline(10000), &h, &got);
    writer.join();
    EXPECT_EQ(wrc, 0);
    ASSERT_EQ(rc, 1);
    ASSERT_EQ(h.len, body.size());
    EXPECT_TRUE(memcmp(got, body.data(), body.size()) == 0);
    tr__buf_free(&in);
}

TEST(Frame, ReadTimesOut) {
    Pair p;
    tr__buf in = TR__BUF_INIT;
    tr__frame_hdr h;
    const char *body;
    int64_t t0 = tr__now_ns();
    EXPECT_EQ(tr__read_frame(p.fd[1], &in, 1024, tr__deadline(50), &h, &body), TR_ETIMEDOUT);
    int64_t ms = (tr__now_ns() - t0) / 1000000;
    EXPECT_GE(ms, 45);
    EXPECT_LT(ms, 2000);
    // Zero timeout: poll once, no wait.
    EXPECT_EQ(tr__read_frame(p.fd[1], &in, 1024, tr__deadline(0), &h, &body), TR_ETIMEDOUT);
    tr__buf_free(&in);
}

TEST(Frame, ReadTimesOutOnAPartialFrameAndResumes) {
    Pair p;
    std::string f = frame(3, 8, "0123456789");
    ASSERT_EQ(write_str(p.fd[0], f.substr(0, 20), 1000), 0);
    tr__buf in = TR__BUF_INIT;
    tr__frame_hdr h;
    const char *body;
    EXPECT_EQ(tr__read_frame(p.fd[1], &in, 1024, tr__deadline(30), &h, &body), TR_ETIMEDOUT);
    EXPECT_EQ(tr__buf_avail(&in), 20u); // what arrived is kept
    ASSERT_EQ(write_str(p.fd[0], f.substr(20), 1000), 0);
    ASSERT_EQ(tr__read_frame(p.fd[1], &in, 1024, tr__deadline(1000), &h, &body), 1);
    EXPECT_EQ(std::string(body, h.len), "0123456789");
    tr__buf_free(&in);
}

TEST(Frame, ReadEofIsClosed) {
    Pair p;
    p.close_end(0);
    tr__buf in = TR__BUF_INIT;
    tr__frame_hdr h;
    const char *body;
    EXPECT_EQ(tr__read_frame(p.fd[1], &in, 1024, tr__deadline(1000), &h, &body), TR_ECLOSED);
    tr__buf_free(&in);
}

TEST(Frame, ReadEofMidFrameIsClosed) {
    Pair p;
    ASSERT_EQ(write_str(p.fd[0], frame(3, 1, "truncated body").substr(0, 22), 1000), 0);
    p.close_end(0);
    tr__buf in = TR__BUF_INIT;
    tr__frame_hdr h;
    const char *body;
    EXPECT_EQ(tr__read_frame(p.fd[1], &in, 1024, tr__deadline(1000), &h, &body), TR_ECLOSED);
    tr__buf_free(&in);
}

TEST(Frame, ReadRejectsBadInputFromTheSocket) {
    {
        Pair p;
        ASSERT_EQ(write_str(p.fd[0], "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 1000), 0);
        tr__buf in = TR__BUF_INIT;
        tr__frame_hdr h;
        const char *body;
        EXPECT_EQ(tr__read_frame(p.fd[1], &in, 1024, tr__deadline(1000), &h, &body), TR_EPROTO);
        tr__buf_free(&in);
    }
    {
        Pair p;
        ASSERT_EQ(write_str(p.fd[0], header(TR__FRAME_MAGIC, 1, 3, 1u << 30, 0), 1000), 0);
        tr__buf in = TR__BUF_INIT;
        tr__frame_hdr h;
        const char *body;
        EXPECT_EQ(tr__read_frame(p.fd[1], &in, 4096, tr__deadline(1000), &h, &body), TR_EMSGSIZE);
        EXPECT_LT(in.cap, (size_t)1 << 20); // nothing was buffered for the claimed size
        tr__buf_free(&in);
    }
}

TEST(Frame, WriteTimesOutWhenThePeerDoesNotRead) {
    Pair p;
    ASSERT_EQ(tr__set_nonblock(p.fd[0], 1), 0);
    int small = 4096;
    setsockopt(p.fd[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    std::string big(16 << 20, 'w');
    int64_t t0 = tr__now_ns();
    EXPECT_EQ(write_str(p.fd[0], big, 50), TR_ETIMEDOUT);
    int64_t ms = (tr__now_ns() - t0) / 1000000;
    EXPECT_GE(ms, 45);
    EXPECT_LT(ms, 5000);
}

TEST(Frame, WriteToClosedPeerIsClosedNotSigpipe) {
    Pair p;
    p.close_end(1);
    EXPECT_EQ(write_str(p.fd[0], frame(3, 1, "nobody listens"), 1000), TR_ECLOSED);
}

TEST(Frame, ReadSome) {
    Pair p;
    ASSERT_EQ(tr__set_nonblock(p.fd[1], 1), 0);
    tr__buf in = TR__BUF_INIT;
    EXPECT_EQ(tr__read_some(p.fd[1], &in), 0); // nothing yet
    ASSERT_EQ(write_str(p.fd[0], "hello", 1000), 0);
    EXPECT_EQ(tr__read_some(p.fd[1], &in), 5);
    EXPECT_EQ(std::string(in.data + in.off, tr__buf_avail(&in)), "hello");
    ASSERT_EQ(write_str(p.fd[0], "!", 1000), 0);
    p.close_end(0);
    EXPECT_EQ(tr__read_some(p.fd[1], &in), 1); // data before EOF is delivered first
    EXPECT_EQ(tr__read_some(p.fd[1], &in), TR_ECLOSED);
    EXPECT_EQ(std::string(in.data + in.off, tr__buf_avail(&in)), "hello!");
    tr__buf_free(&in);
}

// Writes until the socket is full and keeps the rest; the rest goes once the peer reads;
// a closed peer is TR_ECLOSED (no SIGPIPE), with what did not go still in the buffer.
TEST(Frame, WriteSomeKeepsWhatTheSocketCannotTake) {
    Pair p;
    ASSERT_EQ(tr__set_nonblock(p.fd[0], 1), 0);
    ASSERT_EQ(tr__set_nonblock(p.fd[1], 1), 0);
    tr__buf out = TR__BUF_INIT, in = TR__BUF_INIT;
    EXPECT_EQ(tr__write_some(p.fd[0], &out), 0); // nothing to write
    std::string big(8 << 20, 'w');
    big[0] = 'a';
    big.back() = 'z';
    ASSERT_EQ(tr__buf_append(&out, big.data(), big.size()), 0);
    EXPECT_EQ(tr__write_some(p.fd[0], &out), 0);
    size_t left = tr__buf_avail(&out);
    EXPECT_GT(left, 0u);         // the socket is full...
    EXPECT_LT(left, big.size()); // ...after some of it went
    EXPECT_EQ(tr__write_some(p.fd[0], &out), 0);
    EXPECT_EQ(tr__buf_avail(&out), left); // still full: nothing moved
    for (int round = 0; round < 100000 && (tr__buf_avail(&out) || in.len < big.size()); round++) {
        ASSERT_GE(tr__read_some(p.fd[1], &in), 0);
        ASSERT_EQ(tr__write_some(p.fd[0], &out), 0);
    }
    EXPECT_EQ(tr__buf_avail(&out), 0u);
    EXPECT_EQ(std::string(in.data + in.off, tr__buf_avail(&in)), big);
    ASSERT_EQ(tr__buf_append(&out, "late", 4), 0);
    p.close_end(1);
    EXPECT_EQ(tr__write_some(p.fd[0], &out), TR_ECLOSED);
    EXPECT_EQ(tr__buf_avail(&out), 4u);
    tr__buf_free(&out);
    tr__buf_free(&in);
}

TEST(Frame, SetNonblock) {
    Pair p;
    ASSERT_EQ(tr__set_nonblock(p.fd[0], 1), 0);
    EXPECT_TRUE(fcntl(p.fd[0], F_GETFL) & O_NONBLOCK);
    ASSERT_EQ(tr__set_nonblock(p.fd[0], 0), 0);
    EXPECT_FALSE(fcntl(p.fd[0], F_GETFL) & O_NONBLOCK);
    EXPECT_EQ(tr__set_nonblock(-1, 1), TR_EIO); // EBADF
}

std::string temp_dir() {
    const char *base = getenv("TEST_TMPDIR");
    std::string t = std::string(base && strlen(base) < 60 ? base : "/tmp") + "/frXXXXXX";
    EXPECT_NE(mkdtemp(&t[0]), nullptr);
    return t;
}

TEST(Frame, UnixListenConnectRoundTrip) {
    std::string dir = temp_dir();
    std::string path = dir + "/s";
    int lfd = tr__unix_listen(path.c_str(), 4);
    ASSERT_GE(lfd, 0) << tr__last_error();
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    int cfd = tr__unix_connect(path.c_str());
    ASSERT_GE(cfd, 0) << tr__last_error();
    int afd = accept(lfd, nullptr, nullptr);
    ASSERT_GE(afd, 0);
    ASSERT_EQ(write_str(cfd, frame(2, 1, "hi"), 1000), 0);
    tr__buf in = TR__BUF_INIT;
    tr__frame_hdr h;
    const char *body;
    ASSERT_EQ(tr__read_frame(afd, &in, 1024, tr__deadline(1000), &h, &body), 1);
    EXPECT_EQ(std::string(body, h.len), "hi");
    tr__buf_free(&in);
    close(afd);
    close(cfd);
    close(lfd);
    unlink(path.c_str());
    rmdir(dir.c_str());
}

TEST(Frame, UnixConnectErrors) {
    std::string dir = temp_dir();
    EXPECT_EQ(tr__unix_connect((dir + "/absent").c_str()), TR_ECONNECT);
    EXPECT_NE(strstr(tr__last_error(), "absent"), nullptr) << tr__last_error();
    std::string longpath = dir + "/" + std::string(200, 'p');
    EXPECT_EQ(tr__unix_connect(longpath.c_str()), TR_EINVAL);
    EXPECT_EQ(tr__unix_listen(longpath.c_str(), 1), TR_EINVAL);
    EXPECT_EQ(tr__unix_connect(""), TR_EINVAL);
    EXPECT_EQ(tr__unix_listen("", 1), TR_EINVAL);
    EXPECT_EQ(tr__unix_listen((dir + "/no/such/dir/s").c_str(), 1), TR_ENOTFOUND);
    rmdir(dir.c_str());
}

TEST(Frame, SplitHostPort) {
    char host[16];
    int port = -1;
    EXPECT_EQ(tr__split_host_port("10.0.0.1:8080", host, sizeof host, &port), 0);
    EXPECT_STREQ(host, "10.0.0.1");
    EXPECT_EQ(port, 8080);
    EXPECT_EQ(tr__split_host_port("[::1]:0", host, sizeof host, &port), 0);
    EXPECT_STREQ(host, "::1");
    EXPECT_EQ(port, 0);
    EXPECT_EQ(tr__split_host_port("node-a:65535", host, sizeof host, &port), 0);
    EXPECT_STREQ(host, "node-a");
    EXPECT_EQ(port, 65535);
    for (const char *bad : {"", ":80", "host", "host:", "host:65536", "host:-1", "host: 80",
                            "host:80x", "averyveryverylonghost:80"}) {
        EXPECT_EQ(tr__split_host_port(bad, host, sizeof host, &port), TR_EINVAL) << bad;
        EXPECT_NE(strstr(tr__last_error(), "HOST:PORT"), nullptr) << bad;
    }
    EXPECT_EQ(tr__split_host_port(nullptr, host, sizeof host, &port), TR_EINVAL);
}

} // namespace
