/* core/frame.c - frame headers and the blocking/non-blocking socket helpers. */
#include "core/frame.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/status.h"

_Static_assert(sizeof(tr__frame_hdr) == TR__FRAME_HDR, "frame header layout");

int tr__frame_check(const tr__frame_hdr *h, size_t max_len) {
    if (h->magic != TR__FRAME_MAGIC)
        return tr__err(TR_EPROTO, "bad frame magic 0x%04x (not a troupe peer?)", h->magic);
    if (h->version != TR__FRAME_VERSION)
        return tr__err(TR_EPROTO, "frame version %u, this build speaks %u", h->version,
                       TR__FRAME_VERSION);
    if (h->len > max_len)
        return tr__err(TR_EMSGSIZE,
                       "frame of %u bytes exceeds the limit of %zu (set "
                       "max_message_bytes to raise it)",
                       h->len, max_len);
    return 0;
}

int tr__frame_parse(const tr__buf *buf, size_t max_len, tr__frame_hdr *h, const char **body) {
    size_t avail = tr__buf_avail(buf);
    if (avail < TR__FRAME_HDR) return 0;
    memcpy(h, buf->data + buf->off, TR__FRAME_HDR);
    int rc = tr__frame_check(h, max_len);
    if (rc) return rc;
    if (avail < TR__FRAME_HDR + (size_t)h->len) return 0;
    *body = buf->data + buf->off + TR__FRAME_HDR;
    return 1;
}

int tr__frame_put_hdr(tr__buf *b, uint8_t type, uint64_t seq, size_t body_len) {
    if (body_len > UINT32_MAX) return tr__err(TR_EMSGSIZE, "body of %zu bytes", body_len);
    tr__frame_hdr h = {TR__FRAME_MAGIC, TR__FRAME_VERSION, type, (uint32_t)body_len, seq};
    return tr__buf_append(b, &h, sizeof h);
}

static int wait_fd(int fd, short events, int64_t deadline) {
    for (;;) {
        struct pollfd p = {fd, events, 0};
        int ms = tr__ms_left(deadline);
        int r = poll(&p, 1, ms);
        if (r > 0) return 0;
        if (r == 0) return tr__err(TR_ETIMEDOUT, "socket wait timed out");
        if (errno != EINTR) return tr__err_errno(errno, "poll");
    }
}

int tr__write_all(int fd, struct iovec *iov, int iovcnt, int64_t deadline) {
    while (iovcnt > 0) {
        struct msghdr m = {0};
        m.msg_iov = iov;
        m.msg_iovlen = (size_t)iovcnt;
        ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) {
                int rc = wait_fd(fd, POLLOUT, deadline);
                if (rc) return rc;
                continue;
            }
            if (errno == EPIPE || errno == ECONNRESET)
                return tr__err(TR_ECLOSED, "peer closed the connection");
            return tr__err_errno(errno, "sendmsg");
        }
        while (iovcnt > 0 && (size_t)n >= iov->iov_len) {
            n -= (ssize_t)iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt > 0) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= (size_t)n;
        }
    }
    return 0;
}

int tr__read_all(int fd, void *p, size_t n, int64_t deadline) {
    for (size_t got = 0; got < n;) {
        ssize_t k = recv(fd, (char *)p + got, n - got, MSG_DONTWAIT);
        if (k > 0) {
            got += (size_t)k;
        } else if (k == 0) {
            return tr__err(TR_ECLOSED, "peer closed the connection");
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = wait_fd(fd, POLLIN, deadline); /* one deadline for all of it */
            if (rc) return rc;
        } else if (errno != EINTR) {
            return errno == ECONNRESET ? tr__err(TR_ECLOSED, "peer reset the connection")
                                       : tr__err_errno(errno, "recv");
        }
    }
    return 0;
}

static ssize_t recv_fd(int fd, void *p, size_t n, int *passed_fd);

int tr__read_some(int fd, tr__buf *buf) {
    return tr__read_some_fd(fd, buf, NULL);
}

int tr__read_some_fd(int fd, tr__buf *buf, int *passed_fd) {
    int total = 0;
    for (;;) {
        if (tr__buf_reserve(buf, 64 << 10)) return TR_ENOMEM;
        ssize_t n = recv_fd(fd, buf->data + buf->len, buf->cap - buf->len, passed_fd);
        if (n > 0) {
            buf->len += (size_t)n;
            total += (int)n;
            if ((size_t)n < 16384) return total; /* drained, most likely */
            continue;
        }
        if (n == 0) return total > 0 ? total : tr__err(TR_ECLOSED, "peer closed the connection");
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return total;
        if (errno == ECONNRESET) return tr__err(TR_ECLOSED, "connection reset by peer");
        return tr__err_errno(errno, "recv");
    }
}

