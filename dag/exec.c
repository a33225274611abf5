/* dag/exec.c - see exec.h. */
#include "dag/exec.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actor/ctx.h"
#include "collective/group.h"
#include "collective/ops.h"
#include "collective/shm/segment.h"
#include "core/clock.h"
#include "core/codec.h"
#include "core/log.h"
#include "core/reduce.h"
#include "core/status.h"
#include "core/trace.h"
#include "dag/bridge.h"
#include "dag/chan.h"
#include "dag/gpu.h"
#include "dag/plan.h"
#include "troupe/dag.h"
#ifdef TR_WITH_CUDA
#include "collective/nccl/nccl.h"
#endif
#include "objectstore/client.h"

#define MAX_INPUTS 16
#define MAX_STEPS 256

typedef struct step {
    const tr_method_def *def; /* NULL for a collective node's step */
    tr_method_def own_def;    /* def, when the class's dispatch runs it */
    char own_name[256];
    char group[64]; /* a collective node: its shm group, world, rank, dtype, op */
    int gworld, grank;
    tr_dtype dtype;
    tr_redop op;
    tr_group *grp;
    uint64_t out_off;
    size_t n_in;
    uint64_t in_off[MAX_INPUTS];
    uint32_t reader[MAX_INPUTS];
    tr__chan out, in[MAX_INPUTS];
    tr_ref *out_refs; /* by output slot: the object a value too large went as */
    unsigned char *out_ref_set;
    int fwd;              /* a reply within its first input's slot goes on as a place, not a copy */
    int gpu_out;          /* the output's transport when device to device (dag/gpu.h) */
    tr__dag_gpu_out gout; /* (the CUDA build) */
    tr__dag_gpu_in gin[MAX_INPUTS];
} step;

typedef struct loop {
    tr__worker_env env;
    char node_path[108];
    char name[200];
    int world, rank, timeout_ms;
    uint64_t bytes;
    int64_t spin_ns;
    char nccl_name[64]; /* the graph's nccl group, for its nccl edges: "" if none */
    int nccl_world, nccl_rank;
    tr_group *nccl;
    tr__hist steps_run; /* steps run and not yet in the process's counters (count_steps) */
    tr__burst burst;    /* steps run and not yet on the timeline nor in steps_run */
    const char *hdr;    /* the graph's header here (forwarded values' offsets are from it) */
    int keep;           /* the loop may keep the method lock between steps (no nccl edge) */
    int held;           /* it holds it now */
    size_t n_steps;
    step steps[];
} loop;

#define STEPS_PER_COUNT TR__BURST /* a burst's steps are counted this often */

static void methods_release(loop *l) {
    if (!l->held) return;
    l->held = 0;
    pthread_mutex_unlock(l->env.mu);
}

/* The method lock, taken for a step and kept while steps run back to back: it goes before
 * the loop waits for anything (an input, a free output slot, a group), at every burst's
 * end, as the loop ends, and as soon as another thread waits for it (actor/worker.h). */
static void methods_take(loop *l) {
    if (l->held) return;
    /* (a call's thread that waits goes first: it was woken by the release, and the loop
     * would otherwise take the lock back before that thread runs) */
    for (int i = 0; i < 1000 && __atomic_load_n(l->env.mu_wanted, __ATOMIC_RELAXED); i++)
        sched_yield();
    pthread_mutex_lock(l->env.mu);
    l->held = 1;
}

/* The loop's steps run go onto the timeline (core/trace.h's bursts: one atomic add a
 * burst, and a step that did not wait for its input stamped in ticks) and into the
 * process's counters (troupe_graph_step_seconds: a few atomic adds a burst instead of four
 * a step): before a step waits for its input (the loop is idle: counted within
 * microseconds), before the output of a step that had waited is published (a driver in
 * step with its graph finds every step of its results counted when it has them), every
 * STEPS_PER_COUNT steps, and as the loop ends. The method lock goes at each of these. */
static void count_steps(loop *l) {
    methods_release(l);
    tr__burst_flush(&l->burst, TR__EV_STEP, &l->steps_run);
    if (l->steps_run.n && tr__proc_cnt()) tr__hist_merge(&tr__proc_cnt()->steps, &l->steps_run);
}

/* Reads the attach message into a new loop (its steps' methods found in the class). */
static int parse(const tr__worker_env *env, tr_ctx *ctx, const tr__obj *root, loop **out) {
    const tr__obj *steps = tr__obj_get(root, "steps");
    size_t n = steps ? tr__obj_len(steps) : 0;
    if (!steps || n == 0 || n > MAX_STEPS) return tr__ctx_error(ctx, "dag attach: no steps");
    loop *l = calloc(1, sizeof *l + n * sizeof(step));
    if (!l) return tr__ctx_error(ctx, "dag attach: out of memory");
    l->n_steps = n;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        const tr__obj *s = tr__obj_at(steps, i);
        size_t parts = tr__obj_len(s);
        const tr__obj *ins = parts == 3 || parts == 4 ? tr__obj_at(s, 2) : NULL;
        const char *m;
        size_t mlen;
        step *st = &l->steps[i];
        if (!ins || tr__obj_str(tr__obj_at(s, 0), "method", &m, &mlen) ||
            tr__obj_uint(tr__obj_at(s, 1), "out", &st->out_off) || tr__obj_len(ins) < 1 ||
            tr__obj_len(ins) > MAX_INPUTS) {
            rc = tr__ctx_error(ctx, "dag attach: malformed step %zu", i);
            goto fail;
        }
        if (parts == 4) { /* a collective node: [group, world, rank, dtype, op] */
            const tr__obj *c = tr__obj_at(s, 3);
            const char *gn;
            size_t gl;
            int64_t world, rank, dtype, op;
            if (tr__obj_len(c) != 5 || tr__obj_str(tr__obj_at(c, 0), "group", &gn, &gl) ||
                gl == 0 || gl >= sizeof st->group || !tr__coll_name_ok(gn, gl) ||
                tr__obj_int(tr__obj_at(c, 1), "world", &world) ||
                tr__obj_int(tr__obj_at(c, 2), "rank", &rank) ||
                tr__obj_int(tr__obj_at(c, 3), "dtype", &dtype) ||
                tr__obj_int(tr__obj_at(c, 4), "op", &op) || world < 1 ||
                world > TR__COLL_MAX_WORLD || rank < 0 || rank >= world ||
                !tr__dtype_size((tr_dtype)dtype) || op < 0 || op > TR_AVG) {
                tr__ctx_error(ctx, "dag attach: malformed collective step %zu", i);
                rc = TR_EPROTO;
                goto fail;
            }
            memcpy(st->group, gn, gl);
            st->gworld = (int)world;
            st->grank = (int)rank;
            st->dtype = (tr_dtype)dtype;
            st->op = (tr_redop)op;
        } else if (!(st->def = tr__find_method_or_dispatch(env->cls, m, mlen, &st->own_def,
                                                           st->own_name, sizeof st->own_name))) {
            tr__ctx_error(ctx, "class '%s' has no method '%.*s'", env->cls->name,
                          (int)(mlen > 200 ? 200 : mlen), m);
            rc = TR_ENOMETHOD;
            goto fail;
        }
        st->n_in = tr__obj_len(ins);
        if (!st->def && st->n_in != 1) {
            tr__ctx_error(ctx, "dag attach: collective step %zu with %zu inputs", i, st->n_in);
            rc = TR_EPROTO;
            goto fail;
        }
        for (size_t j = 0; j < st->n_in; j++) {
            const tr__obj *p = tr__obj_at(ins, j);
            uint64_t reader = 0;
            if (tr__obj_len(p) != 2 || tr__obj_uint(tr__obj_at(p, 0), "chan", &st->in_off[j]) ||
                tr__obj_uint(tr__obj_at(p, 1), "reader", &reader) ||
                reader >= TR__CHAN_MAX_READERS) {
                rc = tr__ctx_error(ctx, "dag attach: malformed input %zu of step %zu", j, i);
                goto fail;
            }
            st->reader[j] = (uint32_t)reader;
        }
    }
    *out = l;
    return 0;
