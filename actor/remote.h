/* actor/remote.h - a process's links to other nodes of a cluster, for calls to actors
 * that live there (issue 12): one gRPC stream per node (core/rpc), opened on the first
 * call to an actor there and shared by every actor on that node and every thread.
 *
 * A stream message is [kind: 1 byte][actor id: 16 bytes][generation: u32 LE][payload]; the
 * generation names one opening of the actor on the link (the caller's), so that bytes of
 * an earlier connection to the same actor, still in flight, never reach a later one:
 *   caller -> node  TR__REMOTE_DATA   CALL frames for the actor: the byte stream a worker
 *                                     socket would carry (no CALLER frame: the node's
 *                                     relay says its own), cut anywhere
 *                   TR__REMOTE_CLOSE  the caller let go of the actor (no payload): the
 *                                     relay forgets that generation
 *                   TR__REMOTE_CANCEL tr_cancel of one of its calls (payload: u64 LE the
 *                                     call's seq, u8 1 to interrupt a task running): the
 *                                     relay writes the cancel on the node's board, as a
 *                                     caller there would (tr__board_relay_cancel_word)
 *   node -> caller  TR__REMOTE_DATA   RESULT frames from the actor, cut anywhere
 *                   TR__REMOTE_EOF    the actor's worker connection ended (payload: why);
 *                                     the caller asks its node what became of the actor;
 *                                     bytes of that generation that still come are dropped
 *                   TR__REMOTE_HOLD   the link's actors have not taken what came for them
 *                   TR__REMOTE_GO     (16 MiB; no id, no payload): the caller sends no more
 *                                     CALL bytes on the link until GO (tr__remote_send says
 *                                     TR_ENOMEM meanwhile); a caller that sends on
 *                                     regardless has its connections ended (the node's
 *                                     memory is bounded either way)
 *
 * To actor/calls.c a remote actor looks like a worker socket: tr__remote_open gives a
 * descriptor whose reads are the actor's RESULT bytes and whose end of file is the end of
 * the actor's connection or of the whole link (the node died, the network broke, the
 * token was refused); its writes go through tr__remote_send. The link's stream thread (core/rpc)
 * delivers, with no hand-off. A link that ended is freed once its last actor is closed. Thread
 * safety: every function may be called from any thread.
 */
#ifndef TR_ACTOR_REMOTE_H
#define TR_ACTOR_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "core/rpc.h"
#include "objectstore/client.h"

enum {
    TR__REMOTE_DATA = 1,
    TR__REMOTE_CLOSE = 2,
    TR__REMOTE_EOF = 3,
    TR__REMOTE_OBJ_GET = 4,  /* id: an object ref; gen: the request's number; payload
                                u64 offset, u64 length (0: only its size) */
    TR__REMOTE_OBJ_DATA = 5, /* payload u64 offset, u64 the object's size, the bytes */
    TR__REMOTE_OBJ_ERR = 6,  /* payload i32 code, then why */
    TR__REMOTE_OBJ_BULK = 7, /* caller -> node: the whole object on a bulk connection
                                (actor/bulk.h; payload 16 zero bytes); node -> caller: payload
                                u64 the object's size, u32 the port, 16 bytes the ticket */
    TR__REMOTE_HOLD = 8,     /* node -> caller: send no more CALL bytes on the link... */
    TR__REMOTE_GO = 9,       /* ...until this */
    /* Remote holds (docs/OWNERSHIP.md), on the objects' stream: */
    TR__REMOTE_OBJ_KEEP = 10,  /* caller -> node: id: an object (or twin) to keep for this
                                  link until it says RELEASE or ends; gen: the request's
                                  number; payload 16 zero bytes */
    TR__REMOTE_OBJ_KEPT = 11,  /* node -> caller: payload i32 code (0: kept), then why */
    TR__REMOTE_OBJ_LETGO = 12, /* caller -> node: one KEEP of id ends (no answer); payload
                                  16 zero bytes */
    TR__REMOTE_CANCEL = 13,    /* caller -> node: see above (payload 9 bytes) */
};
#define TR__REMOTE_CANCEL_LEN 9
#define TR__REMOTE_HDR 21

typedef struct tr__remotes tr__remotes;
typedef struct tr__rlink tr__rlink;

