/* api/node/lists.h - what `troupe list|get|summary` and the node's /api/v1 show: the
 * node's actors, objects, collective groups and the cluster's nodes, as JSON, filtered
 * before they are limited (Ray #33547: a limit that cuts before the filter hides what was
 * asked for).
 *
 *   /api/v1/<kind>?filter=KEY=VALUE&filter=KEY!=VALUE&limit=N&offset=K
 *       {"kind", "total" (all), "matched" (after the filters), "offset", "limit", "items"}
 *   /api/v1/<kind>/<id or a unique prefix of it>     {"kind", "item"}, or 404
 *   /api/v1/summary/<kind>                           counts by state (and by class)
 *
 * kinds: actors, objects, groups, nodes. The same JSON over HTTP and over the node's
 * socket (TR__MSG_API, what the CLI asks). Query values may be percent-encoded. */
#ifndef TR_API_NODE_LISTS_H
#define TR_API_NODE_LISTS_H

#include "actor/directory.h"
#include "api/node/cluster.h"
#include "collective/registry.h"
#include "core/buf.h"
#include "objectstore/store.h"

#define TR__LIST_DEFAULT_LIMIT 100
#define TR__LIST_MAX_LIMIT 10000

typedef struct tr__lists_src {
    tr__directory **dir;
    tr__store *store;
    tr__groups *groups;
    tr__cluster **cluster;
    const char *node_sock; /* this node's address */
    /* instead of all the above: a session's event log (core/events.h), replayed - what
     * `troupe list --session DIR` answers after its node is gone (kinds: actors, nodes,
     * groups, and events: each as it was logged) */
    const char *events_log;
} tr__lists_src;

/* Answers path (from "/api/v1/") with query ("" if none): appends the JSON to out and
 * returns the HTTP status (200, 400 a bad query, 404 no such path or id). */
int tr__lists_answer(const tr__lists_src *src, const char *path, const char *query, tr__buf *out);

#endif
