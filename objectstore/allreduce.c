/* objectstore/allreduce.c - see allreduce.h. */
#include "objectstore/allreduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/kv.h"
#include "core/reduce.h"
#include "core/status.h"

static void key(char *out, size_t cap, const char *name, uint64_t round, const char *what,
                int rank) {
    snprintf(out, cap, "troupe/objar/%s/%llu/%s%d", name, (unsigned long long)round, what, rank);
}

/* Waits for a key: the node answers as soon as it is put. In slices of at most 50 ms,
 * because the node connection is shared and held for the whole request. */
static int wait_key(tr__nodeconn *node, const char *k, int64_t deadline, void **v, size_t *n) {
    for (;;) {
        int left = tr__ms_left(deadline);
        int slice = left < 0 || left > 50 ? 50 : left;
        int rc = tr__kv_client_wait(node, k, slice > 0 ? slice : 0, v, n);
        if (rc != TR_ENOTFOUND) return rc;
        if (tr__now_ns() >= deadline) return tr__err(TR_ETIMEDOUT, "waiting for %s", k);
    }
}

int tr__object_allreduce(tr__nodeconn *node, tr__objects *objects, const char *name, int rank,
                         int world, uint64_t round, void *buf, size_t count, tr_dtype dtype,
                         tr_redop op, int timeout_ms) {
    size_t esz = tr__dtype_size(dtype);
    if (!name || !*name || strlen(name) > 200 || world < 1 || rank < 0 || rank >= world ||
        world > 4096 || !esz || (unsigned)op > TR_AVG || (!buf && count))
        return tr__err(TR_EINVAL, "tr_object_allreduce: bad arguments");
    if (count > SIZE_MAX / esz) return tr__err(TR_EINVAL, "tr_object_allreduce: count overflows");
    size_t bytes = count * esz;
    int64_t deadline = tr__deadline(timeout_ms);
    char k[300];
    tr_ref mine;
    int rc = tr__objects_put(objects, buf, bytes, &mine);
    if (rc) return rc;
    key(k, sizeof k, name, round, "", rank);
    if ((rc = tr__kv_client_put(node, k, &mine, sizeof mine))) goto out_mine;

    /* Reduce in rank order: buf = obj[0] op obj[1] op ... */
    tr_ref *refs = calloc((size_t)world, sizeof *refs);
    const void **views = calloc((size_t)world, sizeof *views);
    if (!refs || !views) {
        rc = tr__err(TR_ENOMEM, "tr_object_allreduce");
        goto out_views;
    }
    for (int r = 0; r < world; r++) {
        if (r == rank) {
            refs[r] = mine; /* our own view too: buf is overwritten below */
        } else {
            void *v = NULL;
            size_t n = 0;
            key(k, sizeof k, name, round, "", r);
            rc = wait_key(node, k, deadline, &v, &n);
            if (!rc && n != sizeof(tr_ref))
                rc = tr__err(TR_EPROTO, "tr_object_allreduce: bad ref under %s", k);
            if (!rc) memcpy(&refs[r], v, sizeof refs[r]);
            free(v);
            if (rc) goto out_views;
        }
        size_t len;
        rc = tr__objects_pin(objects, refs[r], tr__ms_left(deadline), &views[r], &len);
        if (rc) {
            memset(&refs[r], 0, sizeof refs[r]);
            goto out_views;
        }
        if (len != bytes) {
            rc = tr__err(TR_EINVAL,
                         "tr_object_allreduce '%s': rank %d has %zu bytes, rank %d has %zu "
                         "(count and dtype must match on every rank)",
                         name, r, len, rank, bytes);
            goto out_views;
        }
    }
    if (bytes) memcpy(buf, views[0], bytes);
    for (int r = 1; r < world && !rc; r++)
        rc = tr__reduce(buf, views[r], count, dtype, op);
    if (!rc) rc = tr__reduce_finish(buf, count, dtype, op, world);

out_views:
    for (int r = 0; refs && views && r < world; r++)
        if (views[r]) tr__objects_unpin(objects, refs[r]);
    free(refs);
    free(views);
    if (!rc) { /* everyone must have read our object before it goes */
        key(k, sizeof k, name, round, "done/", rank);
        rc = tr__kv_client_put(node, k, "", 0);
        for (int r = 0; r < world && !rc; r++) {
            if (r == rank) continue;
            void *v = NULL;
            size_t n;
            key(k, sizeof k, name, round, "done/", r);
            rc = wait_key(node, k, deadline, &v, &n);
            free(v);
        }
    }
    if (rc) { /* others must not find a ref to an object about to go */
        key(k, sizeof k, name, round, "", rank);
        tr__kv_client_del(node, k);
    }
    if (round >= 2) { /* every rank is past round-2 by now */
        key(k, sizeof k, name, round - 2, "", rank);
        tr__kv_client_del(node, k);
        key(k, sizeof k, name, round - 2, "done/", rank);
        tr__kv_client_del(node, k);
    }
out_mine:
    tr__objects_release(objects, mine);
    return rc;
}
