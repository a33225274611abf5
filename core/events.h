/* core/events.h - the node's durable event log: one append-only file per session,
 * <session>/events.log, a JSON object per line, which outlives the node (the session
 * directory keeps it when the node stops, or is swept after a crash) so that `troupe list
 * --session DIR` answers after the cluster is gone.
 *
 *   {"t":1795740298.152,"event":"actor_died","id":"3f2a...","class":"Worker","reason":"..."}
 *
 * Events: node_started, node_stopped, actor_created, actor_alive, actor_restarting,
 * actor_died, node_joined, node_lost, group_formed, group_failed, group_rank_died.
 * Every value is a string. Each line is one write(2) with O_APPEND: a line is whole or
 * (after a crash mid-write) cut at its end, which readers skip. Only the node process
 * opens the log; elsewhere tr__event does nothing. The file is bounded: past
 * TR__EVENTS_MAX_BYTES the node stops appending and logs one warning. */
#ifndef TR_CORE_EVENTS_H
#define TR_CORE_EVENTS_H

#include <stddef.h>

#include "core/buf.h"

#define TR__EVENTS_FILE "events.log"
#define TR__EVENTS_MAX_BYTES (64u << 20)

/* Opens (creates) <session>/events.log for this process's events. 0, or a code. */
int tr__evlog_open(const char *session);
void tr__evlog_close(void);

/* Appends an event: key/value string pairs, ended by NULL. A NULL value is "". */
void tr__evlog(const char *event, ...) __attribute__((sentinel));

/* Reading a log back. One event: its pairs (t and event included), in order. */
typedef struct tr__evlog_rec {
    int n;
    const char *key[24], *val[24];
} tr__evlog_rec;

/* The value of key in e ("" if absent). */
const char *tr__evlog_get(const tr__evlog_rec *e, const char *key);

/* Calls fn for every whole, well-formed line of the log at path (a line that is not is
 * skipped). 0, or a code (the file cannot be read). */
int tr__evlog_read(const char *path, void (*fn)(void *ctx, const tr__evlog_rec *e), void *ctx);

#endif
