/* tests/test_actors.h - actor classes and helpers shared by the integration tests.
 *
 * Test binaries are also their own worker executables: main() must call
 * tr_test_worker_main() before anything else (see tests/test_main.cc).
 */
#ifndef TR_TESTS_TEST_ACTORS_H
#define TR_TESTS_TEST_ACTORS_H

#include <stdint.h>

#include <functional>
#include <string>

extern "C" {
#include "troupe/troupe.h"
}

/* The config with every test class registered (owned by the test main). */
tr_config *test_config();
/* A sanitizer's build (ASan, TSan): several times slower on every byte, so the largest
 * sizes some tests move are left to the plain build. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

/* A fresh config with the classes plus extra keys ({key, value} pairs). */
tr_config *test_config_with(std::initializer_list<std::pair<const char *, const char *>> kv);

/* Runs a shell command; its output (stdout and stderr) and its exit status (-1: it did not
 * exit) in *status if not NULL. */
std::string run_cmd(const std::string &cmd, int *status);
/* The node's HTTP address, "http://HOST:PORT/", from its status ("" if it serves none). */
std::string dashboard(tr_runtime *rt);

/* How many times `what` occurs in s (not overlapping). */
int count(const std::string &s, const std::string &what);
/* Until pred() holds or ms pass (checked every 100 ms); whether it held. */
bool eventually(int ms, const std::function<bool()> &pred);

/* size bytes of a deterministic pseudo-random pattern, and an FNV-1a checksum. */
std::string pattern(uint64_t size, uint64_t seed);
uint64_t checksum(const void *p, size_t n);
/* Item i of the test actors' streams (Counter.stream, t_stream): "item-i" repeated i+1
 * times, 30001 times for item 2 (330 KB). */
std::string stream_item(int i);

/* Arguments of the test actors' "objar" method: `rounds` object-store allreduces of
 * float32/int32 buffers filled with objar_value(rank, round, i); replies the last result. */
struct ObjarArgs {
    int32_t world, rank, rounds, dtype, op, timeout_ms;
    uint64_t count;
    char name[32];
};
double objar_value(int rank, int round, size_t i);

/* Arguments of the "coll" method: join group `name` (shm) as `rank` of `world`, then run
 * every (dtype, op, count) allreduce and every (dtype, count) broadcast of the suite and
 * check each result against a reference computed here; or, with `mode`, misbehave. */
struct CollArgs {
    char name[32];
    int32_t world, rank, timeout_ms;
    int32_t mode; /* 0: the suite; 1: join, then crash; 2: one allreduce of `count` floats;
                     3: join, then destroy the group at once; 4: the suite without single
                     copy; 5: the suite with single copy off on odd ranks only;
                     6: ops the ranks disagree on (coll_mismatches: with `count`, that
                     many random rounds drawn from `seed`); 7: the suite on the declared
                     group `name` (tr_group_open; rank: the declaration's) */
    uint64_t count;
    char backend[8]; /* "" means shm */
    uint64_t seed;
};

/* Arguments of the "multi" method: actor `index` (0..2) of three joins every group of
 * multi_groups() it belongs to, each from a thread of its own, all at once, and runs
 * `iters` checked allreduces and broadcasts on each; replies the ops checked. */
struct MultiArgs {
    int32_t index, iters, timeout_ms;
    char tag[16]; /* prefix of the group names */
};
struct MultiGroup {
    const char *suffix, *backend;
    int n, members[3]; /* actor indexes, in rank order */
};
extern const MultiGroup multi_groups[5];

/* Path of the `troupe` CLI (argv[1] of the test binary), or "" if not given. */
extern std::string g_troupe_cli;

/* Calls method with an int64 argument and waits for an int64 result. */
int call_i64(tr_runtime *rt, tr_actor_id a, const char *method, int64_t arg, int64_t *out,
             int timeout_ms = 10000);
/* Calls and waits; returns the rc and copies the result (or error text) into *out. */
int call_str(tr_runtime *rt, tr_actor_id a, const char *method, const std::string &arg,
             std::string *out, int timeout_ms = 10000);
bool pid_alive(int pid);
/* Whether a node's session directory has ended: gone, or holding only what outlives its
 * node (the event log, the flight recorder's dumps: docs/OBSERVABILITY.md). */
bool session_ended(const std::string &session);
/* Runs this test binary again as a helper process (test_main picks its role from the
 * extra "NAME=value" environment entry), waits for it and returns its wait status, or
 * -1 if it could not be started. */
int run_self(const std::string &env_entry);
/* A number from the node's tr_node_status JSON, e.g. "pid", "groups", "kv_keys"; -1 if
 * missing or on error. */
int64_t status_field(tr_runtime *rt, const char *key);
/* Once every member has left or died, the node holds no group and none of its rendezvous
 * keys (kv_keys back to kv_keys_before; within 5 s: a dead process's connection closes
 * asynchronously). Checked with EXPECT_EQ. */
void expect_nothing_left(tr_runtime *rt, int64_t kv_keys_before);
/* The node's pid, from tr_node_status; -1 on error. */
int64_t status_pid_of(tr_runtime *rt);
/* A driver that creates actors, writes the node's address and the pids to out_path and
 * kills itself (run by test_main when ORPHAN_PIDS is set). */
int run_orphan_driver(const char *out_path);
/* A driver that connects to the node at spec's address, calls "slow_big" on the actor
 * spec names ("addr|actor hex|size|ms") and exits before the result comes (run by
 * test_main when CALL_AND_LEAVE is set). */
int run_call_and_leave(const char *spec);
/* A driver on a node of a cluster (TR_NODE: its socket), run by test_main when
 * CLUSTER_DRIVER is "calls|IP|IP2", "hold|IP|IP2|MARKER" or "headless|IP|IP" (no head
 * any more: a local actor works, placing one on IP fails in seconds): an actor placed on the node
 * at IP (by its "node:IP" resource), then calls of every kind (or: a call left in flight
 * for the test to kill that node under, MARKER written once it is); prints a line "OK
 * what" or "FAIL what: why" per check; exits 0 if all passed. "pg|IP|IP2|MARKER": placement
 * groups across the nodes (nodes of 2 CPUs), pausing at MARKER.1, .2, .3 until the test
 * writes MARKER.go1, .go2, .go3; "pgname|IP|IP2": the group "spread2" found by name, an
 * actor into it. */
int run_cluster_driver(const char *spec);
/* A driver (EXPORT_AND_DIE="addr|keeper hex|sleeper hex") that calls the sleeper's
 * sleep_ms(4000), has the keeper borrow that call's ref (keep), and exits before the
 * result is in (tests/ownership_test.cc). */
int run_export_and_die(const char *spec);
/* A driver (DETACH_AND_LEAVE=addr) that creates the named actors "stays-detached"
 * (detached) and "goes-with-me", calls each, and exits (tests/actor_test.cc). */
int run_detach_and_leave(const char *addr);
/* "ADDR|PATH": joins the node at ADDR, finds the actor named "retried" and calls its
 * crash_until(2, PATH) (it dies in flight once): 0 if the call came back with 2. */
int run_retry_by_name(const char *spec);

#endif
