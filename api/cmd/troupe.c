/* api/cmd/troupe.c - the `troupe` command: start, inspect and stop a standalone node service.
 *
 *   troupe start --head [--port P] [--bind ADDR] [--token-file F] [--num-cpus N]
 *                       [--num-gpus N] [--resources a=1,b=2] [--tmpdir D]
 *                       [--cpu-binding cores|none] [--worker-path P]...
 *   troupe start --address HOST:PORT [--token-file F] [--bind ADDR] [--port P] [...]
 *                (either start: [--tls-cert F --tls-key F --tls-ca F], TLS between nodes;
 *                [--block], the node's lifetime: see below)
 *   troupe status [--address PATH | --address HOST:PORT [--token-file F]
 *                 [--tls-ca F --tls-cert F --tls-key F]]
 *   troupe stop   [--address PATH]
 *   troupe metrics prometheus-config [--address PATH]
 *   troupe list KIND [--filter KEY=VALUE]... [--limit N] [--offset N] [--json]
 *   troupe slurm [--port P] [--worker-path PATH]... -- COMMAND   (slurm.c: in a batch job)
 *   troupe get KIND ID [--json];  troupe summary KIND;  troupe debug collectives
 *                (KIND: actors, objects, groups, graphs, tasks, nodes; the JSON is the
 *                node's /api/v1's; in a cluster, every node's merged: merge.h)
 *   (start: [--metrics-port P] [--metrics-host ADDR], the node's /metrics and status page)
 *   (--token T too, and TROUPE_CLUSTER_TOKEN: a token on a command line is visible to every
 *   user in /proc; the file or the environment are not)
 *
 * `start` spawns this executable as a detached node (its own session), waits until it
 * listens, records its address in <tmpdir>/troupe-<uid>/head and prints it. Drivers reach
 * it with the config key "address". With --port, a head listens on TCP for other nodes
 * (loopback unless --bind names another address), always with a token: given, or made by
 * the head and written to its session directory (printed); `start --address HOST:PORT`
 * starts a node that joins that head (api/cluster.h). With --block, `start` stays until
 * the node ends (its exit status: 0 if it was stopped, 1 if it died), and a SIGTERM or
 * SIGINT to it stops the node (SIGTERM, then SIGKILL after 15 s): for a container's or a
 * batch job's main process (deploy/kubernetes, troupe slurm).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "api/cmd/merge.h"
#include "api/cmd/slurm.h"
#include "api/node/cluster.h"
#include "api/node/lists.h"
#include "api/node/node.h"
#include "core/clock.h"
#include "core/codec.h"
#include "core/config.h"
#include "core/frame.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/nodeconn.h"
#include "core/rpc.h"
#include "core/events.h"
#include "core/status.h"
#include "core/trace.h"

static void usage(void) {
    fprintf(stderr,
            "usage: troupe start --head [--port P] [--bind ADDR] [--token-file F] [--num-cpus N]\n"
            "                           [--num-gpus N] [--resources a=1,b=2] [--tmpdir DIR]\n"
            "                           [--cpu-binding cores|none] [--worker-path PATH]...\n"
            "       troupe start --address HOST:PORT [--token-file F] [--bind ADDR] [--port P]\n"
            "                    [...]  (either start: [--tls-cert F --tls-key F --tls-ca F]\n"
            "                    [--block]: stay until the node ends; SIGTERM stops it)\n"
            "       troupe status [--address PATH | --address HOST:PORT [--token-file F]\n"
            "                     [--tls-ca F --tls-cert F --tls-key F]] [--tmpdir DIR]\n"
            "       (--token T works too, but every user sees a command line: prefer\n"
            "        --token-file or TROUPE_CLUSTER_TOKEN)\n"
            "       troupe stop   [--address PATH] [--tmpdir DIR]\n"
            "       troupe metrics prometheus-config [--address PATH] [--tmpdir DIR]\n"
            "       troupe list KIND [--filter KEY=VALUE]... [--limit N] [--offset N] [--json]\n"
            "       troupe get KIND ID [--json]     troupe summary KIND\n"
            "       troupe debug collectives [--json]  (the flight recorder: each group's\n"
            "                    verdict, who is in which op and who is not; --json: the rings)\n"
            "       troupe timeline [-o FILE|-]  (Chrome trace-event JSON of the node's\n"
            "                    processes: calls, gets, puts, collective ops, graph steps)\n"
            "       (KIND: actors, objects, groups, graphs, tasks, nodes; --address PATH,\n"
            "        --tmpdir DIR)\n"
            "       troupe list|get KIND --session DIR|last  (a session's event log, after its\n"
            "                    node is gone: KIND actors, nodes, groups or events)\n"
            "       (start: [--metrics-port P] [--metrics-host ADDR]: the node's /metrics\n"
            "        and status page; 0, the default: any free port; -1: none)\n"
            "       troupe slurm [--port P] [--worker-path PATH]... -- COMMAND [ARGS...]\n"
            "                    (in an sbatch script: a cluster on the job's nodes for it)\n"
            "       troupe version\n");
}

/* Appends item to a query ("a=b&c=d"), percent-encoding what a query cannot carry as is
 * in a value. 0, or -1 if it does not fit. */
