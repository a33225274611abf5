/* core/trace.c - each process's event and flight-recorder rings, and their readers
 * (core/trace.h). */
#include "core/trace.h"

#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/status.h"

tr__trace_hdr *tr__trace_self;
__attribute__((visibility("hidden"))) __thread const char *tr__trace_method;
static __thread uint32_t my_tid;

/* ---- writing ---------------------------------------------------------------------- */

static void copy_str(char *dst, size_t cap, const char *s, size_t n) {
    if (n >= cap) n = cap - 1;
    memcpy(dst, s, n);
    dst[n] = '\0';
}

static int64_t realtime_minus_mono(void) {
    struct timespec r;
    clock_gettime(CLOCK_REALTIME, &r);
    int64_t m = tr__now_ns();
    return (int64_t)r.tv_sec * 1000000000 + r.tv_nsec - m;
}

int tr__trace_open(const char *node_path, const char *role, const char *label,
                   const char *actor_hex) {
    tr__trace_close();
    const char *off = getenv("TROUPE_TRACE"); /* "0": nothing recorded (to measure its cost) */
    if (off && strcmp(off, "0") == 0) return 0;
    const char *slash = node_path ? strrchr(node_path, '/') : NULL;
    if (!slash || slash == node_path || (size_t)(slash - node_path) > 400)
        return tr__err(TR_EINVAL, "trace: %s is not a node's socket path",
                       node_path ? node_path : "(null)");
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%.*s/%s", (int)(slash - node_path), node_path, TR__TRACE_DIR);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) return tr__err_errno(errno, "mkdir %s", dir);
    snprintf(path, sizeof path, "%s/%d", dir, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return tr__err_errno(errno, "open %s", path);
    void *p = MAP_FAILED;
    if (ftruncate(fd, sizeof(tr__trace_hdr)) == 0)
        p = mmap(NULL, sizeof(tr__trace_hdr), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) {
        unlink(path);
        return tr__err_errno(e, "mapping %s", path);
    }
    tr__trace_hdr *h = p;
    h->size = sizeof *h;
    h->pid = (int32_t)getpid();
    h->anchor = realtime_minus_mono();
    h->opened = tr__now_ns();
    copy_str(h->role, sizeof h->role, role ? role : "", role ? strlen(role) : 0);
    copy_str(h->label, sizeof h->label, label ? label : "", label ? strlen(label) : 0);
    copy_str(h->actor, sizeof h->actor, actor_hex ? actor_hex : "",
             actor_hex ? strlen(actor_hex) : 0);
    __atomic_store_n(&h->magic, TR__TRACE_MAGIC, __ATOMIC_RELEASE);
    __atomic_store_n(&tr__trace_self, h, __ATOMIC_RELEASE);
    return 0;
}

void tr__trace_close(void) {
    tr__book_flush(); /* (this thread's last op) */
    tr__trace_hdr *h = __atomic_exchange_n(&tr__trace_self, NULL, __ATOMIC_ACQ_REL);
    if (h) munmap(h, sizeof *h);
}

uint32_t tr__trace_tid(void) {
    if (!my_tid) my_tid = (uint32_t)syscall(SYS_gettid);
    return my_tid;
}

/* Writes event number i (claimed from h->head). */
static void ev_write(tr__trace_hdr *h, uint64_t i, int kind, int64_t t0, int64_t t1,
                     const char *name, size_t name_len, uint64_t flow, uint64_t value, int failed) {
    union {
        uint64_t w[3];
        char c[24];
    } tail = {{0, 0, 0}};
    tail.c[0] = (char)kind;
    tail.c[1] = failed != 0;
    if (name && name_len > 21) { /* too long: its last dotted part, or its end */
        const char *dot = NULL;
        for (size_t k = name_len; k-- > 0 && !dot;)
            if (name[k] == '.' || name[k] == ':') dot = name + k + 1;
        size_t rest = dot ? name_len - (size_t)(dot - name) : 0;
        if (dot && rest && rest <= 21) {
            name = dot;
            name_len = rest;
        } else {
            name += name_len - 21;
            name_len = 21;
        }
    }
    if (name) memcpy(tail.c + 2, name, name_len);
    tr__trace_ev *e = &h->ev[i & (TR__TRACE_EVENTS - 1)];
    /* (a seqlock: seq 0 first, each field after it - release stores, plain moves on x86 -
     * and seq last; read_ev checks it before and after) */
    __atomic_store_n(&e->seq, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&e->tid, tr__trace_tid(), __ATOMIC_RELEASE);
    __atomic_store_n(&e->ts, t0, __ATOMIC_RELEASE);
    __atomic_store_n(&e->dur, t1 - t0, __ATOMIC_RELEASE);
    __atomic_store_n(&e->flow, flow, __ATOMIC_RELEASE);
    __atomic_store_n(&e->value, value, __ATOMIC_RELEASE);
    for (int k = 0; k < 3; k++)
        __atomic_store_n(&e->tail[k], tail.w[k], __ATOMIC_RELEASE);
    __atomic_store_n(&e->seq, (uint32_t)(i + 1), __ATOMIC_RELEASE);
}

void tr__trace_ev_add(int kind, int64_t t0, int64_t t1, const char *name, size_t name_len,
                      uint64_t flow, uint64_t value, int failed) {
    tr__trace_hdr *h = __atomic_load_n(&tr__trace_self, __ATOMIC_ACQUIRE);
    if (!h) return;
    uint64_t i = __atomic_fetch_add(&h->head, 1, __ATOMIC_RELAXED);
    ev_write(h, i, kind, t0, t1, name, name_len, flow, value, failed);
}

/* ---- a collective op's accounting, gathered --------------------------------------- */

/* A thread's gathered ops go out at least this often (ns) while it runs them. */
#define BOOK_NS 10000000

/* What a thread's ops have gathered since they last went out (malloc'ed once a thread, on
 * its first op: TLS holds the pointer alone). */
typedef struct book {
    tr__coll_counters cnt; /* (ops, bytes, ns: a failed op is not gathered) */
    tr__hist hist[TR__CNT_BACKENDS];
    tr__burst ev;  /* their timeline events */
    int64_t since; /* the first one's end */
} book;

__attribute__((visibility("hidden"))) __thread int tr__book_pending;
__attribute__((visibility("hidden"))) __thread int tr__book_on;
static _Thread_local book *book_self;
static pthread_key_t book_key;
static int book_key_ok;
static pthread_once_t book_once = PTHREAD_ONCE_INIT;

static void book_at_exit(void *b) { /* (the thread's key: its book, done and freed) */
    tr__book_flush();
    book_self = NULL;
    free(b);
}

static void book_make_key(void) {
    book_key_ok = pthread_key_create(&book_key, book_at_exit) == 0;
}

/* This thread's book (NULL: none can be had, and ops are counted one by one). */
static book *book_get(void) {
    if (book_self) return book_self;
    pthread_once(&book_once, book_make_key);
    book *b = book_key_ok ? calloc(1, sizeof *b) : NULL;
    if (b && pthread_setspecific(book_key, b)) { /* (its exit would not free it) */
        free(b);
        b = NULL;
    }
    return book_self = b;
}

void tr__book_flush_now(void) {
    book *b = book_self;
    tr__book_pending = 0;
    if (!b) return;
    tr__coll_counters *c = __atomic_load_n(&tr__coll_counters_self, __ATOMIC_ACQUIRE);
    tr__proc_counters *pc = tr__proc_cnt();
    for (int be = 0; be < TR__CNT_BACKENDS; be++) {
        for (int k = 0; k < TR__CNT_OPS; k++) {
            tr__coll_counters *g = &b->cnt;
            if (!g->ops[be][k]) continue;
            if (c) {
                __atomic_fetch_add(&c->ops[be][k], g->ops[be][k], __ATOMIC_RELAXED);
                __atomic_fetch_add(&c->bytes[be][k], g->bytes[be][k], __ATOMIC_RELAXED);
                __atomic_fetch_add(&c->ns[be][k], g->ns[be][k], __ATOMIC_RELAXED);
            }
            g->ops[be][k] = g->bytes[be][k] = g->ns[be][k] = 0;
        }
        if (pc)
            tr__hist_merge(&pc->coll[be], &b->hist[be]);
        else
            memset(&b->hist[be], 0, sizeof b->hist[be]);
    }
    tr__burst_flush(&b->ev, TR__EV_COLL, NULL);
}

void tr__book_coll(int backend, int kind, uint64_t bytes, int64_t t0, int64_t t1, uint64_t flow,
                   int rc) {
    uint64_t ns = (uint64_t)(t1 - t0);
    const char *name = tr__coll_op_name((unsigned)kind);
    book *b = !tr__book_on || rc || backend < 0 || backend >= TR__CNT_BACKENDS || kind <= 0 ||
                      kind >= TR__CNT_OPS
                  ? NULL
                  : book_get();
    if (!b) { /* (a failed op goes out at once, after those before it, as any op without a book) */
        tr__book_flush();
        tr__cnt_coll(backend, kind, bytes, ns, rc);
        tr__proc_counters *pc = tr__proc_cnt();
        if (pc && backend >= 0 && backend < TR__CNT_BACKENDS)
            tr__hist_add(&pc->coll[backend], ns, rc != 0);
        tr__trace_ev_add(TR__EV_COLL, t0, t1, name, strlen(name), flow, bytes, rc != 0);
        return;
    }
    if (b->ev.n == TR__BURST) tr__book_flush_now();
    b->cnt.ops[backend][kind]++;
    b->cnt.bytes[backend][kind] += bytes;
    b->cnt.ns[backend][kind] += ns;
    tr__hist_add_local(&b->hist[backend], ns, 0);
    tr__burst_push_flow(&b->ev, t0, t1, name, flow, 0);
    b->ev.ev[b->ev.n - 1].value = bytes;
    if (!tr__book_pending) {
        b->since = t1;
        tr__book_pending = 1;
    } else if (t1 - b->since >= BOOK_NS) {
        tr__book_flush_now();
    }
}

/* ---- slices in bursts ------------------------------------------------------------- */

#if defined(__x86_64__)
#include <x86intrin.h>
static inline int64_t ticks_now(void) {
    return (int64_t)__rdtsc();
}
#else
static inline int64_t ticks_now(void) {
    return 0;
}
#endif

/* The kernel keeps time with the TSC only where it found it invariant and in step across
 * CPUs: then ticks and clock_gettime agree up to their ratio. */
static int ticks_probe(void) {
#if defined(__x86_64__)
    const char *off = getenv("TROUPE_TICKS"); /* "0": clock reads only (to compare) */
    if (off && strcmp(off, "0") == 0) return 0;
    char cs[32] = "";
    int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                  O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, cs, sizeof cs - 1);
    close(fd);
    return n >= 3 && strncmp(cs, "tsc", 3) == 0 && (n == 3 || cs[3] == '\n');
#else
    return 0;
#endif
}

