/* core/trace.h - what every process of a node records of itself, always on, for the
 * timeline (`troupe timeline`, tr_timeline_dump) and the collective flight recorder
 * (`troupe debug collectives`, the dumps of a failed op).
 *
 * Each process (a driver, a worker) writes one file, <session>/trace/<pid>, mapped shared:
 * a header (who it is: pid, role, label), the flight recorder's rings (a ring of the last
 * TR__FLIGHT_OPS ops for each of up to TR__FLIGHT_GROUPS groups it is a rank of), and a
 * ring of its last TR__TRACE_EVENTS events (calls submitted and run, gets, puts,
 * collective ops, graph steps, pulls). Writing an event is one atomic add and a store of
 * one cache line (its caller's clock reads): no lock, no system call, no message. The file outlives
 * its process (a worker killed with SIGKILL still tells what it was doing), and goes with the
 * session directory; the node keeps at most TR__TRACE_KEEP files (the oldest of processes gone are
 * removed first).
 *
 * Readers (the node, the CLI, a driver) map the files read-only and merge them: into
 * Chrome trace-event JSON (tr__trace_timeline), or into one verdict per group
 * (tr__flight_verdicts). A reader may see an event half written: each carries its
 * sequence number, stored last (release), and one that does not match is skipped.
 *
 * Times are CLOCK_MONOTONIC ns, as tr__now_ns gives them; the header's `anchor` (realtime
 * minus monotonic, at open) makes them wall-clock times when merged, so that files of
 * other nodes line up. */
#ifndef TR_CORE_TRACE_H
#define TR_CORE_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/counters.h"

#define TR__TRACE_EVENTS 8192 /* a power of two */
#define TR__FLIGHT_GROUPS 8
#define TR__FLIGHT_OPS 32 /* a power of two */
#define TR__TRACE_KEEP 512
#define TR__TRACE_DIR "trace"   /* in the session directory */
#define TR__FLIGHT_DIR "flight" /* the dumps, in the session directory */

/* Event kinds. */
enum {
    TR__EV_SUBMIT = 1, /* a call (or task) sent: name its method, flow its call */
    TR__EV_RUN,        /* a call run by this worker: name its method, flow its call */
    TR__EV_GET,        /* tr_get (that waited, failed or of an object): value the bytes */
    TR__EV_PUT,        /* tr_put: value the bytes */
    TR__EV_COLL,       /* a collective op: name its kind, value its bytes, flow the op */
    TR__EV_STEP,       /* a compiled graph's step: name its method, value the execution */
    TR__EV_PULL,       /* an object pulled from another node: value its bytes */
    TR__EV_KINDS
};

typedef struct tr__trace_ev { /* one cache line */
    uint32_t seq;             /* 1 + its index (mod 2^32) once written (stored last) */
    uint32_t tid;
    int64_t ts;    /* when it began */
    int64_t dur;   /* how long it took */
    uint64_t flow; /* links it with its other ends (a call's submission and run, a
                      collective op's ranks); 0: none */
    uint64_t value;
    /* byte 0 its kind, 1 whether it failed, 2-23 its name (NUL-terminated; a longer one
     * keeps its last dotted part, or its last 21 bytes): words,
     * so that every field is stored atomically (relaxed: plain moves) and two threads a
     * lap apart on one slot are no data race */
    uint64_t tail[3];
} tr__trace_ev;

/* An op's states in the flight recorder. */
enum { TR__FL_FREE, TR__FL_SCHEDULED, TR__FL_STARTED, TR__FL_COMPLETED, TR__FL_FAILED };

typedef struct tr__flight_op {
    uint64_t seq; /* the op's number in its group (1, 2, ...); 0: empty */
    int64_t t_sched, t_start, t_end;
    uint64_t count;
    int32_t root; /* the root, or the peer of a send or recv; -1: none */
    int32_t rc;
    uint8_t kind, dtype, state, pad[5];
    char method[32]; /* the actor's method that called it ("" if none) */
} tr__flight_op;

