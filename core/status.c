/* core/status.c - status code tables (from TR_ERRNO_MAP) and the per-thread error text. */
#include "core/status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[512];

TR_API const char *tr_strerror(int status) {
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

TR_API const char *tr_errname(int status) {
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

TR_API const char *tr_last_error(void) {
    return last_error;
}

TR_API unsigned tr_version(void) {
    return TR_VERSION_HEX;
}

#define STR2(x) #x
#define STR(x) STR2(x)
TR_API const char *tr_version_string(void) {
    return STR(TR_VERSION_MAJOR) "." STR(TR_VERSION_MINOR) "." STR(TR_VERSION_PATCH);
}

TR_API unsigned tr_abi_version(void) {
    return TR_ABI_VERSION;
}

TR_API void tr_free(void *p) {
    free(p);
}

void tr__err_clear(void) {
    last_error[0] = '\0';
}

int tr__err(int code, const char *fmt, ...) {
    char tmp[sizeof last_error]; /* the arguments may be tr_last_error() itself */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
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
