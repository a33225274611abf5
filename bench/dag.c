/* bench/dag.c - compiled graphs against their baselines, measured in the same run: a raw
 * shared-memory ping-pong between two processes with the wait primitive the channels use
 * (core/wait, spinning as a graph does where every party has a core), troupe's classic
 * call (sync round trip and pipelined calls), and memcpy of 1 MiB.
 *
 *   bazel run //bench:dag [-- --json] [-- --iters N] [-- --ar64-iters N (40: the 64 MiB pair)]
 *                         [-- --timeline FILE (the run's timeline, as `troupe timeline`)]
 *
 * Metrics: raw_shm_rtt_us_p50, classic_rtt_us_p50, classic_async_calls_per_s,
 * dag_echo_rtt_us_p50 (driver -> actor -> driver, 8 bytes), dag_execs_per_s_1actor and
 * dag_execs_per_s_chain4 (pipelined: max_inflight executions in flight), memcpy_1MiB_us_p50,
 * dag_echo_1MiB_us_p50 (the echo replies its input, which the graph forwards: one copy, the
 * driver's, into the input's slot) beside raw_shm_1MiB_echo_us_p50 (two copies by hand
 * between two processes: into a shared buffer, and from it into another, interleaved) and
 * dag_copy_1MiB_us_p50 (the same graph with a method that copies its input into its output
 * slot: the raw echo's two copies), dag_idle_cpu_ms_per_s (CPU time of the graph's processes,
 * driver included, over a second in which the compiled graph sits idle),
 * dag_allreduce_us_p50_4r_1MiB (input -> 4 actors each make 1 MiB of float32 -> a collective node
 * allreduces them -> the 4 sums back) beside classic_allreduce_us_p50_4r_1MiB (the same fill and
 * tr_allreduce inside the 4 actors, called classically; interleaved), the same at 8 MiB
 * (slots of 8 MiB) and 64 MiB (as objects), and the ratios the targets are stated in.
 */
#include <dirent.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "core/clock.h"
#include "core/wait.h"
#include "troupe/dag.h"
#include "troupe/troupe.h"

#define SPIN_NS 50000 /* as dag/graph.c spins where every party has a core */

static int echo(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    return tr_ctx_reply(ctx, args, len);
}

#define AR_FLOATS (256 * 1024)    /* 1 MiB of float32 */
#define AR_MAX_FLOATS (16u << 20) /* 64 MiB of float32: the largest collective node */

/* A fill's argument: the value, and how many floats (1 MiB of them without it). */
typedef struct fill_arg {
    int64_t x;
    uint64_t count;
} fill_arg;

/* Its input copied into the output slot (tr_ctx_reply_alloc): not forwarded. */
static int copy(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    void *buf;
    int rc = tr_ctx_reply_alloc(ctx, len, &buf);
    if (!rc && len) memcpy(buf, args, len);
    return rc;
}

static float *fill_buf(const void *args, size_t len, uint64_t *count) {
    static float *v;
    fill_arg a = {0, AR_FLOATS};
    if (len == sizeof a) memcpy(&a, args, sizeof a);
    if (len == sizeof a.x) memcpy(&a.x, args, sizeof a.x);
    if (a.count == 0 || a.count > AR_MAX_FLOATS) return NULL;
    if (!v && !(v = malloc(AR_MAX_FLOATS * sizeof *v))) return NULL;
    for (uint64_t i = 0; i < a.count; i++)
        v[i] = (float)a.x;
    *count = a.count;
    return v;
}

/* count floats, each x: a collective node's input, written where the reply goes (its
 * slot, or an object over a slot: tr_ctx_reply_alloc), as fill_ar fills its buffer. */
static int fill(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    fill_arg a = {0, AR_FLOATS};
    if (len == sizeof a) memcpy(&a, args, sizeof a);
    if (len == sizeof a.x) memcpy(&a.x, args, sizeof a.x);
    if (a.count == 0 || a.count > AR_MAX_FLOATS) return tr_ctx_error(ctx, "fill: a bad count");
    float *v;
    if (tr_ctx_reply_alloc(ctx, a.count * sizeof *v, (void **)&v))
        return tr_ctx_error(ctx, "fill: %s", tr_last_error());
    for (uint64_t i = 0; i < a.count; i++)
        v[i] = (float)a.x;
    return 0;
}

/* The same fill, then the allreduce through tr_allreduce on the declared group "bench-ar"
 * (the baseline of the collective node); replies the first element. */
