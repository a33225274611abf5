/* actor/protocol.h - the actor layer's message types and the call/result body codec.
 *
 * Node messages (driver/worker <-> node, msgpack maps):
 *   ACTOR_CREATE {class, args, name?, max_restarts, res, detached?, conc?, pg?, bundle?}
 *                                                              -> {id}
 *                     (conc: max_concurrency, absent if 1)
 *   ACTOR_RESOLVE {id, wait_ms}                                -> {state, inc, path?, reason?}
 *   ACTOR_KILL {id, no_restart}                                -> {}
 *   ACTOR_BY_NAME {name}                                       -> {id}
 *   ACTOR_INFO {id}  -> {state, pid, restarts, max_restarts, class, name?, node, reason?,
 *                        cpus ("0,1": the cores it is bound to; "" if it floats)}
 *   WORKER_START {id}      (worker, first thing)     -> {class, args, inc, path, max_msg, conc?}
 *   WORKER_READY {id, inc} (constructor ran, listening)        -> {}
 *   WORKER_FAILED {id, inc, msg}                               -> {}
 *   NODE_WHERE {num}  (a node of the cluster, by number: to pull its objects; 0: this
 *                      node)                                   -> {address, token, tls_ca}
 * Direct messages (caller <-> worker socket; the hot path):
 *   CALLER body = msgpack [client:int] or [client, relayed:int], the caller's object store
 *          index, sent once, first
 *   CALL   body = msgpack [method:str, args:bin], or with arguments passed by reference
 *          [method, args, refs:bin] or [method, args, refs:bin, inline:bin]: refs is n
 *          16-byte refs; an object ref names an object in the store, which the worker
 *          resolves (waiting for a seal) before the method runs; an all-zero ref takes the
 *          next value of `inline`, a sequence of (u32 little-endian length, bytes): another
 *          call's result the caller had and passes on. seq = per-connection call number
 *   RESULT body = msgpack [rc:int, data:bin], same seq; for errors data is the message;
 *          or [0, ref:bin(16), 65535] for a large result the worker put in the object
 *          store and transferred to the caller (tr__objects_transfer): the caller adopts it;
 *          or [0, ref:bin(16), 65534, data:bin] for a caller on another node (its CALLER,
 *          said by the relay, is [client, 1]): data is the result, ref its container
 *          object, transferred to the relay (client) that keeps it for the caller's link
 *   ITEM   body = a RESULT's, same seq: one item of the call's stream (tr_ctx_yield), sent
 *          while the method runs; its RESULT ends the stream
 */
#ifndef TR_ACTOR_PROTOCOL_H
#define TR_ACTOR_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/codec.h"
#include "core/rpc.h"