int tr__ticks_usable(void) {
    static int verdict = -1; /* (racing first callers compute the same answer) */
    int v = __atomic_load_n(&verdict, __ATOMIC_RELAXED);
    if (v < 0) __atomic_store_n(&verdict, v = ticks_probe(), __ATOMIC_RELAXED);
    return v;
}

int64_t tr__burst_stamp(tr__burst *b, uint8_t *ticks) {
    if (!tr__ticks_usable()) {
        *ticks = 0;
        return tr__now_ns();
    }
    *ticks = 1;
    if (b->tk0) return ticks_now();
    b->ns0 = tr__now_ns();
    b->tk0 = (uint64_t)ticks_now();
    return (int64_t)b->tk0;
}

void tr__burst_flush(tr__burst *b, int kind, tr__hist *hist) {
    if (!b->n) return;
    double per_tick = 0; /* ns a tick, between the anchor and now */
    int64_t ns1 = 0;
    if (b->tk0) {
        ns1 = tr__now_ns();
        uint64_t tk1 = (uint64_t)ticks_now();
        if (tk1 > b->tk0) per_tick = (double)(ns1 - b->ns0) / (double)(tk1 - b->tk0);
    }
    tr__trace_hdr *h = __atomic_load_n(&tr__trace_self, __ATOMIC_ACQUIRE);
    uint64_t i = h ? __atomic_fetch_add(&h->head, b->n, __ATOMIC_RELAXED) : 0;
    for (size_t k = 0; k < b->n; k++) {
        tr__burst_ev *e = &b->ev[k];
        int64_t t0 = e->t0, t1 = e->t1;
        if (e->ticks) { /* (a tick before the anchor: none is; clamped all the same) */
            int64_t d0 = (int64_t)((uint64_t)t0 - b->tk0), d1 = (int64_t)((uint64_t)t1 - b->tk0);
            t0 = b->ns0 + (d0 > 0 ? (int64_t)((double)d0 * per_tick) : 0);
            t1 = b->ns0 + (d1 > 0 ? (int64_t)((double)d1 * per_tick) : 0);
            if (t1 > ns1) t1 = ns1;
            if (t0 > t1) t0 = t1;
        }
        if (h)
            ev_write(h, i + k, kind, t0, t1, e->name, e->name ? strlen(e->name) : 0, e->flow,
                     e->value, e->failed);
        if (hist) tr__hist_add_local(hist, (uint64_t)(t1 - t0), e->failed);
    }
    b->n = 0;
    b->tk0 = 0;
}

