/* core/http_test.cc - the node's small HTTP server: requests parsed strictly (bad ones get
 * their 4xx, never a crash), GET and HEAD only, the token or a loopback Host required, a
 * slow client timed out, connections capped; over real sockets on a libuv loop. */
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "core/http.h"
#include "core/status.h"
}

namespace {

int parse(std::string s, tr__http_req *req) {
    std::vector<char> buf(s.begin(), s.end());
    buf.push_back('\0');
    static std::vector<char> keep; /* (req's views live in it) */
    keep = buf;
    return tr__http_parse(keep.data(), s.size(), req);
}

TEST(HttpParse, AGoodRequest) {
    tr__http_req r;
    std::string req = "GET /metrics?x=1&token=abc HTTP/1.1\r\nHost: 127.0.0.1:9\r\n"
                      "Authorization: Bearer t0k\r\nAccept: */*\r\n\r\n";
    EXPECT_EQ(parse(req, &r), (int)req.size());
    EXPECT_STREQ(r.path, "/metrics");
    EXPECT_STREQ(r.query, "x=1&token=abc");
    EXPECT_STREQ(r.host, "127.0.0.1:9");
    EXPECT_STREQ(r.auth, "Bearer t0k");
    EXPECT_EQ(r.head, 0);
    char t[16];
    EXPECT_EQ(tr__http_query(r.query, "token", t, sizeof t), 1);
    EXPECT_STREQ(t, "abc");
    EXPECT_EQ(tr__http_query(r.query, "tok", t, sizeof t), 0);
    EXPECT_EQ(tr__http_query(r.query, "token", t, 3), 0) << "too long for out";
    EXPECT_EQ(parse("HEAD / HTTP/1.0\r\n\r\n", &r), 19);
    EXPECT_EQ(r.head, 1);
    EXPECT_STREQ(r.query, "");
    EXPECT_EQ(r.host, nullptr);
}

TEST(HttpParse, IncompleteWantsMore) {
    tr__http_req r;
    EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: a\r\n", &r), 0);
    EXPECT_EQ(parse("", &r), 0);
    EXPECT_EQ(parse(std::string(TR__HTTP_MAX_REQUEST, 'a'), &r), -431);
}

TEST(HttpParse, BadRequestsAreRefused) {
    tr__http_req r;
    const struct {
        const char *req;
        int want;
    } cases[] = {
        {"POST / HTTP/1.1\r\n\r\n", -405},
        {"DELETE /x HTTP/1.1\r\n\r\n", -405},
        {"GET / HTTP/2.0\r\n\r\n", -505},
        {"GET / FTP/1.1\r\n\r\n", -400},
        {"GET /\r\n\r\n", -400},
        {"GET  / HTTP/1.1\r\n\r\n", -400},
        {"GET / HTTP/1.1 x\r\n\r\n", -400},
        {"GET x HTTP/1.1\r\n\r\n", -400},
        {"G(T / HTTP/1.1\r\n\r\n", -400},
        {"GET /\x7f HTTP/1.1\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nno colon\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\n: empty name\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", -400},
    };
    for (const auto &c : cases)
        EXPECT_EQ(parse(c.req, &r), c.want) << c.req;
    std::string nul("GET / HTTP/1.1\r\nA: b\0c\r\n\r\n", 27);
    EXPECT_EQ(parse(nul, &r), -400) << "a NUL in a header";
}

TEST(HttpParse, LoopbackHosts) {
    for (const char *h :
         {"localhost", "LOCALHOST:80", "127.0.0.1", "127.9.9.9:8080", "[::1]", "[::1]:9090"})
        EXPECT_TRUE(tr__http_loopback_host(h)) << h;
    for (const char *h : {"", "evil.example", "10.0.0.1", "128.0.0.1:80", "[::2]:1", "[::1",
                          "[::1]x", "localhost.evil.example", "0.0.0.0"})
        EXPECT_FALSE(tr__http_loopback_host(h)) << h;
    EXPECT_FALSE(tr__http_loopback_host(nullptr));
}

/* A server on a loop of its own thread. */
class HttpServer : public ::testing::Test {
  protected:
    void start(const char *token, int timeout_ms = 0) {
        uv_loop_init(&loop);
        ASSERT_EQ(tr__http_create(&loop, "127.0.0.1", 0, token, handler, this, &h), 0)
            << tr__last_error();
        if (timeout_ms) tr__http_set_timeout(h, timeout_ms);
        port = tr__http_port(h);
        ASSERT_GT(port, 0);
        uv_async_init(&loop, &stop_async, [](uv_async_t *a) {
            auto *self = (HttpServer *)a->data;
            tr__http_close(self->h);
            uv_close((uv_handle_t *)a, nullptr);
        });
        stop_async.data = this;
        thread = std::thread([this] { uv_run(&loop, UV_RUN_DEFAULT); });
    }
    void TearDown() override {
        if (!thread.joinable()) return;
        uv_async_send(&stop_async);
        thread.join();
        EXPECT_EQ(uv_loop_close(&loop), 0) << "every handle closed";
    }
    static void handler(void *ctx, const tr__http_req *req, tr__http_resp *resp) {
        auto *self = (HttpServer *)ctx;
        self->served++;
        if (strcmp(req->path, "/hello") == 0) {
            resp->type = "text/plain";
            tr__buf_append(&resp->body, "hi\n", 3);
        } else {
            resp->status = 404;
        }
    }
    int connect_fd() {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in sa = {};
        sa.sin_family = AF_INET;
        sa.sin_port = htons((uint16_t)port);
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        EXPECT_EQ(connect(fd, (sockaddr *)&sa, sizeof sa), 0);
        return fd;
    }
    /* Sends req and reads the reply until the server closes (or 5 s pass). */
    std::string ask(const std::string &req) {
        int fd = connect_fd();
        EXPECT_EQ(write(fd, req.data(), req.size()), (ssize_t)req.size());
        std::string out = read_to_close(fd, 5000);
        close(fd);
        return out;
    }
    static std::string read_to_close(int fd, int ms) {
        std::string out;
        char buf[4096];
        for (;;) {
            pollfd p = {fd, POLLIN, 0};
            if (poll(&p, 1, ms) <= 0) break;
            ssize_t n = read(fd, buf, sizeof buf);
            if (n <= 0) break;
            out.append(buf, (size_t)n);
        }
        return out;
    }
    std::string get(const std::string &path, const std::string &extra = "") {
        return ask("GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\n" +
                   extra + "\r\n");
    }
    uv_loop_t loop;
    uv_async_t stop_async;
    tr__http *h = nullptr;
    int port = 0;
    std::thread thread;
    std::atomic<int> served{0};
};

TEST_F(HttpServer, ServesAndRefuses) {
    start(nullptr);
    std::string r = get("/hello");
    EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
    EXPECT_NE(r.find("Content-Length: 3\r\n"), std::string::npos) << r;
    EXPECT_NE(r.find("Connection: close\r\n"), std::string::npos) << r;
    EXPECT_EQ(r.substr(r.size() - 3), "hi\n");
    r = ask("HEAD /hello HTTP/1.1\r\nHost: localhost\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
    EXPECT_EQ(r.substr(r.size() - 4), "\r\n\r\n") << "HEAD: no body";
    EXPECT_EQ(get("/nothing").rfind("HTTP/1.1 404 ", 0), 0u);
    EXPECT_EQ(ask("POST /hello HTTP/1.1\r\nHost: localhost\r\n\r\n").rfind("HTTP/1.1 405 ", 0), 0u);
    EXPECT_EQ(ask("garbage\r\n\r\n").rfind("HTTP/1.1 400 ", 0), 0u);
    EXPECT_EQ(ask(std::string(20000, 'A')).rfind("HTTP/1.1 431 ", 0), 0u);
    /* no token: a Host beyond loopback is refused (DNS rebinding) */
    EXPECT_EQ(ask("GET /hello HTTP/1.1\r\nHost: evil.example\r\n\r\n").rfind("HTTP/1.1 403 ", 0),
              0u);
    EXPECT_EQ(ask("GET /hello HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 403 ", 0), 0u);
    /* the request may come in pieces */
    int fd = connect_fd();
    std::string req = "GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n";
    for (char c : req) {
        ASSERT_EQ(write(fd, &c, 1), 1);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    r = read_to_close(fd, 5000);
    close(fd);
    EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
}

/* The status line another user (uid 65534, in a child) gets for req; "" if it cannot
 * (not root: the test is skipped). */
std::string as_nobody(int port, const std::string &req) {
    int p[2];
    if (getuid() != 0 || pipe(p)) return "";
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        if (setgid(65534) || setuid(65534)) _exit(2);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in sa = {};
        sa.sin_family = AF_INET;
        sa.sin_port = htons((uint16_t)port);
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (sockaddr *)&sa, sizeof sa) || write(fd, req.data(), req.size()) < 0)
            _exit(3);
        char buf[64] = "";
        ssize_t n = read(fd, buf, 12); /* "HTTP/1.1 200" */
        if (n > 0 && write(p[1], buf, (size_t)n) < 0) _exit(4);
        _exit(0);
    }
    close(p[1]);
    char buf[64] = "";
    ssize_t n = read(p[0], buf, sizeof buf - 1);
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 2) return ""; /* (no uid 65534 here: a sandbox) */
    return n > 0 ? std::string(buf, (size_t)n) : "(nothing; status " + std::to_string(st) + ")";
}