int tr__remotes_create(size_t max_msg, tr__remotes **out);
/* Closes every link (their stream threads end) and frees. NULL: no-op. */
void tr__remotes_destroy(tr__remotes *r);

/* Registers actor id on the link to the node at address ("HOST:PORT", reached with
 * token, over mutual TLS with the files tls names if it names any), opening the link if
 * there is none. *fd: the read side (non-blocking,
 * close-on-exec), the caller's to read and, after tr__remote_close, to close. Returns 0,
 * TR_ECONNECT (the stream cannot be opened), TR_ENOMEM, TR_EEXIST (id is open already). */
int tr__remote_open(tr__remotes *r, const char *address, const char *token,
                    const tr__rpc_tls_files *tls, const uint8_t id[16], int *fd, tr__rlink **link);
/* Queues bytes of CALL frames for actor id, in messages of at most the link's message
 * limit; never waits for the network. *taken: the bytes queued. Returns 0 (all of them),
 * TR_ENOMEM (the link holds 8 MiB unsent, or its node said HOLD: try the rest later),
 * TR_ECONNECT (the link ended). */
int tr__remote_send(tr__remotes *r, tr__rlink *l, const uint8_t id[16], const void *data,
                    size_t len, size_t *taken);
/* Copies object ref from the node at address into this node's store o (its size first,
 * then, from 4 MiB up without TLS, the whole object on a bulk connection (actor/bulk.h),
 * else (or if that fails) 4 MiB pieces, 16 of them in flight, each written in place; then
 * sealed), within
 * timeout_ms. Another process (or thread) pulling the same object already: returns 0 at
 * once, the caller's lookup waits for that seal. Returns 0, TR_EOBJECT_LOST (the node no
 * longer has it, or its link ended), TR_ETIMEDOUT, TR_ENOMEM (no room here). */
int tr__remote_pull(tr__remotes *r, const char *address, const char *token,
                    const tr__rpc_tls_files *tls, tr__objects *o, const uint8_t ref[16],
                    int timeout_ms);
/* Remote holds (docs/OWNERSHIP.md): this process keeps object ref (an object, or a call
 * result's twin) alive at the node at address, which made it, until it lets go or until
 * its link to that node ends (the process exits, or the link is lost: then the node
 * frees what only we held). The node keeps it once for all of our holds: the user's
 * (`user`: tr_ref_borrow's, one at most, as a store's user hold) and one per call in
 * flight that contains it. Waits up to timeout_ms for the node's answer (none if held
 * already). Returns 0, TR_ENOTFOUND (no such object there: never made, or freed),
 * TR_EOWNER_DIED (a result whose owner is gone), TR_ECONNECT, TR_ETIMEDOUT, TR_ENOMEM. */
int tr__remote_hold(tr__remotes *r, const char *address, const char *token,
                    const tr__rpc_tls_files *tls, const uint8_t ref[16], int user, int timeout_ms);
/* Ends one of this process's holds on ref (the user's, or a call's); the node is told
 * when the last goes (never waits). Returns 0, or TR_ENOTFOUND if there is no such hold. */
int tr__remote_release(tr__remotes *r, const uint8_t ref[16], int user);

/* A result's container the node's relay keeps for our link (tr__result_frame_kept): the
 * link stays (not freed) until tr__remote_result_drop, which tells the node to let go of
 * it (on the link's actor stream, where it was kept). */
void tr__remote_result_keep(tr__remotes *r, tr__rlink *l);
void tr__remote_result_drop(tr__remotes *r, tr__rlink *l, const uint8_t ref[16]);

/* tr_cancel of the call `seq` (the frame seq of the bytes tr__remote_send queued for actor
 * id) without force: the node is told after those bytes, and its worker sees it
 * (tr_ctx_canceled) or, if it has not begun it, does not run it; `interrupt`: a task's
 * worker is also sent SIGURG. Never waits. Returns 0, TR_ECONNECT (the link ended, or the
 * actor is not open on it), TR_ENOMEM. */
int tr__remote_cancel(tr__remotes *r, tr__rlink *l, const uint8_t id[16], uint64_t seq,
                      int interrupt);

/* The caller lets go of actor id (before closing its fd): the node is told. l may be
 * freed by this call. */
void tr__remote_close(tr__remotes *r, tr__rlink *l, const uint8_t id[16]);

#endif
