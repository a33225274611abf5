/* core/log.h - leveled logging to stderr with a stable message id.
 *
 * TR_LOG_WARN("COLL-TIMEOUT", "group %s: %s", g, tr__errname(rc)) checks the level before
 * any formatting. The level comes from the configuration (core/config.c reads
 * TROUPE_LOG_LEVEL in one place) through tr__log_set_level; the role ("driver", "node",
 * "worker") prefixes every line. Thread safety: any thread.
 */
#ifndef TR_CORE_LOG_H
#define TR_CORE_LOG_H

#include <stdint.h>

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
/* Peer input can make a site warn once per message (a flood of malformed frames): such
 * sites log through a limit of their own, TR__LOG_BURST lines per TR__LOG_WINDOW_MS; what
 * goes over is counted, and the site's next line, or tr__log_flush_limits (at exit),
 * says how many lines were left out. */
#define TR__LOG_BURST 10
#define TR__LOG_WINDOW_MS 10000

typedef struct tr__log_limit {
    const char *id;
    int64_t window_start; /* ns, monotonic; 0: no window yet */
    uint32_t in_window;   /* lines written in this window */
    uint64_t left_out;    /* lines not written since the last one that was */
    int listed;           /* on the list tr__log_flush_limits walks */
    struct tr__log_limit *next;
} tr__log_limit;

/* Whether a line may be written at time now_ns under limit l; if so, *left_out gets the
 * count of lines held back since the last one written (and is reset).
 * Thread safety: any thread. */
int tr__log_limit_take(tr__log_limit *l, int64_t now_ns, uint64_t *left_out);
/* Writes a line of the site l (static: it is listed for tr__log_flush_limits) if its
 * limit allows. */
void tr__log_write_limited(tr__log_limit *l, int level, const char *id, const char *fmt, ...)
    TR__PRINTF(4, 5);
/* Writes one line per limited site that has lines left out, and resets them. */
void tr__log_flush_limits(void);

#define TR__LOG_LIMITED(lvl, id, ...)                                                              \
    do {                                                                                           \
        static tr__log_limit tr__limit_;                                                           \
        if ((lvl) <= tr__log_level) tr__log_write_limited(&tr__limit_, (lvl), (id), __VA_ARGS__);  \
    } while (0)
#define TR_LOG_WARN_LIMITED(id, ...) TR__LOG_LIMITED(TR__LOG_WARN, id, __VA_ARGS__)

#define TR_LOG_ERROR(id, ...) TR__LOG(TR__LOG_ERROR, id, __VA_ARGS__)
#define TR_LOG_WARN(id, ...) TR__LOG(TR__LOG_WARN, id, __VA_ARGS__)
#define TR_LOG_INFO(id, ...) TR__LOG(TR__LOG_INFO, id, __VA_ARGS__)
#define TR_LOG_DEBUG(id, ...) TR__LOG(TR__LOG_DEBUG, id, __VA_ARGS__)

#endif
