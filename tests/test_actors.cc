/* tests/test_actors.cc - the test actor classes (run inside worker processes) and helpers. */
#include "tests/test_actors.h"
#include "troupe/dag.h"

#include <gtest/gtest.h>

extern "C" {
#include "core/reduce.h"
#include "core/status.h"
#include "tools/seccomp.h"
}

#include <dirent.h>
#include <stdio.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <math.h>

#ifdef TR_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <random>
#include <string>
#include <thread>
#include <vector>

std::string g_troupe_cli;

std::string run_cmd(const std::string &cmd, int *status) {
    FILE *f = popen((cmd + " 2>&1").c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while (f && (n = fread(buf, 1, sizeof buf, f)) > 0)
        out.append(buf, n);
    int st = f ? pclose(f) : -1;
    if (status) *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

int count(const std::string &s, const std::string &what) {
    int n = 0;
    for (size_t at = 0; (at = s.find(what, at)) != std::string::npos; at += what.size())
        n++;
    return n;
}

bool eventually(int ms, const std::function<bool()> &pred) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < until) {
        if (pred()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return pred();
}

std::string pattern(uint64_t size, uint64_t seed) {
    std::string s(size, '\0');
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (uint64_t i = 0; i < size; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s[i] = (char)x;
    }
    return s;
}

double objar_value(int rank, int round, size_t i) {
    return (double)((rank + 1) * 3 + round * 7 + (int)(i % 11)) - 10.0;
}

uint64_t checksum(const void *p, size_t n) {
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Several groups per actor, overlapping, used concurrently (tests/collective_test). */
const MultiGroup multi_groups[5] = {
    {"m01", "shm", 2, {0, 1}},  {"m12", "shm", 2, {1, 2}},      {"m012", "shm", 3, {0, 1, 2}},
    {"g02", "gloo", 2, {0, 2}}, {"g012", "gloo", 3, {0, 1, 2}},
};

std::string stream_item(int i) {
    std::string one = "item-" + std::to_string(i), s;
    for (int r = 0; r <= (i == 2 ? 30000 : i); r++)
        s += one;
    return s;
}

namespace {

struct Counter {
    int64_t value = 0;
    int64_t last_seq = 0;
    std::string name;
    std::atomic<int> busy{0}; /* set while "excl" runs: methods never overlap */
};

int counter_new(tr_ctx *ctx, const void *args, size_t len, void **self) {
    auto *c = new (std::nothrow) Counter();
    if (!c) return tr_ctx_error(ctx, "oom");
    c->name.assign((const char *)args, len);
    if (c->name == "fail-ctor") {
        delete c;
        return tr_ctx_error(ctx, "constructor refused '%s'", "fail-ctor");
    }
    if (c->name == "crash-ctor") abort();
    if (c->name == "slow-ctor") sleep(5);
    *self = c;
    if (c->name == "exit-ctor") (void)tr_ctx_exit_actor(ctx, "its constructor said so");
    return 0;
}

void counter_free(void *self) {
    auto *c = (Counter *)self;
    if (c->name.rfind("dtor:", 0) == 0) { /* (made with "dtor:PATH": says it ran) */
        FILE *f = fopen(c->name.c_str() + 5, "w");
        if (f) fclose(f);
    }
    delete c;
}

int64_t arg_i64(const void *args, size_t len) {
    int64_t v = 0;
    if (len == sizeof v) memcpy(&v, args, sizeof v);
    return v;
}

int reply_i64(tr_ctx *ctx, int64_t v) {
    return tr_ctx_reply(ctx, &v, sizeof v);
}

/* Adds its int64 argument - or, with no bytes, each of its ref arguments (8 bytes each:
 * call results passed on) - and replies the total. */
int m_add(tr_ctx *ctx, void *self, const void *args, size_t len) {
    auto *c = (Counter *)self;
    if (len == 0 && tr_ctx_num_refs(ctx) > 0) {
        for (size_t i = 0; i < tr_ctx_num_refs(ctx); i++) {
            const void *d;
            size_t n;
            if (tr_ctx_ref(ctx, i, &d, &n) || n != 8)
                return tr_ctx_error(ctx, "add: ref argument %zu is not 8 bytes", i);
            c->value += arg_i64(d, n);
        }
        return reply_i64(ctx, c->value);
    }
    if (len != 8) return tr_ctx_error(ctx, "add wants 8 bytes, got %zu", len);
    c->value += arg_i64(args, len);
    return reply_i64(ctx, c->value);
}

/* args: a file's path. Writes the counter's value there (a caller that never waits on
 * this actor sees what ran), and replies it. */
int m_note(tr_ctx *ctx, void *self, const void *args, size_t len) {
    auto *c = (Counter *)self;
    std::string path((const char *)args, len);
    FILE *f = fopen(path.c_str(), "w");
    if (!f) return tr_ctx_error(ctx, "note: cannot write %s", path.c_str());
    fprintf(f, "%lld", (long long)c->value);
    fclose(f);
    return reply_i64(ctx, c->value);
}

/* Its int64 argument plus each int64 ref argument, plus 1 (stateless: compiled graphs). */
int m_plus1(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len != 8) return tr_ctx_error(ctx, "plus1 wants 8 bytes, got %zu", len);
    int64_t sum = arg_i64(args, len) + 1;
    for (size_t i = 0; i < tr_ctx_num_refs(ctx); i++) {
        const void *d;
        size_t n;
        if (tr_ctx_ref(ctx, i, &d, &n) || n != 8)
            return tr_ctx_error(ctx, "plus1: ref argument %zu is not 8 bytes", i);
        sum += arg_i64(d, n);
    }
    return reply_i64(ctx, sum);
}

/* Fails if another method of the actor is running (the actor's lock must prevent it),
 * else holds the actor for ~200 us and echoes its argument. */
int m_excl(tr_ctx *ctx, void *self, const void *args, size_t len) {
    auto *c = (Counter *)self;
    if (c->busy.exchange(1)) return tr_ctx_error(ctx, "excl: another method is running");
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
    c->busy = 0;
    return tr_ctx_reply(ctx, args, len);
}

/* "<tr_ctx_gpu_ids>|<CUDA_VISIBLE_DEVICES, or (unset)>": what GPUs the actor was given;
 * "!" after it if the process's environment holds the variable more than once. */
int m_gpus(tr_ctx *ctx, void *, const void *, size_t) {
    const char *cuda = getenv("CUDA_VISIBLE_DEVICES");
    std::string out = std::string(tr_ctx_gpu_ids(ctx)) + "|" + (cuda ? cuda : "(unset)");
    FILE *f = fopen("/proc/self/environ", "r");
    std::string env;
    for (int c; f && (c = fgetc(f)) != EOF;)
        env.push_back((char)c);
    if (f) fclose(f);
    size_t seen = 0;
    for (size_t at = 0; (at = env.find("CUDA_VISIBLE_DEVICES=", at)) != std::string::npos; at++)
        seen += at == 0 || env[at - 1] == '\0';
    if (seen > 1) out += "!";
    return tr_ctx_reply(ctx, out.data(), out.size());
}

int m_get(tr_ctx *ctx, void *self, const void *, size_t) {
    return reply_i64(ctx, ((Counter *)self)->value);
}

/* Checks that calls arrive in submission order: arg must be last + 1. */
int m_seq(tr_ctx *ctx, void *self, const void *args, size_t len) {
    auto *c = (Counter *)self;
    int64_t s = arg_i64(args, len);
    if (s != c->last_seq + 1)
        return tr_ctx_error(ctx, "out of order: got %lld after %lld", (long long)s,
                            (long long)c->last_seq);
    c->last_seq = s;
    return reply_i64(ctx, s);
}

int m_echo(tr_ctx *ctx, void *, const void *args, size_t len) {
    return tr_ctx_reply(ctx, args, len);
}

/* Echo written in place (tr_ctx_reply_alloc). Arguments starting "fail" reserve the reply
 * and then fail (what was reserved must go); "twice" reserves, then replies "again". */
int m_echo_alloc(tr_ctx *ctx, void *, const void *args, size_t len) {
    void *buf;
    int rc = tr_ctx_reply_alloc(ctx, len, &buf);
    if (rc) return tr_ctx_error(ctx, "reply_alloc: %s", tr_last_error());
    if (len) memcpy(buf, args, len);
    if (len >= 4 && memcmp(args, "fail", 4) == 0) return tr_ctx_error(ctx, "failing after alloc");
    if (len >= 5 && memcmp(args, "twice", 5) == 0) return tr_ctx_reply(ctx, "again", 5);
    return 0;
}

/* Replies its argument as it is (a graph may forward it), but: "tail..." replies what
 * follows the 4 bytes "tail"; "twice..." then replies "again"; "fail..." then fails. */
int m_pass(tr_ctx *ctx, void *, const void *args, size_t len) {
    const char *s = (const char *)args;
    if (len >= 4 && memcmp(s, "tail", 4) == 0) return tr_ctx_reply(ctx, s + 4, len - 4);
    int rc = tr_ctx_reply(ctx, args, len);
    if (rc) return rc;
    if (len >= 5 && memcmp(s, "twice", 5) == 0) return tr_ctx_reply(ctx, "again", 5);
    if (len >= 4 && memcmp(s, "fail", 4) == 0) return tr_ctx_error(ctx, "failing after a reply");
    return 0;
}

int m_fail(tr_ctx *ctx, void *, const void *args, size_t len) {
    return tr_ctx_error(ctx, "failing on purpose: %.*s", (int)len, (const char *)args);
}

int m_fail_silent(tr_ctx *, void *, const void *, size_t) {
    return 7;
}

int m_crash(tr_ctx *, void *, const void *, size_t) {
    raise(SIGSEGV);
    return 0;
}

int m_exit(tr_ctx *, void *, const void *, size_t) {
    _exit(3);
}

/* (limit, path) as the task t_crash_until: a line for each run in the file at path; the
 * worker dies with the call in flight while there are fewer than limit, else replies
 * with how many there are (max_task_retries: a call sent again to the next incarnation). */
int t_crash_until(tr_ctx *ctx, const void *args, size_t len);
int m_crash_until(tr_ctx *ctx, void *, const void *args, size_t len) {
    return t_crash_until(ctx, args, len);
}

int m_sleep_ms(tr_ctx *ctx, void *, const void *args, size_t len) {
    int64_t ms = arg_i64(args, len);
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
    return reply_i64(ctx, ms);
}

/* (ms, path): waits until a file is at path, or ms have passed; replies 1 if it came. */
int m_wait_file(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len <= sizeof(int64_t)) return tr_ctx_error(ctx, "wait_file: (ms, path)");
    int64_t ms;
    memcpy(&ms, args, sizeof ms);
    std::string path((const char *)args + sizeof ms, len - sizeof ms);
    struct timespec tick = {0, 5000000};
    int64_t waited = 0;
    for (; access(path.c_str(), F_OK) != 0 && waited < ms; waited += 5)
        nanosleep(&tick, NULL);
    return reply_i64(ctx, waited < ms);
}

/* Replies with arg bytes of 'b'. */
int m_big(tr_ctx *ctx, void *, const void *args, size_t len) {
    std::string out((size_t)arg_i64(args, len), 'b');
    return tr_ctx_reply(ctx, out.data(), out.size());
}

/* Sleeps args[1] ms, then replies args[0] bytes of 'b' (a large result, late). */
int m_slow_big(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len != 16) return tr_ctx_error(ctx, "slow_big wants (size, ms)");
    int64_t v[2];
    memcpy(v, args, sizeof v);
    struct timespec ts = {(time_t)(v[1] / 1000), (long)(v[1] % 1000) * 1000000};
    nanosleep(&ts, NULL);
    std::string out((size_t)v[0], 'b');
    return tr_ctx_reply(ctx, out.data(), out.size());
}

/* Puts an object of args[0] bytes filled by pattern(seed = args[1]); replies its ref. */
int m_put(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len != 16) return tr_ctx_error(ctx, "put wants (size, seed)");
    uint64_t size, seed;
    memcpy(&size, args, 8);
    memcpy(&seed, (const char *)args + 8, 8);
    std::string data = pattern(size, seed);
    tr_ref r;
    int rc = tr_put(tr_ctx_runtime(ctx), data.data(), data.size(), &r);
    if (rc) return tr_ctx_error(ctx, "tr_put: %s: %s", tr_errname(rc), tr_last_error());
    return tr_ctx_reply(ctx, &r, sizeof r);
}

/* Gets the object whose ref is the argument; replies its FNV-1a checksum; releases it
 * unless told to keep holding it (a 17th byte of 1). */
int m_sum(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len != 16 && len != 17) return tr_ctx_error(ctx, "sum wants a ref");
    tr_ref r;
    memcpy(&r, args, 16);
    const void *d;
    size_t n;
    int rc = tr_get(tr_ctx_runtime(ctx), r, 5000, &d, &n);
    if (rc) return tr_ctx_error(ctx, "tr_get: %s: %s", tr_errname(rc), tr_last_error());
    uint64_t sum = checksum(d, n);
    if (len == 16) tr_ref_release(tr_ctx_runtime(ctx), r);
    return tr_ctx_reply(ctx, &sum, sizeof sum);
}

/* ---- ownership and borrowing (tests/ownership_test.cc, docs/OWNERSHIP.md) */

/* Puts pattern(size, seed) (args: the two) and returns its ref inside the result, then
 * drops its own hold: the result keeps the object alive (Ray's `return ray.put(x)`). */
int m_put_ref(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len != 16) return tr_ctx_error(ctx, "put_ref wants (size, seed)");
    uint64_t size, seed;
    memcpy(&size, args, 8);
    memcpy(&seed, (const char *)args + 8, 8);
    std::string data = pattern(size, seed);
    tr_runtime *rt = tr_ctx_runtime(ctx);
    tr_ref r;
    int rc = tr_put(rt, data.data(), data.size(), &r);
    if (!rc) rc = tr_ctx_reply_contains(ctx, &r, sizeof r, &r, 1);
    if (rc) return tr_ctx_error(ctx, "put_ref: %s: %s", tr_errname(rc), tr_last_error());
    tr_ref_release(rt, r);
    return 0;
}

/* args: a ref (passed contained) and an int32 depth: gets the ref, then `depth` times the
 * ref that value is; replies the last value's FNV-1a checksum. Releases what it got. */
int m_deref_sum(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len != 20) return tr_ctx_error(ctx, "deref_sum wants (ref, depth)");
    tr_runtime *rt = tr_ctx_runtime(ctx);
    tr_ref r[8];
    int32_t depth;
    memcpy(&r[0], args, 16);
    memcpy(&depth, (const char *)args + 16, 4);
    if (depth < 0 || depth > 6) return tr_ctx_error(ctx, "deref_sum: depth 0..6");
    const void *d = nullptr;
    size_t n = 0;
    int got = 0, rc = 0;
    for (int k = 0; k <= depth && !rc; k++) {
        if (k) {
            if (n != 16) {
                rc = TR_EINVAL;
                tr_ctx_error(ctx, "deref_sum: level %d is %zu bytes, not a ref", k, n);
                break;
            }
            memcpy(&r[k], d, 16);
        }
        rc = tr_get(rt, r[k], 10000, &d, &n);
        if (rc) tr_ctx_error(ctx, "deref_sum level %d: %s: %s", k, tr_errname(rc), tr_last_error());
        if (!rc || rc == TR_ETASK) got = k + 1; /* (a failed result is held as a value is) */
    }
    uint64_t sum = rc ? 0 : checksum(d, n);
    for (int k = got - 1; k >= 0; k--)
        tr_ref_release(rt, r[k]);
    return rc ? TR_ETASK : tr_ctx_reply(ctx, &sum, sizeof sum);
}

/* A ref this process borrows (keep) and reads later (kept_sum), until drop_kept. */
static tr_ref g_kept;
static int g_has_kept;

int m_keep(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len != 16) return tr_ctx_error(ctx, "keep wants a ref");
    memcpy(&g_kept, args, 16);
    int rc = tr_ref_borrow(tr_ctx_runtime(ctx), g_kept);
    if (rc) return tr_ctx_error(ctx, "tr_ref_borrow: %s: %s", tr_errname(rc), tr_last_error());
    g_has_kept = 1;
    return reply_i64(ctx, 0);
}

int m_kept_sum(tr_ctx *ctx, void *, const void *args, size_t len) {
    int64_t ms = len == 8 ? arg_i64(args, len) : 10000;
    if (!g_has_kept) return tr_ctx_error(ctx, "nothing kept");
    const void *d;
    size_t n;
    int rc = tr_get(tr_ctx_runtime(ctx), g_kept, (int)ms, &d, &n);
    if (rc) return tr_ctx_error(ctx, "%s: %s", tr_errname(rc), tr_last_error());
    uint64_t sum = checksum(d, n);
    return tr_ctx_reply(ctx, &sum, sizeof sum);
}

/* The number of objects in this actor's node's store. */
int m_store_objects(tr_ctx *ctx, void *, const void *, size_t) {
    tr_store_stats st = TR_STORE_STATS_INIT;
    int rc = tr_object_stats(tr_ctx_runtime(ctx), &st);
    return rc ? tr_ctx_error(ctx, "tr_object_stats: %s", tr_last_error())
              : reply_i64(ctx, (int64_t)st.n_objects);
}

int m_drop_kept(tr_ctx *ctx, void *, const void *, size_t) {
    if (!g_has_kept) return tr_ctx_error(ctx, "nothing kept");
    g_has_kept = 0;
    int rc = tr_ref_release(tr_ctx_runtime(ctx), g_kept);
    return rc ? tr_ctx_error(ctx, "tr_ref_release: %s", tr_errname(rc)) : reply_i64(ctx, 0);
}

/* args: a ref (passed contained): returns it inside its result (a container). */
int m_pass_ref(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len != 16) return tr_ctx_error(ctx, "pass_ref wants a ref");
    tr_ref r;
    memcpy(&r, args, 16);
    int rc = tr_ctx_reply_contains(ctx, args, 16, &r, 1);
    return rc ? tr_ctx_error(ctx, "pass_ref: %s: %s", tr_errname(rc), tr_last_error()) : 0;
}

/* args: an actor id and an int64 ms: calls that actor's sleep_ms(ms) and returns the
 * call's ref inside its result, without waiting for it, then releases it: a borrower
 * gets the result once it is in (this worker reads it for them). */
int m_share_call(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len != sizeof(tr_actor_id) + 8) return tr_ctx_error(ctx, "share_call wants (actor, ms)");
    tr_runtime *rt = tr_ctx_runtime(ctx);
    tr_actor_id other;
    memcpy(&other, args, sizeof other);
    tr_ref r;
    int rc = tr_call(rt, other, "sleep_ms", (const char *)args + sizeof other, 8, &r);
    if (!rc) rc = tr_ctx_reply_contains(ctx, &r, sizeof r, &r, 1);
    if (rc) return tr_ctx_error(ctx, "share_call: %s: %s", tr_errname(rc), tr_last_error());
    tr_ref_release(rt, r);
    return 0;
}

/* args: int32 k (and a 5th byte: 1 to reply one plain value instead). Replies k results
 * (tr_ctx_reply_multi): part i is "part-i" repeated i+1 times (part 2 is 300 KB). */
int m_parts(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len != 4 && len != 5) return tr_ctx_error(ctx, "parts wants an int32");
    int32_t k;
    memcpy(&k, args, 4);
    if (len == 5) return tr_ctx_reply(ctx, "plain", 5);
    std::vector<std::string> parts((size_t)k);
    std::vector<const void *> d((size_t)k);
    std::vector<size_t> n((size_t)k);
    for (int i = 0; i < k; i++) {
        std::string one = "part-" + std::to_string(i);
        for (int r = 0; r <= (i == 2 ? 30000 : i); r++)
            parts[(size_t)i] += one;
        d[(size_t)i] = parts[(size_t)i].data();
        n[(size_t)i] = parts[(size_t)i].size();
    }
    return tr_ctx_reply_multi(ctx, d.data(), n.data(), (size_t)k);
}

