/* objectstore/store.c - segment creation, client attach and reclaim. */
#include "objectstore/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/log.h"
#include "core/nodeconn.h"
#include "core/status.h"
#include "core/wait.h"
#include "objectstore/segment.h"

struct tr__store {
    int fd;
    size_t size;
    tr__seg seg; /* our view: the geometry we formatted, never read back from the segment */
    uint8_t used[TR__SEG_MAX_CLIENTS];
    pthread_t prefault;
    int prefault_started;
    char spill_dir[512];
};

static void remove_spill_dir(tr__store *s) {
    if (!s->spill_dir[0]) return;
    DIR *d = opendir(s->spill_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char p[1100];
            snprintf(p, sizeof p, "%s/%s", s->spill_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(s->spill_dir);
}

/* Allocates the segment's pages up front, off the loop thread, so that no put pays for
 * first touch (~2.8 us a page here; see shared/anchors). */
static void *prefault_main(void *arg) {
    tr__store *s = arg;
    if (fallocate(s->fd, 0, 0, (off_t)s->size) != 0)
        TR_LOG_INFO("STORE-PREFAULT", "fallocate: %s (pages will be faulted on first use)",
                    strerror(errno));
    return NULL;
}

int tr__store_create(size_t capacity, const char *spill_root, tr__store **out) {
    *out = NULL;
    tr__store *s = calloc(1, sizeof *s);
    if (!s) return tr__err(TR_ENOMEM, "object store");
    int n = snprintf(s->spill_dir, sizeof s->spill_dir, "%s/spill-XXXXXX", spill_root);
    if (n < 0 || (size_t)n >= sizeof s->spill_dir - 64 || !mkdtemp(s->spill_dir)) {
        int e = errno;
        free(s);
        return tr__err_errno(e ? e : ENAMETOOLONG, "creating a spill directory in %s", spill_root);
    }
    s->size = tr__seg_size_for(capacity);
    s->fd = memfd_create("troupe-objects", MFD_CLOEXEC);
    if (s->fd < 0 || ftruncate(s->fd, (off_t)s->size) != 0) {
        int e = errno;
        if (s->fd >= 0) close(s->fd);
        remove_spill_dir(s);
        free(s);
        return tr__err_errno(e, "creating the object store segment (%zu bytes)", capacity);
    }
    void *base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    if (base == MAP_FAILED) {
        int e = errno;
        close(s->fd);
        remove_spill_dir(s);
        free(s);
        return tr__err_errno(e, "mapping the object store segment");
    }
    int rc = tr__seg_format(&s->seg, base, s->size);
    if (!rc) rc = tr__seg_set_spill_dir(&s->seg, s->spill_dir); /* (it fits: made to) */
    if (rc) {
        munmap(base, s->size);
        close(s->fd);
        remove_spill_dir(s);
        free(s);
        return rc;
    }
    s->prefault_started = pthread_create(&s->prefault, NULL, prefault_main, s) == 0;
    *out = s;
    return 0;
}

static void on_attach(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__store *s = ctx;
    (void)body;
    if (c->store_client < 0) {
        int idx = -1;
        for (int i = 0; i < TR__SEG_MAX_CLIENTS && idx < 0; i++)
            if (!s->used[i]) idx = i;
        if (idx < 0) {
            tr__server_reply_status(c, seq, TR_ENOMEM,
                                    "object store: too many attached processes (256)");
            return;
        }
        s->used[idx] = 1;
        tr__seg_lock(&s->seg); /* (a waiter reads pid and generation under the lock) */
        uint16_t gen = (uint16_t)(s->seg.h->client_gen[idx] + 1);
        s->seg.h->client_gen[idx] = gen ? gen : 1;
        s->seg.h->client_pid[idx] = (int32_t)c->pid;
        tr__seg_unlock(&s->seg);
        c->store_client = idx;
    }
    tr__buf b = TR__BUF_INIT;
    size_t m = tr__reply_open(&b, 0, NULL);
    tr__enc_str(&b, "size");
    tr__enc_uint(&b, s->size);
    tr__enc_str(&b, "client");
    tr__enc_int(&b, c->store_client);
    tr__enc_str(&b, "gen");
    tr__enc_uint(&b, s->seg.h->client_gen[c->store_client]);
    tr__enc_str(&b, "spill_dir"); /* ours: a client never takes it from the segment */
    tr__enc_str(&b, s->spill_dir);
    tr__enc_map_close(&b, m);
    if (tr__server_reply_fd(c, seq, &b, s->fd))
        tr__server_reply_status(c, seq, TR_EIO, tr__last_error());
    tr__buf_free(&b);
}

/* Drops every reference the closed client held, and objects it created but never sealed
 * (its promises too: their borrowers, finding no twin and the index no longer the
 * owner's, get TR_EOWNER_DIED). */
static void on_close(void *ctx, tr__conn *c) {
    tr__store *s = ctx;
    int idx = c->store_client;
    if (idx < 0 || idx >= TR__SEG_MAX_CLIENTS) return;
    tr__seg *g = &s->seg;
    size_t freed = 0, before;
    tr__seg_lock(g);
    /* Removal shifts later entries back into the hole (re-examine the same slot), and may
     * cascade to contained objects anywhere in the table: repeat until a pass frees
     * nothing. Clearing a bit twice is harmless. */
    do {
        before = freed;
        for (uint64_t i = 0; i < g->table_cap;) {
            tr__obj_entry *e = &g->table[i];
            if (e->state == TR__OBJ_EMPTY) {
                i++;
                continue;
            }
            tr__seg_hold(e, idx, 0);
            if (e->busy == idx) { /* it died spilling or restoring: undo */
                if (e->state == TR__OBJ_SPILLING) {
                    char path[700];
                    tr__seg_spill_path(g, e->id, path, sizeof path);
                    unlink(path); /* the partial file */
                    e->state = TR__OBJ_SEALED;
                }
                if (e->state == TR__OBJ_RESTORING) {
                    if (e->off) tr__seg_free(g, e->off); /* (which checks it) */
                    e->off = 0;
                    e->state = TR__OBJ_SPILLED;
                }
                e->busy = -1;
            }
            int orphan = e->state == TR__OBJ_CREATED && e->creator == idx;
            if (orphan || (e->state >= TR__OBJ_SEALED && tr__seg_unheld(e))) {
                tr__seg_remove(g, e);
                freed++;
                continue;
            }
            i++;
        }
    } while (freed != before);
    g->h->client_pid[idx] = 0;
    tr__seg_unlock(g);
    if (freed) tr__event_signal(&g->h->sealed);
    s->used[idx] = 0;
    c->store_client = -1;
    TR_LOG_DEBUG("STORE-RECLAIM", "client %d (pid %d): freed %zu objects", idx, (int)c->pid, freed);
}

void tr__store_mount(tr__store *s, tr__server *srv) {
    tr__server_on(srv, TR__MSG_STORE_ATTACH, on_attach, s);
    tr__server_on_close(srv, on_close, s);
}

void tr__store_status_json(tr__store *s, tr__buf *out) {
    tr__seg_hdr *h = s->seg.h;
    tr__seg_lock(&s->seg);
    char tmp[400];
    int n = snprintf(tmp, sizeof tmp,
                     "\"object_store\":{\"capacity\":%llu,\"bytes_used\":%llu,"
                     "\"bytes_objects\":%llu,\"objects\":%llu,\"bytes_spilled\":%llu}",
                     (unsigned long long)tr__seg_max_alloc(&s->seg),
                     (unsigned long long)h->bytes_used, (unsigned long long)h->bytes_objects,
                     (unsigned long long)h->n_objects, (unsigned long long)h->bytes_spilled);
    tr__seg_unlock(&s->seg);
    tr__buf_append(out, tmp, (size_t)n);
}

void tr__store_destroy(tr__store *s) {
    if (!s) return;
    if (s->prefault_started) pthread_join(s->prefault, NULL);
    munmap(s->seg.h, s->size);
    close(s->fd);
    remove_spill_dir(s);
    free(s);
}

void tr__store_counts(tr__store *s, uint64_t *objects, uint64_t *bytes) {
    tr__seg_lock(&s->seg);
    *objects = s->seg.h->n_objects;
    *bytes = s->seg.h->bytes_objects;
    tr__seg_unlock(&s->seg);
}

void tr__store_set_node_num(tr__store *s, uint32_t num) {
    __atomic_store_n(&s->seg.h->node_num, num & 0xffffff, __ATOMIC_RELEASE);
}

void tr__store_metrics_get(tr__store *s, tr__store_metrics *out) {
    memset(out, 0, sizeof *out);
    tr__seg *g = &s->seg;
    tr__seg_lock(g);
    tr__seg_hdr *h = g->h;
    out->capacity = tr__seg_max_alloc(g);
    out->bytes_used = h->bytes_used;
    out->bytes_objects = h->bytes_objects;
    out->objects = h->n_objects;
    out->bytes_spilled = h->bytes_spilled;
    out->spills = h->spills;
    out->restores = h->restores;
    for (uint64_t i = 0; i < g->table_cap; i++) {
        const tr__obj_entry *e = &g->table[i];
        if (e->state == TR__OBJ_EMPTY) continue;
        int viewed = 0;
        for (int k = 0; k < TR__SEG_MAX_CLIENTS / 64 && !viewed; k++)
            viewed = e->viewers[k] != 0;
        if (viewed) {
            out->pinned_objects++;
            out->bytes_pinned += e->size;
        }
    }
    tr__seg_unlock(g);
}

struct tr__seg_board *tr__store_board(tr__store *s, uint64_t key) {
    return tr__seg_board_entry(&s->seg, key, 0);
}

void tr__store_each(tr__store *s, void (*fn)(void *ctx, const tr__store_obj_view *o), void *ctx) {
    tr__seg *g = &s->seg;
    tr__seg_lock(g);
    for (uint64_t i = 0; i < g->table_cap; i++) {
        const tr__obj_entry *e = &g->table[i];
        if (e->state == TR__OBJ_EMPTY) continue;
        tr__store_obj_view v = {e->id,
                                e->size,
                                (int)e->state,
                                0,
                                0,
                                e->n_refs,
                                e->contained_by,
                                (e->flags & TR__ENT_PROMISE) != 0,
                                (e->flags & TR__ENT_ERROR) != 0};
        for (int k = 0; k < TR__SEG_MAX_CLIENTS / 64; k++) {
            v.holders += __builtin_popcountll(e->holders[k]);
            v.pinned |= e->viewers[k] != 0;
        }
        fn(ctx, &v);
    }
    tr__seg_unlock(g);
}