fail:
    free(l);
    return rc;
}

/* The optional "fwd": [step index, ...]: steps whose output the driver alone reads, in a
 * graph on one node with no device edge. Such a step's reply that lies within its first
 * input (a value in the slot) goes on as where it lies (TR__CHAN_FWD), not as a copy. That
 * is safe because no writer reuses the input's slot before the driver lets the execution
 * go: a slot holds execution v until v + slots, every step of v + slots descends from the
 * driver's submit of it, and the driver submits v + slots >= v + max_inflight only once it
 * has released v (graph.c: submit). A collective step among them reduces into its input's
 * slot and forwards that: its input has no other reader (graph.c: forwards). */
static int parse_fwd(loop *l, tr_ctx *ctx, const tr__obj *root) {
    const tr__obj *fwd = tr__obj_get(root, "fwd");
    size_t n = fwd ? tr__obj_len(fwd) : 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t k;
        if (tr__obj_uint(tr__obj_at(fwd, i), "fwd", &k) || k >= l->n_steps ||
            (!l->steps[k].def && !l->steps[k].group[0]))
            return tr__ctx_error(ctx, "dag attach: malformed fwd entry %zu", i);
        l->steps[k].fwd = 1;
    }
    return 0;
}

/* The optional GPU keys: "gpu": [[transport, [reader ranks in the nccl group]] per
 * step], "nccl": [group, world, rank, the GPU it shares with another rank or ""]. */
static int parse_gpu(loop *l, tr_ctx *ctx, const tr__obj *root) {
    const tr__obj *gpu = tr__obj_get(root, "gpu"), *nc = tr__obj_get(root, "nccl");
    if (gpu && tr__obj_len(gpu) != l->n_steps)
        return tr__ctx_error(ctx, "dag attach: %zu gpu entries for %zu steps", tr__obj_len(gpu),
                             l->n_steps);
    for (size_t i = 0; gpu && i < l->n_steps; i++) {
        const tr__obj *e = tr__obj_at(gpu, i), *dst = tr__obj_at(e, 1);
        int64_t t;
        if (tr__obj_len(e) != 2 || tr__obj_int(tr__obj_at(e, 0), "transport", &t) ||
            (t != 0 && t != TR_DAG_NCCL && t != TR_DAG_CUDA_IPC) || !dst ||
            tr__obj_len(dst) > TR__CHAN_MAX_READERS ||
            (t == TR_DAG_NCCL && tr__obj_len(dst) == 0) || (t != 0 && !l->steps[i].def))
            return tr__ctx_error(ctx, "dag attach: malformed gpu entry %zu", i);
        step *st = &l->steps[i];
        st->gpu_out = (int)t;
        st->gout.transport = (int)t;
        st->gout.n_dst = (int)tr__obj_len(dst);
        for (int k = 0; k < st->gout.n_dst; k++) {
            int64_t r;
            if (tr__obj_int(tr__obj_at(dst, (size_t)k), "rank", &r) || r < 0 ||
                r >= TR__COLL_MAX_WORLD)
                return tr__ctx_error(ctx, "dag attach: malformed gpu entry %zu", i);
            st->gout.dst[k] = (int)r;
        }
    }
    if (nc) {
        const char *gn;
        size_t gl;
        int64_t world, rank;
        const char *sh = "";
        size_t shl = 0;
        if (tr__obj_len(nc) != 4 || tr__obj_str(tr__obj_at(nc, 0), "group", &gn, &gl) || gl == 0 ||
            gl >= sizeof l->nccl_name || !tr__coll_name_ok(gn, gl) ||
            tr__obj_int(tr__obj_at(nc, 1), "world", &world) ||
            tr__obj_int(tr__obj_at(nc, 2), "rank", &rank) || world < 2 ||
            world > TR__COLL_MAX_WORLD || rank < 0 || rank >= world ||
            tr__obj_str(tr__obj_at(nc, 3), "shared", &sh, &shl) || shl > 15)
            return tr__ctx_error(ctx, "dag attach: malformed nccl entry");
        /* NCCL refuses two ranks of a communicator on one GPU of one host: say so now,
         * unless this process is an NCCL host of its own */
        const char *host = getenv("NCCL_HOSTID");
        if (shl && (!host || !*host))
            return tr__ctx_error(ctx,
                                 "dag attach: this actor shares GPU %.*s with another actor of "
                                 "the graph's nccl edges: NCCL needs a GPU each (cuda_ipc edges "
                                 "work between actors sharing a GPU; or give each actor's "
                                 "process a distinct NCCL_HOSTID, and NCCL joins them over its "
                                 "network transport)",
                                 (int)shl, sh);
        memcpy(l->nccl_name, gn, gl);
        l->nccl_world = (int)world;
        l->nccl_rank = (int)rank;
    }
    for (size_t i = 0; i < l->n_steps; i++) {
        step *st = &l->steps[i];
        for (int k = 0; st->gpu_out == TR_DAG_NCCL && k < st->gout.n_dst; k++)
            if (st->gout.dst[k] >= l->nccl_world || st->gout.dst[k] == l->nccl_rank)
                return tr__ctx_error(ctx, "dag attach: step %zu sends to rank %d", i,
                                     st->gout.dst[k]);
#ifndef TR_WITH_CUDA
        if (st->gpu_out) {
            tr__ctx_error(ctx, "dag attach: this worker was built without CUDA (--config=cuda)");
            return TR_EINVAL;
        }
#else
        if ((st->gpu_out || l->nccl_world) && !tr__gpu_present()) {
            tr__ctx_error(ctx, "dag attach: this actor sees no CUDA device, and its part of the "
                               "graph moves device values (was it created with num_gpus?)");
            return TR_ERESOURCES;
        }
#endif
    }
    return 0;
}

