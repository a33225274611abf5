/* troupe/status.h - export macro, version, and the status codes every tr_ call returns.
 *
 * Every fallible call returns int: 0 (TR_OK) or a negative TR_E* code. tr_strerror() and
 * tr_errname() are total and static; tr_last_error() gives the detail text of the last
 * failure on the calling thread.
 */
#ifndef TROUPE_STATUS_H
#define TROUPE_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TR_API __attribute__((visibility("default")))
#else
#define TR_API
#endif

#define TR_VERSION_MAJOR 0
#define TR_VERSION_MINOR 2
#define TR_VERSION_PATCH 0
/* The ABI version: bumped on any incompatible change of a public struct or function. */
#define TR_ABI_VERSION 1
#define TR_VERSION_HEX ((TR_VERSION_MAJOR << 16) | (TR_VERSION_MINOR << 8) | TR_VERSION_PATCH)

/* X(name, value, description). One table makes the enum, tr_strerror and tr_errname. */
#define TR_ERRNO_MAP(X)                                                                            \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(ENOTFOUND, -3, "not found")                                                                  \
    X(EEXIST, -4, "already exists")                                                                \
    X(ETIMEDOUT, -5, "timed out")                                                                  \
    X(EACTOR_DIED, -6, "actor died")                                                               \
    X(ETASK, -7, "the method returned an error")                                                   \
    X(ENOMETHOD, -8, "no such method")                                                             \
    X(ENOCLASS, -9, "no such actor class")                                                         \
    X(ERESOURCES, -10, "resources can never be satisfied on this node")                            \
    X(EPROTO, -11, "malformed message")                                                            \
    X(EMSGSIZE, -12, "message too large")                                                          \
    X(ECONNECT, -13, "cannot reach the node service")                                              \
    X(ECLOSED, -14, "connection or runtime closed")                                                \
    X(ESTALE, -15, "stale handle")                                                                 \
    X(EIO, -16, "input/output error")                                                              \
    X(EVERSION, -17, "version mismatch")                                                           \
    X(ECANCELED, -18, "canceled")                                                                  \
    X(EPEER_DIED, -19, "peer died")                                                                \
    X(EPERM, -20, "permission denied")                                                             \
    X(ESTATE, -21, "operation not valid in this state")                                            \
    X(EINTERNAL, -22, "internal error")                                                            \
    X(EOBJECT_LOST, -23, "object lost: the node that had it is gone or freed it")                  \
    X(EOWNER_DIED, -24, "owner died: the process that made the ref is gone")                       \
    X(EAGAIN, -25, "it would wait (a call that must not: tr_call_nowait)")

typedef enum tr_status {
    TR_OK = 0,
#define TR__ERR_ENUM(name, val, desc) TR_##name = (val),
    TR_ERRNO_MAP(TR__ERR_ENUM)
#undef TR__ERR_ENUM
} tr_status;

/* Short static description of a status code ("timed out"); "unknown error" for codes
 * outside the table. Thread safety: any thread. */
TR_API const char *tr_strerror(int status);

/* Static name of a status code ("TR_ETIMEDOUT"); "TR_E?" for unknown codes.
 * Thread safety: any thread. */
TR_API const char *tr_errname(int status);

/* Detail text of the last failed tr_ call on this thread, saying what failed and what to
 * do next; "" when none. Valid until the next tr_ call on this thread.
 * Thread safety: any thread (the text is per thread). */
TR_API const char *tr_last_error(void);

/* The library's version as TR_VERSION_HEX; compare with the header's to detect a
 * mismatch (tr_init does this). Thread safety: any thread. */
TR_API unsigned tr_version(void);

/* "MAJOR.MINOR.PATCH". Thread safety: any thread. */
TR_API const char *tr_version_string(void);

/* The ABI version of the library (TR_ABI_VERSION it was built with).
 * Thread safety: any thread. */
TR_API unsigned tr_abi_version(void);

/* Frees memory the runtime handed to the caller (where a function says so).
 * tr_free(NULL) is a no-op. Thread safety: any thread. */
TR_API void tr_free(void *p);

#ifdef __cplusplus
}
#endif
#endif /* TROUPE_STATUS_H */