static int list_query_add(char *q, size_t cap, const char *item) {
    size_t k = strlen(q);
    if (k && k + 1 < cap) q[k++] = '&';
    const char *eq = strchr(item, '=');
    for (const char *p = item; *p; p++) {
        unsigned char c = (unsigned char)*p;
        int plain = isalnum(c) || strchr("-._~!=:", c) || (p == eq);
        if (k + 4 >= cap) return -1;
        k += (size_t)(plain ? snprintf(q + k, cap - k, "%c", c)
                            : snprintf(q + k, cap - k, "%%%02X", c));
    }
    q[k] = '\0';
    return 0;
}

static int fail(int rc, const char *what) {
    fprintf(stderr, "troupe: %s: %s (%s)\n", what, tr_last_error(), tr_errname(rc));
    return 1;
}

static int head_file(const char *tmpdir, char *out, size_t cap) {
    char base[512];
    int rc = tr__node_base_dir(tmpdir, base, sizeof base);
    if (rc) return rc;
    snprintf(out, cap, "%s/head", base);
    return 0;
}

static int default_address(const char *tmpdir, char *out, size_t cap) {
    char hf[600];
    int rc = head_file(tmpdir, hf, sizeof hf);
    if (rc) return rc;
    FILE *f = fopen(hf, "r");
    if (!f) return tr__err(TR_ENOTFOUND, "no running head node recorded in %s (use --address)", hf);
    if (!fgets(out, (int)cap, f)) out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
    return out[0] ? 0 : tr__err(TR_ENOTFOUND, "%s is empty", hf);
}

static int connect_cli(const char *addr, tr__nodeconn **out) {
    int rc = tr__nodeconn_open(addr, TR__DEFAULT_MAX_MSG, out);
    if (rc) return rc;
    rc = tr__nodeconn_hello(*out, "cli", 0, 5000);
    if (rc) tr__nodeconn_close(*out);
    return rc;
}

/* The node's status JSON (a copy: free it), or NULL with the error set. */
static char *local_status(const char *addr) {
    tr__nodeconn *c;
    if (connect_cli(addr, &c)) return NULL;
    tr__reply r;
    char *json = NULL;
    if (tr__nodeconn_call(c, TR__MSG_STATUS, NULL, 5000, &r) == 0) {
        const char *p;
        size_t n;
        if (tr__get_str(r.root, "json", &p, &n) == 0 && (json = malloc(n + 1))) {
            memcpy(json, p, n);
            json[n] = '\0';
        }
        tr__reply_free(&r);
    }
    tr__nodeconn_close(c);
    return json;
}

/* The node's "dashboard" ("http://HOST:PORT/") from its status, into out ("" if none). */
static void dashboard_of(const char *json, char *out, size_t cap) {
    const char *at = json ? strstr(json, "\"dashboard\":\"") : NULL;
    out[0] = '\0';
    if (!at) return;
    at += 13;
    const char *end = strchr(at, '"');
    if (end && (size_t)(end - at) < cap) snprintf(out, cap, "%.*s", (int)(end - at), at);
}

static volatile sig_atomic_t block_stop; /* --block: the signal that asks the node to stop */

static void on_block_signal(int sig) {
    block_stop = sig;
}

/* start --block: waits for the node (our child) to end; a SIGTERM or SIGINT to us stops it
 * (SIGTERM: it stops its workers and leaves its cluster; SIGKILL if it has not ended 15 s
 * later). Returns 0 if it ended after we asked, else 1. */
static int block_on(pid_t pid) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_block_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    fflush(stdout);
    int64_t asked = 0;
    for (;;) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid || (w < 0 && errno == ECHILD)) {
            if (!asked)
                fprintf(stderr, "troupe start: the node (pid %d) ended by itself\n", (int)pid);
            return asked ? 0 : 1;
        }
        if (block_stop && !asked) {
            asked = tr__now_ns();
            kill(pid, SIGTERM);
        }
        if (asked && tr__now_ns() - asked > 15000000000LL) kill(pid, SIGKILL);
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
}

/* A node of a cluster, over the network: "HOST:PORT" (its cluster address), with the given
 * token or that of a node of this machine at that port. */
static int cmd_start(tr_config *cfg, int head, const char *join, int block) {
    if (head == !!join) {
        fprintf(stderr, "troupe start: --head, or --address HOST:PORT of a head to join\n");
        return 2;
    }
    if (head && cfg->cluster_port < 0 && cfg->cluster_bind) {
        fprintf(stderr, "troupe start: --bind is for a cluster: give --port too\n");
        return 2;
    }
    int rc = join ? tr_config_set(cfg, "cluster_head", join) : 0;
    if (rc) return fail(rc, "--address");
    char base[512], logf[600] = "/dev/null";
    if (tr__node_base_dir(cfg->tmpdir, base, sizeof base) == 0)
        snprintf(logf, sizeof logf, "%s/node.log", base);
    pid_t pid;
    char *addr;
    rc = tr__node_spawn(cfg, logf, join ? 20000 : 10000, &pid, &addr);
    if (rc) { /* the node says why in its log: its last error line */
        char last[1024] = "", line[1024];
        FILE *f = fopen(logf, "r");
        while (f && fgets(line, sizeof line, f))
            if (strstr(line, "troupe node[") && strstr(line, "] E "))
                snprintf(last, sizeof last, "%s", line);
        if (f) fclose(f);
        if (last[0]) fprintf(stderr, "%s", last);
        return fail(rc, "start");
    }
    char hf[600];
    if (head_file(cfg->tmpdir, hf, sizeof hf) == 0) {
        int fd = open(hf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd >= 0) {
            dprintf(fd, "%s\n", addr);
            close(fd);
        }
    }
    printf("troupe node started (pid %d, log %s)\naddress: %s\n", (int)pid, logf, addr);
    char *json = local_status(addr), dash[200];
    dashboard_of(json, dash, sizeof dash);
    free(json);
    if (dash[0]) printf("dashboard: %s (Prometheus: %smetrics)\n", dash, dash);
    const char *slash = strrchr(addr, '/');
    if (slash && (cfg->cluster_port >= 0 || join))
        printf("cluster token: %.*s/%s (0600; this machine's drivers, nodes and `troupe status` "
               "read it there; give it to other machines' nodes with --token-file)\n",
               (int)(slash - addr), addr, TR__CLUSTER_TOKEN_FILE);
    free(addr);
    return block ? block_on(pid) : 0;
}

