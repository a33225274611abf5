// collective/gloo/gloo.cc - the gloo backend: a thin C++ shim over Debian's libgloo (TCP
// transport), the only C++ in the runtime. Gloo's rendezvous runs over the node's KV store
// (a gloo::rendezvous::Store whose keys live under troupe/coll/<group>/); each op maps to
// the gloo collective of the same name, with troupe's reduction kernels as gloo's reduce
// function, so every dtype and op works. Every extern "C" entry catches every exception
// and returns a TR_E* code: a timeout gives TR_ETIMEDOUT, a broken peer TR_EPEER_DIED.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <stdexcept>
#include <string>
#include <vector>

extern "C" {
#include "collective/group.h"
#include "collective/ops.h"
#include "collective/steps.h"
#include "core/affinity.h"
#include "core/clock.h"
#include "core/codec.h"
#include "core/frame.h"
#include "core/kv.h"
#include "core/log.h"
#include "core/nodeconn.h"
#include "core/reduce.h"
#include "core/status.h"
}

namespace {

using ReduceFn = void (*)(void *, const void *, const void *, size_t);

// c = a op b over n elements, with troupe's kernels (AVG sums here; divided afterwards).
template <int D, int O> void reduce_fn(void *c, const void *a, const void *b, size_t n) {
    // c may be a or b: tr__reduce_to reads each element before writing it. D and O are
    // valid by construction (pick), so it cannot fail.
    tr__reduce_to(c, nullptr, a, b, n, (tr_dtype)D, O == TR_AVG ? TR_SUM : (tr_redop)O);
}

template <int D> ReduceFn pick_op(tr_redop op) {
    switch (op) {
    case TR_SUM:
        return &reduce_fn<D, TR_SUM>;
    case TR_PROD:
        return &reduce_fn<D, TR_PROD>;
    case TR_MIN:
        return &reduce_fn<D, TR_MIN>;
    case TR_MAX:
        return &reduce_fn<D, TR_MAX>;
    default:
        return &reduce_fn<D, TR_AVG>;
    }
}

ReduceFn pick(tr_dtype d, tr_redop op) {
    switch (d) {
    case TR_INT8:
        return pick_op<TR_INT8>(op);
    case TR_UINT8:
        return pick_op<TR_UINT8>(op);
    case TR_INT32:
        return pick_op<TR_INT32>(op);
    case TR_INT64:
        return pick_op<TR_INT64>(op);
    case TR_FLOAT16:
        return pick_op<TR_FLOAT16>(op);
    case TR_BFLOAT16:
        return pick_op<TR_BFLOAT16>(op);
    case TR_FLOAT32:
        return pick_op<TR_FLOAT32>(op);
    default:
        return pick_op<TR_FLOAT64>(op);
    }
}

// Gloo's rendezvous keys in the node's KV store, or (a group across nodes) the cluster's,
// which has no waiting get: it is polled.
class KvStore : public gloo::rendezvous::Store {
  public:
    KvStore(tr__nodeconn *node, std::string prefix, bool cluster)
        : node_(node), prefix_(std::move(prefix)), cluster_(cluster) {}
    ~KvStore() override {
        for (auto &k : mine_)
            if (cluster_)
                tr__kv_client_cluster(node_, "del", k.c_str(), nullptr, 0, nullptr, nullptr);
            else
                tr__kv_client_del(node_, k.c_str());
    }
    void set(const std::string &key, const std::vector<char> &data) override {
        std::string k = prefix_ + key;
        if (cluster_ ? tr__kv_client_cluster(node_, "put", k.c_str(), data.data(), data.size(),
                                             nullptr, nullptr)
                     : tr__kv_client_put(node_, k.c_str(), data.data(), data.size()))
            throw std::runtime_error(std::string("kv put: ") + tr__last_error());
        mine_.push_back(k);
    }
    std::vector<char> get(const std::string &key) override {
        wait({key}, kDefaultTimeout);
        void *v = nullptr;
        size_t n = 0;
        int rc;
        for (int tries = 0;; tries++) { /* (a slow head is "not yet", a few times) */
            rc = read(prefix_ + key, 0, &v, &n);
            if (!cluster_ || tries == 5 ||
                (rc != TR_ERESOURCES && rc != TR_ECONNECT && rc != TR_ETIMEDOUT))
                break;
            struct timespec ts = {0, 50000000};
            nanosleep(&ts, nullptr);
        }
        if (rc) throw std::runtime_error(std::string("kv get: ") + tr__last_error());
        std::vector<char> out((char *)v, (char *)v + n);
        free(v);
        return out;
    }
    void wait(const std::vector<std::string> &keys) override {
        wait(keys, kDefaultTimeout);
    }
    void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &t) override {
        int64_t deadline = tr__deadline((int)t.count());
        for (auto &key : keys) {
            for (;;) {
                int left = tr__ms_left(deadline);
                void *v = nullptr;
                size_t n = 0;
                int rc = read(prefix_ + key, left < 0 || left > 50 ? 50 : left, &v, &n);
                free(v);
                if (rc == 0) break;
                /* the cluster's store: a slow head, or a node busy forwarding, is "not yet" */
                if (cluster_ && (rc == TR_ERESOURCES || rc == TR_ECONNECT || rc == TR_ETIMEDOUT))
                    rc = TR_ENOTFOUND;
                if (rc != TR_ENOTFOUND) throw std::runtime_error(tr__last_error());
                if (tr__now_ns() >= deadline)
                    throw std::runtime_error("Timed out waiting for peers");
                if (cluster_) {
                    struct timespec ts = {0, 10000000};
                    nanosleep(&ts, nullptr);
                }
            }
        }
    }

  private:
    int read(const std::string &k, int wait_ms, void **v, size_t *n) {
        if (cluster_) return tr__kv_client_cluster(node_, "get", k.c_str(), nullptr, 0, v, n);
        return tr__kv_client_wait(node_, k.c_str(), wait_ms, v, n);
    }

    tr__nodeconn *node_;
    std::string prefix_;
    bool cluster_;
    std::vector<std::string> mine_;
};

// This process's thread ids.
static std::vector<long> thread_ids() {
    std::vector<long> out;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') out.push_back(strtol(e->d_name, nullptr, 10));
    if (d) closedir(d);
    return out;
}

