/* collective/steps.h - the step protocol over a group segment's header: every rank has a
 * step counter and, by op parity, a descriptor of its current op (shm/segment.h). The shm
 * backend moves its data in steps (shm/shm.c says how slots are reused); the gloo backend
 * takes two steps per op that never wait, to check that all ranks agree (see below).
 *
 * Waits spin (long when every rank has a core, briefly and yielding otherwise) then sleep
 * on the counter's futex (core/wait); they look at the dead mask at least every 10 ms and
 * at the deadline. Thread safety: a group is used by one thread at a time.
 */
#ifndef TR_COLLECTIVE_STEPS_H
#define TR_COLLECTIVE_STEPS_H

#include <stdint.h>

#include "collective/group.h"
#include "collective/shm/segment.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Steps this rank has posted: where it is in the lockstep. */
uint32_t tr__coll_my_step(tr_group *g);
/* Posts this rank's next step (and the core it runs on: see tr__coll_wait_event). */
void tr__coll_post(tr_group *g);
/* Records the core this rank runs on (posting does it; channels call it themselves). */
void tr__coll_note_cpu(tr_group *g);
/* Sets this rank's single-copy fields of the op just published (tr__coll_publish): the
 * address peers read, and `single`, the backend's flags (shm: 1 it can, 2 it wants to),
 * which every rank reads in the op's first step. */
void tr__coll_publish_single(tr_group *g, const void *addr, unsigned single);

/* Records, for the other ranks, whether this process is bound to one core (the node's
 * cpu_binding). When every shm rank is bound to a core no other rank has (g->cores_own,
 * found at join), their waits spin for each other, as MPI ranks do, whatever a process's
 * own affinity says of the machine; ranks sharing a core, or one floating, do not. */
void tr__coll_note_pinned(tr_group *g);
/* Until rank q has posted `target` steps / every other rank has. TR_EPEER_DIED as soon as
 * a rank that died or left had not reached `target` (one that finished and left does not
 * fail ranks still reading its last step); TR_ETIMEDOUT at the deadline. */
int tr__coll_wait_rank(tr_group *g, int q, uint32_t target, int64_t deadline);
int tr__coll_wait_all(tr_group *g, uint32_t target, int64_t deadline);
/* Until ev, which rank `peer` moves, moves past `seen`. Fatal deaths: those behind step
 * `target`, or with target -1 (a channel) peer's. Returns TR_ETIMEDOUT without a message
 * (callers word it). */
int tr__coll_wait_event(tr_group *g, tr__event *ev, uint32_t seen, int peer, int64_t target,
                        int64_t deadline);

/* How long this group's waits spin before sleeping (0: core/wait's short spin; negative:
 * yield the core that long, where ranks share cores). */
int64_t tr__coll_spin_limit(const tr_group *g);

/* Publishes this rank's view of its next op (g->seq moves; before the op's first post). */
void tr__coll_publish(tr_group *g, uint32_t kind, tr_dtype dtype, tr_redop op, int root,
                      size_t count);
/* After the op's first tr__coll_wait_all: TR_EINVAL naming the difference unless every
 * rank published the same op. */
int tr__coll_check_agree(tr_group *g);
/* The agreement riding on the op (gloo), two steps that never wait. enter publishes this
 * rank's op, posts, compares it with every rank that has already posted it and posts
 * again. It returns what it knows: TR__COLL_DISAGREES if one of those disagrees (stand
 * in), TR__COLL_AGREES if every rank has posted and all agree (run the op: it cannot fail
 * on a disagreement), TR__COLL_UNKNOWN if some rank has yet to post (run the op, but a
 * later rank may still disagree). Of any two ranks that disagree the later to post sees
 * the earlier, so the ranks that run the op all agree, and data moves only between them.
 * known: the same, later, without waiting (a rank that entered, until it runs the op);
 * wait: waits until every rank has posted its op, then the same (never UNKNOWN), or the
 * code of the wait.
 * leave: after running the op, wait until every rank has posted its op and check them:
 * TR_EINVAL naming the difference, as tr__coll_check_agree.
 * stand_in: wait until every rank has decided; 1 and the op of the ranks that run it in
 * *out (the caller runs that op on scratch buffers, so they finish and Gloo stays in
 * step), 0 if none does. Then tr__coll_check_agree gives the TR_EINVAL. */
enum { TR__COLL_ENTERED = 1, TR__COLL_STANDS_IN = 2 };
enum { TR__COLL_UNKNOWN = 0, TR__COLL_AGREES = 1, TR__COLL_DISAGREES = 2 };
int tr__coll_agree_enter(tr_group *g, uint32_t kind, tr_dtype dtype, tr_redop op, int root,
                         size_t count);
int tr__coll_agree_known(tr_group *g);
int tr__coll_agree_wait(tr_group *g, int64_t deadline);
int tr__coll_agree_leave(tr_group *g, int64_t deadline);
int tr__coll_agree_stand_in(tr_group *g, int64_t deadline, tr__coll_desc *out);
const char *tr__coll_kind_name(uint32_t kind);

#ifdef __cplusplus
}
#endif
#endif
