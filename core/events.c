/* core/events.c - the node's durable event log (core/events.h). */
#include "core/events.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/status.h"

static int log_fd = -1;
static size_t log_bytes;
static int log_full;

int tr__evlog_open(const char *session) {
    tr__evlog_close();
    char path[700];
    snprintf(path, sizeof path, "%s/%s", session, TR__EVENTS_FILE);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return tr__err_errno(errno, "open %s", path);
    struct stat st;
    log_bytes = fstat(fd, &st) == 0 ? (size_t)st.st_size : 0;
    log_full = 0;
    __atomic_store_n(&log_fd, fd, __ATOMIC_RELEASE);
    return 0;
}

void tr__evlog_close(void) {
    int fd = __atomic_exchange_n(&log_fd, -1, __ATOMIC_ACQ_REL);
    if (fd >= 0) close(fd);
}

static void pair(tr__buf *b, const char *k, const char *v) {
    tr__buf_append(b, ",", 1);
    tr__buf_json_str(b, k);
    tr__buf_append(b, ":", 1);
    tr__buf_json_str(b, v ? v : "");
}

void tr__evlog(const char *event, ...) {
    int fd = __atomic_load_n(&log_fd, __ATOMIC_ACQUIRE);
    if (fd < 0 || !event) return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char t[40];
    snprintf(t, sizeof t, "%lld.%03ld", (long long)now.tv_sec, now.tv_nsec / 1000000);
    tr__buf b = TR__BUF_INIT;
    tr__buf_append(&b, "{\"t\":", 5);
    tr__buf_json_str(&b, t);
    pair(&b, "event", event);
    va_list ap;
    va_start(ap, event);
    for (int n = 0; n < 22; n++) { /* (what a reader keeps: 24 pairs) */
        const char *k = va_arg(ap, const char *);
        if (!k) break;
        pair(&b, k, va_arg(ap, const char *));
    }
    va_end(ap);
    tr__buf_append(&b, "}\n", 2);
    if (!b.oom && b.len <= 64 * 1024) {
        size_t at = __atomic_fetch_add(&log_bytes, b.len, __ATOMIC_RELAXED);
        if (at + b.len <= TR__EVENTS_MAX_BYTES) {
            if (write(fd, b.data, b.len) != (ssize_t)b.len)
                TR_LOG_WARN("NODE-EVENTS", "writing the event log: %s", strerror(errno));
        } else if (!__atomic_exchange_n(&log_full, 1, __ATOMIC_RELAXED)) {
            TR_LOG_WARN("NODE-EVENTS", "the event log holds %u bytes: no more events are kept",
                        TR__EVENTS_MAX_BYTES);
        }
    }
    tr__buf_free(&b);
}

const char *tr__evlog_get(const tr__evlog_rec *e, const char *key) {
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->key[i], key) == 0) return e->val[i];
    return "";
}

/* Reads a JSON string at *p (after its quote) into place (unescaped, NUL-terminated);
 * returns it, *p past its closing quote, or NULL if malformed. */
static char *string_at(char **p) {
    char *start = *p, *s = start, *out = start;
    while (*s && *s != '"') {
        if (*s != '\\') {
            *out++ = *s++;
            continue;
        }
        s++;
        char c = *s;
        if (c == '"' || c == '\\' || c == '/')
            *out++ = c;
        else if (c == 'n')
            *out++ = '\n';
        else if (c == 't')
            *out++ = '\t';
        else if (c == 'r')
            *out++ = '\r';
        else if (c == 'b')
            *out++ = '\b';
        else if (c == 'f')
            *out++ = '\f';
        else if (c == 'u') { /* (what tr__buf_json_str writes: control characters) */
            unsigned v = 0;
            for (int k = 1; k <= 4; k++) {
                char h = s[k];
                int d = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
                if (d < 0) return NULL;
                v = v * 16 + (unsigned)d;
            }
            *out++ = v && v < 0x80 ? (char)v : '?';
            s += 4;
        } else {
            return NULL;
        }
        s++;
    }
    if (*s != '"') return NULL;
    *out = '\0';
    *p = s + 1;
    return start;
}

/* Parses one line: {"k":"v",...} with string values only. 0, or -1. */
static int parse_line(char *line, tr__evlog_rec *e) {
    e->n = 0;
    char *p = line;
    while (*p == ' ')
        p++;
    if (*p++ != '{') return -1;
    for (;;) {
        while (*p == ' ')
            p++;
        if (*p == '}') return e->n ? 0 : -1;
        if (*p++ != '"') return -1;
        char *k = string_at(&p);
        if (!k || *p++ != ':' || *p++ != '"') return -1;
        char *v = string_at(&p);
        if (!v || e->n == 24) return -1;
        e->key[e->n] = k;
        e->val[e->n++] = v;
        if (*p == ',')
            p++;
        else if (*p != '}')
            return -1;
    }
}

int tr__evlog_read(const char *path, void (*fn)(void *ctx, const tr__evlog_rec *e), void *ctx) {
    FILE *f = fopen(path, "re");
    if (!f) return tr__err_errno(errno, "%s", path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        if (line[n - 1] != '\n') break; /* (cut by a crash mid-write) */
        line[n - 1] = '\0';
        tr__evlog_rec e;
        if (parse_line(line, &e) == 0) fn(ctx, &e);
    }
    free(line);
    fclose(f);
    return 0;
}
