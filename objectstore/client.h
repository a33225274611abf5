/* objectstore/client.h - a process's side of the object store: maps the node's segment
 * once (read-write for puts, and again read-only for the views tr_get hands out), and
 * puts, gets and releases objects in it directly, under the segment's process-shared lock:
 * no round trip to the node per object.
 *
 * References: one bit per process in the object's entry says the process holds it. The
 * process counts locally: the user's hold (tr_put, or the first tr_get, until
 * tr_ref_release) and pins (calls in flight passing the object, call results and
 * method arguments being read); the bit is set while either is. The object's memory
 * returns when no process holds it. A process that dies drops its holds (the node clears
 * its bit). Thread safety: any thread.
 */
#ifndef TR_OBJECTSTORE_CLIENT_H
#define TR_OBJECTSTORE_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/nodeconn.h"
#include "objectstore/segment.h"
#include "troupe/troupe.h"

typedef struct tr__objects tr__objects;

/* Object refs are told apart from call refs by a bit in b[15] (objectstore/segment.h). */
static inline int tr__ref_is_object(const tr_ref *r) {
    return (r->b[15] & TR__REF_OBJECT_BIT) != 0;
}
/* A call's result ref (its owner's slot; its twin once it escaped). */
static inline int tr__ref_is_call(const tr_ref *r) {
    return tr__seg_is_call_id(r->b);
}
/* A call ref's owner: its store client index and that index's attach generation. */
static inline void tr__ref_owner(const tr_ref *r, int *client, unsigned *gen) {
    *client = r->b[8] | r->b[9] << 8;
    *gen = (unsigned)(r->b[10] | r->b[11] << 8);
}
/* The number of the node whose store made the object (b[12..14]; 0: a node in no
 * cluster). An object of another node is pulled into ours on first use (the puller). */
static inline uint32_t tr__ref_node(const tr_ref *r) {
    return (uint32_t)r->b[12] | (uint32_t)r->b[13] << 8 | (uint32_t)r->b[14] << 16;
}

int tr__objects_attach(tr__nodeconn *node, tr__objects **out);
void tr__objects_detach(tr__objects *o);

int tr__objects_put(tr__objects *o, const void *data, size_t len, tr_ref *out);
/* A put whose object contains refs to other objects: those stay alive while it does. */
int tr__objects_put_refs(tr__objects *o, const void *data, size_t len, const tr_ref *refs,
                         size_t n_refs, tr_ref *out);
/* The refs an object contains: up to cap into out, the total in *n. */
int tr__objects_refs(tr__objects *o, tr_ref ref, tr_ref *out, size_t cap, size_t *n);
int tr__objects_create(tr__objects *o, size_t len, tr_ref *out, void **buf);
/* As create, under a given id (a copy of another node's object): TR_EEXIST if the store
 * has it already (being pulled by another process, or there). Unlike create it records
 * no user hold but a pin (tr__objects_unpin ends it; abort does): the puller returns 1
 * and the lookup that follows drops it. */
int tr__objects_create_as(tr__objects *o, tr_ref ref, size_t len, void **buf);
/* Removes an object this process created and has not sealed (a pull that failed). */
void tr__objects_abort(tr__objects *o, tr_ref ref);
/* This node's number in its cluster (0: none). */
uint32_t tr__objects_node_num(const tr__objects *o);
/* Where tr__objects_get and a pin with a view find no object that another node made:
 * fn fetches it into this store (tr__objects_create_as, then seal) within timeout_ms and
 * returns 1 (made here: create_as's pin is dropped after the next lookup), 0 (another
 * puller made it, or is making it: the lookup waits for its seal), or a code
 * (TR_EOBJECT_LOST ...); then the lookup is made again. NULL: none. Set before use, or
 * cleared when nothing can be looking up. */
typedef int (*tr__objects_puller)(void *ctx, tr_ref ref, int timeout_ms);
void tr__objects_set_puller(tr__objects *o, tr__objects_puller fn, void *ctx);
int tr__objects_seal(tr__objects *o, tr_ref ref);
/* Waits up to timeout_ms for the object to be sealed (it may be being written by another
 * process), takes this process's hold and gives a read-only view. */
int tr__objects_get(tr__objects *o, tr_ref ref, int timeout_ms, const void **data, size_t *len);
int tr__objects_release(tr__objects *o, tr_ref ref);
/* Takes a pin. With data/len NULL: the object must exist (sealed or not). Otherwise waits
 * up to timeout_ms for the seal and gives a view. */
int tr__objects_pin(tr__objects *o, tr_ref ref, int timeout_ms, const void **data, size_t *len);
void tr__objects_unpin(tr__objects *o, tr_ref ref);

/* Handing an object from one process to another (a large call result, worker to
 * caller) is one transfer: the object has exactly one holder among the two at every
 * moment, so it survives either process dying at any point. */
/* Moves this process's hold (its only use of the object: no pins) to client `client`,
 * attached by process `pid` (the caller, as the kernel names it): that client's bit is
 * set and ours cleared under one lock, and our record forgotten. If the index is no
 * longer that process's (it exited), nothing changes. Returns 0, TR_ENOTFOUND,
 * TR_ESTATE (pinned here), TR_ESTALE (not attached), TR_EINVAL. */
