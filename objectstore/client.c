/* objectstore/client.c - put/get/release straight into the shared segment. */
#include "objectstore/client.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/abi.h"
#include "core/clock.h"
#include "core/idmap.h"
#include "core/ids.h"
#include "core/status.h"
#include "core/wait.h"
#include "objectstore/segment.h"
#include "objectstore/store.h"

/* What this process holds of one object: the user's hold (tr_put, tr_get until
 * tr_ref_release) and pins (calls in flight that pass it, results being read). The
 * process's bit in the entry is set while either is. */
typedef struct local {
    uint8_t id[16];
    int user;
    uint32_t pins;
} local;

struct tr__objects {
    tr__seg seg;         /* our view of the read-write mapping: geometry copied at attach */
    const char *ro;      /* read-only mapping of the same segment, for views */
    const char *ro_data; /* its data region */
    size_t size;
    int fd;             /* the segment's memfd, for private (copy-on-write) mappings */
    int idx;            /* our client index */
    unsigned gen;       /* its attach generation (the owner bytes of our call refs) */
    pthread_mutex_t mu; /* guards `held`; taken before the segment lock */
    tr__idmap held;     /* id key -> local */
    tr__objects_puller puller;
    void *puller_ctx;
};

int tr__objects_attach(tr__nodeconn *node, tr__objects **out) {
    *out = NULL;
    tr__reply r;
    int fd = -1;
    int rc = tr__nodeconn_call_fd(node, TR__MSG_STORE_ATTACH, NULL, 10000, &r, &fd);
    if (rc) return rc;
    uint64_t size = 0, gen = 0;
    int64_t idx = -1;
    char *spill_dir = NULL; /* the node's word for it, not the segment's: see segment.h */
    void *rw = MAP_FAILED;
    rc = tr__get_uint(r.root, "size", &size);
    if (!rc) rc = tr__get_int(r.root, "client", &idx);
    if (!rc) rc = tr__get_uint(r.root, "gen", &gen);
    if (!rc) rc = tr__get_strdup(r.root, "spill_dir", &spill_dir);
    tr__reply_free(&r);
    if (!rc && (fd < 0 || idx < 0 || idx >= TR__SEG_MAX_CLIENTS))
        rc = tr__err(TR_EPROTO, "object store attach: no descriptor or bad client index");
    tr__objects *o = rc ? NULL : calloc(1, sizeof *o);
    if (!rc && !o) rc = tr__err(TR_ENOMEM, "object store client");
    if (rc) goto fail;
    o->size = size;
    o->idx = (int)idx;
    o->gen = (unsigned)(gen & 0xffff);
    pthread_mutex_init(&o->mu, NULL);
    rw = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    o->ro = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (rw == MAP_FAILED || o->ro == MAP_FAILED) {
        rc =
            tr__err_errno(errno, "mapping the object store (%llu bytes)", (unsigned long long)size);
        goto fail;
    }
    if ((rc = tr__seg_open(&o->seg, rw, size)) || (rc = tr__seg_set_spill_dir(&o->seg, spill_dir)))
        goto fail;
    o->ro_data = o->ro + o->seg.data_off;
    free(spill_dir);
    o->fd = fd; /* kept: tr__objects_map_private maps objects from it */
    *out = o;
    return 0;
fail:
    if (o) {
        if (rw != MAP_FAILED) munmap(rw, size);
        if (o->ro && o->ro != MAP_FAILED) munmap((void *)o->ro, size);
        free(o);
    }
    free(spill_dir);
    if (fd >= 0) close(fd);
    return rc;
}

void tr__objects_detach(tr__objects *o) {
    if (!o) return;
    /* Holds go with the connection: the node clears this process's bits. */
    size_t pos = 0;
    void *v;
    while (tr__idmap_next(&o->held, &pos, NULL, &v))
        free(v);
    tr__idmap_free(&o->held);
    pthread_mutex_destroy(&o->mu);
    munmap(o->seg.h, o->size);
    munmap((void *)o->ro, o->size);
    close(o->fd);
    free(o);
}

static void drop_bit(tr__objects *o, const uint8_t id[16], int client);

/* A new object id: b[0..7] random (its key), b[8..11] its maker - our store client index
 * and generation, as a call ref's owner (tr__ref_owner) - b[12..14] our node. */
static int new_id(const tr__objects *o, tr_ref *r) {
    const tr__seg *s = &o->seg;
    int rc;
    do
        if ((rc = tr__random_bytes(r->b, 8))) return rc;
    while (tr__id_key(r->b) == 0);
    r->b[8] = (uint8_t)o->idx;
    r->b[9] = (uint8_t)(o->idx >> 8);
    r->b[10] = (uint8_t)o->gen;
    r->b[11] = (uint8_t)(o->gen >> 8);
    uint32_t num = __atomic_load_n(&s->h->node_num, __ATOMIC_ACQUIRE);
    r->b[12] = (uint8_t)num;
    r->b[13] = (uint8_t)(num >> 8);
    r->b[14] = (uint8_t)(num >> 16);
    r->b[15] = TR__REF_OBJECT_BIT;
    return 0;
}

/* The store's name for a ref: a call ref's object twin, any other ref itself. */
static inline tr_ref store_ref(tr_ref r) {
    tr__seg_store_id(r.b, r.b);
    return r;
}

/* Why a ref names no entry, under the segment lock: a call result's twin, or an object,
 * whose owner (client index, generation: the caller, the maker) has left this node's store
 * is TR_EOWNER_DIED (Ray's OwnerDiedError); anything else was never made here or is freed.
 * Sets the error and returns its code. */
static int missing(tr__objects *o, const tr_ref *ref, const char *what) {
    tr_ref shown = *ref; /* a twin is named as its call ref, the form its user has */
    if ((shown.b[15] & 0xC0) == 0xC0) shown.b[15] &= (uint8_t)~TR__REF_OBJECT_BIT;
    char hex[33];
    tr__hex(shown.b, 16, hex);
    int call = tr__seg_is_call_id(shown.b);
    if (call || (ref->b[15] & (TR__REF_OBJECT_BIT | TR__REF_CALL_BIT)) == TR__REF_OBJECT_BIT) {
        int client;
        unsigned gen;
        tr__ref_owner(ref, &client, &gen);
        uint32_t num = tr__ref_node(ref), mine = tr__objects_node_num(o);
        tr__seg_hdr *h = o->seg.h;
        if (num == mine && client < TR__SEG_MAX_CLIENTS &&
            (TR__SEG_LOAD(h->client_pid[client]) == 0 ||
             TR__SEG_LOAD(h->client_gen[client]) != gen))
            return tr__err(TR_EOWNER_DIED,
                           "%s: ref %s: its owner (store client %d, generation %u) is gone, "
                           "and %s with it",
                           what, hex, client, gen,
                           call ? "the result it was waiting for" : "the object it made");
    }
    return tr__err(TR_ENOTFOUND, "%s: ref %s: no such object on node %u (never put, or freed)",
                   what, hex, (unsigned)tr__ref_node(ref));
}

