/* collective/declare.c - see declare.h. The KV value is msgpack
 * {"backend": str, "ids": bin (16 bytes per actor), "ranks": bin (4 bytes per actor)}. */
#include "collective/declare.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective/shm/segment.h"
#include "core/clock.h"
#include "core/codec.h"
#include "core/kv.h"
#include "core/status.h"

static void key_of(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "troupe/groups/%s", name);
}

int tr__group_declare(tr__nodeconn *node, const tr_actor_id *actors, size_t n, const int *ranks,
                      const char *backend, const char *name) {
    if (!actors || n == 0 || n > TR__COLL_MAX_WORLD || !backend || !*backend || !name ||
        !tr__coll_name_ok(name, strlen(name)))
        return tr__err(TR_EINVAL, "tr_group_declare: bad actors, backend or name");
    int32_t r32[TR__COLL_MAX_WORLD];
    uint64_t seen = 0;
    for (size_t i = 0; i < n; i++) {
        int r = ranks ? ranks[i] : (int)i;
        if (r < 0 || (size_t)r >= n || (seen >> r & 1))
            return tr__err(TR_EINVAL, "tr_group_declare: ranks must be a permutation of 0..%zu",
                           n - 1);
        seen |= 1ull << r;
        r32[i] = r;
    }
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 3);
    tr__enc_str(&b, "backend");
    tr__enc_str(&b, backend);
    tr__enc_str(&b, "ids");
    tr__enc_bin(&b, actors, n * sizeof *actors);
    tr__enc_str(&b, "ranks");
    tr__enc_bin(&b, r32, n * sizeof r32[0]);
    char key[256];
    key_of(key, sizeof key, name);
    int rc = b.oom ? tr__err(TR_ENOMEM, "tr_group_declare")
                   : tr__kv_client_put(node, key, b.data, b.len);
    tr__buf_free(&b);
    return rc;
}

int tr__group_open(tr__nodeconn *node, const char *node_path, size_t max_msg,
                   const tr_actor_id *self, const char *name, int timeout_ms, tr_group **out) {
    if (!out) return tr__err(TR_EINVAL, "tr_group_open: out is NULL");
    *out = NULL;
    if (!self) return tr__err(TR_ESTATE, "tr_group_open: call it inside an actor's method");
    if (!name || !tr__coll_name_ok(name, strlen(name)))
        return tr__err(TR_EINVAL, "tr_group_open: bad name");
    char key[256];
    key_of(key, sizeof key, name);
    int64_t deadline = tr__deadline(timeout_ms);
    void *v = NULL;
    size_t vn = 0;
    int rc;
    for (;;) { /* in slices: the node connection is shared */
        int left = tr__ms_left(deadline);
        rc = tr__kv_client_wait(node, key, left < 0 || left > 50 ? 50 : left, &v, &vn);
        if (rc != TR_ENOTFOUND) break;
        if (tr__now_ns() >= deadline) {
            return tr__err(TR_ETIMEDOUT, "tr_group_open: no group '%s' was declared within %d ms",
                           name, timeout_ms);
        }
    }
    if (rc) return rc;
    tr__dec d;
    rc = tr__dec_init(&d, v, vn);
    const char *be = NULL;
    size_t bn = 0, idn = 0, rn = 0;
    const void *ids = NULL, *ranks = NULL;
    if (!rc) rc = tr__get_str(d.root, "backend", &be, &bn);
    if (!rc) rc = tr__get_bin(d.root, "ids", &ids, &idn);
    if (!rc) rc = tr__get_bin(d.root, "ranks", &ranks, &rn);
    char backend[16] = {0};
    int world = 0, rank = -1;
    if (!rc) {
        world = (int)(idn / sizeof(tr_actor_id));
        if (idn % sizeof(tr_actor_id) || rn != (size_t)world * 4 || bn == 0 ||
            bn >= sizeof backend || world < 1 || world > TR__COLL_MAX_WORLD) {
            rc = tr__err(TR_EPROTO, "group declaration '%s' is malformed", name);
        } else {
            memcpy(backend, be, bn);
            for (int i = 0; i < world; i++) {
                if (memcmp((const char *)ids + 16 * i, self->b, 16) == 0) {
                    int32_t r;
                    memcpy(&r, (const char *)ranks + 4 * i, 4);
                    rank = r;
                }
            }
            if (rank < 0 || rank >= world)
                rc = tr__err(TR_ENOTFOUND, "this actor is not a member of group '%s'", name);
        }
    }
    if (d.live) tr__dec_free(&d);
    free(v);
    if (rc) return rc;
    int left = tr__ms_left(deadline);
    return tr__group_init(node_path, max_msg, world, rank, backend, name, left, out);
}