/* args: int32 k. Puts k objects ("obj-i" 1000 times, i = 0..k-1) and replies k results,
 * result i its object's ref (tr_ctx_reply_multi_contains, with all k refs). */
int m_put_parts(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len != 4) return tr_ctx_error(ctx, "put_parts wants an int32");
    int32_t k;
    memcpy(&k, args, 4);
    if (k < 1 || k > 16) return tr_ctx_error(ctx, "put_parts: 1..16");
    tr_runtime *rt = tr_ctx_runtime(ctx);
    tr_ref r[16];
    const void *d[16];
    size_t n[16];
    int rc = 0;
    for (int i = 0; i < k && !rc; i++) {
        std::string v;
        for (int j = 0; j < 1000; j++)
            v += "obj-" + std::to_string(i);
        rc = tr_put(rt, v.data(), v.size(), &r[i]);
        d[i] = &r[i];
        n[i] = sizeof r[i];
        if (rc) k = i;
    }
    if (!rc) rc = tr_ctx_reply_multi_contains(ctx, d, n, (size_t)k, r, (size_t)k);
    for (int i = 0; i < k; i++)
        tr_ref_release(rt, r[i]);
    return rc ? tr_ctx_error(ctx, "put_parts: %s: %s", tr_errname(rc), tr_last_error()) : 0;
}

/* args: int32 k, int32 mode, then a path. Yields k items (tr_ctx_yield): item i is
 * stream_item(i) (item 2 is 330 KB, over a socket's inline limit), but for item 3, which
 * is a ref to an object holding stream_item(3) (tr_ctx_yield_contains); replies
 * "done-k". Modes: 1, after item 0 wait (up to 20 s, or a cancel) until the file at path
 * exists; 2, fail at the end; 3, exit after 2 items; 4, exit after 2 items unless the
 * file exists (created first: a retried task's second run goes through). */
int m_stream(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len < 8) return tr_ctx_error(ctx, "stream wants (int32 k, int32 mode, path)");
    int32_t k, mode;
    memcpy(&k, args, 4);
    memcpy(&mode, (const char *)args + 4, 4);
    std::string path((const char *)args + 8, len - 8);
    tr_runtime *rt = tr_ctx_runtime(ctx);
    for (int i = 0; i < k; i++) {
        if ((mode == 3 || mode == 4) && i == 2) {
            if (mode == 3 || access(path.c_str(), F_OK) != 0) {
                if (FILE *f = fopen(path.c_str(), "w")) fclose(f);
                _exit(3);
            }
        }
        std::string v = stream_item(i);
        int rc;
        if (i == 3) {
            tr_ref obj;
            rc = tr_put(rt, v.data(), v.size(), &obj);
            if (!rc) rc = tr_ctx_yield_contains(ctx, &obj, sizeof obj, &obj, 1);
            if (!rc) tr_ref_release(rt, obj);
        } else {
            rc = tr_ctx_yield(ctx, v.data(), v.size());
        }
        if (rc) return tr_ctx_error(ctx, "yield %d: %s: %s", i, tr_errname(rc), tr_last_error());
        if (mode == 1 && i == 0) {
            auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
            while (access(path.c_str(), F_OK) != 0 && !tr_ctx_canceled(ctx) &&
                   std::chrono::steady_clock::now() < until)
                std::this_thread::sleep_for(std::chrono::milliseconds(2));
            if (tr_ctx_canceled(ctx)) return tr_ctx_error(ctx, "canceled");
        }
    }
    if (mode == 2) return tr_ctx_error(ctx, "failed after %d items", k);
    std::string done = "done-" + std::to_string(k);
    return tr_ctx_reply(ctx, done.data(), done.size());
}

/* Checksums of its object arguments (tr_call_refs), one uint64 each. */
int m_sum_args(tr_ctx *ctx, void *, const void *, size_t) {
    std::string out;
    for (size_t i = 0; i < tr_ctx_num_refs(ctx); i++) {
        const void *d;
        size_t n;
        if (tr_ctx_ref(ctx, i, &d, &n)) return tr_ctx_error(ctx, "tr_ctx_ref %zu failed", i);
        uint64_t c = checksum(d, n);
        out.append((const char *)&c, 8);
    }
    const void *d;
    size_t n;
    if (tr_ctx_ref(ctx, tr_ctx_num_refs(ctx), &d, &n) != TR_EINVAL)
        return tr_ctx_error(ctx, "tr_ctx_ref past the end did not fail");
    return tr_ctx_reply(ctx, out.data(), out.size());
}

/* Where its object argument first differs from pattern(size, seed) (args: the two
 * uint64s): an int64 offset, -1 if nowhere, -2 if the sizes differ. */
int m_first_diff(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len != 16 || tr_ctx_num_refs(ctx) != 1) return tr_ctx_error(ctx, "first_diff: bad call");
    uint64_t size, seed;
    memcpy(&size, args, 8);
    memcpy(&seed, (const char *)args + 8, 8);
    const void *d;
    size_t n;
    if (tr_ctx_ref(ctx, 0, &d, &n)) return tr_ctx_error(ctx, "tr_ctx_ref failed");
    std::string want = pattern(size, seed);
    int64_t at = n != size ? -2 : -1;
    for (size_t i = 0; at == -1 && i < n; i++)
        if (((const char *)d)[i] != want[i]) at = (int64_t)i;
    return reply_i64(ctx, at);
}

int m_objar(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len != sizeof(ObjarArgs)) return tr_ctx_error(ctx, "objar wants ObjarArgs");
    ObjarArgs a;
    memcpy(&a, args, sizeof a);
    size_t esz = tr_dtype_size((tr_dtype)a.dtype);
    std::string buf(a.count * (esz ? esz : 1), '\0');
    for (int r = 0; r < a.rounds; r++) {
        for (size_t i = 0; i < a.count; i++) {
            double v = objar_value(a.rank, r, i);
            if (a.dtype == TR_FLOAT32)
                ((float *)&buf[0])[i] = (float)v;
            else if (a.dtype == TR_INT32)
                ((int32_t *)&buf[0])[i] = (int32_t)v;
        }
        int rc = tr_object_allreduce(tr_ctx_runtime(ctx), a.name, a.rank, a.world, (uint64_t)r,
                                     a.count ? &buf[0] : nullptr, a.count, (tr_dtype)a.dtype,
                                     (tr_redop)a.op, a.timeout_ms);
        if (rc) return tr_ctx_error(ctx, "%s: %s", tr_errname(rc), tr_last_error());
    }
    return tr_ctx_reply(ctx, buf.data(), buf.size());
}

/* Small values, exact in every dtype; the reference is folded in rank order with the
 * same kernels (tested on their own in core/reduce_test). */
void coll_fill(std::string *buf, tr_dtype t, size_t count, int rank, int salt) {
    size_t esz = tr_dtype_size(t);
    buf->assign(count * esz, '\0');
    for (size_t i = 0; i < count; i++) {
        double v = (double)((int)((i * 7 + (size_t)rank * 3 + (size_t)salt) % 5) - 2);
        char *p = &(*buf)[i * esz];
        switch (t) {
        case TR_INT8:
            *(int8_t *)p = (int8_t)v;
            break;
        case TR_UINT8:
            *(uint8_t *)p = (uint8_t)(v + 2);
            break;
        case TR_INT32:
            *(int32_t *)p = (int32_t)v;
            break;
        case TR_INT64:
            *(int64_t *)p = (int64_t)v;
            break;
        case TR_FLOAT16:
            *(uint16_t *)p =
                v == 0 ? 0 : (uint16_t)((v < 0 ? 0x8000 : 0) | (fabs(v) == 1 ? 0x3c00 : 0x4000));
            break;
        case TR_BFLOAT16:
            *(uint16_t *)p =
                v == 0 ? 0 : (uint16_t)((v < 0 ? 0x8000 : 0) | (fabs(v) == 1 ? 0x3f80 : 0x4000));
            break;
        case TR_FLOAT32:
            *(float *)p = (float)v;
            break;
        case TR_FLOAT64:
            *(double *)p = v;
            break;
        }
    }
}

/* concat of fill(rank_of(d), salt_of(d)) for d in 0..world-1 */
template <typename F> std::string concat(int world, tr_dtype t, size_t n, F piece) {
    std::string out, p;
    for (int d = 0; d < world; d++) {
        piece(d, &p);
        out += p;
    }
    (void)t;
    (void)n;
    return out;
}

/* reduce, allgather, gather, scatter, reduce_scatter, alltoall against references.
 * Returns the number checked, or -1 with the reason in tr_last_error (via a failing op
 * or a message set here). */
int coll_more(tr_group *g, const CollArgs &a, tr_dtype t, size_t n, int root) {
    size_t esz = tr_dtype_size(t);
    int W = a.world, me = a.rank, rc;
    auto fail = [&](const char *what) {
        tr_group_rank(g); /* keep tr_last_error for op failures; set ours otherwise */
        fprintf(stderr, "coll check failed: %s\n", what);
        return -1;
    };
    std::string mine, want, other, got;
    /* reduce (sum) into root */
    coll_fill(&mine, t, n, me, 21);
    coll_fill(&want, t, n, 0, 21);
    for (int r = 1; r < W; r++) {
        coll_fill(&other, t, n, r, 21);
        tr__reduce(&want[0], other.data(), n, t, TR_SUM);
    }
    got.assign(n * esz, '\x11');
    rc = tr_reduce(g, mine.data(), me == root && n ? &got[0] : nullptr, n, t, TR_SUM, root,
                   a.timeout_ms);
    if (rc) return -1;
    if (me == root && got != want) return fail("reduce");
    /* allgather and gather */
    std::string all = concat(W, t, n, [&](int d, std::string *p) { coll_fill(p, t, n, d, 22); });
    coll_fill(&mine, t, n, me, 22);
    got.assign(W * n * esz, '\x11');
    rc = tr_allgather(g, mine.data(), n ? &got[0] : nullptr, n, t, a.timeout_ms);
    if (rc) return -1;
    if (got != all) return fail("allgather");
    got.assign(W * n * esz, '\x11');
    rc = tr_gather(g, mine.data(), me == root && n ? &got[0] : nullptr, n, t, root, a.timeout_ms);
    if (rc) return -1;
    if (me == root && got != all) return fail("gather");
    /* scatter from root */
    std::string src = concat(W, t, n, [&](int d, std::string *p) { coll_fill(p, t, n, d, 23); });
    got.assign(n * esz, '\x11');
    rc = tr_scatter(g, me == root ? src.data() : nullptr, n ? &got[0] : nullptr, n, t, root,
                    a.timeout_ms);
    if (rc) return -1;
    coll_fill(&want, t, n, me, 23);
    if (got != want) return fail("scatter");
    /* reduce_scatter (max): rank k's piece for d is fill(k, 30 + d) */
    std::string rs =
        concat(W, t, n, [&](int d, std::string *p) { coll_fill(p, t, n, me, 30 + d); });
    coll_fill(&want, t, n, 0, 30 + me);
    for (int k = 1; k < W; k++) {
        coll_fill(&other, t, n, k, 30 + me);
        tr__reduce(&want[0], other.data(), n, t, TR_MAX);
    }
    got.assign(n * esz, '\x11');
    rc = tr_reduce_scatter(g, rs.data(), n ? &got[0] : nullptr, n, t, TR_MAX, a.timeout_ms);
    if (rc) return -1;
    if (got != want) return fail("reduce_scatter");
    /* alltoall: rank k's piece for d is fill(k, 40 + d); we get fill(j, 40 + me) from j */
    std::string at =
        concat(W, t, n, [&](int d, std::string *p) { coll_fill(p, t, n, me, 40 + d); });
    want = concat(W, t, n, [&](int j, std::string *p) { coll_fill(p, t, n, j, 40 + me); });
    got.assign(W * n * esz, '\x11');
    rc = tr_alltoall(g, at.data(), n ? &got[0] : nullptr, n, t, a.timeout_ms);
    if (rc) return -1;
    if (got != want) return fail("alltoall");
    if (W == 1) return 6;
    /* point to point around the ring: even ranks send first, odd ranks receive first */
    int next = (me + 1) % W, prev = (me + W - 1) % W;
    coll_fill(&mine, t, n, me, 50);
    coll_fill(&want, t, n, prev, 50);
    got.assign(n * esz, '\x11');
    for (int step = 0; step < 2; step++) {
        bool sending = (step == 0) == (me % 2 == 0);
        rc = sending ? tr_send(g, mine.data(), n, t, next, a.timeout_ms)
                     : tr_recv(g, n ? &got[0] : nullptr, n, t, prev, a.timeout_ms);
        if (rc) return -1;
    }
    if (got != want) return fail("send/recv");
    return 7;
}

/* One op of Mode 6's disagreements, case s (0-9), of n elements (in and out hold
 * (8 + W) * n), with the ranks' roles rotated by rot (rank r plays rank (r + rot) % W of
 * the fixed schedule; roots follow their roles). */
static int coll_disagree(tr_group *g, int s, int rot, int W, int me, int32_t *in, int32_t *out,
                         int n, int t) {
    const int v = (me + rot) % W;
    auto real = [&](int k) { return (k + W - rot) % W; }; /* the rank that plays k */
    switch (s) {
    case 0: /* count */
        return tr_allreduce(g, in, out, v == W - 1 ? 8 * n : n, TR_INT32, TR_SUM, t);
    case 1: /* dtype, of another width (a stand-in of the wrong width would hang) */
        return tr_allreduce(g, in, out, n, v == 0 ? TR_INT32 : TR_FLOAT64, TR_SUM, t);
    case 2: /* reduction op */
        return tr_allreduce(g, in, out, n, TR_INT32, v % 2 ? TR_MAX : TR_SUM, t);
    case 3: /* root: each rank names the next one (all wait to receive) */
        return tr_broadcast(g, out, n, TR_INT32, real((v + 1) % W), t);
    case 4: /* root: two camps, each with its own root sending */
        return tr_broadcast(g, out, n, TR_INT32, real(v % 2), t);
    case 5: /* the op */
        return v == 0 ? tr_allgather(g, in, out, n, TR_INT32, t)
                      : tr_allreduce(g, in, out, n, TR_INT32, TR_SUM, t);
    case 6: /* a barrier against a rooted op */
        return v == W - 1 ? tr_barrier(g, t) : tr_gather(g, in, out, n, TR_INT32, real(0), t);
    case 7: /* two rooted ops */
        return v == 0 ? tr_scatter(g, in, out, n, TR_INT32, real(0), t)
                      : tr_reduce(g, in, out, n, TR_INT32, TR_SUM, real(0), t);
    case 8: /* no elements against some (no Gloo op at all on one side) */
        return tr_allreduce(g, in, out, v == 0 ? 0 : n, TR_INT32, TR_SUM, t);
    default: /* the wide ops */
        return v == W - 1 ? tr_reduce_scatter(g, in, out, n, TR_INT32, TR_SUM, t)
                          : tr_alltoall(g, in, out, n, TR_INT32, t);
    }
}

/* splitmix64: the stress's draws, the same on every rank for the same (seed, round). */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A rank's random pause: none a third of the time (ranks arrive together), else up to
 * 200 us or up to 2 ms. */
static void coll_jitter(uint64_t r) {
    unsigned k = (unsigned)(r % 3);
    if (k) usleep((useconds_t)((r >> 8) % (k == 1 ? 200 : 2000)));
}

/* Mode 6: ops the ranks disagree on (count, dtype, reduction op, root, the op itself).
 * Every rank must get TR_EINVAL naming the difference, and the allreduce after each must
 * give the right sum (the group stays usable). With a.count 0, the fixed schedule: each
 * case with every rank in turn arriving 20 ms late, so the others are inside the op when
 * it comes or it is there first. With a.count > 0, that many random rounds drawn from
 * a.seed: a case, its roles rotated (in place every other round), each rank pausing at
 * random before the disagreement and before the allreduce; both buffers of the
 * disagreement, filled with the round's values, left as they were; the allreduce, of a
 * random count, on those same buffers as they are (in place on either, or from one to the
 * other), checked element by element against the sum of the round's values computed here.
 * Returns the disagreements checked, or -1 with the reason (and the round, case and seed)
 * in tr_last_error. */
int coll_mismatches(tr_group *g, const CollArgs &a) {
    const int W = a.world, me = a.rank, n = 8, t = a.timeout_ms;
    /* A gloo rank bound to one core runs Gloo's I/O thread there, at SCHED_IDLE
     * (collective/gloo/gloo.cc, place_io_threads) */
    cpu_set_t mine;
    if (!strcmp(a.backend, "gloo") && sched_getaffinity(0, sizeof mine, &mine) == 0 &&
        CPU_COUNT(&mine) == 1 && sysconf(_SC_NPROCESSORS_ONLN) > 1) {
        int idle = 0, elsewhere = 0;
        DIR *d = opendir("/proc/self/task");
        for (struct dirent *e; d && (e = readdir(d));) {
            cpu_set_t m;
            pid_t tid = (pid_t)atoi(e->d_name);
            if (e->d_name[0] == '.' || sched_getscheduler(tid) != SCHED_IDLE) continue;
            idle++;
            if (sched_getaffinity(tid, sizeof m, &m) != 0 || !CPU_EQUAL(&m, &mine)) elsewhere++;
        }
        if (d) closedir(d);
        if (!idle || elsewhere) {
            tr__err(TR_EINTERNAL, "a bound gloo rank has %d SCHED_IDLE threads, %d off its core",
                    idle, elsewhere);
            return -1;
        }
    }
    const size_t most = 20000; /* the stress's largest disagreement */
    std::vector<int32_t> in((8 + (size_t)W) * most, me + 1), out((8 + (size_t)W) * most);
    int checked = 0;
    if (a.count == 0) {
        for (int late = -1; late < W; late++) {
            for (int s = 0; s < 10; s++) {
                if (me == late) usleep(20000);
                int rc = coll_disagree(g, s, 0, W, me, in.data(), out.data(), n, t);
                if (rc != TR_EINVAL || !strstr(tr_last_error(), "disagree")) {
                    std::string m = tr_last_error();
                    tr__err(TR_EINTERNAL, "disagreement %d (rank %d late): %s: %s", s, late,
                            tr_errname(rc), m.c_str());
                    return -1;
                }
                int32_t x = me + 1;
                rc = tr_allreduce(g, &x, &x, 1, TR_INT32, TR_SUM, t);
                if (rc || x != W * (W + 1) / 2) {
                    std::string m = rc ? tr_last_error() : "wrong sum " + std::to_string(x);
                    tr__err(TR_EINTERNAL, "allreduce after disagreement %d (rank %d late): %s", s,
                            late, m.c_str());
                    return -1;
                }
                checked++;
            }
        }
        return checked;
    }
    static const size_t counts[] = {1, 1, 3, 8, 17, 64, 1000, 100003};
    static const int sizes[] = {1, 8, 8, 8, 300, (int)most};
    std::vector<int32_t> want;
    for (uint64_t round = 0; round < a.count; round++) {
        uint64_t shared = mix64(a.seed ^ mix64(round)), own = mix64(shared + (uint64_t)me + 1);
        int s = (int)(shared % 10), rot = (int)((shared >> 8) % (uint64_t)W);
        size_t c = counts[(shared >> 16) % (sizeof counts / sizeof counts[0])];
        int dn = sizes[(shared >> 24) % (sizeof sizes / sizeof sizes[0])];
        bool calm = (shared >> 32) % 4 == 0; /* every rank at once, none pausing */
        /* this round's values: rank r's element i of in (b 0) and out (b 1), known to all */
        auto val = [&](int r, int b, size_t i) {
            uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(shared >> 20) ^
                         (uint32_t)r * 0x9e3779b1u ^ (uint32_t)b * 0x85ebca6bu;
            return (int32_t)(h % 1000003);
        };
        for (size_t i = 0; i < in.size(); i++) {
            in[i] = val(me, 0, i);
            out[i] = val(me, 1, i);
        }
        /* the disagreement in place (on out) every other round */
        bool dis_in_place = (shared >> 44) & 1;
        if (!calm) coll_jitter(own);
        int rc = coll_disagree(g, s, rot, W, me, dis_in_place ? out.data() : in.data(), out.data(),
                               dn, t);
        if (rc != TR_EINVAL || !strstr(tr_last_error(), "disagree")) {
            std::string m = tr_last_error();
            tr__err(TR_EINTERNAL,
                    "round %llu (seed %llu), disagreement %d of %d rotated %d%s: %s: %s",
                    (unsigned long long)round, (unsigned long long)a.seed, s, dn, rot,
                    dis_in_place ? " in place" : "", tr_errname(rc), m.c_str());
            return -1;
        }
        /* a failed op leaves every buffer as it was, on every backend (troupe.h) */
        for (int b = 0; b < 2; b++) {
            const std::vector<int32_t> &v = b ? out : in;
            size_t bad = 0;
            while (bad < v.size() && v[bad] == val(me, b, bad))
                bad++;
            if (bad < v.size()) {
                tr__err(TR_EINTERNAL,
                        "round %llu (seed %llu), disagreement %d of %d rotated %d%s: the %s "
                        "changed at element %zu (%d, was %d)",
                        (unsigned long long)round, (unsigned long long)a.seed, s, dn, rot,
                        dis_in_place ? " in place" : "", b ? "output" : "input", bad, v[bad],
                        val(me, b, bad));
                return -1;
            }
        }
        /* the next op reuses the failed op's buffers as they are, as a caller would:
         * in place on out (a broadcast's buffer) or on in, in -> out or out -> in */
        int how = (int)((shared >> 40) % 4);
        int32_t *src = how == 1 || how == 2 ? in.data() : out.data();
        int32_t *dst = how == 0 || how == 2 ? out.data() : in.data();
        int from = src == in.data() ? 0 : 1;
        want.assign(c, 0);
        for (size_t i = 0; i < c; i++)
            for (int r = 0; r < W; r++)
                want[i] += val(r, from, i);
        if (!calm) coll_jitter(own >> 32);
        rc = tr_allreduce(g, src, dst, c, TR_INT32, TR_SUM, t);
        size_t bad = 0;
        while (!rc && bad < c && dst[bad] == want[bad])
            bad++;
        if (rc || bad < c) {
            std::string m = rc ? std::string(tr_errname(rc)) + ": " + tr_last_error()
                               : "element " + std::to_string(bad) + " of " + std::to_string(c) +
                                     " is " + std::to_string(dst[bad]) + ", want " +
                                     std::to_string(want[bad]);
            static const char *hows[] = {"in place on out", "in place on in", "in -> out",
                                         "out -> in"};
            tr__err(TR_EINTERNAL,
                    "round %llu (seed %llu): allreduce of %zu (%s) after disagreement %d of %d "
                    "rotated %d%s: %s",
                    (unsigned long long)round, (unsigned long long)a.seed, c, hows[how], s, dn, rot,
                    dis_in_place ? " in place" : "", m.c_str());
            return -1;
        }
        checked++;
    }
    return checked;
}