int tr__objects_transfer(tr__objects *o, tr_ref ref, int client, pid_t pid);
/* Takes over a hold transferred to this process, as a pin (tr__objects_unpin ends it).
 * Never waits (the object need not even be resident). Returns 0, TR_ENOTFOUND (nothing
 * was transferred to us), TR_ENOMEM (the hold is dropped then). */
int tr__objects_adopt(tr__objects *o, tr_ref ref);
/* A read-only view of an object this process holds (user hold or pin), reading it back
 * from disk if it was spilled (a restore, once started, runs to its end; another
 * process's is waited for up to timeout_ms); the object stays resident until we let go
 * of it. Changes no count. Returns 0, TR_ESTALE (not held here), TR_ETIMEDOUT, TR_EIO,
 * TR_ENOMEM. */
int tr__objects_view(tr__objects *o, tr_ref ref, int timeout_ms, const void **data, size_t *len);
/* This process's client index (a caller tells its workers, to which they transfer large
 * results). */
int tr__objects_client(const tr__objects *o);
/* 1 if sealed, 0 if not (yet), a negative code on error. */
int tr__objects_ready(tr__objects *o, tr_ref ref);
/* 1 if the store has an entry for ref (sealed or not, resident or spilled), 0 if not. */
int tr__objects_exists(tr__objects *o, tr_ref ref);
/* Waits until the store changes (a seal or a delete) or the deadline. */
void tr__objects_wait_change(tr__objects *o, int64_t deadline);
int tr__objects_stats(tr__objects *o, tr_store_stats *out);

/* Ownership (docs/OWNERSHIP.md). A call ref's twin is the ref with the object bit added;
 * these take either form. */
/* This process's attach generation (with tr__objects_client: the owner bytes of the call
 * refs it makes). */
unsigned tr__objects_gen(const tr__objects *o);
/* Makes the promise of a twin: an entry with no data yet, held here (a pin: unpin ends
 * it), that gets wait on. TR_EEXIST if there is one. */
int tr__objects_promise(tr__objects *o, tr_ref twin);
/* Fills our promise with data (code 0) or seals it as an error entry (code, with data as
 * its message, NUL included), and wakes its waiters. TR_ESTATE if it is not our unfilled promise.
 */
int tr__objects_fulfill(tr__objects *o, tr_ref twin, int code, const void *data, size_t len);
/* Seals our promise as an error entry with no message block (code only): what a full
 * store still allows. TR_ESTATE if it is not our unfilled promise. */
int tr__objects_fail_bare(tr__objects *o, tr_ref twin, int code);
/* Renames object `from`, which this process holds (a large result it adopted), to `twin`:
 * our promise of it if there is one (its holders and containers kept), else a new entry.
 * No byte moves. Our record of `from` becomes our record of the twin. Only a result that
 * nobody else knows by its old name moves (our one pin, no other process's bit, no
 * container, resident): else TR_ESTATE, and the caller copies it. Waits up to timeout_ms
 * while another process spills or restores the object. */
int tr__objects_move(tr__objects *o, tr_ref from, tr_ref twin, int timeout_ms);
/* Takes this process's user hold on a ref it received (tr_ref_borrow): the entry must be
 * there (sealed or a promise). TR_ENOTFOUND, or TR_EOWNER_DIED for a twin whose owner has
 * gone before filling it. */
int tr__objects_borrow(tr__objects *o, tr_ref ref);

/* A private, writable, copy-on-write mapping of an object's bytes (Ray gives a method
 * writable arguments): zero-copy until written, a written page is this process's own
 * copy. The object stays pinned (resident) until tr__objects_unmap_private: an unwritten
 * page still shows the store's. */
int tr__objects_map_private(tr__objects *o, tr_ref ref, int timeout_ms, void **data, size_t *len);
int tr__objects_unmap_private(tr__objects *o, tr_ref ref, void *data, size_t len);

/* A writable view of an object this process made and has pinned, where nobody else can
 * see it: sealed, resident, no other process's hold or view, in no container (a graph
 * step's result that one collective node of this process reads: dag/exec.c reduces into
 * it in place and passes it on). Its bytes may then change under the same ref: only its
 * one reader may do this. TR_ESTATE where it is not such an object (the caller copies),
 * TR_ESTALE where this process does not hold it. */
int tr__objects_writable(tr__objects *o, tr_ref ref, void **data, size_t *len);

/* Who else holds an object of this node's store: the other processes with a hold on it
 * (the relay's stands for every borrower on other nodes), the objects that contain it and
 * our own pins of it (calls in flight that pass it), into *others. 0, TR_ENOTFOUND,
 * TR_EINVAL. */
int tr__objects_holders(tr__objects *o, tr_ref ref, size_t *others);

/* The node's notice board of workers (segment.h): the entry of key (non-zero),
 * claimed for this process if `claim` (NULL: the board is full), else only looked up
 * (NULL: not on the board). The entry is shared memory: atomic loads and stores only. */
tr__seg_board *tr__objects_board(tr__objects *o, uint64_t key, int claim);
/* Asks the worker of key to cancel its call that `word` names (tr__board_cancel_word)
 * and returns its pid to signal (SIGURG), or 0 where it is not on this node's board. */
pid_t tr__objects_board_cancel(tr__objects *o, uint64_t key, uint64_t word);

#endif