/* FNV-1a, 64 bits, over the pieces; never 0 */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* (on every call, both ends: a few multiplies, not a byte loop) */
uint64_t tr__trace_call_flow(int32_t caller_pid, const uint8_t actor[16], uint64_t seq) {
    uint64_t a, b;
    memcpy(&a, actor, 8);
    memcpy(&b, actor + 8, 8);
    uint64_t h = (uint64_t)(uint32_t)caller_pid * 0x9e3779b97f4a7c15ull ^ a ^
                 (b * 0xbf58476d1ce4e5b9ull) ^ (seq * 0x94d049bb133111ebull);
    h ^= h >> 31; /* (splitmix64's finish) */
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    return h ? h : 1;
}

uint64_t tr__flight_flow_key(const char *group) {
    return fnv(14695981039346656037ull ^ 0x636f6c6c, group, strlen(group));
}

uint64_t tr__flight_flow_at(uint64_t key, uint64_t seq) {
    uint64_t h = fnv(key, &seq, sizeof seq);
    return h ? h : 1;
}

uint64_t tr__flight_flow(const char *group, uint64_t seq) {
    return tr__flight_flow_at(tr__flight_flow_key(group), seq);
}

/* (a process's slots are chosen under this; an op's entry is its rank's thread's alone,
 * its state stored last) */
static pthread_mutex_t flight_mu = PTHREAD_MUTEX_INITIALIZER;

static int in_op(const tr__flight_group *g) {
    if (!g->name[0] || !g->ops) return 0;
    uint8_t st =
        __atomic_load_n(&g->ring[(g->ops - 1) & (TR__FLIGHT_OPS - 1)].state, __ATOMIC_ACQUIRE);
    return st == TR__FL_SCHEDULED || st == TR__FL_STARTED;
}

static tr__flight_op *flight_begin(tr__trace_hdr *h, const char *group, const char *backend,
                                   int rank, int world, int kind, int dtype, uint64_t count,
                                   int root, int64_t now);

tr__flight_op *tr__flight_begin(const char *group, const char *backend, int rank, int world,
                                int kind, int dtype, uint64_t count, int root, int64_t now) {
    tr__trace_hdr *h = __atomic_load_n(&tr__trace_self, __ATOMIC_ACQUIRE);
    if (!h || !group) return NULL;
    pthread_mutex_lock(&flight_mu);
    tr__flight_op *op = flight_begin(h, group, backend, rank, world, kind, dtype, count, root, now);
    pthread_mutex_unlock(&flight_mu);
    return op;
}

static tr__flight_op *flight_begin(tr__trace_hdr *h, const char *group, const char *backend,
                                   int rank, int world, int kind, int dtype, uint64_t count,
                                   int root, int64_t now) {
    tr__flight_group *g = NULL, *oldest = NULL;
    for (int i = 0; i < TR__FLIGHT_GROUPS && !g; i++) {
        tr__flight_group *c = &h->groups[i];
        if (c->name[0] && c->rank == rank && strncmp(c->name, group, sizeof c->name) == 0)
            g = c;
        else if (!in_op(c) &&
                 (!oldest || (oldest->name[0] && (!c->name[0] || c->used < oldest->used))))
            oldest = c;
    }
    if (!g) { /* a new group here: a free slot, or the one used longest ago (not in an op) */
        if (!oldest) return NULL;
        g = oldest;
        __atomic_store_n(&g->name[0], '\0', __ATOMIC_SEQ_CST);
        memset(g->ring, 0, sizeof g->ring);
        g->ops = 0;
        g->rank = rank;
        g->world = world;
        copy_str(g->backend, sizeof g->backend, backend ? backend : "",
                 backend ? strlen(backend) : 0);
        copy_str(g->name, sizeof g->name, group, strlen(group));
    }
    g->used = now;
    uint64_t seq = g->ops + 1;
    tr__flight_op *op = &g->ring[(seq - 1) & (TR__FLIGHT_OPS - 1)];
    __atomic_store_n(&op->state, TR__FL_FREE, __ATOMIC_RELAXED);
    op->seq = seq;
    op->t_sched = now;
    op->t_start = op->t_end = 0;
    op->count = count;
    op->root = root;
    op->rc = 0;
    op->kind = (uint8_t)kind;
    op->dtype = (uint8_t)dtype;
    const char *m = tr__trace_method ? tr__trace_method : "";
    copy_str(op->method, sizeof op->method, m, strlen(m));
    __atomic_store_n(&op->state, TR__FL_SCHEDULED, __ATOMIC_RELEASE);
    __atomic_store_n(&g->ops, seq, __ATOMIC_RELEASE);
    return op;
}

void tr__flight_started(tr__flight_op *op, int64_t now) {
    if (!op) return;
    op->t_start = now;
    __atomic_store_n(&op->state, TR__FL_STARTED, __ATOMIC_RELEASE);
}

void tr__flight_end(tr__flight_op *op, int rc, int64_t now) {
    if (!op) return;
    op->t_end = now;
    op->rc = rc;
    __atomic_store_n(&op->state, rc ? TR__FL_FAILED : TR__FL_COMPLETED, __ATOMIC_RELEASE);
}

/* ---- reading ---------------------------------------------------------------------- */

#define bprintf tr__buf_printf

/* A bounded string of a mapped file, as a NUL-terminated copy. */
static void field_str(char *dst, size_t cap, const char *src, size_t src_cap) {
    copy_str(dst, cap, src, strnlen(src, src_cap));
}

typedef struct mapped {
    const tr__trace_hdr *h;
    int pid;   /* its own */
    int tpid;  /* in the merged timeline: pid + its directory's index * 10000000 */
    int alive; /* it runs (here, or - a copy - where its node said) */
} mapped;

static int alive(int pid);

/* Maps every well-formed file of dirs (':'-separated), read-only. Returns how many (*out
 * malloc'd). */
