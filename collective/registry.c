/* collective/registry.c - group rendezvous and segments on the node. */
#include "collective/registry.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "collective/group.h"
#include "collective/shm/segment.h"
#include "core/events.h"
#include "core/log.h"
#include "core/nodeconn.h"
#include "core/status.h"

typedef struct member {
    int joined;
    tr__conn *conn; /* referenced while joined */
    uint64_t seq;   /* its JOIN request, answered when all have joined */
    int answered;
} member;

typedef struct group {
    struct group *next;
    struct tr__groups *gs;
    char name[200];
    char backend[16];
    int world, joined, live;
    uint64_t extra; /* "segment" groups: bytes after the header */
    int fd;
    size_t size;
    tr__coll_hdr *h;
    member m[TR__COLL_MAX_WORLD];
    uv_timer_t timer; /* the rendezvous deadline */
    int timer_live, complete;
} group;

struct tr__groups {
    group *all;
    uv_loop_t *loop;
    tr__kv *kv; /* the node's: a backend's rendezvous keys go with the group */
};

int tr__groups_create(tr__kv *kv, tr__groups **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return tr__err(TR_ENOMEM, "group registry");
    (*out)->kv = kv;
    return 0;
}

size_t tr__groups_count(const tr__groups *gs) {
    size_t n = 0;
    for (const group *g = gs->all; g; g = g->next)
        n++;
    return n;
}

static group *find(tr__groups *gs, const char *name, size_t n) {
    for (group *g = gs->all; g; g = g->next)
        if (strlen(g->name) == n && memcmp(g->name, name, n) == 0) return g;
    return NULL;
}

static void on_timer_closed(uv_handle_t *h) {
    group *g = h->data;
    if (g->h) munmap(g->h, g->size);
    if (g->fd >= 0) close(g->fd);
    free(g);
}

/* The group's last member left or died: its segment and its rendezvous keys go (a rank
 * that died never deletes its own keys, and a later group of the same name must not
 * find them). */
static void group_free(group *g) {
    char prefix[256];
    int n = snprintf(prefix, sizeof prefix, "%s%s/", TR__COLL_KV_PREFIX, g->name);
    if (g->gs->kv && n > 0 && (size_t)n < sizeof prefix)
        tr__kv_del_prefix(g->gs->kv, prefix, (size_t)n);
    for (group **pp = &g->gs->all; *pp; pp = &(*pp)->next) {
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    }
    for (int r = 0; r < g->world; r++)
        if (g->m[r].joined) tr__conn_unref(g->m[r].conn);
    if (g->timer_live) {
        uv_timer_stop(&g->timer);
        uv_close((uv_handle_t *)&g->timer, on_timer_closed);
    } else {
        on_timer_closed((uv_handle_t *)&g->timer);
    }
}

static void answer_all(group *g) {
    tr__buf b = TR__BUF_INIT;
    tr__reply_begin(&b, 0, NULL, 1);
    tr__enc_str(&b, "size");
    tr__enc_uint(&b, g->size);
    for (int r = 0; r < g->world; r++) {
        member *m = &g->m[r];
        if (!m->joined || m->answered) continue;
        if (tr__server_reply_fd(m->conn, m->seq, &b, g->fd))
            tr__server_reply_status(m->conn, m->seq, TR_EIO, tr__last_error());
        m->answered = 1;
    }
    tr__buf_free(&b);
}

/* The rendezvous did not complete in time: every rank that joined is told, and the
 * group is forgotten (they will all see TR_ETIMEDOUT). */
static void on_rendezvous_timeout(uv_timer_t *t) {
    group *g = t->data;
    if (g->complete) return;
    char msg[300];
    snprintf(msg, sizeof msg, "group '%s': only %d of %d ranks joined in time", g->name, g->joined,
             g->world);
    for (int r = 0; r < g->world; r++)
        if (g->m[r].joined && !g->m[r].answered)
            tr__server_reply_status(g->m[r].conn, g->m[r].seq, TR_ETIMEDOUT, msg);
    TR_LOG_INFO("GROUP-TIMEOUT", "%s", msg);
    tr__evlog("group_failed", "name", g->name, "backend", g->backend, "reason", msg, NULL);
    group_free(g);
}