static int fill_ar(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    static tr_group *g;
    if (!g && tr_group_open(tr_ctx_runtime(ctx), "bench-ar", 10000, &g))
        return tr_ctx_error(ctx, "group: %s", tr_last_error());
    uint64_t count;
    float *v = fill_buf(args, len, &count);
    if (!v) return tr_ctx_error(ctx, "fill: a bad count, or no memory");
    if (tr_allreduce(g, v, v, count, TR_FLOAT32, TR_SUM, 30000))
        return tr_ctx_error(ctx, "allreduce: %s", tr_last_error());
    return tr_ctx_reply(ctx, v, sizeof v[0]);
}

static const tr_method_def methods[] = {
    {"echo", echo}, {"copy", copy}, {"fill", fill}, {"fill_ar", fill_ar}};

/* The raw baseline: ping and pong words in a shared page, a forked echo process, kept
 * for the run so that its blocks interleave with the graph's (this host's cross-core
 * latency moves between runs and within them). In its 1 MiB mode the echo process also
 * copies buffer A into buffer B (both shared) before it answers: what a graph's 1 MiB
 * echo does, by hand. */
#define RAW_MAP (4096 + 2 * (1u << 20))
static tr__event *raw_ev;
static char *raw_a, *raw_b;
static pid_t raw_kid;
static uint32_t raw_n;
static int64_t raw_spin;