/* Opens the channel at `off` in the graph's area of `bytes` (all of it mapped: the join
 * checked the segment's size); TR_EPROTO if it is not sound. */
static int open_at(tr__chan *c, tr__dag_hdr *h, uint64_t bytes, uint64_t off) {
    if (off < sizeof *h || off >= bytes || off % 64)
        return tr__err(TR_EPROTO, "a channel offset %llu outside the graph's %llu bytes",
                       (unsigned long long)off, (unsigned long long)bytes);
    return tr__chan_open(c, (char *)h + off, (size_t)(bytes - off));
}

/* Waits end when the driver (rank 0) has gone (arg: the segment's group header). */
static int driver_gone(void *arg) {
    uint64_t dead = __atomic_load_n(&((tr__coll_hdr *)arg)->dead, __ATOMIC_ACQUIRE);
    return dead & 1 ? tr__err(TR_EPEER_DIED, "the graph's driver went away") : 0;
}

/* The step of this loop whose result object ref is, in the slot of execution e of the
 * channel st reads (its slot index into *slot), where st is that channel's one reader:
 * st may then reduce into the object in place and pass it on. NULL where there is none. */
static step *maker_of(loop *l, const step *st, uint64_t e, const tr_ref *ref, size_t *slot) {
    if (st->in[0].readers != 1) return NULL;
    for (size_t i = 0; i < l->n_steps; i++) {
        step *p = &l->steps[i];
        if (p == st || !p->def || p->out_off != st->in_off[0] || !p->out_ref_set) continue;
        size_t k = (size_t)(e % p->out.slots);
        if (p->out_ref_set[k] && memcmp(p->out_refs[k].b, ref->b, sizeof ref->b) == 0) {
            *slot = k;
            return p;
        }
    }
    return NULL;
}

/* A collective node's step: every participant first allreduces (max) which input failed
 * (the highest rank whose did) and its shape, so that all of them agree to reduce the data
 * or to fail, then the data: straight into the output slot, or - a value over a slot, as
 * its input may be (an object, viewed) - into an object of the store whose ref the slot
 * carries, as a method's result over a slot goes; or into the input object itself, where a
 * step of this actor made it for this node alone (maker_of), which then goes on as the
 * output. A failed input's error (a method's TR_ETASK and its message) is every output's:
 * its participant broadcasts it. A shape that does not fit (not whole elements, lengths
 * that differ) is TR_EINVAL. */
static int run_coll(loop *l, step *st, uint64_t e, const tr__chan_wait *w) {
    methods_release(l); /* (it waits for the group) */
    const void *data;
    size_t len;
    int32_t code;
    uint32_t flags;
    int rc = tr__chan_read(&st->in[0], e, w, &data, &len, &code, &flags);
    if (rc) return rc;
    char msg[400] = "";
    tr_ref in_ref, out_ref;
    int in_pinned = 0, fwd = 0;
    step *maker = NULL; /* the step of ours that made the input object, which we own then */
    size_t maker_slot = 0;
    void *in_place = NULL;                 /* the input object, writable: the result goes into it */
    if (!code && (flags & TR__CHAN_REF)) { /* the input went as an object: viewed */
        memcpy(in_ref.b, data, sizeof in_ref.b);
        if ((code = tr__objects_pin(l->env.objects, in_ref, 10000, &data, &len))) {
            snprintf(msg, sizeof msg, "allreduce: its input: %s", tr__last_error());
            data = msg;
            len = strlen(msg) + 1;
        } else {
            in_pinned = 1;
            flags = 0;
            /* made by a step of ours for this node alone: reduced in place, and passed on
             * (no second object of its size to write, half the memory traffic) */
            size_t wlen = 0;
            if ((maker = maker_of(l, st, e, &in_ref, &maker_slot)) &&
                (tr__objects_writable(l->env.objects, in_ref, &in_place, &wlen) || wlen != len))
                in_place = NULL;
        }
    }
    void *buf;
    size_t cap;
    if ((rc = tr__chan_write_begin(&st->out, e, &buf, &cap, w))) goto unpin;
    size_t slot = (size_t)(e % st->out.slots);
    if (st->out_ref_set[slot]) { /* the slot's last value went as an object: read by now */
        tr__objects_release(l->env.objects, st->out_refs[slot]);
        st->out_ref_set[slot] = 0;
    }
    size_t esz = tr__dtype_size(st->dtype);
    /* (a device value is not reduced here: an error) */
    int bad = !code && (flags != 0 || len % esz != 0);
    int64_t count = code || bad ? 0 : (int64_t)(len / esz);
    int64_t h[4] = {code ? tr__group_rank(st->grp) + 1 : 0, bad, count, -count};
    rc = tr__group_allreduce(st->grp, h, h, 4, TR_INT64, TR_MAX, TR_FOREVER);
    void *into = buf;
    if (!rc && h[0]) { /* an input failed: its error, from its participant, is everyone's */
        struct {
            int32_t code;
            char msg[396];
        } why;
        memset(&why, 0, sizeof why);
        if (code) {
            why.code = code;
            snprintf(why.msg, sizeof why.msg, "%.*s", (int)(len < 300 ? len : 300),
                     (const char *)data);
        }
        rc = tr__group_broadcast(st->grp, &why, sizeof why, TR_UINT8, (int)(h[0] - 1), TR_FOREVER);
        if (!rc) {
            code = why.code < 0 ? why.code : TR_EINTERNAL;
            snprintf(msg, sizeof msg, "%.*s", (int)sizeof why.msg - 1, why.msg);
        }
    } else if (!rc && (h[1] || h[2] != -h[3])) {
        snprintf(msg, sizeof msg, "allreduce: %s",
                 bad ? "this input is not whole elements of the dtype, or is a device value"
                     : "the inputs' lengths differ, or another is not whole elements of the "
                       "dtype");
        code = TR_EINVAL;
    } else if (!rc && len > cap && in_place) {
        /* over a slot, its input ours alone: reduced in place, and the object goes on as
         * the output, held by this step's slot from now on (its maker's lets go of nothing) */
        rc = tr__group_allreduce(st->grp, in_place, in_place, (size_t)count, st->dtype, st->op,
                                 TR_FOREVER);
        if (!rc) {
            maker->out_ref_set[maker_slot] = 0;
            out_ref = in_ref;
            st->out_refs[slot] = out_ref;
            st->out_ref_set[slot] = 1;
            flags = TR__CHAN_REF;
        }
    } else if (!rc && st->fwd && !in_pinned && !flags && len) {
        /* in its input's slot (not an object viewed), which no other step and not the
         * driver reads: reduced there, and that place goes on (parse_fwd); no slot's
         * worth written again */
        rc = tr__group_allreduce(st->grp, (void *)data, (void *)data, (size_t)count, st->dtype,
                                 st->op, TR_FOREVER);
        fwd = !rc;
    } else if (!rc) {
        /* over a slot: an object of the store, written in place, then sealed (every
         * participant makes one: each output is its own) */
        if (len > cap && (code = tr__objects_create(l->env.objects, len, &out_ref, &into)))
            snprintf(msg, sizeof msg, "allreduce: its result of %zu bytes: %s", len,
                     tr__last_error());
        /* (every participant reduces, even one whose store failed: the group stays in step) */
        void *scratch = NULL;
        if (code && len > cap && !(into = scratch = malloc(len))) into = NULL;
        if (into)
            rc = tr__group_allreduce(st->grp, data, into, (size_t)count, st->dtype, st->op,
                                     TR_FOREVER);
        else
            rc = tr__err(TR_ENOMEM, "allreduce: %zu bytes for a participant whose store failed",
                         len);
        free(scratch);
        if (!code && len > cap) {
            int sealed = !rc && !(rc = tr__objects_seal(l->env.objects, out_ref));
            if (!sealed) {
                tr__objects_abort(l->env.objects, out_ref);
            } else {
                st->out_refs[slot] = out_ref;
                st->out_ref_set[slot] = 1;
                flags = TR__CHAN_REF;
            }
        }
    }
    if (rc) { /* the group failed (a participant left or died): so does this step */
        snprintf(msg, sizeof msg, "allreduce: %s", tr__last_error());
        code = rc;
        flags = 0;
    }
    size_t out = code ? strlen(msg) + 1 : flags ? sizeof out_ref.b : len;
    if (code) memcpy(buf, msg, out < cap ? out : cap);
    if (!code && flags) memcpy(buf, out_ref.b, sizeof out_ref.b);
    if (!code && fwd) { /* (slots hold at least 16 bytes) */
        tr__chan_fwd f = {(uint64_t)((const char *)data - l->hdr), len};
        memcpy(buf, &f, sizeof f);
        out = sizeof f;
        flags = TR__CHAN_FWD;
    }
    tr__chan_write_end(&st->out, e, code, flags, out < cap ? out : cap, 1);
    if (in_pinned) tr__objects_unpin(l->env.objects, in_ref);
    tr__chan_release(&st->in[0], e, st->reader[0]);
    return rc;
unpin: /* (the input or the output slot failed: the loop ends) */
    if (in_pinned) tr__objects_unpin(l->env.objects, in_ref);
    return rc;
}