// The calling thread's CPUs widened while it lives (core/affinity.h).
struct Widened {
    cpu_set_t saved;
    int on = tr__affinity_widen(&saved);
    ~Widened() {
        if (on) tr__affinity_restore(&saved);
    }
};

// Where Gloo's I/O thread runs (the threads started since `before`, under w). It spins
// while its rank holds a pair's lock (Pair::handleEvents returns on a failed try-lock and
// its epoll is level-triggered), so at the rank's weight, on the rank's core, it kept the
// preempted rank off the CPU until a scheduler tick (4 KiB allreduce 0.2 -> 4 ms). Off the
// core at nice +19 (until 2026-11-29) a loopback receive woke it where its peer's send
// ran: on the other rank's core, behind that rank (perf sched: waits of ~100 us), the data
// it read then crossing back; 1 MiB allreduce, 2 bound ranks: 500-700 us in about half
// the runs, 260-300 in the others.
// Now it runs at SCHED_IDLE and, where the node bound the rank, on the rank's CPUs: it
// runs only while nothing else there can (its rank waits), and the rank's wake-up takes
// the CPU from it at once (docs/BENCHMARKS.md: 1 MiB allreduce 0.67-0.88x raw Gloo's in
// every run). The cost: another thread of the actor computing on those CPUs holds its
// Gloo ops back. A kernel that refuses SCHED_IDLE (lowering a policy needs no privilege)
// gets the old way.
static void place_io_threads(const std::vector<long> &before, const Widened &w) {
    for (long t : thread_ids()) {
        if (std::find(before.begin(), before.end(), t) != before.end()) continue;
        struct sched_param p = {};
        if (sched_setscheduler((pid_t)t, SCHED_IDLE, &p) == 0) {
            if (w.on) sched_setaffinity((pid_t)t, sizeof w.saved, &w.saved);
            continue;
        }
        errno = 0;
        int now = getpriority(PRIO_PROCESS, (id_t)t);
        if (errno == 0) setpriority(PRIO_PROCESS, (id_t)t, now + 19);
    }
}

