/* core/rpc.h - cross-node RPC over the gRPC C core (the only code that includes gRPC):
 * unary calls of one method, "/troupe.Node/Call", whose request and reply are opaque
 * bytes (msgpack, as every control message), over HTTP/2 on TCP.
 *
 * Auth: a server has a token (none is refused, loopback too: every local user reaches
 * it) and accepts only calls whose `authorization` metadata is "Bearer <token>" (compared
 * in constant time); any other call is refused with UNAUTHENTICATED, logged, and its
 * handler never runs. Clients send theirs with every call.
 *
 * Threads: a server runs its completion queue on a thread of its own and calls the
 * handler there, one call at a time; a client may be used from any thread (each call
 * waits on a queue of its own, with its deadline). Status codes: TR_ECONNECT (nothing
 * listens, or the connection broke), TR_ETIMEDOUT (the deadline), TR_EPERM (refused by
 * the token), TR_EMSGSIZE (over the size limit), else the handler's own code.
 */
#ifndef TR_CORE_RPC_H
#define TR_CORE_RPC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core/buf.h"

typedef struct tr__rpc_server tr__rpc_server;
typedef struct tr__rpc_client tr__rpc_client;

/* TLS (gRPC's SSL credentials), optional and mutual: a server with a certificate chain,
 * its key and a CA speaks TLS only, and takes only clients that present a certificate
 * that CA signed; a client with a CA speaks TLS only, accepts a server whose certificate
 * that CA signed for the name TR__RPC_TLS_NAME (a cluster's nodes share the name, whatever
 * their addresses), and presents its own certificate and key (without them, a server
 * refuses it). The token still authenticates the client. PEM text; NULL members: not
 * used. */
#define TR__RPC_TLS_NAME "troupe-node"
typedef struct tr__rpc_tls {
    char *cert, *key, *ca;
} tr__rpc_tls;
/* Reads the PEM files named (any may be NULL) into *out. Returns 0, or TR_EINVAL naming
 * the file that cannot be read (or is empty, or over 1 MiB). */
int tr__rpc_tls_load(const char *cert_path, const char *key_path, const char *ca_path,
                     tr__rpc_tls *out);
/* A TLS identity's files as they travel from a node to its drivers and workers (who reach
 * other nodes as it does): PEM paths, "" where none (all "": plain). */
typedef struct tr__rpc_tls_files {
    char ca[512], cert[512], key[512];
} tr__rpc_tls_files;
/* tr__rpc_tls_load of the files named ("" for none). */
int tr__rpc_tls_load_files(const tr__rpc_tls_files *f, tr__rpc_tls *out);
void tr__rpc_tls_free(tr__rpc_tls *t);

/* A request being served: valid from its handler's start until it is answered. */
typedef struct tr__rpc_req tr__rpc_req;
/* A request's handler, on the server's thread: the request's bytes in, the reply's appended
 * to `reply`; returns 0, or a TR_E* code that the caller gets (with `reply` as its message,
 * if any), or TR__RPC_LATER: it took `call` to answer it later with tr__rpc_answer (a
 * request that waits on anything but this process must not hold the server's thread: every
 * other call, heartbeats included, waits behind it). */
#define TR__RPC_LATER 1
typedef int (*tr__rpc_handler)(void *ctx, tr__rpc_req *call, const void *req, size_t len,
                               tr__buf *reply);
/* Answers a call its handler took (TR__RPC_LATER): rc and the reply's bytes (or, for an
 * error, its message; reply may be NULL). Once per call, from any thread; the server's
 * destroy waits until every call taken is answered, so answer within a bounded time. */
void tr__rpc_answer(tr__rpc_req *call, int rc, const tr__buf *reply);

/* Listens on `bind` ("HOST:PORT"; port 0 picks one, *port gets it) with `token` (NULL or
 * "": TR_EINVAL) and messages up to max_msg bytes. */
int tr__rpc_server_create(const char *bind, const char *token, size_t max_msg,
                          tr__rpc_handler handler, void *ctx, tr__rpc_server **out, int *port);
/* The same over TLS when tls has a cert and key (tls may be NULL: plain); it must have
 * the CA too (mutual TLS: clients are checked against it), else TR_EINVAL. */
int tr__rpc_server_create_tls(const char *bind, const char *token, const tr__rpc_tls *tls,
                              size_t max_msg, tr__rpc_handler handler, void *ctx,
                              tr__rpc_server **out, int *port);
/* Stops listening, cancels calls in flight, waits for the thread, frees. NULL: no-op. */
void tr__rpc_server_destroy(tr__rpc_server *s);

/* A channel to `target` ("HOST:PORT"); connects lazily, reconnects as gRPC does. */
int tr__rpc_client_create(const char *target, const char *token, size_t max_msg,
                          tr__rpc_client **out);