static int remote_status(const char *addr, const tr_config *cfg) {
    const char *token = cfg->cluster_token, *tmpdir = cfg->tmpdir;
    char base[512], found[300];
    if (!token && tr__node_base_dir(tmpdir, base, sizeof base) == 0 &&
        tr__cluster_local_token(base, addr, found, sizeof found) == 0)
        token = found;
    if (!token) {
        fprintf(stderr,
                "troupe status: %s needs the cluster's token (--token-file F, or "
                "TROUPE_CLUSTER_TOKEN); no node of this machine listens there\n",
                addr);
        return 1;
    }
    tr__rpc_client *c;
    tr__rpc_tls tls = {NULL, NULL, NULL};
    /* TLS is mutual: this side shows a certificate too (--tls-cert, --tls-key) */
    int rc = cfg->cluster_tls_ca ? tr__rpc_tls_load(cfg->cluster_tls_cert, cfg->cluster_tls_key,
                                                    cfg->cluster_tls_ca, &tls)
                                 : 0;
    if (!rc) rc = tr__rpc_client_create_tls(addr, token, &tls, TR__DEFAULT_MAX_MSG, &c);
    tr__rpc_tls_free(&tls);
    if (rc) return fail(rc, "status");
    tr__buf b = TR__BUF_INIT, r = TR__BUF_INIT;
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "op");
    tr__enc_str(&b, "status");
    rc = tr__rpc_call(c, b.data, b.len, 5000, &r);
    tr__dec d;
    const char *p;
    size_t n;
    if (!rc && !(rc = tr__dec_init(&d, r.data, r.len))) {
        if (!(rc = tr__get_str(d.root, "json", &p, &n))) printf("%.*s\n", (int)n, p);
        tr__dec_free(&d);
    }
    tr__buf_free(&b);
    tr__buf_free(&r);
    tr__rpc_client_destroy(c);
    return rc ? fail(rc, "status") : 0;
}

static int cmd_status(const char *addr, const tr_config *cfg) {
    if (!strchr(addr, '/') && strchr(addr, ':')) return remote_status(addr, cfg);
    tr__nodeconn *c;
    int rc = connect_cli(addr, &c);
    if (rc) return fail(rc, "status");
    tr__reply r;
    rc = tr__nodeconn_call(c, TR__MSG_STATUS, NULL, 5000, &r);
    if (rc) {
        tr__nodeconn_close(c);
        return fail(rc, "status");
    }
    const char *p;
    size_t n;
    if (tr__get_str(r.root, "json", &p, &n) == 0) printf("%.*s\n", (int)n, p);
    tr__reply_free(&r);
    tr__nodeconn_close(c);
    return 0;
}

/* The node's /api/v1 answer for path and query: its HTTP status (or a code < 0: no
 * answer), and *text (malloc'd, NUL-terminated). */
static int api_get(const char *addr, const char *path, const char *query, char **text) {
    *text = NULL;
    tr__nodeconn *c;
    int rc = connect_cli(addr, &c);
    if (rc) return rc;
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 2);
    tr__enc_str(&b, "path");
    tr__enc_str(&b, path);
    tr__enc_str(&b, "query");
    tr__enc_str(&b, query);
    tr__reply r;
    rc = tr__nodeconn_call(c, TR__MSG_API, &b, 10000, &r);
    tr__buf_free(&b);
    tr__nodeconn_close(c);
    if (rc) return rc;
    int64_t status = 0;
    const char *p = "";
    size_t n = 0;
    tr__get_int(r.root, "status", &status);
    tr__get_str(r.root, "json", &p, &n);
    if ((*text = malloc(n + 1))) {
        memcpy(*text, p, n);
        (*text)[n] = '\0';
    }
    tr__reply_free(&r);
    return (int)status;
}

/* "HOST:PORT" of a node's HTTP address ("http://HOST:PORT/" or "HOST:PORT"). */
static void host_port(const char *url, char *out, size_t cap) {
    if (strncmp(url, "http://", 7) == 0) url += 7;
    snprintf(out, cap, "%.*s", (int)strcspn(url, "/"), url);
}

/* The most a node's answer may hold (its rings: 512 processes of 600 KiB fit). */
#define HTTP_FETCH_MAX (1024u << 20)

/* A GET of path from a node's HTTP port (url "HOST:PORT", or "http://HOST:PORT/"), with
 * the token: the body into out. 0, or a code. With status, any answer is 0 and *status its
 * HTTP status; without, an answer other than 200 is TR_EPROTO. */
