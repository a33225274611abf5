/* actor/handles.c - actors that end with their last handle: the creator's table of the
 * handles it made, and the watcher that ends an actor once its handle has no holder
 * (handles.h). */
#include "actor/handles.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/status.h"

/* How often the watcher looks at handles whose creator let go but others hold. */
#define HANDLES_WATCH_MS 50

typedef struct handle {
    tr_ref ref;
    tr_actor_id actor;
    int watched; /* the creator let go; others held it when it did */
    struct handle *next;
} handle;

struct tr__handles {
    tr__actors *actors;
    tr__objects *objects;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* the watcher's sleep; signalled to stop it */
    handle *all;
    int n; /* entries in all (read without mu as a hint: 0, nothing to look up) */
    int n_watched;
    int watcher_on, stopping;
    pthread_t watcher;
};

int tr__handles_create(tr__actors *actors, tr__objects *objects, tr__handles **out) {
    tr__handles *h = calloc(1, sizeof *h);
    if (!h) return tr__err(TR_ENOMEM, "actor handles");
    h->actors = actors;
    h->objects = objects;
    pthread_mutex_init(&h->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    *out = h;
    return 0;
}

void tr__handles_destroy(tr__handles *h) {
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    h->stopping = 1;
    int join = h->watcher_on;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (join) pthread_join(h->watcher, NULL);
    while (h->all) {
        handle *e = h->all;
        h->all = e->next;
        free(e);
    }
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

int tr__handle_parse(const void *data, size_t len, tr_actor_id *out) {
    size_t m = sizeof TR__HANDLE_MAGIC - 1;
    if (!data || len != TR__HANDLE_LEN || memcmp(data, TR__HANDLE_MAGIC, m) != 0)
        return tr__err(TR_EINVAL, "not an actor handle (tr_actor_handle)");
    memcpy(out->b, (const char *)data + m, 16);
    return 0;
}

/* Our handle of actor id, or NULL. Under mu. */
static handle *find_actor(tr__handles *h, const tr_actor_id *id) {
    handle *e = h->all;
    while (e && memcmp(e->actor.b, id->b, 16) != 0)
        e = e->next;
    return e;
}

int tr__handles_make(tr__handles *h, tr_actor_id id, tr_ref *out) {
    handle *e = calloc(1, sizeof *e);
    if (!e) return tr__err(TR_ENOMEM, "an actor handle");
    char bytes[TR__HANDLE_LEN];
    memcpy(bytes, TR__HANDLE_MAGIC, sizeof TR__HANDLE_MAGIC - 1);
    memcpy(bytes + sizeof TR__HANDLE_MAGIC - 1, id.b, 16);
    int rc = tr__objects_put(h->objects, bytes, sizeof bytes, &e->ref);
    if (rc) {
        free(e);
        return rc;
    }
    e->actor = id;
    pthread_mutex_lock(&h->mu);
    if (find_actor(h, &id)) {
        pthread_mutex_unlock(&h->mu);
        tr__objects_release(h->objects, e->ref);
        free(e);
        return tr__err(TR_EEXIST, "tr_actor_handle: the actor has its handle already");
    }
    e->next = h->all;
    h->all = e;
    __atomic_store_n(&h->n, h->n + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&h->mu);
    *out = e->ref;
    return 0;
}

/* Whether nobody but this process holds e's ref (a store that lost it: nobody). */
static int unheld(tr__handles *h, const handle *e) {
    size_t others = 0;
    return tr__objects_holders(h->objects, e->ref, &others) != 0 || others == 0;
}

/* Takes e off the list (under mu). */
static void unlink_handle(tr__handles *h, handle *e) {
    for (handle **pp = &h->all; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    __atomic_store_n(&h->n, h->n - 1, __ATOMIC_RELEASE);
    if (e->watched) h->n_watched--;
}

/* Ends e's actor, behind the calls this process sent it, and lets go of the handle. */
static void end_actor(tr__handles *h, handle *e) {
    tr_ref r;
    if (tr__actors_call(h->actors, e->actor, TR__END_METHOD, NULL, 0, NULL, 0, &r) == 0)
        tr__actors_release(h->actors, r); /* (its reply, if any, is dropped) */
    else
        TR_LOG_DEBUG("HANDLE-END", "ending an actor: %s", tr__last_error());
    tr__objects_release(h->objects, e->ref);
    free(e);
}

/* The watcher: started at the first handle that waits for its borrowers, then asleep
 * whenever none does, until tr__handles_destroy. */
static void *watch_main(void *arg) {
    tr__handles *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->stopping) {
        if (h->n_watched == 0) {
            pthread_cond_wait(&h->cv, &h->mu);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += HANDLES_WATCH_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&h->cv, &h->mu, &ts);
        for (;;) { /* one ended at a time: mu is dropped while it is ended */
            handle *gone = NULL;
            for (handle *e = h->all; e && !gone && !h->stopping; e = e->next)
                if (e->watched && unheld(h, e)) gone = e;
            if (!gone) break;
            unlink_handle(h, gone);
            pthread_mutex_unlock(&h->mu);
            end_actor(h, gone);
            pthread_mutex_lock(&h->mu);
        }
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

void tr__handles_retake(tr__handles *h, tr_ref ref) {
    if (!h || __atomic_load_n(&h->n, __ATOMIC_ACQUIRE) == 0) return;
    pthread_mutex_lock(&h->mu);
    for (handle *e = h->all; e; e = e->next)
        if (e->watched && memcmp(e->ref.b, ref.b, 16) == 0) {
            e->watched = 0; /* (ours again: its next release is ours to count) */
            h->n_watched--;
            break;
        }
    pthread_mutex_unlock(&h->mu);
}

int tr__handles_release(tr__handles *h, tr_ref ref) {
    if (!h || __atomic_load_n(&h->n, __ATOMIC_ACQUIRE) == 0) return 0;
    pthread_mutex_lock(&h->mu);
    handle *e = h->all;
    while (e && memcmp(e->ref.b, ref.b, 16) != 0)
        e = e->next;
    if (!e || e->watched) {
        pthread_mutex_unlock(&h->mu);
        return e ? tr__err(TR_ESTALE, "tr_ref_release: this actor handle was released") : 0;
    }
    if (unheld(h, e)) {
        unlink_handle(h, e);
        pthread_mutex_unlock(&h->mu);
        end_actor(h, e);
        return 1;
    }
    e->watched = 1; /* our hold stays until the borrowers let go */
    h->n_watched++;
    if (h->watcher_on) {
        pthread_cond_signal(&h->cv);
    } else if (!h->stopping) {
        int rc = pthread_create(&h->watcher, NULL, watch_main, h);
        h->watcher_on = rc == 0;
        if (rc)
            TR_LOG_WARN("HANDLE-WATCH", "no watcher thread (%s): the actor lives on", strerror(rc));
    }
    pthread_mutex_unlock(&h->mu);
    return 1;
}
