/* actor/remote.c - see remote.h.
 *
 * Each actor registered on a link has a socketpair: the caller reads one end, the link's
 * stream thread (core/rpc's, in on_msg) writes the actor's RESULT bytes into the other. It
 * writes without the link's lock (a full socket waits for the caller's reader, who may
 * need the lock to send), holding a reference on the entry instead. A link that ends
 * shuts every entry's write end (the caller reads EOF) and leaves the registry, so the
 * next call there opens a fresh one; it is freed when its last entry closes (or with the
 * registry).
 */
#include "actor/remote.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actor/bulk.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/idmap.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/rpc.h"
#include "core/status.h"
#include "core/trace.h"

#define RECV_SLICE_MS 200
#define PULL_CHUNK ((size_t)4 << 20)
#define PULL_WINDOW 16
#define SOCK_BUF (4 << 20)
#define LINK_QUEUE ((size_t)8 << 20) /* a link's CALL bytes queued unsent, at most (about) */
#define LINK_PIECE ((size_t)1 << 20) /* ...in messages of this much at most */

typedef struct entry {
    uint8_t id[16];
    uint32_t gen; /* this opening's, in every message */
    int wfd;      /* the write end; -1 once shut */
    int refs;     /* the stream thread writing to it */
    int gone;     /* the caller closed it: freed when refs drops to 0 */
} entry;

/* An object being pulled over a link (the puller's thread waits on the registry's cv). */
typedef struct pull {
    uint8_t ref[16];
    uint32_t req0;   /* its requests' numbers start here */
    char *buf;       /* the object's bytes in our store, once created */
    int64_t total;   /* -1 until the node says */
    uint64_t got;    /* bytes in */
    int inflight;    /* requests out */
    uint64_t chunk;  /* every piece's size but the last's */
    uint32_t pieces; /* how many */
    uint8_t *seen;   /* a bit per piece come in */
    int rc;          /* the first failure */
    char why[300];
    int dead; /* the puller left: nothing more is written to buf */
    int bulk; /* 0: pieces on the link; BULK_ASKED, BULK_OFFERED, BULK_REFUSED */
    uint32_t bulk_port;
    uint8_t ticket[16];
    struct pull *next;
} pull;

/* A whole object of this size or more is asked for on a bulk connection (actor/bulk.h)
 * where the link has no TLS; the node may refuse, and then it comes in pieces. */
#define BULK_MIN ((int64_t)4 << 20)
#define BULK_I ((1u << 20) - 1) /* its request's number (past every piece's) */
enum { BULK_ASKED = 1, BULK_OFFERED, BULK_REFUSED };

/* A remote hold being asked for (its thread waits on the registry's cv)... */
typedef struct keepw {
    uint8_t ref[16];
    uint32_t req;
    int done, rc;
    char why[240];
    struct keepw *next;
} keepw;

/* ...and one this process has: the node keeps ref for our link to it (docs/OWNERSHIP.md). */
typedef struct rkept {
    uint8_t ref[16];
    struct tr__rlink *l;
    int user;           /* the user's hold (tr_ref_borrow), one at most, as a store's */
    int calls;          /* calls in flight that contain it */
    struct rkept *next; /* refs of the same key */
} rkept;

struct tr__rlink {
    tr__remotes *r;
    char address[160];
    tr__rpc_client *client;
    tr__rpc_stream *st;
    tr__rpc_stream_handlers h;
    tr__rpc_stream *ost; /* object pulls' stream (the same handlers) */
    int dead;            /* a stream ended */
    int held;            /* the node said HOLD (and no GO since): sends wait */
    int stop;
    char why[300];
    tr__idmap entries; /* by tr__id_key */
    uint32_t next_gen;
    uint32_t next_req;
    pull *pulls;
    keepw *keeps; /* holds asked for */
    uint32_t next_keep;
    int pullers; /* threads pulling, holding or releasing on it: it is not freed under them */
    int freeing;
    struct tr__rlink *next;
};

struct tr__remotes {
    pthread_mutex_t mu; /* everything here, every link's fields and entries */
    pthread_cond_t cv;  /* pulls: a piece came, or the link ended */
    size_t max_msg;
    tr__rlink *links; /* live ones */
    tr__rlink *ended; /* ended ones, freed at destroy */
    tr__idmap kept;   /* our remote holds: tr__id_key -> rkept chain */
};

int tr__remotes_create(size_t max_msg, tr__remotes **out) {
    tr__remotes *r = calloc(1, sizeof *r);
    if (!r) return tr__err(TR_ENOMEM, "remote links");
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    r->max_msg = max_msg;
    *out = r;
    return 0;
}

static void entry_put(entry *e) {
    if (--e->refs > 0 || !e->gone) return;
    if (e->wfd >= 0) close(e->wfd);
    free(e);
}

/* Forgets our remote holds through l (all of them if l is NULL): the map is made again
 * without them (a link ends rarely). Caller holds mu. */