static void raw_start(int64_t spin) {
    raw_ev = mmap(NULL, RAW_MAP, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (raw_ev == MAP_FAILED) exit(1);
    raw_a = (char *)raw_ev + 4096;
    raw_b = raw_a + (1u << 20);
    memset(raw_a, 0, 2u << 20); /* faulted once, as a graph's segment is */
    raw_spin = spin;
    raw_kid = fork(); /* no threads yet: fork is safe here */
    if (raw_kid == 0) {
        for (uint32_t i = 0;; i++) { /* until the parent stops it (ping[1] set) */
            if (tr__event_wait_spin(&raw_ev[0], i, tr__deadline(60000), spin)) _exit(1);
            if (__atomic_load_n(&raw_ev[16].seq, __ATOMIC_ACQUIRE)) _exit(0);
            if (__atomic_load_n(&raw_ev[24].seq, __ATOMIC_ACQUIRE)) memcpy(raw_b, raw_a, 1u << 20);
            tr__event_signal(&raw_ev[8]);
        }
    }
}

static double raw_rtt_us(void) {
    double t0 = bench_now_us();
    tr__event_signal(&raw_ev[0]); /* ping and pong a cache line apart */
    if (tr__event_wait_spin(&raw_ev[8], raw_n++, tr__deadline(10000), raw_spin)) exit(1);
    return bench_now_us() - t0;
}

/* 1 MiB by hand: copied into A here, from A to B by the echo process. */
static double raw_1mib_us(const char *src) {
    __atomic_store_n(&raw_ev[24].seq, 1, __ATOMIC_RELEASE);
    double t0 = bench_now_us();
    memcpy(raw_a, src, 1u << 20);
    tr__event_signal(&raw_ev[0]);
    if (tr__event_wait_spin(&raw_ev[8], raw_n++, tr__deadline(10000), raw_spin)) exit(1);
    return bench_now_us() - t0;
}

static void raw_stop(void) {
    __atomic_store_n(&raw_ev[16].seq, 1, __ATOMIC_RELEASE);
    tr__event_signal(&raw_ev[0]);
    waitpid(raw_kid, NULL, 0);
    munmap(raw_ev, RAW_MAP);
}

static double classic_rtt_us(tr_runtime *rt, tr_actor_id a, int64_t v) {
    tr_ref r;
    double t = bench_now_us();
    CHECK(tr_call(rt, a, "echo", &v, sizeof v, &r));
    CHECK(tr_get(rt, r, 10000, NULL, NULL));
    CHECK(tr_ref_release(rt, r));
    return bench_now_us() - t;
}

/* A graph: the input through `n` actors' `method`, one after another. */
static tr_dag *chain(tr_runtime *rt, const tr_actor_id *a, int n, uint64_t slot_bytes,
                     const char *method) {
    tr_dag *g;
    tr_dag_node prev;
    CHECK(tr_dag_create(rt, &g));
    CHECK(tr_dag_input(g, &prev));
    for (int i = 0; i < n; i++)
        CHECK(tr_dag_bind(g, a[i], method, &prev, 1, &prev));
    CHECK(tr_dag_output(g, &prev, 1));
    tr_dag_options o = TR_DAG_OPTIONS_INIT;
    o.slot_bytes = slot_bytes;
    CHECK(tr_dag_compile(g, &o));
    return g;
}

static double dag_rtt_us(tr_dag *g, const void *in, size_t len) {
    uint64_t e;
    const void *d;
    size_t n;
    double t = bench_now_us();
    CHECK(tr_dag_execute(g, in, len, &e));
    CHECK(tr_dag_get(g, e, 0, 10000, &d, &n));
    CHECK(tr_dag_release(g, e));
    t = bench_now_us() - t;
    if (n != len) {
        fprintf(stderr, "the graph returned %zu bytes, not %zu\n", n, len);
        exit(1);
    }
    return t;
}

/* Executions per second with up to `window` in flight. */
static double dag_per_s(tr_dag *g, int total, int window) {
    double t0 = bench_now_us();
    uint64_t next_get = UINT64_MAX, e;
    for (int64_t i = 0; i < total; i++) {
        CHECK(tr_dag_execute(g, &i, sizeof i, &e));
        if (next_get == UINT64_MAX) next_get = e; /* numbers go on from earlier runs */
        if (e + 1 - next_get >= (uint64_t)window) {
            const void *d;
            size_t n;
            CHECK(tr_dag_get(g, next_get, 0, 10000, &d, &n));
            CHECK(tr_dag_release(g, next_get++));
        }
    }
    for (; next_get <= e; next_get++) {
        const void *d;
        size_t n;
        CHECK(tr_dag_get(g, next_get, 0, 10000, &d, &n));
        CHECK(tr_dag_release(g, next_get));
    }
    return (double)total / ((bench_now_us() - t0) / 1e6);
}

/* CPU time (ns) of every thread of a process, from /proc/PID/task/ * /schedstat. */
static int64_t cpu_ns(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    int64_t sum = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char p[320];
        snprintf(p, sizeof p, "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
        FILE *f = fopen(p, "r");
        long long ns = 0;
        if (f && fscanf(f, "%lld", &ns) == 1) sum += ns;
        if (f) fclose(f);
    }
    if (d) closedir(d);
    return sum;
}

int main(int argc, char **argv) {
    tr_config *cfg;
    CHECK(tr_config_create(&cfg));
    tr_actor_class cls = TR_ACTOR_CLASS_INIT;
    cls.name = "Echo";
    cls.methods = methods;
    cls.n_methods = sizeof methods / sizeof methods[0];
    CHECK(tr_config_add_class(cfg, &cls));
    tr_worker_main(cfg); /* a worker never returns from here */

    int iters = 20000, ar64_iters = 40;
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0) iters = atoi(argv[i + 1]);
        if (strcmp(argv[i], "--ar64-iters") == 0) ar64_iters = atoi(argv[i + 1]);
    }
    if (ar64_iters < 3) ar64_iters = 3;
    if (iters < 1000) iters = 1000;
    bench_init(argc, argv);

    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    raw_start(ncpu >= 2 ? SPIN_NS : -20000);

    tr_runtime *rt;
    CHECK(tr_init(cfg, &rt));
    tr_actor_id a[4];
    for (int i = 0; i < 4; i++) {
        CHECK(tr_actor_create(rt, "Echo", NULL, NULL, 0, &a[i]));
        CHECK(tr_actor_wait_ready(rt, a[i], 10000));
    }
    double *t = malloc(sizeof(double) * (size_t)iters);
    for (int i = 0; i < 1000; i++)
        classic_rtt_us(rt, a[0], i);
    for (int i = 0; i < iters; i++)
        t[i] = classic_rtt_us(rt, a[0], i);
    double classic = bench_percentile(t, (size_t)iters, 50);
    double classic_async = bench_async_calls_per_s(rt, a[0], "echo", iters * 5);

    tr_dag *g1 = chain(rt, a, 1, 65536, "echo");
    int64_t v = 42;
    double *rt_raw = malloc(sizeof(double) * (size_t)iters);
    for (int i = 0; i < 1000; i++)
        dag_rtt_us(g1, &v, sizeof v), raw_rtt_us();
    enum { BLOCK = 500 }; /* the graph's echo and the raw ping-pong, block by block */
    for (int base = 0; base < iters; base += BLOCK) {
        int n = iters - base < BLOCK ? iters - base : BLOCK;
        for (int i = 0; i < n; i++)
            rt_raw[base + i] = raw_rtt_us();
        for (int i = 0; i < n; i++)
            t[base + i] = dag_rtt_us(g1, &v, sizeof v);
    }
    double raw = bench_percentile(rt_raw, (size_t)iters, 50);
    double dag_rtt = bench_percentile(t, (size_t)iters, 50);
    free(rt_raw);
    double per_s_1 = dag_per_s(g1, iters * 5, 8);

    /* idle: the compiled graph waits for a second; its processes should sleep */
    tr_actor_details det;
    memset(&det, 0, sizeof det);
    tr_actor_details_init(&det);
    CHECK(tr_actor_info(rt, a[0], &det));
    int64_t c0 = cpu_ns(det.pid) + cpu_ns(getpid());
    usleep(1000000);
    int64_t c1 = cpu_ns(det.pid) + cpu_ns(getpid());
    double idle_ms = (double)(c1 - c0) / 1e6;
    CHECK(tr_dag_destroy(g1));

    tr_dag *g4 = chain(rt, a, 4, 65536, "echo");
    dag_per_s(g4, 1000, 8);
    double per_s_4 = dag_per_s(g4, iters * 5, 8);
    CHECK(tr_dag_destroy(g4));

    /* 1 MiB through one actor, beside memcpy of 1 MiB */
    size_t mib = 1 << 20;
    char *src = malloc(mib), *dst = malloc(mib);
    memset(src, 1, mib);
    memset(dst, 2, mib);
    int big_iters = iters / 20 > 200 ? iters / 20 : 200;
    for (int i = 0; i < big_iters; i++) {
        double t0 = bench_now_us();
        memcpy(dst, src, mib);
        __asm__ volatile("" ::"r"(dst) : "memory");
        t[i] = bench_now_us() - t0;
    }
    double copy = bench_percentile(t, (size_t)big_iters, 50);
    tr_dag *gb = chain(rt, a, 1, mib, "echo"), *gc = chain(rt, a + 1, 1, mib, "copy");
    double *tr_big = malloc(sizeof(double) * (size_t)big_iters);
    double *tr_copy = malloc(sizeof(double) * (size_t)big_iters);
    for (int i = 0; i < 20; i++)
        dag_rtt_us(gb, src, mib), raw_1mib_us(src), dag_rtt_us(gc, src, mib);
    for (int base = 0; base < big_iters; base += 50) { /* interleaved, block by block */
        int n = big_iters - base < 50 ? big_iters - base : 50;
        for (int i = 0; i < n; i++)
            tr_big[base + i] = raw_1mib_us(src);
        for (int i = 0; i < n; i++)
            t[base + i] = dag_rtt_us(gb, src, mib);
        for (int i = 0; i < n; i++)
            tr_copy[base + i] = dag_rtt_us(gc, src, mib);
    }
    raw_stop();
    double big = bench_percentile(t, (size_t)big_iters, 50);
    double raw_big = bench_percentile(tr_big, (size_t)big_iters, 50);
    double copy_big = bench_percentile(tr_copy, (size_t)big_iters, 50);
    free(tr_big);
    free(tr_copy);
    CHECK(tr_dag_destroy(gb));
    CHECK(tr_dag_destroy(gc));

    /* a collective node over the 4 actors' outputs, beside tr_allreduce in them: 1 MiB in
     * the slots, 8 MiB in slots of 8 MiB, 64 MiB as objects (slots of at most 8 MiB) */
    CHECK(tr_group_declare(rt, a, 4, NULL, "shm", "bench-ar"));
    static const uint64_t ar_mib[] = {1, 8, 64};
    double ar_dag[3], ar_classic[3];
    for (int z = 0; z < 3; z++) {
        uint64_t bytes = ar_mib[z] << 20, floats = bytes / sizeof(float);
        tr_dag *ga;
        tr_dag_node in, nf[4], nr[4];
        CHECK(tr_dag_create(rt, &ga));
        CHECK(tr_dag_input(ga, &in));
        for (int i = 0; i < 4; i++)
            CHECK(tr_dag_bind(ga, a[i], "fill", &in, 1, &nf[i]));
        CHECK(tr_dag_allreduce(ga, nf, 4, TR_FLOAT32, TR_SUM, nr));
        CHECK(tr_dag_output(ga, nr, 4));
        tr_dag_options ao = TR_DAG_OPTIONS_INIT;
        ao.slot_bytes = bytes < (8u << 20) ? bytes : (8u << 20);
        ao.max_inflight = 2;
        CHECK(tr_dag_compile(ga, &ao));
        int ar_iters = z == 0   ? (big_iters / 2 > 50 ? big_iters / 2 : 50)
                       : z == 1 ? 60
                                : ar64_iters;
        double *tg = malloc(sizeof(double) * (size_t)ar_iters);
        double *tc = malloc(sizeof(double) * (size_t)ar_iters);
        /* interleaved; the first ones warm up: 3, and at 64 MiB 20 (every new object is
         * fresh memory to the process that writes it until it has touched most of the
         * store once, in both its views: ~2 faults of ~1 us per 4 KiB page) */
        int warm = z == 2 ? 20 : 3;
        for (int i = -warm; i < ar_iters; i++) {
            fill_arg x = {i + 10, floats};
            uint64_t e;
            double t0 = bench_now_us();
            CHECK(tr_dag_execute(ga, &x, sizeof x, &e));
            for (size_t k = 0; k < 4; k++) {
                const void *d;
                size_t n;
                CHECK(tr_dag_get(ga, e, k, 30000, &d, &n));
                if (n != bytes || ((const float *)d)[floats - 1] != (float)(4 * x.x)) {
                    fprintf(stderr, "the collective node gave a wrong sum\n");
                    exit(1);
                }
            }
            CHECK(tr_dag_release(ga, e));
            double t1 = bench_now_us();
            tr_ref r[4];
            for (int k = 0; k < 4; k++)
                CHECK(tr_call(rt, a[k], "fill_ar", &x, sizeof x, &r[k]));
            for (int k = 0; k < 4; k++) {
                CHECK(tr_get(rt, r[k], 30000, NULL, NULL));
                CHECK(tr_ref_release(rt, r[k]));
            }
            if (i >= 0) {
                tg[i] = t1 - t0;
                tc[i] = bench_now_us() - t1;
            }
        }
        ar_dag[z] = bench_percentile(tg, (size_t)ar_iters, 50);
        ar_classic[z] = bench_percentile(tc, (size_t)ar_iters, 50);
        CHECK(tr_dag_destroy(ga));
        free(tg);
        free(tc);
    }

    bench_report("raw_shm_rtt_us_p50", raw, "us");
    bench_report("classic_rtt_us_p50", classic, "us");
    bench_report("classic_async_calls_per_s", classic_async, "calls/s");
    bench_report("dag_echo_rtt_us_p50", dag_rtt, "us");
    bench_report("dag_echo_over_raw_shm", dag_rtt / raw, "x");
    bench_report("dag_echo_over_classic", dag_rtt / classic, "x");
    bench_report("dag_execs_per_s_1actor", per_s_1, "execs/s");
    bench_report("dag_1actor_over_classic_async", per_s_1 / classic_async, "x");
    bench_report("dag_execs_per_s_chain4", per_s_4, "execs/s");
    bench_report("memcpy_1MiB_us_p50", copy, "us");
    bench_report("dag_echo_1MiB_us_p50", big, "us");
    bench_report("dag_echo_1MiB_over_memcpy", big / copy, "x");
    bench_report("raw_shm_1MiB_echo_us_p50", raw_big, "us");
    bench_report("dag_echo_1MiB_over_raw_shm", big / raw_big, "x");
    bench_report("dag_copy_1MiB_us_p50", copy_big, "us");
    bench_report("dag_copy_1MiB_over_raw_shm", copy_big / raw_big, "x");
    bench_report("dag_idle_cpu_ms_per_s", idle_ms, "ms/s");
    bench_report("dag_allreduce_us_p50_4r_1MiB", ar_dag[0], "us");
    bench_report("classic_allreduce_us_p50_4r_1MiB", ar_classic[0], "us");
    bench_report("dag_allreduce_over_classic", ar_dag[0] / ar_classic[0], "x");
    bench_report("dag_allreduce_us_p50_4r_8MiB", ar_dag[1], "us");
    bench_report("classic_allreduce_us_p50_4r_8MiB", ar_classic[1], "us");
    bench_report("dag_allreduce_over_classic_8MiB", ar_dag[1] / ar_classic[1], "x");
    bench_report("dag_allreduce_us_p50_4r_64MiB", ar_dag[2], "us");
    bench_report("classic_allreduce_us_p50_4r_64MiB", ar_classic[2], "us");
    bench_report("dag_allreduce_over_classic_64MiB", ar_dag[2] / ar_classic[2], "x");
    tr_store_stats ss = TR_STORE_STATS_INIT; /* (a full store spills: not a fair figure) */
    CHECK(tr_object_stats(rt, &ss));
    bench_report("store_spills", (double)ss.spills, "objects");
    for (int i = 1; i + 1 < argc; i++) /* (where the time went: troupe timeline's JSON) */
        if (strcmp(argv[i], "--timeline") == 0) CHECK(tr_timeline_dump(rt, argv[i + 1]));
    tr_shutdown(rt);
    tr_config_destroy(cfg);
    free(t);
    free(src);
    free(dst);
    return 0;
}
