/* dag/plan.h - what the driver and the actors of a compiled graph share: the graph's
 * segment (a "segment" group of the node: collective/group.h, the driver rank 0 and each
 * actor a rank after it) and the message that attaches an actor to it.
 *
 * Segment: the group header (members' pids, the dead mask the node sets when a member
 * leaves or dies), then, at tr__coll_hdr_bytes(), a tr__dag_hdr and the channels
 * (dag/chan.h), each at an offset from the tr__dag_hdr, 64-byte aligned. The driver lays
 * the channels out after the rendezvous, then sets `magic` and signals `ready`; actors
 * wait for that, check every channel they use, and run. `stop` (seq_cst) ends every wait
 * of the graph: the teardown.
 *
 * Attach (TR__DAG_ATTACH, the worker's builtin; msgpack): {[check: true,] name, world,
 * rank, bytes, timeout_ms, spin_ns, steps: [[method, out, [[chan, reader], ...]
 * [, [group, world, rank, dtype, op]]], ...]}: the segment group to join as `rank`, how
 * its waits spin, and this actor's steps in the order it runs them for each execution:
 * the method ("" for a collective node, whose fourth element names its shm group), the
 * channel it writes (its offset), and the channels it reads with its reader index there
 * (the method's arguments, then its call refs). With `check`, the steps are only checked.
 */
#ifndef TR_DAG_PLAN_H
#define TR_DAG_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "core/wait.h"
#include "troupe/troupe.h"

#define TR__DAG_ATTACH "__troupe_dag_attach"
#define TR__DAG_MAGIC 0x3167616472747574ull /* "tutrdag1" */

typedef struct tr__dag_hdr {
    uint64_t magic;
    uint32_t stop;
    uint32_t pad;
    tr__event ready;
} __attribute__((aligned(64))) tr__dag_hdr;

/* Waits up to ms for every member of a graph's segment but rank 0 (ranks 1..world-1) to
 * have left it (their loops end, then they leave). Returns 0 or TR_ETIMEDOUT. */
int tr__dag_wait_left(const void *seg, int world, int ms);

#endif