int m_coll(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len != sizeof(CollArgs)) return tr_ctx_error(ctx, "coll wants CollArgs");
    CollArgs a;
    memcpy(&a, args, sizeof a);
    tr_group *g = nullptr;
    const char *backend = a.backend[0] ? a.backend : "shm";
    /* 8: the suite where odd ranks cannot write their peers' memory (a seccomp filter on
     * this thread, before the join's probe): a broadcast they root must not rely on it */
    if (a.mode == 8 && a.rank % 2 && tr_test_deny_syscall(SYS_process_vm_writev, EPERM))
        return tr_ctx_error(ctx, "seccomp: %s", strerror(errno));
    int rc = a.mode == 7 ? tr_group_open(tr_ctx_runtime(ctx), a.name, a.timeout_ms, &g)
                         : tr_group_join(tr_ctx_runtime(ctx), a.world, a.rank, backend, a.name,
                                         a.timeout_ms, &g);
    if (rc) return tr_ctx_error(ctx, "init %s: %s", tr_errname(rc), tr_last_error());
    if (a.mode == 7) { /* a declared group: its rank and size are the declaration's */
        if (tr_group_size(g) != a.world) return tr_ctx_error(ctx, "size %d", tr_group_size(g));
        a.rank = tr_group_rank(g);
    }
    if (a.mode == 1) raise(SIGSEGV);
    /* the suite forces single copy on (whether it pays here or not), 4 turns it off, 5 off
     * on odd ranks only */
    tr_group_set_single_copy(g, a.mode == 4 || (a.mode == 5 && a.rank % 2) ? 0 : 1);
    if (a.mode == 3) { /* join, then destroy the group while the others are in an op */
        tr_group_destroy(g);
        return tr_ctx_reply(ctx, "left", 4);
    }
    if (a.mode == 6) {
        int64_t n = coll_mismatches(g, a);
        std::string m = tr_last_error();
        tr_group_destroy(g);
        if (n < 0) return tr_ctx_error(ctx, "%s", m.c_str());
        return tr_ctx_reply(ctx, &n, sizeof n);
    }
    if (a.mode == 2) {
        std::vector<float> v(a.count, 1.0f);
        rc = tr_allreduce(g, v.data(), v.data(), v.size(), TR_FLOAT32, TR_SUM, a.timeout_ms);
        std::string msg = rc ? std::string(tr_errname(rc)) + ": " + tr_last_error() : "";
        int rc2 = rc ? tr_barrier(g, 100) : 0; /* an unusable group says so again */
        std::string msg2 = rc2 ? tr_errname(rc2) : "";
        tr_group_destroy(g);
        if (rc) return tr_ctx_error(ctx, "%s | after: %s", msg.c_str(), msg2.c_str());
        for (float x : v)
            if (x != (float)a.world) return tr_ctx_error(ctx, "wrong sum %f", (double)x);
        return tr_ctx_reply(ctx, "ok", 2);
    }
    const tr_dtype types[] = {TR_INT8,    TR_UINT8,    TR_INT32,   TR_INT64,
                              TR_FLOAT16, TR_BFLOAT16, TR_FLOAT32, TR_FLOAT64};
    const tr_redop ops[] = {TR_SUM, TR_PROD, TR_MIN, TR_MAX, TR_AVG};
    /* (shm: 2 - 16 bytes at most - and some 7s are tiny ops, on the counter's line) */
    const size_t counts[] = {0, 2, 7, 100003};
    int checked = 0;
    for (tr_dtype t : types) {
        size_t esz = tr_dtype_size(t);
        for (size_t n : counts) {
            for (tr_redop op : ops) {
                std::string mine, want, other, got;
                coll_fill(&mine, t, n, a.rank, (int)op);
                coll_fill(&want, t, n, 0, (int)op);
                for (int r = 1; r < a.world; r++) {
                    coll_fill(&other, t, n, r, (int)op);
                    tr__reduce(&want[0], other.data(), n, t, op);
                }
                tr__reduce_finish(&want[0], n, t, op, a.world);
                got.assign(n * esz, '\x55');
                rc = tr_allreduce(g, mine.data(), n ? &got[0] : nullptr, n, t, op, a.timeout_ms);
                if (rc)
                    return tr_ctx_error(ctx, "allreduce %s: %s", tr_errname(rc), tr_last_error());
                if (got != want) {
                    size_t i = 0;
                    while (i < got.size() && got[i] == want[i])
                        i++;
                    return tr_ctx_error(ctx,
                                        "allreduce dtype %d op %d count %zu: wrong result at "
                                        "byte %zu: got %02x want %02x (mine %02x)",
                                        t, op, n, i, (unsigned char)got[i], (unsigned char)want[i],
                                        (unsigned char)mine[i]);
                }
                checked++;
            }
            int root = (int)(n % (size_t)a.world);
            std::string buf, rootdata;
            coll_fill(&rootdata, t, n, root, 9);
            if (a.rank == root)
                buf = rootdata;
            else
                buf.assign(n * esz, '\x33');
            rc = tr_broadcast(g, n ? &buf[0] : nullptr, n, t, root, a.timeout_ms);
            if (rc) return tr_ctx_error(ctx, "broadcast %s: %s", tr_errname(rc), tr_last_error());
            if (buf != rootdata)
                return tr_ctx_error(ctx, "broadcast dtype %d count %zu: wrong result", t, n);
            checked++;
            int rc2 = coll_more(g, a, t, n, root);
            if (rc2 < 0) return tr_ctx_error(ctx, "dtype %d count %zu: %s", t, n, tr_last_error());
            checked += rc2;
        }
    }
    /* in place (tiny and not), and a barrier */
    double tiny[2] = {1.0 + a.rank, -2.0 * a.rank};
    rc = tr_allreduce(g, tiny, tiny, 2, TR_FLOAT64, TR_SUM, a.timeout_ms);
    if (!rc &&
        (tiny[0] != a.world * (a.world + 1) / 2.0 || tiny[1] != -1.0 * a.world * (a.world - 1)))
        return tr_ctx_error(ctx, "tiny in place: %f %f", tiny[0], tiny[1]);
    std::string io;
    coll_fill(&io, TR_INT32, 1000, a.rank, 1);
    if (!rc) rc = tr_allreduce(g, io.data(), &io[0], 1000, TR_INT32, TR_SUM, a.timeout_ms);
    if (!rc) rc = tr_barrier(g, a.timeout_ms);
    if (rc) return tr_ctx_error(ctx, "in place/barrier %s: %s", tr_errname(rc), tr_last_error());
    /* a rank that disagrees: every rank gets TR_EINVAL, and the group stays usable */
    int32_t x = 1;
    rc = tr_allreduce(g, &x, &x, 1, a.rank == 0 ? TR_INT32 : TR_FLOAT32, TR_SUM, a.timeout_ms);
    if (a.world > 1 && rc != TR_EINVAL)
        return tr_ctx_error(ctx, "mismatch gave %s", tr_errname(rc));
    if (a.world > 1 && !strstr(tr_last_error(), "disagree"))
        return tr_ctx_error(ctx, "mismatch message: %s", tr_last_error());
    rc = tr_barrier(g, a.timeout_ms);
    if (rc) return tr_ctx_error(ctx, "barrier after mismatch %s", tr_errname(rc));
    tr_group_destroy(g);
    int64_t n = checked;
    return tr_ctx_reply(ctx, &n, sizeof n);
}

/* Opens the declared group named by the argument ("name" or "name|timeout_ms") and
 * allreduces rank + 1; replies {rank, sum}. */
int m_open_allreduce(tr_ctx *ctx, void *, const void *args, size_t len) {
    std::string name((const char *)args, len);
    int timeout = 10000;
    size_t bar = name.find('|');
    if (bar != std::string::npos) {
        timeout = atoi(name.c_str() + bar + 1);
        name.resize(bar);
    }
    tr_group *g;
    int rc = tr_group_open(tr_ctx_runtime(ctx), name.c_str(), timeout, &g);
    if (rc) return tr_ctx_error(ctx, "open %s: %s", tr_errname(rc), tr_last_error());
    int32_t v[2] = {tr_group_rank(g), tr_group_rank(g) + 1};
    rc = tr_allreduce(g, &v[1], &v[1], 1, TR_INT32, TR_SUM, 10000);
    tr_group_destroy(g);
    if (rc) return tr_ctx_error(ctx, "allreduce %s: %s", tr_errname(rc), tr_last_error());
    return tr_ctx_reply(ctx, v, sizeof v);
}

/* Opens the declared group named by the argument, allreduces rank + 1 and keeps the group
 * for later methods; replies the sum. */
int m_open_keep(tr_ctx *ctx, void *, const void *args, size_t len) {
    std::string name((const char *)args, len);
    tr_group *g;
    int rc = tr_group_open(tr_ctx_runtime(ctx), name.c_str(), 20000, &g);
    if (rc) return tr_ctx_error(ctx, "open %s: %s", tr_errname(rc), tr_last_error());
    int32_t v = tr_group_rank(g) + 1;
    rc = tr_allreduce(g, &v, &v, 1, TR_INT32, TR_SUM, 20000);
    if (rc) return tr_ctx_error(ctx, "allreduce %s: %s", tr_errname(rc), tr_last_error());
    return reply_i64(ctx, v);
}

/* "name|world|rank|backend": joins the group and keeps it for later methods. */
int m_join_group(tr_ctx *ctx, void *, const void *args, size_t len) {
    char name[64], backend[16];
    int world, rank;
    std::string a((const char *)args, len);
    if (sscanf(a.c_str(), "%63[^|]|%d|%d|%15s", name, &world, &rank, backend) != 4)
        return tr_ctx_error(ctx, "join_group wants name|world|rank|backend");
    tr_group *g;
    int rc = tr_group_join(tr_ctx_runtime(ctx), world, rank, backend, name, 10000, &g);
    if (rc) return tr_ctx_error(ctx, "join %s: %s", tr_errname(rc), tr_last_error());
    return reply_i64(ctx, tr_group_rank(g));
}

/* Finds the group joined by an earlier method, by name ("name", "name|count",
 * "name|count|0": agreement checks off, or "name|count|checks|timeout_ms"), and allreduces
 * rank + 1 (count int32s of it, default 1; within 10 s by default); replies the first. */
int m_allreduce_by_name(tr_ctx *ctx, void *, const void *args, size_t len) {
    std::string name((const char *)args, len);
    size_t count = 1, bar = name.find('|');
    int checks = 1, timeout = 10000;
    if (bar != std::string::npos) {
        char *end;
        count = strtoul(name.c_str() + bar + 1, &end, 10);
        if (*end == '|') checks = (int)strtol(end + 1, &end, 10) != 0;
        if (*end == '|') timeout = atoi(end + 1);
        name.resize(bar);
    }
    tr_group *g;
    int rc = tr_group_get(tr_ctx_runtime(ctx), name.c_str(), &g);
    if (rc) return tr_ctx_error(ctx, "get %s: %s", tr_errname(rc), tr_last_error());
    tr_group_set_checks(g, checks);
    std::vector<int32_t> v(count ? count : 1, tr_group_rank(g) + 1);
    rc = tr_allreduce(g, v.data(), v.data(), count, TR_INT32, TR_SUM, timeout);
    if (rc) return tr_ctx_error(ctx, "allreduce %s: %s", tr_errname(rc), tr_last_error());
    return reply_i64(ctx, v[0]);
}

int m_leave_group(tr_ctx *ctx, void *, const void *args, size_t len) {
    std::string name((const char *)args, len);
    tr_group *g;
    int rc = tr_group_get(tr_ctx_runtime(ctx), name.c_str(), &g);
    if (rc) return tr_ctx_error(ctx, "get %s: %s", tr_errname(rc), tr_last_error());
    tr_group_destroy(g);
    return reply_i64(ctx, 0);
}

/* Fails through the non-variadic tr_ctx_set_error (what bindings call). */
int m_fail_plain(tr_ctx *ctx, void *, const void *args, size_t len) {
    std::string msg((const char *)args, len);
    return tr_ctx_set_error(ctx, msg.c_str());
}

int m_pid(tr_ctx *ctx, void *, const void *, size_t) {
    return reply_i64(ctx, getpid());
}

int m_name(tr_ctx *ctx, void *self, const void *, size_t) {
    auto *c = (Counter *)self;
    return tr_ctx_reply(ctx, c->name.data(), c->name.size());
}

/* Calls "add" on another actor (its id is the argument) from inside a method. */
int m_call_other(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len != sizeof(tr_actor_id)) return tr_ctx_error(ctx, "want an actor id");
    tr_actor_id other;
    memcpy(&other, args, sizeof other);
    int64_t v = 5, out = 0;
    int rc = call_i64(tr_ctx_runtime(ctx), other, "add", v, &out);
    if (rc) return tr_ctx_error(ctx, "nested call failed: %s", tr_errname(rc));
    return reply_i64(ctx, out);
}

/* One group's thread: `iters` rounds of an allreduce (sum) and a broadcast at three
 * sizes, each checked; returns "" or what went wrong. */
static std::string multi_one(tr_runtime *rt, const MultiArgs &a, const MultiGroup &mg, int rank,
                             int64_t *ops) {
    char name[64];
    snprintf(name, sizeof name, "%s-%s", a.tag, mg.suffix);
    tr_group *g;
    int rc = tr_group_join(rt, mg.n, rank, mg.backend, name, a.timeout_ms, &g);
    if (rc) return std::string(name) + " init: " + tr_errname(rc) + ": " + tr_last_error();
    const size_t counts[] = {1, 5000, 70001};
    std::string err;
    for (int it = 0; it < a.iters && err.empty(); it++) {
        size_t n = counts[it % 3];
        std::vector<int32_t> v(n), b(n);
        for (size_t i = 0; i < n; i++)
            v[i] = (rank + 1) * (it + 1) + (int32_t)(i % 3);
        rc = tr_allreduce(g, v.data(), v.data(), n, TR_INT32, TR_SUM, a.timeout_ms);
        for (size_t i = 0; i < n && !rc && err.empty(); i++)
            if (v[i] != (it + 1) * mg.n * (mg.n + 1) / 2 + mg.n * (int32_t)(i % 3))
                err = std::string(name) + ": wrong allreduce at " + std::to_string(i);
        int root = it % mg.n;
        for (size_t i = 0; i < n; i++)
            b[i] = rank == root ? it * 7 + (int32_t)i : -1;
        if (!rc && err.empty()) rc = tr_broadcast(g, b.data(), n, TR_INT32, root, a.timeout_ms);
        for (size_t i = 0; i < n && !rc && err.empty(); i++)
            if (b[i] != it * 7 + (int32_t)i)
                err = std::string(name) + ": wrong broadcast at " + std::to_string(i);
        if (rc) err = std::string(name) + ": " + tr_errname(rc) + ": " + tr_last_error();
        if (err.empty()) *ops += 2;
    }
    tr_group_destroy(g);
    return err;
}

int m_multi(tr_ctx *ctx, void *, const void *args, size_t len) {
    if (len != sizeof(MultiArgs)) return tr_ctx_error(ctx, "multi wants MultiArgs");
    MultiArgs a;
    memcpy(&a, args, sizeof a);
    std::vector<std::thread> threads;
    std::vector<std::string> errs(5);
    std::vector<int64_t> ops(5, 0);
    for (int k = 0; k < 5; k++) {
        const MultiGroup &mg = multi_groups[k];
        for (int r = 0; r < mg.n; r++)
            if (mg.members[r] == a.index)
                threads.emplace_back([&, k, r] {
                    errs[k] = multi_one(tr_ctx_runtime(ctx), a, multi_groups[k], r, &ops[k]);
                });
    }
    for (auto &t : threads)
        t.join();
    int64_t total = 0;
    for (int k = 0; k < 5; k++) {
        if (!errs[k].empty()) return tr_ctx_error(ctx, "%s", errs[k].c_str());
        total += ops[k];
    }
    return reply_i64(ctx, total);
}

#ifdef TR_WITH_CUDA
/* "name|world|rank|backend|count|mode" on device memory (this actor's first visible GPU):
 * mode 0 joins the group, allreduces count int32 (rank + 1) * (i % 1000) and broadcasts
 * i * 3 + 1 from rank 0, checks both and replies "ok"; mode 1 runs 4 MiB float
 * allreduces until one fails and replies the error's name (a peer is killed meanwhile). */
