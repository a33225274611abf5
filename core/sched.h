/* core/sched.h - resource accounting for one node: named quantities ("CPU", "GPU", custom),
 * and the whole cores the node binds actors to.
 *
 * A request fits if every quantity it asks for (> 0) is available; it can ever fit if the
 * node's totals cover it. Acquire/release move quantities between available and used.
 * Cores are handed out whole, lowest id first, to actors that ask for whole CPUs; when
 * too few are free an actor gets none and floats (binding is best-effort).
 * Pure data, no I/O; the node's loop thread owns it (not thread-safe).
 */
#ifndef TR_CORE_SCHED_H
#define TR_CORE_SCHED_H

#include <stdbool.h>
#include <stddef.h>

/* Names per node: its own (CPU, GPU, custom) and those its placement groups' bundles add
 * (actor/pgroup.h: two per resource of a bundle, and two markers). */
#define TR__MAX_RES 128
#define TR__RES_NAME 32

typedef struct tr__res {
    int n;
    char name[TR__MAX_RES][TR__RES_NAME];
    double qty[TR__MAX_RES];
} tr__res;

/* Adds qty to name (creating it). Returns 0, TR_EINVAL (bad name/qty, table full). */
int tr__res_add(tr__res *r, const char *name, double qty);
double tr__res_get(const tr__res *r, const char *name);
/* Whether name is in r (with any quantity, 0 included). */
bool tr__res_has(const tr__res *r, const char *name);
/* Removes name from r (no-op if absent). */
void tr__res_drop(tr__res *r, const char *name);
/* Parses "name=qty[,name=qty...]" into r (adding). Returns 0 or TR_EINVAL. */
int tr__res_parse(tr__res *r, const char *text);
/* Writes "name=qty,..." (quantities > 0). */
void tr__res_format(const tr__res *r, char *out, size_t cap);

bool tr__res_fits(const tr__res *req, const tr__res *avail);
/* avail -= req (caller checked fits). */
void tr__res_take(tr__res *avail, const tr__res *req);
/* avail += req. */
void tr__res_give(tr__res *avail, const tr__res *req);

#define TR__MAX_CORES 1024 /* CPU_SETSIZE */

/* The CPUs a node may run its workers on, and which of them actors hold. */
typedef struct tr__cores {
    int n;                   /* CPUs the node may use */
    short id[TR__MAX_CORES]; /* their ids, ascending */
    unsigned char taken[TR__MAX_CORES];
} tr__cores;

/* The node's CPUs: ids (any order, duplicates ignored), n of them. */
void tr__cores_init(tr__cores *c, const int *ids, int n);
/* Takes k free cores (lowest ids first) into out; returns k, or 0 (taking none) if fewer
 * than k are free or k < 1. */
int tr__cores_take(tr__cores *c, int k, int *out);
/* Gives back cores taken before (unknown or free ids are ignored). */
void tr__cores_give(tr__cores *c, const int *ids, int k);
/* "0,2,3" (ascending as given); "" for none. */
void tr__cores_format(const int *ids, int k, char *out, size_t cap);
/* Parses "0,2,3" or ranges "0-3,6" into up to cap ids; returns how many, or -1 if the
 * text is malformed or an id is outside [0, TR__MAX_CORES). */
int tr__cores_parse(const char *text, int *out, int cap);

#define TR__MAX_GPUS 64

/* The node's GPUs (ids 0..n-1, as CUDA numbers the devices the node sees) and how much of
 * each is taken: an actor that asks for k >= 1 (whole) GPUs gets k free devices; one that
 * asks for k < 1 shares a device with others, as Ray's fractional GPUs. */
typedef struct tr__gpus {
    int n;
    double used[TR__MAX_GPUS];
    char name[TR__MAX_GPUS][96]; /* as CUDA_VISIBLE_DEVICES names it: "0", a UUID, a MIG */
} tr__gpus;

/* n devices named "0".."n-1"; or, if `visible` (the node's own CUDA_VISIBLE_DEVICES) is
 * set, by its comma-separated names in order, and no more devices than it names (an
 * empty or over-long name ends the list: the rest would not be the node's). */
void tr__gpus_init(tr__gpus *g, int n, const char *visible);
/* The names of devices ids[0..n) joined by commas ("" for none): a CUDA_VISIBLE_DEVICES. */
void tr__gpus_format(const tr__gpus *g, const int *ids, int n, char *out, size_t cap);
/* Whether k GPUs can be placed now (k whole and >= 1, or 0 < k < 1). 1 for k == 0. */
int tr__gpus_fit(const tr__gpus *g, double k);
/* Takes k GPUs (they fit): their ids into out (cap of them); returns how many (0 for
 * k == 0). A fraction goes to the device with the least room that has enough. */
int tr__gpus_take(tr__gpus *g, double k, int *out, int cap);
/* Gives back what tr__gpus_take gave for the same k. */
void tr__gpus_give(tr__gpus *g, double k, const int *ids, int n);

#endif
