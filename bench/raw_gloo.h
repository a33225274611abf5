/* bench/raw_gloo.h - the raw Gloo baseline of bench/collectives: the same ops timed the
 * same way straight on libgloo (TCP on 127.0.0.1, FileStore rendezvous), with no troupe
 * in between. C++ behind a C function, like the gloo backend's shim. */
#ifndef TR_BENCH_RAW_GLOO_H
#define TR_BENCH_RAW_GLOO_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { RAW_GLOO_ALLREDUCE = 0, RAW_GLOO_BROADCAST = 1, RAW_GLOO_ALLGATHER = 2 };

/* Joins a `world`-rank Gloo context through files under `dir` (prefix `prefix`), then
 * times `iters` iterations of `op` on `bytes` of float32 (allgather: per rank), a Gloo
 * barrier before each, this rank's time of each in t[] (us). Returns 0, or -1 with a
 * message in err. */
int raw_gloo_run(const char *dir, const char *prefix, int world, int rank, int op, size_t bytes,
                 int iters, double *t, char *err, size_t errlen);
/* The same, Gloo listening on host (bench/cluster: a namespace's address). */
int raw_gloo_run_on(const char *host, const char *dir, const char *prefix, int world, int rank,
                    int op, size_t bytes, int iters, double *t, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
