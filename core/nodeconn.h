/* core/nodeconn.h - a blocking request/reply client of the node service, used by drivers
 * and workers for control messages (never on a call's hot path).
 *
 * One request at a time per connection (a mutex serialises callers); replies are matched
 * by seq, so a reply that arrives after its caller timed out is dropped, not mistaken for
 * the next one. Thread safety: any thread.
 */
#ifndef TR_CORE_NODECONN_H
#define TR_CORE_NODECONN_H

#include <pthread.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/codec.h"

typedef struct tr__nodeconn {
    int fd;
    pthread_mutex_t mu;
    uint64_t seq;
    tr__buf in;
    size_t max_msg;
    int broken; /* a transport error happened: every later call fails fast */
} tr__nodeconn;

/* A decoded reply; `root` is the reply map. Free with tr__reply_free. */
typedef struct tr__reply {
    tr__dec dec;
    char *mem;
    size_t mem_len; /* the reply map's bytes: mem[0..mem_len) */
    const tr__obj *root;
} tr__reply;

int tr__nodeconn_open(const char *path, size_t max_msg, tr__nodeconn **out);
void tr__nodeconn_close(tr__nodeconn *c);

/* Sends a request (body: a complete msgpack map, or NULL for {}) and waits for its reply.
 * Returns the reply's "rc" (its "msg" becomes tr_last_error); on 0 and if reply is not
 * NULL, *reply holds the map (free it). Transport failures: TR_ECONNECT (node gone),
 * TR_ETIMEDOUT, TR_EPROTO. */
int tr__nodeconn_call(tr__nodeconn *c, uint8_t type, const tr__buf *body, int timeout_ms,
                      tr__reply *reply);
/* Same, for a request whose reply carries a file descriptor: *passed_fd gets it (-1 if
 * none came; the caller owns it). */
int tr__nodeconn_call_fd(tr__nodeconn *c, uint8_t type, const tr__buf *body, int timeout_ms,
                         tr__reply *reply, int *passed_fd);
void tr__reply_free(tr__reply *r);

/* Introduces this process to the node (HELLO: role "driver", "worker" or "cli", its pid
 * and executable, and - for the driver that spawned an embedded node - the claim to own
 * it, which the node checks) and adopts the node's message limit. Returns as
 * tr__nodeconn_call. */
int tr__nodeconn_hello(tr__nodeconn *c, const char *role, int owner, int timeout_ms);
/* The same, naming exe as the executable (the node runs it for actors created on this
 * connection): a cluster node creating actors for a driver on another node. */
int tr__nodeconn_hello_exe(tr__nodeconn *c, const char *role, const char *exe, int timeout_ms);

/* Starts a reply map {"rc": rc, "msg": msg, ...} with `extra` more key/value pairs for the
 * caller to append. */
void tr__reply_begin(tr__buf *b, int rc, const char *msg, uint32_t extra);
/* The same, counted where it ends: the caller appends its pairs, then closes the map with
 * tr__enc_map_close(b, returned) (core/codec.h). */
size_t tr__reply_open(tr__buf *b, int rc, const char *msg);

#endif
