/* collective/declare.c - see declare.h. The KV value is msgpack
 * {"backend": str, "ids": bin (16 bytes per actor), "ranks": bin (4 bytes per actor)},
 * and for a group across nodes "nonce": uint, "hosts": [str: each actor's node, "IP:port"],
 * "hier": int (1: allreduce in two levels, collective/gloo). */
#include "collective/declare.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collective/shm/segment.h"
#include "core/clock.h"
#include "core/codec.h"
#include "core/ids.h"
#include "core/kv.h"
#include "core/status.h"

static void key_of(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "troupe/groups/%s", name);
}

int tr__group_declare(tr__nodeconn *node, const tr_actor_id *actors, size_t n, const int *ranks,
                      const char *backend, const char *name, int cluster, const char *const *hosts,
                      uint64_t nonce, int hier) {
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
    size_t m = tr__enc_map_open(&b);
    tr__enc_str(&b, "backend");
    tr__enc_str(&b, backend);
    tr__enc_str(&b, "ids");
    tr__enc_bin(&b, actors, n * sizeof *actors);
    tr__enc_str(&b, "ranks");
    tr__enc_bin(&b, r32, n * sizeof r32[0]);
    if (hosts) {
        tr__enc_str(&b, "nonce");
        tr__enc_uint(&b, nonce);
        tr__enc_str(&b, "hosts");
        tr__enc_array(&b, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
            tr__enc_str(&b, hosts[i]);
        tr__enc_str(&b, "hier");
        tr__enc_int(&b, hier);
    }
    tr__enc_map_close(&b, m);
    char key[256];
    key_of(key, sizeof key, name);
    int rc = 0;
    if (b.oom) {
        rc = tr__err(TR_ENOMEM, "tr_group_declare");
    } else if (!cluster) {
        rc = tr__kv_client_put(node, key, b.data, b.len);
    } else { /* an earlier group of this name across nodes: its keys go (a dead rank's stay) */
        char prefix[256];
        snprintf(prefix, sizeof prefix, "%s%s/", TR__COLL_KV_PREFIX, name);
        rc = tr__kv_client_cluster(node, "del_prefix", prefix, NULL, 0, NULL, NULL);
        if (!rc) rc = tr__kv_client_cluster(node, "put", key, b.data, b.len, NULL, NULL);
    }
    tr__buf_free(&b);
    return rc;
}

int tr__group_declare_placed(tr__nodeconn *node, const tr_actor_id *actors, size_t n,
                             const int *ranks, const char *backend, const char *name,
                             const char *const *actor_nodes, const char *here, int cluster) {
    if (!actors || n == 0 || n > TR__COLL_MAX_WORLD || !backend || !name) /* (it says why) */
        return tr__group_declare(node, actors, n, ranks, backend, name, 0, NULL, 0, 0);
    if (!actor_nodes || !here) return tr__err(TR_EINVAL, "tr_group_declare: no actors' nodes");
    int rc = 0, span = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (actor_nodes[i][0] != '/' && strlen(actor_nodes[i]) >= TR__COLL_HOST_MAX) /* IP:port */
            rc = tr__err(TR_EINVAL, "tr_group_declare: actor %zu's node address is too long", i);
        span |= strcmp(actor_nodes[i], actor_nodes[0]) != 0;
    }
    int hier = strcmp(backend, "hier") == 0, autob = strcmp(backend, "auto") == 0;
    if (!rc && span && strcmp(backend, "gloo") != 0 && !autob && !hier)
        rc = tr__err(TR_EINVAL,
                     "tr_group_declare: group '%s' would span nodes (%s and %s): the '%s' "
                     "backend needs every rank on one node (across nodes: gloo, hier or auto)",
                     name, actor_nodes[0], actor_nodes[n - 1], backend);
    if (rc) return rc;
    if (!span) /* one node: shm is the fastest */
        return tr__group_declare(node, actors, n, ranks, autob || hier ? "shm" : backend, name,
                                 cluster, NULL, 0, 0);
    /* each rank's node, by its cluster address ("IP:port"; Gloo listens on the IP) */
    char(*addrs)[TR__COLL_HOST_MAX] = calloc(n, sizeof *addrs);
    const char **hosts = calloc(n, sizeof *hosts);
    rc = addrs && hosts ? 0 : tr__err(TR_ENOMEM, "tr_group_declare");
    for (size_t i = 0; i < n && !rc; i++) {
        const char *at = actor_nodes[i];
        int local = at[0] == '/' || !strchr(at, ':'); /* a socket: here */
        snprintf(addrs[i], sizeof addrs[i], "%s", local ? here : at);
        hosts[i] = addrs[i];
    }
    uint64_t nonce = 0;
    if (!rc && !(rc = tr__random_bytes(&nonce, sizeof nonce)))
        rc = tr__group_declare(node, actors, n, ranks, "gloo", name, 1, hosts, nonce | 1,
                               hier || autob);
    free(addrs);
    free(hosts);
    return rc;
}

