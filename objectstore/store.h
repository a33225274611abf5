/* objectstore/store.h - the node's side of the object store: it creates the shared
 * segment (a memfd, 0600 by construction: only passed descriptors reach it), hands it to
 * each driver and worker that attaches (STORE_ATTACH, the descriptor passed over the Unix
 * socket), gives each a client index, and drops every reference a client held when its
 * connection closes (a process that dies drops its refs).
 *
 * Puts and gets never go through the node: clients allocate and publish in the segment
 * under its process-shared lock. Runs on the node's loop thread (not thread-safe).
 */
#ifndef TR_OBJECTSTORE_STORE_H
#define TR_OBJECTSTORE_STORE_H

#include <stddef.h>

#include "core/buf.h"
#include "core/server.h"

/* {} -> {size, client, spill_dir} + the segment's descriptor */
enum { TR__MSG_STORE_ATTACH = 32 };

typedef struct tr__store tr__store;

/* Creates a segment for `capacity` object bytes and starts pre-faulting it in the
 * background. Spilled objects go to a fresh 0700 directory made inside spill_root (removed
 * by tr__store_destroy). Returns 0, TR_ENOMEM, TR_EIO, TR_EINVAL. */
int tr__store_create(size_t capacity, const char *spill_root, tr__store **out);
void tr__store_mount(tr__store *s, tr__server *srv);
/* Appends JSON: "object_store":{...} */
void tr__store_status_json(tr__store *s, tr__buf *out);
void tr__store_destroy(tr__store *s);
/* The node's number in its cluster (1..2^24-1), written into the ids of objects made
 * from now on (objectstore/client.h: tr__ref_node). */
void tr__store_set_node_num(tr__store *s, uint32_t num);
/* The objects in the store and their bytes (any thread). */
void tr__store_counts(tr__store *s, uint64_t *objects, uint64_t *bytes);

/* What the node's metrics show of the store (any thread; a scan of its table). */
typedef struct tr__store_metrics {
    uint64_t capacity, bytes_used, bytes_objects, objects, bytes_spilled, spills, restores;
    uint64_t pinned_objects, bytes_pinned; /* being read by a process now (views) */
} tr__store_metrics;
void tr__store_metrics_get(tr__store *s, tr__store_metrics *out);

/* One object as tr__store_each shows it. */
typedef struct tr__store_obj_view {
    const uint8_t *id; /* 16 bytes */
    uint64_t size;
    int state;             /* TR__OBJ_* (objectstore/segment.h) */
    int holders;           /* processes holding it */
    int pinned;            /* a process reads it now */
    uint32_t n_refs;       /* refs it contains */
    uint32_t contained_by; /* objects that contain it */
    int promise, error;    /* a call result's twin not in yet; a failed call's */
} tr__store_obj_view;
/* Calls fn for each object in the store, under its lock (fn must not use the store). */
void tr__store_each(tr__store *s, void (*fn)(void *ctx, const tr__store_obj_view *o), void *ctx);

struct tr__seg_board;
/* The board's entry of a worker (its actor id's key), or NULL (not on the board). */
struct tr__seg_board *tr__store_board(tr__store *s, uint64_t key);

#endif
