/* core/server.h - the node service's socket server: a libuv Unix-socket listener that
 * reassembles frames, decodes each body (a msgpack map) and dispatches it through a
 * handler table indexed by message type.
 *
 * Layers mount their handlers (tr__server_on) and connection-close hooks; api/ assembles
 * them into one process. Peer input is never trusted: a bad header, an oversized frame or
 * an undecodable body gets an error reply where possible and closes that connection only.
 * A handler replies at once (tr__server_reply) or keeps the request (tr__conn_ref) and
 * replies later from the loop; replies to a closed connection are dropped.
 * Everything runs on the loop's thread (not thread-safe).
 */
#ifndef TR_CORE_SERVER_H
#define TR_CORE_SERVER_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "core/buf.h"
#include "core/codec.h"

typedef struct tr__server tr__server;

enum { TR__PEER_UNKNOWN = 0, TR__PEER_DRIVER = 1, TR__PEER_WORKER = 2, TR__PEER_CLI = 3 };

typedef struct tr__conn {
    tr__server *srv;
    uint64_t id;
    pid_t pid;        /* from SO_PEERCRED */
    int role;         /* from HELLO */
    char *exe;        /* from HELLO: the peer's executable (workers run it) */
    int store_client; /* object store client index, or -1 (objectstore/ sets it) */
    /* private */
    uv_pipe_t pipe;
    tr__buf in;
    int refs;
    int closed;
    struct tr__conn *next, *prev;
} tr__conn;

typedef void (*tr__handler_fn)(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body);
typedef void (*tr__close_fn)(void *ctx, tr__conn *c);

int tr__server_create(uv_loop_t *loop, const char *path, size_t max_msg, tr__server **out);
void tr__server_on(tr__server *s, uint8_t type, tr__handler_fn fn, void *ctx);
/* Up to 8 hooks, called in registration order when any connection closes. */
void tr__server_on_close(tr__server *s, tr__close_fn fn, void *ctx);
/* Stops listening and closes every connection; the server is freed once libuv has
 * released the handles (run the loop after this). */
void tr__server_close(tr__server *s);
size_t tr__server_max_msg(const tr__server *s);
uv_loop_t *tr__server_loop(tr__server *s);

/* Sends body (a complete msgpack map) as the reply to seq. Returns 0 or a code; a closed
 * connection drops it silently. */
int tr__server_reply(tr__conn *c, uint64_t seq, const tr__buf *body);
/* Sends body as the reply to seq with a file descriptor attached (SCM_RIGHTS). Only when
 * nothing else is queued on the connection (request/reply protocols guarantee it); else
 * TR_EIO. The descriptor stays the caller's. */
int tr__server_reply_fd(tr__conn *c, uint64_t seq, const tr__buf *body, int fd);
/* Replies {"rc": rc, "msg": msg}. */
void tr__server_reply_status(tr__conn *c, uint64_t seq, int rc, const char *msg);
/* Closes a connection (after queued replies are written). */
void tr__conn_close(tr__conn *c);
void tr__conn_ref(tr__conn *c);
void tr__conn_unref(tr__conn *c);

#endif
