/* actor/calls.h - method calls sent straight to each actor's worker over one connection
 * per actor, set up once (as Ray's direct actor calls), their refs, tr_get and tr_wait.
 *
 * Hot path: the calling thread encodes and writes its CALL frame itself; a thread
 * waiting for a result reads the replies itself (leader/followers: one waiter at a time
 * reads all connections through one epoll set; others sleep on a condition variable and
 * are woken once per batch). Calls to an actor that is not up yet are queued in order
 * and sent by whichever thread next waits; so are calls that pass another call's result
 * before that result has arrived. Where no thread of ours may ever wait for them (Ray runs
 * every task submitted), a driver thread, started at the first need, does it (and reads
 * results borrowers wait for): asleep while every call has gone out, as on the hot path.
 * Thread safety: every function may be called from any thread.
 */
#ifndef TR_ACTOR_CALLS_H
#define TR_ACTOR_CALLS_H

#include <stddef.h>
#include <stdint.h>

#include "core/nodeconn.h"
#include "objectstore/client.h"
#include "troupe/troupe.h"

typedef struct tr__actors tr__actors;

/* node: the process's node connection (borrowed), to find where actors listen. */
int tr__actors_create(tr__nodeconn *node, tr__objects *objects, size_t max_msg, tr__actors **out);
/* Whether calls to actors of this node go on call rings (core/ring.h; config "call_rings").
 * Set before the first call. */
void tr__actors_set_rings(tr__actors *a, int on);
/* How long a thread waiting for replies polls before it sleeps (config "call_spin_us";
 * 0, the default here: never). Thread safety: before the first call. */
void tr__actors_set_spin(tr__actors *a, int spin_us);
/* A task worker's count of its threads waiting for results (its board entry's
 * `blocked`, objectstore/segment.h), kept by tr__actors_get, _wait and _stream_next
 * while they wait: the task pool starts another worker rather than queue a task behind
 * one whose task waits (a parent for its children). NULL (the default): none. Once, at
 * the worker's start. */
void tr__actors_set_blocked_word(int32_t *word);
/* Drops every connection and result; pending calls are abandoned. */
void tr__actors_destroy(tr__actors *a);

/* refs: objects (tr_put) and results of calls made through `a`, in any mix; the method
 * sees each as an argument (tr_ctx_ref) once it is there. */
int tr__actors_call(tr__actors *a, tr_actor_id id, const char *method, const void *args, size_t len,
                    const tr_ref *refs, size_t n_refs, tr_ref *out);
/* As tr__actors_call with no refs, or TR_EAGAIN with nothing done where it would wait
 * (tr_call_nowait). */
int tr__actors_call_nowait(tr__actors *a, tr_actor_id id, const char *method, const void *args,
                           size_t len, tr_ref *out);
/* As tr__actors_call, and `keep`: the refs nested in args (a binding's serializer finds
 * them): results of our own calls are exported (their twins made), and all are pinned
 * until the call completes, so that the method can borrow them (tr_ref_borrow). */
int tr__actors_call_contains(tr__actors *a, tr_actor_id id, const char *method, const void *args,
                             size_t len, const tr_ref *refs, size_t n_refs, const tr_ref *keep,
                             size_t n_keep, tr_ref *out);
/* As tr__actors_call_contains, with n_returns results (out: that many refs, filled from a
 * tr_ctx_reply_multi of as many parts; TR_STREAMING: one, a stream's, tr__actors_stream_next), and
 * with `task` set a task (actor/tasks.h): counted in tr__actors_pending, and sent again to the
 * actor's next incarnation up to `retries` times
 * (-1: always) if its worker dies with it in flight. */
int tr__actors_submit(tr__actors *a, tr_actor_id id, const char *method, const void *args,
                      size_t len, const tr_ref *refs, size_t n_refs, const tr_ref *keep,
                      size_t n_keep, int task, int retries, size_t n_returns, tr_ref *out);
/* Tasks (and calls with contained refs) to actor id not done yet (queued, held or in
 * flight), as this process sees them. */
size_t tr__actors_pending(tr__actors *a, tr_actor_id id);
/* Cancels a call or task of ours not done yet: its ref fails with TR_ECANCELED at once
 * (a call waiting for its arguments never goes out; one sent may still run, its result
 * dropped). With force, a task already sent has its worker named in *kill: returns 1 then
 * (the caller kills it: the task's pool worker restarts). Returns 0, 1, TR_ESTALE,
 * TR_EINVAL. */
int tr__actors_cancel(tr__actors *a, tr_ref ref, int force, tr_actor_id *kill);
/* Whether ref is the result of a call made through `a` (live or not). */
int tr__actors_owns(const tr__actors *a, tr_ref ref);
/* Whether ref is a live (not released) call ref of ours. */
int tr__actors_live(tr__actors *a, tr_ref ref);
/* Exports our call ref: its twin (a promise until the result is in) in the store, pinned
 * until the ref is released. Idempotent. TR_ESTALE if unknown or released. */
int tr__actors_export(tr__actors *a, tr_ref ref);
/* Exports those of refs that are our call refs (the others are left as they are). */
int tr__actors_share(tr__actors *a, const tr_ref *refs, size_t n);
/* A call ref of ours; another process's result (or one of ours that we released and that
 * came back in a value) through its twin in the store. *waited_from (if not NULL): when it
 * began to wait (tr__now_ns), or 0 where the value was in at once. */
int tr__actors_get(tr__actors *a, tr_ref ref, int timeout_ms, const void **data, size_t *len,
                   int64_t *waited_from);
/* tr_stream_next: the next item of a stream of ours (a call made with n_returns
 * TR_STREAMING), waiting for it until timeout_ms: 0 and *item, 1 at the end, or a code. */
int tr__actors_stream_next(tr__actors *a, tr_ref ref, int timeout_ms, tr_ref *item);
int tr__actors_wait(tr__actors *a, const tr_ref *refs, size_t n, size_t num_ready, int timeout_ms,
                    uint8_t *ready, size_t *n_ready);
int tr__actors_release(tr__actors *a, tr_ref ref);

/* Refs another node made (docs/OWNERSHIP.md, remote holds): */
/* Whether ref is an object or call ref of another node of our cluster. */
int tr__actors_is_remote(const tr__actors *a, tr_ref ref);
/* This process holds ref at the node that made it (through our link to that node), so
 * that it stays there while we have it, whatever its owner does: the user's hold (`user`,
 * tr_ref_borrow) or a call's in flight. tr__remote_hold's codes. */
int tr__actors_remote_hold(tr__actors *a, tr_ref ref, int user, int timeout_ms);
/* tr_put_refs: the object contains refs, some of which may be other nodes': those are held
 * at their nodes by this process while the object lives (until its last holder on this
 * node frees it, or this process ends), the others by the store (contained refs). */
int tr__actors_put_refs(tr__actors *a, const void *data, size_t len, const tr_ref *refs, size_t n,
                        tr_ref *out);
/* Ends one such hold: 0, or TR_ENOTFOUND if we have none of that kind. */
int tr__actors_remote_release(tr__actors *a, tr_ref ref, int user);

#endif