// A group across nodes watches the cluster's view of its ranks' nodes: a node the head
// counts lost (its link cut: no process died, so no connection closed) has this process's
// TCP connections to its address shut down, so a Gloo op waiting on a rank there fails at
// once with TR_EPEER_DIED (as when the rank's process dies) instead of at its timeout.
// Every 500 ms, through a node connection of its own. Connections are found by peer
// address (Gloo does not give its sockets out); a node whose IP another live node of the
// group shares is left to the timeout.
class Watch {
  public:
    Watch(std::string node_path, size_t max_msg, std::vector<std::string> peers)
        : path_(std::move(node_path)), max_msg_(max_msg), peers_(std::move(peers)),
          cut_(peers_.size(), false) {
        t_ = std::thread([this] { run(); });
    }
    ~Watch() {
        {
            std::lock_guard<std::mutex> l(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        t_.join();
        if (nc_) tr__nodeconn_close(nc_);
    }

    // The nodes this watch counted lost ("" for none), for error messages.
    std::string lost() {
        std::lock_guard<std::mutex> l(mu_);
        return lost_;
    }

  private:
    static std::string ip_of(const std::string &a) {
        size_t colon = a.rfind(':');
        return colon == std::string::npos ? a : a.substr(0, colon);
    }
    bool lost(const std::string &address) {
        if (!nc_ && tr__nodeconn_open(path_.c_str(), max_msg_, &nc_)) return false;
        tr__buf b = TR__BUF_INIT;
        tr__enc_map(&b, 1);
        tr__enc_str(&b, "address");
        tr__enc_str(&b, address.c_str());
        tr__reply r;
        int rc = tr__nodeconn_call(nc_, TR__MSG_NODE_LOST, &b, 2000, &r);
        tr__buf_free(&b);
        if (rc == TR_ECONNECT) { /* the node went: try a new connection next time */
            tr__nodeconn_close(nc_);
            nc_ = nullptr;
        }
        if (rc) return false;
        int64_t v = 0;
        tr__get_int(r.root, "lost", &v);
        tr__reply_free(&r);
        return v != 0;
    }
    // Shuts down this process's TCP connections to ip (IPv4).
    static int cut(const std::string &ip) {
        struct in_addr want;
        if (inet_pton(AF_INET, ip.c_str(), &want) != 1) return 0;
        DIR *d = opendir("/proc/self/fd");
        if (!d) return 0;
        int n = 0;
        while (struct dirent *e = readdir(d)) {
            int fd = atoi(e->d_name);
            if (fd <= 2 || fd == dirfd(d)) continue;
            struct sockaddr_in a;
            socklen_t al = sizeof a;
            if (getpeername(fd, (struct sockaddr *)&a, &al) == 0 && a.sin_family == AF_INET &&
                a.sin_addr.s_addr == want.s_addr && shutdown(fd, SHUT_RDWR) == 0)
                n++;
        }
        closedir(d);
        return n;
    }
    void run() {
        std::unique_lock<std::mutex> l(mu_);
        while (!stop_) {
            cv_.wait_for(l, std::chrono::milliseconds(500));
            if (stop_) break;
            l.unlock();
            std::vector<bool> now(peers_.size(), false);
            for (size_t i = 0; i < peers_.size(); i++)
                now[i] = !cut_[i] && lost(peers_[i]);
            for (size_t i = 0; i < peers_.size(); i++) {
                if (!now[i]) continue;
                bool shared = false; /* another node of the group, not lost, on that IP */
                for (size_t j = 0; j < peers_.size(); j++)
                    shared = shared || (j != i && !now[j] && !cut_[j] &&
                                        ip_of(peers_[j]) == ip_of(peers_[i]));
                cut_[i] = true;
                {
                    std::lock_guard<std::mutex> g(mu_);
                    lost_ += (lost_.empty() ? "" : ", ") + peers_[i];
                }
                if (shared) continue;
                int n = cut(ip_of(peers_[i]));
                TR_LOG_WARN("COLL-NODE-LOST",
                            "the cluster counts node %s lost: %d connections to it shut, so "
                            "group ops waiting on its ranks fail now",
                            peers_[i].c_str(), n);
            }
            l.lock();
        }
    }

    std::string path_;
    size_t max_msg_;
    std::vector<std::string> peers_; /* the other nodes of the group, "IP:port" */
    std::vector<bool> cut_;
    std::string lost_; /* under mu_ */
    tr__nodeconn *nc_ = nullptr;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread t_;
};

struct State {
    std::unique_ptr<Watch> watch; /* (stopped first: ~State) */
    std::unique_ptr<KvStore> store;
    std::shared_ptr<gloo::transport::Device> dev;
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    uint32_t tag = 1;
    bool formed = false; /* the mesh connected: every rank has read the rendezvous keys */
    std::vector<uint64_t> sent, received; /* messages per peer, for point-to-point slots */
    /* a group whose ranks are on several nodes of a cluster (init_span): no node's registry,
     * no segment; rendezvous in the cluster's KV store under span_prefix, Gloo's TCP on
     * this node's cluster address (host), agreement checked by an exchange of the ops'
     * descriptors (span_agree) */
    bool span = false;
    std::string span_prefix, host;
    /* ...and its ranks' nodes: node_of[r] numbers rank r's node (in order of first rank),
     * n_nodes of them */
    uint8_t node_of[TR__COLL_MAX_WORLD] = {};
    int n_nodes = 0;
    /* a two-level group (hier, across nodes where ranks share them): the shm group of this
     * node's ranks (NULL where it has one), and on each node's leader (its lowest rank) a
     * Gloo context of the leaders */
    bool hier = false;
    tr_group *local = nullptr;
    std::unique_ptr<KvStore> lstore;
    std::shared_ptr<gloo::rendezvous::Context> lctx;
    uint32_t ltag = 1;
    /* what an op that may yet fail on a disagreement would overwrite (checked(): up to
     * kSaveMax bytes, kept for the next op) */
    std::unique_ptr<char, decltype(&free)> saved{nullptr, &free};
    size_t saved_cap = 0;
    /* a small allreduce's allgather (run_gathered_allreduce: up to kGatherMax bytes) */
    std::vector<char> gathered;
    ~State() {
        watch.reset();
        lctx.reset();
        if (local) tr__group_destroy(local);
    }
};

State *S(tr_group *g) {
    return static_cast<State *>(g->impl);
}

std::chrono::milliseconds ms_left(int64_t deadline) {
    int left = tr__ms_left(deadline);
    return std::chrono::milliseconds(left < 0 ? 3600000 : left < 1 ? 1 : left);
}

// Maps what Gloo throws to a code; the peer's death shows up as an I/O error.
int failed(tr_group *g, const std::exception &e) {
    std::string m = e.what();
    if (m.find("imed out") != std::string::npos || m.find("imeout") != std::string::npos)
        return tr__err(TR_ETIMEDOUT, "group '%s' (gloo): %s", g->name, m.c_str());
    std::string lost = S(g) && S(g)->watch ? S(g)->watch->lost() : "";
    if (!lost.empty()) /* (its connections were shut here: the peer's note is ours) */
        return tr__err(TR_EPEER_DIED, "group '%s' (gloo): the cluster counts node %s lost", g->name,
                       lost.c_str());
    return tr__err(TR_EPEER_DIED, "group '%s' (gloo): %s", g->name, m.c_str());
}

// Runs f, turning whatever it throws into a TR_E* code: no exception leaves the shim.
template <typename F> int guarded(tr_group *g, F f) {
    try {
        return f();
    } catch (const std::exception &e) {
        return failed(g, e);
    } catch (...) {
        return tr__err(TR_EINTERNAL, "gloo: unknown exception");
    }
}

// Buffers go to Gloo as elements of the dtype's width, so its chunking never splits one.
template <typename F> int by_width(size_t esz, F f) {
    switch (esz) {
    case 1:
        return f((uint8_t *)nullptr);
    case 2:
        return f((uint16_t *)nullptr);
    case 4:
        return f((uint32_t *)nullptr);
    default:
        return f((uint64_t *)nullptr);
    }
}

// The runners: each calls the Gloo collective of its name and nothing else (they throw
// what Gloo throws: callers run them under guarded).
int run_barrier(tr_group *g, int64_t deadline) {
    gloo::BarrierOptions o(S(g)->ctx);
    o.setTag(S(g)->tag++);
    o.setTimeout(ms_left(deadline));
    gloo::barrier(o);
    return 0;
}

// A small allreduce as an allgather, each rank then reducing the pieces in rank order
// (every rank the same result, bit for bit). Gloo's ring sends each piece through a
// reduce-scatter, then an allgather, each transfer after the receiver's notice that it is
// ready: 2 bound ranks, 4 KiB: 117 us (raw Gloo's own allreduce ~200), as an allgather 70.
// Up to kGatherMax bytes gathered, where every rank has a piece of its own to send (with
// fewer elements than ranks most of Gloo's ring is empty: 4 ranks, 4 B: 260 us, gathered
// 530), or with 2 ranks (one exchange).
constexpr size_t kGatherMax = 256 << 10;

bool gathers(tr_group *g, size_t count, size_t bytes) {
    size_t W = (size_t)g->world;
    return W > 1 && bytes <= kGatherMax / W && (W == 2 || count >= W);
}

int run_gathered_allreduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                           tr_redop op, int64_t deadline) {
    size_t esz = tr__dtype_size(dtype), bytes = count * esz, W = (size_t)g->world;
    std::vector<char> &all = S(g)->gathered;
    all.resize(bytes * W);
    by_width(esz, [&](auto *t) {
        using T = std::remove_pointer_t<decltype(t)>;
        gloo::AllgatherOptions o(S(g)->ctx);
        o.setInput((T *)send, count);
        o.setOutput((T *)all.data(), count * W);
        o.setTag(S(g)->tag++);
        o.setTimeout(ms_left(deadline));
        gloo::allgather(o);
        return 0;
    });
    /* (send may be recv: it is read only by the allgather) */
    int rc = tr__reduce_to(recv, nullptr, all.data(), all.data() + bytes, count, dtype, op);
    for (size_t r = 2; r < W && !rc; r++)
        rc = tr__reduce(recv, all.data() + r * bytes, count, dtype, op);
    return rc ? rc : tr__reduce_finish(recv, count, dtype, op, g->world);
}

int run_allreduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                  tr_redop op, int64_t deadline) {
    size_t esz = tr__dtype_size(dtype), bytes = count * esz;
    if (count == 0) return 0;
    if (gathers(g, count, bytes))
        return run_gathered_allreduce(g, send, recv, count, dtype, op, deadline);
    // Apart, Gloo copies send into recv a segment at a time as its ring reaches it, not
    // all before its first send (1 MiB, 2 ranks: ~60 us off the critical path). Its ring
    // never runs for one rank, and overlapping buffers would be read after being written.
    const char *in = (const char *)send, *out = (const char *)recv;
    bool apart = g->world > 1 && (in + bytes <= out || out + bytes <= in);
    if (send != recv && !apart) std::memmove(recv, send, bytes);
    by_width(esz, [&](auto *t) {
        using T = std::remove_pointer_t<decltype(t)>;
        gloo::AllreduceOptions o(S(g)->ctx);
        if (apart) o.setInput((T *)send, count);
        o.setOutput((T *)recv, count);
        o.setReduceFunction(pick(dtype, op));
        o.setTag(S(g)->tag++);
        o.setTimeout(ms_left(deadline));
        gloo::allreduce(o);
        return 0;
    });
    return tr__reduce_finish(recv, count, dtype, op, g->world);
}