static int http_get(const char *url, const char *token, const char *path, tr__buf *out,
                    int *status) {
    char host[256], port[16], hp[300];
    host_port(url, hp, sizeof hp);
    if (sscanf(hp, "%255[^:]:%15[0-9]", host, port) != 2)
        return tr__err(TR_EINVAL, "%s is not HOST:PORT", url);
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai)
        return tr__err(TR_ECONNECT, "%s: no such host", url);
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0
                 ? tr__err(TR_ECONNECT, "%s: %s", url, strerror(errno))
                 : 0;
    freeaddrinfo(ai);
    struct timeval tv = {30, 0}; /* (every read and write within 30 s) */
    if (!rc) {
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        char req[1200];
        int k = snprintf(req, sizeof req,
                         "GET %s HTTP/1.1\r\nHost: %s:%s\r\nAuthorization: Bearer %s\r\n"
                         "Connection: close\r\n\r\n",
                         path, host, port, token);
        if (k <= 0 || (size_t)k >= sizeof req || write(fd, req, (size_t)k) != k)
            rc = tr__err(TR_EIO, "%s: sending: %s", url, strerror(errno));
    }
    tr__buf all = TR__BUF_INIT;
    char buf[65536];
    ssize_t got;
    int64_t deadline = tr__deadline(120000); /* (the whole answer, however it trickles) */
    while (!rc && (got = read(fd, buf, sizeof buf)) > 0) {
        if (all.len + (size_t)got > HTTP_FETCH_MAX) { /* (a node that never stops sending) */
            rc = tr__err(TR_EMSGSIZE, "%s%s: more than %u bytes", url, path, HTTP_FETCH_MAX);
            break;
        }
        if (tr__now_ns() > deadline) {
            rc = tr__err(TR_ETIMEDOUT, "%s%s: no whole answer within 120 s", url, path);
            break;
        }
        tr__buf_append(&all, buf, (size_t)got);
    }
    if (fd >= 0) close(fd);
    const char *body = all.data ? memmem(all.data, all.len, "\r\n\r\n", 4) : NULL;
    int code = 0;
    if (body && all.len >= 12 && memcmp(all.data, "HTTP/1.1 ", 9) == 0) code = atoi(all.data + 9);
    if (!rc && (code < 100 || (!status && code != 200)))
        rc = tr__err(TR_EPROTO, "%s%s: %.*s", url, path,
                     (int)(all.data ? strcspn(all.data, "\r\n") : 9),
                     all.data ? all.data : "no answer");
    if (status) *status = code;
    if (!rc) tr__buf_append(out, body + 4, all.len - (size_t)(body + 4 - all.data));
    tr__buf_free(&all);
    return rc;
}

static int http_fetch(const char *url, const char *token, const char *path, tr__buf *out) {
    return http_get(url, token, path, out, NULL);
}

/* The other nodes of the cluster of the node at addr, as its nodes list has them: their
 * HTTP addresses ("metrics") and the session's token for them (the cluster's). */
typedef struct others {
    size_t n;
    char (*url)[200]; /* malloc'd */
    char token[200];
} others;

static void other_nodes(const char *addr, others *o) {
    memset(o, 0, sizeof *o);
    const char *slash = strrchr(addr, '/');
    if (!slash) return;
    char path[900];
    snprintf(path, sizeof path, "%.*s/%s", (int)(slash - addr), addr, TR__NODE_METRICS_TOKEN_FILE);
    FILE *tf = fopen(path, "re");
    if (tf) {
        if (!fgets(o->token, sizeof o->token, tf)) o->token[0] = '\0';
        o->token[strcspn(o->token, "\r\n")] = '\0';
        fclose(tf);
    }
    char *json = local_status(addr), dash[200] = "", self[200] = "", *nodes = NULL;
    if (json) dashboard_of(json, dash, sizeof dash);
    free(json);
    host_port(dash, self, sizeof self);
    if (api_get(addr, "/api/v1/nodes", "limit=10000", &nodes) == 200 && nodes) {
        for (const char *at = nodes; (at = strstr(at, "\"metrics\":\"")) != NULL;) {
            at += 11;
            char url[200], host[200];
            size_t n = strcspn(at, "\"");
            snprintf(url, sizeof url, "%.*s", (int)(n < sizeof url ? n : sizeof url - 1), at);
            host_port(url, host, sizeof host);
            if (!host[0] || strcmp(host, self) == 0) continue;
            char(*more)[200] = realloc(o->url, (o->n + 1) * sizeof *o->url);
            if (!more) break;
            o->url = more;
            snprintf(o->url[o->n++], sizeof *o->url, "%s", url);
        }
    }
    free(nodes);
}

/* The trace directories to merge, ':'-joined (malloc'd; NULL: none): the node's at addr,
 * then - on a cluster's head - a copy of every other node's (fetched from its HTTP port
 * with the session's token, core/trace.h tr__trace_bundle) in a new directory under /tmp
 * whose path goes to tmp ("" if none: remove it after). A node that does not answer is
 * said on stderr and left out. */
