/* api/status.c - troupe/status.h's entry points: the status tables and the thread's error
 * text (core/status.h), the library's version and ABI, tr_free, tr_dtype_size. */
#include <stdlib.h>

#include "core/reduce.h"
#include "core/status.h"

TR_API const char *tr_strerror(int status) {
    return tr__strerror(status);
}

TR_API const char *tr_errname(int status) {
    return tr__errname(status);
}

TR_API const char *tr_last_error(void) {
    return tr__last_error();
}

TR_API unsigned tr_version(void) {
    return TR_VERSION_HEX;
}

TR_API const char *tr_version_string(void) {
    return TR__VERSION_STRING;
}

TR_API unsigned tr_abi_version(void) {
    return TR_ABI_VERSION;
}

TR_API void tr_free(void *p) {
    free(p);
}

TR_API size_t tr_dtype_size(tr_dtype dtype) {
    return tr__dtype_size(dtype);
}
