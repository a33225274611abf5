/* core/nodeconn.c - blocking request/reply over the node's Unix socket. */
#include "core/nodeconn.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/frame.h"
#include "core/status.h"

int tr__nodeconn_open(const char *path, size_t max_msg, tr__nodeconn **out) {
    *out = NULL;
    tr__nodeconn *c = calloc(1, sizeof *c);
    if (!c) return tr__err(TR_ENOMEM, "node connection");
    int fd = tr__unix_connect(path);
    if (fd < 0) {
        free(c);
        return fd;
    }
    tr__set_nonblock(fd, 1);
    c->fd = fd;
    c->max_msg = max_msg;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return 0;
}

void tr__nodeconn_close(tr__nodeconn *c) {
    if (!c) return;
    close(c->fd);
    tr__buf_free(&c->in);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void tr__reply_free(tr__reply *r) {
    if (!r) return;
    tr__dec_free(&r->dec);
    free(r->mem);
    r->mem = NULL;
    r->root = NULL;
}

void tr__reply_begin(tr__buf *b, int rc, const char *msg, uint32_t extra) {
    tr__enc_map(b, 2 + extra);
    tr__enc_str(b, "rc");
    tr__enc_int(b, rc);
    tr__enc_str(b, "msg");
    tr__enc_str(b, msg ? msg : "");
}

size_t tr__reply_open(tr__buf *b, int rc, const char *msg) {
    size_t m = tr__enc_map_open(b);
    tr__enc_str(b, "rc");
    tr__enc_int(b, rc);
    tr__enc_str(b, "msg");
    tr__enc_str(b, msg ? msg : "");
    return m;
}

static int transport_fail(tr__nodeconn *c, int rc) {
    if (rc != TR_ETIMEDOUT) {
        c->broken = 1;
        return tr__err(TR_ECONNECT, "node service connection lost (%s)", tr__last_error());
    }
    return rc;
}

int tr__nodeconn_call(tr__nodeconn *c, uint8_t type, const tr__buf *body, int timeout_ms,
                      tr__reply *reply) {
    return tr__nodeconn_call_fd(c, type, body, timeout_ms, reply, NULL);
}

int tr__nodeconn_call_fd(tr__nodeconn *c, uint8_t type, const tr__buf *body, int timeout_ms,
                         tr__reply *reply, int *passed_fd) {
    if (passed_fd) *passed_fd = -1;
    static const char empty_map = (char)0x80;
    const char *bp = body ? body->data + body->off : &empty_map;
    size_t blen = body ? tr__buf_avail(body) : 1;
    if (reply) memset(reply, 0, sizeof *reply);
    if (body && body->oom) return tr__err(TR_ENOMEM, "encoding a request");
    int64_t deadline = tr__deadline(timeout_ms);
    pthread_mutex_lock(&c->mu);
    int rc;
    if (c->broken) {
        rc = tr__err(TR_ECONNECT, "node service connection is closed");
        goto out;
    }
    uint64_t seq = ++c->seq;
    tr__frame_hdr h = {TR__FRAME_MAGIC, TR__FRAME_VERSION, type, (uint32_t)blen, seq};
    struct iovec iov[2] = {{&h, sizeof h}, {(void *)bp, blen}};
    if ((rc = tr__write_all(c->fd, iov, 2, deadline))) {
        /* part of the frame may have gone out: the stream is unusable from here */
        c->broken = 1;
        rc = transport_fail(c, rc);
        goto out;
    }
    for (;;) {
        tr__frame_hdr rh;
        const char *rbody;
        rc = tr__read_frame_fd(c->fd, &c->in, c->max_msg, deadline, &rh, &rbody, passed_fd);
        if (rc < 0) {
            rc = transport_fail(c, rc);
            goto out;
        }
        if (rh.type != TR__MSG_REPLY || rh.seq != seq) { /* a late reply: drop it */
            tr__buf_consume(&c->in, TR__FRAME_HDR + rh.len);
            continue;
        }
        char *mem = malloc(rh.len ? rh.len : 1);
        if (!mem) {
            rc = tr__err(TR_ENOMEM, "reply of %u bytes", rh.len);
            tr__buf_consume(&c->in, TR__FRAME_HDR + rh.len);
            goto out;
        }
        memcpy(mem, rbody, rh.len);
        tr__buf_consume(&c->in, TR__FRAME_HDR + rh.len);
        /* Decode in place: a tr__dec must not be copied (its root points into it). */
        tr__dec local, *dec = reply ? &reply->dec : &local;
        if ((rc = tr__dec_init(dec, mem, rh.len))) {
            free(mem);
            goto out;
        }
        int64_t code;
        if (tr__get_int(dec->root, "rc", &code)) {
            tr__dec_free(dec);
            free(mem);
            rc = tr__err(TR_EPROTO, "node reply without rc");
            goto out;
        }
        rc = (int)code;
        if (rc != 0) {
            const char *m = "";
            size_t mn = 0;
            tr__get_str(dec->root, "msg", &m, &mn);
            tr__err(rc, "%.*s", (int)mn, m);
        }
        if (rc == 0 && reply) {
            reply->mem = mem;
            reply->mem_len = rh.len;
            reply->root = dec->root;
        } else {
            tr__dec_free(dec);
            free(mem);
        }
        goto out;
    }
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int hello(tr__nodeconn *c, const char *role, const char *exe, int owner, int timeout_ms);

int tr__nodeconn_hello(tr__nodeconn *c, const char *role, int owner, int timeout_ms) {
    char exe[4096 + PATH_MAX];
    int rc = tr__command_self(exe, sizeof exe);
    return rc ? rc : hello(c, role, exe, owner, timeout_ms);
}

int tr__nodeconn_hello_exe(tr__nodeconn *c, const char *role, const char *exe, int timeout_ms) {
    return hello(c, role, exe, 0, timeout_ms);
}

static int hello(tr__nodeconn *c, const char *role, const char *exe, int owner, int timeout_ms) {
    tr__buf b = TR__BUF_INIT;
    size_t m = tr__enc_map_open(&b);
    tr__enc_str(&b, "role");
    tr__enc_str(&b, role);
    tr__enc_str(&b, "pid");
    tr__enc_int(&b, getpid());
    tr__enc_str(&b, "exe");
    tr__enc_str(&b, exe);
    tr__enc_str(&b, "owner");
    tr__enc_int(&b, owner);
    tr__enc_map_close(&b, m);
    tr__reply r;
    int rc = tr__nodeconn_call(c, TR__MSG_HELLO, &b, timeout_ms, &r);
    tr__buf_free(&b);
    if (rc) return rc;
    uint64_t max = 0;
    if (tr__get_uint(r.root, "max_msg", &max) == 0 && max >= 4096) c->max_msg = (size_t)max;
    tr__reply_free(&r);
    return 0;
}
