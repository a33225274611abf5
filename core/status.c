/* core/status.c - status code tables (from TR_ERRNO_MAP) and the per-thread error text. */
#include "core/status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[512];

const char *tr__strerror(int status) {
    switch (status) {
    case TR_OK:
        return "ok";
#define X(name, val, desc)                                                                         \
    case TR_##name:                                                                                \
        return desc;
        TR_ERRNO_MAP(X)
#undef X
    }
    return "unknown error";
}

const char *tr__errname(int status) {
    switch (status) {
    case TR_OK:
        return "TR_OK";
#define X(name, val, desc)                                                                         \
    case TR_##name:                                                                                \
        return "TR_" #name;
        TR_ERRNO_MAP(X)
#undef X
    }
    return "TR_E?";
}

const char *tr__last_error(void) {
    return last_error;
}

void tr__err_clear(void) {
    last_error[0] = '\0';
}

int tr__err(int code, const char *fmt, ...) {
    char tmp[sizeof last_error]; /* the arguments may be tr__last_error() itself */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    memcpy(last_error, tmp, sizeof tmp);
    return code;
}

int tr__err_wrap(int code, const char *fmt, ...) {
    char tmp[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof tmp - 3 && last_error[0]) { /* ": " and the text, cut */
        size_t at = (size_t)n, k = strnlen(last_error, sizeof tmp - at - 3);
        memcpy(tmp + at, ": ", 2);
        memcpy(tmp + at + 2, last_error, k);
        tmp[at + 2 + k] = '\0';
    }
    memcpy(last_error, tmp, sizeof tmp);
    return code;
}

int tr__from_errno(int e) {
    switch (e) {
    case 0:
        return TR_OK;
    case ENOMEM:
        return TR_ENOMEM;
    case EINVAL:
        return TR_EINVAL;
    case ENOENT:
        return TR_ENOTFOUND;
    case EEXIST:
        return TR_EEXIST;
    case ETIMEDOUT:
        return TR_ETIMEDOUT;
    case EACCES:
    case EPERM:
        return TR_EPERM;
    case EMSGSIZE:
        return TR_EMSGSIZE;
    case ECONNREFUSED:
    case ENOTCONN:
        return TR_ECONNECT;
    case EPIPE:
    case ECONNRESET:
        return TR_ECLOSED;
    default:
        return TR_EIO;
    }
}

int tr__err_errno(int e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof last_error)
        snprintf(last_error + n, sizeof last_error - (size_t)n, ": %s", strerror(e));
    return tr__from_errno(e);
}
