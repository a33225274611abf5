/* api/node/node.c - the node service process: session directory, listener, handlers, orderly
 * shutdown (kill and reap every worker, remove every socket, remove the directory). */
#include "api/node/node.h"

#include <dirent.h>
#include <sched.h>
#include <sys/wait.h>
#include <spawn.h>
#include <poll.h>
#include <limits.h>
#include <math.h>
#include <fcntl.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>
#ifdef TR_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "actor/directory.h"
#include "actor/protocol.h"
#include "api/node/cluster.h"
#include "api/node/lists.h"
#include "api/node/metrics.h"
#include "collective/registry.h"
#include "core/clock.h"
#include "core/codec.h"
#include "core/frame.h"
#include "core/http.h"
#include "core/ids.h"
#include "core/kv.h"
#include "core/log.h"
#include "core/nodeconn.h"
#include "core/server.h"
#include "core/status.h"
#include "core/events.h"
#include "core/trace.h"
#include "core/workerpool.h"
#include "objectstore/segment.h"
#include "objectstore/store.h"

extern char **environ;

/* The status page (api/node/page.html, made a C array by api/node/BUILD's page_c). */
extern const char tr__node_page[];
extern const unsigned long tr__node_page_len;

#define REAP_TIMEOUT_MS 5000
/* The status page's history: a sample every 5 s, the last 10 minutes. */
#define HISTORY 120
#define HISTORY_MS 5000

typedef struct node {
    uv_loop_t loop;
    tr__server *srv;
    tr__kv *kv;
    tr__directory *dir;
    tr__store *store;
    tr__groups *groups;
    tr__pool pool;
    tr__res total;
    tr__cores cores; /* CPUs actors are bound to (none with cpu_binding "none") */
    tr__gpus gpus;   /* GPUs actors are given */
    char session[512], sock[600];
    uv_signal_t sigterm, sigint, sigusr1;
    uv_timer_t reap_timer;
    uv_timer_t count_timer; /* a cluster's node: its actors and objects, for the table */
    uv_idle_t stop_idle;
    uint64_t shutdown_started;
    int stopping;
    tr__cluster *cluster; /* NULL unless the node is part of a cluster */
    pid_t owner_pid;      /* an embedded node's spawner (0: standalone) */
    int owner_fd;         /* its pidfd (-1: none) */
    int owner_watched;    /* 1: owner_poll, 2: owner_timer */
    uv_poll_t owner_poll;
    uv_timer_t owner_timer;
    tr__metrics *metrics;
    tr__lists_src lists;      /* what /api/v1 lists */
    uv_timer_t history_timer; /* samples for the status page's sparklines */
    struct sample {
        double t; /* seconds since the node started */
        uint64_t actors_alive, store_used, calls, coll_ops;
    } history[HISTORY];
    int n_history, history_at; /* samples kept; the next one's slot */
    tr__http *http;            /* /metrics, the status page (NULL: metrics_port -1) */
    char dashboard[200];       /* its address, "http://HOST:PORT/" ("" if none) */
} node;

/* dir, made 0700 if missing, if it is a directory of ours (made 0700 if it was not). 0, or
 * a code saying what is wrong with it. */
static int own_dir(const char *dir) {
    uid_t uid = getuid();
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) return tr__err_errno(errno, "mkdir %s", dir);
    struct stat st;
    if (lstat(dir, &st) != 0) return tr__err_errno(errno, "stat %s", dir);
    if (!S_ISDIR(st.st_mode) || st.st_uid != uid)
        return tr__err(TR_EPERM,
                       "%s is not a directory of uid %u (it is %s of uid %u, mode %04o): another "
                       "user made it",
                       dir, (unsigned)uid, S_ISDIR(st.st_mode) ? "a directory" : "a file",
                       (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
    if ((st.st_mode & 0777) != 0700 && chmod(dir, 0700) != 0)
        return tr__err_errno(errno, "chmod 0700 %s", dir);
    return 0;
}

int tr__node_base_dir(const char *tmpdir, char *out, size_t cap) {
    uid_t uid = getuid();
    int n = snprintf(out, cap, "%s/troupe-%u", tmpdir && *tmpdir ? tmpdir : "/tmp", (unsigned)uid);
    if (n < 0 || (size_t)n >= cap) return tr__err(TR_EINVAL, "tmpdir path too long");
    int rc = own_dir(out);
    if (!rc) return 0;
    /* Someone else holds the shared name (another user can make /tmp/troupe-<uid> before
     * us): the user's own places instead, the same for every process of this user, so
     * nodes, drivers and the CLI still find each other. */
    char why[600], tried[600];
    snprintf(why, sizeof why, "%s", tr__last_error());
    snprintf(tried, sizeof tried, "%s", out);
    const char *run = getenv("XDG_RUNTIME_DIR"), *home = getenv("HOME");
    int done = 0;
    if (run && run[0] == '/' && (size_t)snprintf(out, cap, "%s/troupe", run) < cap)
        done = own_dir(out) == 0;
    if (!done && home && home[0] == '/') {
        char cache[600];
        snprintf(cache, sizeof cache, "%s/.cache", home);
        if ((size_t)snprintf(out, cap, "%s/troupe", cache) < cap)
            done = (mkdir(cache, 0700) == 0 || errno == EEXIST) && own_dir(out) == 0;
    }
    if (!done)
        return tr__err(TR_EPERM,
                       "%s; and no private directory instead ($XDG_RUNTIME_DIR/troupe, "
                       "$HOME/.cache/troupe): set tmpdir (--tmpdir) to a directory of "
                       "yours",
                       why);
    static int said;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        TR_LOG_WARN("NODE-DIR", "%s: using %s instead (remove %s, or set tmpdir)", why, out, tried);
    return 0;
}

/* Removes a session directory: its files, and the files of its subdirectories (the
 * spill directory). Nothing deeper exists. */
static void remove_tree(const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char p[1100];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            if (unlink(p) != 0 && errno == EISDIR && depth > 0) remove_tree(p, depth - 1);
        }
        closedir(d);
    }
    rmdir(dir);
}