/* Runs step st of execution e (inputs waited for, method or error, output written). */
static int run_step(loop *l, tr_ctx *ctx, step *st, uint64_t e, const tr__chan_wait *w) {
    if (!st->def) return run_coll(l, st, e, w);
    const void *data[MAX_INPUTS];
    size_t len[MAX_INPUTS];
    tr_ref pin[MAX_INPUTS];
    int pinned[MAX_INPUTS] = {0};
    int32_t failed = 0;
    const void *why = NULL;
    size_t why_len = 0;
    char pin_err[MAX_INPUTS][160];
    int gpu_done = 0, gpu_rc = 0; /* a device value taken (under the lock), and how */
    size_t gpu_len = 0;
    int dev_send = 0; /* it goes to its readers once the slot is published */
    int rc = 0;
    int idle = 0;  /* (it waits for an input) */
    int plain = 0; /* its first input is a value in its slot (one it may forward) */
    for (size_t j = 0; j < st->n_in && !idle; j++)
        idle = !tr__chan_ready(&st->in[j], e);
    if (idle)
        count_steps(l);
    else if (!l->keep || !tr__chan_writable(&st->out, e) ||
             __atomic_load_n(l->env.mu_wanted, __ATOMIC_RELAXED))
        methods_release(l);
    for (size_t j = 0; j < st->n_in; j++) {
        int32_t code;
        uint32_t flags;
        if ((rc = tr__chan_read(&st->in[j], e, w, &data[j], &len[j], &code, &flags))) goto unpin;
        if (!code && (flags & TR__CHAN_FWD)) { /* (only the driver reads those) */
            rc = tr__err(TR_EPROTO, "input %zu: a forwarded value, which only the driver reads", j);
            TR_LOG_WARN("DAG-LOOP", "graph %s: %s", l->name, tr__last_error());
            goto unpin;
        }
        if (j == 0) plain = !code && !flags;
        if (!code && (flags & TR__CHAN_REF)) { /* a value over a slot: an object, viewed */
            memcpy(pin[j].b, data[j], sizeof pin[j].b);
            if ((code = tr__objects_pin(l->env.objects, pin[j], 10000, &data[j], &len[j]))) {
                snprintf(pin_err[j], sizeof pin_err[j], "input %zu: %s", j, tr__last_error());
                data[j] = pin_err[j];
                len[j] = strlen(pin_err[j]) + 1;
            } else {
                pinned[j] = 1;
            }
        }
        if (!code && (flags & (TR__CHAN_DEV_NCCL | TR__CHAN_DEV_IPC))) {
            /* a device value: received now (nccl's rendezvous: graph.c orders it), or
             * mapped. A failure stops this actor's part (an nccl writer waits for it). */
#ifdef TR_WITH_CUDA
            rc = tr__dag_gpu_read(&st->gin[j], l->nccl, &st->in[j], e, data[j], len[j], flags,
                                  &data[j], &len[j]);
#else
            rc = tr__err(TR_EPROTO, "a device value, in a worker built without CUDA");
#endif
            if (rc) {
                TR_LOG_WARN("DAG-GPU", "graph %s: input %zu: %s", l->name, j, tr__last_error());
                goto unpin;
            }
        }
        if (code && !failed) {
            failed = code;
            why = data[j];
            why_len = len[j];
        }
    }
    /* the output slot first: the method replies straight into it */
    void *buf;
    size_t cap;
    if ((rc = tr__chan_write_begin(&st->out, e, &buf, &cap, w))) goto unpin;
    size_t slot = (size_t)(e % st->out.slots);
    if (st->out_ref_set[slot]) { /* the slot's last value went as an object: read by now */
        tr__objects_release(l->env.objects, st->out_refs[slot]);
        st->out_ref_set[slot] = 0;
    }
    int32_t code = failed;
    uint32_t flags = 0;
    size_t out_len = 0;
    if (!failed) {
        ctx->n_refs = st->n_in - 1;
        for (size_t j = 1; j < st->n_in; j++) {
            ctx->ref_data[j - 1] = data[j];
            ctx->ref_len[j - 1] = len[j];
        }
        tr__buf_reset(&ctx->result);
        ctx->has_err = 0;
        ctx->direct = st->gpu_out ? NULL : buf; /* a device edge's slot holds a payload */
        ctx->direct_cap = cap;
        ctx->direct_used = 0;
        ctx->fwd_lo = st->fwd && plain ? data[0] : NULL;
        ctx->fwd_cap = len[0];
        ctx->fwd_used = 0;
        ctx->in_graph = 1;
        ctx->dev_used = 0;
        methods_take(l);
        ctx->method = st->def->name;
        /* (the timeline: the step, by execution; its inputs' waits are not in it. A step
         * that waited is counted at once, with clock reads; others go in bursts) */
        uint8_t ticks = 0;
        int64_t t0 = idle ? tr__now_ns() : tr__burst_stamp(&l->burst, &ticks);
        tr__trace_method = st->def->name;
        int r = st->def->fn(ctx, l->env.self, data[0], len[0]);
        if (l->env.cls->idle) l->env.cls->idle(); /* (the loop waits next: tr_actor_class) */
        tr__trace_method = NULL;
        int64_t t1 = ticks ? tr__burst_stamp(&l->burst, &ticks) : tr__now_ns();
        tr__burst_push(&l->burst, t0, t1, ticks, st->def->name, e, r != 0);
        ctx->method = NULL;
#ifdef TR_WITH_CUDA
        /* a device value, or any value of a device edge, is taken before the lock goes:
         * the reply may be memory the actor's next method changes */
        if (r == 0 && !ctx->result.oom && (st->gpu_out || ctx->dev_used)) {
            gpu_done = 1;
            gpu_len = ctx->dev_used ? ctx->dev_len : ctx->result.len;
            if (st->gpu_out)
                gpu_rc = tr__dag_gpu_take(&st->gout, l->nccl, e,
                                          ctx->dev_used ? ctx->dev_ptr : ctx->result.data, gpu_len,
                                          ctx->dev_used, buf, cap, &out_len, &flags);
            else if (gpu_len > cap) /* a device value on an shm edge: into the slot */
                gpu_rc = tr__err(TR_EMSGSIZE,
                                 "its device result of %zu bytes exceeds the "
                                 "graph's slot_bytes (%zu)",
                                 gpu_len, cap);
            else if (!(gpu_rc = tr__dag_gpu_to_host(buf, ctx->dev_ptr, gpu_len)))
                out_len = gpu_len;
        }
        ctx->dev_used = 0;
#endif
        if (!l->keep) methods_release(l);
        ctx->direct = NULL;
        ctx->fwd_lo = NULL;
        ctx->n_refs = 0;
        if (r != 0 || ctx->result.oom) {
            tr__ctx_drop_result_obj(ctx); /* (a result object made before it failed: not sent) */
            if (!ctx->has_err)
                snprintf(ctx->err, sizeof ctx->err, "method '%s' %s", st->def->name,
                         ctx->result.oom ? "ran out of memory for its result" : "failed");
            code = TR_ETASK;
            why = ctx->err;
            why_len = strlen(ctx->err) + 1;
        } else if (gpu_done) { /* the slot holds its payload or value already */
            if (gpu_rc) {
                snprintf(ctx->err, sizeof ctx->err, "method '%s': %s", st->def->name,
                         tr__last_error());
                code = gpu_rc;
                flags = 0;
                out_len = 0;
                why = ctx->err;
                why_len = strlen(ctx->err) + 1;
                if (why_len > cap) why_len = cap;
            }
        } else if (ctx->fwd_used) { /* its input goes on: where it lies, not a copy */
            tr__chan_fwd f = {(uint64_t)((const char *)ctx->fwd_ptr - l->hdr), ctx->fwd_len};
            memcpy(buf, &f, sizeof f); /* (slots hold at least 16 bytes) */
            out_len = sizeof f;
            flags = TR__CHAN_FWD;
        } else if (ctx->direct_used) {
            out_len = ctx->direct_len;    /* in place already */
        } else if (ctx->has_result_obj) { /* over the slot: put once by tr_ctx_reply, or */
            tr_ref obj;                   /* written in place (tr_ctx_reply_alloc) */
            int trc = tr__ctx_take_result_obj(ctx, &obj);
            if (trc) {
                snprintf(ctx->err, sizeof ctx->err, "method '%s': its result: %s", st->def->name,
                         tr__last_error());
                code = trc;
                why = ctx->err;
                why_len = strlen(ctx->err) + 1;
            } else {
                st->out_refs[slot] = obj;
                st->out_ref_set[slot] = 1;
                memcpy(buf, obj.b, sizeof obj.b);
                out_len = sizeof obj.b;
                flags = TR__CHAN_REF;
            }
        } else {
            why = ctx->result.data;
            why_len = ctx->result.len;
        }
    }
    char toolong[300];
    tr_ref put;                   /* (in scope while `why` may point at it) */
    if (why_len > cap && !code) { /* a result over the slot: an object, its ref in the slot */
        if (tr__objects_put(l->env.objects, why, why_len, &put) == 0) {
            st->out_refs[slot] = put;
            st->out_ref_set[slot] = 1;
            why = put.b;
            why_len = sizeof put.b;
            flags = TR__CHAN_REF;
        }
    }
    if (why_len > cap) {
        snprintf(toolong, sizeof toolong,
                 "method '%s': its result of %zu bytes exceeds the graph's slot_bytes (%zu)",
                 st->def->name, why_len, cap);
        code = TR_EMSGSIZE;
        why = toolong;
        why_len = strlen(toolong) + 1;
        if (why_len > cap) why_len = cap;
    }
    if (why_len) {
        memcpy(buf, why, why_len);
        out_len = why_len;
    }
    if (idle || l->burst.n >= STEPS_PER_COUNT) count_steps(l);
    tr__chan_write_end(&st->out, e, code, flags, out_len, idle);
    dev_send = gpu_done && !gpu_rc && !code;
unpin: /* every way out: what this step pinned goes (before its inputs are released) */
    for (size_t j = 0; j < st->n_in; j++)
        if (pinned[j]) tr__objects_unpin(l->env.objects, pin[j]);
    if (rc) return rc; /* (an input or the output failed: the loop ends) */
    for (size_t j = 0; j < st->n_in; j++)
        tr__chan_release(&st->in[j], e, st->reader[j]);
#ifdef TR_WITH_CUDA
    /* published first: the readers learn of the value from the slot, then receive it */
    if (dev_send && (rc = tr__dag_gpu_send(&st->gout, l->nccl, gpu_len)))
        TR_LOG_WARN("DAG-GPU", "graph %s: sending a device value: %s", l->name, tr__last_error());
#else
    (void)dev_send, (void)gpu_len;
#endif
    return rc;
}

