/* core/log.c - one formatted line per call, written with a single write(2); limits for
 * the sites that peer input can make chatty. */
#include "core/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"

int tr__log_level = TR__LOG_WARN;
static const char *log_role = "driver";

void tr__log_set_level(int level) {
    tr__log_level = level;
}

void tr__log_set_role(const char *role) {
    log_role = role;
}

int tr__log_parse_level(const char *s) {
    if (!s || !*s) return -1;
    if (s[0] >= '0' && s[0] <= '3' && s[1] == '\0') return s[0] - '0';
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcasecmp(s, names[i]) == 0) return i;
    return -1;
}

/* One line with a single write(2): the prefix, the message (may be NULL), and a note of
 * lines left out before it. */
static void write_line(int level, const char *id, uint64_t left_out, const char *msg) {
    static const char *tags[] = {"E", "W", "I", "D"};
    char line[1100];
    int n;
    if (!left_out)
        n = snprintf(line, sizeof line - 1, "troupe %s[%d] %s %s: %s", log_role, (int)getpid(),
                     tags[level & 3], id, msg);
    else
        n = snprintf(line, sizeof line - 1,
                     "troupe %s[%d] %s %s: %s%s%llu more %s line(s) not logged%s", log_role,
                     (int)getpid(), tags[level & 3], id, msg ? msg : "", msg ? " (" : "",
                     (unsigned long long)left_out, id, msg ? ")" : "");
    if (n < 0) return;
    size_t len = (size_t)n < sizeof line - 1 ? (size_t)n : sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

void tr__log_write(int level, const char *id, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    write_line(level, id, 0, msg);
}

static pthread_mutex_t limit_mu = PTHREAD_MUTEX_INITIALIZER;
static tr__log_limit *limits; /* every limited site that has written or held back a line */

/* Called with limit_mu held. */
static int take(tr__log_limit *l, int64_t now_ns, uint64_t *left_out) {
    if (l->window_start == 0 || now_ns - l->window_start >= (int64_t)TR__LOG_WINDOW_MS * 1000000) {
        l->window_start = now_ns ? now_ns : 1;
        l->in_window = 0;
    }
    int ok = l->in_window < TR__LOG_BURST;
    if (ok) {
        l->in_window++;
        *left_out = l->left_out;
        l->left_out = 0;
    } else {
        l->left_out++;
    }
    return ok;
}

int tr__log_limit_take(tr__log_limit *l, int64_t now_ns, uint64_t *left_out) {
    pthread_mutex_lock(&limit_mu);
    int ok = take(l, now_ns, left_out);
    pthread_mutex_unlock(&limit_mu);
    return ok;
}

void tr__log_write_limited(tr__log_limit *l, int level, const char *id, const char *fmt, ...) {
    uint64_t left_out;
    pthread_mutex_lock(&limit_mu);
    if (!l->listed) { /* a static site: listed for tr__log_flush_limits */
        l->id = id;
        l->listed = 1;
        l->next = limits;
        limits = l;
    }
    int ok = take(l, tr__now_ns(), &left_out);
    pthread_mutex_unlock(&limit_mu);
    if (!ok) return;
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    write_line(level, id, left_out, msg);
}

void tr__log_flush_limits(void) {
    pthread_mutex_lock(&limit_mu);
    for (tr__log_limit *l = limits; l; l = l->next) {
        if (!l->left_out) continue;
        write_line(TR__LOG_WARN, l->id ? l->id : "LOG", l->left_out, NULL);
        l->left_out = 0;
    }
    pthread_mutex_unlock(&limit_mu);
}