static void remove_session(node *n) {
    remove_tree(n->session, 1);
}

/* A session ended (its node stopped, or died): what outlives it - the event log and the
 * flight recorder's dumps (core/events.h, core/trace.h) - stays for `troupe list
 * --session DIR`; everything else goes (a session with neither goes whole). */
static void end_session(const char *dir) {
    DIR *d = opendir(dir);
    int kept = 0;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            if (strcmp(e->d_name, TR__EVENTS_FILE) == 0 || strcmp(e->d_name, TR__FLIGHT_DIR) == 0) {
                kept = 1;
                continue;
            }
            char p[1100];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            if (unlink(p) != 0 && errno == EISDIR) remove_tree(p, 0);
        }
        closedir(d);
    }
    if (!kept) rmdir(dir);
}

/* The ended sessions kept in a base directory (the newest; older ones are removed). */
#define ENDED_KEEP 20

typedef struct ended {
    char name[64];
    time_t mtime;
} ended;

static int newest_first(const void *a, const void *b) {
    const ended *x = a, *y = b;
    return x->mtime > y->mtime ? -1 : x->mtime < y->mtime;
}

/* Removes the ended sessions of base beyond the ENDED_KEEP newest. */
static void prune_ended(const char *base) {
    DIR *d = opendir(base);
    if (!d) return;
    ended *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] != 'n' || strlen(e->d_name) >= sizeof v->name) continue;
        char p[800];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s/node.lock", base, e->d_name);
        if (access(p, F_OK) == 0) continue; /* (a live node's, or one the sweep ends) */
        snprintf(p, sizeof p, "%s/%s/%s", base, e->d_name, TR__EVENTS_FILE);
        if (stat(p, &st) != 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            ended *g = realloc(v, cap * sizeof *v);
            if (!g) break;
            v = g;
        }
        memcpy(v[n].name, e->d_name, strlen(e->d_name) + 1); /* (shorter: checked above) */
        v[n++].mtime = st.st_mtime;
    }
    closedir(d);
    if (n > ENDED_KEEP) {
        qsort(v, n, sizeof *v, newest_first);
        for (size_t i = ENDED_KEEP; i < n; i++) {
            char p[800];
            snprintf(p, sizeof p, "%s/%s", base, v[i].name);
            remove_tree(p, 1);
        }
    }
    free(v);
}

/* A node holds an exclusive flock on <session>/node.lock while it lives. A session
 * directory whose lock can be taken (and is not brand new: a node creates the file just
 * before locking it) belongs to a node that died without cleaning up (SIGKILL): remove it.
 * flock, not pids: pids do not cross PID namespaces (sandboxes, containers). */
static void sweep_stale_sessions(const char *base) {
    DIR *d = opendir(base);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] != 'n') continue;
        char dir[700], lock[800];
        snprintf(dir, sizeof dir, "%s/%s", base, e->d_name);
        snprintf(lock, sizeof lock, "%s/node.lock", dir);
        int fd = open(lock, O_RDWR | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat st;
        if (fstat(fd, &st) == 0 && time(NULL) - st.st_mtime > 1 &&
            flock(fd, LOCK_EX | LOCK_NB) == 0) {
            TR_LOG_INFO("NODE-SWEEP", "ending %s, left by a node that died", dir);
            char log[800]; /* (its event log says so, and stays) */
            snprintf(log, sizeof log, "%s/%s", dir, TR__EVENTS_FILE);
            int lfd = open(log, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
            if (lfd >= 0) {
                dprintf(lfd,
                        "{\"t\":\"%lld.000\",\"event\":\"node_stopped\",\"reason\":\"the node "
                        "died without stopping (found by a later node)\"}\n",
                        (long long)time(NULL));
                close(lfd);
            }
            end_session(dir);
        }
        close(fd);
    }
    closedir(d);
    prune_ended(base);
}

