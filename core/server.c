/* core/server.c - libuv Unix-socket server with frame reassembly and a handler table.
 *
 * Connection lifetime: a conn is freed when libuv has closed its pipe AND no handler holds
 * a reference (deferred replies). Close hooks run once, when the close starts.
 */
#include "core/server.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/frame.h"
#include "core/log.h"
#include "core/nodeconn.h"
#include "core/status.h"

struct tr__server {
    uv_loop_t *loop;
    uv_pipe_t listener;
    size_t max_msg;
    uint64_t next_id;
    struct {
        tr__handler_fn fn;
        void *ctx;
    } handlers[256];
    struct {
        tr__close_fn fn;
        void *ctx;
    } close_hooks[8];
    int n_close_hooks;
    tr__conn *conns;
    int closing;
};

static void conn_free_if_done(tr__conn *c) {
    if (c->closed == 2 && c->refs == 0) {
        tr__buf_free(&c->in);
        free(c->exe);
        free(c);
    }
}

void tr__conn_ref(tr__conn *c) {
    c->refs++;
}

void tr__conn_unref(tr__conn *c) {
    c->refs--;
    conn_free_if_done(c);
}

static void on_pipe_closed(uv_handle_t *h) {
    tr__conn *c = h->data;
    c->closed = 2;
    conn_free_if_done(c);
}

void tr__conn_close(tr__conn *c) {
    if (c->closed) return;
    c->closed = 1;
    tr__server *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->next = c->prev = NULL;
    c->refs++; /* hooks may take and drop references */
    for (int i = 0; i < s->n_close_hooks; i++)
        s->close_hooks[i].fn(s->close_hooks[i].ctx, c);
    c->refs--;
    uv_close((uv_handle_t *)&c->pipe, on_pipe_closed);
}

typedef struct write_req {
    uv_write_t req;
    char data[];
} write_req;

static void on_written(uv_write_t *req, int status) {
    (void)status; /* a failed write shows up as a read error/EOF on the same pipe */
    free(req);
}

static int send_frame(tr__conn *c, uint8_t type, uint64_t seq, const void *body, size_t n) {
    if (c->closed) return 0;
    write_req *w = malloc(sizeof *w + TR__FRAME_HDR + n);
    if (!w) return tr__err(TR_ENOMEM, "reply of %zu bytes", n);
    tr__frame_hdr h = {TR__FRAME_MAGIC, TR__FRAME_VERSION, type, (uint32_t)n, seq};
    memcpy(w->data, &h, sizeof h);
    if (n) memcpy(w->data + TR__FRAME_HDR, body, n);
    uv_buf_t b = uv_buf_init(w->data, (unsigned)(TR__FRAME_HDR + n));
    int r = uv_write(&w->req, (uv_stream_t *)&c->pipe, &b, 1, on_written);
    if (r) {
        free(w);
        return tr__err(TR_EIO, "uv_write: %s", uv_strerror(r));
    }
    return 0;
}

int tr__server_reply(tr__conn *c, uint64_t seq, const tr__buf *body) {
    if (body->oom) {
        tr__server_reply_status(c, seq, TR_ENOMEM, "node: out of memory encoding reply");
        return TR_ENOMEM;
    }
    return send_frame(c, TR__MSG_REPLY, seq, body->data + body->off, tr__buf_avail(body));
}

int tr__server_reply_fd(tr__conn *c, uint64_t seq, const tr__buf *body, int fd) {
    if (c->closed) return TR_ECLOSED;
    if (body->oom) return tr__err(TR_ENOMEM, "reply");
    uv_os_fd_t sock;
    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) != 0 ||
        uv_fileno((uv_handle_t *)&c->pipe, &sock) != 0)
        return tr__err(TR_EIO, "cannot pass a descriptor now: replies are queued");
    return tr__send_frame_fd(sock, TR__MSG_REPLY, seq, body->data + body->off, tr__buf_avail(body),
                             fd);
}

void tr__server_reply_status(tr__conn *c, uint64_t seq, int rc, const char *msg) {
    tr__buf b = TR__BUF_INIT;
    tr__reply_begin(&b, rc, msg, 0);
    if (!b.oom) send_frame(c, TR__MSG_REPLY, seq, b.data, b.len);
    tr__buf_free(&b);
}

static void on_hello(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    (void)ctx;
    const char *role;
    size_t n;
    if (tr__get_str(body, "role", &role, &n)) {
        tr__server_reply_status(c, seq, TR_EPROTO, tr__last_error());
        return;
    }
    if (n == 6 && memcmp(role, "driver", 6) == 0)
        c->role = TR__PEER_DRIVER;
    else if (n == 6 && memcmp(role, "worker", 6) == 0)
        c->role = TR__PEER_WORKER;
    else if (n == 3 && memcmp(role, "cli", 3) == 0)
        c->role = TR__PEER_CLI;
    else {
        tr__server_reply_status(c, seq, TR_EINVAL, "hello: unknown role");
        return;
    }
    free(c->exe);
    c->exe = NULL;
    if (tr__obj_get(body, "exe") && tr__get_strdup(body, "exe", &c->exe)) {
        tr__server_reply_status(c, seq, TR_EPROTO, tr__last_error());
        return;
    }
    /* (a HELLO's "owner" is ignored: an embedded node belongs to the process that spawned
     * it, watched with a pidfd - api/node.c - never to a connection that says so) */
    tr__buf b = TR__BUF_INIT;
    size_t m = tr__reply_open(&b, 0, NULL);
    tr__enc_str(&b, "pid");
    tr__enc_int(&b, getpid());
    tr__enc_str(&b, "max_msg"); /* one message limit per node: clients adopt it */
    tr__enc_uint(&b, c->srv->max_msg);
    tr__enc_map_close(&b, m);
    tr__server_reply(c, seq, &b);
    tr__buf_free(&b);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *out) {
    tr__conn *c = h->data;
    (void)suggested;
    if (tr__buf_reserve(&c->in, 64 << 10)) {
        *out = uv_buf_init(NULL, 0);
        return;
    }
    *out = uv_buf_init(c->in.data + c->in.len, (unsigned)(c->in.cap - c->in.len));
}

