/* api/node/membership.h - the head's table of a cluster's nodes: who joined, the number
 * each is known by (in its objects' ids: the head's is 1), and liveness by heartbeats (a
 * node with none for TR__MEMBER_LOST_MS is lost, one lost for TR__MEMBER_FORGET_MS leaves
 * the table). Pure data over a clock the caller passes (`now`, CLOCK_MONOTONIC ns), so
 * tests drive it with a fake one. Row 0 is the head itself.
 * Thread safety: none; the cluster calls it under its mutex.
 */
#ifndef TR_API_NODE_MEMBERSHIP_H
#define TR_API_NODE_MEMBERSHIP_H

#include <stdint.h>

#include "core/buf.h"

#define TR__MEMBERS_MAX 256
#define TR__MEMBER_LOST_MS 3000
#define TR__MEMBER_FORGET_MS 60000
#define TR__MEMBER_NUM_MAX 0xffffff /* numbers are 24 bits (objects' ids) */

typedef struct tr__member {
    char id[17];
    char address[128]; /* its RPC server, "HOST:PORT" */
    char sock[160];
    double cpus;
    int gpus;
    char resources[256];
    int64_t last_ns;
    int alive;
    int placed;                             /* actors the head placed there, to spread them */
    int client;                             /* a driver's node: it runs no actors */
    uint32_t num;                           /* its number (in its objects' ids), the head's 1 */
    uint64_t actors, objects, object_bytes; /* as its last heartbeat said */
    char metrics[160];                      /* its /metrics' "HOST:PORT" ("": none) */
} tr__member;

typedef struct tr__members {
    tr__member nodes[TR__MEMBERS_MAX];
    int n;
    uint32_t next_num; /* the next number to try for a new node */
} tr__members;

/* An empty table headed by self (row 0, number 1, alive as of now). */
void tr__members_init(tr__members *t, const tr__member *self, int64_t now);

/* Takes m (id, address, sock, cpus, gpus, resources, client filled in) into the table as
 * of now: a node known by its id keeps its row and number; a new one gets `want` (the
 * number it had before the head restarted) if no other node has it, else the next free
 * one. m->num, ->last_ns, ->alive are set. Returns its row, or TR_ERESOURCES (table full). */
int tr__members_join(tr__members *t, tr__member *m, int64_t want, int64_t now);

/* A heartbeat from node id as of now: it is alive. Returns its row (*back: it had been
 * lost), or TR_ENOTFOUND (not in the table: it must register again). */
int tr__members_beat(tr__members *t, const char *id, int64_t now, int *back);

/* As of now: marks lost the nodes silent for TR__MEMBER_LOST_MS (calling on_lost for
 * each, under the caller's lock), and drops those lost for TR__MEMBER_FORGET_MS. */
void tr__members_sweep(tr__members *t, int64_t now, void (*on_lost)(void *arg, const tr__member *m),
                       void *arg);

/* What the table says of the node at address: 1 alive, 0 lost, -1 not in it. */
int tr__members_says(const tr__members *t, const char *address);

/* The table as a JSON array (troupe status, heartbeats' answers): each row's id, address,
 * num, head, client, cpus, gpus, resources, alive, last_seen_ms (as of now), counts. */
void tr__members_json(const tr__members *t, int64_t now, tr__buf *j);

#endif
