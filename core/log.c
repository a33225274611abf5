/* core/log.c - one formatted line per call, written with a single write(2). */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

void tr__log_write(int level, const char *id, const char *fmt, ...) {
    static const char *tags[] = {"E", "W", "I", "D"};
    char line[1024];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int n = snprintf(line, sizeof line, "troupe %s[%d] %s %s: ", log_role, (int)getpid(),
                     tags[level & 3], id);
    if (n < 0) return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2) len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