static size_t map_all(const char *dirs, mapped **out) {
    *out = NULL;
    size_t n = 0, cap = 0;
    mapped *m = NULL;
    int index = 0;
    for (const char *at = dirs; at && *at; index++) {
        const char *colon = strchr(at, ':');
        size_t len = colon ? (size_t)(colon - at) : strlen(at);
        char dir[800];
        snprintf(dir, sizeof dir, "%.*s", (int)(len < sizeof dir ? len : sizeof dir - 1), at);
        at = colon ? colon + 1 : NULL;
        DIR *d = opendir(dir);
        if (!d) continue;
        struct dirent *e;
        while ((e = readdir(d))) {
            char *end;
            long pid = strtol(e->d_name, &end, 10);
            if (*end || pid <= 0) continue;
            int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
            if (fd < 0) continue;
            struct stat st;
            void *p = MAP_FAILED;
            if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                (size_t)st.st_size == sizeof(tr__trace_hdr))
                p = mmap(NULL, sizeof(tr__trace_hdr), PROT_READ, MAP_SHARED, fd, 0);
            close(fd);
            if (p == MAP_FAILED) continue;
            const tr__trace_hdr *h = p;
            if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != TR__TRACE_MAGIC ||
                h->size != sizeof *h || h->pid != pid) {
                munmap(p, sizeof *h);
                continue;
            }
            if (n == cap) {
                cap = cap ? cap * 2 : 32;
                mapped *g = realloc(m, cap * sizeof *m);
                if (!g) {
                    munmap(p, sizeof *h);
                    break;
                }
                m = g;
            }
            m[n].h = h;
            m[n].pid = (int)pid;
            m[n].tpid = (int)pid + index * 10000000;
            m[n].alive = h->copy ? h->copy == 1 : alive((int)pid);
            n++;
        }
        closedir(d);
    }
    *out = m;
    return n;
}

static void unmap_all(mapped *m, size_t n) {
    for (size_t i = 0; i < n; i++)
        munmap((void *)m[i].h, sizeof *m[i].h);
    free(m);
}

/* Whether pid runs: not a zombie, and not on its way out (PF_EXITING: a process killed
 * with SIGKILL has closed its sockets, which its peers saw, before it is a zombie). */
static int alive(int pid) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
    char p[64], buf[256];
    snprintf(p, sizeof p, "/proc/%d/stat", pid);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1; /* (no /proc: kill said it lives) */
    ssize_t k = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (k <= 0) return 0;
    buf[k] = '\0';
    const char *rp = strrchr(buf, ')');
    if (!rp || rp[1] != ' ') return 1;
    if (rp[2] == 'Z' || rp[2] == 'X') return 0;
    /* ") state ppid pgrp session tty_nr tpgid flags" */
    unsigned long flags = 0;
    if (sscanf(rp + 2, "%*c %*d %*d %*d %*d %*d %lu", &flags) == 1 && (flags & 0x4)) return 0;
    return 1;
}

/* one event, as merged */
typedef struct rec {
    int64_t ts, dur; /* wall-clock ns */
    uint64_t flow, value;
    int pid;
    uint32_t tid;
    uint16_t kind;
    uint8_t failed, async;
    char name[22];
} rec;

static int by_track(const void *a, const void *b) {
    const rec *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    if (x->dur != y->dur) return x->dur > y->dur ? -1 : 1; /* the outer one first */
    return 0;
}

static int by_flow(const void *a, const void *b) {
    const rec *x = *(const rec *const *)a, *y = *(const rec *const *)b;
    if (x->flow != y->flow) return x->flow < y->flow ? -1 : 1;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return x->pid < y->pid ? -1 : x->pid > y->pid;
}

static const char *const cats[TR__EV_KINDS] = {"",    "submit",     "call",  "get",
                                               "put", "collective", "graph", "pull"};

static void ts_us(tr__buf *b, const char *key, int64_t ns) {
    if (ns < 0) ns = 0;
    bprintf(b, ",\"%s\":%lld.%03lld", key, (long long)(ns / 1000), (long long)(ns % 1000));
}

static void ev_head(tr__buf *b, const char *ph, const rec *r, int64_t ts) {
    bprintf(b, ",\n{\"ph\":\"%s\",\"cat\":\"%s\",\"name\":", ph,
            r->kind < TR__EV_KINDS ? cats[r->kind] : "?");
    tr__buf_json_str(b, r->name[0] ? r->name : "?");
    bprintf(b, ",\"pid\":%d,\"tid\":%u", r->pid, r->tid);
    ts_us(b, "ts", ts);
}

static void ev_args(tr__buf *b, const rec *r) {
    const char *what = r->kind == TR__EV_STEP ? "execution" : "bytes";
    int has_value = r->kind >= TR__EV_GET;
    bprintf(b, ",\"args\":{");
    if (has_value) bprintf(b, "\"%s\":%llu", what, (unsigned long long)r->value);
    if (r->failed) bprintf(b, "%s\"failed\":true", has_value ? "," : "");
    bprintf(b, "}}");
}

/* Event i of a file, if it is there whole (its seq before and after the fields: acquire
 * loads, plain moves on x86, keep the last check after them). 1, or 0. */
static int read_ev(const tr__trace_hdr *h, uint64_t i, tr__trace_ev *out) {
    const tr__trace_ev *e = &h->ev[i & (TR__TRACE_EVENTS - 1)];
    uint32_t want = (uint32_t)(i + 1);
    if (__atomic_load_n(&e->seq, __ATOMIC_ACQUIRE) != want) return 0;
    out->tid = __atomic_load_n(&e->tid, __ATOMIC_ACQUIRE);
    out->ts = __atomic_load_n(&e->ts, __ATOMIC_ACQUIRE);
    out->dur = __atomic_load_n(&e->dur, __ATOMIC_ACQUIRE);
    out->flow = __atomic_load_n(&e->flow, __ATOMIC_ACQUIRE);
    out->value = __atomic_load_n(&e->value, __ATOMIC_ACQUIRE);
    for (int k = 0; k < 3; k++)
        out->tail[k] = __atomic_load_n(&e->tail[k], __ATOMIC_ACQUIRE);
    return __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE) == want; /* (not rewritten meanwhile) */
}