int timeout_of(int64_t deadline) {
    int left = tr__ms_left(deadline);
    return left < 0 ? TR_FOREVER : left;
}

// A two-level allreduce (State::hier): the ranks of each node reduce to its leader through shm,
// the leaders allreduce through Gloo, each leader broadcasts the result to its node through
// shm. Each byte crosses the network once per node, not once per rank. AVG sums, then
// divides by the whole group's size. A rank that fails leaves its peers at once: its node's
// ranks see it leave the shm group, the other leaders its connections close.
int run_hier_allreduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                       tr_redop op, int64_t deadline) {
    State *s = S(g);
    if (count == 0) return 0;
    tr_redop sub = op == TR_AVG ? TR_SUM : op;
    size_t esz = tr__dtype_size(dtype);
    bool leader = s->lctx != nullptr;
    int rc = 0;
    if (s->local)
        rc = tr__group_reduce(s->local, send, leader ? recv : nullptr, count, dtype, sub, 0,
                              timeout_of(deadline));
    else if (send != recv)
        std::memcpy(recv, send, count * esz);
    if (!rc && leader)
        rc = guarded(g, [&] {
            return by_width(esz, [&](auto *t) {
                using T = std::remove_pointer_t<decltype(t)>;
                gloo::AllreduceOptions o(s->lctx);
                o.setOutput((T *)recv, count);
                o.setReduceFunction(pick(dtype, sub));
                o.setTag(s->ltag++);
                o.setTimeout(ms_left(deadline));
                gloo::allreduce(o);
                return 0;
            });
        });
    if (!rc && s->local)
        rc = tr__group_broadcast(s->local, recv, count, dtype, 0, timeout_of(deadline));
    if (!rc) return tr__reduce_finish(recv, count, dtype, op, g->world);
    char why[400];
    snprintf(why, sizeof why, "%s", tr__last_error());
    if (s->local) tr__group_destroy(s->local);
    s->local = nullptr;
    s->lctx.reset();
    s->ctx.reset();
    /* unusable from here, whatever the code (its connections are gone) */
    g->broken = rc == TR_EINVAL ? TR_EINTERNAL : rc;
    tr__err(rc, "group '%s' (two-level allreduce): %s", g->name, why);
    snprintf(g->broken_msg, sizeof g->broken_msg, "%s", tr__last_error());
    return g->broken;
}

int run_broadcast(tr_group *g, void *buf, size_t count, tr_dtype dtype, int root,
                  int64_t deadline) {
    if (count == 0) return 0;
    return by_width(tr__dtype_size(dtype), [&](auto *t) {
        using T = std::remove_pointer_t<decltype(t)>;
        gloo::BroadcastOptions o(S(g)->ctx);
        o.setOutput((T *)buf, count);
        o.setRoot(root);
        o.setTag(S(g)->tag++);
        o.setTimeout(ms_left(deadline));
        gloo::broadcast(o);
        return 0;
    });
}

// The bytes an op reads from send and writes to recv on this rank, for `bytes` a piece.
void side_bytes(int kind, size_t bytes, size_t W, bool root, size_t *sbytes, size_t *rbytes) {
    bool wide_send = (kind == TR__COLL_SCATTER && root) || kind == TR__COLL_ALLTOALL ||
                     kind == TR__COLL_REDUCE_SCATTER;
    bool wide_recv = kind == TR__COLL_ALLGATHER || (kind == TR__COLL_GATHER && root) ||
                     kind == TR__COLL_ALLTOALL;
    *sbytes = bytes * (wide_send ? W : 1);
    *rbytes = bytes * (wide_recv ? W : 1);
}