static void *run_loop(void *arg) {
    loop *l = arg;
    tr_group *seg = NULL;
    tr_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.rt = l->env.rt;
    ctx.id = l->env.id;
    ctx.objects = l->env.objects; /* (a reply over a slot goes there: tr__ctx_reply) */
    const void *ref_data[MAX_INPUTS];
    size_t ref_len[MAX_INPUTS];
    ctx.ref_data = ref_data;
    ctx.ref_len = ref_len;
    ctx.cap_refs = MAX_INPUTS;
    int rc = tr__group_join_segment(l->env.node_path, l->env.max_msg, l->world, l->rank, l->name,
                                    l->bytes, l->timeout_ms, &seg);
    if (rc) {
        TR_LOG_WARN("DAG-JOIN", "graph %s: %s", l->name, tr__last_error());
        goto out;
    }
    tr__dag_hdr *h = (tr__dag_hdr *)((char *)seg->seg + tr__coll_hdr_bytes());
    l->hdr = (const char *)h;
    tr__chan_wait w = {tr__deadline(l->timeout_ms), 0, &h->stop, driver_gone, seg->seg, 0};
    /* the driver lays the channels out once everyone has joined (or goes away) */
    rc = tr__chan_wait_event(&h->ready, 1, &w);
    if (!rc && __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != TR__DAG_MAGIC)
        rc = tr__err(TR_EPROTO, "no graph header");
    for (size_t i = 0; !rc && i < l->n_steps; i++) {
        step *st = &l->steps[i];
        rc = open_at(&st->out, h, l->bytes, st->out_off);
        if (!rc && (!(st->out_refs = calloc(st->out.slots, sizeof *st->out_refs)) ||
                    !(st->out_ref_set = calloc(st->out.slots, 1))))
            rc = tr__err(TR_ENOMEM, "step %zu", i);
        for (size_t j = 0; !rc && j < st->n_in; j++)
            if (!(rc = open_at(&st->in[j], h, l->bytes, st->in_off[j])) &&
                st->reader[j] >= st->in[j].readers)
                rc = tr__err(TR_EPROTO, "step %zu reads input %zu as reader %u of %u", i, j,
                             st->reader[j], st->in[j].readers);
    }
    for (size_t i = 0; !rc && i < l->n_steps; i++) /* collective nodes' groups */
        if (!l->steps[i].def)
            rc = tr__group_join(l->node_path, l->env.max_msg, l->steps[i].gworld, l->steps[i].grank,
                                "shm", l->steps[i].group, l->timeout_ms, &l->steps[i].grp);
    if (!rc && l->nccl_world) { /* the graph's own communicator, for its nccl edges */
        rc = tr__group_join(l->node_path, l->env.max_msg, l->nccl_world, l->nccl_rank, "nccl",
                            l->nccl_name, l->timeout_ms, &l->nccl);
        if (!rc) tr__group_set_checks(l->nccl, 0); /* the channels carry lengths */
    }
    for (size_t i = 0; !rc && i < l->n_steps; i++) {
        l->steps[i].gout.slots = l->steps[i].out.slots;
        l->steps[i].gout.slot_bytes = l->steps[i].out.slot_bytes;
    }
    if (rc) {
        if (rc != TR_ECLOSED) TR_LOG_WARN("DAG-ATTACH", "graph %s: %s", l->name, tr__last_error());
        goto out;
    }
    l->keep = !l->nccl_world;     /* (an nccl edge's receive waits for its sender) */
    w.deadline = TR__NO_DEADLINE; /* an idle graph waits (asleep) until it stops */
    w.spin_ns = l->spin_ns;
    for (uint64_t e = 0; !rc; e++)
        for (size_t i = 0; !rc && i < l->n_steps; i++)
            rc = run_step(l, &ctx, &l->steps[i], e, &w);
    if (rc != TR_ECLOSED && rc != TR_EPEER_DIED)
        TR_LOG_WARN("DAG-LOOP", "graph %s: %s", l->name, tr__last_error());
out:
    count_steps(l);
    for (size_t i = 0; i < l->n_steps; i++) {
        step *st = &l->steps[i];
        if (st->grp) tr__group_destroy(st->grp);
#ifdef TR_WITH_CUDA
        tr__dag_gpu_out_free(&st->gout);
        for (size_t j = 0; j < st->n_in; j++)
            tr__dag_gpu_in_free(&st->gin[j]);
#endif
        for (size_t k = 0; st->out_ref_set && k < st->out.slots; k++)
            if (st->out_ref_set[k]) tr__objects_release(l->env.objects, st->out_refs[k]);
        free(st->out_refs);
        free(st->out_ref_set);
    }
    if (l->nccl) tr__group_destroy(l->nccl);
    tr__group_destroy(seg); /* leaving: the driver's teardown sees it in the dead mask */
    tr__buf_free(&ctx.result);
    free(l);
    return NULL;
}