TEST_F(HttpServer, AnotherUserNeedsTheToken) {
    start("s3cret");
    /* this user, on loopback: served without it */
    EXPECT_EQ(get("/hello").rfind("HTTP/1.1 200 ", 0), 0u);
    /* a request that names another host needs it too (DNS rebinding) */
    std::string evil = "GET /hello HTTP/1.1\r\nHost: evil.example\r\n";
    EXPECT_EQ(ask(evil + "\r\n").rfind("HTTP/1.1 401 ", 0), 0u);
    EXPECT_NE(ask(evil + "\r\n").find("WWW-Authenticate: Bearer"), std::string::npos);
    EXPECT_EQ(ask(evil + "Authorization: Bearer wrong\r\n\r\n").rfind("HTTP/1.1 401 ", 0), 0u);
    EXPECT_EQ(ask(evil + "Authorization: Bearer s3cre\r\n\r\n").rfind("HTTP/1.1 401 ", 0), 0u);
    EXPECT_EQ(ask(evil + "Authorization: Bearer s3cret\r\n\r\n").rfind("HTTP/1.1 200 ", 0), 0u);
    EXPECT_EQ(get("/hello?token=nope", "Host: x\r\n").rfind("HTTP/1.1 400 ", 0), 0u)
        << "(two Host headers)";
    /* another user of this machine */
    std::string plain = "GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    std::string got = as_nobody(port, plain);
    if (got.empty()) GTEST_SKIP() << "not root: cannot be another user";
    EXPECT_EQ(got, "HTTP/1.1 401");
    EXPECT_EQ(as_nobody(port, "GET /hello?token=s3cret HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
              "HTTP/1.1 200");
    EXPECT_EQ(as_nobody(port, "GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              "Authorization: Bearer s3cret\r\n\r\n"),
              "HTTP/1.1 200");
    EXPECT_EQ(as_nobody(port, "GET /hello?token=nope HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
              "HTTP/1.1 401");
    /* with a token, any Host (a node reached by its address) */
    EXPECT_EQ(ask("GET /hello HTTP/1.1\r\nHost: 10.1.2.3:9\r\nAuthorization: Bearer s3cret\r\n\r\n")
                  .rfind("HTTP/1.1 200 ", 0),
              0u);
}

TEST_F(HttpServer, ASlowClientIsTimedOut) {
    start(nullptr, 300);
    int fd = connect_fd();
    ASSERT_EQ(write(fd, "GET / HT", 8), 8);
    auto t0 = std::chrono::steady_clock::now();
    std::string r = read_to_close(fd, 5000);
    close(fd);
    EXPECT_EQ(r.rfind("HTTP/1.1 408 ", 0), 0u) << r;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
    /* one that sends nothing at all */
    fd = connect_fd();
    r = read_to_close(fd, 5000);
    close(fd);
    EXPECT_EQ(r.rfind("HTTP/1.1 408 ", 0), 0u) << r;
    EXPECT_EQ(get("/hello").rfind("HTTP/1.1 200 ", 0), 0u) << "the server goes on";
}

TEST_F(HttpServer, ConnectionsAreCapped) {
    start(nullptr, 3000);
    std::vector<int> idle;
    for (int i = 0; i < TR__HTTP_MAX_CONNS; i++)
        idle.push_back(connect_fd());
    std::this_thread::sleep_for(std::chrono::milliseconds(200)); /* (all accepted) */
    int extra = connect_fd();
    std::string r = read_to_close(extra, 2000);
    close(extra);
    EXPECT_EQ(r, "") << "closed at once";
    for (int fd : idle)
        close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(get("/hello").rfind("HTTP/1.1 200 ", 0), 0u) << "served once they went";
}

} // namespace

namespace {

TEST_F(HttpServer, WithoutATokenOnlyThisUser) {
    start(nullptr);
    EXPECT_EQ(get("/hello").rfind("HTTP/1.1 200 ", 0), 0u);
    std::string got = as_nobody(port, "GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    if (got.empty()) GTEST_SKIP() << "not root: cannot be another user";
    EXPECT_EQ(got, "HTTP/1.1 403");
}

} // namespace

namespace {

/* Another user holding connections open takes at most TR__HTTP_MAX_OTHERS slots: the rest
 * are closed at once, and the node's own user is still served meanwhile. */
TEST_F(HttpServer, OtherUsersCannotTakeEverySlot) {
    start("s3cret", 5000);
    if (getuid() != 0) GTEST_SKIP() << "not root: cannot be another user";
    int p[2], go[2];
    ASSERT_EQ(pipe(p), 0);
    ASSERT_EQ(pipe(go), 0);
    const int n = TR__HTTP_MAX_OTHERS + 14;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        close(go[1]);
        if (setgid(65534) || setuid(65534)) _exit(2);
        std::vector<int> fds;
        for (int i = 0; i < n; i++) {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            sockaddr_in sa = {};
            sa.sin_family = AF_INET;
            sa.sin_port = htons((uint16_t)port);
            sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            if (connect(fd, (sockaddr *)&sa, sizeof sa)) _exit(3);
            fds.push_back(fd);
        }
        usleep(500000);
        int closed = 0; /* (closed by the server: EOF at once) */
        for (int fd : fds) {
            pollfd q = {fd, POLLIN, 0};
            char c;
            closed += poll(&q, 1, 0) == 1 && read(fd, &c, 1) == 0;
        }
        if (write(p[1], &closed, sizeof closed) < 0) _exit(4);
        char c;
        if (read(go[0], &c, 1) < 0) _exit(5); /* (held open until the parent has asked) */
        _exit(0);
    }
    close(p[1]);
    close(go[0]);
    int closed = -1;
    ASSERT_EQ(read(p[0], &closed, sizeof closed), (ssize_t)sizeof closed);
    EXPECT_EQ(get("/hello").rfind("HTTP/1.1 200 ", 0), 0u) << "this user is served meanwhile";
    ASSERT_EQ(write(go[1], "x", 1), 1);
    int st = 0;
    waitpid(pid, &st, 0);
    close(p[0]);
    close(go[1]);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 2) GTEST_SKIP() << "no uid 65534 here";
    EXPECT_EQ(closed, n - TR__HTTP_MAX_OTHERS);
}

} // namespace
