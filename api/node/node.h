/* api/node/node.h - the node service: the one place that mounts core's (KV, status) and the
 * actor layer's (directory) handlers into one process, and owns its session directory.
 */
#ifndef TR_API_NODE_H
#define TR_API_NODE_H

#include <sys/types.h>

#include "core/config.h"

/* Prometheus' file_sd file in a node's session directory (`troupe metrics
 * prometheus-config` names it): the /metrics endpoints of a cluster's nodes (its head's
 * lists them all), or of a node alone. */
#define TR__NODE_SD_FILE "prometheus_sd.json"
/* The token of a node's HTTP port (0600, in its session directory): what another user, or
 * a request from beyond loopback, must present (the cluster's, in a cluster). */
#define TR__NODE_METRICS_TOKEN_FILE "metrics-token"

/* Runs a node service until it is shut down (SHUTDOWN message, SIGTERM/SIGINT, or - for an
 * embedded node - its owner process's end, seen on a pidfd: no connection's end stops it).
 * owner_pid: the process that spawned an embedded node (it must be our parent still), 0
 * for a standalone node. Writes "<address>\n" to ready_fd (if >= 0) once it listens.
 * Returns the process exit status. */
int tr__node_main(const tr_config *cfg, int ready_fd, pid_t owner_pid);

/* Spawns this executable as a node service with cfg's node settings and waits up to
 * timeout_ms for it to listen: the embedded node (log_path NULL: it shares our output,
 * and lives as long as our connection), or a standalone one (detached in its own session,
 * output appended to log_path). Sets *pid and *address (malloc'd). On failure the child
 * is killed and reaped. Returns 0, TR_ECONNECT, TR_ENOMEM. */
int tr__node_spawn(const tr_config *cfg, const char *log_path, int timeout_ms, pid_t *pid,
                   char **address);

/* "<tmpdir>/troupe-<uid>", created 0700 if missing and checked to be ours; if another user
 * holds that name, $XDG_RUNTIME_DIR/troupe or $HOME/.cache/troupe (the same for every
 * process of this user), saying so once. Returns 0, TR_EINVAL (too long), TR_EPERM (no
 * directory of ours anywhere), or the error of making one. */
int tr__node_base_dir(const char *tmpdir, char *out, size_t cap);

#endif
