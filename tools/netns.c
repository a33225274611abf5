/* tools/netns.c - see netns.h. */
#include "tools/netns.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs a shell command; its output appended to *out (malloc'd) if out is not NULL. */
static int sh(const char *cmd, char **out) {
    char full[8192];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t len = 0, cap = 0;
    char *buf = NULL, chunk[4096];
    for (size_t k; (k = fread(chunk, 1, sizeof chunk, p)) > 0;) {
        if (out) {
            if (len + k + 1 > cap) {
                cap = (len + k + 1) * 2;
                char *nb = realloc(buf, cap);
                if (!nb) break;
                buf = nb;
            }
            memcpy(buf + len, chunk, k);
            len += k;
        }
    }
    int st = pclose(p);
    if (out) {
        if (!buf)
            buf = calloc(1, 1);
        else
            buf[len] = '\0';
        *out = buf;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void sweep_stale(void) {
    char *list = NULL;
    sh("ip netns list | grep -o '^trn[0-9]*[nb][r0-9]*'", &list);
    for (char *line = list ? strtok(list, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        int pid = atoi(line + 3);
        if (pid > 0 && kill(pid, 0) != 0) {
            char cmd[256];
            snprintf(cmd, sizeof cmd, "ip netns pids %s | xargs -r kill -9; ip netns del %s", line,
                     line);
            sh(cmd, NULL);
        }
    }
    free(list);
}

int tr_netns_up(tr_netns *ns, int n, char *why, size_t cap) {
    memset(ns, 0, sizeof *ns);
    if (n < 1 || n > TR_NETNS_MAX) {
        snprintf(why, cap, "1..%d namespaces", TR_NETNS_MAX);
        return -1;
    }
    if (geteuid() != 0) {
        snprintf(why, cap, "needs root to make network namespaces");
        return -1;
    }
    if (sh("command -v ip && command -v nsenter && command -v unshare", NULL) != 0) {
        snprintf(why, cap, "needs ip (iproute2), nsenter and unshare (util-linux)");
        return -1;
    }
    sweep_stale();
    snprintf(ns->tag, sizeof ns->tag, "trn%d", (int)getpid());
    ns->n = n;
    char script[8192];
    int k = snprintf(script, sizeof script,
                     "set -e; ip netns add %sbr; ip -n %sbr link add br0 type bridge; "
                     "ip -n %sbr link set br0 up; ",
                     ns->tag, ns->tag, ns->tag);
    for (int i = 0; i < n && k < (int)sizeof script; i++)
        k += snprintf(script + k, sizeof script - (size_t)k,
                      "ip netns add %sn%d; ip link add %sv%d type veth peer name %sp%d; "
                      "ip link set %sv%d netns %sn%d; ip link set %sp%d netns %sbr; "
                      "ip -n %sbr link set %sp%d master br0 up; "
                      "ip -n %sn%d addr add 10.213.0.%d/24 dev %sv%d; "
                      "ip -n %sn%d link set %sv%d up; ip -n %sn%d link set lo up; ",
                      ns->tag, i, ns->tag, i, ns->tag, i, ns->tag, i, ns->tag, i, ns->tag, i,
                      ns->tag, ns->tag, ns->tag, i, ns->tag, i, i + 1, ns->tag, i, ns->tag, i,
                      ns->tag, i, ns->tag, i);
    char *out = NULL;
    if (sh(script, &out) != 0) {
        snprintf(why, cap, "cannot make network namespaces here: %.300s", out ? out : "");
        free(out);
        tr_netns_down(ns);
        return -1;
    }
    free(out);
    for (int i = 0; i < n; i++) {
        int p[2];
        if (pipe(p) != 0) {
            snprintf(why, cap, "pipe");
            tr_netns_down(ns);
            return -1;
        }
        pid_t pid = fork();
        if (pid == 0) {
            dup2(p[1], 1);
            close(p[0]);
            int null = open("/dev/null", O_WRONLY); /* (its shell's "Killed" at teardown) */
            if (null >= 0) dup2(null, 2);
            char c[512];
            snprintf(c, sizeof c,
                     "ip netns exec %sn%d unshare -m --propagation private sh -c 'mount -t tmpfs "
                     "tmpfs /tmp && echo $$ && exec sleep 1000000'",
                     ns->tag, i);
            execl("/bin/sh", "sh", "-c", c, (char *)NULL);
            _exit(127);
        }
        close(p[1]);
        char buf[32] = {0};
        struct pollfd pf = {p[0], POLLIN, 0};
        ssize_t r = pid > 0 && poll(&pf, 1, 15000) == 1 ? read(p[0], buf, sizeof buf - 1) : -1;
        close(p[0]);
        ns->holder[i] = pid;
        ns->inner[i] = r > 0 ? atoi(buf) : 0;
        if (ns->inner[i] <= 0) {
            snprintf(why, cap, "cannot give a namespace a private /tmp (unshare -m)");
            tr_netns_down(ns);
            return -1;
        }
    }
    return 0;
}

void tr_netns_wrap(const tr_netns *ns, int i, const char *cmd, char *out, size_t cap) {
    snprintf(out, cap, "nsenter -t %d -m -n -- %s", (int)ns->inner[i], cmd);
}

int tr_netns_run(const tr_netns *ns, int i, const char *cmd, char **out) {
    char full[8192];
    tr_netns_wrap(ns, i, cmd, full, sizeof full);
    return sh(full, out);
}

void tr_netns_down(tr_netns *ns) {
    if (!ns->tag[0]) return;
    char cmd[8192];
    int k = 0;
    for (int i = 0; i < ns->n; i++)
        k += snprintf(cmd + k, sizeof cmd - (size_t)k, "ip netns pids %sn%d | xargs -r kill -9; ",
                      ns->tag, i);
    sh(cmd, NULL);
    for (int i = 0; i < ns->n; i++)
        if (ns->holder[i] > 0) {
            kill(ns->holder[i], SIGKILL);
            waitpid(ns->holder[i], NULL, 0);
            ns->holder[i] = 0;
        }
    k = snprintf(cmd, sizeof cmd, "ip netns del %sbr; ", ns->tag);
    for (int i = 0; i < ns->n; i++)
        k += snprintf(cmd + k, sizeof cmd - (size_t)k, "ip netns del %sn%d; ", ns->tag, i);
    sh(cmd, NULL);
    ns->tag[0] = '\0';
}