/* Reads an entry's payload offset and size, once each (another process may change them
 * at any moment), into *off and *size; whether that payload lies inside the data region
 * (the segment may be corrupt). Only the copies are used after. */
static int entry_span(const tr__seg *s, const tr__obj_entry *e, uint64_t *off, uint64_t *size) {
    *off = TR__SEG_LOAD(e->off);
    *size = TR__SEG_LOAD(e->size);
    return *off >= TR__SEG_ALIGN && *off <= s->data_size && *size <= s->data_size - *off;
}

static int write_all_fd(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all_fd(int fd, char *p, size_t n) {
    while (n) {
        ssize_t r = read(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Writes the least recently used sealed object that no process is viewing to its spill
 * file and frees its block. Returns 0 if one was spilled, TR_ENOMEM if none could be. The
 * file is written without the lock; the entry is SPILLING meanwhile (gets wait). */
static int spill_one(tr__objects *o) {
    tr__seg *s = &o->seg;
    tr__seg_lock(s);
    tr__obj_entry *victim = NULL;
    uint64_t off = 0, size = 0;
    for (uint64_t i = 0; i < s->table_cap; i++) {
        tr__obj_entry *e = tr__seg_entry(s, i);
        uint64_t e_off, e_size;
        /* containers stay resident: their removal must read the refs they hold */
        if (e->state != TR__OBJ_SEALED || e->n_refs || tr__seg_viewed(e) ||
            !entry_span(s, e, &e_off, &e_size) || e_size == 0)
            continue;
        if (!victim || e->tick < victim->tick) {
            victim = e;
            off = e_off;
            size = e_size;
        }
    }
    if (!victim) {
        tr__seg_unlock(s);
        return TR_ENOMEM;
    }
    victim->state = TR__OBJ_SPILLING;
    victim->busy = o->idx;
    uint8_t id[16];
    memcpy(id, victim->id, 16);
    const char *src = (const char *)tr__seg_data(s) + off; /* (checked copies) */
    tr__seg_unlock(s);

    char path[700];
    tr__seg_spill_path(s, id, path, sizeof path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int ok = fd >= 0 && write_all_fd(fd, src, size) == 0;
    int e_no = errno;
    if (fd >= 0) close(fd);

    tr__seg_lock(s);
    tr__obj_entry *e = tr__seg_find(s, id);
    if (e && e->state == TR__OBJ_SPILLING && e->busy == o->idx) {
        if (ok) {
            tr__seg_free(s, e->off);
            e->off = 0;
            e->state = TR__OBJ_SPILLED;
            s->h->bytes_objects -= size;
            s->h->bytes_spilled += size;
            s->h->spills++;
        } else {
            e->state = TR__OBJ_SEALED;
            unlink(path);
        }
        e->busy = -1;
    } else if (!e) {
        unlink(path); /* freed while we wrote it */
    }
    tr__seg_unlock(s);
    tr__event_signal(&s->h->sealed);
    if (!ok) return tr__err_errno(e_no, "spilling an object to %s", path);
    return 0;
}

/* Allocates a block, spilling objects to disk while the store is full. */
/* On success returns with the segment lock held, so the caller records the block before
 * anyone (or our own death) could lose track of it. */
static int alloc_block(tr__objects *o, size_t len, uint64_t *off) {
    tr__seg *s = &o->seg;
    for (;;) {
        tr__seg_lock(s);
        int rc = tr__seg_alloc(s, len, off);
        if (rc == 0) return 0;
        unsigned long long used = s->h->bytes_used, cap = s->data_size;
        tr__seg_unlock(s);
        if (rc != TR_ENOMEM) return rc;
        rc = spill_one(o);
        if (rc == TR_ENOMEM)
            return tr__err(TR_ENOMEM,
                           "the object store is full: %zu bytes do not fit (%llu of %llu bytes "
                           "in use, all of it being viewed)",
                           len, used, cap);
        if (rc) return rc;
    }
}

/* Allocates and publishes a CREATED entry; *off is its payload offset. Entries move when
 * others are removed (backward shift), so callers find theirs again by id under the lock,
 * never keep a pointer across an unlock. */
static int reserve(tr__objects *o, size_t len, size_t n_refs, int keep_id, tr_ref *out,
                   uint64_t *payload) {
    tr__seg *s = &o->seg;
    size_t data_len = len;
    len = tr__seg_alloc_len(len, n_refs);
    if (len > tr__seg_max_alloc(s))
        return tr__err(TR_ENOMEM,
                       "an object of %zu bytes can never fit in the object store "
                       "(capacity %llu bytes; set object_store_bytes)",
                       len, (unsigned long long)tr__seg_max_alloc(s));
    int rc = keep_id ? 0 : new_id(o, out);
    if (rc) return rc;
    uint64_t off;
    rc = alloc_block(o, len, &off); /* locked on success */
    if (rc) return rc;
    tr__obj_entry *e = tr__seg_insert(s, out->b, &rc);
    if (!e) {
        tr__seg_free(s, off);
        tr__seg_unlock(s);
        return rc;
    }
    e->off = off;
    e->size = data_len;
    e->creator = (uint16_t)o->idx;
    tr__seg_hold(e, o->idx, 1);
    tr__seg_unlock(s);
    *payload = off;
    return 0;
}

/* Reads a SPILLED object back into a fresh block. Called with the segment lock held and
 * e SPILLED; returns with it released. */
static int restore(tr__objects *o, tr__obj_entry *e) {
    tr__seg *s = &o->seg;
    e->state = TR__OBJ_RESTORING;
    e->busy = o->idx;
    /* Hold it while restoring, so nobody can remove it (and free the block we are about
     * to fill) meanwhile. The caller takes its own hold anyway once it is sealed; on
     * failure we let go again unless we held it before. */
    int held_before = (e->holders[o->idx >> 6] >> (o->idx & 63)) & 1;
    tr__seg_bit(e->holders, o->idx, 1);
    uint8_t id[16];
    memcpy(id, e->id, 16);
    uint64_t size = e->size, off;
    tr__seg_unlock(s);
    int rc = alloc_block(o, size, &off); /* locked on success */
    if (rc) tr__seg_lock(s);
    e = tr__seg_find(s, id);
    if (rc || !e || e->state != TR__OBJ_RESTORING || e->busy != o->idx) {
        if (!rc) tr__seg_free(s, off);
        if (e && e->state == TR__OBJ_RESTORING && e->busy == o->idx) {
            e->state = TR__OBJ_SPILLED;
            e->busy = -1;
        }
        tr__seg_unlock(s);
        if (!held_before) drop_bit(o, id, o->idx);
        tr__event_signal(&s->h->sealed);
        return rc ? rc : 0; /* freed meanwhile: the caller looks again */
    }
    e->off = off; /* recorded now, so a removal (or our death) frees the block */
    tr__seg_unlock(s);
    char path[700];
    tr__seg_spill_path(s, id, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int ok = fd >= 0 && read_all_fd(fd, (char *)tr__seg_data(s) + off, size) == 0;
    int e_no = errno;
    if (fd >= 0) close(fd);
    tr__seg_lock(s);
    e = tr__seg_find(s, id);
    if (e && e->state == TR__OBJ_RESTORING && e->busy == o->idx) {
        if (ok) {
            e->state = TR__OBJ_SEALED;
            s->h->bytes_spilled -= size;
            s->h->bytes_objects += size;
            s->h->restores++;
            unlink(path);
        } else {
            tr__seg_free(s, e->off);
            e->off = 0;
            e->state = TR__OBJ_SPILLED;
        }
        e->busy = -1;
    }
    tr__seg_unlock(s);
    if (!ok && !held_before) drop_bit(o, id, o->idx);
    tr__event_signal(&s->h->sealed);
    return ok ? 0 : tr__err_errno(e_no, "restoring an object from %s", path);
}

static void seal_locked(tr__seg *s, tr__obj_entry *e) {
    e->state = TR__OBJ_SEALED;
    e->tick = ++s->h->tick;
    s->h->bytes_objects += e->size;
}

/* The local record of an object, created if `make`. Called with o->mu held. */
static local *find_local(tr__objects *o, const uint8_t id[16], int make) {
    uint64_t key = tr__id_key(id);
    local *l = tr__idmap_get(&o->held, key);
    if (l && memcmp(l->id, id, 16) == 0) return l;
    if (l || !make) return NULL; /* a 64-bit key collision: treat as not held */
    l = calloc(1, sizeof *l);
    if (!l) return NULL;
    memcpy(l->id, id, 16);
    if (tr__idmap_put(&o->held, key, l)) {
        free(l);
        return NULL;
    }
    return l;
}

/* Clears `client`'s bit on an object and removes the object if nothing keeps it. */
static void drop_bit(tr__objects *o, const uint8_t id[16], int client) {
    tr__seg *s = &o->seg;
    int freed = 0;
    tr__seg_lock(s);
    tr__obj_entry *e = tr__seg_find(s, id);
    if (e && client >= 0 && client < TR__SEG_MAX_CLIENTS) {
        tr__seg_hold(e, client, 0);
        if (tr__seg_unheld(e)) {
            tr__seg_remove(s, e);
            freed = 1;
        }
    }
    tr__seg_unlock(s);
    if (freed) tr__event_signal(&s->h->sealed);
}

/* Drops the local record if nothing holds it any more, clearing our bit and freeing the
 * object when no process holds it. Called with o->mu held. */
static void settle(tr__objects *o, local *l) {
    if (l->user || l->pins) return;
    drop_bit(o, l->id, o->idx);
    tr__idmap_del(&o->held, tr__id_key(l->id));
    free(l);
}

static int record_user_hold(tr__objects *o, const tr_ref *r) {
    pthread_mutex_lock(&o->mu);
    local *l = find_local(o, r->b, 1);
    if (l)
        l->user = 1;
    else
        drop_bit(o, r->b, o->idx); /* no record, no bit: nothing would ever clear it */
    pthread_mutex_unlock(&o->mu);
    return l ? 0 : tr__err(TR_ENOMEM, "object hold");
}

int tr__objects_put(tr__objects *o, const void *data, size_t len, tr_ref *out) {
    if ((!data && len) || !out) return tr__err(TR_EINVAL, "tr_put: NULL argument");
    uint64_t off;
    int rc = reserve(o, len, 0, 0, out, &off);
    if (rc) return rc;
    /* The copy runs without the lock: the entry is CREATED, invisible to gets. */
    if (len) memcpy((char *)tr__seg_data(&o->seg) + off, data, len);
    tr__seg_lock(&o->seg);
    tr__obj_entry *e = tr__seg_find(&o->seg, out->b);
    if (e) seal_locked(&o->seg, e);
    tr__seg_unlock(&o->seg);
    tr__event_signal(&o->seg.h->sealed);
    return record_user_hold(o, out);
}

int tr__objects_put_refs(tr__objects *o, const void *data, size_t len, const tr_ref *refs,
                         size_t n_refs, tr_ref *out) {
    if ((!data && len) || !out || (!refs && n_refs) || n_refs > (1u << 20))
        return tr__err(TR_EINVAL, "tr_put_refs: bad arguments");
    for (size_t i = 0; i < n_refs; i++)
        if (!tr__ref_is_object(&refs[i]) && !tr__ref_is_call(&refs[i]))
            return tr__err(TR_EINVAL, "tr_put_refs: ref %zu is neither an object nor a call ref",
                           i);
    uint64_t off;
    int rc = reserve(o, len, n_refs, 0, out, &off);
    if (rc) return rc;
    tr__seg *s = &o->seg;
    if (len) memcpy((char *)tr__seg_data(s) + off, data, len);
    tr__seg_lock(s);
    tr__obj_entry *e = tr__seg_find(s, out->b);
    if (!e) {
        tr__seg_unlock(s);
        return tr__err(TR_ENOTFOUND, "tr_put_refs: the new object vanished");
    }
    uint8_t *dst = tr__seg_refs_of(s, off, len); /* our block: never the entry's word */
    size_t i = 0;
    int rc_missing = 0;
    for (; i < n_refs; i++) {
        tr_ref sid = store_ref(refs[i]); /* a call ref: its twin (exported by its owner) */
        tr__obj_entry *c = tr__seg_find(s, sid.b);
        if (!c) {
            rc_missing = missing(o, &refs[i], "tr_put_refs: a contained ref");
            break;
        }
        c->contained_by++;
        memcpy(dst + 16 * i, refs[i].b, 16);
    }
    if (i < n_refs) { /* undo: a contained object does not exist */
        for (size_t k = 0; k < i; k++) {
            tr_ref sid = store_ref(refs[k]);
            tr__obj_entry *c = tr__seg_find(s, sid.b);
            if (c) c->contained_by--; /* (gone only if another process broke the rules) */
        }
        tr__seg_remove(s, e);
        tr__seg_unlock(s);
        return rc_missing;
    }
    e->n_refs = (uint32_t)n_refs;
    seal_locked(s, e);
    tr__seg_unlock(s);
    tr__event_signal(&s->h->sealed);
    return record_user_hold(o, out);
}

int tr__objects_refs(tr__objects *o, tr_ref ref, tr_ref *out, size_t cap, size_t *n) {
    if ((!out && cap) || !n) return tr__err(TR_EINVAL, "tr_object_refs: NULL argument");
    ref = store_ref(ref);
    tr__seg *s = &o->seg;
    tr__seg_lock(s);
    tr__obj_entry *e = tr__seg_find(s, ref.b);
    int rc = 0;
    uint64_t off = 0, size = 0;
    uint32_t n_refs = e ? TR__SEG_LOAD(e->n_refs) : 0;
    if (!e || e->state < TR__OBJ_SEALED) {
        rc = tr__err(TR_ENOTFOUND, "tr_object_refs: no such sealed object");
    } else if (n_refs && (!entry_span(s, e, &off, &size) ||
                          tr__seg_alloc_len(size, n_refs) > s->data_size - off)) {
        rc = tr__err(TR_EPROTO, "object store entry is corrupt");
    } else {
        *n = n_refs;
        const uint8_t *src = n_refs ? tr__seg_refs_of(s, off, size) : NULL;
        for (size_t i = 0; i < cap && i < n_refs; i++)
            memcpy(out[i].b, src + 16 * i, 16);
    }
    tr__seg_unlock(s);
    return rc;
}

int tr__objects_create(tr__objects *o, size_t len, tr_ref *out, void **buf) {
    if (!out || !buf) return tr__err(TR_EINVAL, "tr_object_create: NULL argument");
    uint64_t off;
    int rc = reserve(o, len, 0, 0, out, &off);
    if (rc) return rc;
    *buf = (char *)tr__seg_data(&o->seg) + off;
    return record_user_hold(o, out);
}

int tr__objects_seal(tr__objects *o, tr_ref ref) {
    tr__seg *s = &o->seg;
    tr__seg_lock(s);
    tr__obj_entry *e = tr__seg_find(s, ref.b);
    int rc = 0;
    if (!e || e->creator != o->idx)
        rc =
            tr__err(TR_ENOTFOUND, "tr_object_seal: no object created by this process has that ref");
    else if (e->state >= TR__OBJ_SEALED)
        rc = tr__err(TR_ESTATE, "tr_object_seal: the object is sealed already");
    else
        seal_locked(s, e);
    tr__seg_unlock(s);
    if (!rc) tr__event_signal(&s->h->sealed);
    return rc;
}

int tr__objects_create_as(tr__objects *o, tr_ref ref, size_t len, void **buf) {
    if (!buf || !tr__ref_is_object(&ref) || tr__id_key(ref.b) == 0)
        return tr__err(TR_EINVAL, "object create: bad arguments");
    tr__seg_lock(&o->seg);
    int there = tr__seg_find(&o->seg, ref.b) != NULL;
    tr__seg_unlock(&o->seg);
    if (there) return tr__err(TR_EEXIST, "the object is in the store already");
    uint64_t off;
    int rc = reserve(o, len, 0, 1, &ref, &off); /* (EEXIST if another made it meanwhile) */
    if (rc) return rc;
    *buf = (char *)tr__seg_data(&o->seg) + off;
    /* a pin of our record keeps our hold bit (one per process) through whatever other
     * threads here do with the object meanwhile; the lookup after the pull drops it */
    pthread_mutex_lock(&o->mu);
    local *l = find_local(o, ref.b, 1);
    if (l) l->pins++;
    pthread_mutex_unlock(&o->mu);
    if (!l) {
        tr__objects_abort(o, ref);
        return tr__err(TR_ENOMEM, "object record");
    }
    return 0;
}

void tr__objects_abort(tr__objects *o, tr_ref ref) {
    tr__seg *s = &o->seg;
    tr__seg_lock(s);
    tr__obj_entry *e = tr__seg_find(s, ref.b);
    int gone = e && e->state == TR__OBJ_CREATED && e->creator == o->idx;
    if (gone) tr__seg_remove(s, e);
    tr__seg_unlock(s);
    if (gone) tr__event_signal(&s->h->sealed);
    tr__objects_unpin(o, ref); /* create_as's pin, if it made one */
}

uint32_t tr__objects_node_num(const tr__objects *o) {
    return __atomic_load_n(&o->seg.h->node_num, __ATOMIC_ACQUIRE);
}

void tr__objects_set_puller(tr__objects *o, tr__objects_puller fn, void *ctx) {
    o->puller = fn;
    o->puller_ctx = ctx;
}

/* Whether a lookup that found nothing should pull ref from the node that made it. */
static int pullable(const tr__objects *o, const tr_ref *ref) {
    uint32_t num = tr__ref_node(ref), mine = tr__objects_node_num(o);
    return o->puller && num != 0 && mine != 0 && num != mine; /* (no cluster, no pull) */
}

int tr__objects_ready(tr__objects *o, tr_ref ref) {
    int twin = tr__ref_is_call(&ref);
    ref = store_ref(ref);
    tr__seg_lock(&o->seg);
    tr__obj_entry *e = tr__seg_find(&o->seg, ref.b);
    int r = e && e->state >= TR__OBJ_SEALED; /* spilled objects are sealed too */
    /* a result's twin that is not here, of this node: its owner died or it is freed */
    if (!e && twin && tr__ref_node(&ref) == tr__objects_node_num(o)) r = missing(o, &ref, "wait");
    tr__seg_unlock(&o->seg);
    return r;
}

int tr__objects_exists(tr__objects *o, tr_ref ref) {
    ref = store_ref(ref);
    tr__seg_lock(&o->seg);
    int r = tr__seg_find(&o->seg, ref.b) != NULL;
    tr__seg_unlock(&o->seg);
    return r;
}

int tr__objects_holders(tr__objects *o, tr_ref ref, size_t *others) {
    if (!others) return tr__err(TR_EINVAL, "tr_object_holders: NULL argument");
    *others = 0;
    ref = store_ref(ref);
    pthread_mutex_lock(&o->mu);
    local *l = find_local(o, ref.b, 0);
    size_t pins = l ? l->pins : 0; /* (our calls in flight that pass it hold it too) */
    tr__seg_lock(&o->seg);
    tr__obj_entry *e = tr__seg_find(&o->seg, ref.b);
    int rc = 0;
    if (!e) {
        rc = tr__err(TR_ENOTFOUND, "tr_object_holders: no such object in this node's store");
    } else {
        size_t n = e->contained_by + pins;
        for (int i = 0; i < TR__SEG_MAX_CLIENTS / 64; i++)
            n += (size_t)__builtin_popcountll(e->holders[i]);
        uint64_t mine = e->holders[o->idx >> 6] >> (o->idx & 63) & 1;
        *others = n - (size_t)mine;
    }
    tr__seg_unlock(&o->seg);
    pthread_mutex_unlock(&o->mu);
    return rc;
}

void tr__objects_wait_change(tr__objects *o, int64_t deadline) {
    tr__event_wait(&o->seg.h->sealed, tr__event_seq(&o->seg.h->sealed), deadline);
}

/* Waits for the object to be sealed (restoring it if spilled), sets our hold and view
 * bits and gives the view. Called with o->mu held and our record of the object pinned
 * (view_pinned): no other thread's release can drop our hold then, so o->mu is dropped
 * while waiting for a seal and while a restore reads the disk - other threads' object
 * operations (and the actor calls that pin and unpin) go on meanwhile. */
static int view_locked(tr__objects *o, const tr_ref *ref, int64_t deadline, int timeout_ms,
                       const void **data, size_t *len, int *err_entry) {
    tr__seg *s = &o->seg;
    for (;;) {
        uint32_t seen = tr__event_seq(&s->h->sealed);
        tr__seg_lock(s);
        tr__obj_entry *e = tr__seg_find(s, ref->b);
        if (!e) {
            int rc = missing(o, ref, "get");
            tr__seg_unlock(s);
            return rc;
        }
        if (e->state == TR__OBJ_SEALED) {
            uint64_t off = 0, size = 0;
            int err = (TR__SEG_LOAD(e->flags) & TR__ENT_ERROR) ? TR__SEG_LOAD(e->err) : 0;
            int bare = err && TR__SEG_LOAD(e->off) == 0; /* an error with no message block */
            if (!bare && !entry_span(s, e, &off, &size)) {
                tr__seg_unlock(s);
                return tr__err(TR_EPROTO, "object store entry is corrupt");
            }
            tr__seg_hold(e, o->idx, 1);
            if (!bare) tr__seg_bit(e->viewers, o->idx, 1); /* pinned: never spilled */
            e->tick = ++s->h->tick;
            tr__seg_unlock(s);
            if (!err) {
                if (data) *data = o->ro_data + off;
                if (len) *len = size;
                return 0;
            }
            /* The call it stands for failed: its code; its message (NUL-terminated in the
             * entry, as a call's failure is in *data), held like a value. */
            if (err_entry) *err_entry = 1;
            if (err >= 0 || err <= -1000) err = TR_EPROTO;
            const char *msg = bare ? tr__strerror(err) : o->ro_data + off;
            size_t n = bare ? strlen(msg) : size ? size - 1 : 0;
            if (data) *data = bare ? NULL : msg;
            if (len) *len = n;
            return tr__err(err, "%.*s", (int)(n > 4000 ? 4000 : n), msg);
        }
        if (e->state == TR__OBJ_SPILLED) {
            pthread_mutex_unlock(&o->mu); /* the segment lock stays ours until restore */
            int rc = restore(o, e);       /* releases the segment lock */
            pthread_mutex_lock(&o->mu);
            if (rc) return rc;
            continue;
        }
        tr__seg_unlock(s);
        if (tr__now_ns() >= deadline)
            return tr__err(TR_ETIMEDOUT, "the object was not sealed within %d ms", timeout_ms);
        pthread_mutex_unlock(&o->mu);
        tr__event_wait(&s->h->sealed, seen, deadline);
        pthread_mutex_lock(&o->mu);
    }
}

/* view_locked with our record of the object (made if need be) pinned for the while; on
 * return *lp is that record, still carrying the extra pin for the caller to keep or drop
 * (unpin_local). Called with o->mu held. */
static int view_pinned(tr__objects *o, const tr_ref *ref, int timeout_ms, const void **data,
                       size_t *len, local **lp, int *err_entry) {
    local *l = find_local(o, ref->b, 1);
    *lp = l;
    if (!l) return tr__err(TR_ENOMEM, "object record");
    l->pins++;
    return view_locked(o, ref, tr__deadline(timeout_ms), timeout_ms, data, len, err_entry);
}

/* Drops a pin of our record; the record (and our hold) goes once nothing keeps it. */
static void unpin_local(tr__objects *o, local *l) {
    if (!l) return;
    l->pins--;
    settle(o, l);
}

/* After a lookup that followed a pull: the pull's pin (create_as) goes, if it made one. */
static int after_pull(tr__objects *o, tr_ref ref, int made, int rc) {
    if (made) tr__objects_unpin(o, ref);
    return rc;
}

int tr__objects_get(tr__objects *o, tr_ref ref, int timeout_ms, const void **data, size_t *len) {
    ref = store_ref(ref);
    int64_t deadline = tr__deadline(timeout_ms);
    for (int pulled = 0, made = 0;; pulled = 1) {
        pthread_mutex_lock(&o->mu);
        local *l;
        int err_entry = 0; /* a failed call's twin: held as a value is, until released */
        int rc = view_pinned(o, &ref, tr__ms_left(deadline), data, len, &l, &err_entry);
        if (!rc || err_entry) l->user = 1;
        unpin_local(o, l);
        pthread_mutex_unlock(&o->mu);
        if (rc != TR_ENOTFOUND || pulled || !pullable(o, &ref)) return after_pull(o, ref, made, rc);
        if ((rc = o->puller(o->puller_ctx, ref, tr__ms_left(deadline))) < 0) return rc;
        made = rc == 1;
    }
}

int tr__objects_release(tr__objects *o, tr_ref ref) {
    ref = store_ref(ref);
    pthread_mutex_lock(&o->mu);
    local *l = find_local(o, ref.b, 0);
    int rc = 0;
    if (!l || !l->user) {
        rc = tr__err(TR_ESTALE, "tr_ref_release: this process does not hold that object");
    } else {
        l->user = 0;
        settle(o, l);
    }
    pthread_mutex_unlock(&o->mu);
    return rc;
}

int tr__objects_pin(tr__objects *o, tr_ref ref, int timeout_ms, const void **data, size_t *len) {
    ref = store_ref(ref);
    pthread_mutex_lock(&o->mu);
    int rc;
    if (data || len) { /* with a view: the pin view_pinned takes is the pin */
        int64_t deadline = tr__deadline(timeout_ms);
        for (int pulled = 0, made = 0;; pulled = 1) {
            local *l;
            rc = view_pinned(o, &ref, tr__ms_left(deadline), data, len, &l, NULL);
            if (rc) unpin_local(o, l);
            pthread_mutex_unlock(&o->mu);
            if (rc != TR_ENOTFOUND || pulled || !pullable(o, &ref))
                return after_pull(o, ref, made, rc);
            if ((rc = o->puller(o->puller_ctx, ref, tr__ms_left(deadline))) < 0) return rc;
            made = rc == 1;
            pthread_mutex_lock(&o->mu);
        }
    }
    /* without a view: the object need not be sealed yet */
    tr__seg_lock(&o->seg);
    tr__obj_entry *e = tr__seg_find(&o->seg, ref.b);
    if (e) tr__seg_hold(e, o->idx, 1);
    rc = e ? 0 : missing(o, &ref, "pin");
    tr__seg_unlock(&o->seg);
    if (rc == 0) {
        local *l = find_local(o, ref.b, 1);
        if (l) {
            l->pins++;
        } else {
            drop_bit(o, ref.b, o->idx);
            rc = tr__err(TR_ENOMEM, "object pin");
        }
    }
    pthread_mutex_unlock(&o->mu);
    return rc;
}

void tr__objects_unpin(tr__objects *o, tr_ref ref) {
    ref = store_ref(ref);
    pthread_mutex_lock(&o->mu);
    local *l = find_local(o, ref.b, 0);
    if (l && l->pins) {
        l->pins--;
        settle(o, l);
    }
    pthread_mutex_unlock(&o->mu);
}

int tr__objects_stats(tr__objects *o, tr_store_stats *out) {
    if (!out) return tr__err(TR_EINVAL, "tr_object_stats: out is NULL");
    tr_store_stats st = TR_STORE_STATS_INIT;
    tr__seg *s = &o->seg;
    tr__seg_lock(s);
    st.capacity = tr__seg_max_alloc(s);
    st.bytes_used = s->h->bytes_used;
    st.bytes_objects = s->h->bytes_objects;
    st.n_objects = s->h->n_objects;
    st.bytes_spilled = s->h->bytes_spilled;
    st.spills = s->h->spills;
    st.restores = s->h->restores;
    tr__seg_unlock(s);
    return tr__struct_out(out, &st, sizeof st, TR__SIZE_UPTO(tr_store_stats, restores),
                          "tr_object_stats");
}

int tr__objects_client(const tr__objects *o) {
    return o->idx;
}

int tr__objects_transfer(tr__objects *o, tr_ref ref, int client, pid_t pid) {
    if (client < 0 || client >= TR__SEG_MAX_CLIENTS || client == o->idx || pid <= 0)
        return tr__err(TR_EINVAL, "object transfer: bad client %d (pid %d)", client, (int)pid);
    pthread_mutex_lock(&o->mu);
    local *l = find_local(o, ref.b, 0);
    int rc = 0;
    if (!l) {
        rc = tr__err(TR_ENOTFOUND, "object transfer: this process does not hold the object");
    } else if (l->pins) {
        rc = tr__err(TR_ESTATE, "object transfer: the object is in use here (pinned)");
    } else {
        /* Both bits change under one segment lock: at no moment is the object unheld. The
         * index must still be that process's: once a client has gone, the node has
         * cleared its holds (and its pid, under this lock), and a bit set now would never
         * be cleared. */
        tr__seg_lock(&o->seg);
        tr__obj_entry *e = tr__seg_find(&o->seg, ref.b);
        int attached = o->seg.h->client_pid[client] == (int32_t)pid;
        if (e && attached) {
            tr__seg_bit(e->holders, client, 1);
            tr__seg_hold(e, o->idx, 0);
        }
        tr__seg_unlock(&o->seg);
        if (!e)
            rc = tr__err(TR_ENOTFOUND, "object transfer: no such object");
        else if (!attached)
            rc = tr__err(TR_ESTALE, "object transfer: pid %d is not attached as client %d",
                         (int)pid, client);
        if (!rc) {
            tr__idmap_del(&o->held, tr__id_key(l->id));
            free(l);
        }
    }
    pthread_mutex_unlock(&o->mu);
    return rc;
}

int tr__objects_adopt(tr__objects *o, tr_ref ref) {
    pthread_mutex_lock(&o->mu);
    tr__seg_lock(&o->seg);
    tr__obj_entry *e = tr__seg_find(&o->seg, ref.b);
    int ours = e && ((e->holders[o->idx >> 6] >> (o->idx & 63)) & 1);
    tr__seg_unlock(&o->seg);
    int rc = 0;
    if (!ours) {
        rc = tr__err(TR_ENOTFOUND, "the result object was not handed to this process");
    } else {
        local *l = find_local(o, ref.b, 1);
        if (l) {
            l->pins++;
        } else {
            drop_bit(o, ref.b, o->idx); /* no record, no bit: nothing would ever clear it */
            rc = tr__err(TR_ENOMEM, "object adopt");
        }
    }
    pthread_mutex_unlock(&o->mu);
    return rc;
}

int tr__objects_view(tr__objects *o, tr_ref ref, int timeout_ms, const void **data, size_t *len) {
    ref = store_ref(ref);
    pthread_mutex_lock(&o->mu);
    local *l = NULL;
    int rc = find_local(o, ref.b, 0)
                 ? view_pinned(o, &ref, timeout_ms, data, len, &l, NULL)
                 : tr__err(TR_ESTALE, "object view: this process does not hold the object");
    unpin_local(o, l);
    pthread_mutex_unlock(&o->mu);
    return rc;
}

/* ------------------------------------------------------------------ ownership
 * docs/OWNERSHIP.md: a call result that escapes its owner becomes its object twin here. */

unsigned tr__objects_gen(const tr__objects *o) {
    return o->gen;
}

/* Our record of id with one more pin (made if need be). Called with o->mu held; on
 * failure our bit is dropped (no record, no bit: nothing would ever clear it). */
static int pin_record(tr__objects *o, const uint8_t id[16]) {
    local *l = find_local(o, id, 1);
    if (l) {
        l->pins++;
        return 0;
    }
    drop_bit(o, id, o->idx);
    return tr__err(TR_ENOMEM, "object record");
}

int tr__objects_promise(tr__objects *o, tr_ref twin) {
    twin = store_ref(twin);
    tr__seg *s = &o->seg;
    int rc;
    pthread_mutex_lock(&o->mu);
    tr__seg_lock(s);
    tr__obj_entry *e = tr__seg_insert(s, twin.b, &rc);
    if (e) { /* no block: off 0, size 0 (a removal frees nothing) */
        e->creator = (uint16_t)o->idx;
        e->flags = TR__ENT_PROMISE;
        tr__seg_hold(e, o->idx, 1);
    }
    tr__seg_unlock(s);
    if (e) rc = pin_record(o, twin.b);
    pthread_mutex_unlock(&o->mu);
    return rc;
}

int tr__objects_fulfill(tr__objects *o, tr_ref twin, int code, const void *data, size_t len) {
    twin = store_ref(twin);
    tr__seg *s = &o->seg;
    if (len > tr__seg_max_alloc(s))
        return tr__err(TR_ENOMEM, "a result of %zu bytes can never fit in the object store", len);
    uint64_t off;
    int rc = alloc_block(o, len, &off); /* locked on success */
    if (rc) return rc;
    tr__obj_entry *e = tr__seg_find(s, twin.b);
    if (!e || e->state != TR__OBJ_CREATED || !(e->flags & TR__ENT_PROMISE) ||
        e->creator != o->idx || e->off) {
        tr__seg_free(s, off);
        tr__seg_unlock(s);
        return tr__err(TR_ESTATE, "fulfil: no promise of this process under that ref");
    }
    e->off = off; /* recorded now: a removal (or our death) frees the block */
    e->size = len;
    tr__seg_unlock(s);
    if (len) memcpy((char *)tr__seg_data(s) + off, data, len); /* CREATED: nobody reads it */
    tr__seg_lock(s);
    if ((e = tr__seg_find(s, twin.b)) && e->state == TR__OBJ_CREATED) {
        e->flags = code ? TR__ENT_ERROR : 0;
        e->err = code;
        seal_locked(s, e);
    }
    tr__seg_unlock(s);
    tr__event_signal(&s->h->sealed);
    return 0;
}

int tr__objects_fail_bare(tr__objects *o, tr_ref twin, int code) {
    twin = store_ref(twin);
    tr__seg *s = &o->seg;
    tr__seg_lock(s);
    tr__obj_entry *e = tr__seg_find(s, twin.b);
    int ok = e && e->state == TR__OBJ_CREATED && (e->flags & TR__ENT_PROMISE) &&
             e->creator == o->idx && !e->off;
    if (ok) {
        e->flags = TR__ENT_ERROR;
        e->err = code ? code : TR_EINTERNAL;
        e->size = 0;
        e->state = TR__OBJ_SEALED;
        e->tick = ++s->h->tick;
    }
    tr__seg_unlock(s);
    if (ok) tr__event_signal(&s->h->sealed);
    return ok ? 0 : tr__err(TR_ESTATE, "fail: no promise of this process under that ref");
}

int tr__objects_writable(tr__objects *o, tr_ref ref, void **data, size_t *len) {
    if (!data || !len) return tr__err(TR_EINVAL, "object writable: NULL argument");
    ref = store_ref(ref);
    tr__seg *s = &o->seg;
    pthread_mutex_lock(&o->mu);
    local *l = find_local(o, ref.b, 0);
    if (!l || !l->pins) {
        pthread_mutex_unlock(&o->mu);
        return tr__err(TR_ESTALE, "object writable: this process does not pin the object");
    }
    tr__seg_lock(s);
    tr__obj_entry *e = tr__seg_find(s, ref.b);
    uint64_t off = 0, size = 0;
    int others = !e || e->contained_by != 0 || e->creator != o->idx || e->state != TR__OBJ_SEALED ||
                 (TR__SEG_LOAD(e->flags) & TR__ENT_ERROR) || !entry_span(s, e, &off, &size);
    for (int i = 0; i < TR__SEG_MAX_CLIENTS / 64 && !others; i++) {
        uint64_t mine = i == (o->idx >> 6) ? 1ull << (o->idx & 63) : 0;
        others = (e->holders[i] & ~mine) != 0 || (e->viewers[i] & ~mine) != 0;
    }
    tr__seg_unlock(s);
    pthread_mutex_unlock(&o->mu);
    if (others) return tr__err(TR_ESTATE, "object writable: another may see the object");
    *data = (char *)tr__seg_data(s) + off;
    *len = (size_t)size;
    return 0;
}

int tr__objects_move(tr__objects *o, tr_ref from, tr_ref twin, int timeout_ms) {
    twin = store_ref(twin);
    tr__seg *s = &o->seg;
    int64_t deadline = tr__deadline(timeout_ms);
    pthread_mutex_lock(&o->mu);
    local *lf = find_local(o, from.b, 0);
    if (!lf || !tr__ref_is_object(&from)) {
        pthread_mutex_unlock(&o->mu);
        return tr__err(TR_ESTALE, "move: this process does not hold the object");
    }
    int rc = 0;
    for (;;) {
        uint32_t seen = tr__event_seq(&s->h->sealed);
        tr__seg_lock(s);
        tr__obj_entry *f = tr__seg_find(s, from.b);
        tr__obj_entry *t = tr__seg_find(s, twin.b);
        uint32_t st = f ? f->state : 0;
        if (!f || (t && (t->state != TR__OBJ_CREATED || !(t->flags & TR__ENT_PROMISE) ||
                         t->creator != o->idx || t->off))) {
            tr__seg_unlock(s);
            rc = tr__err(TR_ESTATE, "move: no object, or the twin is not our promise");
            break;
        }
        if (st == TR__OBJ_SPILLING || st == TR__OBJ_RESTORING || st == TR__OBJ_CREATED) {
            tr__seg_unlock(s); /* another process is moving its bytes: a moment */
            if (tr__now_ns() >= deadline) {
                rc = tr__err(TR_ETIMEDOUT, "move: the object stayed busy %d ms", timeout_ms);
                break;
            }
            pthread_mutex_unlock(&o->mu);
            tr__event_wait(&s->h->sealed, seen, deadline);
            pthread_mutex_lock(&o->mu);
            if (!(lf = find_local(o, from.b, 0))) {
                rc = tr__err(TR_ESTALE, "move: released meanwhile");
                break;
            }
            continue;
        }
        /* Only a result nobody else knows by its old name moves: our one pin (the
         * adopted result's), no other process's bit, no container. Else it is copied. */
        int others = f->contained_by != 0;
        for (int i = 0; i < TR__SEG_MAX_CLIENTS / 64; i++) {
            uint64_t mine = i == (o->idx >> 6) ? 1ull << (o->idx & 63) : 0;
            others |= (f->holders[i] & ~mine) != 0 || (f->viewers[i] & ~mine) != 0;
        }
        if (others || lf->pins != 1 || lf->user || st != TR__OBJ_SEALED) {
            tr__seg_unlock(s);
            rc = tr__err(TR_ESTATE, "move: the object is in use: it is copied instead");
            break;
        }
        tr__obj_entry saved = *f;
        if (!t) {
            t = tr__seg_insert(s, twin.b, &rc);
            if (!t) {
                tr__seg_unlock(s);
                break;
            }
            f = tr__seg_find(s, from.b); /* (insertion moves no entry, but be plain) */
        }
        /* The twin takes the block, state and refs; holders and containers of both. */
        t->off = saved.off;
        t->size = saved.size;
        t->state = saved.state;
        t->tick = saved.tick;
        t->busy = -1;
        t->n_refs = saved.n_refs;
        t->flags = saved.flags & TR__ENT_ERROR;
        t->err = saved.err;
        t->contained_by += saved.contained_by;
        for (int i = 0; i < TR__SEG_MAX_CLIENTS / 64; i++) {
            t->holders[i] |= saved.holders[i];
            t->viewers[i] |= saved.viewers[i];
        }
        if (f) tr__seg_forget(s, f);
        tr__seg_unlock(s);
        /* our record of `from` becomes (part of) our record of the twin */
        uint32_t pins = lf->pins;
        int user = lf->user;
        tr__idmap_del(&o->held, tr__id_key(lf->id));
        free(lf);
        local *lt = find_local(o, twin.b, 1);
        if (lt) {
            lt->pins += pins;
            lt->user |= user;
        } else {
            rc = tr__err(TR_ENOMEM, "object record"); /* our bit stays: the node clears it */
        }
        break;
    }
    pthread_mutex_unlock(&o->mu);
    tr__event_signal(&s->h->sealed);
    return rc;
}

int tr__objects_borrow(tr__objects *o, tr_ref ref) {
    if (!tr__ref_is_object(&ref) && !tr__ref_is_call(&ref))
        return tr__err(TR_EINVAL, "tr_ref_borrow: not a ref");
    ref = store_ref(ref);
    pthread_mutex_lock(&o->mu);
    tr__seg_lock(&o->seg);
    tr__obj_entry *e = tr__seg_find(&o->seg, ref.b);
    if (e) tr__seg_hold(e, o->idx, 1);
    int rc = e ? 0 : missing(o, &ref, "tr_ref_borrow");
    tr__seg_unlock(&o->seg);
    if (!rc) {
        local *l = find_local(o, ref.b, 1);
        if (l) {
            l->user = 1;
        } else {
            drop_bit(o, ref.b, o->idx);
            rc = tr__err(TR_ENOMEM, "tr_ref_borrow");
        }
    }
    pthread_mutex_unlock(&o->mu);
    return rc;
}

tr__seg_board *tr__objects_board(tr__objects *o, uint64_t key, int claim) {
    return tr__seg_board_entry(&o->seg, key, claim);
}

pid_t tr__objects_board_cancel(tr__objects *o, uint64_t key, uint64_t word) {
    tr__seg_board *e = tr__objects_board(o, key, 0);
    if (!e) return 0;
    uint32_t at = __atomic_fetch_add(&e->next, 1, __ATOMIC_RELAXED) % TR__SEG_BOARD_CANCELS;
    __atomic_store_n(&e->cancel[at], word, __ATOMIC_RELEASE);
    return (pid_t)TR__SEG_LOAD(e->pid);
}

int tr__objects_map_private(tr__objects *o, tr_ref ref, int timeout_ms, void **data, size_t *len) {
    if (!data || !len) return tr__err(TR_EINVAL, "tr_object_map_private: NULL argument");
    const void *view;
    size_t n;
    int rc = tr__objects_pin(o, ref, timeout_ms, &view, &n); /* resident, held, never spilled */
    if (rc) return rc;
    if (n == 0) {
        *data = NULL;
        *len = 0;
        return 0;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t at = (size_t)((const char *)view - o->ro); /* the object's offset in the segment */
    size_t base = at & ~(page - 1), delta = at - base;
    void *m = mmap(NULL, n + delta, PROT_READ | PROT_WRITE, MAP_PRIVATE, o->fd, (off_t)base);
    if (m == MAP_FAILED) {
        int e = errno;
        tr__objects_unpin(o, ref);
        return tr__err_errno(e, "tr_object_map_private: mapping %zu bytes", n);
    }
    *data = (char *)m + delta;
    *len = n;
    return 0;
}

int tr__objects_unmap_private(tr__objects *o, tr_ref ref, void *data, size_t len) {
    if (data && len) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        uintptr_t p = (uintptr_t)data, base = p & ~(uintptr_t)(page - 1);
        if (munmap((void *)base, len + (p - base)) != 0)
            return tr__err_errno(errno, "tr_object_unmap_private");
    }
    tr__objects_unpin(o, ref);
    return 0;
}
