/* core/http.h - a small HTTP/1.1 server on a libuv loop, for what a node shows people and
 * Prometheus: /metrics, the status page and its JSON API.
 *
 * GET and HEAD only, no request bodies, one request per connection (Connection: close).
 * Peer input is never trusted: a request is parsed within TR__HTTP_MAX_REQUEST bytes and
 * TR__HTTP_TIMEOUT_MS, at most TR__HTTP_MAX_CONNS connections are open at once (at most
 * TR__HTTP_MAX_OTHERS of them not this user's on loopback), and a
 * malformed request gets its 4xx and the connection closed, never more.
 *
 * Access: a request carries the token (`Authorization: Bearer <token>`, or, for a
 * browser's page, `?token=<token>`), or comes from a process of this user over IPv4
 * loopback (its socket's uid, as /proc/net/tcp shows it) and names a loopback host
 * (Host: 127.0.0.1:port, localhost:port: a web page elsewhere cannot read the node
 * through the user's browser by DNS rebinding). Another local user needs the token.
 *
 * Everything runs on the loop's thread (not thread-safe). */
#ifndef TR_CORE_HTTP_H
#define TR_CORE_HTTP_H

#include <stddef.h>
#include <uv.h>

#include "core/buf.h"

#define TR__HTTP_MAX_REQUEST 8192
#define TR__HTTP_TIMEOUT_MS 10000
#define TR__HTTP_MAX_CONNS 64
/* ...of which at most this many from other users or beyond loopback: they cannot take
 * every slot from the node's own user */
#define TR__HTTP_MAX_OTHERS 16

typedef struct tr__http tr__http;

/* A parsed request: views into the connection's buffer, valid during the handler. */
typedef struct tr__http_req {
    int head;          /* HEAD: the reply's body is not sent */
    const char *path;  /* from '/' up to '?' or the end; NUL-terminated */
    const char *query; /* after '?' ("" if none); NUL-terminated */
    const char *auth;  /* the Authorization header's value, or NULL */
    const char *host;  /* the Host header's value, or NULL */
} tr__http_req;

/* What a handler answers: status (200 unless set), content type, body. */
typedef struct tr__http_resp {
    int status;
    const char *type;
    tr__buf body;
} tr__http_resp;

/* Answers one request; fills resp (status 404 where it has no such path). */
typedef void (*tr__http_handler)(void *ctx, const tr__http_req *req, tr__http_resp *resp);

/* Listens on host:port (port 0: one the system picks; tr__http_port says which). token:
 * NULL or "" for none. Returns 0, TR_EINVAL (a bad host), TR_ECONNECT (the port is taken
 * or cannot be bound), TR_ENOMEM. */
int tr__http_create(uv_loop_t *loop, const char *host, int port, const char *token,
                    tr__http_handler fn, void *ctx, tr__http **out);
int tr__http_port(const tr__http *h);
/* How long a connection may take to send its request (default TR__HTTP_TIMEOUT_MS). */
void tr__http_set_timeout(tr__http *h, int ms);
/* Stops listening and closes every connection; freed once libuv has released the handles
 * (run the loop after this). NULL: nothing. */
void tr__http_close(tr__http *h);

/* Parses the request at the front of buf (n bytes; it may write NULs into it). Returns
 * the bytes of the request's head when it is whole, 0 when more bytes are needed, or a
 * negative HTTP status for a bad request (-400, -405, -431, -505). */
int tr__http_parse(char *buf, size_t n, tr__http_req *req);

/* The query parameter `key`'s value (not decoded) into out (cap bytes, NUL-terminated):
 * 1, or 0 if it is absent or too long. */
int tr__http_query(const char *query, const char *key, char *out, size_t cap);

/* Whether the host (a Host header's value: name or address, an optional :port) is a
 * loopback one: localhost, 127.x.y.z, [::1]. */
int tr__http_loopback_host(const char *host);

struct sockaddr_in;
/* The uid of the process that owns the IPv4 TCP socket at `peer` connected to `self`
 * (/proc/net/tcp), or -1 if none is found. */
int tr__http_peer_uid(const struct sockaddr_in *peer, const struct sockaddr_in *self);

#endif