typedef struct tr__flight_group {
    char name[200]; /* "": a free slot */
    char backend[8];
    int32_t rank, world;
    uint64_t ops; /* ops begun: the newest's seq */
    int64_t used; /* when last used (a full table reuses the oldest) */
    tr__flight_op ring[TR__FLIGHT_OPS];
} tr__flight_group;

#define TR__TRACE_MAGIC 0x31435254u /* "TRC1" */

typedef struct tr__trace_hdr {
    uint32_t magic, size; /* size: this header's */
    int32_t pid;
    int32_t copy;   /* 0: the process's own file; a copy of another node's (tr__trace_unbundle):
                       1 the process runs there, 2 it is gone */
    int64_t anchor; /* CLOCK_REALTIME - CLOCK_MONOTONIC, in ns, at open */
    int64_t opened; /* monotonic */
    uint64_t head;  /* events claimed */
    char role[16];  /* "driver", "worker" */
    char label[64]; /* the actor's class, or the driver's program */
    char actor[40]; /* the actor's id, in hex ("" for a driver) */
    tr__proc_counters cnt; /* what it counts for the node's metrics (core/counters.h) */
    tr__flight_group groups[TR__FLIGHT_GROUPS];
    tr__trace_ev ev[TR__TRACE_EVENTS] __attribute__((aligned(64)));
} tr__trace_hdr;

/* This process's file (NULL: none, nothing recorded). */
extern tr__trace_hdr *tr__trace_self;

/* Opens (creates) this process's file in the trace directory of the node whose socket is
 * node_path (<session>/node.sock), closing any other first. A worker's label is its
 * class; actor_hex its id (or NULL). 0, or a code (nothing is recorded then). With
 * TROUPE_TRACE=0 in the environment (a driver's reaches its node and workers), nothing is
 * recorded: what `bench/actor_calls` compares. */
int tr__trace_open(const char *node_path, const char *role, const char *label,
                   const char *actor_hex);
/* Stops recording and unmaps the file (which stays, for the timeline). */
void tr__trace_close(void);

/* This thread's id, cached. */
uint32_t tr__trace_tid(void);

/* Records an event from t0 to t1 (tr__now_ns; equal: an instant). */
void tr__trace_ev_add(int kind, int64_t t0, int64_t t1, const char *name, size_t name_len,
                      uint64_t flow, uint64_t value, int failed);

/* A collective op's accounting once it has ended - the node's counters (as tr__cnt_coll),
 * this process's histogram of its ops' durations (by backend), its timeline event. Done op
 * by op (~7 relaxed atomic adds and an event's line) it took ~45 ns of the ~250 of a
 * 4-byte broadcast between two bound processes (AMD family 26). So on a thread that runs
 * a worker's call (tr__book_on: set around the method by actor/worker.c, which does
 * tr__book_flush once it returns, before its reply leaves) it is gathered (plain adds; the
 * events as a burst) and sent out together: every 64 ops or 10 ms, when the method
 * returns, when a group goes, when the thread ends, when the trace closes (a failed op at
 * once). On any other thread (a driver's, an event loop's, which no call's end flushes)
 * each op goes out as it ends. (An op's flight entry is not in it: it ends there at
 * once.) */
void tr__book_coll(int backend, int kind, uint64_t bytes, int64_t t0, int64_t t1, uint64_t flow,
                   int rc);
extern __attribute__((visibility("hidden"))) __thread int tr__book_pending;
extern __attribute__((visibility("hidden"))) __thread int tr__book_on;
void tr__book_flush_now(void);
static inline void tr__book_flush(void) {
    if (tr__book_pending) tr__book_flush_now();
}

