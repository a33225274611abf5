/* actor/pgroup.h - the node's placement groups (tr_placement_group_create): their table,
 * the atomic reservation of their bundles against the node's resources, and the
 * PG_* request handlers. Part of the directory (actor/directory.c owns one and lends it
 * the node's resource vectors).
 *
 * Mechanism (Ray's own): placing group G takes each bundle's resources out of the node's
 * available ones, all bundles or none, and adds resources of new names to the node's
 * totals and available ones: for bundle i and each resource R of it, "R_g<tag>_<i>" and
 * "R_g<tag>" (any bundle: the sum over the bundles) with the same quantities, where <tag>
 * is 8 hex digits of G's id; and markers "bundle_g<tag>_<i>" (1000) and "bundle_g<tag>"
 * (1000 per bundle). An actor scheduled into G asks for the renamed resources instead of
 * its own (tr__pgroups_actor_req), plus 0.001 of a marker (so that even an actor asking
 * for nothing lands in the group), and the directory places it as any actor. GPUs are
 * devices: a bundle's GPUs are devices taken from the node's (tr__gpus), and an actor in
 * the group gets its devices out of those of its bundle (any bundle's for -1), never the
 * node's others. Removing G kills its actors (the directory's kill hook) and undoes the
 * reservation at once (resources the killed workers still hold in their last moments
 * come back to names that no longer exist: nothing). A group dies with its creator's
 * connection.
 *
 * In a cluster (the host's forward hook set) a driver's PG_* requests go to the head
 * (api/node/pgroups.c), which keeps the whole group and has each node it chose reserve
 * its subset: a *part* (PG_RESERVE from the node's own cluster connection) holds some
 * bundles only ("here"), keeping their global indices (the renamed resources are those
 * of one node), placed at once or refused, owned by the head (PG_REMOVE "forget" undoes
 * it), never by a connection. An actor into a bundle this node does not hold (or a group
 * it holds nothing of) is forwarded to the head, which routes it to the bundle's node.
 *
 * Messages (driver/worker <-> node, msgpack maps):
 *   PG_CREATE {bundles: "CPU=1,GPU=1;CPU=2", strategy, name?} -> {id}
 *   PG_INFO {id}         -> {state, strategy, n, name, reason, bundles, node}
 *   PG_REMOVE {id, forget?} -> {}
 *   PG_BY_NAME {name}    -> {id}
 *   PG_RESERVE {id, bundles, strategy, here: [bundle indices]} -> {} (the cluster's)
 * Runs on the node's loop thread (not thread-safe).
 */
#ifndef TR_ACTOR_PGROUP_H
#define TR_ACTOR_PGROUP_H

#include <stdint.h>

#include "core/buf.h"
#include "core/sched.h"
#include "core/server.h"

enum {
    TR__MSG_PG_CREATE = 73,
    TR__MSG_PG_INFO = 74,
    TR__MSG_PG_REMOVE = 75,
    TR__MSG_PG_BY_NAME = 76,
    TR__MSG_PG_RESERVE = 77,
};

#define TR__PG_MAX_BUNDLES 64
/* Longest name of a bundle's custom resource: its renamed copies must fit TR__RES_NAME. */
#define TR__PG_MAX_RES_NAME (TR__RES_NAME - 1 - 14)

typedef struct tr__pgroups tr__pgroups;

/* What the directory lends the table: the node's resources (the table changes them) and
 * two hooks, called on the loop thread. */
typedef struct tr__pg_host {
    tr__res *total, *avail;
    tr__gpus *gpus;
    const char *node_path;
    int no_actors; /* a cluster's client node: no groups here */
    /* kill every actor in the group of this tag (its workers die in the background) */
    void (*kill_group)(void *ctx, uint32_t tag, const char *why);
    /* resources came back: place what waits */
    void (*changed)(void *ctx);
    void *ctx;
    /* a cluster's: takes a driver's request to the head (1), or not (0: no cluster, or the
     * node's own connection); NULL: none */
    int (*forward)(void *ctx, int type, tr__conn *c, uint64_t seq, const tr__obj *body);
    void *forward_ctx;
} tr__pg_host;

int tr__pgroups_create(const tr__pg_host *h, tr__pgroups **out);
void tr__pgroups_destroy(tr__pgroups *p);
void tr__pgroups_mount(tr__pgroups *p, tr__server *s);
/* Places the pending groups that fit now, in creation order. */
void tr__pgroups_schedule(tr__pgroups *p);
/* A connection closed: its groups are removed and forgotten. */
void tr__pgroups_conn_closed(tr__pgroups *p, uint64_t conn_id);
/* Whether a group waits for resources here (feasible, not yet placed). */
int tr__pgroups_waiting(const tr__pgroups *p);
/* Appends ,"placement_groups":[...] to the node's status JSON. */
void tr__pgroups_status_json(const tr__pgroups *p, tr__buf *out);

/* An actor's request (req, as it asked) into bundle `bundle` (-1: any) of group pg:
 * rewritten in place into the group's names; *tag gets the group's tag, *gpu the GPUs it
 * asked for. Returns 0, TR_ENOTFOUND (no such group), TR_ESTATE (removed), TR_EINVAL
 * (bundle out of range, table full), TR_ERESOURCES (more than the bundle - or, for -1,
 * than every bundle - holds), with the error set. */
int tr__pgroups_actor_req(tr__pgroups *p, const uint8_t pg[16], int bundle, tr__res *req,
                          uint32_t *tag, double *gpu);
/* Whether k GPUs of the group's bundle (-1: any) can be given now (1 for k == 0). */
int tr__pgroups_gpu_fit(tr__pgroups *p, uint32_t tag, int bundle, double k);
/* Takes them (they fit): the node's device ids into out; returns how many. */
int tr__pgroups_gpu_take(tr__pgroups *p, uint32_t tag, int bundle, double k, int *out, int cap);
/* Gives back what take gave (a removed group's: nothing). */
void tr__pgroups_gpu_give(tr__pgroups *p, uint32_t tag, double k, const int *ids, int n);

#endif
