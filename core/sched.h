/* core/sched.h - resource accounting for one node: named quantities ("CPU", "GPU", custom).
 *
 * A request fits if every quantity it asks for (> 0) is available; it can ever fit if the
 * node's totals cover it. Acquire/release move quantities between available and used.
 * Pure data, no I/O; the node's loop thread owns it (not thread-safe).
 */
#ifndef TR_CORE_SCHED_H
#define TR_CORE_SCHED_H

#include <stdbool.h>
#include <stddef.h>

#define TR__MAX_RES 16
#define TR__RES_NAME 32

typedef struct tr__res {
    int n;
    char name[TR__MAX_RES][TR__RES_NAME];
    double qty[TR__MAX_RES];
} tr__res;

/* Adds qty to name (creating it). Returns 0, TR_EINVAL (bad name/qty, table full). */
int tr__res_add(tr__res *r, const char *name, double qty);
double tr__res_get(const tr__res *r, const char *name);
/* Parses "name=qty[,name=qty...]" into r (adding). Returns 0 or TR_EINVAL. */
int tr__res_parse(tr__res *r, const char *text);
/* Writes "name=qty,..." (quantities > 0). */
void tr__res_format(const tr__res *r, char *out, size_t cap);

bool tr__res_fits(const tr__res *req, const tr__res *avail);
/* avail -= req (caller checked fits). */
void tr__res_take(tr__res *avail, const tr__res *req);
/* avail += req. */
void tr__res_give(tr__res *avail, const tr__res *req);

#endif
