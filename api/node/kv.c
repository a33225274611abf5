/* api/node/kv.c - the head's cluster-wide key-value store (collective groups that span
 * nodes keep their declarations and rendezvous keys there): "kv_put", "kv_get", "kv_del",
 * "kv_del_prefix" at the head, bounded in keys and bytes; a node's own KV requests for
 * cluster keys forwarded to it (run_kv, a forwarded job). */
#include "api/node/cluster_int.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "actor/control.h"
#include "actor/protocol.h"
#include "actor/relay.h"
#include "core/clock.h"
#include "core/codec.h"
#include "core/frame.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/nodeconn.h"
#include "core/rpc.h"
#include "core/status.h"

void tr__cl_ckv_free(ckv *e) {
    free(e->key);
    free(e->val);
    free(e);
}

/* The head: kv_put {key, value} -> {}; kv_get {key} -> {value} (TR_ENOTFOUND); kv_del
 * {key} -> {}; kv_del_prefix {key: the prefix} -> {n}. Bounded: CKV_MAX_KEYS keys,
 * CKV_MAX_BYTES of values (TR_ERESOURCES past them). Under mu (ops[]: the dispatcher's). */
static int op_kv(tr__cluster *cl, const char *op, const tr__obj *req, tr__buf *reply) {
    const char *key;
    size_t kn;
    int rc = tr__get_str(req, "key", &key, &kn);
    if (rc) return rc;
    if (kn == 0 || kn > CKV_MAX_KEY || memchr(key, '\0', kn))
        return tr__err(TR_EINVAL, "cluster kv: a key of %zu bytes (want 1..%d, no NUL)", kn,
                       CKV_MAX_KEY);
    const void *val = NULL;
    size_t vn = 0;
    int put = strcmp(op, "kv_put") == 0, prefix = strcmp(op, "kv_del_prefix") == 0;
    if (put && (rc = tr__get_bin(req, "value", &val, &vn))) return rc;
    if (!put && !prefix && strcmp(op, "kv_get") != 0 && strcmp(op, "kv_del") != 0)
        return tr__err(TR_EINVAL, "cluster: unknown op '%s'", op);
    ckv **pp = &cl->kv;
    uint64_t n = 0;
    if (put) { /* full (counting what this put replaces): refused, the old value kept */
        size_t keys = cl->kv_keys, bytes = cl->kv_bytes;
        for (ckv *e = cl->kv; e; e = e->next)
            if (strlen(e->key) == kn && memcmp(e->key, key, kn) == 0) {
                keys--;
                bytes -= e->len;
                break;
            }
        if (keys >= CKV_MAX_KEYS || vn > CKV_MAX_BYTES - bytes) {
            return tr__err(TR_ERESOURCES, "cluster kv: full (%zu keys, %zu bytes)", cl->kv_keys,
                           cl->kv_bytes);
        }
    }
    while (*pp) {
        ckv *e = *pp;
        int hit = prefix ? strncmp(e->key, key, kn) == 0
                         : strlen(e->key) == kn && memcmp(e->key, key, kn) == 0;
        if (!hit) {
            pp = &e->next;
            continue;
        }
        if (!put && !prefix && strcmp(op, "kv_get") == 0) break;
        *pp = e->next; /* put replaces it; del and del_prefix drop it */
        cl->kv_keys--;
        cl->kv_bytes -= e->len;
        tr__cl_ckv_free(e);
        n++;
        if (!prefix) break;
    }
    if (put) {
        ckv *e = NULL;
        if (!(e = calloc(1, sizeof *e)) || !(e->key = strndup(key, kn)) ||
            !(e->val = malloc(vn ? vn : 1))) {
            if (e) tr__cl_ckv_free(e);
            rc = tr__err(TR_ENOMEM, "cluster kv");
        } else {
            if (vn) memcpy(e->val, val, vn);
            e->len = vn;
            e->next = cl->kv;
            cl->kv = e;
            cl->kv_keys++;
            cl->kv_bytes += vn;
        }
        if (!rc) tr__enc_map(reply, 0);
    } else if (prefix) {
        tr__enc_map(reply, 1);
        tr__enc_str(reply, "n");
        tr__enc_uint(reply, n);
    } else if (strcmp(op, "kv_del") == 0) {
        tr__enc_map(reply, 0);
    } else if (*pp) {
        tr__enc_map(reply, 1);
        tr__enc_str(reply, "value");
        tr__enc_bin(reply, (*pp)->val, (*pp)->len);
    } else {
        rc = tr__err(TR_ENOTFOUND, "cluster kv: no key '%.*s'", (int)(kn > 200 ? 200 : kn), key);
    }
    return rc;
}

/* A node's KV request for the cluster's store, asked of the head (a job). */
void tr__cl_run_kv(tr__cluster *cl, job *j) {
    char op[32], head[128];
    snprintf(op, sizeof op, "kv_%s", j->cls);
    pthread_mutex_lock(&cl->mu);
    snprintf(head, sizeof head, "%s", cl->head ? cl->address : cl->head_addr);
    pthread_mutex_unlock(&cl->mu);
    tr__buf q = TR__BUF_INIT, a = TR__BUF_INIT;
    int put = strcmp(j->cls, "put") == 0;
    size_t m = tr__enc_map_open(&q);
    tr__enc_str(&q, "op");
    tr__enc_str(&q, op);
    tr__enc_str(&q, "key");
    tr__enc_str(&q, j->name);
    if (put) {
        tr__enc_str(&q, "value");
        tr__enc_bin(&q, j->args, j->args_len);
    }
    tr__enc_map_close(&q, m);
    int rc = tr__cl_call_peer(cl, head, &q, PEER_MS, 1, &a);
    tr__dec d;
    if (!rc && !(rc = tr__dec_init(&d, a.data, a.len))) {
        const void *v;
        size_t vn;
        if (strcmp(j->cls, "get") != 0) {
            tr__reply_begin(&j->reply, 0, NULL, 0);
        } else if (!(rc = tr__get_bin(d.root, "value", &v, &vn))) {
            tr__reply_begin(&j->reply, 0, NULL, 1);
            tr__enc_str(&j->reply, "value");
            tr__enc_bin(&j->reply, v, vn);
        }
        tr__dec_free(&d);
    }
    if (rc) {
        char why[600];
        if (rc == TR_ECONNECT || rc == TR_ETIMEDOUT)
            snprintf(why, sizeof why, "the head at %s cannot be reached: %s", head,
                     tr__last_error());
        else
            snprintf(why, sizeof why, "%s", tr__last_error());
        tr__cl_reply_status(j, rc, why);
    }
    tr__buf_free(&q);
    tr__buf_free(&a);
}

int tr__cl_op_kv_any(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    char op[32];
    int rc = tr__cl_get_field(req, "op", op, sizeof op);
    return rc ? rc : op_kv(cl, op, req, reply);
}
