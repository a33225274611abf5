/* tools/netns.h - several "machines" on this one, for multi-node tests and benchmarks:
 * n network namespaces "<tag>n<i>" joined by veth pairs ("<tag>v<i>" inside) on a bridge
 * in a namespace "<tag>br" (addresses 10.213.0.<i+1>/24; tag "trn<pid>"), each with a holder
 * process that also has a mount namespace of its own with a private /tmp, so nothing in one
 * namespace can reach another's Unix sockets: what works between them crossed the network. Needs
 * root, `ip` (iproute2), `unshare` and `nsenter` (util-linux). Not thread-safe. */
#ifndef TR_TOOLS_NETNS_H
#define TR_TOOLS_NETNS_H

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TR_NETNS_MAX 8

typedef struct tr_netns {
    char tag[32];
    int n;
    pid_t holder[TR_NETNS_MAX]; /* our children */
    pid_t inner[TR_NETNS_MAX];  /* the processes in each node's namespaces (nsenter -t) */
} tr_netns;

/* Makes n (1..8) namespaces. 0, or -1 with the reason in why (and nothing left behind).
 * Namespaces an earlier run left (its process gone) are removed first. */
int tr_netns_up(tr_netns *ns, int n, char *why, size_t cap);
/* The shell command that runs cmd inside node i's namespaces (network and mount). */
void tr_netns_wrap(const tr_netns *ns, int i, const char *cmd, char *out, size_t cap);
/* Runs cmd there; its output (stdout and stderr, malloc'd, NUL-terminated) in *out if
 * out is not NULL. Returns the exit status, or -1. */
int tr_netns_run(const tr_netns *ns, int i, const char *cmd, char **out);
/* Kills whatever still runs in the namespaces, the holders, and removes the namespaces. */
void tr_netns_down(tr_netns *ns);

#ifdef __cplusplus
}
#endif
#endif