static void drop_kept(tr__remotes *r, const tr__rlink *l) {
    rkept *all = NULL;
    size_t pos = 0;
    uint64_t key;
    void *v;
    while (tr__idmap_next(&r->kept, &pos, &key, &v)) {
        for (rkept *k = v, *n; k; k = n) {
            n = k->next;
            k->next = all;
            all = k;
        }
    }
    tr__idmap_free(&r->kept);
    memset(&r->kept, 0, sizeof r->kept);
    for (rkept *k = all, *n; k; k = n) {
        n = k->next;
        uint64_t kk = tr__id_key(k->ref);
        k->next = l && k->l != l ? tr__idmap_get(&r->kept, kk) : NULL;
        if (!l || k->l == l || tr__idmap_put(&r->kept, kk, k)) free(k);
    }
}

/* Shuts every entry's write end: their readers see EOF. Caller holds mu. */
static void link_end(tr__rlink *l, const char *why) {
    if (l->dead) return;
    l->dead = 1;
    snprintf(l->why, sizeof l->why, "%s", why);
    size_t pos = 0;
    uint64_t key;
    void *v;
    while (tr__idmap_next(&l->entries, &pos, &key, &v)) {
        entry *e = v;
        if (e->wfd >= 0 && e->refs == 0) {
            close(e->wfd);
            e->wfd = -1;
        }
    }
    tr__remotes *r = l->r;
    for (pull *p = l->pulls; p; p = p->next) {
        if (!p->rc) {
            p->rc = TR_EOBJECT_LOST;
            snprintf(p->why, sizeof p->why, "%s", why);
        }
    }
    for (keepw *k = l->keeps; k; k = k->next) {
        if (!k->done) {
            k->done = 1;
            k->rc = TR_ECONNECT;
            snprintf(k->why, sizeof k->why, "%s", why);
        }
    }
    drop_kept(r, l); /* the node lets go of what it kept for this link */
    pthread_cond_broadcast(&r->cv);
    for (tr__rlink **pp = &r->links; *pp; pp = &(*pp)->next) {
        if (*pp == l) {
            *pp = l->next;
            l->next = r->ended;
            r->ended = l;
            break;
        }
    }
}

/* Writes all of data to e's socket, waiting while it is full (the caller reads it), until
 * the link stops. Without the lock. Returns 0 or -1. */
static int write_all(tr__rlink *l, int fd, const char *data, size_t len) {
    while (len) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            data += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN) return -1;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        poll(&p, 1, RECV_SLICE_MS);
        if (__atomic_load_n(&l->stop, __ATOMIC_RELAXED)) return -1;
    }
    return 0;
}

/* Copies k bytes from the pieces iov[0..niov), starting skip bytes in, to dst. */
static void copy_from(const struct iovec *iov, int niov, size_t skip, char *dst, size_t k) {
    for (int i = 0; i < niov && k; i++) {
        size_t l = iov[i].iov_len;
        if (skip >= l) {
            skip -= l;
            continue;
        }
        size_t c = l - skip < k ? l - skip : k;
        memcpy(dst, (const char *)iov[i].iov_base + skip, c);
        dst += c;
        k -= c;
        skip = 0;
    }
}

/* An object piece (or why there is none) for a pull on l: its bytes go in place, from p
 * (n bytes) or, when iov is set, from those pieces (p: the first bytes, n: the total).
 * Caller holds mu. */
static void on_object(tr__rlink *l, const unsigned char *p, size_t n, uint32_t req,
                      const struct iovec *iov, int niov) {
    pull *q = l->pulls;
    while (q && (memcmp(q->ref, p + 1, 16) != 0 || req - q->req0 >= (1u << 20)))
        q = q->next;
    if (!q || q->dead || q->rc) return; /* a pull that gave up, or failed: dropped */
    const unsigned char *b = p + TR__REMOTE_HDR;
    size_t left = n - TR__REMOTE_HDR;
    uint32_t i = req - q->req0; /* 0: the size; i: piece i - 1; BULK_I: the bulk offer */
    if (i == BULK_I && q->bulk == BULK_ASKED &&
        (p[0] == TR__REMOTE_OBJ_ERR || p[0] == TR__REMOTE_OBJ_BULK)) {
        uint64_t total = 0;
        uint32_t port = 0;
        if (p[0] == TR__REMOTE_OBJ_BULK && left == 28) {
            memcpy(&total, b, 8);
            memcpy(&port, b + 8, 4);
            memcpy(q->ticket, b + 12, 16);
        }
        if (p[0] == TR__REMOTE_OBJ_ERR) { /* (the pieces say whether the object is there) */
            q->bulk = BULK_REFUSED;
        } else if (left != 28 || total != (uint64_t)q->total || port == 0 || port > 65535) {
            q->rc = TR_EPROTO;
            snprintf(q->why, sizeof q->why, "node %s sent a malformed bulk offer", l->address);
        } else {
            q->bulk = BULK_OFFERED;
            q->bulk_port = port;
        }
        q->inflight--;
        pthread_cond_broadcast(&l->r->cv);
        return;
    }
    if (p[0] == TR__REMOTE_OBJ_ERR) {
        int32_t code = TR_EPROTO;
        if (left >= 4) memcpy(&code, b, 4);
        /* a code of ours, or it is the peer that is wrong */
        q->rc = code == TR_ENOTFOUND                 ? TR_EOBJECT_LOST
                : code < 0 && code >= TR_EOWNER_DIED ? code
                                                     : TR_EPROTO;
        snprintf(q->why, sizeof q->why, "node %s: %.*s", l->address,
                 (int)(left > 4 ? (left - 4 > 250 ? 250 : left - 4) : 0), (const char *)b + 4);
        q->inflight--;
        pthread_cond_broadcast(&l->r->cv);
        return;
    }
    uint64_t off = 0, total = 0;
    if (left >= 16) {
        memcpy(&off, b, 8);
        memcpy(&total, b + 8, 8);
    }
    size_t k = left >= 16 ? left - 16 : 0;
    const char *bad = NULL;
    if (left < 16 || total > (uint64_t)INT64_MAX / 2)
        bad = "a malformed piece";
    else if (i == 0 && (q->total >= 0 || k != 0 || off != 0))
        bad = "an unasked-for size";
    else if (i > 0 && (q->total < 0 || !q->buf || (uint64_t)q->total != total))
        bad = "a piece of another size";
    else if (i > 0 &&
             (i - 1 >= q->pieces || off != (uint64_t)(i - 1) * q->chunk ||
              k != ((uint64_t)q->total - off < q->chunk ? (uint64_t)q->total - off : q->chunk) ||
              (q->seen[(i - 1) / 8] >> ((i - 1) % 8) & 1)))
        bad = "a piece it was not asked for";
    if (bad) {
        q->rc = TR_EPROTO;
        snprintf(q->why, sizeof q->why, "node %s sent %s", l->address, bad);
    } else if (i == 0) {
        q->total = (int64_t)total;
    } else {
        if (iov) /* (the puller waits for this under mu) */
            copy_from(iov, niov, TR__REMOTE_HDR + 16, q->buf + off, k);
        else
            memcpy(q->buf + off, b + 16, k);
        q->seen[(i - 1) / 8] |= (uint8_t)(1u << ((i - 1) % 8));
        q->got += k;
    }
    q->inflight--;
    pthread_cond_broadcast(&l->r->cv);
}