static void close_walk(uv_handle_t *h, void *arg) {
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void finish(node *n) {
    if (n->stopping == 2) return;
    n->stopping = 2;
    if (n->pool.live)
        TR_LOG_WARN("NODE-REAP", "%d worker(s) not reaped after %d ms", n->pool.live,
                    REAP_TIMEOUT_MS);
    tr__cluster_close(n->cluster);
    tr__directory_close(n->dir);
    tr__kv_close(n->kv);
    tr__groups_close(n->groups);
    tr__server_close(n->srv);
    tr__http_close(n->http);
    n->http = NULL;
    uv_close((uv_handle_t *)&n->sigterm, NULL);
    uv_close((uv_handle_t *)&n->sigint, NULL);
    uv_close((uv_handle_t *)&n->sigusr1, NULL);
    uv_close((uv_handle_t *)&n->reap_timer, NULL);
    uv_close((uv_handle_t *)&n->count_timer, NULL);
    uv_close((uv_handle_t *)&n->history_timer, NULL);
    uv_close((uv_handle_t *)&n->stop_idle, NULL);
    if (n->owner_watched == 1) uv_close((uv_handle_t *)&n->owner_poll, NULL);
    if (n->owner_watched == 2) uv_close((uv_handle_t *)&n->owner_timer, NULL);
    n->owner_watched = 0;
}

/* Prometheus' file_sd file of the nodes' /metrics endpoints (the head's: every node's;
 * a node in no cluster: its own), in the session directory. */
static void sd_path(const node *n, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", n->session, TR__NODE_SD_FILE);
}

static void on_count_tick(uv_timer_t *t) {
    node *n = t->data;
    uint64_t objects, bytes;
    tr__store_counts(n->store, &objects, &bytes);
    tr__cluster_set_counts(n->cluster, tr__directory_live(n->dir), objects, bytes);
    char sd[700];
    sd_path(n, sd, sizeof sd);
    if (tr__cluster_write_sd(n->cluster, sd))
        TR_LOG_WARN_LIMITED("NODE-SD", "%s", tr__last_error());
}

static void on_reap_tick(uv_timer_t *t) {
    node *n = t->data;
    if (n->pool.live == 0 || uv_now(&n->loop) - n->shutdown_started > REAP_TIMEOUT_MS) finish(n);
}

static void begin_shutdown(node *n, const char *why) {
    if (n->stopping) return;
    n->stopping = 1;
    TR_LOG_INFO("NODE-SHUTDOWN", "%s", why);
    n->shutdown_started = uv_now(&n->loop);
    tr__directory_kill_all(n->dir);
    uv_timer_start(&n->reap_timer, on_reap_tick, 0, 5);
}

static void on_signal(uv_signal_t *s, int sig) {
    begin_shutdown(s->data, sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* SIGUSR1: the flight recorder's dump of every group with a rank here (core/trace.h). */
static void on_sigusr1(uv_signal_t *s, int sig) {
    (void)sig;
    node *n = s->data;
    char path[1000];
    if (tr__flight_dump(n->session, NULL, "SIGUSR1", path, sizeof path))
        TR_LOG_WARN("COLL-FLIGHT", "no dump: %s", tr__last_error());
    else
        TR_LOG_INFO("COLL-FLIGHT", "the collective groups' flight recorder: %s", path);
}

/* The GPUs the NVIDIA driver lists (/proc/driver/nvidia/gpus): read without loading
 * or initialising CUDA in the node (whose workers it spawns), so a build without CUDA and
 * a machine without a GPU or driver both say 0, with the reason, never a crash. The CUDA
 * build also asks the driver its version (cudaDriverGetVersion: no context is made). */
static int detect_gpus(char *why, size_t cap) {
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (!d) {
        snprintf(why, cap, "no NVIDIA driver (/proc/driver/nvidia/gpus: %s)", strerror(errno));
        return 0;
    }
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    if (!n) snprintf(why, cap, "the NVIDIA driver lists no GPU");
#ifdef TR_WITH_CUDA
    /* a driver too old for the runtime this troupe was built with: no GPU works */
    int drv = 0;
    if (n && (cudaDriverGetVersion(&drv) != cudaSuccess || drv < CUDART_VERSION)) {
        cudaGetLastError();
        snprintf(why, cap,
                 "%d GPU(s), but the NVIDIA driver supports CUDA %d.%d and this troupe's "
                 "runtime needs %d.%d",
                 n, drv / 1000, drv % 1000 / 10, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
        n = 0;
    }
#endif
    return n;
}

/* Shutdown begins after the loop has written the SHUTDOWN reply. */
static void on_stop_idle(uv_idle_t *h) {
    uv_idle_stop(h);
    begin_shutdown(h->data, "shutdown requested");
}

static void on_shutdown_msg(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    node *n = ctx;
    (void)body;
    tr__server_reply_status(c, seq, 0, NULL);
    uv_idle_start(&n->stop_idle, on_stop_idle);
}

/* The node's status: `troupe status`, tr_node_status, /api/v1/nodes. */
static void status_json(node *n, tr__buf *j) {
    char head[1400];
    int k = snprintf(head, sizeof head,
                     "{\"pid\":%d,\"address\":\"%s\",\"version\":\"%s\",\"workers_live\":%d,"
                     "\"kv_keys\":%zu,\"groups\":%zu,\"gpus_total\":%d,",
                     (int)getpid(), n->sock, TR__VERSION_STRING, n->pool.live, tr__kv_count(n->kv),
                     tr__groups_count(n->groups), n->gpus.n);
    tr__buf_append(j, head, (size_t)k);
    if (n->dashboard[0]) {
        k = snprintf(head, sizeof head, "\"dashboard\":\"%s\",", n->dashboard);
        tr__buf_append(j, head, (size_t)k);
    }
    tr__directory_status_json(n->dir, j);
    tr__buf_append(j, ",", 1);
    tr__store_status_json(n->store, j);
    tr__cluster_status_json(n->cluster, j);
    tr__buf_append(j, "}", 1);
}

static void on_status(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    node *n = ctx;
    (void)body;
    tr__buf j = TR__BUF_INIT;
    status_json(n, &j);
    tr__buf b = TR__BUF_INIT;
    tr__reply_begin(&b, j.oom ? TR_ENOMEM : 0, NULL, 1);
    tr__enc_str(&b, "json");
    tr__enc_strn(&b, j.data, j.len);
    tr__server_reply(c, seq, &b);
    tr__buf_free(&b);
    tr__buf_free(&j);
}

static void on_history_tick(uv_timer_t *t) {
    node *n = t->data;
    struct sample *s = &n->history[n->history_at];
    s->t = (double)uv_now(&n->loop) / 1000.0;
    uint64_t objects;
    tr__store_counts(n->store, &objects, &s->store_used);
    tr__metrics_totals(n->metrics, &s->calls, &s->coll_ops, &s->actors_alive);
    n->history_at = (n->history_at + 1) % HISTORY;
    if (n->n_history < HISTORY) n->n_history++;
    tr__metrics_prune(n->metrics); /* (the timeline's files of processes gone: the newest kept) */
}

/* /api/v1/history: the samples, oldest first. */
static void history_json(const node *n, tr__buf *j) {
    char tmp[300];
    int k = snprintf(tmp, sizeof tmp, "{\"interval_s\":%d,\"samples\":[", HISTORY_MS / 1000);
    tr__buf_append(j, tmp, (size_t)k);
    for (int i = 0; i < n->n_history; i++) {
        const struct sample *s =
            &n->history[(n->history_at - n->n_history + i + HISTORY) % HISTORY];
        k = snprintf(tmp, sizeof tmp,
                     "%s{\"t\":%.3f,\"actors_alive\":%llu,\"store_used\":%llu,\"calls\":%llu,"
                     "\"coll_ops\":%llu}",
                     i ? "," : "", s->t, (unsigned long long)s->actors_alive,
                     (unsigned long long)s->store_used, (unsigned long long)s->calls,
                     (unsigned long long)s->coll_ops);
        tr__buf_append(j, tmp, (size_t)k);
    }
    tr__buf_append(j, "]}", 2);
}

/* The node's HTTP answers (core/http.h): Prometheus' /metrics, the status as JSON. */
/* /api/v1's answer (HTTP's and the CLI's, TR__MSG_API: the same): its HTTP status. */
static int api_answer(node *n, const char *path, const char *query, tr__buf *out) {
    if (strcmp(path, "/api/v1/status") == 0) {
        status_json(n, out);
        return 200;
    }
    if (strcmp(path, "/api/v1/history") == 0) {
        history_json(n, out);
        return 200;
    }
    char dir[700];
    snprintf(dir, sizeof dir, "%s/%s", n->session, TR__TRACE_DIR);
    if (strcmp(path, "/api/v1/timeline") == 0) /* (core/trace.h) */
        return tr__trace_timeline(dir, out) ? 500 : 200;
    if (strcmp(path, "/api/v1/collectives") == 0) { /* the flight recorder: rings, verdicts */
        int text = strstr(query, "format=verdicts") != NULL;
        return tr__flight_verdicts(dir, NULL, text ? out : NULL, text ? NULL : out) ? 500 : 200;
    }
    return tr__lists_answer(&n->lists, path, query, out);
}

static void on_http(void *ctx, const tr__http_req *req, tr__http_resp *resp) {
    node *n = ctx;
    if (strcmp(req->path, "/metrics") == 0) {
        resp->type = "text/plain; version=0.0.4; charset=utf-8";
        tr__metrics_render(n->metrics, &resp->body);
    } else if (strcmp(req->path, "/api/v1/rings") == 0) { /* (core/trace.h: another node's
                                                             CLI merges them; HTTP only) */
        char dir[700];
        snprintf(dir, sizeof dir, "%s/%s", n->session, TR__TRACE_DIR);
        resp->type = "application/octet-stream";
        resp->status =
            tr__trace_bundle(dir, strstr(req->query, "events=1") != NULL, &resp->body) ? 500 : 200;
    } else if (strncmp(req->path, "/api/v1/", 8) == 0) {
        resp->type = strstr(req->query, "format=") && !strstr(req->query, "format=json")
                         ? "text/plain; charset=utf-8"
                         : "application/json";
        resp->status = api_answer(n, req->path, req->query, &resp->body);
    } else if (strcmp(req->path, "/") == 0 || strcmp(req->path, "/index.html") == 0) {
        resp->type = "text/html; charset=utf-8"; /* the status page (api/node/page.html) */
        tr__buf_append(&resp->body, tr__node_page, tr__node_page_len);
    } else {
        resp->status = 404;
    }
}

/* Serves /metrics and the page on metrics_host:metrics_port (core/http.h): to this
 * user on loopback, and to anyone with the token - the cluster's, or one made here -
 * which the session directory's metrics-token (0600) holds for Prometheus. 0, or a code
 * (the node does not start). */
static int start_http(node *n, const tr_config *cfg) {
    if (cfg->metrics_port < 0) return 0;
    const char *host = cfg->metrics_host && *cfg->metrics_host ? cfg->metrics_host : "127.0.0.1";
    const char *token = tr__cluster_token(n->cluster);
    char own[65];
    if (!token || !*token) {
        uint8_t r[32];
        int rc = tr__random_bytes(r, sizeof r);
        if (rc) return rc;
        tr__hex(r, sizeof r, own);
        token = own;
    }
    char path[700];
    snprintf(path, sizeof path, "%s/%s", n->session, TR__NODE_METRICS_TOKEN_FILE);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || dprintf(fd, "%s\n", token) < 0) {
        if (fd >= 0) close(fd);
        return tr__err_errno(errno, "writing %s", path);
    }
    close(fd);
    int rc = tr__http_create(&n->loop, host, cfg->metrics_port, token, on_http, n, &n->http);
    if (rc) return rc;
    int v6 = strchr(host, ':') != NULL;
    char hostport[160];
    snprintf(hostport, sizeof hostport, "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "",
             tr__http_port(n->http));
    snprintf(n->dashboard, sizeof n->dashboard, "http://%s/", hostport);
    tr__cluster_set_metrics(n->cluster, hostport); /* (the head lists it for Prometheus) */
    if (!n->cluster) {                             /* alone: the file lists this node */
        char sd[700];
        sd_path(n, sd, sizeof sd);
        FILE *f = fopen(sd, "w");
        if (f) {
            fprintf(f, "[{\"targets\":[\"%s\"],\"labels\":{\"troupe_role\":\"head\"}}]\n",
                    hostport);
            fclose(f);
        }
    }
    return 0;
}

/* API {path, query} -> {status, json}: /api/v1 for the CLI (troupe list|get|summary). */
static void on_api(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    node *n = ctx;
    const char *path, *query;
    size_t pn, qn;
    char p[300], q[2048];
    int rc = tr__get_str(body, "path", &path, &pn);
    if (!rc) rc = tr__get_str(body, "query", &query, &qn);
    if (!rc && (pn >= sizeof p || qn >= sizeof q))
        rc = tr__err(TR_EINVAL, "api: a path or query too long");
    if (rc) {
        tr__server_reply_status(c, seq, rc, tr__last_error());
        return;
    }
    memcpy(p, path, pn);
    p[pn] = '\0';
    memcpy(q, query, qn);
    q[qn] = '\0';
    tr__buf j = TR__BUF_INIT;
    int status = api_answer(n, p, q, &j);
    tr__buf b = TR__BUF_INIT;
    tr__reply_begin(&b, j.oom ? TR_ENOMEM : 0, NULL, 2);
    tr__enc_str(&b, "status");
    tr__enc_int(&b, status);
    tr__enc_str(&b, "json");
    tr__enc_strn(&b, j.data, j.len);
    tr__server_reply(c, seq, &b);
    tr__buf_free(&b);
    tr__buf_free(&j);
}

/* NODE_WHERE {num} -> {address, token}: where to pull another node's objects from. */
static void on_node_where(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    node *n = ctx;
    int64_t num = 0;
    char address[160];
    int rc = tr__get_int(body, "num", &num);
    if (!rc && (num < 0 || num > 0xffffff)) rc = tr__err(TR_EPROTO, "node_where: bad number");
    if (!rc && num == 0) /* this node */
        rc = tr__cluster_self_address(n->cluster, address, sizeof address);
    else if (!rc)
        rc = tr__cluster_node_address(n->cluster, (uint32_t)num, address, sizeof address);
    if (rc) {
        tr__server_reply_status(c, seq, rc, tr__last_error());
        return;
    }
    tr__buf b = TR__BUF_INIT;
    tr__reply_begin(&b, 0, NULL, 5);
    tr__enc_str(&b, "address");
    tr__enc_str(&b, address);
    tr__enc_str(&b, "token");
    tr__enc_str(&b, tr__cluster_token(n->cluster));
    tr__enc_tls_files(&b, tr__cluster_tls_files(n->cluster));
    tr__server_reply(c, seq, &b);
    tr__buf_free(&b);
}

/* NODE_LOST {address} -> {lost}: the head's view of a node (a group's watch asks). */
static void on_node_lost(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    node *n = ctx;
    const char *a;
    size_t an;
    char address[160];
    int rc = tr__get_str(body, "address", &a, &an);
    if (!rc && (an == 0 || an >= sizeof address)) rc = tr__err(TR_EINVAL, "node_lost: bad address");
    if (rc) {
        tr__server_reply_status(c, seq, rc, tr__last_error());
        return;
    }
    memcpy(address, a, an);
    address[an] = '\0';
    tr__buf b = TR__BUF_INIT;
    tr__reply_begin(&b, 0, NULL, 1);
    tr__enc_str(&b, "lost");
    tr__enc_int(&b, tr__cluster_counts_lost(n->cluster, address));
    tr__server_reply(c, seq, &b);
    tr__buf_free(&b);
}

/* CLUSTER_KV {op, key, value?}: the cluster's KV store, on the head (a forwarded request:
 * api/cluster.h). A node in no cluster has none: TR_ESTATE. */
static void on_cluster_kv(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    node *n = ctx;
    const char *op, *key;
    size_t on, kn;
    int rc = tr__get_str(body, "op", &op, &on);
    if (!rc) rc = tr__get_str(body, "key", &key, &kn);
    if (!rc &&
        !((on == 3 && (!memcmp(op, "put", 3) || !memcmp(op, "get", 3) || !memcmp(op, "del", 3))) ||
          (on == 10 && !memcmp(op, "del_prefix", 10))))
        rc = tr__err(TR_EINVAL, "cluster kv: unknown op '%.*s'", (int)(on > 32 ? 32 : on), op);
    if (!rc && !n->cluster) rc = tr__err(TR_ESTATE, "cluster kv: this node is in no cluster");
    if (!rc && !tr__cluster_forward(n->cluster, TR__MSG_CLUSTER_KV, c, seq, body))
        rc = tr__err(TR_ERESOURCES, "cluster kv: not forwarded to the head (too many requests "
                                    "in flight, the node stopping, or a malformed request)");
    if (rc) tr__server_reply_status(c, seq, rc, tr__last_error());
}

/* The "memory" resource by default, as Ray's: 70% of the memory the machine has available
 * now (MemAvailable), less the object store's bytes; 0 if that is none. */
static double default_memory(double store_bytes) {
    FILE *f = fopen("/proc/meminfo", "r");
    double kib = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
    if (f) fclose(f);
    double v = floor(kib * 1024.0 * 0.7 - store_bytes);
    return v > 0 ? v : 0;
}

/* The directory's task_running: a task worker's entry on the store's notice board. */
static int task_running(void *ctx, const uint8_t id[16], int *blocked) {
    tr__seg_board *b = tr__store_board(ctx, tr__id_key(id));
    *blocked = b && __atomic_load_n(&b->blocked, __ATOMIC_RELAXED) > 0;
    return b && __atomic_load_n(&b->busy, __ATOMIC_RELAXED) != 0;
}

static int forward(void *ctx, int type, tr__conn *c, uint64_t seq, const tr__obj *body) {
    node *n = ctx;
    return tr__cluster_forward(n->cluster, type, c, seq, body);
}

static void on_conn_close(void *ctx, tr__conn *c) {
    node *n = ctx;
    tr__cluster_conn_closed(n->cluster, c);
}

/* An embedded node lives as long as the process that spawned it: its end, seen on a pidfd
 * (a connection's end is no sign: the owner may open and close others), or - where the
 * kernel has no pidfd_open - by checking every 200 ms that it is still our parent. */
static void on_owner_gone(node *n) {
    char why[100];
    snprintf(why, sizeof why, "the embedded node's owner (pid %d) exited", (int)n->owner_pid);
    begin_shutdown(n, why);
}

static void on_owner_fd(uv_poll_t *p, int status, int events) {
    (void)status;
    (void)events;
    uv_poll_stop(p);
    on_owner_gone(p->data);
}

static void on_owner_tick(uv_timer_t *t) {
    node *n = t->data;
    if (getppid() != n->owner_pid) {
        uv_timer_stop(t);
        on_owner_gone(n);
    }
}

static int watch_owner(node *n) {
    n->owner_fd = (int)syscall(SYS_pidfd_open, n->owner_pid, 0);
    if (n->owner_fd < 0 && errno == ESRCH) return -1; /* gone already */
    if (n->owner_fd >= 0 && uv_poll_init(&n->loop, &n->owner_poll, n->owner_fd) == 0) {
        n->owner_poll.data = n;
        n->owner_watched = 1;
        uv_poll_start(&n->owner_poll, UV_READABLE, on_owner_fd);
        return 0;
    }
    if (n->owner_fd >= 0) close(n->owner_fd);
    n->owner_fd = -1;
    uv_timer_init(&n->loop, &n->owner_timer);
    n->owner_timer.data = n;
    n->owner_watched = 2;
    uv_timer_start(&n->owner_timer, on_owner_tick, 200, 200);
    return 0;
}

int tr__node_main(const tr_config *cfg, int ready_fd, pid_t owner_pid) {
    node *n = calloc(1, sizeof *n);
    if (!n) return 1;
    tr__log_set_role("node");
    signal(SIGPIPE, SIG_IGN);
    /* every descriptor the system lets us have: connections, workers' sockets and segments
     * (the cluster port's cap on connections is a share of this: core/rpc.c) */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            TR_LOG_WARN("NODE-NOFILE", "cannot raise the descriptor limit: %s", strerror(errno));
    }
    char base[400];
    int rc = tr__node_base_dir(cfg->tmpdir, base, sizeof base);
    if (rc) {
        TR_LOG_ERROR("NODE-DIR", "%s", tr__last_error());
        return 1;
    }
    uint32_t r;
    if (tr__random_bytes(&r, sizeof r)) { /* nothing starts on guessable names */
        TR_LOG_ERROR("NODE-RANDOM", "%s", tr__last_error());
        return 1;
    }
    snprintf(n->session, sizeof n->session, "%s/n%d-%08x", base, (int)getpid(), r);
    if (mkdir(n->session, 0700) != 0) {
        TR_LOG_ERROR("NODE-DIR", "mkdir %s: %s", n->session, strerror(errno));
        return 1;
    }
    snprintf(n->sock, sizeof n->sock, "%s/node.sock", n->session);
    char lock[600];
    snprintf(lock, sizeof lock, "%s/node.lock", n->session);
    int lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600); /* held until exit */
    if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
        TR_LOG_ERROR("NODE-DIR", "lock %s: %s", lock, strerror(errno));
        remove_session(n);
        return 1;
    }
    sweep_stale_sessions(base);
    /* the durable event log (core/events.h): it outlives the node */
    if (tr__evlog_open(n->session))
        TR_LOG_WARN("NODE-EVENTS", "no event log: %s", tr__last_error());
    char pid_s[24];
    snprintf(pid_s, sizeof pid_s, "%d", (int)getpid());
    tr__evlog("node_started", "pid", pid_s, "address", n->sock, "session", n->session, NULL);

    /* The CPUs this node may run on (its affinity: taskset, cpusets), which it hands to
     * actors whole (cpu_binding "cores"); their count is the default CPU capacity. */
    cpu_set_t allowed;
    int ids[TR__MAX_CORES], n_ids = 0;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
        for (int i = 0; i < TR__MAX_CORES && i < CPU_SETSIZE; i++)
            if (CPU_ISSET(i, &allowed)) ids[n_ids++] = i;
    if (n_ids == 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        for (int i = 0; i < ncpu && i < TR__MAX_CORES; i++)
            ids[n_ids++] = i;
    }
    tr__cores_init(&n->cores, ids, cfg->cpu_binding == TR__BIND_CORES ? n_ids : 0);
    n->total = cfg->resources;
    tr__res_add(&n->total, "CPU",
                cfg->num_cpus >= 0 ? cfg->num_cpus : (double)(n_ids > 0 ? n_ids : 1));
    /* GPUs: as many as the CUDA driver shows this process (its CUDA_VISIBLE_DEVICES
     * included), unless num_gpus says; a device is given whole, or shared for k < 1 */
    char why[300] = "";
    int gpus = cfg->num_gpus >= 0 ? (int)ceil(cfg->num_gpus) : detect_gpus(why, sizeof why);
    if (cfg->num_gpus < 0 && !gpus) TR_LOG_INFO("NODE-GPUS", "0 GPUs: %s", why);
    /* no more devices than the node's own CUDA_VISIBLE_DEVICES names, if it has one */
    tr__gpus_init(&n->gpus, gpus, getenv("CUDA_VISIBLE_DEVICES"));
    double gpu_qty = (double)n->gpus.n; /* one "GPU" per device, whatever resources said */
    if (cfg->num_gpus >= 0 && cfg->num_gpus < gpu_qty) gpu_qty = cfg->num_gpus;
    tr__res_add(&n->total, "GPU", 0);
    for (int i = 0; i < n->total.n; i++)
        if (strcmp(n->total.name[i], "GPU") == 0) n->total.qty[i] = gpu_qty;
    if (!tr__res_has(&n->total, "memory")) /* (Ray's: "resources" may name it too) */
        tr__res_add(&n->total, "memory",
                    cfg->memory >= 0 ? cfg->memory
                                     : default_memory((double)tr__config_store_bytes(cfg)));

    uv_loop_init(&n->loop);
    tr__pool_init(&n->pool, &n->loop);
    if ((rc = tr__server_create(&n->loop, n->sock, cfg->max_msg, &n->srv)) ||
        (rc = tr__kv_create(&n->kv)) || (rc = tr__groups_create(n->kv, &n->groups)) ||
        (rc = tr__store_create(tr__config_store_bytes(cfg),
                               cfg->spill_dir ? cfg->spill_dir : n->session, &n->store))) {
        TR_LOG_ERROR("NODE-START", "%s", tr__last_error());
        remove_session(n);
        return 1;
    }
    char trace_dir[700]; /* (every process's counters: core/trace.h) */
    snprintf(trace_dir, sizeof trace_dir, "%s/%s", n->session, TR__TRACE_DIR);
    tr__metrics_src msrc = {&n->dir, n->store, &n->pool, n->groups, &n->cluster, trace_dir};
    if (tr__trace_open(n->sock, "node", "troupe node", NULL)) /* (its own: RPC errors) */
        TR_LOG_WARN("NODE-TRACE", "no counters of its own: %s", tr__last_error());
    if ((rc = tr__metrics_create(&msrc, &n->metrics))) {
        TR_LOG_ERROR("NODE-START", "%s", tr__last_error());
        remove_session(n);
        return 1;
    }
    tr__directory_opts dopts = {&n->loop,
                                &n->pool,
                                &n->total,
                                n->sock,
                                n->session,
                                cfg->worker_start_timeout_ms,
                                cfg->max_msg,
                                cfg->call_spin_us,
                                &n->cores,
                                &n->gpus,
                                forward,
                                n,
                                cfg->cluster_client,
                                tr__metrics_worker_exited,
                                n->metrics,
                                task_running,
                                n->store};
    if ((rc = tr__directory_create(&dopts, &n->dir))) {
        TR_LOG_ERROR("NODE-START", "%s", tr__last_error());
        remove_session(n);
        return 1;
    }
    n->owner_pid = owner_pid;
    n->owner_fd = -1;
    tr__kv_mount(n->kv, n->srv);
    tr__store_mount(n->store, n->srv);
    tr__groups_mount(n->groups, n->srv);
    tr__directory_mount(n->dir, n->srv);
    tr__server_on(n->srv, TR__MSG_STATUS, on_status, n);
    tr__server_on(n->srv, TR__MSG_NODE_WHERE, on_node_where, n);
    tr__server_on(n->srv, TR__MSG_API, on_api, n);
    n->lists = (tr__lists_src){&n->dir, n->store, n->groups, &n->cluster, n->sock, NULL};
    tr__server_on(n->srv, TR__MSG_CLUSTER_KV, on_cluster_kv, n);
    tr__server_on(n->srv, TR__MSG_NODE_LOST, on_node_lost, n);
    tr__server_on(n->srv, TR__MSG_SHUTDOWN, on_shutdown_msg, n);
    tr__server_on_close(n->srv, on_conn_close, n);

    uv_signal_init(&n->loop, &n->sigterm);
    uv_signal_init(&n->loop, &n->sigint);
    n->sigterm.data = n->sigint.data = n;
    uv_signal_start(&n->sigterm, on_signal, SIGTERM);
    uv_signal_start(&n->sigint, on_signal, SIGINT);
    uv_signal_init(&n->loop, &n->sigusr1);
    n->sigusr1.data = n;
    uv_signal_start(&n->sigusr1, on_sigusr1, SIGUSR1);
    uv_timer_init(&n->loop, &n->reap_timer);
    n->reap_timer.data = n;
    uv_timer_init(&n->loop, &n->count_timer);
    n->count_timer.data = n;
    uv_idle_init(&n->loop, &n->stop_idle);
    n->stop_idle.data = n;
    uv_timer_init(&n->loop, &n->history_timer);
    n->history_timer.data = n;
    uv_timer_start(&n->history_timer, on_history_tick, 0, HISTORY_MS);

    /* a cluster's head listens for other nodes; another node joins its head first */
    int status = 0;
    if ((rc = tr__cluster_start(cfg, n->sock, &n->total, n->gpus.n, &n->loop, &n->cluster))) {
        TR_LOG_ERROR("NODE-CLUSTER", "%s", tr__last_error());
        status = 1; /* the spawner sees the ready pipe close without a line */
        if (ready_fd >= 0) close(ready_fd);
        goto out;
    }
    tr__cluster_set_store(n->cluster, n->store); /* its number goes in our objects' ids */
    if ((rc = start_http(n, cfg))) {
        TR_LOG_ERROR("NODE-METRICS", "%s", tr__last_error());
        status = 1;
        if (ready_fd >= 0) close(ready_fd);
        goto out;
    }
    if (n->cluster) uv_timer_start(&n->count_timer, on_count_tick, 0, 500);
    if (owner_pid > 0 && (getppid() != owner_pid || watch_owner(n) != 0))
        on_owner_gone(n); /* it went while we started */
    if (ready_fd >= 0) {
        char line[700];
        int k = snprintf(line, sizeof line, "%s\n", n->sock);
        ssize_t w = write(ready_fd, line, (size_t)k);
        (void)w;
        close(ready_fd);
    }
    TR_LOG_INFO("NODE-UP", "listening on %s%s%s", n->sock,
                n->dashboard[0] ? "; metrics and status at " : "", n->dashboard);
    uv_run(&n->loop, UV_RUN_DEFAULT);
out:
    /* Anything still open (should be nothing) is closed before the loop goes. */
    uv_walk(&n->loop, close_walk, NULL);
    uv_run(&n->loop, UV_RUN_DEFAULT);
    uv_loop_close(&n->loop);
    if (n->owner_fd >= 0) close(n->owner_fd);
    tr__cluster_stop(n->cluster);
    tr__directory_destroy(n->dir);
    tr__kv_destroy(n->kv);
    tr__store_destroy(n->store);
    tr__groups_destroy(n->groups);
    tr__metrics_destroy(n->metrics);
    tr__evlog("node_stopped", "reason", "stopped", NULL);
    tr__evlog_close();
    end_session(n->session);
    close(lock_fd);
    free(n);
    tr__log_flush_limits();
    return status;
}