enum {
    TR__MSG_ACTOR_CREATE = 64,
    TR__MSG_ACTOR_RESOLVE = 65,
    TR__MSG_ACTOR_KILL = 66,
    TR__MSG_ACTOR_BY_NAME = 67,
    TR__MSG_WORKER_START = 68,
    TR__MSG_WORKER_READY = 69,
    TR__MSG_WORKER_FAILED = 70,
    TR__MSG_ACTOR_INFO = 71,
    TR__MSG_NODE_WHERE = 72,
    TR__MSG_CALL = 80,
    TR__MSG_RESULT = 81,
    TR__MSG_CALLER = 82, /* first frame on a call connection: [object store client index] */
    /* Call rings (core/ring.h): after CALLER, a local caller passes the memfd of a ring
     * pair with this frame (no body); the worker answers with one (seq 0: the rings are
     * on, from the next byte; else refused, the socket carries calls as before). */
    TR__MSG_RING = 83,
    TR__MSG_WAKE = 84, /* with rings on, the only frame on the socket: the doorbell */
    /* One item of a call's stream (tr_ctx_yield), before its RESULT: a RESULT's body (any of
     * its forms), the call's seq. A caller that did not ask for a stream drops it. */
    TR__MSG_ITEM = 85,
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
#define TR__RESULT_KEPT 65534

/* tr_actor_options.max_concurrency's bound. */
#define TR__MAX_CONCURRENCY 65536

/* Results above this size go into the object store instead of the socket. */
#define TR__INLINE_RESULT_MAX (100u << 10)

/* An argument passed by reference: an object (ref), or a value the frame carries (ref all
 * zero; data, len). */
typedef struct tr__wire_arg {
    uint8_t ref[16];
    const void *data;
    size_t len;
} tr__wire_arg;

/* Appends a whole CALL frame (header + body) to out. Returns 0, TR_ENOMEM, TR_EMSGSIZE. */
int tr__call_frame(tr__buf *out, uint64_t seq, const char *method, const void *args, size_t len,
                   const tr__wire_arg *wargs, size_t n_wargs);
/* A RESULT frame's code for the call that ended its actor for good (tr_ctx_exit_actor):
 * its caller fails it with TR_EACTOR_DIED and every call after it, for the reason its text
 * gives (no other reply means this: an argument's TR_EACTOR_DIED, say, is just a code). */
#define TR__RC_ACTOR_ENDED (-1000)
/* Appends a whole RESULT frame. */
int tr__result_frame(tr__buf *out, uint64_t seq, int rc, const void *data, size_t len);
/* Appends a RESULT frame naming an object transferred to the caller. */
int tr__result_frame_ref(tr__buf *out, uint64_t seq, const void *ref16);
/* Appends a RESULT frame for a caller on another node (relayed): the result's bytes,
 * and the container object (a result with refs in it, docs/OWNERSHIP.md) transferred to
 * the relay, which keeps it for the caller's link until the caller lets go (LETGO). */
int tr__result_frame_kept(tr__buf *out, uint64_t seq, const void *ref16, const void *data,
                          size_t len);
/* The first bytes of a kept RESULT body, up to its ref's end: 0x94 0x00 0xc4 0x10 ref. */
#define TR__RESULT_KEPT_PREFIX 20
/* Appends the CALLER frame; `relayed`: the caller is another node's, through this node's
 * relay, whose store index `client` is (results with refs only go to the store), and
 * `tag` (1..TR__BOARD_TAG_MAX; 0: none) the relay's name for the caller's connection,
 * with which it cancels the caller's calls (tr__board_relay_cancel_word). */
int tr__caller_frame(tr__buf *out, int client, int relayed, unsigned tag);
/* Sends an empty frame of `type` (TR__MSG_WAKE: the call rings' doorbell; TR__MSG_RING:
 * the worker's answer, seq 0 for "on" or a TR_* code) on a non-blocking socket, whole or
 * not at all: a doorbell that finds the socket full is not needed (the peer has bytes to
 * read there already). Returns 0 or TR_EIO. */
int tr__send_empty_frame(int fd, uint8_t type, uint64_t seq);
/* Parses a CALL body. Views point into body; inl and inl_len get the inline blob (NULL, 0 if
 * none). Returns 0 or TR_EPROTO. */
int tr__call_parse(const char *body, size_t n, const char **method, size_t *mlen, const void **args,
                   size_t *alen, const void **refs, size_t *n_refs, const void **inl,
                   size_t *inl_len);
/* The next value of an inline blob: advances p and left past it. Returns 0 or TR_EPROTO. */
int tr__call_inline_next(const void **p, size_t *left, const void **data, size_t *len);
/* Parses a RESULT body; *is_ref: 1 if data is the 16-byte ref of a transferred object;
 * 2 if data is the result and *kept (else NULL) the 16-byte ref of its container, kept
 * for us by the relay that sent it. */
int tr__result_parse(const char *body, size_t n, int *rc, const void **data, size_t *dlen,
                     int *is_ref, const void **kept);

/* A node's TLS files in its replies (resolve, node_where): three more map entries,
 * "tls_ca", "tls_cert" and "tls_key" (f NULL: all ""), and back (absent: ""; a path too
 * long for the struct is TR_EPROTO, never a TLS file cut short). */
void tr__enc_tls_files(tr__buf *b, const tr__rpc_tls_files *f);
int tr__get_tls_files(const tr__obj *map, tr__rpc_tls_files *out);

#endif
