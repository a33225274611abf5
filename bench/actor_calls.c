/* bench/actor_calls.c - method-call cost: a small-argument echo, sync round trip (p50,
 * p99) and pipelined async throughput, beside the raw Unix-socket ping-pong of this
 * machine measured in the same run; all of it three times: on call rings with the callers
 * and the actor polling before they sleep ("call_rings" and "call_spin_us", their
 * defaults), on rings without polling (`_nospin`), and on the socket (`_sockets`,
 * "call_rings" 0, polling). Then the CPU time the caller and the actor's worker take in
 * a second of idling with their rings open (`idle_cpu_ms_per_s_*`).
 *
 *   bazel run //bench:actor_calls [-- --json] [-- --calls N] [-- --spin-only]
 *
 * --spin-only: the first phase alone (bench/python runs it between its own rounds).
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "troupe/troupe.h"

static int echo(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    return tr_ctx_reply(ctx, args, len);
}

static const tr_method_def methods[] = {{"echo", echo}};

/* Raw baseline: 8-byte ping-pong over a Unix stream socketpair with an echo process, the
 * same shape of exchange a sync call makes (blocking read on both sides). */
static int raw_fd = -1;
static pid_t raw_pid;

static void raw_start(void) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) exit(1);
    raw_pid = fork(); /* no threads exist yet: fork is safe here */
    if (raw_pid == 0) {
        close(sv[0]);
        char buf[64];
        for (;;) {
            ssize_t n = read(sv[1], buf, sizeof buf);
            if (n <= 0 || write(sv[1], buf, (size_t)n) != n) _exit(0);
        }
    }
    close(sv[1]);
    raw_fd = sv[0];
}

static double raw_rtt_us(void) {
    char msg[8] = "ping!!!", buf[64];
    double t = bench_now_us();
    if (write(raw_fd, msg, sizeof msg) != (ssize_t)sizeof msg) exit(1);
    size_t got = 0;
    while (got < sizeof msg) {
        ssize_t n = read(raw_fd, buf, sizeof buf);
        if (n <= 0) exit(1);
        got += (size_t)n;
    }
    return bench_now_us() - t;
}

static void raw_stop(void) {
    close(raw_fd);
    waitpid(raw_pid, NULL, 0);
}

static double call_rtt_us(tr_runtime *rt, tr_actor_id a, int64_t v) {
    tr_ref r;
    const void *d;
    size_t n;
    double t = bench_now_us();
    CHECK(tr_call(rt, a, "echo", &v, sizeof v, &r));
    CHECK(tr_get(rt, r, 10000, &d, &n));
    int ok = n == sizeof v && memcmp(d, &v, sizeof v) == 0;
    CHECK(tr_ref_release(rt, r));
    t = bench_now_us() - t;
    if (!ok) {
        fprintf(stderr, "echo returned the wrong value\n");
        exit(1);
    }
    return t;
}

typedef struct figures {
    double raw_p50, raw_p99, p50, p99, per_s;
    double idle_caller_ms, idle_worker_ms; /* CPU ms in a second of idling */
} figures;