int m_gpu_coll(tr_ctx *ctx, void *, const void *args, size_t len) {
    char name[64], backend[16];
    int world, rank, mode;
    unsigned long long count;
    std::string a((const char *)args, len);
    if (sscanf(a.c_str(), "%63[^|]|%d|%d|%15[^|]|%llu|%d", name, &world, &rank, backend, &count,
               &mode) != 6)
        return tr_ctx_error(ctx, "gpu_coll wants name|world|rank|backend|count|mode");
    if (mode == 1) count = 1 << 20;
    size_t n = count, bytes = n * 4;
    void *d = nullptr;
    cudaError_t ce = cudaMalloc(&d, bytes ? bytes : 4);
    if (ce != cudaSuccess) return tr_ctx_error(ctx, "cudaMalloc: %s", cudaGetErrorString(ce));
    std::vector<int32_t> h(n);
    std::string err;
    tr_group *g = nullptr;
    int rc = tr_group_join(tr_ctx_runtime(ctx), world, rank, backend, name, 30000, &g);
    if (rc) err = std::string("join: ") + tr_errname(rc) + ": " + tr_last_error();
    for (int it = 0; mode == 1 && err.empty(); it++) {
        rc = tr_allreduce(g, d, d, n, TR_FLOAT32, TR_SUM, 20000);
        if (rc) err = tr_errname(rc);
    }
    if (mode == 0 && err.empty()) {
        for (size_t i = 0; i < n; i++)
            h[i] = (rank + 1) * (int32_t)(i % 1000);
        cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice);
        rc = tr_allreduce(g, d, d, n, TR_INT32, TR_SUM, 30000);
        if (!rc) cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < n && !rc && err.empty(); i++)
            if (h[i] != world * (world + 1) / 2 * (int32_t)(i % 1000))
                err = "wrong allreduce at " + std::to_string(i);
        for (size_t i = 0; i < n; i++)
            h[i] = rank == 0 ? (int32_t)i * 3 + 1 : -1;
        cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice);
        if (!rc && err.empty()) rc = tr_broadcast(g, d, n, TR_INT32, 0, 30000);
        if (!rc) cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < n && !rc && err.empty(); i++)
            if (h[i] != (int32_t)i * 3 + 1) err = "wrong broadcast at " + std::to_string(i);
        /* point to point, world 2: rank 0 sends device memory, rank 1 receives it */
        if (!rc && err.empty() && world == 2) {
            for (size_t i = 0; i < n; i++)
                h[i] = rank == 0 ? 7 - (int32_t)i : 0;
            cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice);
            rc = rank == 0 ? tr_send(g, d, n, TR_INT32, 1, 30000)
                           : tr_recv(g, d, n, TR_INT32, 0, 30000);
            if (!rc && rank == 1) cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost);
            for (size_t i = 0; i < n && !rc && rank == 1 && err.empty(); i++)
                if (h[i] != 7 - (int32_t)i) err = "wrong recv at " + std::to_string(i);
        }
        if (rc && err.empty()) err = std::string(tr_errname(rc)) + ": " + tr_last_error();
        if (err.empty()) err = "ok";
    }
    tr_group_destroy(g);
    cudaFree(d);
    return tr_ctx_reply(ctx, err.data(), err.size());
}

/* "NAME=VALUE": sets an environment variable in the actor's process (before it first
 * uses NCCL: NCCL_HOSTID makes two actors on one GPU two NCCL hosts, tests/nccl_test.cc). */
int m_setenv(tr_ctx *ctx, void *, const void *args, size_t len) {
    std::string a((const char *)args, len);
    size_t eq = a.find('=');
    if (eq == std::string::npos || eq == 0) return tr_ctx_error(ctx, "setenv wants NAME=VALUE");
    if (setenv(a.substr(0, eq).c_str(), a.substr(eq + 1).c_str(), 1))
        return tr_ctx_error(ctx, "setenv: %s", strerror(errno));
    return tr_ctx_reply(ctx, "ok", 2);
}

/* A device value: int64 k -> 1000 int32 k + i in device memory the actor keeps, replied
 * with tr_ctx_reply_device (a classic call gets the bytes on the host). */
int m_dev_fill(tr_ctx *ctx, void *, const void *args, size_t len) {
    static void *d; /* the actor's: valid after the method returns */
    if (!d && cudaMalloc(&d, 4000) != cudaSuccess) return tr_ctx_error(ctx, "cudaMalloc");
    int64_t k = arg_i64(args, len);
    std::vector<int32_t> h(1000);
    for (int i = 0; i < 1000; i++)
        h[i] = (int32_t)k + i;
    if (cudaMemcpy(d, h.data(), 4000, cudaMemcpyHostToDevice) != cudaSuccess)
        return tr_ctx_error(ctx, "cudaMemcpy");
    return tr_ctx_reply_device(ctx, d, 4000);
}

/* Sums int32s: a device value (a graph's device edge gives a device pointer) or host
 * bytes (an shm edge), whichever args is. */
int m_dev_sum(tr_ctx *ctx, void *, const void *args, size_t len) {
    std::vector<int32_t> h(len / 4);
    cudaError_t ce = cudaMemcpy(h.data(), args, h.size() * 4, cudaMemcpyDefault);
    if (ce != cudaSuccess)
        return tr_ctx_error(ctx, "dev_sum: not device memory? %s", cudaGetErrorString(ce));
    int64_t sum = 0;
    for (int32_t v : h)
        sum += v;
    return reply_i64(ctx, sum);
}
#endif

/* Ends the actor (tr_ctx_exit_actor) with args as the reason, after a reply of its own
 * (which its caller never sees). */
int m_exit_with(tr_ctx *ctx, void *, const void *args, size_t len) {
    std::string why((const char *)args, len);
    (void)reply_i64(ctx, 1);
    return tr_ctx_exit_actor(ctx, why.c_str());
}

int m_namespace(tr_ctx *ctx, void *, const void *, size_t);
const tr_method_def counter_methods[] = {
    {"add", m_add},
    {"note", m_note},
    {"get", m_get},
    {"seq", m_seq},
    {"echo", m_echo},
    {"echo_alloc", m_echo_alloc},
    {"pass", m_pass},
    {"fail", m_fail},
    {"fail_silent", m_fail_silent},
    {"crash", m_crash},
    {"exit", m_exit},
    {"crash_until", m_crash_until},
    {"sleep_ms", m_sleep_ms},
    {"wait_file", m_wait_file},
    {"pid", m_pid},
    {"name", m_name},
    {"call_other", m_call_other},
    {"big", m_big},
    {"put", m_put},
    {"sum", m_sum},
    {"sum_args", m_sum_args},
    {"first_diff", m_first_diff},
    {"objar", m_objar},
    {"put_ref", m_put_ref},
    {"deref_sum", m_deref_sum},
    {"keep", m_keep},
    {"kept_sum", m_kept_sum},
    {"drop_kept", m_drop_kept},
    {"store_objects", m_store_objects},
    {"pass_ref", m_pass_ref},
    {"share_call", m_share_call},
    {"parts", m_parts},
    {"put_parts", m_put_parts},
    {"stream", m_stream},
    {"coll", m_coll},
    {"open_allreduce", m_open_allreduce},
    {"open_keep", m_open_keep},
    {"multi", m_multi},
    {"join_group", m_join_group},
    {"allreduce_by_name", m_allreduce_by_name},
    {"leave_group", m_leave_group},
    {"fail_plain", m_fail_plain},
    {"slow_big", m_slow_big},
    {"namespace", m_namespace},
    {"exit_with", m_exit_with},
    {"plus1", m_plus1},
    {"excl", m_excl},
    {"gpus", m_gpus},
#ifdef TR_WITH_CUDA
    {"gpu_coll", m_gpu_coll},
    {"setenv", m_setenv},
    {"dev_fill", m_dev_fill},
    {"dev_sum", m_dev_sum},
#endif
};

/* Dispatcher's methods: any name not in its table replies "NAME:ARGS"; "fixed" is in it. */
int m_dispatch(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    std::string out = std::string(tr_ctx_method(ctx)) + ":" + std::string((const char *)args, len);
    if (out.rfind("fail:", 0) == 0) return tr_ctx_error(ctx, "asked to fail");
    return tr_ctx_reply(ctx, out.data(), out.size());
}
int m_fixed(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self, (void)args, (void)len;
    std::string out = std::string("fixed(") + tr_ctx_method(ctx) + ")";
    return tr_ctx_reply(ctx, out.data(), out.size());
}
const tr_method_def dispatcher_methods[] = {{"fixed", m_fixed}};

/* ---- remote functions (tests/tasks_test.cc) */

int t_echo(tr_ctx *ctx, const void *args, size_t len) {
    return tr_ctx_reply(ctx, args, len);
}

int t_parts(tr_ctx *ctx, const void *args, size_t len) {
    return m_parts(ctx, nullptr, args, len);
}

int t_stream(tr_ctx *ctx, const void *args, size_t len) {
    return m_stream(ctx, nullptr, args, len);
}

/* args: a path (no NUL) and, after a NUL, anything: creates the file (a side effect another
 * process sees, whether or not anyone gets the result). The refs' values are ignored. */
int t_touch(tr_ctx *ctx, const void *args, size_t len) {
    std::string path((const char *)args, strnlen((const char *)args, len));
    FILE *f = fopen(path.c_str(), "w");
    if (!f) return tr_ctx_error(ctx, "t_touch: cannot create %s", path.c_str());
    fclose(f);
    return reply_i64(ctx, 1);
}

int t_pid(tr_ctx *ctx, const void *, size_t) {
    return reply_i64(ctx, getpid());
}

/* Replies tr_node_status's JSON, as the task sees it while it runs. */
int t_status(tr_ctx *ctx, const void *, size_t) {
    char *json = nullptr;
    if (tr_node_status(tr_ctx_runtime(ctx), &json)) return tr_ctx_error(ctx, "%s", tr_last_error());
    int rc = tr_ctx_reply(ctx, json, strlen(json));
    tr_free(json);
    return rc;
}

int t_sleep(tr_ctx *ctx, const void *args, size_t len) {
    int64_t ms = arg_i64(args, len);
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
    return reply_i64(ctx, getpid());
}

/* args: int64 ms, then a path. Polls tr_ctx_canceled for up to ms; writes "canceled" or
 * "ran out" to the path, and replies it. */
int t_until_canceled(tr_ctx *ctx, const void *args, size_t len) {
    if (len < 9) return tr_ctx_error(ctx, "t_until_canceled wants (ms, path)");
    int64_t ms;
    memcpy(&ms, args, 8);
    std::string path((const char *)args + 8, len - 8);
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    bool canceled = false;
    while (!(canceled = tr_ctx_canceled(ctx)) && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const char *what = canceled ? "canceled" : "ran out";
    if (FILE *f = fopen(path.c_str(), "w")) {
        fputs(what, f);
        fclose(f);
    }
    return tr_ctx_reply(ctx, what, strlen(what));
}

int t_fail(tr_ctx *ctx, const void *args, size_t len) {
    return tr_ctx_error(ctx, "task failed: %.*s", (int)len, (const char *)args);
}

/* args: a path. Appends a line to it; crashes unless the file then has `limit` lines
 * (the first 8 bytes: the limit, the rest the path). */
int t_crash_until(tr_ctx *ctx, const void *args, size_t len) {
    if (len < 9) return tr_ctx_error(ctx, "crash_until wants (limit, path)");
    int64_t limit;
    memcpy(&limit, args, 8);
    std::string path((const char *)args + 8, len - 8);
    FILE *f = fopen(path.c_str(), "a+");
    if (!f) return tr_ctx_error(ctx, "cannot open %s", path.c_str());
    fputs("run\n", f);
    fflush(f);
    rewind(f);
    int lines = 0, c;
    while ((c = fgetc(f)) != EOF)
        lines += c == '\n';
    fclose(f);
    if (lines < limit) _exit(3); /* the worker dies with the task in flight */
    return reply_i64(ctx, lines);
}

/* Sums the checksums of its ref arguments (objects or other tasks' results). */
int t_sum_refs(tr_ctx *ctx, const void *, size_t) {
    uint64_t sum = 0;
    for (size_t i = 0; i < tr_ctx_num_refs(ctx); i++) {
        const void *d;
        size_t n;
        if (tr_ctx_ref(ctx, i, &d, &n)) return tr_ctx_error(ctx, "ref %zu", i);
        sum += checksum(d, n);
    }
    return tr_ctx_reply(ctx, &sum, sizeof sum);
}

/* args: int64 depth. Depth 0 replies 1; otherwise submits two tasks of depth - 1, waits
 * for both (a parent holding its worker while its children run) and replies their sum. */
int t_tree(tr_ctx *ctx, const void *args, size_t len) {
    int64_t depth = arg_i64(args, len);
    if (depth <= 0) return reply_i64(ctx, 1);
    tr_runtime *rt = tr_ctx_runtime(ctx);
    int64_t d = depth - 1, total = 0;
    tr_ref kids[2];
    for (int i = 0; i < 2; i++)
        if (tr_task_submit(rt, "t_tree", &d, sizeof d, nullptr, 0, nullptr, &kids[i]))
            return tr_ctx_error(ctx, "submit: %s", tr_last_error());
    for (int i = 0; i < 2; i++) {
        const void *v;
        size_t n;
        int rc = tr_get(rt, kids[i], 30000, &v, &n);
        if (rc || n != 8)
            return tr_ctx_error(ctx, "child: %s: %s", tr_errname(rc), tr_last_error());
        int64_t x;
        memcpy(&x, v, 8);
        total += x;
        tr_ref_release(rt, kids[i]);
    }
    return reply_i64(ctx, total);
}

/* The namespace its runtime makes and finds names in now (tr_runtime_namespace). */
static int reply_namespace(tr_ctx *ctx) {
    char ns[256];
    if (tr_runtime_namespace(tr_ctx_runtime(ctx), ns, sizeof ns))
        return tr_ctx_error(ctx, "tr_runtime_namespace: %s", tr_last_error());
    return tr_ctx_reply(ctx, ns, strlen(ns));
}
int m_namespace(tr_ctx *ctx, void *, const void *, size_t) {
    return reply_namespace(ctx);
}
int t_namespace(tr_ctx *ctx, const void *, size_t) {
    return reply_namespace(ctx);
}

/* The namespace its child task sees (t_namespace, submitted from this task). */
int t_child_namespace(tr_ctx *ctx, const void *, size_t) {
    tr_runtime *rt = tr_ctx_runtime(ctx);
    tr_ref kid;
    const void *v;
    size_t n;
    int rc = tr_task_submit(rt, "t_namespace", nullptr, 0, nullptr, 0, nullptr, &kid);
    if (!rc && !(rc = tr_get(rt, kid, 30000, &v, &n))) rc = tr_ctx_reply(ctx, v, n);
    if (rc) return tr_ctx_error(ctx, "child: %s: %s", tr_errname(rc), tr_last_error());
    tr_ref_release(rt, kid);
    return 0;
}

/* tr_ctx_exit_actor in a task: refused (TR_ESTATE), replied as its code's name. */
int t_exit(tr_ctx *ctx, const void *, size_t) {
    const char *name = tr_errname(tr_ctx_exit_actor(ctx, "no"));
    return tr_ctx_reply(ctx, name, strlen(name));
}

/* Creates a detached Counter named args (in its runtime's namespace); replies "made". */
int t_make_named(tr_ctx *ctx, const void *args, size_t len) {
    std::string name((const char *)args, len);
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.name = name.c_str();
    o.detached = 1;
    tr_actor_id a;
    if (tr_actor_create(tr_ctx_runtime(ctx), "Counter", &o, "n", 1, &a))
        return tr_ctx_error(ctx, "create: %s", tr_last_error());
    return tr_ctx_reply(ctx, "made", 4);
}

/* Creates a Counter actor, adds args to it, kills it; replies the sum. */
int t_make_actor(tr_ctx *ctx, const void *args, size_t len) {
    tr_runtime *rt = tr_ctx_runtime(ctx);
    tr_actor_id a;
    int rc = tr_actor_create(rt, "Counter", nullptr, "t", 1, &a);
    int64_t out = 0;
    if (!rc) rc = call_i64(rt, a, "add", arg_i64(args, len), &out);
    if (!rc) tr_actor_kill(rt, a, 1);
    return rc ? tr_ctx_error(ctx, "actor: %s: %s", tr_errname(rc), tr_last_error())
              : reply_i64(ctx, out);
}

/* "Concurrent": a class whose methods are thread-safe, for actors created with
 * max_concurrency > 1 (tests/concurrency_test.cc). */
struct Concurrent {
    std::mutex mu;
    std::condition_variable cv;
    int64_t arrived = 0;
    int running = 0, peak = 0;
    std::atomic<int64_t> total{0};
    std::atomic<int64_t> canceled{0}; /* until_canceled calls that saw their cancel */
};

int conc_new(tr_ctx *ctx, const void *args, size_t len, void **self) {
    (void)ctx, (void)args, (void)len;
    *self = new Concurrent;
    return 0;
}

void conc_free(void *self) {
    delete (Concurrent *)self;
}

/* Counts the methods running at once (peak). */
struct Running {
    explicit Running(Concurrent *c) : c(c) {
        std::lock_guard<std::mutex> g(c->mu);
        c->peak = std::max(c->peak, ++c->running);
    }
    ~Running() {
        std::lock_guard<std::mutex> g(c->mu);
        c->running--;
    }
    Concurrent *c;
};

/* args: int64 n, int64 timeout_ms. Arrives, then waits until n calls have arrived in
 * all (a barrier among calls running at once); replies the arrivals seen, or fails
 * after timeout_ms saying how many had come. */
int c_meet(tr_ctx *ctx, void *self, const void *args, size_t len) {
    auto *c = (Concurrent *)self;
    int64_t a[2];
    if (len != sizeof a) return tr_ctx_error(ctx, "meet wants two int64");
    memcpy(a, args, sizeof a);
    Running r(c);
    std::unique_lock<std::mutex> g(c->mu);
    c->arrived++;
    c->cv.notify_all();
    if (!c->cv.wait_for(g, std::chrono::milliseconds(a[1]), [&] { return c->arrived >= a[0]; }))
        return tr_ctx_error(ctx, "timed out with %lld of %lld arrived", (long long)c->arrived,
                            (long long)a[0]);
    return reply_i64(ctx, c->arrived);
}

/* args: int64 ms. Sleeps, then replies the most methods that ran at once so far. */
int c_hold(tr_ctx *ctx, void *self, const void *args, size_t len) {
    auto *c = (Concurrent *)self;
    Running r(c);
    std::this_thread::sleep_for(std::chrono::milliseconds(arg_i64(args, len)));
    std::lock_guard<std::mutex> g(c->mu);
    return reply_i64(ctx, c->peak);
}

/* Replies its argument after a pause of 0-63 us drawn from it (results finish out of
 * order), and adds 1 to the total. */
int c_echo(tr_ctx *ctx, void *self, const void *args, size_t len) {
    auto *c = (Concurrent *)self;
    c->total++;
    std::this_thread::sleep_for(std::chrono::microseconds(checksum(args, len) % 64));
    return tr_ctx_reply(ctx, args, len);
}

int c_total(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)args, (void)len;
    return reply_i64(ctx, ((Concurrent *)self)->total.load());
}

/* args: int64 ms. Polls tr_ctx_canceled for up to ms; replies 1 (and counts it in
 * `canceled`) if it saw its cancel, else 0. */
int c_until_canceled(tr_ctx *ctx, void *self, const void *args, size_t len) {
    auto *c = (Concurrent *)self;
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(arg_i64(args, len));
    while (!tr_ctx_canceled(ctx) && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    int64_t seen = tr_ctx_canceled(ctx);
    c->canceled += seen;
    return reply_i64(ctx, seen);
}

int c_canceled(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)args, (void)len;
    return reply_i64(ctx, ((Concurrent *)self)->canceled.load());
}

int c_crash(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)ctx, (void)self, (void)args, (void)len;
    _exit(3);
}

const tr_method_def concurrent_methods[] = {
    {"meet", c_meet},        {"hold", c_hold},   {"echo", c_echo},
    {"total", c_total},      {"crash", c_crash}, {"until_canceled", c_until_canceled},
    {"canceled", c_canceled}};

void add_functions(tr_config *cfg) {
    static const struct {
        const char *name;
        tr_task_fn fn;
    } fns[] = {{"t_echo", t_echo},
               {"t_pid", t_pid},
               {"t_touch", t_touch},
               {"t_sleep", t_sleep},
               {"t_status", t_status},
               {"t_fail", t_fail},
               {"t_crash_until", t_crash_until},
               {"t_sum_refs", t_sum_refs},
               {"t_tree", t_tree},
               {"t_make_actor", t_make_actor},
               {"t_parts", t_parts},
               {"t_stream", t_stream},
               {"t_until_canceled", t_until_canceled},
               {"t_namespace", t_namespace},
               {"t_child_namespace", t_child_namespace},
               {"t_make_named", t_make_named},
               {"t_exit", t_exit}};
    for (const auto &f : fns)
        if (tr_config_add_function(cfg, f.name, f.fn)) abort();
}

