/* collective/registry.h - the node's group registry: rendezvous of the ranks of a
 * collective group (GROUP_JOIN answers once every rank has joined, or times out), the
 * group's shared segment (created and pre-faulted here, passed to each rank with
 * SCM_RIGHTS), and failure notification: when a member leaves or its connection closes,
 * its bit is set in the segment's dead mask, which waiting ranks look at at least every
 * 10 ms, so live ranks fail with TR_EPEER_DIED instead of hanging. A group goes, with its
 * rendezvous keys, when its last member leaves. Runs on the node's loop thread (not
 * thread-safe).
 */
#ifndef TR_COLLECTIVE_REGISTRY_H
#define TR_COLLECTIVE_REGISTRY_H

#include "core/kv.h"
#include "core/server.h"

enum {
    TR__MSG_GROUP_JOIN = 96,   /* {name, world, rank, backend, wait_ms} -> {size} + fd */
    TR__MSG_GROUP_LEAVE = 97,  /* {name, rank} */
    TR__MSG_GROUP_CANCEL = 98, /* {name}: a "segment" group still gathering is called off */
};

typedef struct tr__groups tr__groups;

/* kv: the node's KV store, where backends keep rendezvous keys under
 * TR__COLL_KV_PREFIX "<group>/"; they are deleted with the group. */
int tr__groups_create(tr__kv *kv, tr__groups **out);
/* Groups alive on the node (for tr_node_status). */
size_t tr__groups_count(const tr__groups *g);

/* One group as tr__groups_each shows it; its ranks' last ops from their shared header
 * (rank_seq[r], rank_kind[r]: the highest op number it began, TR__COLL_* kind; 0: none, or
 * a group across nodes, whose ranks' header is their own). */
typedef struct tr__group_view {
    const char *name, *backend;
    int world, joined, live, complete;
    uint64_t dead; /* bit per rank */
    const int32_t *pid;
    uint64_t rank_seq[64];
    uint32_t rank_kind[64];
} tr__group_view;
void tr__groups_each(const tr__groups *g, void (*fn)(void *ctx, const tr__group_view *v),
                     void *ctx);
void tr__groups_mount(tr__groups *g, tr__server *s);
/* Answers pending joins with TR_ECLOSED and closes timers (node shutdown). */
void tr__groups_close(tr__groups *g);
void tr__groups_destroy(tr__groups *g);

#endif