/* CPU time (ms) a process has used: its /proc stat's utime + stime. */
static double cpu_ms(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* (the name may hold spaces) */
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

/* One runtime (its embedded node) with "call_spin_us" at spin_us (< 0: the default):
 * sync round trips in blocks interleaved with the raw ping-pong, so that both see the
 * same load on this shared machine, then pipelined async calls. */
static void run_phase(tr_config *cfg, int spin_us, int rings, int calls, figures *f) {
    char v[16];
    snprintf(v, sizeof v, "%d", spin_us < 0 ? 30 : spin_us); /* (30: the default) */
    CHECK(tr_config_set(cfg, "call_spin_us", v));
    CHECK(tr_config_set(cfg, "call_rings", rings ? "1" : "0"));
    tr_runtime *rt;
    CHECK(tr_init(cfg, &rt));
    tr_actor_id a;
    CHECK(tr_actor_create(rt, "Echo", NULL, NULL, 0, &a));
    CHECK(tr_actor_wait_ready(rt, a, 10000));
    double *lat = malloc(sizeof(double) * (size_t)calls);
    double *raw = malloc(sizeof(double) * (size_t)calls);
    if (!lat || !raw) exit(1);
    enum { BLOCK = 500 };
    /* warm-up: 1000 of each, and at least a second (the node prefaults its store in its
     * first half second, off the callers' CPUs only on a larger machine) */
    double w0 = bench_now_us();
    for (int i = 0; i < 1000 || bench_now_us() - w0 < 1e6; i++)
        call_rtt_us(rt, a, i), raw_rtt_us();
    for (int base = 0; base < calls; base += BLOCK) {
        int n = calls - base < BLOCK ? calls - base : BLOCK;
        for (int i = 0; i < n; i++)
            raw[base + i] = raw_rtt_us();
        for (int i = 0; i < n; i++)
            lat[base + i] = call_rtt_us(rt, a, base + i);
    }
    f->raw_p50 = bench_percentile(raw, (size_t)calls, 50);
    f->raw_p99 = bench_percentile(raw, (size_t)calls, 99);
    f->p50 = bench_percentile(lat, (size_t)calls, 50);
    f->p99 = bench_percentile(lat, (size_t)calls, 99);
    /* async: a window of calls in flight, then their results, repeated */
    f->per_s = bench_async_calls_per_s(rt, a, "echo", calls * 5);
    /* idling with the connection open: neither side polls once its last wait is over */
    tr_actor_details d = TR_ACTOR_DETAILS_INIT;
    CHECK(tr_actor_info(rt, a, &d));
    usleep(100000);
    double c0 = cpu_ms(getpid()), k0 = cpu_ms(d.pid);
    usleep(1000000);
    f->idle_caller_ms = cpu_ms(getpid()) - c0;
    f->idle_worker_ms = cpu_ms(d.pid) - k0;
    tr_shutdown(rt);
    free(lat);
    free(raw);
}

int main(int argc, char **argv) {
    tr_config *cfg;
    CHECK(tr_config_create(&cfg));
    tr_actor_class cls = TR_ACTOR_CLASS_INIT;
    cls.name = "Echo";
    cls.methods = methods;
    cls.n_methods = 1;
    CHECK(tr_config_add_class(cfg, &cls));
    tr_worker_main(cfg); /* a worker never returns from here */

    int calls = 20000, spin_only = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc) calls = atoi(argv[i + 1]);
        if (strcmp(argv[i], "--spin-only") == 0) spin_only = 1; /* (bench/python's rounds) */
    }
    if (calls < 1000) calls = 1000;
    bench_init(argc, argv);

    raw_start();
    /* twice: polling before sleeping as configured (the default "call_spin_us"), and
     * never (0: the wait of earlier versions), each beside its own raw ping-pong */
    unsetenv("TROUPE_CALL_RINGS"); /* (the phases set "call_rings" themselves) */
    figures spin, nospin, sockets;
    run_phase(cfg, -1, 1, calls, &spin);
    if (!spin_only) {
        run_phase(cfg, 0, 1, calls, &nospin);
        run_phase(cfg, -1, 0, calls, &sockets);
    }
    raw_stop();

    bench_report("raw_socket_rtt_us_p50", spin.raw_p50, "us");
    bench_report("raw_socket_rtt_us_p99", spin.raw_p99, "us");
    bench_report("sync_rtt_us_p50", spin.p50, "us");
    bench_report("sync_rtt_us_p99", spin.p99, "us");
    bench_report("sync_rtt_over_raw_socket", spin.p50 / spin.raw_p50, "x");
    bench_report("async_calls_per_s", spin.per_s, "calls/s");
    if (spin_only) { /* (the default phase alone: the rest are not measured) */
        tr_config_destroy(cfg);
        return 0;
    }
    bench_report("raw_socket_rtt_us_p50_nospin", nospin.raw_p50, "us");
    bench_report("sync_rtt_us_p50_nospin", nospin.p50, "us");
    bench_report("sync_rtt_us_p99_nospin", nospin.p99, "us");
    bench_report("sync_rtt_over_raw_socket_nospin", nospin.p50 / nospin.raw_p50, "x");
    bench_report("async_calls_per_s_nospin", nospin.per_s, "calls/s");
    bench_report("sync_rtt_spin_over_nospin", spin.p50 / nospin.p50, "x");
    bench_report("raw_socket_rtt_us_p50_sockets", sockets.raw_p50, "us");
    bench_report("sync_rtt_us_p50_sockets", sockets.p50, "us");
    bench_report("sync_rtt_us_p99_sockets", sockets.p99, "us");
    bench_report("async_calls_per_s_sockets", sockets.per_s, "calls/s");
    bench_report("sync_rtt_rings_over_sockets", spin.p50 / sockets.p50, "x");
    bench_report("async_rings_over_sockets", spin.per_s / sockets.per_s, "x");
    bench_report("idle_cpu_ms_per_s_caller", spin.idle_caller_ms, "ms");
    bench_report("idle_cpu_ms_per_s_worker", spin.idle_worker_ms, "ms");
    tr_config_destroy(cfg);
    return 0;
}