/* Idler: its idle hook (tr_actor_class.idle) stands for a binding's lock kept from one
 * call to the next (Python's GIL): "hold" takes it on its thread, the hook gives it back
 * there; "count" replies {times given back, whether its thread holds it now, calls whose
 * thread held it from an earlier call}. */
static thread_local int idler_held;
static std::atomic<int64_t> idler_released{0}, idler_reused{0};

static void idler_idle(void) {
    if (!idler_held) return;
    idler_held = 0;
    idler_released++;
}

static int idler_hold(tr_ctx *ctx, void *, const void *, size_t) {
    if (idler_held) idler_reused++;
    idler_held = 1;
    return tr_ctx_reply(ctx, "", 0);
}

static int idler_count(tr_ctx *ctx, void *, const void *, size_t) {
    int64_t v[3] = {idler_released.load(), idler_held, idler_reused.load()};
    return tr_ctx_reply(ctx, v, sizeof v);
}

static const tr_method_def idler_methods[] = {{"hold", idler_hold}, {"count", idler_count}};

void add_classes(tr_config *cfg) {
    tr_actor_class idler = TR_ACTOR_CLASS_INIT;
    idler.name = "Idler";
    idler.methods = idler_methods;
    idler.n_methods = 2;
    idler.idle = idler_idle;
    if (tr_config_add_class(cfg, &idler)) abort();
    tr_actor_class disp = TR_ACTOR_CLASS_INIT; /* methods known at run time only */
    disp.name = "Dispatcher";
    disp.methods = dispatcher_methods;
    disp.n_methods = 1;
    disp.dispatch = m_dispatch;
    if (tr_config_add_class(cfg, &disp)) abort();
    tr_actor_class cls = TR_ACTOR_CLASS_INIT;
    cls.name = "Counter";
    cls.ctor = counter_new;
    cls.dtor = counter_free;
    cls.methods = counter_methods;
    cls.n_methods = sizeof counter_methods / sizeof counter_methods[0];
    if (tr_config_add_class(cfg, &cls)) abort();
    tr_actor_class plain = TR_ACTOR_CLASS_INIT; /* no constructor: self is NULL */
    plain.name = "Stateless";
    plain.methods = counter_methods + 3; /* echo, fail, ... */
    plain.n_methods = 3;
    if (tr_config_add_class(cfg, &plain)) abort();
    tr_actor_class conc = TR_ACTOR_CLASS_INIT;
    conc.name = "Concurrent";
    conc.ctor = conc_new;
    conc.dtor = conc_free;
    conc.methods = concurrent_methods;
    conc.n_methods = sizeof concurrent_methods / sizeof concurrent_methods[0];
    if (tr_config_add_class(cfg, &conc)) abort();
    add_functions(cfg);
}

} // namespace

/* "http://127.0.0.1:PORT/" from the node's status ("" if none). */
std::string dashboard(tr_runtime *rt) {
    char *json = nullptr;
    if (tr_node_status(rt, &json)) return "";
    std::string s(json);
    tr_free(json);
    size_t at = s.find("\"dashboard\":\"");
    if (at == std::string::npos) return "";
    at += 13;
    return s.substr(at, s.find('"', at) - at);
}

tr_config *test_config() {
    static tr_config *cfg = [] {
        tr_config *c = nullptr;
        if (tr_config_create(&c)) abort();
        add_classes(c);
        if (tr_config_set(c, "object_store_bytes", "67108864")) abort(); /* 64 MiB a node */
        return c;
    }();
    return cfg;
}

tr_config *test_config_with(std::initializer_list<std::pair<const char *, const char *>> kv) {
    tr_config *c = nullptr;
    if (tr_config_create(&c)) abort();
    add_classes(c);
    if (tr_config_set(c, "object_store_bytes", "67108864")) abort();
    for (auto &p : kv)
        if (tr_config_set(c, p.first, p.second)) abort();
    return c;
}

int call_i64(tr_runtime *rt, tr_actor_id a, const char *method, int64_t arg, int64_t *out,
             int timeout_ms) {
    tr_ref ref;
    int rc = tr_call(rt, a, method, &arg, sizeof arg, &ref);
    if (rc) return rc;
    const void *data;
    size_t len;
    rc = tr_get(rt, ref, timeout_ms, &data, &len);
    if (rc == 0 && out) *out = len == 8 ? *(const int64_t *)data : -1;
    tr_ref_release(rt, ref);
    return rc;
}

int call_str(tr_runtime *rt, tr_actor_id a, const char *method, const std::string &arg,
             std::string *out, int timeout_ms) {
    tr_ref ref;
    int rc = tr_call(rt, a, method, arg.data(), arg.size(), &ref);
    if (rc) return rc;
    const void *data = nullptr;
    size_t len = 0;
    rc = tr_get(rt, ref, timeout_ms, &data, &len);
    if (out && data) out->assign((const char *)data, len);
    tr_ref_release(rt, ref);
    return rc;
}

bool session_ended(const std::string &session) {
    DIR *d = opendir(session.c_str());
    if (!d) return true;
    bool only_kept = true;
    while (struct dirent *e = readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != ".." && n != "events.log" && n != "flight") only_kept = false;
    }
    closedir(d);
    return only_kept;
}

bool pid_alive(int pid) {
    if (pid <= 0) return false;
    if (kill(pid, 0) != 0) return false;
    /* A zombie is dead for our purposes. */
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return !(p && p[1] == ' ' && p[2] == 'Z');
}

int64_t status_field(tr_runtime *rt, const char *key) {
    char *json = nullptr;
    if (tr_node_status(rt, &json)) return -1;
    std::string s(json), k = std::string("\"") + key + "\":";
    tr_free(json);
    size_t at = s.find(k);
    return at == std::string::npos ? -1 : atoll(s.c_str() + at + k.size());
}

void expect_nothing_left(tr_runtime *rt, int64_t kv_keys_before) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < until &&
           (status_field(rt, "groups") != 0 || status_field(rt, "kv_keys") != kv_keys_before))
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(status_field(rt, "groups"), 0);
    EXPECT_EQ(status_field(rt, "kv_keys"), kv_keys_before);
}

int64_t status_pid_of(tr_runtime *rt) {
    return status_field(rt, "pid");
}