static void on_join(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__groups *gs = ctx;
    const char *name, *backend;
    size_t nn, bn;
    int64_t world, rank, wait_ms;
    int rc;
    if ((rc = tr__get_str(body, "name", &name, &nn)) ||
        (rc = tr__get_str(body, "backend", &backend, &bn)) ||
        (rc = tr__get_int(body, "world", &world)) || (rc = tr__get_int(body, "rank", &rank)) ||
        (rc = tr__get_int(body, "wait_ms", &wait_ms))) {
        tr__server_reply_status(c, seq, rc, tr__last_error());
        return;
    }
    uint64_t extra = 0; /* "segment" groups: bytes after the header, for their owners */
    if (tr__obj_get(body, "bytes") && (rc = tr__get_uint(body, "bytes", &extra))) {
        tr__server_reply_status(c, seq, rc, tr__last_error());
        return;
    }
    int segment = bn == strlen(TR__COLL_SEGMENT_BACKEND) &&
                  memcmp(backend, TR__COLL_SEGMENT_BACKEND, bn) == 0;
    if (!tr__coll_name_ok(name, nn) || bn == 0 || bn >= 16 || world < 1 ||
        world > TR__COLL_MAX_WORLD || rank < 0 || rank >= world ||
        extra > (segment ? TR__COLL_MAX_EXTRA : 0)) {
        tr__server_reply_status(c, seq, TR_EINVAL, "group join: bad name, world, rank or size");
        return;
    }
    group *g = find(gs, name, nn);
    if (g && (g->world != world || strlen(g->backend) != bn || memcmp(g->backend, backend, bn) ||
              g->extra != extra)) {
        char msg[400];
        snprintf(msg, sizeof msg,
                 "group '%s' exists with world %d, backend %s and %llu extra bytes; this rank "
                 "asked for world %d, backend %.*s and %llu",
                 g->name, g->world, g->backend, (unsigned long long)g->extra, (int)world, (int)bn,
                 backend, (unsigned long long)extra);
        tr__server_reply_status(c, seq, TR_EINVAL, msg);
        return;
    }
    if (g && (g->m[rank].joined || g->complete)) {
        tr__server_reply_status(c, seq, TR_EEXIST, "group join: that rank has joined already");
        return;
    }
    if (!g) {
        g = calloc(1, sizeof *g);
        if (!g) {
            tr__server_reply_status(c, seq, TR_ENOMEM, "group");
            return;
        }
        g->gs = gs;
        g->fd = -1;
        memcpy(g->name, name, nn);
        memcpy(g->backend, backend, bn);
        g->world = (int)world;
        /* slots and channels for a backend whose data moves through the segment (shm); the
         * others, and "segment" groups, need the header alone */
        const tr__coll_backend_v2 *be = tr__coll_backend_find(g->backend);
        int data = be && (be->flags & TR__COLL_SEG_DATA);
        g->extra = extra;
        g->size = tr__coll_seg_size(g->world, data) + (size_t)extra;
        g->fd = memfd_create("troupe-group", MFD_CLOEXEC);
        if (g->fd < 0 || ftruncate(g->fd, (off_t)g->size) != 0 ||
            (g->h = mmap(NULL, g->size, PROT_READ | PROT_WRITE, MAP_SHARED, g->fd, 0)) ==
                MAP_FAILED) {
            g->h = NULL;
            rc = tr__err_errno(errno, "group segment");
            tr__server_reply_status(c, seq, rc, tr__last_error());
            if (g->fd >= 0) close(g->fd);
            free(g);
            return;
        }
        memset(g->h, 0, g->size); /* pre-fault: the ranks never touch fresh pages */
        g->h->world = (uint32_t)g->world;
        for (int r = 0; r < TR__COLL_MAX_WORLD; r++)
            g->h->rk[r].cpu = -1; /* no core yet: waiters spin for it */
        g->h->slot = data ? TR__COLL_SLOT : 0;
        g->h->size = g->size;
        g->h->magic = TR__COLL_MAGIC;
        g->next = gs->all;
        gs->all = g;
        uv_timer_init(gs->loop, &g->timer);
        g->timer.data = g;
        g->timer_live = 1;
        uv_timer_start(&g->timer, on_rendezvous_timeout,
                       (uint64_t)(wait_ms < 1         ? 1
                                  : wait_ms > 3600000 ? 3600000
                                                      : wait_ms),
                       0);
    }
    member *m = &g->m[rank];
    m->joined = 1;
    m->conn = c;
    m->seq = seq;
    tr__conn_ref(c);
    g->h->pid[rank] = (int32_t)c->pid;
    g->joined++;
    g->live++;
    if (g->joined == g->world) {
        g->complete = 1;
        char world[16];
        snprintf(world, sizeof world, "%d", g->world);
        tr__evlog("group_formed", "name", g->name, "backend", g->backend, "world", world, NULL);
        uv_timer_stop(&g->timer);
        answer_all(g);
    }
}

static void leave(group *g, int rank, int died) {
    member *m = &g->m[rank];
    if (!m->joined) return;
    /* died or destroyed the group: either way an op waiting for it must fail */
    if (died && g->complete) {
        char r[16], pid[16];
        snprintf(r, sizeof r, "%d", rank);
        snprintf(pid, sizeof pid, "%d", g->h ? (int)g->h->pid[rank] : 0);
        tr__evlog("group_rank_died", "name", g->name, "rank", r, "pid", pid, NULL);
    }
    /* ranks waiting in the group see the bit within 10 ms (they poll it between waits;
     * no step counter moves, or a waiter would take it for the rank's progress) */
    if (g->h && g->complete) __atomic_or_fetch(&g->h->dead, 1ull << rank, __ATOMIC_SEQ_CST);
    if (!m->answered) tr__server_reply_status(m->conn, m->seq, TR_ECLOSED, "left the group");
    m->answered = 1;
    /* once: a rank that sent GROUP_LEAVE then closes its connection */
    m->joined = 0;
    tr__conn_unref(m->conn);
    m->conn = NULL;
    if (--g->live == 0) group_free(g);
}

