/* core/kv.h - the node's key-value store (keys: strings; values: bytes), and its
 * request handlers (KV_PUT, KV_GET, KV_DEL). Collective rendezvous is built on it.
 *
 * Owned by the node's loop thread (not thread-safe). Values are copied in; a get replies
 * with a copy. Limits: keys up to 1 KiB; values up to the server's max message size.
 */
#ifndef TR_CORE_KV_H
#define TR_CORE_KV_H

#include <stddef.h>

#include "core/server.h"

typedef struct tr__kv tr__kv;

int tr__kv_create(tr__kv **out);
void tr__kv_destroy(tr__kv *kv);
/* Returns 0, TR_EINVAL (key), TR_ENOMEM. */
int tr__kv_put(tr__kv *kv, const char *key, size_t klen, const void *val, size_t vlen);
/* Borrowed view until the next put/del of that key. Returns 0 or TR_ENOTFOUND. */
int tr__kv_get(const tr__kv *kv, const char *key, size_t klen, const void **val, size_t *vlen);
int tr__kv_del(tr__kv *kv, const char *key, size_t klen);
size_t tr__kv_count(const tr__kv *kv);
/* Deletes every key that starts with prefix (a scan of the table); returns how many. */
size_t tr__kv_del_prefix(tr__kv *kv, const char *prefix, size_t plen);
/* Mounts KV_PUT/KV_GET/KV_DEL on the server. A KV_GET with "wait_ms" > 0 for a missing
 * key is answered when the key is put, or with TR_ENOTFOUND once wait_ms has passed. */
void tr__kv_mount(tr__kv *kv, tr__server *s);
/* Answers every waiting get with TR_ECLOSED and closes their timers (node shutdown;
 * run the loop afterwards so libuv releases them). */
void tr__kv_close(tr__kv *kv);

/* Client side, over a node connection (any thread). get: *value is malloc'd. */
struct tr__nodeconn;
int tr__kv_client_put(struct tr__nodeconn *c, const char *key, const void *value, size_t len);
int tr__kv_client_get(struct tr__nodeconn *c, const char *key, void **value, size_t *len);
/* Like get, but the node holds the request up to wait_ms for the key to appear. */
int tr__kv_client_wait(struct tr__nodeconn *c, const char *key, int wait_ms, void **value,
                       size_t *len);
int tr__kv_client_del(struct tr__nodeconn *c, const char *key);
/* The cluster's KV store, on its head, through the node (CLUSTER_KV; served by api/):
 * op "put" (value, len), "get" (*out malloc'd, *out_len), "del", "del_prefix" (key is the
 * prefix). No waiting get: poll. TR_ESTATE where the node is in no cluster. */
int tr__kv_client_cluster(struct tr__nodeconn *c, const char *op, const char *key,
                          const void *value, size_t len, void **out, size_t *out_len);

#endif