int tr__write_some(int fd, tr__buf *buf) {
    while (tr__buf_avail(buf)) {
        ssize_t n = send(fd, buf->data + buf->off, tr__buf_avail(buf), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            tr__buf_consume(buf, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (n < 0 && errno != EPIPE && errno != ECONNRESET) return tr__err_errno(errno, "send");
        return tr__err(TR_ECLOSED, "peer closed the connection");
    }
    return 0;
}

/* recv, or recvmsg collecting a passed descriptor when passed_fd is not NULL. */
static ssize_t recv_fd(int fd, void *p, size_t n, int *passed_fd) {
    if (!passed_fd) return recv(fd, p, n, MSG_DONTWAIT);
    struct iovec iov = {p, n};
    union {
        struct cmsghdr c;
        char b[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl.b;
    m.msg_controllen = sizeof ctl.b;
    ssize_t r = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r < 0) return r;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int fds[4];
        memcpy(fds, CMSG_DATA(c), (k > 4 ? 4 : k) * sizeof(int));
        for (size_t i = 0; i < k && i < 4; i++) {
            if (*passed_fd < 0)
                *passed_fd = fds[i];
            else
                close(fds[i]);
        }
    }
    return r;
}

int tr__read_frame(int fd, tr__buf *buf, size_t max_len, int64_t deadline, tr__frame_hdr *h,
                   const char **body) {
    return tr__read_frame_fd(fd, buf, max_len, deadline, h, body, NULL);
}

int tr__send_frame_fd(int fd, uint8_t type, uint64_t seq, const void *body, size_t n,
                      int passed_fd) {
    tr__frame_hdr h = {TR__FRAME_MAGIC, TR__FRAME_VERSION, type, (uint32_t)n, seq};
    struct iovec iov[2] = {{&h, sizeof h}, {(void *)body, n}};
    union {
        struct cmsghdr c;
        char b[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr m = {0};
    m.msg_iov = iov;
    m.msg_iovlen = 2;
    m.msg_control = ctl.b;
    m.msg_controllen = sizeof ctl.b;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &passed_fd, sizeof(int));
    ssize_t r = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r != (ssize_t)(sizeof h + n))
        return tr__err(TR_EIO, "sending a descriptor: %s", r < 0 ? strerror(errno) : "short write");
    return 0;
}

int tr__read_frame_fd(int fd, tr__buf *buf, size_t max_len, int64_t deadline, tr__frame_hdr *h,
                      const char **body, int *passed_fd) {
    for (;;) {
        int rc = tr__frame_parse(buf, max_len, h, body);
        if (rc != 0) return rc;
        size_t want = 64 << 10;
        if (tr__buf_avail(buf) >= TR__FRAME_HDR) {
            tr__frame_hdr hh;
            memcpy(&hh, buf->data + buf->off, sizeof hh);
            want = TR__FRAME_HDR + hh.len - tr__buf_avail(buf);
        }
        if (tr__buf_reserve(buf, want)) return TR_ENOMEM;
        ssize_t n = recv_fd(fd, buf->data + buf->len, buf->cap - buf->len, passed_fd);
        if (n > 0) {
            buf->len += (size_t)n;
            continue;
        }
        if (n == 0) return tr__err(TR_ECLOSED, "peer closed the connection");
        if (errno == EINTR) continue;
        if (errno == ECONNRESET) return tr__err(TR_ECLOSED, "connection reset by peer");
        if (errno != EAGAIN) return tr__err_errno(errno, "recv");
        rc = wait_fd(fd, POLLIN, deadline);
        if (rc) return rc;
    }
}

static int fill_addr(struct sockaddr_un *a, const char *path) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof a->sun_path)
        return tr__err(TR_EINVAL,
                       "socket path '%s' is empty or longer than %zu bytes "
                       "(set tmpdir to a shorter directory)",
                       path, sizeof a->sun_path - 1);
    memcpy(a->sun_path, path, n);
    return 0;
}

static int connect_flags(const char *path, int flags) {
    struct sockaddr_un a;
    int rc = fill_addr(&a, path);
    if (rc) return rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
    if (fd < 0) return tr__err_errno(errno, "socket");
    while (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (errno == EINTR) continue;
        int e = errno;
        close(fd);
        tr__err_errno(e, "connect to '%s'", path);
        return TR_ECONNECT;
    }
    return fd;
}

int tr__unix_connect(const char *path) {
    return connect_flags(path, 0);
}

int tr__unix_connect_nb(const char *path) {
    return connect_flags(path, SOCK_NONBLOCK);
}

int tr__unix_listen(const char *path, int backlog) {
    struct sockaddr_un a;
    int rc = fill_addr(&a, path);
    if (rc) return rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return tr__err_errno(errno, "socket");
    unlink(path);
    /* The directory is 0700 already; 0600 on the socket is a second fence. chmod, not
     * umask: umask is process-wide and other threads may be creating files. */
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || chmod(path, 0600) != 0 ||
        listen(fd, backlog) != 0) {
        int e = errno;
        close(fd);
        return tr__err_errno(e, "bind/listen on '%s'", path);
    }
    return fd;
}

int tr__set_nonblock(int fd, int on) {
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0) return tr__err_errno(errno, "fcntl");
    fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
    if (fcntl(fd, F_SETFL, fl) != 0) return tr__err_errno(errno, "fcntl");
    return 0;
}

int tr__split_host_port(const char *s, char *host, size_t cap, int *port) {
    const char *colon = s ? strrchr(s, ':') : NULL, *h = s;
    size_t hn = colon ? (size_t)(colon - s) : 0;
    char *end = NULL;
    long p = colon && colon[1] >= '0' && colon[1] <= '9' ? strtol(colon + 1, &end, 10) : -1;
    if (hn > 2 && s[0] == '[' && s[hn - 1] == ']') { /* [IPv6] */
        h++;
        hn -= 2;
    }
    if (hn == 0 || hn >= cap || p < 0 || p > 65535 || *end)
        return tr__err(TR_EINVAL, "'%s' is not HOST:PORT", s ? s : "(null)");
    memcpy(host, h, hn);
    host[hn] = '\0';
    *port = (int)p;
    return 0;
}