int run_data_op(tr_group *g, const tr__coll_args *a, int64_t deadline) {
    size_t esz = tr__dtype_size(a->dtype), n = a->count, W = (size_t)g->world;
    size_t me = (size_t)g->rank;
    if (n == 0) return 0;
    // Gloo posts its transfers before it copies a rank's own piece, so in place (send
    // overlapping recv) a gather, scatter or alltoall would overwrite what it still
    // sends: stage the send side first.
    size_t sbytes, rbytes;
    side_bytes(a->kind, n * esz, W, a->root == (int)me, &sbytes, &rbytes);
    const char *send = (const char *)a->send, *recv = (const char *)a->recv;
    std::vector<char> staged;
    if (send && recv && send < recv + rbytes && recv < send + sbytes) {
        staged.assign(send, send + sbytes);
        send = staged.data();
    }
    return by_width(esz, [&](auto *t) {
        using T = std::remove_pointer_t<decltype(t)>;
        auto &ctx = S(g)->ctx;
        switch (a->kind) {
        case TR__COLL_REDUCE: {
            std::vector<char> tmp((const char *)send, (const char *)send + n * esz);
            gloo::ReduceOptions o(ctx);
            o.setOutput((T *)tmp.data(), n);
            o.setRoot(a->root);
            o.setReduceFunction(pick(a->dtype, a->op));
            o.setTag(S(g)->tag++);
            o.setTimeout(ms_left(deadline));
            gloo::reduce(o);
            if ((int)me == a->root) {
                std::memcpy(a->recv, tmp.data(), n * esz);
                return tr__reduce_finish(a->recv, n, a->dtype, a->op, g->world);
            }
            return 0;
        }
        case TR__COLL_ALLGATHER: {
            gloo::AllgatherOptions o(ctx);
            o.setInput((T *)send, n);
            o.setOutput((T *)a->recv, n * W);
            o.setTag(S(g)->tag++);
            o.setTimeout(ms_left(deadline));
            gloo::allgather(o);
            return 0;
        }
        case TR__COLL_GATHER: {
            std::vector<char> sink;
            gloo::GatherOptions o(ctx);
            o.setInput((T *)send, n);
            if ((int)me == a->root) o.setOutput((T *)a->recv, n * W);
            o.setRoot(a->root);
            o.setTag(S(g)->tag++);
            o.setTimeout(ms_left(deadline));
            gloo::gather(o);
            return 0;
        }
        case TR__COLL_SCATTER: {
            gloo::ScatterOptions o(ctx);
            std::vector<T *> ins;
            if ((int)me == a->root)
                for (size_t j = 0; j < W; j++)
                    ins.push_back((T *)send + j * n);
            if ((int)me == a->root) o.setInputs(ins, n);
            o.setOutput((T *)a->recv, n);
            o.setRoot(a->root);
            o.setTag(S(g)->tag++);
            o.setTimeout(ms_left(deadline));
            gloo::scatter(o);
            return 0;
        }
        case TR__COLL_REDUCE_SCATTER: {
            /* an alltoall brings every rank's piece for us; we reduce them in rank
             * order (each byte crosses the network once, an allreduce's half) */
            std::vector<char> got(n * W * esz);
            gloo::AlltoallOptions o(ctx);
            o.setInput((T *)send, n * W);
            o.setOutput((T *)got.data(), n * W);
            o.setTag(S(g)->tag++);
            o.setTimeout(ms_left(deadline));
            gloo::alltoall(o);
            char *out = (char *)a->recv;
            std::memcpy(out, got.data(), n * esz);
            int rc = 0;
            for (size_t j = 1; j < W && !rc; j++)
                rc = tr__reduce(out, got.data() + j * n * esz, n, a->dtype, a->op);
            return rc ? rc : tr__reduce_finish(out, n, a->dtype, a->op, g->world);
        }
        default: { /* alltoall */
            gloo::AlltoallOptions o(ctx);
            o.setInput((T *)send, n * W);
            o.setOutput((T *)a->recv, n * W);
            o.setTag(S(g)->tag++);
            o.setTimeout(ms_left(deadline));
            gloo::alltoall(o);
            return 0;
        }
        }
    });
}

// Runs the op that the ranks which entered it run (e, read from the group segment: checked
// like any peer input), on zeroed scratch buffers, so they finish it and every rank's Gloo
// tags stay in step.
int run_stand_in(tr_group *g, const tr__coll_desc &e, int64_t deadline) {
    tr_dtype dtype = (tr_dtype)e.dtype;
    size_t esz = tr__dtype_size(dtype), W = (size_t)g->world;
    bool rooted = e.kind == TR__COLL_BROADCAST || e.kind == TR__COLL_REDUCE ||
                  e.kind == TR__COLL_GATHER || e.kind == TR__COLL_SCATTER;
    if (e.kind == TR__COLL_BARRIER) return run_barrier(g, deadline);
    if (e.kind < TR__COLL_ALLREDUCE || e.kind > TR__COLL_ALLTOALL || !esz || e.op > TR_AVG ||
        (rooted && (e.root < 0 || e.root >= g->world)) || e.count > SIZE_MAX / esz / W)
        return tr__err(TR_EINTERNAL, "group '%s': a malformed op descriptor in the segment",
                       g->name);
    size_t n = (size_t)e.count, sbytes, rbytes;
    side_bytes((int)e.kind, n * esz, W, e.root == g->rank, &sbytes, &rbytes);
    // calloc: large scratch comes as untouched zero pages
    std::unique_ptr<char, decltype(&free)> in((char *)calloc(1, sbytes ? sbytes : 1), &free),
        out((char *)calloc(1, rbytes ? rbytes : 1), &free);
    if (!in || !out)
        return tr__err(TR_ENOMEM, "group '%s': no memory to stand in for a %zu-byte op", g->name,
                       sbytes + rbytes);
    switch (e.kind) {
    case TR__COLL_ALLREDUCE:
        return run_allreduce(g, in.get(), out.get(), n, dtype, (tr_redop)e.op, deadline);
    case TR__COLL_BROADCAST:
        return run_broadcast(g, out.get(), n, dtype, e.root, deadline);
    default: {
        tr__coll_args a = {(int)e.kind, in.get(), out.get(), n, dtype, (tr_redop)e.op, e.root};
        return run_data_op(g, &a, deadline);
    }
    }
}

// With checks on (the default) every op carries the agreement of the group segment
// (collective/steps.h): a rank posts its op and compares it with the ranks already there,
// without waiting, then runs the Gloo op; after it, it checks the ranks that came later.
// Ranks that disagree all get TR_EINVAL naming the difference; before that, a rank that
// saw a disagreement runs the op of the ranks that entered it on scratch buffers, so they
// finish and the group stays usable. No rank waits for the others before Gloo moves data,
// so the check costs a few shared cache lines, not a wake-up. The segment is shared
// because every rank of a group joins through one node; a group spanning nodes will need
// this check over the network instead. tr_group_set_checks(g, 0) skips it, as MPI and
// NCCL never check.
// A group across nodes has no shared segment: its ranks exchange their ops' descriptors
// (an allgather of a fixed 256 bytes each) before the op, and all see the same table, so
// either every rank runs the op or every rank returns the same TR_EINVAL (the group stays
// usable). The exchange carries a small allreduce's data too (up to kInline bytes), which
// each rank then reduces in rank order, and is itself a barrier: those ops take one
// exchange, checked or not. Larger ops take one more, a network round trip.
constexpr size_t kInline = 224;
struct Slot {
    uint64_t d[4]; // kind | root << 32, dtype, op, count
    unsigned char data[kInline];
};