int tr__dag_wait_left(const void *seg, int world, int ms) {
    uint64_t all = world >= 64 ? ~1ull : ((1ull << world) - 2);
    int64_t deadline = tr__deadline(ms);
    while ((__atomic_load_n(&((const tr__coll_hdr *)seg)->dead, __ATOMIC_ACQUIRE) & all) != all) {
        if (tr__now_ns() >= deadline) return TR_ETIMEDOUT;
        struct timespec ts = {0, 500000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* ------------------------------------------------------------------ a node's bridge */

/* This actor is its node's first in a graph across nodes: it hosts the node's segment
 * (rank 0: it lays the channels out, as the driver does on its own node) and its bridge
 * (dag/bridge.h), on a thread of its own, until the graph stops, a link ends or an actor
 * of the node dies. */
typedef struct host {
    tr__worker_env env;
    char node_path[108], seg_name[200], graph[32], ip[64];
    uint8_t secret[TR__DAG_SECRET];
    int world, timeout_ms;
    uint32_t node, slots;
    uint64_t bytes, slot_bytes;
    size_t n_chans, n_sends, n_recvs;
    uint64_t *chan_off;
    uint32_t *chan_readers;
    tr__dag_send *sends;
    tr__dag_recv *recvs;
    int failed; /* atomic: the bridge said its part ended; 2: a goodbye (a teardown) */
} host;

static void host_free(host *hb) {
    if (!hb) return;
    free(hb->chan_off);
    free(hb->chan_readers);
    free(hb->sends);
    free(hb->recvs);
    free(hb);
}

/* A member of this node's segment (an actor here) died or left. */
static int member_gone(void *arg) {
    uint64_t dead = __atomic_load_n(&((tr__coll_hdr *)arg)->dead, __ATOMIC_ACQUIRE) >> 1;
    return dead ? tr__err(TR_EACTOR_DIED, "an actor of the graph on this node died") : 0;
}

static void host_fail(void *arg, int code, const char *why) {
    (void)why; /* (the bridge logged a failure) */
    __atomic_store_n(&((host *)arg)->failed, code ? 1 : 2, __ATOMIC_RELEASE);
}

static void *run_host(void *arg) {
    host *hb = arg;
    tr_group *seg = NULL;
    tr__chan *chans = calloc(hb->n_chans + 1, sizeof *chans);
    tr__dag_bridge *br = NULL;
    int rc = chans ? 0 : tr__err(TR_ENOMEM, "dag bridge");
    if (!rc)
        rc = tr__group_join_segment(hb->node_path, hb->env.max_msg, hb->world, 0, hb->seg_name,
                                    hb->bytes, hb->timeout_ms, &seg);
    tr__dag_hdr *h = seg ? (tr__dag_hdr *)((char *)seg->seg + tr__coll_hdr_bytes()) : NULL;
    for (size_t i = 0; !rc && i < hb->n_chans; i++) {
        uint64_t off = hb->chan_off[i];
        if (off < sizeof *h || off >= hb->bytes || off % 64)
            rc = tr__err(TR_EPROTO, "a channel offset %llu outside the graph's %llu bytes",
                         (unsigned long long)off, (unsigned long long)hb->bytes);
        else
            rc = tr__chan_init(&chans[i], (char *)h + off, (size_t)(hb->bytes - off), hb->slots,
                               hb->slot_bytes, hb->chan_readers[i]);
    }
    if (h) { /* the actors here wait for this (with the stop word set if it failed) */
        if (rc) __atomic_store_n(&h->stop, 1, __ATOMIC_SEQ_CST);
        __atomic_store_n(&h->magic, TR__DAG_MAGIC, __ATOMIC_RELEASE);
        tr__event_signal(&h->ready);
    }
    if (!rc) {
        tr__dag_bridge_spec s = {.graph = hb->graph,
                                 .secret = hb->secret,
                                 .node = hb->node,
                                 .host = hb->ip,
                                 .node_path = hb->node_path,
                                 .max_msg = hb->env.max_msg,
                                 .h = h,
                                 .bytes = hb->bytes,
                                 .sends = hb->sends,
                                 .n_sends = hb->n_sends,
                                 .recvs = hb->recvs,
                                 .n_recvs = hb->n_recvs,
                                 .objects = hb->env.objects,
                                 .timeout_ms = hb->timeout_ms,
                                 .check = member_gone,
                                 .check_arg = seg->seg,
                                 .on_fail = host_fail,
                                 .fail_arg = hb};
        rc = tr__dag_bridge_start(&s, &br);
    }
    if (rc)
        TR_LOG_WARN("DAG-BRIDGE", "graph %s, node %u: %s", hb->graph, hb->node, tr__last_error());
    /* until the graph stops here: a link ended (the driver's teardown, or another node's
     * failure), an actor here died */
    while (!rc && !__atomic_load_n(&hb->failed, __ATOMIC_ACQUIRE) &&
           !__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE) && !member_gone(seg->seg)) {
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    /* a failure here or upstream goes on as one (no goodbye: the nodes downstream count
     * the graph failed); a teardown as a teardown */
    if (__atomic_load_n(&hb->failed, __ATOMIC_ACQUIRE) != 2) tr__dag_bridge_abort(br);
    if (h) {
        __atomic_store_n(&h->stop, 1, __ATOMIC_SEQ_CST);
        tr__event_wake(&h->ready);
        for (size_t i = 0; i < hb->n_chans; i++)
            if (chans[i].base) tr__chan_wake_all(&chans[i]);
    }
    tr__dag_bridge_stop(br);
    if (seg) { /* the actors here leave as their loops end; then the segment goes */
        tr__dag_wait_left(seg->seg, hb->world, 2000);
        tr__group_destroy(seg);
    }
    free(chans);
    host_free(hb);
    return NULL;
}

/* The "bridge" part of an attach message: {secret, node, host, slots, slot_bytes, chans:
 * [[off, readers]], sends: [[value, off, reader, [nodes]]], recvs: [[value, off, node]]}. */
static int parse_host(const tr__obj *o, host **out) {
    const tr__obj *chans = tr__obj_get(o, "chans"), *sends = tr__obj_get(o, "sends"),
                  *recvs = tr__obj_get(o, "recvs");
    host *hb = calloc(1, sizeof *hb);
    if (!hb) return tr__err(TR_ENOMEM, "dag attach");
    int64_t node;
    uint64_t slots, slot_bytes;
    const char *ip;
    const void *secret;
    size_t ipn, sn;
    size_t nc = tr__obj_len(chans), ns = tr__obj_len(sends), nr = tr__obj_len(recvs);
    int rc = tr__get_int(o, "node", &node) || tr__get_str(o, "host", &ip, &ipn) ||
                     tr__get_bin(o, "secret", &secret, &sn) || sn != TR__DAG_SECRET ||
                     tr__get_uint(o, "slots", &slots) ||
                     tr__get_uint(o, "slot_bytes", &slot_bytes) || !chans || !sends || !recvs ||
                     node < 1 || node >= TR__DAG_MAX_NODES || ipn == 0 || ipn >= sizeof hb->ip ||
                     slots < 1 || slots > TR__CHAN_MAX_SLOTS || nc > 4096 || ns > 4096 || nr > 4096
                 ? TR_EPROTO
                 : 0;
    if (!rc) {
        memcpy(hb->ip, ip, ipn);
        memcpy(hb->secret, secret, sizeof hb->secret);
        hb->node = (uint32_t)node;
        hb->slots = (uint32_t)slots;
        hb->slot_bytes = slot_bytes;
        hb->n_chans = nc;
        hb->n_sends = ns;
        hb->n_recvs = nr;
        hb->chan_off = calloc(nc + 1, sizeof *hb->chan_off);
        hb->chan_readers = calloc(nc + 1, sizeof *hb->chan_readers);
        hb->sends = calloc(ns + 1, sizeof *hb->sends);
        hb->recvs = calloc(nr + 1, sizeof *hb->recvs);
        if (!hb->chan_off || !hb->chan_readers || !hb->sends || !hb->recvs) rc = TR_ENOMEM;
    }
    for (size_t i = 0; !rc && i < nc; i++) {
        const tr__obj *c = tr__obj_at(chans, i);
        uint64_t r;
        if (tr__obj_len(c) != 2 || tr__obj_uint(tr__obj_at(c, 0), "off", &hb->chan_off[i]) ||
            tr__obj_uint(tr__obj_at(c, 1), "readers", &r) || r < 1 || r > TR__CHAN_MAX_READERS)
            rc = TR_EPROTO;
        else
            hb->chan_readers[i] = (uint32_t)r;
    }
    for (size_t i = 0; !rc && i < ns; i++) {
        const tr__obj *c = tr__obj_at(sends, i), *dst = tr__obj_at(c, 3);
        uint64_t v, r;
        tr__dag_send *sd = &hb->sends[i];
        if (tr__obj_len(c) != 4 || tr__obj_uint(tr__obj_at(c, 0), "value", &v) ||
            tr__obj_uint(tr__obj_at(c, 1), "off", &sd->off) ||
            tr__obj_uint(tr__obj_at(c, 2), "reader", &r) || r >= TR__CHAN_MAX_READERS || !dst ||
            tr__obj_len(dst) < 1 || tr__obj_len(dst) > TR__DAG_MAX_NODES || v > UINT32_MAX) {
            rc = TR_EPROTO;
            break;
        }
        sd->v = (uint32_t)v;
        sd->reader = (uint32_t)r;
        sd->n_dst = (uint32_t)tr__obj_len(dst);
        for (uint32_t k = 0; !rc && k < sd->n_dst; k++) {
            uint64_t d;
            if (tr__obj_uint(tr__obj_at(dst, k), "node", &d) || d >= TR__DAG_MAX_NODES)
                rc = TR_EPROTO;
            else
                sd->dst[k] = (uint32_t)d;
        }
    }
    for (size_t i = 0; !rc && i < nr; i++) {
        const tr__obj *c = tr__obj_at(recvs, i);
        uint64_t v, src;
        tr__dag_recv *rv = &hb->recvs[i];
        if (tr__obj_len(c) != 3 || tr__obj_uint(tr__obj_at(c, 0), "value", &v) ||
            tr__obj_uint(tr__obj_at(c, 1), "off", &rv->off) ||
            tr__obj_uint(tr__obj_at(c, 2), "node", &src) || src >= TR__DAG_MAX_NODES ||
            v > UINT32_MAX)
            rc = TR_EPROTO;
        rv->v = (uint32_t)v;
        rv->src = (uint32_t)src;
    }
    if (rc) {
        host_free(hb);
        return rc == TR_ENOMEM ? tr__err(rc, "dag attach")
                               : tr__err(rc, "dag attach: a malformed bridge");
    }
    *out = hb;
    return 0;
}

int tr__dag_attach(const tr__worker_env *env, tr_ctx *ctx, const void *args, size_t len) {
    tr__dec d;
    if (tr__dec_init(&d, args, len)) {
        tr__ctx_error(ctx, "dag attach: not msgpack");
        return TR_EPROTO;
    }
    loop *l = NULL;
    const char *name;
    size_t nn;
    int64_t world, rank, timeout_ms, spin_ns;
    uint64_t bytes;
    const tr__obj *check = tr__obj_get(d.root, "check");
    int rc = parse(env, ctx, d.root, &l);
    if (!rc && (rc = parse_gpu(l, ctx, d.root)) == TR_ETASK) rc = TR_EPROTO;
    if (!rc && (rc = parse_fwd(l, ctx, d.root)) == TR_ETASK) rc = TR_EPROTO;
    if (!rc &&
        (tr__get_str(d.root, "name", &name, &nn) || nn >= sizeof l->name ||
         tr__get_int(d.root, "world", &world) || tr__get_int(d.root, "rank", &rank) ||
         tr__get_uint(d.root, "bytes", &bytes) || tr__get_int(d.root, "timeout_ms", &timeout_ms) ||
         tr__get_int(d.root, "spin_ns", &spin_ns)))
        rc = tr__ctx_error(ctx, "dag attach: malformed: %s", tr__last_error());
    /* checked here, not trusted: the segment must hold the graph's header, waits must end */
    if (!rc && (world < 2 || world > TR__COLL_MAX_WORLD || rank < 1 || rank >= world ||
                bytes < sizeof(tr__dag_hdr) || bytes % 64 || bytes > TR__COLL_MAX_EXTRA ||
                timeout_ms < 1 || timeout_ms > 3600000 || spin_ns < -1000000 || spin_ns > 1000000))
        rc = tr__ctx_error(ctx, "dag attach: world, rank, size, timeout or spin out of range");
    if (rc == TR_ETASK) rc = TR_EPROTO;
    host *hb = NULL; /* this actor hosts its node's part of a graph across nodes */
    const tr__obj *bridge = tr__obj_get(d.root, "bridge");
    if (!rc && !check && bridge && (rc = parse_host(bridge, &hb)))
        tr__ctx_error(ctx, "%s", tr__last_error());
    if (rc || check) {
        free(l);
        tr__dec_free(&d);
        return rc ? rc : tr__ctx_reply(ctx, "ok", 2);
    }
    if (hb) {
        hb->env = *env;
        snprintf(hb->node_path, sizeof hb->node_path, "%s", env->node_path ? env->node_path : "");
        hb->env.node_path = hb->node_path;
        memcpy(hb->seg_name, name, nn);
        /* the graph's name: the segment's here, less its "-n<node>" */
        const char *dash = memrchr(name, '-', nn);
        size_t gn = dash ? (size_t)(dash - name) : nn;
        snprintf(hb->graph, sizeof hb->graph, "%.*s", (int)(gn < 31 ? gn : 31), name);
        hb->world = (int)world;
        hb->bytes = bytes;
        hb->timeout_ms = (int)timeout_ms;
    }
    memcpy(l->name, name, nn);
    l->env = *env;
    snprintf(l->node_path, sizeof l->node_path, "%s", env->node_path ? env->node_path : "");
    l->env.node_path = l->node_path; /* the worker's copy may go before this thread does */
    l->world = (int)world;
    l->rank = (int)rank;
    l->bytes = bytes;
    l->timeout_ms = (int)timeout_ms;
    l->spin_ns = spin_ns;
    tr__dec_free(&d);
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&t, &a, run_loop, l);
    if (rc) {
        pthread_attr_destroy(&a);
        free(l);
        host_free(hb);
        return tr__ctx_error(ctx, "dag attach: cannot start the graph's thread");
    }
    if (hb && pthread_create(&t, &a, run_host, hb) != 0) {
        host_free(hb); /* (the loop's rendezvous times out: the compile fails) */
        pthread_attr_destroy(&a);
        return tr__ctx_error(ctx, "dag attach: cannot start the graph's bridge thread");
    }
    pthread_attr_destroy(&a);
    return tr__ctx_reply(ctx, "ok", 2);
}

#ifndef TR_WITH_CUDA
int tr__ctx_reply_device(tr_ctx *ctx, const void *dev, size_t len) {
    (void)ctx, (void)dev, (void)len;
    return tr__err(TR_EINVAL, "tr_ctx_reply_device: this troupe was built without CUDA "
                              "(--config=cuda)");
}
#endif