static char *gather_traces(const char *addr, int events, char *tmp, size_t cap) {
    tmp[0] = '\0';
    const char *slash = strrchr(addr, '/');
    if (!slash) {
        tr__err(TR_EINVAL, "%s is not a node's socket path", addr);
        return NULL;
    }
    tr__buf dirs = TR__BUF_INIT;
    tr__buf_printf(&dirs, "%.*s/%s", (int)(slash - addr), addr, TR__TRACE_DIR);
    others o;
    other_nodes(addr, &o);
    for (size_t i = 0; i < o.n; i++) {
        if (!tmp[0]) {
            snprintf(tmp, cap, "/tmp/troupe-merge-XXXXXX");
            if (!mkdtemp(tmp)) {
                tmp[0] = '\0';
                break;
            }
        }
        char into[600], host[200];
        snprintf(into, sizeof into, "%s/%zu", tmp, i + 1);
        host_port(o.url[i], host, sizeof host);
        tr__buf bundle = TR__BUF_INIT;
        int rc = http_fetch(o.url[i], o.token, events ? "/api/v1/rings?events=1" : "/api/v1/rings",
                            &bundle);
        if (!rc) rc = tr__trace_unbundle(bundle.data, bundle.len, into, host);
        tr__buf_free(&bundle);
        if (rc) {
            fprintf(stderr, "troupe: the node at %s is left out: %s\n", o.url[i], tr__last_error());
            continue;
        }
        tr__buf_append(&dirs, ":", 1);
        tr__buf_append(&dirs, into, strlen(into));
    }
    free(o.url);
    tr__buf_append(&dirs, "", 1);
    return dirs.data; /* (the buffer's, handed over) */
}

/* Removes what gather_traces put under tmp. */
static void drop_gathered(const char *tmp) {
    if (!tmp[0]) return;
    char cmd[700];
    DIR *d = opendir(tmp);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(cmd, sizeof cmd, "%s/%s", tmp, e->d_name);
        DIR *sd = opendir(cmd);
        struct dirent *f;
        while (sd && (f = readdir(sd)))
            if (f->d_name[0] != '.') unlinkat(dirfd(sd), f->d_name, 0);
        if (sd) closedir(sd);
        rmdir(cmd);
    }
    if (d) closedir(d);
    rmdir(tmp);
}

/* `troupe debug collectives`: the flight recorder's verdicts (--json: every rank's ring)
 * of the node's ranks and, on a cluster's head, every node's. 0, or 1. */
static int cmd_collectives(const char *addr, int json) {
    char tmp[100];
    char *dirs = gather_traces(addr, 0, tmp, sizeof tmp);
    if (!dirs) return fail(TR_EINVAL, "debug");
    tr__buf b = TR__BUF_INIT;
    int rc = tr__flight_verdicts(dirs, NULL, json ? NULL : &b, json ? &b : NULL);
    free(dirs);
    drop_gathered(tmp);
    if (rc) return fail(rc, "debug");
    fwrite(b.data ? b.data : "", 1, b.len, stdout);
    tr__buf_free(&b);
    return 0;
}

/* `troupe list|get|summary`: the node's /api/v1 answer for path and query, printed (the
 * JSON as HTTP gives it, or the node's text table). 0, or 1 (the node's error printed). */
static int cmd_api(const char *addr, const char *path, const char *query) {
    char *text;
    int status = api_get(addr, path, query, &text);
    if (status <= 0) return fail(status ? status : TR_EPROTO, "list");
    size_t n = text ? strlen(text) : 0;
    FILE *to = status == 200 ? stdout : stderr;
    fprintf(to, "%s%s", text ? text : "", n && text[n - 1] == '\n' ? "" : "\n");
    free(text);
    return status == 200 ? 0 : 1;
}

/* `troupe list|get|summary` where the node at addr has other nodes in its cluster (a
 * cluster's head, or any node of it): every node's answer, merged (merge.h) - a list of
 * kind with the filters of node_query (each node gets them and limit offset+limit), one
 * item (path "/api/v1/KIND/ID": the first node that has it) or a summary (what="summary").
 * A node that does not answer is named on stderr and left out. 0, or 1. */
static int cmd_api_cluster(const char *addr, const others *o, const char *what, const char *kind,
                           const char *path, const char *node_query, int table, long offset,
                           long limit) {
    char *local;
    int status = api_get(addr, path, node_query, &local);
    if (status <= 0) return fail(status ? status : TR_EPROTO, what);
    int get = strcmp(what, "get") == 0;
    if (status != 200 && !(get && status == 404)) { /* (a bad query: every node's answer) */
        fprintf(stderr, "%s\n", local ? local : "");
        free(local);
        return 1;
    }
    const char **answers = calloc(o->n + 1, sizeof *answers);
    tr__buf *bodies = calloc(o->n + 1, sizeof *bodies);
    size_t n = 0;
    if (!answers || !bodies) {
        free(answers);
        free(bodies);
        free(local);
        return fail(tr__err(TR_ENOMEM, "%s", what), what);
    }
    if (status == 200) answers[n++] = local;
    char url_path[2400];
    snprintf(url_path, sizeof url_path, "%s%s%s", path, *node_query ? "?" : "", node_query);
    for (size_t i = 0; i < o->n && !(get && n); i++) {
        int code = 0;
        int rc = http_get(o->url[i], o->token, url_path, &bodies[i], &code);
        if (!rc && code == 200) {
            tr__buf_append(&bodies[i], "", 1);
            answers[n++] = bodies[i].data;
        } else if (!(rc == 0 && get && code == 404)) {
            fprintf(stderr, "troupe: the node at %s is left out: %s\n", o->url[i],
                    rc ? tr__last_error() : "its answer was not 200");
        }
    }
    tr__buf out = TR__BUF_INIT;
    int rc = 0;
    if (get) { /* the first node that has it */
        if (n) tr__buf_append(&out, answers[0], strlen(answers[0]));
    } else if (strcmp(what, "summary") == 0) {
        rc = tr__merge_summary(kind, answers, n, &out);
    } else {
        rc = tr__merge_list(kind, answers, n, table, offset, limit, &out);
    }
    int code = 0;
    if (rc)
        code = fail(rc, what);
    else if (get && !n) {
        fprintf(stderr, "%s\n", local ? local : "");
        code = 1;
    } else
        printf("%.*s%s", (int)out.len, out.data ? out.data : "",
               out.len && out.data[out.len - 1] == '\n' ? "" : "\n");
    for (size_t i = 0; i < o->n; i++)
        tr__buf_free(&bodies[i]);
    tr__buf_free(&out);
    free(bodies);
    free(answers);
    free(local);
    return code;
}

