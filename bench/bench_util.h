/* bench/bench_util.h - shared by the benchmarks: timing, percentiles, and the output
 * format (a table by default; with --json one {"name","value","unit"} object per line). */
#ifndef TR_BENCH_UTIL_H
#define TR_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "troupe/troupe.h"

/* Aborts the benchmark on any troupe error, saying which call and why. */
#define CHECK(expr)                                                                                \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_) {                                                                                 \
            fprintf(stderr, "%s: %s: %s\n", #expr, tr_errname(rc_), tr_last_error());              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static inline double bench_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorts v in place and returns its p-th percentile (0..100). */
static inline double bench_percentile(double *v, size_t n, double p) {
    if (n == 0) return 0;
    qsort(v, n, sizeof v[0], bench_cmp_double);
    size_t i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

static int bench_json;

static inline void bench_init(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--json") == 0) bench_json = 1;
    if (!bench_json) printf("%-34s %14s  %s\n", "metric", "value", "unit");
}

static inline void bench_report(const char *name, double value, const char *unit) {
    if (bench_json)
        printf("{\"name\": \"%s\", \"value\": %.6g, \"unit\": \"%s\"}\n", name, value, unit);
    else
        printf("%-34s %14.2f  %s\n", name, value, unit);
    fflush(stdout);
}

/* A figure over several runs: the median, with the min and max and the number of runs
 * (the JSON object gains "min", "max" and "runs"; one run prints as bench_report). */
static inline void bench_report_spread(const char *name, double median, double lo, double hi,
                                       int runs, const char *unit) {
    if (runs <= 1) {
        bench_report(name, median, unit);
    } else if (bench_json) {
        printf("{\"name\": \"%s\", \"value\": %.6g, \"unit\": \"%s\", \"min\": %.6g, "
               "\"max\": %.6g, \"runs\": %d}\n",
               name, median, unit, lo, hi, runs);
    } else {
        printf("%-34s %14.2f  %-6s (%.2f - %.2f over %d runs)\n", name, median, unit, lo, hi, runs);
    }
    fflush(stdout);
}

/* Pipelined calls of an 8-byte `method` (an echo): windows of 1000 in flight, then their
 * results; returns calls per second over `total` (rounded down to whole windows). */
static inline double bench_async_calls_per_s(tr_runtime *rt, tr_actor_id a, const char *method,
                                             int total) {
    enum { WINDOW = 1000 };
    static tr_ref refs[WINDOW];
    double t0 = bench_now_us();
    for (int done = 0; done + WINDOW <= total; done += WINDOW) {
        for (int i = 0; i < WINDOW; i++) {
            int64_t v = done + i;
            CHECK(tr_call(rt, a, method, &v, sizeof v, &refs[i]));
        }
        for (int i = 0; i < WINDOW; i++) {
            CHECK(tr_get(rt, refs[i], 10000, NULL, NULL));
            CHECK(tr_ref_release(rt, refs[i]));
        }
    }
    return (double)(total / WINDOW * WINDOW) / ((bench_now_us() - t0) / 1e6);
}

#endif