static void on_leave(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__groups *gs = ctx;
    const char *name;
    size_t nn;
    int64_t rank;
    int rc;
    if ((rc = tr__get_str(body, "name", &name, &nn)) || (rc = tr__get_int(body, "rank", &rank))) {
        tr__server_reply_status(c, seq, rc, tr__last_error());
        return;
    }
    group *g = find(gs, name, nn);
    if (!g || rank < 0 || rank >= g->world || !g->m[rank].joined || g->m[rank].conn != c) {
        tr__server_reply_status(c, seq, TR_ENOTFOUND, "group leave: not a member");
        return;
    }
    tr__server_reply_status(c, seq, 0, NULL);
    leave(g, (int)rank, 0);
}

/* Calls off a "segment" group whose rendezvous has not completed (its creator gave up,
 * e.g. a graph's compile failed): the ranks waiting are told at once, not at the
 * rendezvous timeout, and the segment goes. */
static void on_cancel(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__groups *gs = ctx;
    const char *name;
    size_t nn;
    int rc = tr__get_str(body, "name", &name, &nn);
    if (rc) {
        tr__server_reply_status(c, seq, rc, tr__last_error());
        return;
    }
    group *g = find(gs, name, nn);
    if (!g || g->complete || strcmp(g->backend, TR__COLL_SEGMENT_BACKEND) != 0) {
        tr__server_reply_status(c, seq, TR_ENOTFOUND,
                                "group cancel: no segment group of that name is gathering");
        return;
    }
    for (int r = 0; r < g->world; r++)
        if (g->m[r].joined && !g->m[r].answered) {
            tr__server_reply_status(g->m[r].conn, g->m[r].seq, TR_ECANCELED,
                                    "the group was called off");
            g->m[r].answered = 1;
        }
    tr__server_reply_status(c, seq, 0, NULL);
    group_free(g);
}

/* A member's connection closed (it died, or its runtime shut down without leaving). */
static void on_conn_close(void *ctx, tr__conn *c) {
    tr__groups *gs = ctx;
    for (group *g = gs->all, *next; g; g = next) {
        next = g->next;
        for (int r = 0; r < g->world; r++) {
            if (!g->m[r].joined || g->m[r].conn != c) continue;
            if (!g->complete) { /* still gathering: it simply never arrived */
                g->m[r].joined = 0;
                g->joined--;
                g->live--;
                tr__conn_unref(c);
                if (g->live == 0) {
                    group_free(g);
                    break;
                }
                continue;
            }
            leave(g, r, 1);
            break; /* g may be freed */
        }
    }
}

void tr__groups_mount(tr__groups *gs, tr__server *s) {
    gs->loop = tr__server_loop(s);
    tr__server_on(s, TR__MSG_GROUP_JOIN, on_join, gs);
    tr__server_on(s, TR__MSG_GROUP_LEAVE, on_leave, gs);
    tr__server_on(s, TR__MSG_GROUP_CANCEL, on_cancel, gs);
    tr__server_on_close(s, on_conn_close, gs);
}

void tr__groups_close(tr__groups *gs) {
    while (gs && gs->all) {
        group *g = gs->all;
        for (int r = 0; r < g->world; r++)
            if (g->m[r].joined && !g->m[r].answered)
                tr__server_reply_status(g->m[r].conn, g->m[r].seq, TR_ECLOSED, "node stopping");
        group_free(g);
    }
}

void tr__groups_destroy(tr__groups *gs) {
    free(gs);
}

void tr__groups_each(const tr__groups *gs, void (*fn)(void *ctx, const tr__group_view *v),
                     void *ctx) {
    static tr__group_view v; /* (the loop thread's alone: it is large) */
    static const int32_t none[TR__COLL_MAX_WORLD];
    for (const group *g = gs->all; g; g = g->next) {
        memset(&v, 0, sizeof v);
        v.name = g->name;
        v.backend = g->backend;
        v.world = g->world;
        v.joined = g->joined;
        v.live = g->live;
        v.complete = g->complete;
        v.pid = none;
        if (g->h) {
            v.dead = __atomic_load_n(&g->h->dead, __ATOMIC_RELAXED);
            v.pid = g->h->pid;
            for (int r = 0; r < g->world && r < 64 && r < (int)TR__COLL_MAX_WORLD; r++)
                for (int k = 0; k < 2; k++) {
                    const tr__coll_desc *d = &g->h->rk[r].desc[k];
                    uint64_t seq = __atomic_load_n(&d->seq, __ATOMIC_RELAXED);
                    if (seq > v.rank_seq[r]) {
                        v.rank_seq[r] = seq;
                        v.rank_kind[r] = __atomic_load_n(&d->kind, __ATOMIC_RELAXED);
                    }
                }
        }
        fn(ctx, &v);
    }
}
