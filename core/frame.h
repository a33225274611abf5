/* core/frame.h - IPC framing over Unix stream sockets, and blocking socket helpers.
 *
 * A frame is a 16-byte header followed by `len` body bytes (msgpack, or a call's raw
 * arguments after a msgpack prefix). Same-host only: fields are in host byte order.
 * Every receiver checks magic, version and len against its own limit before buffering a
 * body, so malformed or oversized input is rejected, never trusted.
 *
 * Message type numbers are split by layer so each layer owns its own range.
 */
#ifndef TR_CORE_FRAME_H
#define TR_CORE_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core/buf.h"

#define TR__FRAME_MAGIC 0x5254u /* "TR" */
#define TR__FRAME_VERSION 1
#define TR__FRAME_HDR 16
#define TR__DEFAULT_MAX_MSG (64u << 20)

typedef struct tr__frame_hdr {
    uint16_t magic;
    uint8_t version;
    uint8_t type;
    uint32_t len;
    uint64_t seq;
} tr__frame_hdr;

/* Type ranges: core 1..31, objectstore 32..63, actor 64..95, collective 96..127,
 * dag 128..159. TR__MSG_REPLY answers any request, with the request's seq. */
enum {
    TR__MSG_REPLY = 1,
    TR__MSG_HELLO = 2,    /* {role, pid, exe, owner}: a process introduces itself */
    TR__MSG_KV_PUT = 3,   /* {key, value} */
    TR__MSG_KV_GET = 4,   /* {key} -> {value} */
    TR__MSG_KV_DEL = 5,   /* {key} */
    TR__MSG_STATUS = 6,   /* {} -> {json} */
    TR__MSG_SHUTDOWN = 7, /* {} */
    /* {op: put|get|del|del_prefix, key, value?}: the cluster's KV store, on its head
     * (get -> {value}; a node in no cluster: TR_ESTATE) */
    TR__MSG_CLUSTER_KV = 8,
    /* {address: "IP:port"} -> {lost: 0/1}: whether the cluster's head counts that node lost
     * (0 where this node is in no cluster, or its head is out of reach) */
    TR__MSG_NODE_LOST = 9,
    /* {path, query} -> {status, json}: the node's /api/v1 (api/node/lists.h), for the CLI */
    TR__MSG_API = 10,
    TR__MSG_CORE_MAX = 31,
};

/* Checks a header. Returns 0, TR_EPROTO (bad magic/version), TR_EMSGSIZE (len > max). */
int tr__frame_check(const tr__frame_hdr *h, size_t max_len);

/* If buf holds a whole frame at its front: checks it, sets *h and *body (a view into buf)
 * and returns 1; returns 0 if more bytes are needed; or a negative code for a bad header.
 * The caller consumes TR__FRAME_HDR + h->len bytes when done with the body. */
int tr__frame_parse(const tr__buf *buf, size_t max_len, tr__frame_hdr *h, const char **body);

/* Appends a header for a body of body_len bytes. */
int tr__frame_put_hdr(tr__buf *b, uint8_t type, uint64_t seq, size_t body_len);

/* Writes all iovecs to a (possibly non-blocking) fd, waiting with poll(2) until deadline.
 * Uses MSG_NOSIGNAL. Returns 0, TR_ETIMEDOUT, TR_ECLOSED (peer gone), TR_EIO. */
int tr__write_all(int fd, struct iovec *iov, int iovcnt, int64_t deadline);

/* Reads exactly n bytes from a socket (blocking or not) by the deadline: one deadline for
 * all of them, however they trickle in. Returns 0, TR_ETIMEDOUT, TR_ECLOSED (EOF or reset),
 * TR_EIO. */
int tr__read_all(int fd, void *p, size_t n, int64_t deadline);

/* Reads into buf until a whole frame is there or the deadline passes.
 * Returns 1 (frame ready: see tr__frame_parse), TR_ETIMEDOUT, TR_ECLOSED (EOF), TR_EPROTO,
 * TR_EMSGSIZE, TR_EIO. */
int tr__read_frame(int fd, tr__buf *buf, size_t max_len, int64_t deadline, tr__frame_hdr *h,
                   const char **body);

/* Same, and if the peer passed a file descriptor (SCM_RIGHTS) with the bytes read, sets
 * *passed_fd to it (the caller owns it; extra descriptors are closed). *passed_fd is left
 * alone when none came. */
int tr__read_frame_fd(int fd, tr__buf *buf, size_t max_len, int64_t deadline, tr__frame_hdr *h,
                      const char **body, int *passed_fd);

/* Sends one whole frame and a file descriptor with it (SCM_RIGHTS), without blocking:
 * TR_EIO if the socket would block or took only part of it. */
int tr__send_frame_fd(int fd, uint8_t type, uint64_t seq, const void *body, size_t n,
                      int passed_fd);

/* Reads what is available without blocking (fd must be O_NONBLOCK) into buf.
 * Returns bytes read (>0), 0 when nothing was available, TR_ECLOSED on EOF, TR_EIO. */
int tr__read_some(int fd, tr__buf *buf);
/* The same, keeping a descriptor passed with the bytes (SCM_RIGHTS) in *passed_fd if it
 * is -1 (the caller owns it), closing any other. */
int tr__read_some_fd(int fd, tr__buf *buf, int *passed_fd);

/* Writes what buf holds to a non-blocking socket until it would block (MSG_NOSIGNAL |
 * MSG_DONTWAIT), consuming what went; the rest stays in buf (the caller waits for
 * EPOLLOUT while tr__buf_avail says there is some). Returns 0, or TR_ECLOSED (the peer
 * closed or reset) or TR_EIO: the connection is done. The twin of tr__read_some. */
int tr__write_some(int fd, tr__buf *buf);

/* Connects a blocking Unix stream socket to path. Returns the fd or a negative code
 * (TR_ECONNECT with the path in the message, TR_EINVAL if the path is too long). */
int tr__unix_connect(const char *path);
/* Same, but never blocks: the socket is O_NONBLOCK and a full listen backlog gives
 * TR_ECONNECT at once (Unix-domain connects complete or fail immediately). */
int tr__unix_connect_nb(const char *path);
/* Creates a listening Unix socket at path (mode 0600, close-on-exec). Returns fd or code. */
int tr__unix_listen(const char *path, int backlog);
int tr__set_nonblock(int fd, int on);
/* Splits "HOST:PORT" (HOST a name, an IPv4 literal or a [IPv6] one, its brackets dropped)
 * into host (cap bytes) and *port (0..65535). Returns 0 or TR_EINVAL. */
int tr__split_host_port(const char *s, char *host, size_t cap, int *port);

#endif