/* The link's stream thread: a message from the node (no hand-off: its RESULT bytes go
 * into the actor's socketpair from here). */
static void on_msg(void *ctx, tr__rpc_stream *st, const void *msg, size_t n) {
    (void)st;
    tr__rlink *l = ctx;
    tr__remotes *r = l->r;
    const unsigned char *p = msg;
    uint32_t gen = 0;
    if (n >= TR__REMOTE_HDR) memcpy(&gen, p + 17, 4); /* (little-endian hosts) */
    pthread_mutex_lock(&r->mu);
    if (l->dead) {
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (n >= TR__REMOTE_HDR && (p[0] == TR__REMOTE_OBJ_DATA || p[0] == TR__REMOTE_OBJ_ERR ||
                                p[0] == TR__REMOTE_OBJ_BULK)) {
        on_object(l, p, n, gen, NULL, 0);
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (n >= TR__REMOTE_HDR + 4 && p[0] == TR__REMOTE_OBJ_KEPT) { /* a hold's answer */
        keepw *k = l->keeps;
        while (k && (k->req != gen || memcmp(k->ref, p + 1, 16) != 0))
            k = k->next;
        if (k && !k->done) { /* (an answer nobody waits for any more: dropped) */
            int32_t code;
            memcpy(&code, p + TR__REMOTE_HDR, 4);
            k->done = 1;
            k->rc = code == 0 || (code < 0 && code >= TR_EOWNER_DIED) ? code : TR_EPROTO;
            size_t wn = n - TR__REMOTE_HDR - 4;
            snprintf(k->why, sizeof k->why, "%.*s", (int)(wn > 200 ? 200 : wn),
                     (const char *)p + TR__REMOTE_HDR + 4);
            pthread_cond_broadcast(&r->cv);
        }
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (n >= TR__REMOTE_HDR && (p[0] == TR__REMOTE_HOLD || p[0] == TR__REMOTE_GO)) {
        __atomic_store_n(&l->held, p[0] == TR__REMOTE_HOLD, __ATOMIC_RELAXED); /* (callers retry
                                                                        in a moment) */
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (n < TR__REMOTE_HDR || (p[0] != TR__REMOTE_DATA && p[0] != TR__REMOTE_EOF)) {
        char why[300];
        snprintf(why, sizeof why, "node %s sent a malformed message (%zu bytes)", l->address, n);
        TR_LOG_WARN("REMOTE-LINK", "%s", why);
        link_end(l, why); /* its actors read EOF; nothing more is taken from it */
        pthread_mutex_unlock(&r->mu);
        return;
    }
    entry *e = tr__idmap_get(&l->entries, tr__id_key(p + 1));
    if (e && (memcmp(e->id, p + 1, 16) != 0 || e->gen != gen || e->gone || e->wfd < 0))
        e = NULL; /* an earlier opening's bytes, or one the caller let go of: dropped */
    if (e && p[0] == TR__REMOTE_EOF) { /* the actor's connection there ended */
        char hex[33];
        tr__hex(e->id, 16, hex);
        TR_LOG_DEBUG("REMOTE-EOF", "actor %s on %s: %.*s", hex, l->address,
                     (int)(n - TR__REMOTE_HDR > 200 ? 200 : n - TR__REMOTE_HDR),
                     (const char *)p + TR__REMOTE_HDR);
        if (e->refs == 0) {
            close(e->wfd);
            e->wfd = -1;
        }
        e = NULL;
    }
    if (e) e->refs++;
    int fd = e ? e->wfd : -1;
    pthread_mutex_unlock(&r->mu);
    if (!e) return; /* results for an actor the caller let go of: dropped */
    int wr = write_all(l, fd, (const char *)p + TR__REMOTE_HDR, n - TR__REMOTE_HDR);
    pthread_mutex_lock(&r->mu);
    if (wr && !e->gone && e->wfd >= 0) { /* the reader is gone or stuck: end it */
        close(e->wfd);
        e->wfd = -1;
    }
    entry_put(e);
    pthread_mutex_unlock(&r->mu);
}

/* The link's stream thread: a message as the pieces it came in. An object's piece goes
 * from them straight into the store; anything else is made one buffer for on_msg. */
static void on_msgv(void *ctx, tr__rpc_stream *st, const struct iovec *iov, int niov, size_t n) {
    tr__rlink *l = ctx;
    unsigned char head[TR__REMOTE_HDR + 16];
    size_t hn = n < sizeof head ? n : sizeof head;
    copy_from(iov, niov, 0, (char *)head, hn);
    if (hn == sizeof head && head[0] == TR__REMOTE_OBJ_DATA) {
        uint32_t gen;
        memcpy(&gen, head + 17, 4);
        pthread_mutex_lock(&l->r->mu);
        if (!l->dead) on_object(l, head, n, gen, iov, niov);
        pthread_mutex_unlock(&l->r->mu);
        return;
    }
    tr__buf b = TR__BUF_INIT;
    for (int i = 0; i < niov; i++)
        tr__buf_append(&b, iov[i].iov_base, iov[i].iov_len);
    if (!b.oom) on_msg(ctx, st, b.data, b.len);
    tr__buf_free(&b);
}

/* The link's stream thread: the stream ended (the node died, the network broke, the
 * token was refused, or we closed it). */
static void on_end(void *ctx, tr__rpc_stream *st) {
    tr__rlink *l = ctx;
    char reason[240], why[600];
    int rc = tr__rpc_stream_why(st, reason, sizeof reason);
    snprintf(why, sizeof why, "the link to node %s ended: %s", l->address,
             rc == TR_ECLOSED ? "closed" : reason);
    pthread_mutex_lock(&l->r->mu);
    if (!__atomic_load_n(&l->stop, __ATOMIC_RELAXED) && !l->dead)
        TR_LOG_WARN("REMOTE-LINK", "%s", why);
    link_end(l, why);
    pthread_mutex_unlock(&l->r->mu);
}

static void link_free(tr__rlink *l) {
    __atomic_store_n(&l->stop, 1, __ATOMIC_RELAXED);
    tr__rpc_stream_close(l->st); /* (joins its thread: on_msg and on_end are over) */
    tr__rpc_stream_close(l->ost);
    tr__rpc_client_destroy(l->client);
    size_t pos = 0;
    uint64_t key;
    void *v;
    while (tr__idmap_next(&l->entries, &pos, &key, &v)) {
        entry *e = v;
        if (e->wfd >= 0) close(e->wfd);
        free(e);
    }
    tr__idmap_free(&l->entries);
    free(l);
}

void tr__remotes_destroy(tr__remotes *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    tr__rlink *all = r->links, *ended = r->ended;
    r->links = r->ended = NULL;
    pthread_mutex_unlock(&r->mu);
    for (tr__rlink *lists[2] = {all, ended}, **pl = lists; pl < lists + 2; pl++) {
        for (tr__rlink *l = *pl, *n; l; l = n) {
            n = l->next;
            link_free(l);
        }
    }
    drop_kept(r, NULL);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

/* A live link to address, opened if need be. Caller holds mu (dropped while opening). */
static int get_link(tr__remotes *r, const char *address, const char *token,
                    const tr__rpc_tls_files *files, tr__rlink **out) {
    for (tr__rlink *l = r->links; l; l = l->next) {
        if (strcmp(l->address, address) == 0) {
            *out = l;
            return 0;
        }
    }
    tr__rlink *l = calloc(1, sizeof *l);
    if (!l) return tr__err(TR_ENOMEM, "remote link");
    l->r = r;
    snprintf(l->address, sizeof l->address, "%s", address);
    tr__rpc_tls tls = {NULL, NULL, NULL};
    int rc = tr__rpc_tls_load_files(files, &tls);
    if (!rc) rc = tr__rpc_client_create_tls(address, token, &tls, r->max_msg, &l->client);
    tr__rpc_tls_free(&tls);
    l->h.on_msg = on_msg;
    l->h.on_end = on_end;
    l->h.on_msgv = on_msgv;
    l->h.ctx = l;
    if (!rc) rc = tr__rpc_stream_open_cb(l->client, &l->h, &l->st);
    if (!rc) rc = tr__rpc_stream_open_cb(l->client, &l->h, &l->ost);
    if (rc) { /* (closing sets no error text) */
        if (l->st) tr__rpc_stream_close(l->st);
        if (l->ost) tr__rpc_stream_close(l->ost);
        tr__rpc_client_destroy(l->client);
        free(l);
        return tr__err_wrap(rc == TR_ENOMEM ? rc : TR_ECONNECT, "cannot reach node %s", address);
    }
    l->next = r->links;
    r->links = l;
    *out = l;
    return 0;
}

int tr__remote_open(tr__remotes *r, const char *address, const char *token,
                    const tr__rpc_tls_files *tls, const uint8_t id[16], int *fd, tr__rlink **link) {
    *fd = -1;
    *link = NULL;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return tr__err_errno(errno, "socketpair");
    int sz = SOCK_BUF;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    entry *e = calloc(1, sizeof *e);
    if (!e) {
        close(sv[0]);
        close(sv[1]);
        return tr__err(TR_ENOMEM, "remote actor");
    }
    memcpy(e->id, id, 16);
    e->wfd = sv[1];

    pthread_mutex_lock(&r->mu);
    tr__rlink *l = NULL;
    int rc = get_link(r, address, token, tls, &l);
    if (!rc && tr__idmap_get(&l->entries, tr__id_key(id)))
        rc = tr__err(TR_EEXIST, "actor is open on the link already");
    if (!rc) e->gen = ++l->next_gen;
    if (!rc) rc = tr__idmap_put(&l->entries, tr__id_key(id), e);
    pthread_mutex_unlock(&r->mu);
    if (rc) {
        close(sv[0]);
        close(sv[1]);
        free(e);
        return rc;
    }
    *fd = sv[0];
    *link = l;
    return 0;
}

static int send_msg(tr__rlink *l, int kind, const uint8_t id[16], uint32_t gen, const void *data,
                    size_t len) {
    tr__buf b = TR__BUF_INIT;
    unsigned char k = (unsigned char)kind;
    tr__buf_append(&b, &k, 1);
    tr__buf_append(&b, id, 16);
    tr__buf_append(&b, &gen, 4);
    if (len) tr__buf_append(&b, data, len);
    int rc = b.oom ? tr__err(TR_ENOMEM, "remote call") : tr__rpc_stream_send(l->st, b.data, b.len);
    tr__buf_free(&b);
    return rc;
}

/* The caller's generation of actor id on link l. Returns 0, or TR_ECONNECT if the link
 * ended or id is not open on it. */
static int open_gen(tr__remotes *r, tr__rlink *l, const uint8_t id[16], uint32_t *gen) {
    pthread_mutex_lock(&r->mu);
    entry *e = tr__idmap_get(&l->entries, tr__id_key(id));
    *gen = e ? e->gen : 0;
    int rc = l->dead ? tr__err(TR_ECONNECT, "%s", l->why)
             : !e    ? tr__err(TR_ECONNECT, "the actor is not open on the link")
                     : 0;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int tr__remote_send(tr__remotes *r, tr__rlink *l, const uint8_t id[16], const void *data,
                    size_t len, size_t *taken) {
    *taken = 0;
    uint32_t gen;
    int rc = open_gen(r, l, id, &gen);
    /* a link that ends meanwhile fails the send, or drops what it queued: either way the
     * caller reads EOF next */
    size_t piece = r->max_msg - TR__REMOTE_HDR; /* (CALL bytes may be cut anywhere) */
    if (piece > LINK_PIECE) piece = LINK_PIECE;
    while (!rc && *taken < len) {
        /* what the caller has more than LINK_QUEUE of unsent, or the node holds, waits in
         * the caller (it tries again in a moment): a node that says HOLD gets at most that
         * much more */
        if (__atomic_load_n(&l->held, __ATOMIC_RELAXED) ||
            tr__rpc_stream_unsent(l->st) >= LINK_QUEUE) {
            rc = tr__err(TR_ENOMEM, "the link to node %s is full, or held", l->address);
            break;
        }
        size_t n = len - *taken < piece ? len - *taken : piece;
        rc = send_msg(l, TR__REMOTE_DATA, id, gen, (const char *)data + *taken, n);
        if (!rc) *taken += n;
    }
    return rc;
}

int tr__remote_cancel(tr__remotes *r, tr__rlink *l, const uint8_t id[16], uint64_t seq,
                      int interrupt) {
    uint32_t gen;
    int rc = open_gen(r, l, id, &gen);
    unsigned char body[TR__REMOTE_CANCEL_LEN];
    memcpy(body, &seq, 8); /* (little-endian, as the rest of the header) */
    body[8] = interrupt ? 1 : 0;
    return rc ? rc : send_msg(l, TR__REMOTE_CANCEL, id, gen, body, sizeof body);
}

/* Whether an ended link can go now (no actor open on it, nobody pulling): then it leaves
 * the registry and the caller frees it, after dropping mu. Caller holds mu. */
static int claim_ended(tr__remotes *r, tr__rlink *l) {
    if (!l->dead || l->freeing || l->entries.count || l->pullers) return 0;
    l->freeing = 1;
    for (tr__rlink **pp = &r->ended; *pp; pp = &(*pp)->next) {
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    }
    return 1;
}

void tr__remote_close(tr__remotes *r, tr__rlink *l, const uint8_t id[16]) {
    pthread_mutex_lock(&r->mu);
    entry *e = tr__idmap_get(&l->entries, tr__id_key(id));
    uint32_t gen = 0;
    if (e && memcmp(e->id, id, 16) == 0) {
        gen = e->gen;
        tr__idmap_del(&l->entries, tr__id_key(id));
        e->gone = 1;
        e->refs++;
        entry_put(e);
    }
    int dead = l->dead;
    /* an ended link goes with its last actor (its stream thread takes no entry after
     * the link ended) */
    int free_it = claim_ended(r, l);
    pthread_mutex_unlock(&r->mu);
    if (free_it)
        link_free(l);
    else if (!dead && e) /* (a lost CLOSE only keeps a connection there until the link ends) */
        send_msg(l, TR__REMOTE_CLOSE, id, gen, NULL, 0);
}

/* A request for a piece (or, kind TR__REMOTE_OBJ_BULK, the bulk offer), on the link's
 * stream for objects (its own thread delivers the pieces: never behind an actor's results
 * that nobody is reading yet). */
static int send_get(tr__rlink *l, int kind, const uint8_t ref[16], uint32_t req, uint64_t off,
                    uint64_t len) {
    uint64_t body[2] = {off, len};
    uint8_t m[1 + 16 + 4 + 16];
    m[0] = (uint8_t)kind;
    memcpy(m + 1, ref, 16);
    memcpy(m + 17, &req, 4);
    memcpy(m + 21, body, sizeof body);
    return tr__rpc_stream_send(l->ost, m, sizeof m);
}

/* Waits (mu held) until cond or the deadline; 0 or TR_ETIMEDOUT. */
static int wait_until(tr__remotes *r, int64_t deadline) {
    if (deadline == INT64_MAX) {
        pthread_cond_wait(&r->cv, &r->mu);
        return 0;
    }
    struct timespec ts = {(time_t)(deadline / 1000000000), (long)(deadline % 1000000000)};
    return pthread_cond_timedwait(&r->cv, &r->mu, &ts) == ETIMEDOUT ? TR_ETIMEDOUT : 0;
}

static int link_dead(void *arg) {
    tr__rlink *l = arg;
    pthread_mutex_lock(&l->r->mu);
    int dead = l->dead;
    pthread_mutex_unlock(&l->r->mu);
    return dead;
}

/* Asks l's node to offer q's object on a bulk connection and takes it whole from there
 * into q->buf (q->got: all of it). Anything but the deadline passing falls back to the
 * pieces (q->got stays 0): a node that refuses or fails leaves the answer to them.
 * Returns 0 or TR_ETIMEDOUT. Called with mu; drops it meanwhile. */
static int pull_bulk(tr__remotes *r, tr__rlink *l, pull *q, int64_t deadline) {
    int rc = 0;
    q->bulk = BULK_ASKED;
    q->inflight++;
    pthread_mutex_unlock(&r->mu);
    int src = send_get(l, TR__REMOTE_OBJ_BULK, q->ref, q->req0 + BULK_I, 0, 0);
    pthread_mutex_lock(&r->mu);
    if (src) {
        q->inflight--;
        q->bulk = BULK_REFUSED;
    }
    while (!rc && !q->rc && q->bulk == BULK_ASKED)
        rc = wait_until(r, deadline);
    if (rc || q->rc || q->bulk != BULK_OFFERED) return rc;
    char host[160];
    snprintf(host, sizeof host, "%s", l->address);
    char *colon = strrchr(host, ':');
    if (colon) *colon = '\0';
    pthread_mutex_unlock(&r->mu);
    int frc = tr__bulk_fetch(host, (int)q->bulk_port, q->ticket, q->buf, (size_t)q->total, deadline,
                             link_dead, l);
    pthread_mutex_lock(&r->mu);
    if (!frc)
        q->got = (uint64_t)q->total;
    else if (frc == TR_ETIMEDOUT)
        rc = TR_ETIMEDOUT;
    else
        TR_LOG_DEBUG("PULL-BULK", "%s: the pieces instead", tr__last_error());
    return rc;
}

int tr__remote_pull(tr__remotes *r, const char *address, const char *token,
                    const tr__rpc_tls_files *tls, tr__objects *o, const uint8_t ref[16],
                    int timeout_ms) {
    int64_t t0 = tr__now_ns();
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : tr__deadline(timeout_ms);
    size_t chunk = r->max_msg - TR__REMOTE_HDR - 64;
    if (chunk > PULL_CHUNK) chunk = PULL_CHUNK;
    pull q;
    memset(&q, 0, sizeof q);
    memcpy(q.ref, ref, 16);
    q.total = -1;
    q.chunk = chunk;
    pthread_mutex_lock(&r->mu);
    tr__rlink *l = NULL;
    int rc = get_link(r, address, token, tls, &l);
    if (rc) {
        pthread_mutex_unlock(&r->mu);
        return tr__err(TR_EOBJECT_LOST, "%s", tr__last_error());
    }
    l->pullers++;
    q.req0 = l->next_req;
    l->next_req += 1u << 20; /* room for every piece's number */
    q.next = l->pulls;
    l->pulls = &q;
    tr_ref obj;
    memcpy(obj.b, ref, 16);
    int created = 0;
    /* its size first (asked again while the node says it is not sealed yet) */
    for (;;) {
        q.inflight = 1;
        pthread_mutex_unlock(&r->mu);
        rc = send_get(l, TR__REMOTE_OBJ_GET, ref, q.req0, 0, 0);
        pthread_mutex_lock(&r->mu);
        if (rc) q.inflight = 0;
        while (!rc && !q.rc && q.total < 0)
            rc = wait_until(r, deadline);
        if (rc || q.rc != TR_ETIMEDOUT || tr__now_ns() >= deadline) break;
        q.rc = 0;
        pthread_mutex_unlock(&r->mu);
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&r->mu);
    }
    uint64_t npieces = q.total > 0 ? ((uint64_t)q.total + chunk - 1) / chunk : 0;
    if (!rc && !q.rc && npieces >= (1u << 20) - 1) {
        q.rc = TR_EMSGSIZE;
        snprintf(q.why, sizeof q.why, "an object of %lld bytes is too large to pull",
                 (long long)q.total);
    }
    q.pieces = (uint32_t)npieces;
    if (!rc && !q.rc && !(q.seen = calloc(npieces / 8 + 1, 1))) {
        q.rc = TR_ENOMEM;
        snprintf(q.why, sizeof q.why, "no memory to pull %lld bytes", (long long)q.total);
    }
    if (!rc && !q.rc) { /* room here; another puller already: its seal is waited for */
        pthread_mutex_unlock(&r->mu);
        void *buf = NULL;
        int crc = tr__objects_create_as(o, obj, (size_t)q.total, &buf);
        pthread_mutex_lock(&r->mu);
        if (crc == TR_EEXIST) {
            q.dead = 1;
        } else if (crc) {
            q.rc = crc;
            snprintf(q.why, sizeof q.why, "%s", tr__last_error());
        } else {
            q.buf = buf;
            created = 1;
        }
    }
    /* a large object whole on a bulk connection, if the node offers one */
    if (!rc && !q.rc && created && q.total >= BULK_MIN && !(tls && tls->ca[0]))
        rc = pull_bulk(r, l, &q, deadline);
    /* the pieces, PULL_WINDOW at a time */
    uint64_t next = 0;
    uint32_t req = q.req0 + 1;
    while (!rc && !q.rc && !q.dead && q.got < (uint64_t)q.total) {
        while (q.inflight < PULL_WINDOW && next < (uint64_t)q.total) {
            uint64_t k = (uint64_t)q.total - next < chunk ? (uint64_t)q.total - next : chunk;
            q.inflight++;
            pthread_mutex_unlock(&r->mu);
            int src = send_get(l, TR__REMOTE_OBJ_GET, ref, req++, next, k);
            pthread_mutex_lock(&r->mu);
            if (src) {
                q.inflight--;
                if (!q.rc) {
                    q.rc = TR_EOBJECT_LOST;
                    snprintf(q.why, sizeof q.why, "%s", tr__last_error());
                }
                break;
            }
            next += k;
        }
        if (!q.rc && q.got < (uint64_t)q.total && q.inflight == 0 && next >= (uint64_t)q.total) {
            q.rc = TR_EPROTO; /* every piece answered, some bytes missing: never sealed */
            snprintf(q.why, sizeof q.why, "node %s left bytes out", address);
        }
        if (!q.rc && q.got < (uint64_t)q.total) rc = wait_until(r, deadline);
    }
    q.dead = 1; /* no piece is written from here on */
    for (pull **pp = &l->pulls; *pp; pp = &(*pp)->next) {
        if (*pp == &q) {
            *pp = q.next;
            break;
        }
    }
    int64_t total = q.total;
    uint64_t got = q.got;
    /* every byte in: done, whatever happened to the link or the clock since */
    if (created && total >= 0 && got == (uint64_t)total) rc = q.rc = 0;
    free(q.seen);
    l->pullers--;
    int free_it = claim_ended(r, l);
    pthread_mutex_unlock(&r->mu);
    if (free_it) link_free(l);
    if (!rc && q.rc)
        rc = tr__err(q.rc, "pulling an object from %s: %s", address, q.why);
    else if (rc == TR_ETIMEDOUT)
        rc = tr__err(rc, "pulling an object from %s: %llu of %lld bytes in %d ms", address,
                     (unsigned long long)got, (long long)total, timeout_ms);
    if (created) {
        if (!rc) rc = tr__objects_seal(o, obj);
        if (rc) tr__objects_abort(o, obj); /* else its pin goes after the lookup that follows */
    }
    tr__trace_ev_add(TR__EV_PULL, t0, tr__now_ns(), "pull", 4, 0, got,
                     rc != 0);               /* (the timeline) */
    tr__proc_counters *cnt = tr__proc_cnt(); /* (the node's metrics) */
    if (cnt) {
        tr__cnt_add(&cnt->pulls, 1);
        tr__cnt_add(&cnt->pull_bytes, got);
        if (rc < 0) tr__cnt_add(&cnt->pull_errors, 1);
    }
    return rc ? rc : created;
}

/* ------------------------------------------------------------------ remote holds */

static rkept *find_kept(tr__remotes *r, const uint8_t ref[16]) {
    rkept *k = tr__idmap_get(&r->kept, tr__id_key(ref));
    while (k && memcmp(k->ref, ref, 16) != 0)
        k = k->next;
    return k;
}

/* Sends a KEEP or LETGO of ref on stream st of a link. */
static int send_keep(tr__rpc_stream *st, int kind, const uint8_t ref[16], uint32_t req) {
    uint8_t m[TR__REMOTE_HDR + 16];
    memset(m, 0, sizeof m);
    m[0] = (uint8_t)kind;
    memcpy(m + 1, ref, 16);
    memcpy(m + 17, &req, 4);
    return tr__rpc_stream_send(st, m, sizeof m);
}

void tr__remote_result_keep(tr__remotes *r, tr__rlink *l) {
    pthread_mutex_lock(&r->mu);
    l->pullers++;
    pthread_mutex_unlock(&r->mu);
}

void tr__remote_result_drop(tr__remotes *r, tr__rlink *l, const uint8_t ref[16]) {
    pthread_mutex_lock(&r->mu);
    int dead = l->dead; /* (an ended link's node let go of all it kept for it) */
    pthread_mutex_unlock(&r->mu);
    if (!dead) send_keep(l->st, TR__REMOTE_OBJ_LETGO, ref, 0);
    pthread_mutex_lock(&r->mu);
    l->pullers--;
    int free_it = claim_ended(r, l);
    pthread_mutex_unlock(&r->mu);
    if (free_it) link_free(l);
}

int tr__remote_hold(tr__remotes *r, const char *address, const char *token,
                    const tr__rpc_tls_files *tls, const uint8_t ref[16], int user, int timeout_ms) {
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : tr__deadline(timeout_ms);
    pthread_mutex_lock(&r->mu);
    rkept *had = find_kept(r, ref);
    if (had) { /* one KEEP there for all our holds */
        if (user)
            had->user = 1;
        else
            had->calls++;
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    tr__rlink *l = NULL;
    int rc = get_link(r, address, token, tls, &l);
    if (rc) {
        pthread_mutex_unlock(&r->mu);
        return rc;
    }
    keepw w;
    memset(&w, 0, sizeof w);
    memcpy(w.ref, ref, 16);
    w.req = ++l->next_keep;
    w.next = l->keeps;
    l->keeps = &w;
    l->pullers++;
    pthread_mutex_unlock(&r->mu);
    rc = send_keep(l->ost, TR__REMOTE_OBJ_KEEP, ref, w.req);
    pthread_mutex_lock(&r->mu);
    if (rc) {
        w.done = 1;
        w.rc = rc == TR_ENOMEM ? rc : TR_ECONNECT;
        snprintf(w.why, sizeof w.why, "%s", tr__last_error());
    }
    while (!w.done && !rc)
        rc = wait_until(r, deadline);
    for (keepw **pp = &l->keeps; *pp; pp = &(*pp)->next) {
        if (*pp == &w) {
            *pp = w.next;
            break;
        }
    }
    int again = 0; /* kept twice (another thread of ours meanwhile): one LETGO */
    if (!rc && !w.rc && !l->dead) {
        if ((had = find_kept(r, ref))) {
            again = 1;
            if (user)
                had->user = 1;
            else
                had->calls++;
        } else {
            rkept *k = calloc(1, sizeof *k);
            uint64_t key = tr__id_key(ref);
            if (k) {
                memcpy(k->ref, ref, 16);
                k->l = l;
                k->user = user;
                k->calls = !user;
                k->next = tr__idmap_get(&r->kept, key);
            }
            if (!k || tr__idmap_put(&r->kept, key, k)) {
                free(k);
                again = 1;
                w.rc = TR_ENOMEM;
                snprintf(w.why, sizeof w.why, "no memory for a remote hold");
            }
        }
    }
    l->pullers--;
    int free_it = claim_ended(r, l);
    pthread_mutex_unlock(&r->mu);
    if (again) send_keep(l->ost, TR__REMOTE_OBJ_LETGO, ref, 0);
    if (free_it) link_free(l);
    char hex[33];
    tr__hex(ref, 16, hex);
    if (rc == TR_ETIMEDOUT) /* (the node may keep it until our link ends: a bounded leak) */
        return tr__err(rc, "holding %s at node %s: no answer in %d ms", hex, address, timeout_ms);
    if (w.rc)
        return tr__err(w.rc == TR_ENOTFOUND ? TR_ENOTFOUND : w.rc, "holding %s at node %s: %s", hex,
                       address, w.why);
    return 0;
}

int tr__remote_release(tr__remotes *r, const uint8_t ref[16], int user) {
    pthread_mutex_lock(&r->mu);
    rkept *k = tr__idmap_get(&r->kept, tr__id_key(ref)), **pp = &k, *head = k;
    while (*pp && memcmp((*pp)->ref, ref, 16) != 0)
        pp = &(*pp)->next;
    rkept *d = *pp;
    if (!d || (user ? !d->user : d->calls <= 0)) {
        pthread_mutex_unlock(&r->mu);
        return TR_ENOTFOUND;
    }
    if (user)
        d->user = 0;
    else
        d->calls--;
    if (d->user || d->calls) { /* other holds of ours on it remain */
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    *pp = d->next;
    if (d == head) { /* the chain's head goes */
        if (d->next)
            tr__idmap_put(&r->kept, tr__id_key(ref), d->next); /* (replaces: no memory taken) */
        else
            tr__idmap_del(&r->kept, tr__id_key(ref));
    }
    tr__rlink *l = d->l; /* live: a link that ends forgets its holds first */
    free(d);
    l->pullers++;
    pthread_mutex_unlock(&r->mu);
    send_keep(l->ost, TR__REMOTE_OBJ_LETGO, ref, 0); /* (a link ending meanwhile lets go of all) */
    pthread_mutex_lock(&r->mu);
    l->pullers--;
    int free_it = claim_ended(r, l);
    pthread_mutex_unlock(&r->mu);
    if (free_it) link_free(l);
    return 0;
}
