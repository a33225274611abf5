/* api/cmd/merge.h - one answer from every node's: on a cluster's head, `troupe list|get|
 * summary` asks each node for its own items (api/node/lists.h; each item says its "node")
 * and puts the answers together as one node would have answered for them all.
 *
 * A list is asked of every node with offset 0 and limit offset+limit (the filters go to
 * each node: they apply before any limit); the merged list is the nodes' items in the
 * order of the answers, then [offset, offset+limit) of them, with "total" and "matched"
 * summed. A summary's counts are summed key by key. */
#ifndef TR_API_CMD_MERGE_H
#define TR_API_CMD_MERGE_H

#include <stddef.h>

#include "core/buf.h"

/* Merges n list answers of kind: JSON ({"kind","items",...}) or, with table, the CLI's
 * tables (a header line, a line an item, "(S shown of M matched, T in all)"). Appends the
 * merged answer to out. 0, or TR_EPROTO (an answer is not a list: the error names which). */
int tr__merge_list(const char *kind, const char *const *answers, size_t n, int table, long offset,
                   long limit, tr__buf *out);

/* Merges n summary answers ({"kind","total","by_state":{..}[,"by_class":{..}]}) of kind:
 * every count summed by its key (a class's by its state). 0, or TR_EPROTO. */
int tr__merge_summary(const char *kind, const char *const *answers, size_t n, tr__buf *out);

#endif