/* `troupe list|get --session DIR`: the answer a session's event log gives after its node
 * is gone (api/node/lists.h); DIR "last": the newest session under tmpdir's base. */
static int cmd_session(const char *dir, const char *tmpdir, const char *path, const char *query) {
    char log[1400], best[1100] = "";
    if (strcmp(dir, "last") == 0) {
        char base[600];
        int rc = tr__node_base_dir(tmpdir, base, sizeof base);
        if (rc) return fail(rc, "list");
        DIR *d = opendir(base);
        time_t newest = 0;
        struct dirent *e;
        while (d && (e = readdir(d))) {
            struct stat st;
            char p[1100];
            snprintf(p, sizeof p, "%s/%s/%s", base, e->d_name, TR__EVENTS_FILE);
            if (e->d_name[0] == 'n' && stat(p, &st) == 0 && st.st_mtime >= newest) {
                newest = st.st_mtime;
                snprintf(best, sizeof best, "%s/%s", base, e->d_name);
            }
        }
        if (d) closedir(d);
        if (!best[0]) return fail(tr__err(TR_ENOTFOUND, "no session in %s", base), "list");
        dir = best;
    }
    snprintf(log, sizeof log, "%s/%s", dir, TR__EVENTS_FILE);
    if (access(log, R_OK) != 0)
        return fail(tr__err(TR_ENOTFOUND, "%s: %s", log, strerror(errno)), "list");
    tr__lists_src src;
    memset(&src, 0, sizeof src);
    src.events_log = log;
    tr__buf b = TR__BUF_INIT;
    int status = tr__lists_answer(&src, path, query, &b);
    FILE *to = status == 200 ? stdout : stderr;
    fprintf(to, "%.*s%s", (int)b.len, b.data ? b.data : "",
            b.len && b.data[b.len - 1] == '\n' ? "" : "\n");
    tr__buf_free(&b);
    return status == 200 ? 0 : 1;
}

/* `troupe timeline`: the node's processes' rings (core/trace.h), read where they are (the
 * node's session directory, beside its socket), as Chrome trace-event JSON, to output
 * (default: timeline-<time>.json here; "-": stdout). 0, or 1. */
static int cmd_timeline(const char *addr, const char *output) {
    char name[100], tmp[100];
    if (!output) {
        snprintf(name, sizeof name, "timeline-%lld.json", (long long)time(NULL));
        output = name;
    }
    char *dirs = gather_traces(addr, 1, tmp, sizeof tmp);
    if (!dirs) return fail(TR_EINVAL, "timeline");
    tr__buf b = TR__BUF_INIT;
    int rc = tr__trace_timeline(dirs, &b);
    free(dirs);
    drop_gathered(tmp);
    if (rc) return fail(rc, "timeline");
    int to_stdout = strcmp(output, "-") == 0;
    FILE *f = to_stdout ? stdout : fopen(output, "we");
    int bad = !f || fwrite(b.data, 1, b.len, f) != b.len;
    if (f && !to_stdout && fclose(f) != 0) bad = 1;
    tr__buf_free(&b);
    if (bad) return fail(tr__err(TR_EIO, "%s: %s", output, strerror(errno)), "timeline");
    if (!to_stdout)
        fprintf(stderr,
                "troupe timeline: %s (load it in https://ui.perfetto.dev or chrome://tracing)\n",
                output);
    return 0;
}

/* A Prometheus scrape config for the node at addr (a socket path): its file_sd file (a
 * head's lists every node of its cluster) and, in a cluster, its token file. */
static int cmd_prometheus_config(const char *addr) {
    const char *slash = strrchr(addr, '/');
    if (!slash) return fail(tr__err(TR_EINVAL, "%s is not a node's socket path", addr), "metrics");
    char *json = local_status(addr), dash[200];
    if (!json) return fail(TR_ECONNECT, "metrics");
    dashboard_of(json, dash, sizeof dash);
    free(json);
    if (!dash[0]) {
        fprintf(stderr, "troupe metrics: the node at %s serves no metrics (--metrics-port -1)\n",
                addr);
        return 1;
    }
    int dir = (int)(slash - addr);
    char token[700];
    snprintf(token, sizeof token, "%.*s/%s", dir, addr, TR__NODE_METRICS_TOKEN_FILE);
    int has_token = access(token, R_OK) == 0;
    printf("# troupe: a Prometheus scrape config for the node at %s\n"
           "# (its status page: %s)\n"
           "scrape_configs:\n"
           "  - job_name: troupe\n"
           "    metrics_path: /metrics\n",
           addr, dash);
    if (has_token)
        printf("    authorization:\n"
               "      type: Bearer\n"
               "      credentials_file: %s\n",
               token);
    printf("    file_sd_configs:\n"
           "      - files: ['%.*s/%s']\n",
           dir, addr, TR__NODE_SD_FILE);
    return 0;
}

