/* core/http.c - the node's small HTTP server (core/http.h). */
#include "core/http.h"

#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/log.h"
#include "core/status.h"

typedef struct hconn hconn;

struct tr__http {
    uv_tcp_t listener;
    uv_loop_t *loop;
    tr__http_handler fn;
    void *ctx;
    char *token; /* NULL: none */
    int port;
    int timeout_ms;
    int n_conns;
    int n_others; /* of them, not this user's on loopback */
    int closing;
    hconn *conns;
};

struct hconn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t wr;
    tr__http *h;
    hconn *next, *prev;
    int handles;   /* open libuv handles: freed at 0 */
    int done;      /* answered (or being closed): input is ignored */
    int same_user; /* a loopback peer of this process's uid (/proc/net/tcp) */
    size_t len;
    tr__buf out;
    char in[TR__HTTP_MAX_REQUEST + 1];
};

/* ---- parsing ---------------------------------------------------------------------- */

static int is_tchar(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

int tr__http_parse(char *buf, size_t n, tr__http_req *req) {
    memset(req, 0, sizeof *req);
    char *end = NULL;
    for (size_t i = 0; i + 3 < n && i + 4 <= TR__HTTP_MAX_REQUEST; i++)
        if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n') {
            end = buf + i;
            break;
        }
    if (!end) return n >= TR__HTTP_MAX_REQUEST ? -431 : 0;
    int head_len = (int)(end - buf) + 4;
    *end = '\0';
    for (char *p = buf; p < end; p++) /* no NUL or other controls but CR LF TAB */
        if ((unsigned char)*p < 0x20 && *p != '\r' && *p != '\n' && *p != '\t') return -400;
    char *line_end = strstr(buf, "\r\n");
    if (line_end) *line_end = '\0';
    /* the request line: METHOD SP target SP HTTP/1.x */
    char *sp1 = strchr(buf, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (!sp1 || !sp2 || strchr(sp2 + 1, ' ')) return -400;
    *sp1 = *sp2 = '\0';
    for (char *p = buf; *p; p++)
        if (!is_tchar((unsigned char)*p)) return -400;
    const char *version = sp2 + 1;
    if (strncmp(version, "HTTP/", 5) != 0) return -400;
    if (strcmp(version, "HTTP/1.1") != 0 && strcmp(version, "HTTP/1.0") != 0) return -505;
    char *target = sp1 + 1;
    if (target[0] != '/') return -400;
    for (char *p = target; *p; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f) return -400;
    if (strcmp(buf, "GET") == 0)
        req->head = 0;
    else if (strcmp(buf, "HEAD") == 0)
        req->head = 1;
    else
        return -405;
    char *q = strchr(target, '?');
    if (q) *q = '\0';
    char *hash = strchr(q ? q + 1 : target, '#');
    if (hash) *hash = '\0';
    req->path = target;
    req->query = q ? q + 1 : "";
    /* header lines: Name: value */
    for (char *line = line_end ? line_end + 2 : end; line < end;) {
        char *eol = strstr(line, "\r\n");
        if (eol) *eol = '\0';
        if (*line == ' ' || *line == '\t') return -400; /* (obsolete line folding) */
        char *colon = strchr(line, ':');
        if (!colon || colon == line) return -400;
        *colon = '\0';
        for (char *p = line; *p; p++)
            if (!is_tchar((unsigned char)*p)) return -400;
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        for (char *t = v + strlen(v); t > v && (t[-1] == ' ' || t[-1] == '\t');)
            *--t = '\0';
        if (strcasecmp(line, "Host") == 0) {
            if (req->host) return -400;
            req->host = v;
        } else if (strcasecmp(line, "Authorization") == 0) {
            if (req->auth) return -400;
            req->auth = v;
        } else if (strcasecmp(line, "Transfer-Encoding") == 0 ||
                   (strcasecmp(line, "Content-Length") == 0 && strcmp(v, "0") != 0)) {
            return -400; /* (no request has a body here) */
        }
        line = eol ? eol + 2 : end;
    }
    return head_len;
}

int tr__http_query(const char *query, const char *key, char *out, size_t cap) {
    size_t kn = strlen(key);
    for (const char *at = query; at && *at;) {
        const char *amp = strchr(at, '&');
        size_t len = amp ? (size_t)(amp - at) : strlen(at);
        if (len > kn && strncmp(at, key, kn) == 0 && at[kn] == '=') {
            size_t vn = len - kn - 1;
            if (vn + 1 > cap) return 0;
            memcpy(out, at + kn + 1, vn);
            out[vn] = '\0';
            return 1;
        }
        at = amp ? amp + 1 : NULL;
    }
    return 0;
}

int tr__http_loopback_host(const char *host) {
    if (!host) return 0;
    char name[256];
    size_t n = strlen(host);
    if (n == 0 || n >= sizeof name) return 0;
    memcpy(name, host, n + 1);
    if (name[0] == '[') { /* [v6]:port */
        char *close = strchr(name, ']');
        if (!close || (close[1] && close[1] != ':')) return 0;
        *close = '\0';
        struct in6_addr a6;
        return inet_pton(AF_INET6, name + 1, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
    }
    char *colon = strchr(name, ':');
    if (colon) *colon = '\0';
    if (strcasecmp(name, "localhost") == 0) return 1;
    struct in_addr a4;
    return inet_pton(AF_INET, name, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

/* ---- the server ------------------------------------------------------------------- */

static const char *reason(int status) {
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Error";
    }
}

static void on_handle_closed(uv_handle_t *hd) {
    hconn *c = hd->data;
    if (--c->handles > 0) return;
    tr__buf_free(&c->out);
    free(c);
}

static void conn_close(hconn *c) {
    if (c->handles == 0 || uv_is_closing((uv_handle_t *)&c->tcp)) return;
    tr__http *h = c->h;
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    h->n_conns--;
    h->n_others -= !c->same_user;
    c->done = 1;
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

static void on_written(uv_write_t *wr, int status) {
    (void)status;
    conn_close(wr->data);
}

/* Sends the response and closes the connection once it is out. */
static void respond(hconn *c, int status, const char *type, const char *extra, const void *body,
                    size_t len, int head) {
    c->done = 1;
    uv_read_stop((uv_stream_t *)&c->tcp);
    char hdr[600];
    int k = snprintf(hdr, sizeof hdr,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\nCache-Control: no-store\r\n"
                     "X-Content-Type-Options: nosniff\r\n%s\r\n",
                     status, reason(status), type ? type : "text/plain; charset=utf-8", len,
                     extra ? extra : "");
    tr__buf_reset(&c->out);
    tr__buf_append(&c->out, hdr, (size_t)k);
    if (!head && len) tr__buf_append(&c->out, body, len);
    if (c->out.oom) {
        conn_close(c);
        return;
    }
    uv_buf_t b = uv_buf_init(c->out.data + c->out.off, (unsigned)tr__buf_avail(&c->out));
    c->wr.data = c;
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0) conn_close(c);
}

static void respond_error(hconn *c, int status, const char *extra) {
    char body[120];
    int k = snprintf(body, sizeof body, "%d %s\n", status, reason(status));
    respond(c, status, NULL, extra, body, (size_t)k, 0);
}

/* Constant-time comparison of a presented token with ours. */
static int token_matches(const char *given, const char *want) {
    size_t gn = strlen(given), wn = strlen(want);
    unsigned char d = gn != wn;
    for (size_t i = 0; i < wn; i++)
        d |= (unsigned char)(want[i] ^ (i < gn ? given[i] : 0));
    return d == 0;
}

/* The token, or this user on loopback asking for a loopback host (a web page elsewhere
 * cannot then use the user's browser through DNS rebinding). */
static int allowed(const tr__http *h, const hconn *c, const tr__http_req *req) {
    if (h->token && req->auth && strncasecmp(req->auth, "Bearer ", 7) == 0 &&
        token_matches(req->auth + 7, h->token))
        return 1;
    char t[256];
    if (h->token && tr__http_query(req->query, "token", t, sizeof t) && token_matches(t, h->token))
        return 1;
    return c->same_user && tr__http_loopback_host(req->host);
}

int tr__http_peer_uid(const struct sockaddr_in *peer, const struct sockaddr_in *self) {
    FILE *f = fopen("/proc/net/tcp", "r");
    if (!f) return -1;
    char line[512];
    int uid = -1;
    while (uid < 0 && fgets(line, sizeof line, f)) {
        unsigned la, lp, ra, rp, u;
        /* "sl: local rem st tx:rx tr:when retrnsmt uid ...": the peer's own socket has our
         * end as its remote */
        if (sscanf(line, " %*u: %8X:%X %8X:%X %*X %*X:%*X %*X:%*X %*X %u", &la, &lp, &ra, &rp,
                   &u) != 5)
            continue;
        if (la == peer->sin_addr.s_addr && lp == ntohs(peer->sin_port) &&
            ra == self->sin_addr.s_addr && rp == ntohs(self->sin_port))
            uid = (int)u;
    }
    fclose(f);
    return uid;
}

/* Whether the peer of t is a process of this user on loopback (IPv4). */
static int peer_is_us(uv_tcp_t *t) {
    struct sockaddr_storage p, s;
    int pl = sizeof p, sl = sizeof s;
    if (uv_tcp_getpeername(t, (struct sockaddr *)&p, &pl) ||
        uv_tcp_getsockname(t, (struct sockaddr *)&s, &sl) || p.ss_family != AF_INET ||
        s.ss_family != AF_INET)
        return 0;
    const struct sockaddr_in *peer = (const struct sockaddr_in *)&p;
    if ((ntohl(peer->sin_addr.s_addr) >> 24) != 127) return 0;
    int uid = tr__http_peer_uid(peer, (const struct sockaddr_in *)&s);
    return uid >= 0 && (uid_t)uid == getuid();
}

static void serve(hconn *c) {
    tr__http_req req;
    int r = tr__http_parse(c->in, c->len, &req);
    if (r == 0) return; /* (more to come) */
    if (r < 0) {
        respond_error(c, -r, -r == 405 ? "Allow: GET, HEAD\r\n" : NULL);
        return;
    }
    tr__http *h = c->h;
    if (!allowed(h, c, &req)) {
        if (h->token)
            respond_error(c, 401, "WWW-Authenticate: Bearer realm=\"troupe\"\r\n");
        else
            respond_error(c, 403, NULL); /* (another user, or not a loopback Host) */
        return;
    }
    tr__http_resp resp = {200, NULL, TR__BUF_INIT};
    h->fn(h->ctx, &req, &resp);
    if (resp.body.oom) {
        tr__buf_free(&resp.body);
        respond_error(c, 503, NULL);
        return;
    }
    if (resp.status != 200 && resp.body.len == 0) {
        tr__buf_free(&resp.body);
        respond_error(c, resp.status, NULL);
        return;
    }
    respond(c, resp.status, resp.type, NULL, resp.body.data + resp.body.off,
            tr__buf_avail(&resp.body), req.head);
    tr__buf_free(&resp.body);
}

static void on_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *b) {
    (void)suggested;
    hconn *c = hd->data;
    size_t room = TR__HTTP_MAX_REQUEST - c->len;
    *b = uv_buf_init(c->in + c->len, (unsigned)room);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
    (void)b;
    hconn *c = s->data;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (c->done || nread == 0) return;
    c->len += (size_t)nread;
    c->in[c->len] = '\0';
    serve(c);
}

static void on_timeout(uv_timer_t *t) {
    hconn *c = t->data;
    if (c->done)
        conn_close(c); /* (a reply the peer never reads) */
    else
        respond_error(c, 408, NULL);
}

static void on_connection(uv_stream_t *server, int status) {
    tr__http *h = server->data;
    if (status < 0 || h->closing) return;
    hconn *c = calloc(1, sizeof *c);
    if (!c) return;
    c->h = h;
    c->out = (tr__buf)TR__BUF_INIT;
    uv_tcp_init(h->loop, &c->tcp);
    c->tcp.data = c;
    c->handles = 1;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0 || h->n_conns >= TR__HTTP_MAX_CONNS) {
        TR_LOG_WARN_LIMITED("HTTP-CONNS", "refusing a connection: %d open already", h->n_conns);
        uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
        return;
    }
    c->same_user = peer_is_us(&c->tcp);
    if (!c->same_user && h->n_others >= TR__HTTP_MAX_OTHERS) {
        TR_LOG_WARN_LIMITED("HTTP-CONNS", "refusing a connection: %d of others open already",
                            h->n_others);
        uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
        return;
    }
    h->n_others += !c->same_user;
    uv_timer_init(h->loop, &c->timer);
    c->timer.data = c;
    c->handles = 2;
    c->next = h->conns;
    if (h->conns) h->conns->prev = c;
    h->conns = c;
    h->n_conns++;
    uv_timer_start(&c->timer, on_timeout, (uint64_t)h->timeout_ms, 0);
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) conn_close(c);
}