/* Slices in bursts: a loop that runs many short slices back to back (a compiled graph's
 * steps, ~0.3 us each when pipelined) keeps them here and records them in one go
 * (tr__burst_flush): one atomic add for the burst, not one a slice, and off the path
 * between a slice and what it publishes. Where the kernel keeps time with the CPU's
 * time-stamp counter (x86-64, clocksource "tsc": ~17 ns a read here against
 * clock_gettime's ~30), a slice that did not wait for its work is stamped in ticks; the
 * burst's first tick stamp comes with a clock read, the flush takes another, and each tick
 * is placed between the two by their ratio (no calibration: exact at both ends, the
 * clocks' own error between). A slice stamped with tr__now_ns is kept as it is. */
#define TR__BURST 64

typedef struct tr__burst_ev {
    int64_t t0, t1; /* ns, or ticks (ticks set) */
    uint64_t value, flow;
    const char *name; /* outlives the burst (a step's method name) */
    uint8_t ticks, failed;
} tr__burst_ev;

typedef struct tr__burst {
    int64_t ns0;  /* the anchor: a clock read ... */
    uint64_t tk0; /* ... and a tick read beside it (0: none yet) */
    size_t n;
    tr__burst_ev ev[TR__BURST];
} tr__burst;

/* Whether ticks are usable here (looked at once per process). */
int tr__ticks_usable(void);
/* A stamp for a slice of b that did not wait: ticks (the first one anchors the burst), or
 * tr__now_ns where ticks are not usable; *ticks says which. */
int64_t tr__burst_stamp(tr__burst *b, uint8_t *ticks);
/* Adds a slice (b->n < TR__BURST: flush first when full). */
static inline void tr__burst_push(tr__burst *b, int64_t t0, int64_t t1, uint8_t ticks,
                                  const char *name, uint64_t value, int failed) {
    tr__burst_ev *e = &b->ev[b->n++];
    e->t0 = t0;
    e->t1 = t1;
    e->ticks = ticks;
    e->name = name;
    e->value = value;
    e->flow = 0;
    e->failed = failed != 0;
}
/* The same for a slice stamped with clock reads that has a flow (a call's run). */
static inline void tr__burst_push_flow(tr__burst *b, int64_t t0, int64_t t1, const char *name,
                                       uint64_t flow, int failed) {
    tr__burst_push(b, t0, t1, 0, name, 0, failed);
    b->ev[b->n - 1].flow = flow;
}
/* Records b's slices as events of `kind` (when recording) and their durations into h (a
 * thread's own: tr__hist_add_local; may be NULL), then empties b. */
void tr__burst_flush(tr__burst *b, int kind, tr__hist *h);

/* The flow id of a call: its caller's pid, the actor's id and the call's seq on their
 * stream; both ends compute it. */
uint64_t tr__trace_call_flow(int32_t caller_pid, const uint8_t actor[16], uint64_t seq);

/* This thread's current method (a worker sets it around a call; "" none). */
extern __attribute__((visibility("hidden"))) __thread const char *tr__trace_method;

/* The flight recorder: an op of group (as this rank sees it) scheduled now. Returns its
 * entry (NULL: not recorded), which tr__flight_end completes. */
tr__flight_op *tr__flight_begin(const char *group, const char *backend, int rank, int world,
                                int kind, int dtype, uint64_t count, int root, int64_t now);
/* (now: tr__now_ns(), which the caller has read already: a clock read costs ~25 ns here,
 * as much as a small op's own work) */
void tr__flight_started(tr__flight_op *op, int64_t now);
void tr__flight_end(tr__flight_op *op, int rc, int64_t now);
/* The op's number in its group (the flow id of its ranks' events comes from it). */
uint64_t tr__flight_flow(const char *group, uint64_t seq);
/* The same in two parts, for a caller that keeps the group's: tr__flight_flow(group, seq)
 * == tr__flight_flow_at(tr__flight_flow_key(group), seq). */
uint64_t tr__flight_flow_key(const char *group);
uint64_t tr__flight_flow_at(uint64_t key, uint64_t seq);

