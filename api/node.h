/* api/node.h - the node service: the one place that mounts core's (KV, status) and the
 * actor layer's (directory) handlers into one process, and owns its session directory.
 */
#ifndef TR_API_NODE_H
#define TR_API_NODE_H

#include "core/config.h"

/* Runs a node service until it is shut down (SHUTDOWN message, SIGTERM/SIGINT, or - for an
 * embedded node - its owner's connection closing). Writes "<address>\n" to ready_fd
 * (if >= 0) once it listens. Returns the process exit status. */
int tr__node_main(const tr_config *cfg, int ready_fd);

/* "<tmpdir>/troupe-<uid>", created 0700 if missing and checked to be ours. */
int tr__node_base_dir(const char *tmpdir, char *out, size_t cap);

#endif