int tr__http_create(uv_loop_t *loop, const char *host, int port, const char *token,
                    tr__http_handler fn, void *ctx, tr__http **out) {
    *out = NULL;
    if (port < 0 || port > 65535)
        return tr__err(TR_EINVAL, "metrics port %d is out of range", port);
    struct sockaddr_storage sa;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&sa) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&sa) != 0)
        return tr__err(TR_EINVAL, "'%s' is not an IP address to serve HTTP on", host);
    tr__http *h = calloc(1, sizeof *h);
    if (!h) return tr__err(TR_ENOMEM, "http server");
    if (token && *token && !(h->token = strdup(token))) {
        free(h);
        return tr__err(TR_ENOMEM, "http server");
    }
    h->loop = loop;
    h->timeout_ms = TR__HTTP_TIMEOUT_MS;
    h->fn = fn;
    h->ctx = ctx;
    uv_tcp_init(loop, &h->listener);
    h->listener.data = h;
    int e = uv_tcp_bind(&h->listener, (const struct sockaddr *)&sa, 0);
    if (!e) e = uv_listen((uv_stream_t *)&h->listener, 64, on_connection);
    if (e) {
        int rc = tr__err(TR_ECONNECT, "serving HTTP on %s:%d: %s", host, port, uv_strerror(e));
        uv_close((uv_handle_t *)&h->listener, NULL);
        uv_run(loop, UV_RUN_NOWAIT); /* (the handle is released before we free it) */
        free(h->token);
        free(h);
        return rc;
    }
    struct sockaddr_storage bound;
    int len = sizeof bound;
    uv_tcp_getsockname(&h->listener, (struct sockaddr *)&bound, &len);
    h->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                : ((struct sockaddr_in *)&bound)->sin_port);
    *out = h;
    return 0;
}

int tr__http_port(const tr__http *h) {
    return h ? h->port : 0;
}

void tr__http_set_timeout(tr__http *h, int ms) {
    h->timeout_ms = ms > 0 ? ms : TR__HTTP_TIMEOUT_MS;
}

static void on_listener_closed(uv_handle_t *hd) {
    tr__http *h = hd->data;
    free(h->token);
    free(h);
}

void tr__http_close(tr__http *h) {
    if (!h || h->closing) return;
    h->closing = 1;
    while (h->conns)
        conn_close(h->conns);
    uv_close((uv_handle_t *)&h->listener, on_listener_closed);
}