int tr__group_declared(tr__nodeconn *node, const char *name) {
    if (!name || !tr__coll_name_ok(name, strlen(name)))
        return tr__err(TR_EINVAL, "tr_group_is_declared: bad name");
    char key[256];
    key_of(key, sizeof key, name);
    void *v = NULL;
    size_t vn = 0;
    int rc = tr__kv_client_cluster(node, "get", key, NULL, 0, &v, &vn);
    if (rc == TR_ESTATE) rc = tr__kv_client_get(node, key, &v, &vn); /* in no cluster */
    free(v);
    return rc == 0 ? 1 : rc == TR_ENOTFOUND ? 0 : rc;
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
    /* A node in a cluster keeps declarations in the cluster's store (polled: a head that
     * is slow, or a node busy forwarding, is "not yet"); a node in none, in its own. */
    int cluster = 1;
    char last[300] = "";
    for (;;) { /* in slices: the node connection is shared */
        int left = tr__ms_left(deadline);
        if (cluster) {
            rc = tr__kv_client_cluster(node, "get", key, NULL, 0, &v, &vn);
            if (rc == TR_ESTATE) cluster = 0; /* this node is in no cluster */
            if (rc == TR_ERESOURCES || rc == TR_ECONNECT || rc == TR_ETIMEDOUT) {
                snprintf(last, sizeof last, " (last: %s)", tr__last_error());
                rc = TR_ENOTFOUND;
            }
            if (rc == TR_ENOTFOUND && left != 0) {
                struct timespec ts = {0, 20000000};
                nanosleep(&ts, NULL);
            }
        }
        if (!cluster)
            rc = tr__kv_client_wait(node, key, left < 0 || left > 50 ? 50 : left, &v, &vn);
        if (rc != TR_ENOTFOUND) break;
        if (tr__now_ns() >= deadline) {
            return tr__err(TR_ETIMEDOUT, "tr_group_open: no group '%s' was declared within %d ms%s",
                           name, timeout_ms, last);
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
    int world = 0, rank = -1, span = 0;
    int64_t hier = 0;
    uint64_t nonce = 0;
    const tr__obj *hosts = NULL;
    char(*by_rank)[TR__COLL_HOST_MAX] = NULL;  /* each rank's node, "IP:port" */
    if (!rc && tr__obj_get(d.root, "nonce")) { /* ranks on several nodes */
        span = 1;
        rc = tr__get_uint(d.root, "nonce", &nonce);
        if (!rc && tr__obj_get(d.root, "hier")) rc = tr__get_int(d.root, "hier", &hier);
        hosts = tr__obj_get(d.root, "hosts");
        if (!rc && !(by_rank = calloc(TR__COLL_MAX_WORLD, sizeof *by_rank)))
            rc = tr__err(TR_ENOMEM, "tr_group_open");
    }
    if (!rc) {
        world = (int)(idn / sizeof(tr_actor_id));
        if (idn % sizeof(tr_actor_id) || rn != (size_t)world * 4 || bn == 0 ||
            bn >= sizeof backend || world < 1 || world > TR__COLL_MAX_WORLD) {
            rc = tr__err(TR_EPROTO, "group declaration '%s' is malformed", name);
        } else {
            memcpy(backend, be, bn);
            if (span && tr__obj_len(hosts) != (size_t)world)
                rc = tr__err(TR_EPROTO, "group declaration '%s' has bad hosts", name);
            for (int i = 0; i < world && !rc; i++) {
                int32_t r;
                memcpy(&r, (const char *)ranks + 4 * i, 4);
                if (r < 0 || r >= world) {
                    rc = tr__err(TR_EPROTO, "group declaration '%s' has bad ranks", name);
                    break;
                }
                if (memcmp((const char *)ids + 16 * i, self->b, 16) == 0) rank = r;
                const char *h;
                size_t hn;
                if (span && (tr__obj_str(tr__obj_at(hosts, (size_t)i), "hosts", &h, &hn) ||
                             hn == 0 || hn >= TR__COLL_HOST_MAX || memchr(h, '\0', hn) ||
                             !memchr(h, ':', hn) || by_rank[r][0]))
                    rc = tr__err(TR_EPROTO, "group declaration '%s' has bad hosts or ranks", name);
                else if (span)
                    memcpy(by_rank[r], h, hn);
            }
            if (!rc && (rank < 0 || rank >= world))
                rc = tr__err(TR_ENOTFOUND, "this actor is not a member of group '%s'", name);
        }
    }
    if (d.live) tr__dec_free(&d);
    free(v);
    int left = tr__ms_left(deadline);
    if (!rc && span) {
        const char *hs[TR__COLL_MAX_WORLD];
        for (int r = 0; r < world; r++)
            hs[r] = by_rank[r];
        rc = tr__group_join_span(node_path, max_msg, world, rank, backend, name, nonce, hs,
                                 hier != 0, left, out);
    } else if (!rc) {
        rc = tr__group_join(node_path, max_msg, world, rank, backend, name, left, out);
    }
    free(by_rank);
    return rc;
}
