/* actor/bulk.c - see bulk.h.
 *
 * Threads: one accepts; each connection gets a thread of its own (at most BULK_CONNS),
 * which reads the ticket, takes its offer and writes the bytes with a blocking socket
 * whose sends time out, so a puller that stops reading frees its thread. A finished
 * connection's thread is joined, and its socket closed, by the accepting thread or at
 * destroy; destroy shuts down the sockets still being served, so it never waits on a
 * peer.
 */
#include "actor/bulk.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/frame.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/status.h"

#define OFFER_TTL_NS 10000000000LL /* an offer nobody came for goes */
#define HELLO_MS 1000              /* a connection sends its ticket within this */
#define STALL_MS 10000             /* a puller that takes nothing for this long is dropped */
#define BULK_CONNS 32              /* connections served at once */
#define MAX_OFFERS 1024
#define SEND_CHUNK ((size_t)4 << 20)

typedef struct offer {
    uint8_t ticket[16];
    const char *data;
    size_t len;
    void (*release)(void *);
    void *arg;
    int64_t expires;
    struct offer *next;
} offer;

typedef struct conn {
    struct tr__bulk *b;
    int fd;
    int done; /* its thread has finished with fd (under mu) */
    pthread_t t;
    struct conn *next;
} conn;

struct tr__bulk {
    pthread_mutex_t mu;
    int ls, port, stop;
    offer *offers;
    int n_offers;
    conn *conns;
    int n_conns;
    pthread_t accept_t;
};

static void offer_free(offer *o) {
    o->release(o->arg);
    free(o);
}

/* Unlinks the offers past their time into *gone (to release without mu). Caller holds mu. */
static void expire(tr__bulk *b, int64_t now, offer **gone) {
    for (offer **pp = &b->offers; *pp;) {
        offer *o = *pp;
        if (o->expires <= now) {
            *pp = o->next;
            o->next = *gone;
            *gone = o;
            b->n_offers--;
        } else {
            pp = &o->next;
        }
    }
}

static void free_all(offer *o) {
    while (o) {
        offer *next = o->next;
        offer_free(o);
        o = next;
    }
}

static void *serve(void *arg) {
    conn *c = arg;
    tr__bulk *b = c->b;
    struct timeval stall = {STALL_MS / 1000, STALL_MS % 1000 * 1000};
    uint8_t ticket[16];
    offer *o = NULL;
    /* one deadline for the whole ticket (a byte every 0.9 s held a slot ~16 s) */
    if (tr__read_all(c->fd, ticket, sizeof ticket, tr__deadline(HELLO_MS)) == 0) {
        pthread_mutex_lock(&b->mu);
        int64_t now = tr__now_ns();
        for (offer **pp = &b->offers; *pp; pp = &(*pp)->next) {
            /* (the ticket is 128 random bits: comparing it is no oracle worth timing) */
            if (memcmp((*pp)->ticket, ticket, 16) == 0 && (*pp)->expires > now) {
                o = *pp;
                *pp = o->next;
                b->n_offers--;
                break;
            }
        }
        pthread_mutex_unlock(&b->mu);
    }
    if (!o) {
        TR_LOG_WARN_LIMITED("BULK-TICKET", "a connection without a live ticket was closed");
    } else if (setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &stall, sizeof stall) == 0) {
        for (size_t off = 0; off < o->len;) {
            size_t k = o->len - off < SEND_CHUNK ? o->len - off : SEND_CHUNK;
            ssize_t w = send(c->fd, o->data + off, k, MSG_NOSIGNAL);
            if (w > 0)
                off += (size_t)w;
            else if (!(w < 0 && errno == EINTR))
                break; /* the puller went, stalled, or we are stopping: it sees a short stream */
        }
    }
    if (o) offer_free(o);
    shutdown(c->fd, SHUT_RDWR); /* the puller sees the end now (the fd is closed by reap) */
    pthread_mutex_lock(&b->mu);
    c->done = 1;
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* Joins the finished connections' threads and closes their sockets. Caller holds mu; with
 * all set, waits for every one (destroy, once they were shut down). */
static void reap(tr__bulk *b, int all) {
    for (conn **pp = &b->conns; *pp;) {
        conn *c = *pp;
        if (c->done || all) {
            *pp = c->next;
            b->n_conns--;
            pthread_mutex_unlock(&b->mu);
            pthread_join(c->t, NULL);
            close(c->fd);
            free(c);
            pthread_mutex_lock(&b->mu);
            pp = &b->conns; /* (the list may have changed meanwhile) */
        } else {
            pp = &c->next;
        }
    }
}

static void *accept_main(void *arg) {
    tr__bulk *b = arg;
    for (;;) {
        int fd = accept4(b->ls, NULL, NULL, SOCK_CLOEXEC);
        pthread_mutex_lock(&b->mu);
        if (b->stop) {
            pthread_mutex_unlock(&b->mu);
            if (fd >= 0) close(fd);
            return NULL;
        }
        offer *gone = NULL;
        expire(b, tr__now_ns(), &gone);
        reap(b, 0);
        conn *c = fd >= 0 && b->n_conns < BULK_CONNS ? calloc(1, sizeof *c) : NULL;
        if (c) {
            c->b = b;
            c->fd = fd;
            if (pthread_create(&c->t, NULL, serve, c) == 0) {
                c->next = b->conns;
                b->conns = c;
                b->n_conns++;
            } else {
                free(c);
                c = NULL;
            }
        }
        pthread_mutex_unlock(&b->mu);
        free_all(gone);
        if (fd >= 0 && !c) {
            TR_LOG_WARN_LIMITED("BULK-BUSY", "too many bulk connections: one was closed");
            close(fd);
        } else if (fd < 0 && errno != EINTR && errno != ECONNABORTED) {
            struct timespec ts = {0, 10000000}; /* (out of descriptors: not a busy loop) */
            nanosleep(&ts, NULL);
        }
    }
}

