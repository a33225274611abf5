/* actor/handles.h - actors that end with their last handle (Ray's counted actor handles),
 * on the side of the process that created them.
 *
 * A handle is a ref: a small object of this node's store, owned by the actor's creator,
 * whose bytes name the actor. It goes where any ref goes (a call's contained refs, an
 * object's, a reply's), and each process that keeps a copy borrows it, so the store's
 * count of its holders is the count of the actor's handles. Once the creator has released
 * its own, the actor is ended when that count is 0: at once, or when a watcher thread
 * (started at the first handle that waits for its borrowers; it looks every
 * HANDLES_WATCH_MS while one does) sees it. To
 * end it, the creator sends it a TR__END_METHOD call, behind the calls it sent it before;
 * the worker replies to the calls before it, has its node mark it dead for good (no
 * restart) and exits as on SIGTERM, running the class's destructor.
 * Thread safety: every function may be called from any thread.
 */
#ifndef TR_ACTOR_HANDLES_H
#define TR_ACTOR_HANDLES_H

#include "actor/calls.h"
#include "objectstore/client.h"
#include "troupe/troupe.h"

/* The call that ends an actor (a name no class's method may have: "__troupe_" names are
 * the worker's own). */
#define TR__END_METHOD "__troupe_end"

typedef struct tr__handles tr__handles;

int tr__handles_create(tr__actors *actors, tr__objects *objects, tr__handles **out);
/* Stops the watcher; the handles still watched are forgotten (their actors die with
 * their creator anyway). */
void tr__handles_destroy(tr__handles *h);

/* Makes the handle of actor id, held by this process, into *out (one per actor). Returns
 * 0, TR_EEXIST, TR_ENOMEM, or tr_put's codes. */
int tr__handles_make(tr__handles *h, tr_actor_id id, tr_ref *out);

/* This process lets go of ref. 1: it was a handle of ours (let go: the actor ends now or
 * once its borrowers let go), 0: it is not one (nothing done), TR_ESTALE: it was, and was
 * let go already. */
int tr__handles_release(tr__handles *h, tr_ref ref);

/* This process takes ref again (tr_ref_borrow: it came back, in a value): a handle of ours
 * that waited for its borrowers is this process's to release again. */
void tr__handles_retake(tr__handles *h, tr_ref ref);

/* A handle's bytes: TR__HANDLE_MAGIC, then the actor's id. */
#define TR__HANDLE_MAGIC "troupe-actor-handle:"
#define TR__HANDLE_LEN (sizeof TR__HANDLE_MAGIC - 1 + 16)

/* The actor that a handle's bytes (data, len) name into *out. Returns 0, or TR_EINVAL
 * (not a handle's bytes). */
int tr__handle_parse(const void *data, size_t len, tr_actor_id *out);

#endif