int tr__trace_timeline(const char *dirs, tr__buf *out) {
    mapped *m;
    size_t n = map_all(dirs, &m), nr = 0;
    rec *r = n ? malloc(n * TR__TRACE_EVENTS * sizeof *r) : NULL;
    if (n && !r) {
        unmap_all(m, n);
        return tr__err(TR_ENOMEM, "timeline");
    }
    tr__buf names = TR__BUF_INIT; /* the processes' metadata, after the first event's */
    for (size_t f = 0; f < n; f++) {
        const tr__trace_hdr *h = m[f].h;
        char role[16], own[64], actor[40];
        field_str(role, sizeof role, h->role, sizeof h->role);
        field_str(own, sizeof own, h->label, sizeof h->label);
        field_str(actor, sizeof actor, h->actor, sizeof h->actor);
        char pname[400];
        snprintf(pname, sizeof pname, "%s%s%s%.8s%s (pid %d)", own, own[0] ? " " : "",
                 actor[0] ? "actor " : role, actor, actor[0] ? "…" : "", m[f].pid);
        bprintf(
            &names,
            ",\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":",
            m[f].tpid);
        tr__buf_json_str(&names, pname);
        bprintf(&names, "}}");
        uint64_t head = __atomic_load_n(&h->head, __ATOMIC_ACQUIRE);
        uint64_t from = head > TR__TRACE_EVENTS ? head - TR__TRACE_EVENTS : 0;
        for (uint64_t i = from; i < head; i++) {
            tr__trace_ev e;
            if (!read_ev(h, i, &e)) continue;
            rec x;
            x.ts = e.ts + h->anchor;
            x.dur = e.dur < 0 ? 0 : e.dur;
            x.flow = e.flow;
            x.value = e.value;
            x.pid = m[f].tpid;
            x.tid = e.tid;
            const char *tail = (const char *)e.tail;
            x.kind = (uint8_t)tail[0];
            x.failed = tail[1] != 0;
            x.async = 0;
            field_str(x.name, sizeof x.name, tail + 2, 22);
            if (x.kind == 0 || x.kind >= TR__EV_KINDS) continue;
            r[nr++] = x;
        }
    }
    unmap_all(m, n);
    /* Times count from the first event: a JSON number is a double, and an absolute time in
     * µs (1.8e15) keeps only a quarter of one, enough to make neighbouring slices overlap. */
    int64_t base = INT64_MAX;
    for (size_t i = 0; i < nr; i++)
        if (r[i].ts < base) base = r[i].ts;
    if (!nr) base = 0;
    for (size_t i = 0; i < nr; i++)
        r[i].ts -= base;
    tr__buf_append(out, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", 39);
    bprintf(out,
            "\n{\"ph\":\"M\",\"name\":\"troupe\",\"pid\":0,\"tid\":0,\"args\":{\"files\":%zu,"
            "\"base_unix_ns\":%lld}}",
            n, (long long)base);
    if (names.len) tr__buf_append(out, names.data, names.len);
    if (names.oom) out->oom = 1;
    tr__buf_free(&names);
    /* Slices nest on a thread's track; one that overlaps another without nesting (a call
     * that went on elsewhere, e.g. on an event loop) becomes an async slice. */
    if (nr) qsort(r, nr, sizeof *r, by_track);
    int64_t stack[64];
    int depth = 0;
    for (size_t i = 0; i < nr; i++) {
        if (i == 0 || r[i].pid != r[i - 1].pid || r[i].tid != r[i - 1].tid) depth = 0;
        while (depth && stack[depth - 1] <= r[i].ts)
            depth--;
        int64_t end = r[i].ts + r[i].dur;
        if ((depth && end > stack[depth - 1]) || depth == 64) {
            r[i].async = 1;
            continue;
        }
        stack[depth++] = end;
    }
    rec **fl = nr ? malloc(nr * sizeof *fl) : NULL;
    size_t nf = 0;
    for (size_t i = 0; i < nr; i++) {
        rec *x = &r[i];
        if (x->async) {
            uint64_t id = tr__trace_call_flow(x->pid, (const uint8_t *)"async-slice-id..", i);
            ev_head(out, "b", x, x->ts);
            bprintf(out, ",\"id\":\"0x%llx\"", (unsigned long long)id);
            ev_args(out, x);
            ev_head(out, "e", x, x->ts + x->dur);
            bprintf(out, ",\"id\":\"0x%llx\",\"args\":{}}", (unsigned long long)id);
        } else {
            ev_head(out, "X", x, x->ts);
            ts_us(out, "dur", x->dur);
            ev_args(out, x);
            if (x->flow && fl) fl[nf++] = x;
        }
    }
    /* Flow arrows: a call's submission to its run, a collective op from rank to rank in the
     * order they entered; only where at least two ends are here. */
    if (nf) qsort(fl, nf, sizeof *fl, by_flow);
    for (size_t i = 0; i < nf;) {
        size_t j = i;
        while (j < nf && fl[j]->flow == fl[i]->flow)
            j++;
        for (size_t k = i; j - i >= 2 && k < j; k++) {
            const rec *x = fl[k];
            const char *ph = k == i ? "s" : k == j - 1 ? "f" : "t";
            bprintf(out, ",\n{\"ph\":\"%s\",\"cat\":\"flow\",\"name\":\"%s\",\"pid\":%d,\"tid\":%u",
                    ph, x->kind == TR__EV_COLL ? "op" : "call", x->pid, x->tid);
            ts_us(out, "ts", x->ts);
            bprintf(out, ",\"id\":\"0x%llx\"%s}", (unsigned long long)x->flow,
                    k == i ? "" : ",\"bp\":\"e\"");
        }
        i = j;
    }
    free(fl);
    free(r);
    tr__buf_append(out, "\n]}\n", 4);
    return out->oom ? tr__err(TR_ENOMEM, "timeline") : 0;
}

/* ---- the flight recorder's verdicts ------------------------------------------------- */

static const char *const op_names[] = {
    "",       "barrier", "allreduce",     "broadcast", "reduce", "allgather",
    "gather", "scatter", "reducescatter", "alltoall",  "send",   "recv"};
const char *tr__coll_op_name(unsigned k) {
    return k < sizeof op_names / sizeof *op_names ? op_names[k] : "?";
}
static const char *const state_names[] = {"free", "scheduled", "started", "completed", "failed"};

/* a rank as one file shows it */
typedef struct rank_view {
    const tr__flight_group *g;
    int pid, alive;
    int64_t anchor;
    tr__flight_op ops[TR__FLIGHT_OPS]; /* a copy, oldest first */
    int n_ops;
} rank_view;

static void view_of(rank_view *v, const tr__flight_group *g, int pid, int is_alive,
                    int64_t anchor) {
    v->g = g;
    v->pid = pid;
    v->alive = is_alive;
    v->anchor = anchor;
    v->n_ops = 0;
    uint64_t top = __atomic_load_n(&g->ops, __ATOMIC_ACQUIRE);
    uint64_t from = top > TR__FLIGHT_OPS ? top - TR__FLIGHT_OPS + 1 : 1;
    for (uint64_t s = from; s <= top; s++) {
        tr__flight_op o = g->ring[(s - 1) & (TR__FLIGHT_OPS - 1)];
        if (o.seq != s || o.state == TR__FL_FREE || o.state > TR__FL_FAILED) continue;
        o.method[sizeof o.method - 1] = '\0';
        v->ops[v->n_ops++] = o;
    }
}

static const tr__flight_op *last_op(const rank_view *v) {
    return v->n_ops ? &v->ops[v->n_ops - 1] : NULL;
}

static uint64_t last_completed(const rank_view *v) {
    for (int i = v->n_ops - 1; i >= 0; i--)
        if (v->ops[i].state == TR__FL_COMPLETED) return v->ops[i].seq;
    return 0;
}

/* Appends the verdict of one group (its ranks here, by rank; NULL: not on this node). */
static void group_verdict(const char *name, int world, rank_view **by_rank, tr__buf *t) {
    uint64_t top = 0;
    unsigned top_kind = 0;
    int bad = 0, here = 0;
    for (int r = 0; r < world; r++) {
        const rank_view *v = by_rank[r];
        if (!v) continue;
        here++;
        const tr__flight_op *o = last_op(v);
        if (o && o->seq > top) top = o->seq, top_kind = o->kind;
    }
    /* the causes first (a rank that died in an op, one that never entered it), then the
     * failures they made (only where no cause is here), then ranks gone since */
    for (int pass = 0; pass < 4; pass++) {
        if (pass >= 2 && bad) break;
        for (int r = 0; r < world; r++) {
            const rank_view *v = by_rank[r];
            if (!v) continue;
            const tr__flight_op *o = last_op(v);
            int in_op = o && (o->state == TR__FL_SCHEDULED || o->state == TR__FL_STARTED);
            int failed = o && o->state == TR__FL_FAILED;
            if (pass == 0 && !v->alive && in_op)
                bprintf(t,
                        "%sgroup %s, op #%llu %s: rank %d (pid %d) died during it; its last "
                        "completed op was #%llu",
                        bad++ ? "; " : "", name, (unsigned long long)o->seq,
                        tr__coll_op_name(o->kind), r, v->pid,
                        (unsigned long long)last_completed(v));
            else if (pass == 1 && (o ? o->seq : 0) < top && (v->alive || !failed) &&
                     !(!v->alive && in_op))
                bprintf(t,
                        "%sgroup %s, op #%llu %s: rank %d never entered; its last completed op "
                        "was #%llu",
                        bad++ ? "; " : "", name, (unsigned long long)top,
                        tr__coll_op_name(top_kind), r, (unsigned long long)last_completed(v));
            else if (pass == 2 && failed)
                bprintf(t, "%sgroup %s, op #%llu %s: rank %d failed it (%s)", bad++ ? "; " : "",
                        name, (unsigned long long)o->seq, tr__coll_op_name(o->kind), r,
                        tr__errname(o->rc));
            else if (pass == 3 && !v->alive && !in_op)
                bprintf(t, "%sgroup %s: rank %d (pid %d) is gone; its last op was #%llu",
                        bad++ ? "; " : "", name, r, v->pid, (unsigned long long)(o ? o->seq : 0));
        }
    }
    if (!bad) {
        int in_it = 0;
        for (int r = 0; r < world; r++)
            if (by_rank[r] && last_op(by_rank[r]) && last_op(by_rank[r])->state != TR__FL_COMPLETED)
                in_it++;
        if (!top)
            bprintf(t, "group %s: no op yet", name);
        else if (in_it)
            bprintf(t, "group %s: every rank is in op #%llu %s", name, (unsigned long long)top,
                    tr__coll_op_name(top_kind));
        else
            bprintf(t, "group %s: every rank completed op #%llu %s", name, (unsigned long long)top,
                    tr__coll_op_name(top_kind));
    }
    if (here < world) bprintf(t, " (%d of %d ranks seen)", here, world);
}

static void ops_json(tr__buf *j, const rank_view *v) {
    for (int i = 0; i < v->n_ops; i++) {
        const tr__flight_op *o = &v->ops[i];
        bprintf(j,
                "%s{\"seq\":%llu,\"op\":\"%s\",\"dtype\":%u,\"count\":%llu,\"root\":%d,"
                "\"state\":\"%s\",\"rc\":%d",
                i ? "," : "", (unsigned long long)o->seq, tr__coll_op_name(o->kind), o->dtype,
                (unsigned long long)o->count, o->root, state_names[o->state], o->rc);
        int64_t ts[3] = {o->t_sched, o->t_start, o->t_end};
        const char *keys[3] = {"scheduled", "started", "ended"};
        for (int k = 0; k < 3; k++)
            if (ts[k]) bprintf(j, ",\"%s\":%.6f", keys[k], (double)(ts[k] + v->anchor) / 1e9);
        bprintf(j, ",\"method\":");
        tr__buf_json_str(j, o->method);
        bprintf(j, "}");
    }
}

static int by_name_rank(const void *a, const void *b) {
    const rank_view *x = a, *y = b;
    int c = strncmp(x->g->name, y->g->name, sizeof x->g->name);
    if (c) return c;
    if (x->g->rank != y->g->rank) return x->g->rank < y->g->rank ? -1 : 1;
    return x->g->used > y->g->used ? -1 : x->g->used < y->g->used; /* the newest first */
}

/* Every group with a rank in dirs (or only `group`), in name order: fn with its ranks seen
 * there (by_rank[r]: NULL where none) and its verdict. 0, or TR_ENOMEM. */
typedef void (*group_fn)(void *ctx, const char *name, const char *backend, int world,
                         rank_view **by_rank, const char *verdict);

static int each_group(const char *dirs, const char *group, group_fn fn, void *ctx) {
    mapped *m;
    size_t n = map_all(dirs, &m), nv = 0;
    rank_view *v = n ? malloc(n * TR__FLIGHT_GROUPS * sizeof *v) : NULL;
    if (n && !v) {
        unmap_all(m, n);
        return tr__err(TR_ENOMEM, "flight recorder");
    }
    for (size_t f = 0; f < n; f++)
        for (int i = 0; i < TR__FLIGHT_GROUPS; i++) {
            const tr__flight_group *g = &m[f].h->groups[i];
            if (!g->name[0] || strnlen(g->name, sizeof g->name) == sizeof g->name) continue;
            if (group && strncmp(g->name, group, sizeof g->name) != 0) continue;
            if (g->rank < 0 || g->world <= 0 || g->rank >= g->world || g->world > 4096) continue;
            view_of(&v[nv++], g, m[f].pid, m[f].alive, m[f].h->anchor);
        }
    if (nv) qsort(v, nv, sizeof *v, by_name_rank);
    int rc = 0;
    for (size_t i = 0; i < nv;) {
        size_t j = i;
        while (j < nv && strncmp(v[j].g->name, v[i].g->name, sizeof v[i].g->name) == 0)
            j++;
        int world = v[i].g->world;
        for (size_t k = i; k < j; k++) /* the newest rank's idea of the group's size */
            if (v[k].g->used > v[i].g->used && v[k].g->world > 0) world = v[k].g->world;
        rank_view **by_rank = calloc((size_t)world, sizeof *by_rank);
        if (!by_rank) {
            rc = tr__err(TR_ENOMEM, "flight recorder");
            break;
        }
        for (size_t k = i; k < j; k++) /* (newest first within a rank) */
            if (v[k].g->rank < world && !by_rank[v[k].g->rank]) by_rank[v[k].g->rank] = &v[k];
        char name[200], be[8];
        field_str(name, sizeof name, v[i].g->name, sizeof v[i].g->name);
        field_str(be, sizeof be, v[i].g->backend, sizeof v[i].g->backend);
        tr__buf t = TR__BUF_INIT;
        group_verdict(name, world, by_rank, &t);
        tr__buf_append(&t, "", 1);
        fn(ctx, name, be, world, by_rank, t.data ? t.data : "");
        tr__buf_free(&t);
        free(by_rank);
        i = j;
    }
    free(v);
    unmap_all(m, n);
    return rc;
}

typedef struct verdicts_out {
    tr__buf *text, *json;
    int groups;
} verdicts_out;

static void verdict_out(void *ctx, const char *name, const char *backend, int world,
                        rank_view **by_rank, const char *verdict) {
    verdicts_out *o = ctx;
    if (o->text) {
        tr__buf_append(o->text, verdict, strlen(verdict));
        tr__buf_append(o->text, "\n", 1);
    }
    tr__buf *json = o->json;
    if (json) {
        bprintf(json, "%s{\"name\":", o->groups ? "," : "");
        tr__buf_json_str(json, name);
        bprintf(json, ",\"world\":%d,\"backend\":", world);
        tr__buf_json_str(json, backend);
        tr__buf_append(json, ",\"verdict\":", 11);
        tr__buf_json_str(json, verdict);
        bprintf(json, ",\"ranks\":[");
        int first = 1;
        for (int r = 0; r < world; r++) {
            if (!by_rank[r]) continue;
            bprintf(json, "%s{\"rank\":%d,\"pid\":%d,\"alive\":%s,\"ops\":[", first ? "" : ",", r,
                    by_rank[r]->pid, by_rank[r]->alive ? "true" : "false");
            ops_json(json, by_rank[r]);
            bprintf(json, "]}");
            first = 0;
        }
        bprintf(json, "]}");
    }
    o->groups++;
}

int tr__flight_verdicts(const char *dirs, const char *group, tr__buf *text, tr__buf *json) {
    verdicts_out o = {text, json, 0};
    if (json) bprintf(json, "{\"groups\":[");
    int rc = each_group(dirs, group, verdict_out, &o);
    if (json) bprintf(json, "]}\n");
    if (rc) return rc;
    return (text && text->oom) || (json && json->oom) ? tr__err(TR_ENOMEM, "flight recorder") : 0;
}

typedef struct each_out {
    void (*fn)(void *ctx, const tr__flight_group_view *g);
    void *ctx;
} each_out;

static void each_view(void *ctx, const char *name, const char *backend, int world,
                      rank_view **by_rank, const char *verdict) {
    each_out *o = ctx;
    tr__flight_rank_view ranks[64];
    tr__flight_group_view g = {name, backend, verdict, world, 0, ranks};
    for (int r = 0; r < world && g.n_ranks < 64; r++) {
        if (!by_rank[r]) continue;
        const tr__flight_op *last = last_op(by_rank[r]);
        tr__flight_rank_view *x = &ranks[g.n_ranks++];
        x->rank = r;
        x->pid = by_rank[r]->pid;
        x->alive = by_rank[r]->alive;
        x->last_op = last ? last->seq : 0;
        x->last_kind = last ? (int)last->kind : 0;
        x->last_state = last ? (int)last->state : 0;
    }
    o->fn(o->ctx, &g);
}

int tr__flight_each(const char *dirs, void (*fn)(void *ctx, const tr__flight_group_view *g),
                    void *ctx) {
    each_out o = {fn, ctx};
    return each_group(dirs, NULL, each_view, &o);
}

int tr__flight_dump(const char *session, const char *group, const char *why, char *path_out,
                    size_t cap) {
    if (path_out && cap) path_out[0] = '\0';
    char dir[700], fdir[700], path[1000];
    snprintf(dir, sizeof dir, "%s/%s", session, TR__TRACE_DIR);
    snprintf(fdir, sizeof fdir, "%s/%s", session, TR__FLIGHT_DIR);
    if (mkdir(fdir, 0700) != 0 && errno != EEXIST) return tr__err_errno(errno, "mkdir %s", fdir);
    DIR *d = opendir(fdir); /* a bounded number of dumps per session */
    int have = 0;
    if (d) {
        while (readdir(d))
            have++;
        closedir(d);
    }
    if (have > 256) return tr__err(TR_ERESOURCES, "%s holds 256 dumps already", fdir);
    tr__buf text = TR__BUF_INIT, json = TR__BUF_INIT;
    int rc = tr__flight_verdicts(dir, group, &text, &json);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(path, sizeof path, "%s/%.100s-%d-%lld.json", fdir, group ? group : "all",
             (int)getpid(), (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000);
    int fd = rc ? -1 : open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (!rc && fd < 0) rc = tr__err_errno(errno, "open %s", path);
    if (!rc) {
        tr__buf head = TR__BUF_INIT;
        bprintf(&head, "{\"why\":");
        tr__buf_json_str(&head, why ? why : "");
        bprintf(&head, ",\"by_pid\":%d,\"at\":%lld.%03lld,\"dump\":", (int)getpid(),
                (long long)now.tv_sec, (long long)(now.tv_nsec / 1000000));
        int bad = write(fd, head.data, head.len) != (ssize_t)head.len ||
                  write(fd, json.data, json.len) != (ssize_t)json.len || write(fd, "}\n", 2) != 2;
        tr__buf_free(&head);
        if (close(fd) != 0 || bad) rc = tr__err_errno(errno ? errno : EIO, "writing %s", path);
    }
    if (!rc) {
        tr__buf_append(&text, "", 1);
        char *s = text.data ? text.data : "";
        for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n"))
            TR_LOG_WARN("COLL-FLIGHT", "%s (%s; dump: %s)", line, why ? why : "", path);
        if (path_out && cap) snprintf(path_out, cap, "%s", path);
    }
    tr__buf_free(&text);
    tr__buf_free(&json);
    return rc;
}

typedef struct aged {
    char name[32];
    time_t mtime;
} aged;

static int by_age(const void *a, const void *b) {
    const aged *x = a, *y = b;
    return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

void tr__trace_counters(const char *dir, tr__proc_counters *sum, int64_t *pending) {
    mapped *m;
    size_t n = map_all(dir, &m);
    for (size_t i = 0; i < n; i++) {
        tr__proc_cnt_add(sum, &m[i].h->cnt);
        int64_t p = __atomic_load_n(&m[i].h->cnt.calls_pending, __ATOMIC_RELAXED);
        if (p > 0 && m[i].alive) *pending += p;
    }
    unmap_all(m, n);
}

/* Adds what the file name of dir counted into *to (a file not ours: nothing). */
static void fold(int dirfd_, const char *name, tr__proc_counters *to) {
    int fd = openat(dirfd_, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return;
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size == sizeof(tr__trace_hdr))
        p = mmap(NULL, sizeof(tr__trace_hdr), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return;
    const tr__trace_hdr *h = p;
    if (h->magic == TR__TRACE_MAGIC && h->size == sizeof *h) tr__proc_cnt_add(to, &h->cnt);
    munmap(p, sizeof *h);
}

void tr__trace_prune(const char *dir, tr__proc_counters *retired) {
    DIR *d = opendir(dir);
    if (!d) return;
    size_t n = 0, cap = 0;
    aged *a = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9' || strlen(e->d_name) >= sizeof a->name)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            aged *g = realloc(a, cap * sizeof *a);
            if (!g) break;
            a = g;
        }
        memcpy(a[n].name, e->d_name, strlen(e->d_name) + 1); /* (shorter: checked above) */
        a[n++].mtime = st.st_mtime;
    }
    if (n > TR__TRACE_KEEP) {
        qsort(a, n, sizeof *a, by_age);
        size_t over = n - TR__TRACE_KEEP;
        for (size_t i = 0; i < n && over; i++)
            if (!alive(atoi(a[i].name))) {
                tr__proc_counters got;
                memset(&got, 0, sizeof got);
                fold(dirfd(d), a[i].name, &got);
                if (unlinkat(dirfd(d), a[i].name, 0) == 0) {
                    over--;
                    if (retired) tr__proc_cnt_add(retired, &got);
                }
            }
    }
    closedir(d);
    free(a);
}

/* ---- other nodes' files ----------------------------------------------------------------- */

#define BUNDLE_MAGIC 0x31425254u /* "TRB1" */

int tr__trace_bundle(const char *dir, int events, tr__buf *out) {
    mapped *m;
    size_t n = map_all(dir, &m);
    for (size_t i = 0; i < n; i++) {
        uint32_t head[2] = {
            BUNDLE_MAGIC, (uint32_t)(events ? sizeof(tr__trace_hdr) : offsetof(tr__trace_hdr, ev))};
        size_t at = out->len + sizeof head;
        tr__buf_append(out, head, sizeof head);
        tr__buf_append(out, m[i].h, head[1]);
        if (out->oom) break;
        int32_t copy = m[i].alive ? 1 : 2; /* (what this node sees of it) */
        memcpy(out->data + at + offsetof(tr__trace_hdr, copy), &copy, sizeof copy);
    }
    unmap_all(m, n);
    return out->oom ? tr__err(TR_ENOMEM, "trace bundle") : 0;
}

int tr__trace_unbundle(const void *bundle, size_t len, const char *dir, const char *node) {
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) return tr__err_errno(errno, "mkdir %s", dir);
    const uint8_t *p = bundle, *end = p + len;
    tr__trace_hdr *h = aligned_alloc(64, sizeof *h); /* (its ring is cache-line aligned) */
    if (!h) return tr__err(TR_ENOMEM, "trace bundle");
    int rc = 0;
    while (!rc && p < end) {
        uint32_t head[2];
        if ((size_t)(end - p) < sizeof head) {
            rc = tr__err(TR_EPROTO, "a trace bundle cut in a record's head");
            break;
        }
        memcpy(head, p, sizeof head);
        p += sizeof head;
        if (head[0] != BUNDLE_MAGIC || head[1] > sizeof *h ||
            head[1] < offsetof(tr__trace_hdr, ev) || (size_t)(end - p) < head[1]) {
            rc = tr__err(TR_EPROTO, "a malformed trace bundle");
            break;
        }
        memset(h, 0, sizeof *h);
        memcpy(h, p, head[1]);
        p += head[1];
        if (h->magic != TR__TRACE_MAGIC || h->size != sizeof *h || h->pid <= 0 ||
            (h->copy != 1 && h->copy != 2)) {
            rc = tr__err(TR_EPROTO, "a trace bundle's record is not a trace file");
            break;
        }
        char label[sizeof h->label];
        field_str(label, sizeof label, h->label, sizeof h->label);
        snprintf(h->label, sizeof h->label, "%.40s @%.20s", label, node ? node : "?");
        char path[1000];
        snprintf(path, sizeof path, "%s/%d", dir, (int)h->pid);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            rc = tr__err_errno(errno, "open %s", path);
            break;
        }
        const char *w = (const char *)h; /* (what came; the rest, zeros, left sparse) */
        size_t left = head[1];
        while (left) {
            ssize_t k = write(fd, w, left);
            if (k <= 0) break;
            w += k, left -= (size_t)k;
        }
        if (ftruncate(fd, sizeof *h) != 0 || close(fd) != 0 || left)
            rc = tr__err(TR_EIO, "writing %s", path);
    }
    free(h);
    return rc;
}

void tr__trace_each(const char *dirs, int kind, const char *label,
                    void (*fn)(void *ctx, const tr__trace_view *e), void *ctx) {
    mapped *m;
    size_t n = map_all(dirs, &m);
    for (size_t f = 0; f < n; f++) {
        const tr__trace_hdr *h = m[f].h;
        char own[64];
        field_str(own, sizeof own, h->label, sizeof h->label);
        if (label && strcmp(own, label) != 0) continue;
        uint64_t head = __atomic_load_n(&h->head, __ATOMIC_ACQUIRE);
        for (uint64_t i = head > TR__TRACE_EVENTS ? head - TR__TRACE_EVENTS : 0; i < head; i++) {
            tr__trace_ev c;
            if (!read_ev(h, i, &c)) continue;
            const char *tail = (const char *)c.tail;
            if ((uint8_t)tail[0] != kind) continue;
            char name[22];
            field_str(name, sizeof name, tail + 2, 22);
            tr__trace_view v = {m[f].pid, own,    kind,    tail[1] != 0, c.ts + h->anchor,
                                c.dur,    c.flow, c.value, name};
            fn(ctx, &v);
        }
    }
    unmap_all(m, n);
}