static void dispatch(tr__conn *c) {
    tr__server *s = c->srv;
    c->refs++; /* a handler may close c */
    while (!c->closed) {
        tr__frame_hdr h;
        const char *body;
        int rc = tr__frame_parse(&c->in, s->max_msg, &h, &body);
        if (rc == 0) break;
        if (rc < 0) {
            TR_LOG_WARN_LIMITED("NODE-BADFRAME", "closing connection from pid %d: %s", (int)c->pid,
                                tr__last_error());
            if (rc == TR_EMSGSIZE) tr__server_reply_status(c, h.seq, rc, tr__last_error());
            tr__conn_close(c);
            break;
        }
        tr__dec d;
        rc = tr__dec_init(&d, body, h.len);
        if (rc == 0 && tr__obj_type(d.root) != TR__T_MAP) {
            tr__dec_free(&d);
            rc = tr__err(TR_EPROTO, "message body is not a map");
        }
        if (rc) {
            TR_LOG_WARN_LIMITED("NODE-BADMSG", "type %u from pid %d: %s", h.type, (int)c->pid,
                                tr__last_error());
            tr__server_reply_status(c, h.seq, rc, tr__last_error());
            tr__buf_consume(&c->in, TR__FRAME_HDR + h.len);
            continue;
        }
        if (s->handlers[h.type].fn)
            s->handlers[h.type].fn(s->handlers[h.type].ctx, c, h.seq, d.root);
        else
            tr__server_reply_status(c, h.seq, TR_EPROTO, "node: unknown message type");
        tr__dec_free(&d);
        tr__buf_consume(&c->in, TR__FRAME_HDR + h.len);
    }
    tr__conn_unref(c);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
    tr__conn *c = stream->data;
    (void)buf;
    if (nread < 0) {
        if (nread != UV_EOF)
            TR_LOG_DEBUG("NODE-READ", "pid %d: %s", (int)c->pid, uv_strerror((int)nread));
        tr__conn_close(c);
        return;
    }
    if (nread == 0) {
        if (c->in.oom) tr__conn_close(c);
        return;
    }
    c->in.len += (size_t)nread;
    dispatch(c);
}

static void on_connection(uv_stream_t *listener, int status) {
    tr__server *s = listener->data;
    if (status < 0 || s->closing) return;
    tr__conn *c = calloc(1, sizeof *c);
    if (!c) return;
    c->srv = s;
    c->id = ++s->next_id;
    c->store_client = -1;
    uv_pipe_init(s->loop, &c->pipe, 0);
    c->pipe.data = c;
    if (uv_accept(listener, (uv_stream_t *)&c->pipe) != 0) {
        c->closed = 1;
        uv_close((uv_handle_t *)&c->pipe, on_pipe_closed);
        return;
    }
    uv_os_fd_t fd;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        c->pid = cred.pid;
        if (cred.uid != getuid()) { /* the 0700 directory should make this impossible */
            TR_LOG_WARN_LIMITED("NODE-UID", "refusing uid %d", (int)cred.uid);
            c->closed = 1;
            uv_close((uv_handle_t *)&c->pipe, on_pipe_closed);
            return;
        }
    }
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
}

int tr__server_create(uv_loop_t *loop, const char *path, size_t max_msg, tr__server **out) {
    *out = NULL;
    tr__server *s = calloc(1, sizeof *s);
    if (!s) return tr__err(TR_ENOMEM, "server");
    s->loop = loop;
    s->max_msg = max_msg;
    int fd = tr__unix_listen(path, 128);
    if (fd < 0) {
        free(s);
        return fd;
    }
    uv_pipe_init(loop, &s->listener, 0);
    s->listener.data = s;
    int r = uv_pipe_open(&s->listener, fd);
    if (r == 0) r = uv_listen((uv_stream_t *)&s->listener, 128, on_connection);
    if (r) {
        close(fd);
        free(s);
        return tr__err(TR_EIO, "listen on %s: %s", path, uv_strerror(r));
    }
    tr__server_on(s, TR__MSG_HELLO, on_hello, NULL);
    *out = s;
    return 0;
}

void tr__server_on(tr__server *s, uint8_t type, tr__handler_fn fn, void *ctx) {
    s->handlers[type].fn = fn;
    s->handlers[type].ctx = ctx;
}

void tr__server_on_close(tr__server *s, tr__close_fn fn, void *ctx) {
    if (s->n_close_hooks == 8) return;
    s->close_hooks[s->n_close_hooks].fn = fn;
    s->close_hooks[s->n_close_hooks].ctx = ctx;
    s->n_close_hooks++;
}

size_t tr__server_max_msg(const tr__server *s) {
    return s->max_msg;
}

uv_loop_t *tr__server_loop(tr__server *s) {
    return s->loop;
}

static void on_listener_closed(uv_handle_t *h) {
    free(h->data);
}

void tr__server_close(tr__server *s) {
    if (s->closing) return;
    s->closing = 1;
    while (s->conns)
        tr__conn_close(s->conns);
    uv_close((uv_handle_t *)&s->listener, on_listener_closed);
}