int tr__bulk_create(const char *ip, tr__bulk **out) {
    *out = NULL;
    struct sockaddr_in a = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
        return tr__err(TR_EINVAL, "bulk: '%s' is not an IPv4 address", ip);
    tr__bulk *b = calloc(1, sizeof *b);
    if (!b) return tr__err(TR_ENOMEM, "bulk");
    socklen_t al = sizeof a;
    b->ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (b->ls < 0 || bind(b->ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(b->ls, 64) != 0 ||
        getsockname(b->ls, (struct sockaddr *)&a, &al) != 0) {
        int rc = tr__err_errno(errno, "bulk: listening on %s", ip);
        if (b->ls >= 0) close(b->ls);
        free(b);
        return rc;
    }
    b->port = ntohs(a.sin_port);
    pthread_mutex_init(&b->mu, NULL);
    if (pthread_create(&b->accept_t, NULL, accept_main, b) != 0) {
        close(b->ls);
        pthread_mutex_destroy(&b->mu);
        free(b);
        return tr__err(TR_ENOMEM, "bulk: no thread");
    }
    *out = b;
    return 0;
}

int tr__bulk_port(const tr__bulk *b) {
    return b->port;
}

void tr__bulk_sweep(tr__bulk *b) {
    if (!b) return;
    offer *gone = NULL;
    pthread_mutex_lock(&b->mu);
    expire(b, tr__now_ns(), &gone);
    pthread_mutex_unlock(&b->mu);
    free_all(gone);
}

int tr__bulk_offer(tr__bulk *b, const void *data, size_t len, void (*release)(void *), void *arg,
                   uint8_t ticket[16]) {
    offer *o = calloc(1, sizeof *o), *gone = NULL;
    int rc = 0;
    pthread_mutex_lock(&b->mu);
    int64_t now = tr__now_ns();
    expire(b, now, &gone);
    if (!o || b->n_offers >= MAX_OFFERS || b->stop) {
        rc = tr__err(TR_ENOMEM, "bulk: too many offers");
    } else if (!(rc = tr__random_bytes(o->ticket, 16))) {
        memcpy(ticket, o->ticket, 16);
        o->data = data;
        o->len = len;
        o->release = release;
        o->arg = arg;
        o->expires = now + OFFER_TTL_NS;
        o->next = b->offers;
        b->offers = o;
        b->n_offers++;
    }
    pthread_mutex_unlock(&b->mu);
    free_all(gone);
    if (rc) {
        free(o);
        release(arg);
    }
    return rc;
}

void tr__bulk_destroy(tr__bulk *b) {
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    b->stop = 1;
    shutdown(b->ls, SHUT_RDWR); /* (wakes accept) */
    for (conn *c = b->conns; c; c = c->next)
        if (!c->done) shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->accept_t, NULL);
    pthread_mutex_lock(&b->mu);
    reap(b, 1);
    offer *gone = b->offers;
    b->offers = NULL;
    pthread_mutex_unlock(&b->mu);
    free_all(gone);
    close(b->ls);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

/* ------------------------------------------------------------------ the puller */

static int connect_by(int fd, const struct sockaddr_in *a, int64_t deadline) {
    if (connect(fd, (const struct sockaddr *)a, sizeof *a) == 0) return 0;
    if (errno != EINPROGRESS) return -1;
    int left = tr__ms_left(deadline), err = 0;
    socklen_t el = sizeof err;
    struct pollfd p = {fd, POLLOUT, 0};
    if (poll(&p, 1, left < 0 || left > 10000 ? 10000 : left) != 1) {
        errno = ETIMEDOUT;
        return -1;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
        errno = err ? err : EIO;
        return -1;
    }
    return 0;
}

int tr__bulk_fetch(const char *host, int port, const uint8_t ticket[16], void *dst, size_t len,
                   int64_t deadline, int (*stop)(void *), void *arg) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (port <= 0 || port > 65535 || inet_pton(AF_INET, host, &a.sin_addr) != 1)
        return tr__err(TR_ECONNECT, "bulk: no address %s:%d", host, port);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return tr__err_errno(errno, "bulk: socket");
    int rc = 0;
    struct iovec iov = {(void *)ticket, 16};
    if (connect_by(fd, &a, deadline) != 0) {
        rc = tr__err(TR_ECONNECT, "bulk: connecting to %s:%d: %s", host, port, strerror(errno));
    } else if ((rc = tr__write_all(fd, &iov, 1, deadline))) {
        rc = tr__err(rc, "bulk: sending the ticket to %s:%d", host, port);
    }
    size_t got = 0;
    while (!rc && got < len) {
        ssize_t k = read(fd, (char *)dst + got, len - got);
        if (k > 0) {
            got += (size_t)k;
            continue;
        }
        if (k == 0) {
            rc = tr__err(TR_ECLOSED, "bulk: %s:%d ended the stream at %zu of %zu bytes", host, port,
                         got, len);
        } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            if (stop && stop(arg)) {
                rc = tr__err(TR_ECANCELED, "bulk: stopped");
                break;
            }
            int left = tr__ms_left(deadline);
            if (left == 0) {
                rc = tr__err(TR_ETIMEDOUT, "bulk: %zu of %zu bytes from %s:%d", got, len, host,
                             port);
                break;
            }
            struct pollfd p = {fd, POLLIN, 0};
            poll(&p, 1, left < 0 || left > 100 ? 100 : left);
        } else {
            rc = tr__err_errno(errno, "bulk: reading from %s:%d", host, port);
        }
    }
    close(fd);
    return rc;
}
