/* core/log.h - leveled logging to stderr with a stable message id.
 *
 * TR_LOG_WARN("COLL-TIMEOUT", "group %s: %s", g, tr_errname(rc)) checks the level before
 * any formatting. The level comes from the configuration (core/config.c reads
 * TROUPE_LOG_LEVEL in one place) through tr__log_set_level; the role ("driver", "node",
 * "worker") prefixes every line. Thread safety: any thread.
 */
#ifndef TR_CORE_LOG_H
#define TR_CORE_LOG_H

#include "core/status.h"

enum { TR__LOG_ERROR = 0, TR__LOG_WARN = 1, TR__LOG_INFO = 2, TR__LOG_DEBUG = 3 };

extern int tr__log_level;

void tr__log_set_level(int level);
void tr__log_set_role(const char *role);
/* Parses "error|warn|info|debug" or a digit; -1 if neither. */
int tr__log_parse_level(const char *s);
void tr__log_write(int level, const char *id, const char *fmt, ...) TR__PRINTF(3, 4);

#define TR__LOG(lvl, id, ...)                                                                      \
    do {                                                                                           \
        if ((lvl) <= tr__log_level) tr__log_write((lvl), (id), __VA_ARGS__);                       \
    } while (0)
#define TR_LOG_ERROR(id, ...) TR__LOG(TR__LOG_ERROR, id, __VA_ARGS__)
#define TR_LOG_WARN(id, ...) TR__LOG(TR__LOG_WARN, id, __VA_ARGS__)
#define TR_LOG_INFO(id, ...) TR__LOG(TR__LOG_INFO, id, __VA_ARGS__)
#define TR_LOG_DEBUG(id, ...) TR__LOG(TR__LOG_DEBUG, id, __VA_ARGS__)

#endif