/* Readers. Each takes dirs: one trace directory, or several separated by ':' (this node's
 * and copies of other nodes', tr__trace_unbundle), merged.
 *
 * The Chrome trace-event JSON of every file in dirs ({"traceEvents": [...]}). A process of
 * the n-th directory (from 0) is pid + n * 10000000 in it (pids of nodes apart may be
 * equal); its name says its real pid. */
int tr__trace_timeline(const char *dirs, tr__buf *out);

/* The flight recorder's verdicts of every group with a rank in dir (or only `group`):
 * text (a line per group) and/or json ({"groups": [{"name", "verdict", "ranks": [{"rank",
 * "pid", "alive", "ops": [...]}]}]}); either may be NULL. */
int tr__flight_verdicts(const char *dirs, const char *group, tr__buf *text, tr__buf *json);

/* A group as the flight recorder's rings show it: the ranks with a ring in the dirs read
 * (at most 64 of them, by rank), each with its last op (0: none) and that op's state
 * (TR__FL_*). */
typedef struct tr__flight_rank_view {
    int rank, pid, alive;
    uint64_t last_op;
    int last_kind, last_state;
} tr__flight_rank_view;

typedef struct tr__flight_group_view {
    const char *name, *backend, *verdict;
    int world, n_ranks;
    const tr__flight_rank_view *ranks;
} tr__flight_group_view;

/* Calls fn for every group with a rank in dirs, in name order. 0, or TR_ENOMEM. */
int tr__flight_each(const char *dirs, void (*fn)(void *ctx, const tr__flight_group_view *g),
                    void *ctx);

/* Every file of dir as one blob (what another node's CLI merges: `troupe timeline`,
 * `troupe debug collectives` on a cluster's head): per file, "TRB1", its length, and its
 * header with `copy` set - with its event ring if events, else without. */
int tr__trace_bundle(const char *dir, int events, tr__buf *out);
/* Writes the files of a bundle (from another node, whose label is node) into dir, as
 * files the readers take (their labels end with " @node"). 0, or a code (TR_EPROTO: a
 * malformed bundle). */
int tr__trace_unbundle(const void *bundle, size_t len, const char *dir, const char *node);

/* Writes the dump of group (NULL: all) as seen from this node - every rank's ring with
 * the verdict - to <session>/flight/<group>-<pid>-<ms>.json, and logs the verdict.
 * `why`: what made it ("timeout", "peer died", "SIGUSR1"). 0, or a code. */
int tr__flight_dump(const char *session, const char *group, const char *why, char *path_out,
                    size_t cap);

/* One event as a reader sees it (wall-clock times). */
typedef struct tr__trace_view {
    int pid;
    const char *label; /* its process's */
    int kind, failed;
    int64_t ts, dur; /* ns */
    uint64_t flow, value;
    const char *name;
} tr__trace_view;

/* Calls fn for every event of kind in the files of dirs whose label is label (NULL: any),
 * oldest first in each file. */
void tr__trace_each(const char *dirs, int kind, const char *label,
                    void (*fn)(void *ctx, const tr__trace_view *e), void *ctx);

/* A collective op kind's name (collective/group.h's TR__COLL_*: 1 "barrier" ... 11
 * "recv"; "?" for others). */
const char *tr__coll_op_name(unsigned kind);

/* Removes the files of processes gone beyond the TR__TRACE_KEEP newest, adding what each
 * counted into *retired (NULL: dropped). */
void tr__trace_prune(const char *dir, tr__proc_counters *retired);

/* The metrics' sums over every file of dir: the counters into *sum (added), the pending
 * calls of processes alive now into *pending. */
void tr__trace_counters(const char *dir, tr__proc_counters *sum, int64_t *pending);

/* This process's counters (NULL: none). */
static inline tr__proc_counters *tr__proc_cnt(void) {
    tr__trace_hdr *h = __atomic_load_n(&tr__trace_self, __ATOMIC_ACQUIRE);
    return h ? &h->cnt : NULL;
}
static inline void tr__cnt_add(uint64_t *v, uint64_t n) {
    __atomic_fetch_add(v, n, __ATOMIC_RELAXED);
}

#endif