/* The same over TLS when tls has a CA (tls may be NULL: plain). */
int tr__rpc_client_create_tls(const char *target, const char *token, const tr__rpc_tls *tls,
                              size_t max_msg, tr__rpc_client **out);
void tr__rpc_client_destroy(tr__rpc_client *c);
/* One call: the reply's bytes appended to `reply` (also on a handler's error: its
 * message). Returns 0 or a code as above. */
int tr__rpc_call(tr__rpc_client *c, const void *req, size_t len, int timeout_ms, tr__buf *reply);

/* Streams: one call that carries messages both ways, in order, pipelined (a caller's
 * link to a node). Messages are opaque bytes up to max_msg; a message that cannot be
 * read or kept ends the stream (never a silent gap).
 * Server: tr__rpc_server_on_stream gives the callbacks, called on the server's thread
 * (the one that also runs unary handlers: do not wait there for work that needs this
 * server): a stream's messages in order, then its end, once (the peer closed or broke,
 * or the server stops; possibly with no message before it). tr__rpc_stream_send works on
 * it from any thread until on_end returns: on_end must see that no other thread sends
 * after. A client that half-closes gets its status after the replies queued before.
 * Client: open, send (queued; never waits for the network; TR_ENOMEM past 64 MiB
 * unsent: the peer is not reading), recv (the next message, up to timeout_ms:
 * TR_ETIMEDOUT; once the stream ended, why: TR_ECLOSED when cleanly, TR_EPERM when the
 * token was refused; a reader that lags 64 MiB behind stops the receives, and HTTP/2's
 * flow control stops the sender), close (cancels what is in flight, unsent messages
 * included, and frees: the last call on a stream, with no other thread in it; streams
 * close before their client is destroyed; it waits at most 5 s for gRPC to end the
 * stream's batches, then leaves them, and the stream, to the stream's thread). Thread
 * safety: send from any thread, one receiver at a time. */
typedef struct tr__rpc_stream tr__rpc_stream;
typedef void (*tr__rpc_on_msg)(void *ctx, tr__rpc_stream *st, const void *msg, size_t len);
typedef void (*tr__rpc_on_end)(void *ctx, tr__rpc_stream *st);
/* A message as the pieces it arrived in (len bytes in all), valid during the call. */
typedef void (*tr__rpc_on_msgv)(void *ctx, tr__rpc_stream *st, const struct iovec *iov, int n,
                                size_t len);
typedef struct tr__rpc_stream_handlers {
    tr__rpc_on_msg on_msg;
    tr__rpc_on_end on_end; /* may be NULL */
    void *ctx;
    /* a callback client stream's (tr__rpc_stream_open_cb) messages go here instead of
     * on_msg if it is set: no copy into one buffer (on_msg must still be set) */
    tr__rpc_on_msgv on_msgv;
} tr__rpc_stream_handlers;
/* Takes streams from now on (before: refused as an unknown method); h must outlive s. */
void tr__rpc_server_on_stream(tr__rpc_server *s, const tr__rpc_stream_handlers *h);
int tr__rpc_stream_open(tr__rpc_client *c, tr__rpc_stream **out);
/* A client stream whose messages go to h->on_msg, in order, on the stream's own thread
 * (the one that takes its completions: no hand-off), and whose end goes to h->on_end,
 * once; tr__rpc_stream_recv is refused on it. A callback that waits holds back this
 * stream's receives (HTTP/2 flow control stops the sender) and its sends' completions;
 * it must not wait for tr__rpc_stream_close. h must outlive the stream. */
int tr__rpc_stream_open_cb(tr__rpc_client *c, const tr__rpc_stream_handlers *h,
                           tr__rpc_stream **out);
/* Bytes queued on the stream and not yet handed to gRPC (a send in flight not counted). */
size_t tr__rpc_stream_unsent(tr__rpc_stream *st);
/* Whether the stream ended (0: not yet), and why: the code recv would give, its text. */
int tr__rpc_stream_why(tr__rpc_stream *st, char *why, size_t cap);
int tr__rpc_stream_send(tr__rpc_stream *st, const void *msg, size_t len);
/* The same, the message gathered from n pieces (one copy, into gRPC's buffer). */
int tr__rpc_stream_sendv(tr__rpc_stream *st, const struct iovec *iov, int n);
/* The same, head (copied) then len bytes at data, lent without a copy: done(ctx) runs once
 * gRPC no longer needs them (any thread; also when the send fails), and data must stay
 * valid and unchanged until then. */
int tr__rpc_stream_send_lent(tr__rpc_stream *st, const void *head, size_t hlen, const void *data,
                             size_t len, void (*done)(void *), void *ctx);
int tr__rpc_stream_recv(tr__rpc_stream *st, int timeout_ms, tr__buf *msg);
void tr__rpc_stream_close(tr__rpc_stream *st);

#endif