int tr__node_spawn(const tr_config *cfg, const char *log_path, int timeout_ms, pid_t *pid,
                   char **address) {
    *pid = 0;
    *address = NULL;
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return tr__err_errno(errno, "pipe");
    char exe[4096 + PATH_MAX], *argv[TR__MAX_ARGS + 1];
    int rc = tr__command_self(exe, sizeof exe); /* this executable, or the worker command */
    if (!rc && tr__command_split(exe, argv) == 0) rc = tr__err(TR_EINVAL, "no node command");
    tr__buf enc = TR__BUF_INIT;
    if (!rc) rc = tr__config_encode_node(cfg, &enc);
    char *hex = rc ? NULL : malloc(enc.len * 2 + 1);
    if (!rc && !hex) rc = tr__err(TR_ENOMEM, "node config");
    if (rc) goto out_pipe;
    tr__hex(enc.data, enc.len, hex);

    size_t n_env = 0;
    while (environ[n_env])
        n_env++;
    char **envp = calloc(n_env + 7, sizeof *envp);
    char *e_cfg = malloc(strlen(hex) + 32);
    if (!envp || !e_cfg) {
        free(envp);
        free(e_cfg);
        rc = tr__err(TR_ENOMEM, "node environment");
        goto out_pipe;
    }
    size_t k = 0;
    for (size_t i = 0; i < n_env; i++)
        if (strncmp(environ[i], "TROUPE_", 7) != 0 ||
            strncmp(environ[i], "TROUPE_LOG_LEVEL=", 17) == 0)
            envp[k++] = environ[i];
    sprintf(e_cfg, "TROUPE_NODE_CONFIG=%s", hex);
    char e_fd[32];
    snprintf(e_fd, sizeof e_fd, "TROUPE_READY_FD=%d", 3);
    envp[k++] = "TROUPE_ROLE=node";
    envp[k++] = e_cfg;
    envp[k++] = e_fd;
    char e_owner[40]; /* an embedded node's owner: this process, for as long as it lives */
    snprintf(e_owner, sizeof e_owner, "TROUPE_OWNER=%d", (int)getpid());
    envp[k++] = log_path ? "TROUPE_STANDALONE=1" : e_owner;
    envp[k] = NULL;

    /* The node starts with stdio and the ready pipe only: nothing of the program's (a
     * listening socket, a lock, a pipe someone waits on for EOF) may live on in the node
     * and, through it, in every worker. */
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 3); /* dup2 clears close-on-exec */
    posix_spawn_file_actions_addclosefrom_np(&fa, 4);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    if (log_path) {
        /* Detached, in its own session; it must not hold our stdout (a caller reading it
         * would never see EOF): its output goes to the log. */
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
    }
    int e = posix_spawn(pid, argv[0], &fa, &at, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    free(envp);
    free(e_cfg);
    if (e) {
        tr__err_errno(e, "spawning the node service (%s)", argv[0]);
        rc = TR_ECONNECT;
        *pid = 0;
        goto out_pipe;
    }
    close(p[1]);
    p[1] = -1;
    /* Read "<address>\n" with a deadline; EOF means the node failed (it logged why). The
     * read end is non-blocking, so no path through this loop can outlive the deadline. */
    char line[700];
    size_t got = 0;
    int64_t deadline = tr__deadline(timeout_ms);
    tr__set_nonblock(p[0], 1);
    while (got < sizeof line - 1 && !memchr(line, '\n', got)) {
        struct pollfd pfd = {p[0], POLLIN, 0};
        int r = poll(&pfd, 1, tr__ms_left(deadline));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break; /* the deadline, or poll itself failed */
        ssize_t m = read(p[0], line + got, sizeof line - 1 - got);
        if (m < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (m <= 0) break;
        got += (size_t)m;
    }
    char *nl = got ? memchr(line, '\n', got) : NULL;
    if (!nl) {
        kill(*pid, SIGKILL);
        waitpid(*pid, NULL, 0);
        *pid = 0;
        rc = tr__err(TR_ECONNECT,
                     "the node service did not start (see its log%s%s; "
                     "TROUPE_LOG_LEVEL=debug for more)",
                     log_path ? " in " : " above", log_path ? log_path : "");
        goto out_pipe;
    }
    *nl = '\0';
    *address = strdup(line);
    rc = *address ? 0 : tr__err(TR_ENOMEM, "address");
out_pipe:
    close(p[0]);
    if (p[1] >= 0) close(p[1]);
    free(hex);
    tr__buf_free(&enc);
    return rc;
}