// 1: the op is done (it rode on the exchange); 0: run it; < 0: the code.
int span_agree(tr_group *g, uint32_t kind, tr_dtype dtype, tr_redop op, int root, size_t count,
               int64_t deadline, const void *send, void *recv) {
    size_t esz = tr__dtype_size(dtype), bytes = count * esz;
    bool inl = kind == TR__COLL_BARRIER || (kind == TR__COLL_ALLREDUCE && bytes <= kInline);
    Slot mine;
    std::memset(&mine, 0, sizeof mine);
    mine.d[0] = kind | (uint64_t)(uint32_t)root << 32;
    mine.d[1] = (uint64_t)dtype;
    mine.d[2] = (uint64_t)op;
    mine.d[3] = (uint64_t)count;
    if (kind == TR__COLL_ALLREDUCE && inl && bytes) std::memcpy(mine.data, send, bytes);
    std::vector<Slot> all((size_t)g->world);
    int rc = guarded(g, [&] {
        gloo::AllgatherOptions o(S(g)->ctx);
        o.setInput((uint64_t *)&mine, sizeof mine / 8);
        o.setOutput((uint64_t *)all.data(), all.size() * sizeof mine / 8);
        o.setTag(S(g)->tag++);
        o.setTimeout(ms_left(deadline));
        gloo::allgather(o);
        return 0;
    });
    if (rc) return rc;
    const uint64_t *first = all[0].d;
    for (int r = 1; r < g->world; r++) {
        const uint64_t *d = all[(size_t)r].d;
        if (std::memcmp(d, first, sizeof mine.d) == 0) continue;
        const char *what = (uint32_t)d[0] != (uint32_t)first[0] ? "the op"
                           : d[3] != first[3]                   ? "count"
                           : d[1] != first[1]                   ? "dtype"
                           : d[2] != first[2]                   ? "reduction op"
                                                                : "root";
        return tr__err(TR_EINVAL,
                       "group '%s': ranks disagree on %s (rank 0: %s count %llu dtype %u op %u "
                       "root %d; rank %d: %s count %llu dtype %u op %u root %d)",
                       g->name, what, tr__coll_kind_name((uint32_t)first[0]),
                       (unsigned long long)first[3], (unsigned)first[1], (unsigned)first[2],
                       (int32_t)(first[0] >> 32), r, tr__coll_kind_name((uint32_t)d[0]),
                       (unsigned long long)d[3], (unsigned)d[1], (unsigned)d[2],
                       (int32_t)(d[0] >> 32));
    }
    if (!inl) return 0;
    if (kind == TR__COLL_ALLREDUCE && bytes) {
        uint64_t acc[kInline / 8];
        std::memcpy(acc, all[0].data, bytes);
        for (int r = 1; r < g->world && !rc; r++)
            rc = tr__reduce(acc, all[(size_t)r].data, count, dtype, op);
        if (!rc) rc = tr__reduce_finish(acc, count, dtype, op, g->world);
        if (!rc) std::memcpy(recv, acc, bytes);
    }
    return rc ? rc : 1;
}

// What an op writes on this rank (its output: broadcast's buffer off the root, reduce's
// and gather's at the root only), which a disagreement must leave as it was.
struct Written {
    void *p = nullptr;
    size_t n = 0;
};

Written written(tr_group *g, uint32_t kind, void *recv, size_t count, tr_dtype dtype, int root) {
    size_t sbytes, rbytes;
    side_bytes((int)kind, count * tr__dtype_size(dtype), (size_t)g->world, root == g->rank, &sbytes,
               &rbytes);
    bool writes = kind == TR__COLL_BROADCAST                           ? root != g->rank
                  : kind == TR__COLL_REDUCE || kind == TR__COLL_GATHER ? root == g->rank
                                                                       : kind != TR__COLL_BARRIER;
    Written w;
    if (writes && recv && rbytes) {
        w.p = recv;
        w.n = rbytes;
    }
    return w;
}

// A rank that runs its op before every rank has posted one (TR__COLL_UNKNOWN) may still
// see it fail on a disagreement, after Gloo has written its output. Until it knows, it
// copies that output aside (kSaveChunk at a time, looking again between chunks), so that a
// disagreement can put it back; the copy costs only while it waits for the last rank to
// post, and the last rank never copies. An output over kSaveMax is not copied: its rank
// waits until every rank has posted (a wake-up) before Gloo moves a byte.
// Returns TR__COLL_AGREES or TR__COLL_DISAGREES once known, TR__COLL_UNKNOWN with *saved
// set once the copy is whole, or the code of the wait.
constexpr size_t kSaveChunk = 64 << 10;
constexpr size_t kSaveMax = 4 << 20;

int save_until_known(tr_group *g, const Written &w, int64_t deadline, bool *saved) {
    State *s = S(g);
    if (w.n <= kSaveMax && w.n > s->saved_cap) {
        char *p = (char *)realloc(s->saved.get(), w.n);
        if (p) {
            s->saved.release();
            s->saved.reset(p);
            s->saved_cap = w.n;
        }
    }
    if (w.n > s->saved_cap) return tr__coll_agree_wait(g, deadline); /* (or no memory) */
    for (size_t done = 0;; done += kSaveChunk) {
        int k = tr__coll_agree_known(g);
        if (k != TR__COLL_UNKNOWN) return k;
        if (done >= w.n) {
            *saved = true;
            return k;
        }
        std::memcpy(s->saved.get() + done, (char *)w.p + done, std::min(kSaveChunk, w.n - done));
    }
}

// A rank that fails before its part of an op ends (its own wait, or the op on scratch)
// leaves the ranks that run the op waiting: this rank's connections close so they fail
// now, not at their timeout. The group is unusable from here, whatever the code.
int give_up(tr_group *g, int rc) {
    S(g)->ctx.reset();
    g->broken = rc == TR_EINVAL ? TR_EINTERNAL : rc;
    snprintf(g->broken_msg, sizeof g->broken_msg, "%s", tr__last_error());
    return g->broken;
}

