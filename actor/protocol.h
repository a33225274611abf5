/* actor/protocol.h - the actor layer's message types and the call/result body codec.
 *
 * Node messages (driver/worker <-> node, msgpack maps):
 *   ACTOR_CREATE {class, args, name?, max_restarts, res}      -> {id}
 *   ACTOR_RESOLVE {id, wait_ms}                                -> {state, inc, path?, reason?}
 *   ACTOR_KILL {id, no_restart}                                -> {}
 *   ACTOR_BY_NAME {name}                                       -> {id}
 *   WORKER_START {id}      (worker, first thing)               -> {class, args, inc, path}
 *   WORKER_READY {id, inc} (constructor ran, listening)        -> {}
 *   WORKER_FAILED {id, inc, msg}                               -> {}
 * Direct messages (caller <-> worker socket; the hot path):
 *   CALL   body = msgpack [method:str, args:bin] or [method, args, refs:bin] where refs
 *          is n 16-byte object refs the worker resolves before the method runs;
 *          seq = per-connection call number
 *   RESULT body = msgpack [rc:int, data:bin], same seq; for errors data is the message;
 *          or [0, ref:bin(16), creator:int] for a large result the worker put in the
 *          object store: creator TR__RESULT_HANDED if the worker already handed its hold
 *          to the caller (it knows the caller's store index from CALLER), else the
 *          worker's index and the caller takes its hold over
 *   CALLER body = msgpack [client:int], the caller's object store index, sent once
 */
#ifndef TR_ACTOR_PROTOCOL_H
#define TR_ACTOR_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

enum {
    TR__MSG_ACTOR_CREATE = 64,
    TR__MSG_ACTOR_RESOLVE = 65,
    TR__MSG_ACTOR_KILL = 66,
    TR__MSG_ACTOR_BY_NAME = 67,
    TR__MSG_WORKER_START = 68,
    TR__MSG_WORKER_READY = 69,
    TR__MSG_WORKER_FAILED = 70,
    TR__MSG_CALL = 80,
    TR__MSG_RESULT = 81,
    TR__MSG_CALLER = 82, /* first frame on a call connection: [object store client index] */
};

/* Actor states as the node reports them. */
enum {
    TR__ACTOR_PENDING = 0,  /* waiting for resources */
    TR__ACTOR_STARTING = 1, /* worker spawned, constructor not done */
    TR__ACTOR_ALIVE = 2,
    TR__ACTOR_RESTARTING = 3, /* died, being restarted */
    TR__ACTOR_DEAD = 4,
};

const char *tr__actor_state_name(int state);

#define TR__RESULT_HANDED 65535

/* Results above this size go into the object store instead of the socket. */
#define TR__INLINE_RESULT_MAX (100u << 10)

/* Appends a whole CALL frame (header + body) to out; refs: n_refs * 16 bytes or NULL. */
int tr__call_frame(tr__buf *out, uint64_t seq, const char *method, const void *args, size_t len,
                   const void *refs, size_t n_refs);
/* Appends a whole RESULT frame. */
int tr__result_frame(tr__buf *out, uint64_t seq, int rc, const void *data, size_t len);
/* Appends a RESULT frame naming an object the worker (client index creator) put. */
int tr__result_frame_ref(tr__buf *out, uint64_t seq, const void *ref16, int creator);
/* Parses a body. Views point into body. Returns 0 or TR_EPROTO. */
int tr__call_parse(const char *body, size_t n, const char **method, size_t *mlen, const void **args,
                   size_t *alen, const void **refs, size_t *n_refs);
/* *creator is -1 for inline data, else the putter's client index (data: a 16-byte ref). */
int tr__result_parse(const char *body, size_t n, int *rc, const void **data, size_t *dlen,
                     int *creator);

#endif