static int cmd_stop(const char *addr, const char *tmpdir) {
    tr__nodeconn *c;
    int rc = connect_cli(addr, &c);
    if (rc) return fail(rc, "stop");
    rc = tr__nodeconn_call(c, TR__MSG_SHUTDOWN, NULL, 5000, NULL);
    tr__nodeconn_close(c);
    if (rc) return fail(rc, "stop");
    /* Wait until the node has removed its socket. */
    int64_t deadline = tr__deadline(10000);
    struct stat st;
    while (stat(addr, &st) == 0 && tr__now_ns() < deadline)
        usleep(5000);
    if (stat(addr, &st) == 0) {
        fprintf(stderr, "troupe: the node at %s did not stop within 10 s\n", addr);
        return 1;
    }
    char hf[600], cur[700];
    if (default_address(tmpdir, cur, sizeof cur) == 0 && strcmp(cur, addr) == 0 &&
        head_file(tmpdir, hf, sizeof hf) == 0)
        unlink(hf);
    printf("troupe node at %s stopped\n", addr);
    return 0;
}

int main(int argc, char **argv) {
    tr__env env;
    tr__env_read(&env);
    if (env.role != TR__ROLE_DRIVER) return tr_worker_main(NULL) ? 2 : 0;
    tr__log_set_role("cli");
    tr__log_set_level(tr__config_log_level(NULL, &env));
    if (argc < 2) {
        usage();
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "slurm") == 0) { /* (its own options, then a command: slurm.c) */
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) return fail(tr__err(TR_EIO, "readlink /proc/self/exe"), "slurm");
        self[n] = '\0';
        return tr__cmd_slurm(self, argc, argv);
    }
    tr_config *cfg;
    if (tr_config_create(&cfg)) return 1;
    const char *addr = NULL, *output = NULL, *session = NULL;
    char *paths = NULL; /* --worker-path's, so far */
    int head = 0, block = 0;
    /* a command's subcommand: `troupe metrics prometheus-config`, `troupe list actors`
     * (and get's id: `troupe get actors ID`) */
    const char *sub = argc > 2 && argv[2][0] != '-' ? argv[2] : NULL;
    const char *get_id = sub && argc > 3 && argv[3][0] != '-' ? argv[3] : NULL;
    char list_query[2048] = "";   /* list's --filter, --limit, --offset, as a query */
    char filter_query[2048] = ""; /* its --filter's alone (merge.h: each node's query) */
    long list_offset = 0, list_limit = TR__LIST_DEFAULT_LIMIT;
    int json = 0, numbers_ok = 1;
    for (int i = sub ? (get_id ? 4 : 3) : 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (strcmp(a, "--head") == 0) {
            head = 1;
            continue;
        }
        if (strcmp(a, "--block") == 0) {
            block = 1;
            continue;
        }
        if (strcmp(a, "--json") == 0) {
            json = 1;
            continue;
        }
        if (v && (strcmp(a, "--filter") == 0 || strcmp(a, "--limit") == 0 ||
                  strcmp(a, "--offset") == 0)) {
            char item[600];
            snprintf(item, sizeof item, "%s=%s", a + 2, v);
            if (list_query_add(list_query, sizeof list_query, item) ||
                (a[2] == 'f' && list_query_add(filter_query, sizeof filter_query, item))) {
                fprintf(stderr, "troupe %s: %s %s: too long\n", cmd, a, v);
                return 2;
            }
            if (a[2] != 'f') { /* (a bad number: the node says so) */
                char *end;
                long x = strtol(v, &end, 10);
                if (*end || end == v || x < 0) numbers_ok = 0;
                *(a[2] == 'l' ? &list_limit : &list_offset) = x;
            }
            i++;
            continue;
        }
        if (!v) {
            usage();
            return 2;
        }
        if (strcmp(a, "--address") == 0)
            addr = v;
        else if (strcmp(a, "--output") == 0 || strcmp(a, "-o") == 0)
            output = v;
        else if (strcmp(a, "--session") == 0)
            session = v;
        else if (strcmp(a, "--num-cpus") == 0)
            rc = tr_config_set(cfg, "num_cpus", v);
        else if (strcmp(a, "--cpu-binding") == 0)
            rc = tr_config_set(cfg, "cpu_binding", v);
        else if (strcmp(a, "--num-gpus") == 0)
            rc = tr_config_set(cfg, "num_gpus", v);
        else if (strcmp(a, "--resources") == 0)
            rc = tr_config_set(cfg, "resources", v);
        else if (strcmp(a, "--tmpdir") == 0)
            rc = tr_config_set(cfg, "tmpdir", v);
        else if (strcmp(a, "--port") == 0)
            rc = tr_config_set(cfg, "cluster_port", v);
        else if (strcmp(a, "--metrics-port") == 0)
            rc = tr_config_set(cfg, "metrics_port", v);
        else if (strcmp(a, "--metrics-host") == 0)
            rc = tr_config_set(cfg, "metrics_host", v);
        else if (strcmp(a, "--bind") == 0)
            rc = tr_config_set(cfg, "cluster_bind", v);
        else if (strcmp(a, "--token") == 0)
            rc = tr_config_set(cfg, "cluster_token", v);
        else if (strcmp(a, "--token-file") == 0)
            rc = tr_config_set(cfg, "cluster_token_file", v);
        else if (strcmp(a, "--worker-path") == 0) { /* (repeatable: the entries add up) */
            size_t n = (paths ? strlen(paths) + 1 : 0) + strlen(v) + 1;
            char *more = malloc(n);
            if (!more) return fail(tr__err(TR_ENOMEM, "--worker-path"), a);
            snprintf(more, n, "%s%s%s", paths ? paths : "", paths ? ":" : "", v);
            free(paths);
            paths = more;
            rc = tr_config_set(cfg, "worker_path", paths);
        } else if (strncmp(a, "--tls-", 6) == 0 &&
                   (strcmp(a + 6, "cert") == 0 || strcmp(a + 6, "key") == 0 ||
                    strcmp(a + 6, "ca") == 0)) {
            char key[32], abs[PATH_MAX]; /* (the node runs elsewhere: absolute paths) */
            snprintf(key, sizeof key, "cluster_tls_%s", a + 6);
            rc = realpath(v, abs) ? tr_config_set(cfg, key, abs)
                                  : tr__err(TR_EINVAL, "%s: %s", v, strerror(errno));
        } else {
            usage();
            return 2;
        }
        if (rc) return fail(rc, a);
        i++;
    }
    free(paths);
    int rc = tr__config_env_token(cfg, &env);
    if (rc) return fail(rc, "TROUPE_CLUSTER_TOKEN");
    int status;
    char found[700];
    /* the commands that talk to a running node find it where `start` recorded it */
    static const char *const to_node[] = {"status",  "stop",    "list",  "get",
                                          "summary", "metrics", "debug", "timeline"};
    for (size_t i = 0; i < sizeof to_node / sizeof *to_node && !addr && !session; i++)
        if (strcmp(cmd, to_node[i]) == 0) {
            int rc = default_address(cfg->tmpdir, found, sizeof found);
            if (rc) return fail(rc, cmd);
            addr = found;
        }
    if (strcmp(cmd, "start") == 0) {
        status = cmd_start(cfg, head, addr, block);
    } else if (strcmp(cmd, "status") == 0 || strcmp(cmd, "stop") == 0) {
        status = strcmp(cmd, "status") == 0 ? cmd_status(addr, cfg) : cmd_stop(addr, cfg->tmpdir);
    } else if (strcmp(cmd, "list") == 0 || strcmp(cmd, "get") == 0 || strcmp(cmd, "summary") == 0) {
        if (!sub || (strcmp(cmd, "get") == 0 && !get_id)) {
            usage();
            return 2;
        }
        char path[300];
        if (strcmp(cmd, "summary") == 0)
            snprintf(path, sizeof path, "/api/v1/summary/%s", sub);
        else if (get_id)
            snprintf(path, sizeof path, "/api/v1/%s/%s", sub, get_id);
        else
            snprintf(path, sizeof path, "/api/v1/%s", sub);
        if (!json && strcmp(cmd, "list") == 0) {
            list_query_add(list_query, sizeof list_query, "format=table");
            list_query_add(filter_query, sizeof filter_query, "format=table");
        }
        /* a cluster's: every node's items (each says its "node"), merged here (merge.h) */
        static const char *const per_node[] = {"actors", "objects", "groups", "graphs", "tasks"};
        others o = {0};
        for (size_t i = 0; i < sizeof per_node / sizeof *per_node && !session && numbers_ok; i++)
            if (strcmp(sub, per_node[i]) == 0) other_nodes(addr, &o);
        if (session) {
            status = cmd_session(session, cfg->tmpdir, path, list_query);
        } else if (o.n) {
            if (list_limit > TR__LIST_MAX_LIMIT) list_limit = TR__LIST_MAX_LIMIT;
            long want = list_offset + list_limit;
            char q[2100], lim[40];
            snprintf(lim, sizeof lim, "limit=%ld",
                     want > TR__LIST_MAX_LIMIT ? TR__LIST_MAX_LIMIT : want);
            snprintf(q, sizeof q, "%s", filter_query);
            list_query_add(q, sizeof q, lim);
            status = cmd_api_cluster(addr, &o, cmd, sub, path, get_id ? "" : q,
                                     !json && strcmp(cmd, "list") == 0, list_offset, list_limit);
        } else {
            status = cmd_api(addr, path, list_query);
        }
        free(o.url);
    } else if (strcmp(cmd, "debug") == 0) { /* the groups' verdicts, from their ranks' ops */
        if (!sub || strcmp(sub, "collectives") != 0) {
            usage();
            return 2;
        }
        /* the flight recorder's rings of this node's ranks (core/trace.h) */
        status = cmd_collectives(addr, json);
    } else if (strcmp(cmd, "timeline") == 0) {
        status = cmd_timeline(addr, output);
    } else if (strcmp(cmd, "metrics") == 0) {
        if (!sub || strcmp(sub, "prometheus-config") != 0) {
            usage();
            return 2;
        }
        status = cmd_prometheus_config(addr);
    } else if (strcmp(cmd, "version") == 0) {
        printf("troupe %s (ABI %u)\n", tr_version_string(), tr_abi_version());
        status = 0;
    } else {
        usage();
        status = 2;
    }
    tr_config_destroy(cfg);
    return status;
}