// w: what the op writes on this rank. A failed op leaves it as it was: a rank that learns
// of the disagreement before it runs the op runs it on scratch buffers (as a stand-in
// does); one that ran it on w with a copy aside puts the copy back.
template <typename F>
int checked(tr_group *g, uint32_t kind, tr_dtype dtype, tr_redop op, int root, size_t count,
            int64_t deadline, F run, Written w = {}, const void *send = nullptr,
            void *recv = nullptr) {
    if (!g->checks) return guarded(g, run);
    if (S(g)->span) {
        int rc = span_agree(g, kind, dtype, op, root, count, deadline, send, recv);
        return rc < 0 ? rc : rc == 1 ? 0 : guarded(g, run);
    }
    int k = tr__coll_agree_enter(g, kind, dtype, op, root, count);
    if (k != TR__COLL_DISAGREES) {
        bool saved = false;
        if (k == TR__COLL_UNKNOWN && w.n) k = save_until_known(g, w, deadline, &saved);
        if (k < 0) return give_up(g, k);
        int rc;
        if (k == TR__COLL_DISAGREES) {
            tr__coll_desc e = {};
            e.kind = kind;
            e.dtype = (uint32_t)dtype;
            e.op = (uint32_t)op;
            e.root = root;
            e.count = count;
            rc = guarded(g, [&] { return run_stand_in(g, e, deadline); });
            if (rc < 0) return give_up(g, rc);
        } else {
            rc = guarded(g, run);
        }
        if (!rc) rc = tr__coll_agree_leave(g, deadline);
        if (rc == TR_EINVAL && saved) std::memcpy(w.p, S(g)->saved.get(), w.n);
        return rc;
    }
    tr__coll_desc e;
    int rc = tr__coll_agree_stand_in(g, deadline, &e);
    if (rc == 1) rc = guarded(g, [&] { return run_stand_in(g, e, deadline); });
    if (rc < 0) return give_up(g, rc);
    rc = tr__coll_check_agree(g);
    return rc ? rc : tr__err(TR_EINTERNAL, "group '%s': a rank stood in, yet all agree", g->name);
}

// A two-level group's parts (after the whole group's mesh): this node's ranks join an shm
// group through the node (named by the declaration's nonce), and the leaders connect a
// Gloo context of their own (its keys under the group's, "L/").
int hier_init(tr_group *g, int64_t deadline) {
    State *s = S(g);
    int mine = s->node_of[g->rank], lw = 0, lr = 0, leader = -1;
    for (int r = 0; r < g->world; r++) {
        if (s->node_of[r] != mine) continue;
        if (leader < 0) leader = r;
        lr += r < g->rank;
        lw++;
    }
    if (lw > 1) {
        size_t pn = s->span_prefix.size();
        char lname[64];
        snprintf(lname, sizeof lname, "troupe-hier-%.16s",
                 pn > 17 ? s->span_prefix.c_str() + pn - 17 : "");
        int rc = tr__group_join(g->node_path, g->node->max_msg, lw, lr, "shm", lname,
                                timeout_of(deadline), &s->local);
        if (rc) return rc;
        tr__group_hide(s->local);          /* the group's own: no user finds it by name */
        tr__group_set_checks(s->local, 0); /* the whole group checked the op already */
    }
    if (g->rank == leader) {
        s->lstore.reset(new KvStore(g->node, s->span_prefix + "L/", true));
        s->lctx = std::make_shared<gloo::rendezvous::Context>(mine, s->n_nodes);
        s->lctx->setTimeout(ms_left(deadline));
        s->lctx->connectFullMesh(*s->lstore, s->dev);
    }
    return 0;
}

// Join (span: NULL for a group on one node, whose rendezvous is the node's registry's).
int start(tr_group *g, const tr__coll_span *span, int64_t deadline) {
    return guarded(g, [&]() -> int {
        auto *s = new State();
        g->impl = s;
        if (span) {
            char prefix[256];
            snprintf(prefix, sizeof prefix, "%s%s/%016llx/", TR__COLL_KV_PREFIX, g->name,
                     (unsigned long long)span->nonce);
            s->span = true;
            s->span_prefix = prefix;
            s->host = span->host;
            for (int r = 0; r < g->world; r++) { /* the ranks' nodes, in order of first rank */
                int k = 0;
                while (k < r && strcmp(span->nodes[k], span->nodes[r]) != 0)
                    k++;
                s->node_of[r] = k < r ? s->node_of[k] : (uint8_t)s->n_nodes++;
            }
            /* (one rank per node: nothing to do in two levels) */
            s->hier = span->hier && s->n_nodes < g->world;
        }
        s->store.reset(new KvStore(
            g->node, s->span ? s->span_prefix : std::string(TR__COLL_KV_PREFIX) + g->name + "/",
            s->span));
        // one node: loopback; across nodes: this rank's node's address in the cluster
        gloo::transport::tcp::attr attr(s->span ? s->host.c_str() : "127.0.0.1");
        // Gloo's I/O thread: at SCHED_IDLE on the rank's CPUs (place_io_threads)
        {
            Widened w;
            std::vector<long> before = thread_ids();
            s->dev = gloo::transport::tcp::CreateDevice(attr);
            place_io_threads(before, w);
        }
        s->ctx = std::make_shared<gloo::rendezvous::Context>(g->rank, g->world);
        s->ctx->setTimeout(ms_left(deadline));
        s->ctx->connectFullMesh(*s->store, s->dev);
        s->formed = true;
        s->sent.assign((size_t)g->world, 0);
        s->received.assign((size_t)g->world, 0);
        int rc = s->hier ? hier_init(g, deadline) : 0;
        if (!rc && span) {
            std::vector<std::string> peers;
            for (int r = 0; r < g->world; r++) {
                std::string a = span->nodes[r];
                if (s->node_of[r] == s->node_of[g->rank]) continue;
                bool seen = false;
                for (auto &p : peers)
                    seen = seen || p == a;
                if (!seen) peers.push_back(a);
            }
            s->watch.reset(new Watch(g->node_path, g->node->max_msg, peers));
        }
        return rc;
    });
}

