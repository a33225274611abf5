/* bench/objects.c - the object-store path: tr_put and tr_get from 1 KiB to 1 GiB beside
 * plain memcpy of the same size measured in the same run, and small (64-byte) puts and
 * gets per second.
 *
 *   bazel run //bench:objects [-- --json] [-- --max-mib N]
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "troupe/troupe.h"

static const char *size_name(size_t n, char *buf) {
    if (n >= (1u << 30))
        sprintf(buf, "%zuGiB", n >> 30);
    else if (n >= (1u << 20))
        sprintf(buf, "%zuMiB", n >> 20);
    else
        sprintf(buf, "%zuKiB", n >> 10);
    return buf;
}

int main(int argc, char **argv) {
    size_t max_mib = 1024;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--max-mib") == 0) max_mib = (size_t)atol(argv[i + 1]);
    tr_config *cfg;
    CHECK(tr_config_create(&cfg));
    char store[32];
    snprintf(store, sizeof store, "%zu", (max_mib + 256) << 20);
    CHECK(tr_config_set(cfg, "object_store_bytes", store));
    tr_worker_main(cfg);
    bench_init(argc, argv);
    tr_runtime *rt;
    CHECK(tr_init(cfg, &rt));

    size_t sizes[] = {1 << 10, 64 << 10, 1 << 20, 64 << 20, (size_t)1 << 30};
    size_t maxsz = max_mib << 20;
    char *src = malloc(maxsz), *dst = malloc(maxsz);
    if (!src || !dst) return 1;
    memset(src, 0x5a, maxsz);
    memset(dst, 0, maxsz);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        if (n > maxsz) break;
        int reps = n >= (256u << 20) ? 5 : n >= (1u << 20) ? 30 : 2000;
        double *tm = malloc(sizeof(double) * (size_t)reps);
        double *tp = malloc(sizeof(double) * (size_t)reps);
        double *tg = malloc(sizeof(double) * (size_t)reps);
        /* warm-up: map the store's pages in this process, and warm memcpy's destination */
        for (int w = 0; w < 2; w++) {
            tr_ref r;
            CHECK(tr_put(rt, src, n, &r));
            CHECK(tr_ref_release(rt, r));
            memcpy(dst, src, n);
        }
        /* interleaved: memcpy, put, get, release - each rep sees the same load */
        for (int i = 0; i < reps; i++) {
            double t = bench_now_us();
            memcpy(dst, src, n);
            tm[i] = bench_now_us() - t;
            src[i % n] ^= dst[(i * 7) % n]; /* keep the copy observable */
            tr_ref r;
            t = bench_now_us();
            CHECK(tr_put(rt, src, n, &r));
            tp[i] = bench_now_us() - t;
            const void *view;
            size_t len;
            t = bench_now_us();
            CHECK(tr_get(rt, r, 0, &view, &len));
            tg[i] = bench_now_us() - t;
            if (len != n || ((const char *)view)[n - 1] != src[n - 1]) {
                fprintf(stderr, "object contents differ\n");
                return 1;
            }
            CHECK(tr_ref_release(rt, r));
        }
        double m = bench_percentile(tm, (size_t)reps, 50),
               p = bench_percentile(tp, (size_t)reps, 50);
        double g = bench_percentile(tg, (size_t)reps, 50);
        char nm[64], sz[16];
        size_name(n, sz);
        snprintf(nm, sizeof nm, "memcpy_gbps_%s", sz);
        bench_report(nm, (double)n / m / 1e3, "GB/s");
        snprintf(nm, sizeof nm, "put_gbps_%s", sz);
        bench_report(nm, (double)n / p / 1e3, "GB/s");
        snprintf(nm, sizeof nm, "put_over_memcpy_%s", sz);
        bench_report(nm, m / p, "x");
        snprintf(nm, sizeof nm, "get_us_p50_%s", sz);
        bench_report(nm, g, "us");
        free(tm);
        free(tp);
        free(tg);
    }
    free(dst);

    /* small objects: 50,000 puts kept alive, then a get of each, then the releases */
    enum { SMALL = 50000 };
    tr_ref *refs = malloc(sizeof(tr_ref) * SMALL);
    double t = bench_now_us();
    for (int i = 0; i < SMALL; i++)
        CHECK(tr_put(rt, src + (i % 1024), 64, &refs[i]));
    double put_s = (bench_now_us() - t) / 1e6;
    t = bench_now_us();
    for (int i = 0; i < SMALL; i++) {
        const void *v;
        size_t len;
        CHECK(tr_get(rt, refs[i], 0, &v, &len));
    }
    double get_s = (bench_now_us() - t) / 1e6;
    t = bench_now_us();
    for (int i = 0; i < SMALL; i++)
        CHECK(tr_ref_release(rt, refs[i]));
    double rel_s = (bench_now_us() - t) / 1e6;
    bench_report("small_put_per_s", SMALL / put_s, "puts/s");
    bench_report("small_get_per_s", SMALL / get_s, "gets/s");
    bench_report("small_release_per_s", SMALL / rel_s, "releases/s");
    tr_store_stats st = TR_STORE_STATS_INIT;
    CHECK(tr_object_stats(rt, &st));
    if (st.n_objects || st.bytes_used) {
        fprintf(stderr, "leak: %llu objects, %llu bytes left\n", (unsigned long long)st.n_objects,
                (unsigned long long)st.bytes_used);
        return 1;
    }
    free(refs);
    free(src);
    tr_shutdown(rt);
    tr_config_destroy(cfg);
    return 0;
}