int run_self(const std::string &env_entry) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = 0;
    char *argv[] = {exe, nullptr};
    std::vector<char *> envp; /* not GoogleTest's: the helper is not a test run */
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "GTEST_", 6) && strncmp(*e, "XML_OUTPUT_FILE=", 16)) envp.push_back(*e);
    envp.push_back((char *)env_entry.c_str());
    envp.push_back(nullptr);
    pid_t child;
    if (posix_spawn(&child, exe, nullptr, nullptr, argv, envp.data()) != 0) return -1;
    int st;
    while (waitpid(child, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return st;
}

int run_call_and_leave(const char *spec) {
    char addr[600], hex[40];
    long long size, ms;
    if (sscanf(spec, "%599[^|]|%39[^|]|%lld|%lld", addr, hex, &size, &ms) != 4) return 2;
    tr_config *cfg = test_config_with({{"address", addr}});
    tr_runtime *rt;
    int rc = tr_init(cfg, &rt);
    tr_config_destroy(cfg);
    if (rc) return 3;
    tr_actor_id a;
    for (int i = 0; i < 16; i++)
        sscanf(hex + 2 * i, "%2hhx", &a.b[i]);
    int64_t args[2] = {size, ms};
    tr_ref r;
    if (tr_call(rt, a, "slow_big", args, sizeof args, &r)) return 4;
    /* make sure the call went out (the worker has it), then leave without the result */
    if (tr_get(rt, r, 0, nullptr, nullptr) != TR_ETIMEDOUT) return 5;
    _exit(0);
}

int run_detach_and_leave(const char *addr) {
    tr_config *cfg = test_config_with({{"address", addr}});
    tr_runtime *rt;
    int rc = tr_init(cfg, &rt);
    tr_config_destroy(cfg);
    if (rc) return 3;
    const char *names[2] = {"stays-detached", "goes-with-me"};
    for (int i = 0; i < 2; i++) {
        tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
        o.name = names[i];
        o.detached = i == 0;
        tr_actor_id a;
        int64_t out = 0;
        if (tr_actor_create(rt, "Counter", &o, "d", 1, &a) || call_i64(rt, a, "add", 7, &out))
            return 4;
    }
    _exit(0); /* no tr_shutdown: the node sees the connection close */
}

int run_retry_by_name(const char *spec) {
    const char *bar = strchr(spec, '|');
    if (!bar) return 2;
    std::string addr(spec, bar - spec);
    tr_config *cfg = test_config_with({{"address", addr.c_str()}});
    tr_runtime *rt;
    int rc = tr_init(cfg, &rt);
    tr_config_destroy(cfg);
    if (rc) return 3;
    tr_actor_id a;
    if (tr_actor_get(rt, "retried", &a)) return 4;
    std::string args(8, '\0');
    int64_t limit = 2, got = -1;
    memcpy(&args[0], &limit, 8);
    args += bar + 1;
    tr_ref r;
    const void *p;
    size_t n;
    if (tr_call(rt, a, "crash_until", args.data(), args.size(), &r)) return 5;
    rc = tr_get(rt, r, 30000, &p, &n);
    if (rc == 0 && n == 8) memcpy(&got, p, 8);
    if (rc || got != 2)
        fprintf(stderr, "crash_until: %s (got %lld)\n", tr_errname(rc), (long long)got);
    tr_ref_release(rt, r);
    tr_shutdown(rt);
    return rc || got != 2 ? 6 : 0;
}

int run_export_and_die(const char *spec) {
    char addr[600], khex[40], shex[40];
    if (sscanf(spec, "%599[^|]|%39[^|]|%39[^|]", addr, khex, shex) != 3) return 2;
    tr_config *cfg = test_config_with({{"address", addr}});
    tr_runtime *rt;
    int rc = tr_init(cfg, &rt);
    tr_config_destroy(cfg);
    if (rc) return 3;
    tr_actor_id keeper, sleeper;
    for (int i = 0; i < 16; i++) {
        sscanf(khex + 2 * i, "%2hhx", &keeper.b[i]);
        sscanf(shex + 2 * i, "%2hhx", &sleeper.b[i]);
    }
    int64_t ms = 4000;
    tr_ref r, k;
    if (tr_call(rt, sleeper, "sleep_ms", &ms, sizeof ms, &r)) return 4;
    /* the keeper borrows our result, not in yet: a promise in the store */
    if (tr_call_contains(rt, keeper, "keep", &r, sizeof r, nullptr, 0, &r, 1, &k)) return 5;
    if (tr_get(rt, k, 10000, nullptr, nullptr)) return 6;
    _exit(0); /* the owner leaves before its result is in */
}

int run_orphan_driver(const char *out_path) {
    tr_runtime *rt;
    if (tr_init(test_config(), &rt)) return 1;
    FILE *f = fopen(out_path, "w");
    if (!f) return 1;
    fprintf(f, "%s\n%lld\n", tr_runtime_address(rt), (long long)status_pid_of(rt));
    for (int i = 0; i < 3; i++) {
        tr_actor_id a;
        int64_t pid = 0;
        if (tr_actor_create(rt, "Counter", nullptr, "o", 1, &a) || call_i64(rt, a, "pid", 0, &pid))
            return 1;
        fprintf(f, "%lld\n", (long long)pid);
    }
    fclose(f);
    raise(SIGKILL); /* die without tr_shutdown: the node must notice and clean up */
    return 1;
}

/* ------------------------------------------------------------------ a driver on a node of a
 * cluster (tests/cluster_test.cc runs it inside a node's namespaces) */

namespace {

int g_cluster_fails = 0;

/* Has actor call deref_sum on ref (passed contained) and `depth` refs inside it: *sum is
 * the last value's checksum; on failure *why says why (the method's message, or ours). */
int deref_sum_on(tr_runtime *rt, tr_actor_id actor, tr_ref ref, int32_t depth, uint64_t *sum,
                 std::string *why) {
    char a[20];
    memcpy(a, &ref, 16);
    memcpy(a + 16, &depth, 4);
    tr_ref c;
    const void *p = nullptr;
    size_t n = 0;
    int rc = tr_call_contains(rt, actor, "deref_sum", a, sizeof a, nullptr, 0, &ref, 1, &c);
    if (!rc) {
        rc = tr_get(rt, c, 30000, &p, &n);
        if (!rc && n == 8) memcpy(sum, p, 8);
        if (rc) *why = std::string(p ? (const char *)p : "", p ? n : 0);
        tr_ref_release(rt, c);
    }
    if (rc) *why += tr_last_error();
    return rc;
}

void cluster_check(bool ok, const char *what, const std::string &detail = "") {
    printf("%s %s%s%s\n", ok ? "OK" : "FAIL", what, detail.empty() ? "" : ": ", detail.c_str());
    fflush(stdout);
    if (!ok) g_cluster_fails++;
}

/* A result of far's (outer, rc: its call's status) whose value is a ref to an object of
 * far's holding `want`: the ref is got here, and through outer on third; then outer goes,
 * and far's store is back to b0 objects. One check, named what. */
void check_ref_inside(tr_runtime *rt, tr_actor_id far, tr_actor_id third, tr_ref outer, int rc,
                      const std::string &want, int64_t b0, const char *what) {
    const void *p = nullptr;
    size_t n = 0;
    tr_ref inner;
    uint64_t got = 0, there = 0;
    int64_t b1 = -1;
    if (!rc) rc = tr_get(rt, outer, 30000, &p, &n);
    if (!rc && n != 16) rc = TR_EPROTO;
    if (!rc) memcpy(&inner, p, 16);
    if (!rc) rc = tr_get(rt, inner, 30000, &p, &n);
    if (!rc) got = checksum(p, n);
    if (!rc) tr_ref_release(rt, inner);
    std::string why = rc ? tr_last_error() : "";
    if (!rc) rc = deref_sum_on(rt, third, outer, 1, &there, &why);
    if (!rc) tr_ref_release(rt, outer);
    uint64_t sum = checksum(want.data(), want.size());
    bool gone = !rc && eventually(5000, [&] {
        return call_i64(rt, far, "store_objects", 0, &b1) == 0 && b1 == b0;
    });
    cluster_check(rc == 0 && got == sum && there == sum && gone, what,
                  why + " b's objects: " + std::to_string(b0) + ", " + std::to_string(b1));
}

/* An actor asking for resource res=1 (e.g. "node:10.213.0.3"), ready. */
int cluster_actor(tr_runtime *rt, const char *res, const char *name, tr_actor_id *out) {
    tr_resource r = {res, 1};
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.resources = &r;
    o.n_resources = 1;
    o.name = name;
    int rc = tr_actor_create(rt, "Counter", &o, "c", 1, out);
    return rc ? rc : tr_actor_wait_ready(rt, *out, 30000);
}

/* Placement groups across the nodes (run_cluster_driver's "pg" and "pgname"). */
tr_pg_id cluster_pg(tr_runtime *rt, int n, double cpus, int strategy, const char *name, int *rc) {
    std::vector<tr_bundle> b((size_t)n);
    for (auto &x : b) {
        x = TR_BUNDLE_INIT;
        x.num_cpus = cpus;
    }
    tr_pg_id pg;
    memset(&pg, 0, sizeof pg);
    *rc = tr_placement_group_create(rt, b.data(), b.size(), strategy, name, &pg);
    return pg;
}

tr_pg_info cluster_pg_info(tr_runtime *rt, tr_pg_id pg) {
    tr_pg_info i = TR_PG_INFO_INIT;
    if (tr_placement_group_info(rt, pg, &i))
        snprintf(i.reason, sizeof i.reason, "info: %s", tr_last_error());
    return i;
}

/* The distinct addresses of a group's info.node ("A" or "A;B;A"). */
std::set<std::string> pg_nodes(const tr_pg_info &i) {
    std::set<std::string> out;
    std::string s = i.node;
    for (size_t at = 0; at <= s.size();) {
        size_t end = s.find(';', at);
        if (end == std::string::npos) end = s.size();
        if (end > at) out.insert(s.substr(at, end - at));
        at = end + 1;
    }
    return out;
}

int cluster_pg_actor(tr_runtime *rt, tr_pg_id pg, int bundle, tr_actor_id *out, double cpus = 1) {
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.num_cpus = cpus;
    o.placement_group = pg;
    o.bundle_index = bundle;
    int rc = tr_actor_create(rt, "Counter", &o, "c", 1, out);
    return rc ? rc : tr_actor_wait_ready(rt, *out, 30000);
}

std::string actor_node(tr_runtime *rt, tr_actor_id a) {
    tr_actor_details d = TR_ACTOR_DETAILS_INIT;
    return tr_actor_info(rt, a, &d) ? std::string("?") + tr_last_error() : std::string(d.node);
}

/* Writes MARKER.<step> and waits (up to 60 s) for the test's MARKER.go<step>. */
void pg_step(const char *marker, int step) {
    std::string m = std::string(marker) + "." + std::to_string(step);
    std::string go = std::string(marker) + ".go" + std::to_string(step);
    if (FILE *f = fopen(m.c_str(), "w")) fclose(f);
    eventually(60000, [&] { return access(go.c_str(), F_OK) == 0; });
}

int run_pg_driver(tr_runtime *rt, const char *scenario, const char *ip, const char *marker) {
    int rc;
    if (strcmp(scenario, "pgname") == 0) { /* another node's driver, by the group's name */
        tr_pg_id pg;
        rc = tr_placement_group_get(rt, "spread2", &pg);
        tr_pg_info i = cluster_pg_info(rt, pg);
        cluster_check(rc == 0 && i.state == TR_PG_CREATED && pg_nodes(i).size() == 2,
                      "a group is found by name from another node",
                      rc ? tr_last_error() : std::string(i.node) + " " + i.reason);
        tr_actor_id a;
        int64_t pid = 0;
        if (!rc) rc = cluster_pg_actor(rt, pg, -1, &a, 0); /* (the bundles' CPUs are taken) */
        if (!rc) rc = call_i64(rt, a, "pid", 0, &pid);
        cluster_check(rc == 0 && pid > 0, "an actor goes into it from there",
                      rc ? tr_last_error() : actor_node(rt, a));
        return g_cluster_fails ? 1 : 0;
    }
    /* STRICT_PACK of 3 CPUs on nodes of 2: never placed, nothing reserved anywhere */
    tr_pg_id pack = cluster_pg(rt, 3, 1, TR_PG_STRICT_PACK, nullptr, &rc);
    int w = rc ? rc : tr_placement_group_wait(rt, pack, 1500);
    tr_pg_info i = cluster_pg_info(rt, pack);
    cluster_check(rc == 0 && w == TR_ETIMEDOUT && i.state == TR_PG_PENDING &&
                      strstr(i.reason, "infeasible") != nullptr,
                  "STRICT_PACK bigger than any node stays pending with the reason",
                  std::string(tr_errname(w)) + ": " + i.reason);
    tr_actor_id x;
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.placement_group = pack;
    o.bundle_index = 0;
    int r2 = tr_actor_create(rt, "Counter", &o, "c", 1, &x);
    cluster_check(r2 == TR_ESTATE, "an actor into a pending group is refused",
                  std::string(tr_errname(r2)) + ": " + tr_last_error());
    pg_step(marker, 1); /* the test checks every node's resources */
    rc = tr_placement_group_remove(rt, pack);
    i = cluster_pg_info(rt, pack);
    cluster_check(rc == 0 && i.state == TR_PG_REMOVED, "a pending group is removed",
                  rc ? tr_last_error() : i.reason);

    /* STRICT_SPREAD: one bundle per node, its actors on different nodes */
    tr_pg_id ss = cluster_pg(rt, 2, 1, TR_PG_STRICT_SPREAD, "spread2", &rc);
    w = rc ? rc : tr_placement_group_wait(rt, ss, 15000);
    i = cluster_pg_info(rt, ss);
    cluster_check(w == 0 && i.state == TR_PG_CREATED && pg_nodes(i).size() == 2,
                  "STRICT_SPREAD places one bundle per node",
                  std::string(tr_errname(w)) + ": " + i.node + " " + i.reason);
    tr_actor_id a0, a1;
    int64_t p0 = 0, p1 = 0;
    rc = cluster_pg_actor(rt, ss, 0, &a0);
    if (!rc) rc = cluster_pg_actor(rt, ss, 1, &a1);
    if (!rc) rc = call_i64(rt, a0, "pid", 0, &p0);
    if (!rc) rc = call_i64(rt, a1, "pid", 0, &p1);
    std::string n0 = rc ? "" : actor_node(rt, a0), n1 = rc ? "" : actor_node(rt, a1);
    cluster_check(rc == 0 && p0 > 0 && p1 > 0 && n0 != n1,
                  "actors in bundles 0 and 1 run on different nodes",
                  rc ? tr_last_error() : n0 + " and " + n1);
    tr_actor_id bad;
    o.placement_group = ss;
    o.bundle_index = 2;
    rc = tr_actor_create(rt, "Counter", &o, "c", 1, &bad);
    cluster_check(rc == TR_EINVAL, "a bundle index out of range",
                  std::string(tr_errname(rc)) + ": " + tr_last_error());
    tr_pg_id four = cluster_pg(rt, 4, 0.5, TR_PG_STRICT_SPREAD, nullptr, &rc);
    w = rc ? rc : tr_placement_group_wait(rt, four, 1500);
    i = cluster_pg_info(rt, four);
    cluster_check(w == TR_ETIMEDOUT && strstr(i.reason, "infeasible") != nullptr,
                  "STRICT_SPREAD of more bundles than nodes stays pending",
                  std::string(tr_errname(w)) + ": " + i.reason);
    tr_placement_group_remove(rt, four);
    tr_pg_id dup;
    rc = tr_placement_group_create(rt, nullptr, 0, TR_PG_PACK, nullptr, &dup);
    cluster_check(rc == TR_EINVAL, "bad input is refused by the node", tr_errname(rc));
    cluster_pg(rt, 1, 1, TR_PG_PACK, "spread2", &rc);
    cluster_check(rc == TR_EEXIST, "a name is the cluster's", tr_errname(rc));
    pg_step(marker, 2); /* the test checks the resources, and finds the group by name */

    /* removed: its actors die and both nodes get their CPUs back */
    rc = tr_placement_group_remove(rt, ss);
    int64_t v;
    int d0 = call_i64(rt, a0, "pid", 0, &v, 15000), d1 = call_i64(rt, a1, "pid", 0, &v, 15000);
    cluster_check(rc == 0 && d0 == TR_EACTOR_DIED && d1 == TR_EACTOR_DIED,
                  "remove kills the group's actors on every node",
                  std::string(tr_errname(d0)) + " " + tr_errname(d1));
    pg_step(marker, 3);

    /* PACK: 3 CPUs over nodes of 2 take two nodes; 2 CPUs one */
    tr_pg_id p3 = cluster_pg(rt, 3, 1, TR_PG_PACK, nullptr, &rc);
    w = rc ? rc : tr_placement_group_wait(rt, p3, 15000);
    i = cluster_pg_info(rt, p3);
    cluster_check(w == 0 && pg_nodes(i).size() == 2, "PACK of 3 CPUs takes two nodes",
                  std::string(tr_errname(w)) + ": " + i.node + " " + i.reason);
    tr_placement_group_remove(rt, p3);
    tr_pg_id p2 = cluster_pg(rt, 2, 1, TR_PG_PACK, nullptr, &rc);
    w = rc ? rc : tr_placement_group_wait(rt, p2, 15000);
    i = cluster_pg_info(rt, p2);
    cluster_check(w == 0 && pg_nodes(i).size() == 1, "PACK of 2 CPUs takes one node",
                  std::string(tr_errname(w)) + ": " + i.node + " " + i.reason);
    tr_actor_id any;
    rc = cluster_pg_actor(rt, p2, -1, &any);
    std::string na = rc ? "" : actor_node(rt, any);
    cluster_check(rc == 0 && (na == i.node || (na[0] == '/' && strstr(i.node, "10.213.0.2"))),
                  "an actor in any bundle runs on the group's node",
                  rc ? tr_last_error() : na + " vs " + i.node);
    tr_pg_id sp = cluster_pg(rt, 2, 1, TR_PG_SPREAD, nullptr, &rc);
    w = rc ? rc : tr_placement_group_wait(rt, sp, 15000);
    i = cluster_pg_info(rt, sp);
    cluster_check(w == 0 && pg_nodes(i).size() == 2, "SPREAD puts its bundles on two nodes",
                  std::string(tr_errname(w)) + ": " + i.node + " " + i.reason);
    /* a task into a bundle on another node than this driver's: its pool worker runs there */
    int far_bundle = strncmp(i.node, "10.213.0.2:", 11) == 0 ? 1 : 0;
    tr_task_options to = TR_TASK_OPTIONS_INIT;
    to.placement_group = sp;
    to.bundle_index = far_bundle;
    tr_ref tref;
    const void *tp = nullptr;
    size_t tn = 0;
    rc = tr_task_submit(rt, "t_echo", "hi", 2, nullptr, 0, &to, &tref);
    if (!rc) rc = tr_get(rt, tref, 30000, &tp, &tn);
    cluster_check(rc == 0 && std::string((const char *)tp, tn) == "hi",
                  "a task runs in a bundle on another node",
                  rc ? tr_last_error() : std::to_string(far_bundle));
    tr_placement_group_remove(rt, p2);
    tr_placement_group_remove(rt, sp);

    /* a node lost: a group with a bundle there is not placed any more (node b alone has
     * "special": it cannot be placed again) */
    std::vector<tr_bundle> lb(2, TR_BUNDLE_INIT);
    tr_resource special = {"special", 1};
    lb[0].num_cpus = lb[1].num_cpus = 1;
    lb[1].resources = &special;
    lb[1].n_resources = 1;
    tr_pg_id lost;
    rc = tr_placement_group_create(rt, lb.data(), 2, TR_PG_STRICT_SPREAD, nullptr, &lost);
    w = rc ? rc : tr_placement_group_wait(rt, lost, 15000);
    i = cluster_pg_info(rt, lost);
    cluster_check(w == 0 && pg_nodes(i).size() == 2 && strstr(i.node, ip) != nullptr,
                  "a bundle goes to the node with its resource",
                  std::string(tr_errname(w)) + ": " + i.node + " " + i.reason);
    /* an actor in bundle 0 (not on b): it runs on through b's loss (only the lost bundle
     * is placed again, as Ray does) */
    tr_actor_id stays;
    int64_t pid0 = -1, pid1 = -2;
    rc = cluster_pg_actor(rt, lost, 0, &stays);
    if (!rc) rc = call_i64(rt, stays, "pid", 0, &pid0);
    cluster_check(rc == 0 && pid0 > 0, "an actor goes into the bundle not on b",
                  rc ? tr_last_error() : "");
    auto pending_again = [&] {
        return eventually(15000, [&] {
            i = cluster_pg_info(rt, lost);
            return i.state == TR_PG_PENDING && strstr(i.reason, "lost") != nullptr;
        });
    };
    bool there = false;
    auto still_there = [&] {
        pid1 = -2;
        return call_i64(rt, stays, "pid", 0, &pid1) == 0 && pid1 == pid0;
    };
    pg_step(marker, 4); /* the test cuts node b's link */
    bool pending = pending_again();
    cluster_check(pending && i.node[0] == '\0',
                  "a group with a bundle on a lost node is pending again", i.reason);
    there = still_there();
    cluster_check(there, "its other bundle's actor runs on",
                  std::to_string(pid0) + " -> " + std::to_string(pid1));
    pg_step(marker, 5); /* the test checks its other part was kept, and brings b back */
    w = tr_placement_group_wait(rt, lost, 30000);
    i = cluster_pg_info(rt, lost);
    cluster_check(w == 0 && pg_nodes(i).size() == 2 && strstr(i.node, ip) != nullptr,
                  "it is placed again once the node is back",
                  std::string(tr_errname(w)) + ": " + i.node + " " + i.reason);
    there = still_there();
    cluster_check(there, "and its other bundle's actor is the same one",
                  std::to_string(pid0) + " -> " + std::to_string(pid1));
    pg_step(marker, 6); /* the test kills node b */
    pending = pending_again();
    cluster_check(pending && i.node[0] == '\0', "and pending again when the node is killed",
                  i.reason);
    pg_step(marker, 7); /* the test checks its other part was kept */
    return g_cluster_fails ? 1 : 0;
}

} // namespace

int run_cluster_driver(const char *spec) {
    char scenario[32], ip[64], ip2[64], marker[400] = "";
    if (sscanf(spec, "%31[^|]|%63[^|]|%63[^|]|%399[^|]", scenario, ip, ip2, marker) < 3) return 2;
    const char *addr = getenv("TR_NODE");
    if (!addr) return 2;
    tr_config *cfg = test_config_with({{"address", addr}});
    if (getenv("TR_TOKEN")) tr_config_set(cfg, "cluster_token", getenv("TR_TOKEN"));
    tr_runtime *rt;
    int rc = tr_init(cfg, &rt);
    tr_config_destroy(cfg);
    if (rc) {
        printf("FAIL init: %s\n", tr_last_error());
        return 3;
    }
    std::string there = std::string("node:") + ip;
    if (strncmp(scenario, "pg", 2) == 0) { /* placement groups across the nodes */
        rc = run_pg_driver(rt, scenario, ip, marker);
        tr_shutdown(rt);
        return rc;
    }
    if (strcmp(scenario, "remote") == 0) { /* joined by the head's address, no node of ours */
        tr_actor_id a;
        rc = tr_actor_create(rt, "Counter", nullptr, "r", 1, &a);
        if (!rc) rc = tr_actor_wait_ready(rt, a, 30000);
        tr_actor_details d = TR_ACTOR_DETAILS_INIT;
        if (!rc) rc = tr_actor_info(rt, a, &d);
        cluster_check(rc == 0 && d.node[0] != '/', "an actor placed by the head",
                      rc ? tr_last_error() : d.node);
        int64_t v = 0;
        if (!rc) rc = call_i64(rt, a, "add", 5, &v);
        std::string big = pattern(1 << 20, 3);
        tr_ref obj, ref;
        const void *p;
        size_t n;
        uint64_t sum = 0;
        if (!rc) rc = tr_put(rt, big.data(), big.size(), &obj);
        if (!rc) rc = tr_call_refs(rt, a, "sum_args", nullptr, 0, &obj, 1, &ref);
        if (!rc) rc = tr_get(rt, ref, 30000, &p, &n);
        if (!rc && n == 8) memcpy(&sum, p, 8);
        cluster_check(rc == 0 && v == 5 && sum == checksum(big.data(), big.size()),
                      "a driver that joined by the head's address calls and passes objects",
                      rc ? tr_last_error() : "");
        tr_shutdown(rt);
        return g_cluster_fails ? 1 : 0;
    }
    if (strcmp(scenario, "prom") == 0) { /* what Prometheus must see (cluster_test) */
        std::string head = std::string("node:") + ip2;
        tr_actor_id h[2], local;
        int64_t v = 0;
        for (int i = 0; i < 2 && !rc; i++)
            rc = cluster_actor(rt, head.c_str(), nullptr, &h[i]);
        if (!rc) rc = tr_actor_create(rt, "Counter", nullptr, "l", 1, &local);
        for (int i = 0; i < 10 && !rc; i++) /* 10 calls on each actor */
            for (tr_actor_id a : {h[0], h[1], local})
                if (!rc) rc = call_i64(rt, a, "add", 1, &v);
        cluster_check(rc == 0, "30 calls", rc ? tr_last_error() : "");
        tr_actor_id pair[2] = {h[0], local};
        if (!rc) rc = tr_group_declare(rt, pair, 2, nullptr, "gloo", "prom");
        for (int round = 0; round < 4 && !rc; round++) { /* 4 allreduces on each rank */
            tr_ref r[2];
            for (int k = 0; k < 2 && !rc; k++)
                rc = round == 0 ? tr_call(rt, pair[k], "open_keep", "prom", 4, &r[k])
                                : tr_call(rt, pair[k], "allreduce_by_name", "prom", 4, &r[k]);
            for (int k = 0; k < 2 && !rc; k++) {
                rc = tr_get(rt, r[k], 60000, nullptr, nullptr);
                tr_ref_release(rt, r[k]);
            }
        }
        cluster_check(rc == 0, "4 allreduces in a gloo group across the nodes",
                      rc ? tr_last_error() : "");
        std::string big(1 << 20, 'p');
        tr_ref obj;
        if (!rc) rc = tr_put(rt, big.data(), big.size(), &obj);
        cluster_check(rc == 0, "an object of 1 MiB", rc ? tr_last_error() : "");
        /* until the test has read Prometheus (it removes the marker), at most 120 s */
        FILE *f = fopen(marker, "w");
        if (f) fclose(f);
        for (int i = 0; i < 1200 && access(marker, F_OK) == 0; i++)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        tr_shutdown(rt);
        return g_cluster_fails ? 1 : 0;
    }
    if (strcmp(scenario, "detach") == 0) { /* actors on another node, one detached */
        const char *names[2] = {"far-detached", "far-goes"};
        for (int i = 0; i < 2; i++) {
            tr_resource r = {there.c_str(), 1};
            tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
            o.resources = &r;
            o.n_resources = 1;
            o.name = names[i];
            o.detached = i == 0;
            tr_actor_id a;
            int64_t v = 0;
            rc = tr_actor_create(rt, "Counter", &o, "d", 1, &a);
            if (!rc) rc = call_i64(rt, a, "add", 7, &v);
            cluster_check(rc == 0 && v == 7, names[i], rc ? tr_last_error() : "");
        }
        _exit(g_cluster_fails ? 1 : 0); /* (no tr_shutdown: the node sees us go) */
    }
    if (strcmp(scenario, "finddetached") == 0) { /* after "detach"'s driver left */
        tr_actor_id a, b;
        int64_t v = 0;
        rc = tr_actor_get(rt, "far-detached", &a);
        if (!rc) rc = call_i64(rt, a, "add", 1, &v);
        cluster_check(rc == 0 && v == 8, "a detached actor on another node outlives its creator",
                      rc ? tr_last_error() : std::to_string(v).c_str());
        bool gone = false;
        for (int i = 0; i < 500 && !gone; i++) {
            tr_actor_details d = TR_ACTOR_DETAILS_INIT;
            gone = tr_actor_get(rt, "far-goes", &b) != 0 || tr_actor_info(rt, b, &d) != 0 ||
                   d.state == TR_ACTOR_DEAD;
            if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        tr_actor_details d = TR_ACTOR_DETAILS_INIT;
        int irc = gone ? 0 : tr_actor_info(rt, b, &d);
        cluster_check(
            gone, "an ordinary one there went with it",
            gone ? ""
                 : (std::string(tr_errname(irc)) + " " + d.node + " " + std::to_string(d.state))
                       .c_str());
        if (!rc) tr_actor_kill(rt, a, 1);
        tr_shutdown(rt);
        return g_cluster_fails ? 1 : 0;
    }
    if (strcmp(scenario, "headless") == 0) { /* the head is gone */
        tr_actor_id near;
        int64_t v = 0;
        rc = tr_actor_create(rt, "Counter", nullptr, "n", 1, &near);
        if (!rc) rc = call_i64(rt, near, "pid", 0, &v);
        cluster_check(rc == 0, "a local actor works", rc ? tr_last_error() : "");
        auto t0 = std::chrono::steady_clock::now();
        tr_actor_id lost;
        rc = cluster_actor(rt, there.c_str(), nullptr, &lost);
        long long ms = (long long)std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - t0)
                           .count();
        std::string why = tr_last_error();
        cluster_check(rc != 0 && ms < 15000 && why.find("head") != std::string::npos,
                      "placing elsewhere fails in seconds",
                      std::string(tr_errname(rc)) + " after " + std::to_string(ms) + " ms: " + why);
        tr_shutdown(rt);
        return g_cluster_fails ? 1 : 0;
    }
    tr_actor_id far;
    rc = cluster_actor(rt, there.c_str(), "far", &far);
    cluster_check(rc == 0, "placed", rc ? tr_last_error() : "");
    if (rc) return 1;
    tr_actor_details d = TR_ACTOR_DETAILS_INIT;
    rc = tr_actor_info(rt, far, &d);
    cluster_check(rc == 0 && strncmp(d.node, ip, strlen(ip)) == 0 && d.node[strlen(ip)] == ':',
                  "info names the node", rc ? tr_last_error() : d.node);
    int64_t pid = 0;
    rc = call_i64(rt, far, "pid", 0, &pid);
    cluster_check(rc == 0 && pid > 0 && pid == d.pid, "call", rc ? tr_last_error() : "");

    if (strcmp(scenario, "hold") == 0) { /* the test kills far's node meanwhile */
        /* groups over two actors here and one on b, the ones here left in an allreduce
         * that b's never enters: a gloo group (4 bytes), a two-level one (400 KB: shm here,
         * gloo between the nodes' leaders) */
        tr_actor_id gh[4], gb[2];
        tr_ref k[6], stuck[4];
        int64_t sum[6] = {0, 0, 0, 0, 0, 0};
        int grc = 0;
        for (int i = 0; i < 4 && !grc; i++)
            grc = tr_actor_create(rt, "Counter", nullptr, "g", 1, &gh[i]);
        for (int i = 0; i < 2 && !grc; i++)
            grc = cluster_actor(rt, there.c_str(), nullptr, &gb[i]);
        const char *gname[2] = {"held", "held-hier"};
        tr_actor_id members[2][3] = {{gh[0], gh[1], gb[0]}, {gh[2], gh[3], gb[1]}};
        for (int j = 0; j < 2 && !grc; j++)
            grc = tr_group_declare(rt, members[j], 3, nullptr, j ? "hier" : "gloo", gname[j]);
        for (int i = 0; i < 6 && !grc; i++)
            grc = tr_call(rt, members[i / 3][i % 3], "open_keep", gname[i / 3],
                          strlen(gname[i / 3]), &k[i]);
        for (int i = 0; i < 6 && !grc; i++) {
            const void *p;
            size_t n;
            grc = tr_get(rt, k[i], 30000, &p, &n);
            if (!grc && n == 8) memcpy(&sum[i], p, 8);
        }
        bool sums_ok = true;
        for (int i = 0; i < 6; i++)
            sums_ok = sums_ok && sum[i] == 6;
        cluster_check(grc == 0 && sums_ok, "a group across the nodes", grc ? tr_last_error() : "");
        /* (checks off on the two-level group: its ranks go straight to the two levels) */
        const char *stuck_args[2] = {"held|1", "held-hier|100000|0"};
        for (int i = 0; i < 4 && !grc; i++)
            grc = tr_call(rt, members[i / 2][i % 2], "allreduce_by_name", stuck_args[i / 2],
                          strlen(stuck_args[i / 2]), &stuck[i]);
        /* an object far makes (never pulled here: its bytes only) */
        tr_ref made, obj;
        uint64_t put_args[2] = {1000, 5};
        const void *mp;
        size_t mn = 0;
        rc = tr_call(rt, far, "put", put_args, sizeof put_args, &made);
        if (!rc) rc = tr_get(rt, made, 30000, &mp, &mn);
        if (!rc && mn == 16) memcpy(&obj, mp, 16);
        cluster_check(rc == 0 && mn == 16, "an object made there", rc ? tr_last_error() : "");
        tr_ref slow;
        int64_t ms = 60000;
        rc = tr_call(rt, far, "sleep_ms", &ms, sizeof ms, &slow);
        tr_get(rt, slow, 300, nullptr, nullptr); /* it went out */
        FILE *f = fopen(marker, "w");
        if (f) {
            fprintf(f, "READY\n");
            fclose(f);
        }
        auto t0 = std::chrono::steady_clock::now();
        rc = tr_get(rt, slow, 30000, nullptr, nullptr);
        long long took = (long long)std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - t0)
                             .count();
        cluster_check(rc == TR_EACTOR_DIED, "the call in flight dies with its node",
                      std::string(tr_errname(rc)) + " after " + std::to_string(took) +
                          " ms: " + tr_last_error());
        /* the ranks here hear that their peer died: at once when its process went with its
         * node, when the head counts b lost when its link is cut (the test checks which);
         * in the two-level group the leader hears it from gloo, the other rank from the
         * leader leaving its shm group */
        for (int i = 0; i < 4; i++) {
            rc = grc ? grc : tr_get(rt, stuck[i], 30000, nullptr, nullptr);
            std::string why = tr_last_error();
            cluster_check(rc == TR_ETASK && (why.find("EPEER_DIED") != why.npos ||
                                             why.find("ETIMEDOUT") != why.npos),
                          i < 2 ? "an allreduce in flight fails when a rank's node dies"
                                : "a two-level allreduce in flight fails when a rank's node dies",
                          std::string(tr_errname(rc)) + ": " + why);
        }
        int64_t v = 0;
        rc = call_i64(rt, far, "pid", 0, &v, 20000);
        cluster_check(rc == TR_EACTOR_DIED, "a later call fails too", tr_errname(rc));
        /* its objects' owners went with it (Ray's OwnerDiedError), once this node's copy of
         * the head's table says so (a heartbeat: 500 ms) */
        for (int i = 0; i < 100; i++) {
            rc = tr_get(rt, obj, 1000, nullptr, nullptr);
            if (rc == 0) tr_ref_release(rt, obj);
            if (rc == TR_EOWNER_DIED) break;
            usleep(100000);
        }
        cluster_check(rc == TR_EOWNER_DIED, "an object of the lost node: its owner died",
                      std::string(tr_errname(rc)) + ": " + tr_last_error());
        tr_actor_id near;
        rc = tr_actor_create(rt, "Counter", nullptr, "n", 1, &near);
        if (!rc) rc = call_i64(rt, near, "pid", 0, &v);
        cluster_check(rc == 0, "the cluster goes on", rc ? tr_last_error() : "");
        tr_shutdown(rt);
        return g_cluster_fails ? 1 : 0;
    }

    /* 10,000 calls in flight at once, in order */
    const int N = 10000;
    std::vector<tr_ref> refs(N);
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < N && !rc; i++) {
        int64_t s = i + 1;
        rc = tr_call(rt, far, "seq", &s, sizeof s, &refs[(size_t)i]);
    }
    int bad = 0;
    for (int i = 0; i < N && !rc; i++) {
        const void *p;
        size_t n;
        int r = tr_get(rt, refs[(size_t)i], 30000, &p, &n);
        if (r || n != 8 || *(const int64_t *)p != i + 1) bad++;
        tr_ref_release(rt, refs[(size_t)i]);
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cluster_check(rc == 0 && bad == 0, "10000 calls in order",
                  std::to_string(bad) + " bad, " + std::to_string((int)(N / secs)) + " calls/s");
    /* values of every size, byte for byte */
    for (uint64_t size : {(uint64_t)1, (uint64_t)1000, (uint64_t)(100 << 10) + 1, (uint64_t)1 << 20,
                          (uint64_t)16 << 20}) {
        std::string v = pattern(size, size), out;
        rc = call_str(rt, far, "echo", v, &out, 30000);
        cluster_check(rc == 0 && out == v, ("echo " + std::to_string(size)).c_str(),
                      rc ? tr_last_error() : "");
    }
    /* objects put here, read there (pulled on first use): as call arguments, and by a
     * tr_get in the method */
    for (uint64_t size : {(uint64_t)1, ((uint64_t)1 << 20) + 3, (uint64_t)64 << 20,
                          kSanitized ? 0 : (uint64_t)256 << 20}) { /* (0: none) */
        if (size == 0) continue;
        std::string v = pattern(size, size + 1);
        uint64_t want = checksum(v.data(), v.size()), got = 0;
        tr_ref obj, ref;
        rc = tr_put(rt, v.data(), v.size(), &obj);
        v.clear();
        v.shrink_to_fit();
        if (!rc) rc = tr_call_refs(rt, far, "sum_args", nullptr, 0, &obj, 1, &ref);
        const void *p;
        size_t n;
        if (!rc) rc = tr_get(rt, ref, 60000, &p, &n);
        if (!rc && n == 8) memcpy(&got, p, 8);
        std::string where;
        if (!rc && got != want) { /* where it went wrong, for the log */
            uint64_t a2[2] = {size, size + 1};
            int64_t at = -3;
            if (tr_call_refs(rt, far, "first_diff", a2, sizeof a2, &obj, 1, &ref) == 0 &&
                tr_get(rt, ref, 60000, &p, &n) == 0 && n == 8)
                memcpy(&at, p, 8);
            where = "a checksum differs; first wrong byte at " + std::to_string(at);
            const void *mine;
            size_t mn;
            if (tr_get(rt, obj, 1000, &mine, &mn) == 0)
                where += checksum(mine, mn) == want ? " (the copy here is right)"
                                                    : " (the copy here is wrong too)";
        }
        cluster_check(rc == 0 && got == want, ("object argument " + std::to_string(size)).c_str(),
                      rc ? tr_last_error() : where);
        if (size == ((uint64_t)1 << 20) + 3) {
            got = 0;
            rc = tr_call(rt, far, "sum", &obj, sizeof obj, &ref);
            if (!rc) rc = tr_get(rt, ref, 60000, &p, &n);
            if (!rc && n == 8) memcpy(&got, p, 8);
            cluster_check(rc == 0 && got == want, "tr_get there of an object here",
                          rc ? tr_last_error() : "");
        }
        tr_ref_release(rt, obj);
    }
    /* an object put there, read here */
    tr_ref remote_obj;
    {
        uint64_t args[2] = {(uint64_t)32 << 20, 7};
        tr_ref ref;
        const void *p;
        size_t n;
        rc = tr_call(rt, far, "put", args, sizeof args, &ref);
        if (!rc) rc = tr_get(rt, ref, 30000, &p, &n);
        if (!rc && n == 16) memcpy(&remote_obj, p, 16);
        auto t1 = std::chrono::steady_clock::now();
        if (!rc) rc = tr_get(rt, remote_obj, 60000, &p, &n);
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
        std::string want = pattern(args[0], args[1]);
        cluster_check(rc == 0 && n == want.size() && memcmp(p, want.data(), n) == 0,
                      "tr_get here of an object there",
                      rc ? tr_last_error()
                         : std::to_string((int)(args[0] / s / 1e6)) + " MB/s pulled");
        if (!rc) tr_ref_release(rt, remote_obj);
        /* and one more, which is never pulled before its maker dies */
        if (!rc) rc = tr_call(rt, far, "put", args, sizeof args, &ref);
        if (!rc) rc = tr_get(rt, ref, 30000, &p, &n);
        if (!rc && n == 16) memcpy(&remote_obj, p, 16);
    }
    std::string msg;
    rc = call_str(rt, far, "fail", "x", &msg);
    cluster_check(rc == TR_ETASK && msg.find("failing on purpose") != msg.npos, "a method's error",
                  msg);
    rc = call_str(rt, far, "nope", "", &msg);
    cluster_check(rc == TR_ENOMETHOD, "an unknown method", tr_errname(rc));
    tr_actor_id none;
    tr_resource r = {"nowhere", 1};
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.resources = &r;
    o.n_resources = 1;
    rc = tr_actor_create(rt, "Counter", &o, "c", 1, &none);
    cluster_check(rc == TR_ERESOURCES, "fits nowhere", tr_last_error());
    tr_actor_id byname;
    rc = tr_actor_get(rt, "far", &byname);
    cluster_check(rc == 0 && memcmp(&byname, &far, sizeof far) == 0, "by name",
                  rc ? tr_last_error() : "");
    /* an actor on one node calling an actor on a third */
    tr_actor_id third;
    std::string other = std::string("node:") + ip2;
    rc = cluster_actor(rt, other.c_str(), nullptr, &third);
    int64_t v = 0;
    if (!rc) {
        tr_ref ref;
        rc = tr_call(rt, far, "call_other", &third, sizeof third, &ref);
        const void *p;
        size_t n;
        if (!rc) rc = tr_get(rt, ref, 30000, &p, &n);
        if (!rc && n == 8) memcpy(&v, p, 8);
    }
    cluster_check(rc == 0 && v == 5, "actor to actor across nodes", rc ? tr_last_error() : "");
    /* a call's result made here, still running, passed nested to the actor there: it pulls
     * the result from this node, which holds the pull until the result is in */
    {
        tr_actor_id sleeper;
        tr_ref slow;
        int64_t ms = 400;
        uint64_t got = 0;
        std::string why;
        rc = tr_actor_create(rt, "Counter", nullptr, "s", 1, &sleeper);
        if (!rc) rc = tr_call(rt, sleeper, "sleep_ms", &ms, sizeof ms, &slow);
        if (!rc) rc = deref_sum_on(rt, far, slow, 0, &got, &why);
        cluster_check(rc == 0 && got == checksum(&ms, 8),
                      "a result still running here, got there through its promise", why);
    }
    /* an object made on b, passed from here (which never had it) to an actor on the head */
    {
        uint64_t args[2] = {(uint64_t)1 << 20, 5}, got = 0;
        tr_ref ref, bobj;
        const void *p;
        size_t n;
        rc = tr_call(rt, far, "put", args, sizeof args, &ref);
        if (!rc) rc = tr_get(rt, ref, 30000, &p, &n);
        if (!rc && n == 16) memcpy(&bobj, p, 16);
        if (!rc) rc = tr_call_refs(rt, third, "sum_args", nullptr, 0, &bobj, 1, &ref);
        if (!rc) rc = tr_get(rt, ref, 30000, &p, &n);
        if (!rc && n == 8) memcpy(&got, p, 8);
        std::string want = pattern(args[0], args[1]);
        cluster_check(rc == 0 && got == checksum(want.data(), want.size()),
                      "an object from one node, through here, to a third",
                      rc ? tr_last_error() : "");
    }
    /* an object made here, borrowed by the actor on b (a remote hold, docs/OWNERSHIP.md):
     * it outlives our own release, is read there after it, and leaves our store once b
     * lets go */
    {
        auto here_objects = [&] {
            tr_store_stats st = TR_STORE_STATS_INIT;
            return tr_object_stats(rt, &st) == 0 ? (long long)st.n_objects : -1ll;
        };
        long long before = here_objects();
        std::string big = pattern(1 << 20, 11);
        tr_ref obj, ref;
        const void *p;
        size_t n;
        uint64_t got = 0;
        rc = tr_put(rt, big.data(), big.size(), &obj);
        if (!rc) rc = tr_call_contains(rt, far, "keep", &obj, 16, nullptr, 0, &obj, 1, &ref);
        if (!rc) rc = tr_get(rt, ref, 30000, &p, &n);
        if (!rc) tr_ref_release(rt, ref);
        if (!rc) tr_ref_release(rt, obj);
        long long kept = here_objects();
        if (!rc) rc = tr_call(rt, far, "kept_sum", nullptr, 0, &ref);
        if (!rc) rc = tr_get(rt, ref, 30000, &p, &n);
        if (!rc && n == 8) memcpy(&got, p, 8);
        if (!rc) tr_ref_release(rt, ref);
        std::string why = rc ? tr_last_error() : "";
        int64_t z;
        if (!rc) rc = call_i64(rt, far, "drop_kept", 0, &z);
        bool gone = !rc && eventually(5000, [&] { return here_objects() == before; });
        cluster_check(rc == 0 && kept == before + 1 && got == checksum(big.data(), big.size()) &&
                          gone,
                      "an object borrowed on another node outlives our release, and goes "
                      "after theirs",
                      why + " objects here: " + std::to_string(before) + ", " +
                          std::to_string(kept) + ", " + std::to_string(here_objects()));
        /* a borrower killed: its node's link to ours ends, and what it held here goes */
        tr_actor_id keeper;
        rc = cluster_actor(rt, there.c_str(), nullptr, &keeper);
        if (!rc) rc = tr_put(rt, big.data(), big.size(), &obj);
        if (!rc) rc = tr_call_contains(rt, keeper, "keep", &obj, 16, nullptr, 0, &obj, 1, &ref);
        if (!rc) rc = tr_get(rt, ref, 30000, &p, &n);
        if (!rc) tr_ref_release(rt, ref);
        if (!rc) tr_ref_release(rt, obj);
        kept = here_objects();
        if (!rc) rc = tr_actor_kill(rt, keeper, 1);
        gone = !rc && eventually(10000, [&] { return here_objects() == before; });
        cluster_check(rc == 0 && kept == before + 1 && gone,
                      "what a borrower on another node held goes when it dies",
                      std::string(rc ? tr_last_error() : "") +
                          " objects here: " + std::to_string(before) + ", " + std::to_string(kept) +
                          ", " + std::to_string(here_objects()));
    }
    /* an actor's handle (tr_actor_handle) borrowed by the actor on b: the actor here lives
     * on after our own handle goes, and ends once b lets its copy go */
    {
        auto state = [&](tr_actor_id a) {
            tr_actor_details d;
            tr_actor_details_init(&d);
            return tr_actor_info(rt, a, &d) == 0 ? (int)d.state : -1;
        };
        tr_actor_id handled;
        tr_ref h, ref;
        int64_t got = 0, z;
        rc = tr_actor_create(rt, "Counter", nullptr, "h", 1, &handled);
        if (!rc) rc = tr_actor_handle(rt, handled, &h);
        if (!rc) rc = tr_call_contains(rt, far, "keep", &h, 16, nullptr, 0, &h, 1, &ref);
        if (!rc) rc = tr_get(rt, ref, 30000, nullptr, nullptr);
        if (!rc) tr_ref_release(rt, ref);
        if (!rc) rc = tr_ref_release(rt, h);
        /* (the creator's watcher looks every 50 ms) */
        if (!rc) std::this_thread::sleep_for(std::chrono::milliseconds(400));
        int held = rc ? -1 : state(handled);
        if (!rc) rc = call_i64(rt, handled, "add", 7, &got);
        std::string why = rc ? tr_last_error() : "";
        if (!rc) rc = call_i64(rt, far, "drop_kept", 0, &z);
        bool ended = !rc && eventually(10000, [&] { return state(handled) == TR_ACTOR_DEAD; });
        int after = ended ? call_i64(rt, handled, "get", 0, &z) : 0;
        cluster_check(
            rc == 0 && held == TR_ACTOR_ALIVE && got == 7 && ended && after == TR_EACTOR_DIED,
            "an actor whose handle is borrowed on another node lives on after ours "
            "goes, and ends when theirs does",
            why + " state while held " + std::to_string(held) + ", then " +
                std::to_string(state(handled)) + ", a call after: " + std::to_string(after));
    }
    /* a task placed on b by its resources (its pool worker is an actor there), an object
     * made here as its argument, its result back here */
    {
        tr_resource nr = {there.c_str(), 0.1};
        tr_task_options to = TR_TASK_OPTIONS_INIT;
        to.resources = &nr;
        to.n_resources = 1;
        std::string big = pattern(1 << 20, 13);
        tr_ref obj, tref;
        const void *p = nullptr;
        size_t n = 0;
        uint64_t got = 0;
        rc = tr_put(rt, big.data(), big.size(), &obj);
        if (!rc) rc = tr_task_submit(rt, "t_sum_refs", nullptr, 0, &obj, 1, &to, &tref);
        if (!rc) rc = tr_get(rt, tref, 30000, &p, &n);
        if (!rc && n == 8) memcpy(&got, p, 8);
        std::string why =
            rc ? std::string(p ? (const char *)p : "", p ? n : 0) + tr_last_error() : "";
        if (!rc) tr_ref_release(rt, tref);
        tr_ref_release(rt, obj);
        cluster_check(rc == 0 && got == checksum(big.data(), big.size()),
                      "a task placed on another node by its resources, with an object from here",
                      why);
    }
    /* a method on b returns a ref inside its result (Ray's `return ray.put(x)`): b keeps
     * the object while our result holds it; it is got here, and nested on to the head's
     * actor, which gets it from b; our release empties b's store of it */
    {
        int64_t b0 = -1;
        rc = call_i64(rt, far, "store_objects", 0, &b0);
        uint64_t args[2] = {(uint64_t)1 << 20, 12};
        tr_ref res;
        if (!rc) rc = tr_call(rt, far, "put_ref", args, sizeof args, &res);
        std::string want = pattern(args[0], args[1]);
        check_ref_inside(rt, far, third, res, rc, want, b0,
                         "a result with a ref in it, from another node, got here and on a third");
    }
    /* an actor placed on b keeps its max_concurrency and concurrency groups: two calls
     * that wait for each other meet in its default group of 2, and in its group "io" */
    {
        tr_resource r = {there.c_str(), 1};
        const char *io_methods[] = {"hold"};
        tr_concurrency_group g = {"io", 2, io_methods, 1};
        tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
        o.resources = &r;
        o.n_resources = 1;
        o.max_concurrency = 2;
        o.concurrency_groups = &g;
        o.n_concurrency_groups = 1;
        o.binding_data = "{\"binding\":\"data\"}";
        tr_actor_id conc;
        int crc = tr_actor_create(rt, "Concurrent", &o, nullptr, 0, &conc);
        if (!crc) crc = tr_actor_wait_ready(rt, conc, 30000);
        char *bdata = nullptr;
        if (!crc && !(crc = tr_actor_binding_data(rt, conc, &bdata)) &&
            (!bdata || strcmp(bdata, o.binding_data) != 0))
            crc = tr__err(TR_EINTERNAL, "binding data '%s'", bdata ? bdata : "(none)");
        tr_free(bdata);
        int met = 0;
        for (int pair = 0; pair < 2 && !crc; pair++) { /* (meet counts every arrival) */
            int64_t args[2] = {2 + 2 * pair, 10000};
            tr_ref m[2];
            for (int i = 0; i < 2 && !crc; i++)
                crc = tr_call(rt, conc, pair ? "meet@io" : "meet", args, sizeof args, &m[i]);
            for (int i = 0; i < 2 && !crc; i++) {
                met += tr_get(rt, m[i], 30000, nullptr, nullptr) == 0;
                tr_ref_release(rt, m[i]);
            }
        }
        cluster_check(crc == 0 && met == 4,
                      "an actor on another node keeps its max_concurrency, groups and "
                      "binding data",
                      crc ? tr_last_error() : std::to_string(met) + " of 4 met");
        if (!crc) tr_actor_kill(rt, conc, 1);
    }
    /* an actor placed on b with max_task_retries: its worker dies with our call in flight
     * (over the link), b restarts it, and the call goes again to the new worker there */
    {
        tr_resource r = {there.c_str(), 1};
        tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
        o.resources = &r;
        o.n_resources = 1;
        o.max_restarts = 1;
        o.max_task_retries = 1;
        tr_actor_id rt_a;
        int64_t limit = 2, runs = -1;
        std::string args(8, '\0');
        memcpy(&args[0], &limit, 8);
        std::random_device rd; /* (b's /tmp outlives us: a name never used before) */
        uint64_t salt = (uint64_t)rd() << 32 | rd();
        args += "/tmp/troupe-cluster-retry-" + std::to_string(salt);
        tr_ref res;
        const void *p;
        size_t n;
        int crc = tr_actor_create(rt, "Counter", &o, "r", 1, &rt_a);
        if (!crc) crc = tr_call(rt, rt_a, "crash_until", args.data(), args.size(), &res);
        if (!crc) {
            crc = tr_get(rt, res, 30000, &p, &n);
            if (!crc && n == 8) memcpy(&runs, p, 8);
            tr_ref_release(rt, res);
        }
        cluster_check(crc == 0 && runs == 2,
                      "a call in flight to an actor on another node that dies goes again "
                      "(max_task_retries)",
                      crc ? tr_last_error() : std::to_string(runs) + " runs");
        if (!crc) tr_actor_kill(rt, rt_a, 1);
    }
    /* tr_cancel of a call running on b (the cancel follows it over the link, b's relay
     * writes it on b's board): the call there sees it and ends long before its 20 s */
    {
        tr_resource r = {there.c_str(), 1};
        tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
        o.resources = &r;
        o.n_resources = 1;
        tr_actor_id conc;
        int64_t ms = 20000, seen = -1;
        tr_ref running, after;
        bool called = false;
        auto t0 = std::chrono::steady_clock::now();
        int crc = tr_actor_create(rt, "Concurrent", &o, nullptr, 0, &conc);
        if (!crc) crc = tr_actor_wait_ready(rt, conc, 30000);
        if (!crc) called = !(crc = tr_call(rt, conc, "until_canceled", &ms, sizeof ms, &running));
        if (!crc && tr_get(rt, running, 300, nullptr, nullptr) != TR_ETIMEDOUT)
            crc = tr__err(TR_EINTERNAL, "the call ended before its cancel");
        if (!crc) crc = tr_cancel(rt, running, 0);
        if (!crc && tr_get(rt, running, 5000, nullptr, nullptr) != TR_ECANCELED)
            crc = tr__err(TR_EINTERNAL, "its ref did not fail with TR_ECANCELED");
        if (!crc) crc = tr_call(rt, conc, "canceled", nullptr, 0, &after);
        if (!crc) {
            const void *p;
            size_t n;
            crc = tr_get(rt, after, 15000, &p, &n);
            if (!crc && n == 8) memcpy(&seen, p, 8);
            tr_ref_release(rt, after);
        }
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        cluster_check(crc == 0 && seen == 1 && s < 15,
                      "a call canceled while it runs on another node sees its cancel there",
                      crc ? tr_last_error()
                          : "seen " + std::to_string(seen) + " after " + std::to_string(s) + " s");
        if (called) tr_ref_release(rt, running);
        if (!crc) tr_actor_kill(rt, conc, 1);
    }
    /* a stream from b (tr_ctx_yield): its items as b yields them - inline, one of 330 KB,
     * one with b's ref in it (kept there for us) - in order; b's store is back to its
     * count once they are gone */
    {
        int64_t b0 = -1, b1 = -1;
        rc = call_i64(rt, far, "store_objects", 0, &b0);
        int32_t sk[2] = {5, 0};
        tr_ref st, it;
        if (!rc)
            rc = tr_call_multi(rt, far, "stream", sk, sizeof sk, nullptr, 0, TR_STREAMING, &st);
        int got = 0, bad = -1, end = 0;
        std::string why;
        while (!rc && (end = tr_stream_next(rt, st, 30000, &it)) == 0) {
            const void *p = nullptr;
            size_t n = 0;
            int g = tr_get(rt, it, 30000, &p, &n);
            std::string v = g ? "" : std::string((const char *)p, n);
            if (!g && got == 3 && n == 16) {
                tr_ref inner;
                memcpy(&inner, p, 16);
                g = tr_get(rt, inner, 30000, &p, &n);
                v = g ? "" : std::string((const char *)p, n);
                if (!g) tr_ref_release(rt, inner);
            }
            if (g) why = tr_last_error();
            if ((g || v != stream_item(got)) && bad < 0) bad = got;
            tr_ref_release(rt, it);
            got++;
        }
        if (!rc && end != 1) why = tr_last_error();
        const void *p = nullptr;
        size_t n = 0;
        int frc = rc ? rc : tr_get(rt, st, 30000, &p, &n);
        std::string fin = frc ? "" : std::string((const char *)p, n);
        if (!rc) tr_ref_release(rt, st);
        bool back = eventually(
            5000, [&] { return call_i64(rt, far, "store_objects", 0, &b1) == 0 && b1 == b0; });
        cluster_check(rc == 0 && end == 1 && got == 5 && bad < 0 && fin == "done-5" && back,
                      "a stream from another node: its items in order, then its end",
                      "rc " + std::to_string(rc) + ", " + std::to_string(got) + " items, bad " +
                          std::to_string(bad) + ", end " + std::to_string(end) + " " + fin +
                          ", objects " + std::to_string(b0) + " -> " + std::to_string(b1) +
                          (why.empty() ? "" : ": " + why));
    }
    /* several results from b, each with one of b's refs in it (tr_ctx_reply_multi_contains):
     * the second is read after the first was dropped, here and on a third node; b's store
     * is back to its count once both are gone */
    {
        int64_t b0 = -1;
        rc = call_i64(rt, far, "store_objects", 0, &b0);
        int32_t k = 2;
        tr_ref r[2];
        if (!rc) rc = tr_call_multi(rt, far, "put_parts", &k, 4, nullptr, 0, 2, r);
        if (!rc) rc = tr_get(rt, r[0], 30000, nullptr, nullptr);
        if (!rc) tr_ref_release(rt, r[0]);
        std::string want;
        for (int j = 0; j < 1000; j++)
            want += "obj-1";
        check_ref_inside(rt, far, third, r[1], rc, want, b0,
                         "several results with refs in them, from another node");
    }
    /* one of b's refs inside an object made here (tr_put_refs): this process holds it at b
     * while the object lives (b's own container of it is gone); the head's actor gets it
     * through the object, and as a top-level argument; b lets go once our object is gone */
    {
        int64_t b0 = -1, b_mid = -1, b1 = -1;
        rc = call_i64(rt, far, "store_objects", 0, &b0);
        uint64_t args[2] = {(uint64_t)1 << 20, 14}, there = 0, top = 0;
        tr_ref res, inner, cont, c;
        const void *p = nullptr;
        size_t n = 0;
        if (!rc) rc = tr_call(rt, far, "put_ref", args, sizeof args, &res);
        if (!rc) rc = tr_get(rt, res, 30000, &p, &n);
        if (!rc && n != 16) rc = TR_EPROTO;
        if (!rc) memcpy(&inner, p, 16);
        if (!rc) rc = tr_put_refs(rt, &inner, 16, &inner, 1, &cont);
        if (!rc) tr_ref_release(rt, res);
        if (!rc) rc = call_i64(rt, far, "store_objects", 0, &b_mid);
        std::string why0;
        if (!rc) rc = deref_sum_on(rt, third, cont, 1, &there, &why0);
        if (!rc) rc = tr_call_refs(rt, third, "sum_args", nullptr, 0, &inner, 1, &c);
        if (!rc) rc = tr_get(rt, c, 30000, &p, &n);
        if (!rc && n == 8) memcpy(&top, p, 8);
        if (!rc) tr_ref_release(rt, c);
        /* the head's actor returns it inside its result: its process holds it at b then,
         * after our object is gone */
        tr_ref passed;
        if (!rc)
            rc =
                tr_call_contains(rt, third, "pass_ref", &inner, 16, nullptr, 0, &inner, 1, &passed);
        if (!rc) rc = tr_get(rt, passed, 30000, &p, &n);
        bool same = !rc && n == 16 && memcmp(p, &inner, 16) == 0;
        if (!rc) tr_ref_release(rt, cont);
        if (!rc) std::this_thread::sleep_for(std::chrono::milliseconds(1500)); /* (our sweep) */
        uint64_t late = 0;
        if (!rc) rc = tr_get(rt, inner, 30000, &p, &n);
        if (!rc) late = checksum(p, n);
        if (!rc) tr_ref_release(rt, inner);
        std::string why =
            rc ? why0 + std::string(p ? (const char *)p : "", p ? n : 0) + tr_last_error() : "";
        if (!rc) tr_ref_release(rt, passed);
        std::string want = pattern(args[0], args[1]);
        uint64_t sum = checksum(want.data(), want.size());
        bool gone = !rc && eventually(10000, [&] {
            return call_i64(rt, far, "store_objects", 0, &b1) == 0 && b1 == b0;
        });
        why += " same " + std::to_string(same) + " late " + std::to_string(late == sum) +
               " there " + std::to_string(there == sum) + " top " + std::to_string(top == sum);
        cluster_check(rc == 0 && b_mid == b0 + 1 && there == sum && top == sum && same &&
                          late == sum && gone,
                      "another node's ref inside an object made here stays while the object does",
                      why + " b's objects: " + std::to_string(b0) + ", " + std::to_string(b_mid) +
                          ", " + std::to_string(b1));
    }
    /* groups across nodes: shm refused at once, with the reason; gloo over three nodes
     * (here, b, the head) through every op, dtype and reduction, each checked by the
     * ranks; auto picks gloo there */
    {
        tr_actor_id here, trio[3];
        rc = tr_actor_create(rt, "Counter", nullptr, "h", 1, &here);
        trio[0] = far;
        trio[1] = here;
        trio[2] = third;
        int g1 = rc ? rc : tr_group_declare(rt, trio, 3, nullptr, "shm", "spans");
        std::string why = tr_last_error();
        cluster_check(g1 == TR_EINVAL && why.find("span nodes") != why.npos,
                      "shm across nodes is refused", why);
        const int ranks[3] = {2, 0, 1};
        if (!rc) rc = tr_group_declare(rt, trio, 3, ranks, "gloo", "span3");
        tr_ref done[3];
        int made = 0;
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 3 && !rc; i++, made++) {
            CollArgs a = {};
            snprintf(a.name, sizeof a.name, "span3");
            a.world = 3;
            a.timeout_ms = 120000;
            a.mode = 7;
            rc = tr_call(rt, trio[i], "coll", &a, sizeof a, &done[i]);
        }
        int64_t checked[3] = {0, 0, 0};
        std::string errs;
        for (int i = 0; i < made; i++) {
            const void *p;
            size_t n;
            int r = tr_get(rt, done[i], 600000, &p, &n);
            if (!r && n == 8) memcpy(&checked[i], p, 8);
            if (r)
                errs += std::string(" rank ") + std::to_string(ranks[i]) + ": " + tr_errname(r) +
                        ": " + tr_last_error();
            if (r && !rc) rc = r;
        }
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        cluster_check(rc == 0 && checked[0] > 100 && checked[0] == checked[1] &&
                          checked[1] == checked[2],
                      "a gloo group over three nodes: every op",
                      rc ? errs
                         : std::to_string(checked[0]) + " ops checked per rank in " +
                               std::to_string((int)(secs * 1000)) + " ms");
        /* two levels (shm in each node, gloo between them): five ranks, two here, two on
         * b, one on the head, ranks interleaved across the nodes */
        tr_actor_id five[5] = {here, far, third, here, far};
        int r2 = rc ? rc : tr_actor_create(rt, "Counter", nullptr, "h", 1, &five[3]);
        bool made3 = r2 == 0, made4 = false;
        if (!r2) made4 = (r2 = cluster_actor(rt, there.c_str(), nullptr, &five[4])) == 0;
        const int franks[5] = {0, 1, 4, 2, 3};
        if (!r2) r2 = tr_group_declare(rt, five, 5, franks, "hier", "hier5");
        tr_ref fdone[5];
        int fmade = 0;
        t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 5 && !r2; i++, fmade++) {
            CollArgs a = {};
            snprintf(a.name, sizeof a.name, "hier5");
            a.world = 5;
            a.timeout_ms = 120000;
            a.mode = 7;
            r2 = tr_call(rt, five[i], "coll", &a, sizeof a, &fdone[i]);
        }
        int64_t fchecked[5] = {0, 0, 0, 0, 0};
        errs.clear();
        for (int i = 0; i < fmade; i++) {
            const void *p;
            size_t n;
            int r = tr_get(rt, fdone[i], 600000, &p, &n);
            if (!r && n == 8) memcpy(&fchecked[i], p, 8);
            if (r)
                errs += std::string(" rank ") + std::to_string(franks[i]) + ": " + tr_errname(r) +
                        ": " + tr_last_error();
            if (r && !r2) r2 = r;
        }
        secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        bool same = true;
        for (int i = 1; i < 5; i++)
            same = same && fchecked[i] == fchecked[0];
        cluster_check(r2 == 0 && fchecked[0] > 100 && same,
                      "a two-level group over three nodes: every op",
                      r2 ? errs + tr_last_error()
                         : std::to_string(fchecked[0]) + " ops checked per rank in " +
                               std::to_string((int)(secs * 1000)) + " ms");
        if (made3) tr_actor_kill(rt, five[3], 1);
        if (made4) tr_actor_kill(rt, five[4], 1);
        tr_actor_id pair[2] = {here, far};
        int32_t sums[2][2] = {{0, 0}, {0, 0}};
        if (!rc) rc = tr_group_declare(rt, pair, 2, nullptr, "auto", "span-auto");
        for (int i = 0; i < 2 && !rc; i++)
            rc = tr_call(rt, pair[i], "open_allreduce", "span-auto", 9, &done[i]);
        for (int i = 0; i < 2 && !rc; i++) {
            const void *p;
            size_t n;
            rc = tr_get(rt, done[i], 60000, &p, &n);
            if (!rc && n == 8) memcpy(sums[i], p, 8);
        }
        cluster_check(rc == 0 && sums[0][1] == 3 && sums[1][1] == 3 && sums[0][0] != sums[1][0],
                      "auto across nodes", rc ? tr_last_error() : "");
        tr_actor_kill(rt, here, 1);
    }
    /* a compiled graph across three nodes: the input read here and on b, a value from
     * here to b, from b to the head and back here, from the head here; 1,000 executions
     * pipelined, each checked */
    {
        tr_actor_id a1;
        int drc = tr_actor_create(rt, "Counter", nullptr, "d", 1, &a1);
        tr_dag *dg = nullptr;
        tr_dag_node in, na, nb, nh;
        if (!drc) drc = tr_dag_create(rt, &dg);
        if (!drc) drc = tr_dag_input(dg, &in);
        if (!drc) drc = tr_dag_bind(dg, a1, "plus1", &in, 1, &na);
        tr_dag_node b_in[2] = {na, in};
        if (!drc) drc = tr_dag_bind(dg, far, "plus1", b_in, 2, &nb);
        if (!drc) drc = tr_dag_bind(dg, third, "plus1", &nb, 1, &nh);
        tr_dag_node outs[2] = {nh, nb};
        if (!drc) drc = tr_dag_output(dg, outs, 2);
        auto c0 = std::chrono::steady_clock::now();
        if (!drc) drc = tr_dag_compile(dg, nullptr);
        long long cms = (long long)std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - c0)
                            .count();
        const int E = 1000, AHEAD = 8;
        int bad = 0;
        auto t0 = std::chrono::steady_clock::now();
        std::string why;
        for (int64_t i = 0, done = 0; !drc && done < E;) {
            uint64_t e;
            while (!drc && i < E && i - done < AHEAD) {
                drc = tr_dag_execute(dg, &i, sizeof i, &e);
                i++;
            }
            for (size_t o = 0; !drc && o < 2; o++) {
                const void *p;
                size_t n;
                drc = tr_dag_get(dg, (uint64_t)done, o, 20000, &p, &n);
                int64_t want = o == 0 ? 2 * done + 3 : 2 * done + 2, got = 0;
                if (!drc && n == 8) memcpy(&got, p, 8);
                if (!drc && got != want) bad++;
            }
            if (!drc) drc = tr_dag_release(dg, (uint64_t)done);
            done++;
        }
        if (drc) why = tr_last_error();
        double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                        .count() /
                    E;
        cluster_check(drc == 0 && bad == 0, "a compiled graph across three nodes",
                      drc ? std::string(tr_errname(drc)) + ": " + why
                          : std::to_string(bad) + " wrong, compiled in " + std::to_string(cms) +
                                " ms, " + std::to_string((int)us) + " us an execution pipelined");
        if (dg) drc = tr_dag_destroy(dg);
        cluster_check(drc == 0, "a graph across nodes torn down", drc ? tr_last_error() : "");
        /* values over a slot cross as bytes, and go as objects on each side */
        tr_dag_options o = TR_DAG_OPTIONS_INIT;
        o.slot_bytes = 1024;
        dg = nullptr;
        drc = tr_dag_create(rt, &dg);
        if (!drc) drc = tr_dag_input(dg, &in);
        if (!drc) drc = tr_dag_bind(dg, far, "echo", &in, 1, &nb);
        if (!drc) drc = tr_dag_output(dg, &nb, 1);
        if (!drc) drc = tr_dag_compile(dg, &o);
        for (uint64_t size : {(uint64_t)100, (uint64_t)5000, (uint64_t)3 << 20}) {
            std::string v = pattern(size, size), got;
            uint64_t e;
            const void *p;
            size_t n;
            if (!drc) drc = tr_dag_execute(dg, v.data(), v.size(), &e);
            if (!drc) drc = tr_dag_get(dg, e, 0, 30000, &p, &n);
            if (!drc) got.assign((const char *)p, n);
            if (!drc) drc = tr_dag_release(dg, e);
            cluster_check(
                drc == 0 && got == v,
                ("a graph's value of " + std::to_string(size) + " bytes across nodes").c_str(),
                drc ? tr_last_error() : "");
        }
        if (dg) tr_dag_destroy(dg);
        /* the actor on b killed: the graph's executions fail with TR_EACTOR_DIED */
        tr_actor_id dfar;
        dg = nullptr;
        drc = cluster_actor(rt, there.c_str(), nullptr, &dfar);
        if (!drc) drc = tr_dag_create(rt, &dg);
        if (!drc) drc = tr_dag_input(dg, &in);
        if (!drc) drc = tr_dag_bind(dg, dfar, "plus1", &in, 1, &nb);
        if (!drc) drc = tr_dag_output(dg, &nb, 1);
        if (!drc) drc = tr_dag_compile(dg, nullptr);
        int64_t x = 41, y = 0;
        uint64_t e;
        const void *p;
        size_t n;
        if (!drc) drc = tr_dag_execute(dg, &x, sizeof x, &e);
        if (!drc) drc = tr_dag_get(dg, e, 0, 20000, &p, &n);
        if (!drc && n == 8) memcpy(&y, p, 8);
        if (!drc) drc = tr_dag_release(dg, e);
        int krc = drc ? drc : tr_actor_kill(rt, dfar, 1);
        int after = krc;
        auto k0 = std::chrono::steady_clock::now();
        if (!krc) {
            after = tr_dag_execute(dg, &x, sizeof x, &e);
            if (!after) after = tr_dag_get(dg, e, 0, 20000, &p, &n);
        }
        long long kms = (long long)std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - k0)
                            .count();
        std::string kwhy = tr_last_error();
        cluster_check(drc == 0 && y == 42 && after == TR_EACTOR_DIED,
                      "a graph whose actor on another node dies fails",
                      std::string(tr_errname(after)) + " after " + std::to_string(kms) +
                          " ms: " + kwhy);
        if (dg) tr_dag_destroy(dg);
        tr_actor_kill(rt, a1, 1);
    }
    /* killed: every later call says so */
    rc = tr_actor_kill(rt, far, 1);
    int64_t x;
    int rc2 = call_i64(rt, far, "pid", 0, &x, 20000);
    cluster_check(rc == 0 && rc2 == TR_EACTOR_DIED, "killed", tr_errname(rc2));
    /* its objects went with it: an error, not a hang (its node lets go of a dead worker's
     * objects as it reaps it, a moment after callers hear it died: a pull in that moment
     * still finds one) */
    for (int i = 0; i < 50; i++) {
        rc = tr_get(rt, remote_obj, 20000, nullptr, nullptr);
        if (rc != 0) break;
        tr_ref_release(rt, remote_obj);
        usleep(100000);
    }
    cluster_check(rc == TR_EOWNER_DIED, "an object whose maker died: its owner died",
                  std::string(tr_errname(rc)) + ": " + tr_last_error());
    tr_shutdown(rt);
    return g_cluster_fails ? 1 : 0;
}