int g_init(tr_group *g, int64_t deadline) {
    return start(g, nullptr, deadline);
}

int g_init_span(tr_group *g, const tr__coll_span *span, int64_t deadline) {
    return start(g, span, deadline);
}

void g_fini(tr_group *g) {
    /* a group across nodes: rank 0 clears its rendezvous keys (a dead rank's too); every
     * rank read them before the group formed */
    if (S(g)->span && g->rank == 0 && S(g)->formed)
        tr__kv_client_cluster(g->node, "del_prefix", S(g)->span_prefix.c_str(), nullptr, 0, nullptr,
                              nullptr);
    try {
        delete S(g);
    } catch (...) {
    }
    g->impl = nullptr;
}

int g_barrier(tr_group *g, int64_t deadline) {
    return checked(g, TR__COLL_BARRIER, TR_UINT8, TR_SUM, -1, 0, deadline,
                   [&] { return run_barrier(g, deadline); });
}

int g_allreduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                tr_redop op, int64_t deadline) {
    return checked(
        g, TR__COLL_ALLREDUCE, dtype, op, -1, count, deadline,
        [&] {
            return S(g)->hier ? run_hier_allreduce(g, send, recv, count, dtype, op, deadline)
                              : run_allreduce(g, send, recv, count, dtype, op, deadline);
        },
        written(g, TR__COLL_ALLREDUCE, recv, count, dtype, -1), send, recv);
}

int g_broadcast(tr_group *g, void *buf, size_t count, tr_dtype dtype, int root, int64_t deadline) {
    return checked(
        g, TR__COLL_BROADCAST, dtype, TR_SUM, root, count, deadline,
        [&] { return run_broadcast(g, buf, count, dtype, root, deadline); },
        written(g, TR__COLL_BROADCAST, buf, count, dtype, root));
}

int g_data_op(tr_group *g, const tr__coll_args *a, int64_t deadline) {
    return checked(
        g, (uint32_t)a->kind, a->dtype, a->op, a->root, a->count, deadline,
        [&] { return run_data_op(g, a, deadline); },
        written(g, (uint32_t)a->kind, a->recv, a->count, a->dtype, a->root));
}

// A point-to-point slot, unique per ordered pair and message; high bit apart from the
// tags Gloo's collectives use.
uint64_t p2p_slot(int src, int dst, int world, uint64_t n, int part) {
    return (1ull << 62) | ((uint64_t)(src * world + dst) << 40) | (n << 1) | (uint64_t)part;
}

// send: a 16-byte header (count, dtype), then the data; the receiver checks the header.
int g_send(tr_group *g, const void *buf, size_t count, tr_dtype dtype, int dst, int64_t deadline) {
    return guarded(g, [&]() -> int {
        State *s = S(g);
        uint64_t n = s->sent[(size_t)dst]++;
        uint64_t hdr[2] = {count, (uint64_t)dtype};
        auto h = s->ctx->createUnboundBuffer(hdr, sizeof hdr);
        h->send(dst, p2p_slot(g->rank, dst, g->world, n, 0));
        size_t bytes = count * tr__dtype_size(dtype);
        std::unique_ptr<gloo::transport::UnboundBuffer> d;
        if (bytes) {
            d = s->ctx->createUnboundBuffer((void *)buf, bytes);
            d->send(dst, p2p_slot(g->rank, dst, g->world, n, 1));
        }
        if (!h->waitSend(ms_left(deadline)) || (d && !d->waitSend(ms_left(deadline))))
            return tr__err(TR_ETIMEDOUT, "group '%s' (gloo): send to rank %d timed out", g->name,
                           dst);
        return 0;
    });
}

int g_recv(tr_group *g, void *buf, size_t count, tr_dtype dtype, int src, int64_t deadline) {
    return guarded(g, [&]() -> int {
        State *s = S(g);
        uint64_t n = s->received[(size_t)src]++;
        uint64_t hdr[2] = {0, 0};
        auto h = s->ctx->createUnboundBuffer(hdr, sizeof hdr);
        h->recv(src, p2p_slot(src, g->rank, g->world, n, 0));
        if (!h->waitRecv(ms_left(deadline)))
            return tr__err(TR_ETIMEDOUT, "group '%s' (gloo): recv from rank %d timed out", g->name,
                           src);
        size_t sent_bytes = hdr[0] * tr__dtype_size((tr_dtype)hdr[1]);
        bool ok = hdr[0] == count && hdr[1] == (uint64_t)dtype;
        if (sent_bytes) { /* take the data either way, so the pair stays in step */
            std::vector<char> sink;
            void *dst = buf;
            if (!ok) {
                sink.resize(sent_bytes);
                dst = sink.data();
            }
            auto d = s->ctx->createUnboundBuffer(dst, sent_bytes);
            d->recv(src, p2p_slot(src, g->rank, g->world, n, 1));
            if (!d->waitRecv(ms_left(deadline)))
                return tr__err(TR_ETIMEDOUT, "group '%s' (gloo): recv from rank %d timed out",
                               g->name, src);
        }
        if (!ok)
            return tr__err(TR_EINVAL,
                           "group '%s': rank %d sent %llu elements of dtype %llu, rank %d "
                           "expected %zu of dtype %d",
                           g->name, src, (unsigned long long)hdr[0], (unsigned long long)hdr[1],
                           g->rank, count, (int)dtype);
        return 0;
    });
}

} // namespace

// (C++17 has no designated initializers: every member, in the table's order, group.h)
extern "C" const tr__coll_backend_v2 tr__coll_gloo_v2 = {
    2,
    "gloo",
    g_init,
    g_fini,
    g_barrier,
    g_allreduce,
    g_broadcast,
    g_data_op,
    g_send,
    g_recv,
    TR__COLL_HOST_MEMORY, /* flags */
    nullptr,              /* init_devs */
    g_init_span,
    nullptr, /* devices */
    nullptr, /* multigpu */
    nullptr, /* set_stream */
    nullptr, /* synchronize */
    nullptr, /* set_single_copy */
};
