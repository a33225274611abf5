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
/* Mounts KV_PUT/KV_GET/KV_DEL on the server. */
void tr__kv_mount(tr__kv *kv, tr__server *s);

/* Client side, over a node connection (any thread). get: *value is malloc'd. */
struct tr__nodeconn;
int tr__kv_client_put(struct tr__nodeconn *c, const char *key, const void *value, size_t len);
int tr__kv_client_get(struct tr__nodeconn *c, const char *key, void **value, size_t *len);
int tr__kv_client_del(struct tr__nodeconn *c, const char *key);

#endif
