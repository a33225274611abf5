/* tests/nccl_test.cc - the nccl backend and device buffers on every backend.
 *
 * In the default build: the nccl backend and the GPU forms say they need the CUDA build.
 * In the CUDA build (--config=cuda): without a GPU, a join says so (TR_ERESOURCES) and
 * leaves nothing behind; with one, world-1 groups run every op and dtype against the
 * input, several communicators run at once, two ranks of one process on one GPU fail
 * (NCCL refuses a duplicate GPU) without hanging, the async and _multigpu forms, device
 * buffers through shm and gloo between two processes sharing the GPU. Two-rank nccl cases
 * (allreduce, broadcast, send/recv, a rank killed mid-op, graph nccl edges) run between
 * two actors: on two GPUs a GPU each; on one GPU both share it, each its own NCCL host
 * (a distinct NCCL_HOSTID set in its process), so NCCL joins them over its socket
 * transport: they exercise troupe's side and NCCL's network path, not P2P or NVLink.
 * Ran on an H100 (2026-11-27): collective/nccl/README.md. */
#include <gtest/gtest.h>

#include <string.h>

#include <algorithm>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_actors.h"
#include "troupe/dag.h"

#ifdef TR_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace {

class Nccl : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
        kv_before = status_field(rt, "kv_keys");
    }
    void TearDown() override {
        if (rt) tr_shutdown(rt);
    }
    void expect_nothing_left() {
        ::expect_nothing_left(rt, kv_before);
    }
    tr_runtime *rt = nullptr;
    int64_t kv_before = 0;
};

/* A join whose second rank never comes times out at the node's rendezvous, whatever the
 * backend (and in either build), and leaves nothing. */
TEST_F(Nccl, ARankThatNeverArrivesTimesTheJoinOut) {
    tr_group *g = nullptr;
    auto t0 = std::chrono::steady_clock::now();
    int rc = tr_group_join(rt, 2, 0, "nccl", "never", 1500, &g);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
#ifdef TR_WITH_CUDA
    EXPECT_EQ(rc, TR_ETIMEDOUT) << tr_last_error();
    EXPECT_GE(s, 1.4);
#else
    EXPECT_EQ(rc, TR_EINVAL); /* not built in: refused before any rendezvous */
#endif
    EXPECT_LT(s, 5.0);
    EXPECT_EQ(g, nullptr);
    expect_nothing_left();
}

tr_actor_id make_actor(tr_runtime *rt, double gpus) {
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.num_gpus = gpus;
    tr_actor_id a;
    EXPECT_EQ(tr_actor_create(rt, "Counter", &o, "c", 1, &a), 0) << tr_last_error();
    return a;
}

#ifndef TR_WITH_CUDA

TEST_F(Nccl, TheDefaultBuildSaysDeviceEdgesNeedTheCudaBuild) {
    tr_dag *g;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    tr_dag_node in, a;
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, make_actor(rt, 0), "echo", &in, 1, &a), 0);
    for (tr_dag_transport t : {TR_DAG_NCCL, TR_DAG_CUDA_IPC}) {
        EXPECT_EQ(tr_dag_set_transport(g, a, t), TR_EINVAL);
        EXPECT_NE(strstr(tr_last_error(), "CUDA build"), nullptr) << tr_last_error();
    }
    EXPECT_EQ(tr_ctx_reply_device(nullptr, nullptr, 0), TR_EINVAL);
    tr_dag_destroy(g);
}

TEST_F(Nccl, TheDefaultBuildSaysNcclNeedsTheCudaBuild) {
    tr_group *g = nullptr;
    EXPECT_EQ(tr_group_join(rt, 1, 0, "nccl", "n", 1000, &g), TR_EINVAL);
    EXPECT_NE(strstr(tr_last_error(), "--config=cuda"), nullptr) << tr_last_error();
    int dev = 0;
    EXPECT_EQ(tr_group_join_multigpu(rt, 1, 0, &dev, 1, "m", 1000, &g), TR_EINVAL);
    EXPECT_NE(strstr(tr_last_error(), "--config=cuda"), nullptr) << tr_last_error();
    ASSERT_EQ(tr_group_join(rt, 1, 0, "shm", "s", 5000, &g), 0) << tr_last_error();
    void *p = nullptr;
    EXPECT_EQ(tr_allreduce_multigpu(g, (const void *const *)&p, &p, 1, TR_INT32, TR_SUM, 1000),
              TR_EINVAL);
    EXPECT_EQ(tr_group_set_stream(g, nullptr), TR_EINVAL);
    EXPECT_EQ(tr_group_synchronize(g, 1000), 0); /* shm's ops are done when they return */
    tr_group_destroy(g);
    expect_nothing_left();
}

#else

int gpus() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

#define NEED_GPUS(k)                                                                               \
    do {                                                                                           \
        int have_ = gpus();                                                                        \
        if (have_ < (k))                                                                           \
            GTEST_SKIP() << "needs " << (k) << " CUDA device(s); this machine has " << have_       \
                         << ((k) > 1 ? " (NCCL refuses two ranks of one communicator on one GPU)"  \
                                     : "");                                                        \
    } while (0)

/* Two ranks of one NCCL communicator on one GPU: NCCL refuses them ("Duplicate GPU") unless
 * each says it is a host of its own (NCCL_HOSTID), and then they talk over its network
 * transport (sockets here) rather than P2P or shared memory. So on a one-GPU machine each
 * actor gets a distinct NCCL_HOSTID before its first NCCL call, and shares the GPU (0.5);
 * with two GPUs each has one, and NCCL picks its own transport. */
double gpus_per_rank() {
    return gpus() >= 2 ? 1 : 0.5;
}

void as_own_nccl_host(tr_runtime *rt, tr_actor_id a, int k) {
    if (gpus() >= 2) return;
    std::string kv = "NCCL_HOSTID=troupe-test-host-" + std::to_string(k);
    tr_ref r;
    ASSERT_EQ(tr_call(rt, a, "setenv", kv.data(), kv.size(), &r), 0) << tr_last_error();
    const void *d;
    size_t n;
    ASSERT_EQ(tr_get(rt, r, 30000, &d, &n), 0) << tr_last_error();
    EXPECT_EQ(std::string((const char *)d, n), "ok");
    tr_ref_release(rt, r);
}

/* Two actors to be the two ranks of an nccl group, each calling gpu_coll with
 * "NAME|2|rank|nccl|TAIL"; their calls' refs in calls. */
void two_ranks(tr_runtime *rt, const std::string &name, const std::string &tail,
               std::vector<tr_actor_id> &as, std::vector<tr_ref> &calls) {
    if (gpus() < 2)
        printf("one GPU: the two ranks are two NCCL hosts (NCCL_HOSTID) sharing it; this runs "
               "NCCL's network (socket) transport between them, not P2P, NVLink or SHM\n");
    as.resize(2);
    calls.resize(2);
    for (int r = 0; r < 2; r++) {
        as[r] = make_actor(rt, gpus_per_rank());
        as_own_nccl_host(rt, as[r], r);
    }
    for (int r = 0; r < 2; r++) {
        std::string arg = name + "|2|" + std::to_string(r) + "|nccl|" + tail;
        ASSERT_EQ(tr_call(rt, as[r], "gpu_coll", arg.data(), arg.size(), &calls[r]), 0);
    }
}

TEST_F(Nccl, WithoutAGpuTheJoinSaysSoAndLeavesNothing) {
    if (gpus() > 0) GTEST_SKIP() << "this machine has a GPU: the GPU cases cover the join";
    tr_group *g = nullptr;
    EXPECT_EQ(tr_group_join(rt, 1, 0, "nccl", "nogpu", 5000, &g), TR_ERESOURCES);
    EXPECT_NE(strstr(tr_last_error(), "CUDA device"), nullptr) << tr_last_error();
    EXPECT_EQ(g, nullptr);
    /* the CPU backends still work in the CUDA build, host buffers as before */
    ASSERT_EQ(tr_group_join(rt, 1, 0, "shm", "host", 5000, &g), 0) << tr_last_error();
    int32_t v[3] = {1, 2, 3};
    EXPECT_EQ(tr_allreduce(g, v, v, 3, TR_INT32, TR_SUM, 1000), 0);
    EXPECT_EQ(v[2], 3);
    EXPECT_EQ(tr_group_set_stream(g, nullptr), TR_EINVAL);
    tr_group_destroy(g);
    expect_nothing_left();
}

/* count elements of dtype whose values stay finite and exact under one rank's reduction */
std::vector<uint8_t> values(tr_dtype dt, size_t count, int seed) {
    size_t esz = tr_dtype_size(dt);
    std::vector<uint8_t> v(count * esz);
    for (size_t i = 0; i < count; i++) {
        uint8_t *p = &v[i * esz];
        int k = (int)((i * 7 + (size_t)seed) % 1000);
        switch (dt) {
        case TR_FLOAT16: {
            uint16_t b = (uint16_t)(0x3C00 + k % 512);
            memcpy(p, &b, 2);
            break;
        }
        case TR_BFLOAT16: {
            uint16_t b = (uint16_t)(0x3F80 + k % 128);
            memcpy(p, &b, 2);
            break;
        }
        case TR_FLOAT32: {
            float f = (float)k - 500.0f;
            memcpy(p, &f, 4);
            break;
        }
        case TR_FLOAT64: {
            double d = k * 0.25 - 100.0;
            memcpy(p, &d, 8);
            break;
        }
        default:
            for (size_t b = 0; b < esz; b++)
                p[b] = (uint8_t)(k + (int)b * 13);
        }
    }
    return v;
}

struct Dev {
    void *p = nullptr;
    explicit Dev(size_t n) {
        EXPECT_EQ(cudaMalloc(&p, n ? n : 1), cudaSuccess);
    }
    ~Dev() {
        cudaFree(p);
    }
    void put(const std::vector<uint8_t> &h) {
        EXPECT_EQ(cudaMemcpy(p, h.data(), h.size(), cudaMemcpyHostToDevice), cudaSuccess);
    }
    std::vector<uint8_t> get(size_t n) {
        std::vector<uint8_t> h(n);
        EXPECT_EQ(cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
        return h;
    }
};

/* With one rank every op's output is its input: each op, dtype, reduction and count, out
 * of place and in place, against the bytes put in. */
TEST_F(Nccl, EveryOpAndDtypeOnOneGpuAgreesWithTheReference) {
    NEED_GPUS(1);
    tr_group *g = nullptr;
    ASSERT_EQ(tr_group_join(rt, 1, 0, "nccl", "one", 30000, &g), 0) << tr_last_error();
    const tr_dtype dts[] = {TR_INT8,    TR_UINT8,    TR_INT32,   TR_INT64,
                            TR_FLOAT16, TR_BFLOAT16, TR_FLOAT32, TR_FLOAT64};
    int checked = 0;
    for (tr_dtype dt : dts)
        for (size_t count : {(size_t)0, (size_t)1, (size_t)1001, (size_t)(1 << 18)}) {
            size_t n = count * tr_dtype_size(dt);
            auto in = values(dt, count, (int)dt);
            Dev s(n), r(n);
            for (int op = TR_SUM; op <= TR_AVG; op++) {
                s.put(in);
                /* (signed integers' average: NCCL's sum, then troupe's kernel divides) */
                int rc = tr_allreduce(g, s.p, r.p, count, dt, (tr_redop)op, 10000);
                ASSERT_EQ(rc, 0) << tr_last_error();
                EXPECT_EQ(r.get(n), in) << "allreduce dtype " << dt << " op " << op;
                ASSERT_EQ(tr_allreduce(g, s.p, s.p, count, dt, (tr_redop)op, 10000), 0);
                EXPECT_EQ(s.get(n), in) << "in place";
                ASSERT_EQ(tr_reduce(g, s.p, r.p, count, dt, (tr_redop)op, 0, 10000), 0);
                EXPECT_EQ(r.get(n), in) << "reduce";
                ASSERT_EQ(tr_reduce_scatter(g, s.p, r.p, count, dt, (tr_redop)op, 10000), 0);
                EXPECT_EQ(r.get(n), in) << "reduce_scatter";
                checked += 4;
            }
            s.put(in);
            ASSERT_EQ(tr_broadcast(g, s.p, count, dt, 0, 10000), 0) << tr_last_error();
            EXPECT_EQ(s.get(n), in) << "broadcast";
            ASSERT_EQ(tr_allgather(g, s.p, r.p, count, dt, 10000), 0) << tr_last_error();
            EXPECT_EQ(r.get(n), in) << "allgather";
            ASSERT_EQ(tr_gather(g, s.p, r.p, count, dt, 0, 10000), 0) << tr_last_error();
            EXPECT_EQ(r.get(n), in) << "gather";
            ASSERT_EQ(tr_scatter(g, s.p, r.p, count, dt, 0, 10000), 0) << tr_last_error();
            EXPECT_EQ(r.get(n), in) << "scatter";
            ASSERT_EQ(tr_alltoall(g, s.p, r.p, count, dt, 10000), 0) << tr_last_error();
            EXPECT_EQ(r.get(n), in) << "alltoall";
            checked += 5;
        }
    EXPECT_EQ(tr_barrier(g, 10000), 0) << tr_last_error();
    EXPECT_EQ(checked, 8 * 4 * (5 * 4 + 5));
    tr_group_destroy(g);
    expect_nothing_left();
}

TEST_F(Nccl, SeveralCommunicatorsRunAtOnce) {
    NEED_GPUS(1);
    std::vector<std::thread> ts;
    std::vector<std::string> errs(4);
    for (int k = 0; k < 4; k++)
        ts.emplace_back([&, k] {
            tr_group *g = nullptr;
            std::string name = "many" + std::to_string(k);
            if (tr_group_join(rt, 1, 0, "nccl", name.c_str(), 30000, &g)) {
                errs[k] = std::string("init: ") + tr_last_error();
                return;
            }
            std::vector<float> h(4096);
            Dev d(h.size() * 4);
            for (int it = 0; it < 200 && errs[k].empty(); it++) {
                for (size_t i = 0; i < h.size(); i++)
                    h[i] = (float)(k * 1000 + it + (int)i);
                EXPECT_EQ(cudaMemcpy(d.p, h.data(), h.size() * 4, cudaMemcpyHostToDevice),
                          cudaSuccess);
                if (tr_allreduce(g, d.p, d.p, h.size(), TR_FLOAT32, TR_MAX, 10000))
                    errs[k] = std::string("allreduce: ") + tr_last_error();
                std::vector<float> back(h.size());
                cudaMemcpy(back.data(), d.p, h.size() * 4, cudaMemcpyDeviceToHost);
                if (errs[k].empty() && back != h) errs[k] = "wrong result";
            }
            tr_group_destroy(g);
        });
    for (auto &t : ts)
        t.join();
    for (auto &e : errs)
        EXPECT_EQ(e, "");
    expect_nothing_left();
}

/* Two ranks of one communicator: on one GPU NCCL refuses the duplicate, and both joins
 * fail within their timeout; on two they allreduce. */
TEST_F(Nccl, TwoRanksFailCleanlyOnOneGpuAndAllreduceOnTwo) {
    NEED_GPUS(1);
    int n = gpus();
    std::vector<int> rcs(2, 1);
    std::vector<std::string> msgs(2);
    std::vector<std::thread> ts;
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < 2; r++)
        ts.emplace_back([&, r] {
            cudaSetDevice(n >= 2 ? r : 0);
            tr_group *g = nullptr;
            rcs[r] = tr_group_join(rt, 2, r, "nccl", "pair", 20000, &g);
            msgs[r] = rcs[r] ? tr_last_error() : "";
            if (!rcs[r]) {
                std::vector<int32_t> h(1000, r + 1);
                Dev d(4000);
                d.put(std::vector<uint8_t>((uint8_t *)h.data(), (uint8_t *)h.data() + 4000));
                rcs[r] = tr_allreduce(g, d.p, d.p, 1000, TR_INT32, TR_SUM, 20000);
                auto back = d.get(4000);
                if (!rcs[r] && ((int32_t *)back.data())[999] != 3) rcs[r] = -100;
                tr_group_destroy(g);
            }
        });
    for (auto &t : ts)
        t.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 45.0);
    for (int r = 0; r < 2; r++) {
        if (n >= 2)
            EXPECT_EQ(rcs[r], 0) << msgs[r];
        else
            EXPECT_NE(rcs[r], 0) << "rank " << r << " joined a second rank on the same GPU";
        printf("rank %d: %s\n", r, msgs[r].c_str());
    }
    if (n < 2) { /* NCCL's refusal, and how to get past it */
        EXPECT_NE((msgs[0] + msgs[1]).find("NCCL_HOSTID"), std::string::npos) << msgs[0];
    }
    expect_nothing_left();
}

TEST_F(Nccl, TheAsyncFormEnqueuesOnTheCallersStreamAndSynchronizes) {
    NEED_GPUS(1);
    tr_group *g = nullptr;
    ASSERT_EQ(tr_group_join(rt, 1, 0, "nccl", "async", 30000, &g), 0) << tr_last_error();
    cudaStream_t st;
    ASSERT_EQ(cudaStreamCreate(&st), cudaSuccess);
    ASSERT_EQ(tr_group_set_stream(g, st), 0);
    const size_t count = 1 << 20;
    std::vector<float> h(count, 2.5f);
    Dev d(count * 4);
    cudaMemcpy(d.p, h.data(), count * 4, cudaMemcpyHostToDevice);
    for (int i = 0; i < 200; i++) /* more than the watchdog's ring: the oldest is awaited */
        ASSERT_EQ(tr_allreduce(g, d.p, d.p, count, TR_FLOAT32, TR_SUM, 20000), 0)
            << tr_last_error();
    EXPECT_EQ(tr_group_synchronize(g, 20000), 0) << tr_last_error();
    EXPECT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    std::vector<float> back(count);
    cudaMemcpy(back.data(), d.p, count * 4, cudaMemcpyDeviceToHost);
    EXPECT_EQ(back, h);
    ASSERT_EQ(tr_group_set_stream(g, nullptr), 0);
    EXPECT_EQ(tr_barrier(g, 10000), 0) << tr_last_error();
    tr_group_destroy(g);
    cudaStreamDestroy(st);
    expect_nothing_left();
}

TEST_F(Nccl, MultiGpuFormsDriveEveryLocalDevice) {
    NEED_GPUS(1);
    int nd = gpus() >= 2 ? 2 : 1, devs[2] = {0, 1};
    tr_group *g = nullptr;
    ASSERT_EQ(tr_group_join_multigpu(rt, 1, 0, devs, nd, "multi", 30000, &g), 0) << tr_last_error();
    const size_t count = 1000;
    std::vector<Dev *> s, r;
    std::vector<void *> sp, rp;
    for (int i = 0; i < nd; i++) {
        cudaSetDevice(devs[i]);
        s.push_back(new Dev(count * 4 * nd));
        r.push_back(new Dev(count * 4 * nd));
        std::vector<int32_t> h(count * nd);
        for (size_t k = 0; k < h.size(); k++)
            h[k] = (i + 1) * (int32_t)k;
        s[i]->put(std::vector<uint8_t>((uint8_t *)h.data(), (uint8_t *)(h.data() + h.size())));
        sp.push_back(s[i]->p);
        rp.push_back(r[i]->p);
    }
    cudaSetDevice(0);
    ASSERT_EQ(tr_allreduce_multigpu(g, sp.data(), rp.data(), count, TR_INT32, TR_SUM, 10000), 0)
        << tr_last_error();
    for (int i = 0; i < nd; i++) {
        auto b = r[i]->get(count * 4);
        EXPECT_EQ(((int32_t *)b.data())[7], nd * (nd + 1) / 2 * 7) << "device " << i;
    }
    ASSERT_EQ(tr_allgather_multigpu(g, sp.data(), rp.data(), count, TR_INT32, 10000), 0)
        << tr_last_error();
    for (int i = 0; i < nd; i++) {
        auto b = r[i]->get(count * 4 * nd);
        for (int j = 0; j < nd; j++)
            EXPECT_EQ(((int32_t *)b.data())[j * count + 5], (j + 1) * 5);
    }
    ASSERT_EQ(tr_broadcast_multigpu(g, sp.data(), count, TR_INT32, 0, nd - 1, 10000), 0)
        << tr_last_error();
    for (int i = 0; i < nd; i++) {
        auto b = s[i]->get(count * 4);
        EXPECT_EQ(((int32_t *)b.data())[9], nd * 9);
    }
    EXPECT_EQ(tr_allreduce(g, sp[0], rp[0], count, TR_INT32, TR_SUM, 1000), nd > 1 ? TR_EINVAL : 0);
    tr_group_destroy(g);
    for (int i = 0; i < nd; i++) {
        delete s[i];
        delete r[i];
    }
    expect_nothing_left();
}

/* Device buffers on the CPU backends: two actors sharing the GPU (0.5 each), each in its
 * own process, allreduce and broadcast device memory through shm and through gloo. */
TEST_F(Nccl, DeviceBuffersGoThroughShmAndGlooBetweenTwoProcesses) {
    NEED_GPUS(1);
    for (const char *backend : {"shm", "gloo"}) {
        std::vector<tr_actor_id> as(2);
        std::vector<tr_ref> calls(2);
        for (int r = 0; r < 2; r++) {
            tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
            o.num_gpus = 0.5;
            ASSERT_EQ(tr_actor_create(rt, "Counter", &o, "c", 1, &as[r]), 0) << tr_last_error();
            std::string arg = std::string("dev_") + backend + "|2|" + std::to_string(r) + "|" +
                              backend + "|300001|0";
            ASSERT_EQ(tr_call(rt, as[r], "gpu_coll", arg.data(), arg.size(), &calls[r]), 0);
        }
        for (int r = 0; r < 2; r++) {
            const void *d;
            size_t n;
            ASSERT_EQ(tr_get(rt, calls[r], 60000, &d, &n), 0) << tr_last_error();
            EXPECT_EQ(std::string((const char *)d, n), "ok") << backend << " rank " << r;
            tr_ref_release(rt, calls[r]);
            tr_actor_kill(rt, as[r], 1);
        }
    }
    expect_nothing_left();
}

/* Two actors, each a rank of an nccl group (two GPUs, or two NCCL hosts on one):
 * allreduce, broadcast, send and recv of device memory, checked on the host. */
TEST_F(Nccl, TwoActorsAllreduceBroadcastSendAndRecvOverNccl) {
    NEED_GPUS(1);
    std::vector<tr_actor_id> as;
    std::vector<tr_ref> calls;
    two_ranks(rt, "dev_nccl", "300001|0", as, calls);
    if (HasFatalFailure()) return;
    for (int r = 0; r < 2; r++) {
        const void *d;
        size_t n;
        ASSERT_EQ(tr_get(rt, calls[r], 90000, &d, &n), 0) << tr_last_error();
        EXPECT_EQ(std::string((const char *)d, n), "ok") << "rank " << r;
        tr_ref_release(rt, calls[r]);
        tr_actor_kill(rt, as[r], 1);
    }
    expect_nothing_left();
}

TEST_F(Nccl, ARankKilledMidOpFailsTheOtherWithoutHanging) {
    NEED_GPUS(1);
    std::vector<tr_actor_id> as;
    std::vector<tr_ref> calls;
    two_ranks(rt, "kill", "0|1", as, calls);
    if (HasFatalFailure()) return;
    std::this_thread::sleep_for(std::chrono::seconds(3));
    ASSERT_EQ(tr_actor_kill(rt, as[1], 1), 0);
    const void *d;
    size_t n;
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(tr_get(rt, calls[0], 30000, &d, &n), 0) << tr_last_error();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string got((const char *)d, n);
    EXPECT_NE(got.find("PEER_DIED"), std::string::npos) << got;
    EXPECT_LT(s, 10.0);
    tr_ref_release(rt, calls[0]);
    tr_ref_release(rt, calls[1]);
    tr_actor_kill(rt, as[0], 1);
    expect_nothing_left();
}

/* Device edges are checked as the graph compiles, before any actor is asked: an edge
 * to an output, to the writer's own actor, or nccl sends and receives that would wait for
 * each other; a sound graph whose actors have no GPU fails to attach, saying so. */
TEST_F(Nccl, GraphDeviceEdgesAreCheckedAtCompile) {
    tr_actor_id p = make_actor(rt, 0), q = make_actor(rt, 0), c = make_actor(rt, 0);
    struct Case {
        const char *what;
        int shape;
        int want;
        const char *says;
    } cases[] = {
        {"an output", 0, TR_EINVAL, "is an output"},
        {"its own actor", 1, TR_EINVAL, "same actor"},
        {"a deadlock", 2, TR_EINVAL, "would wait for each other"},
        {"no GPU", 3, TR_ERESOURCES, "has no GPU"},
    };
    for (const Case &k : cases) {
        tr_dag *g;
        ASSERT_EQ(tr_dag_create(rt, &g), 0);
        tr_dag_node in, a, b, x, d;
        ASSERT_EQ(tr_dag_input(g, &in), 0);
        ASSERT_EQ(tr_dag_bind(g, p, "dev_fill", &in, 1, &a), 0);
        ASSERT_EQ(tr_dag_set_transport(g, a, TR_DAG_NCCL), 0);
        if (k.shape == 0) {
            ASSERT_EQ(tr_dag_output(g, &a, 1), 0);
        } else if (k.shape == 1) {
            ASSERT_EQ(tr_dag_bind(g, p, "dev_sum", &a, 1, &d), 0);
            ASSERT_EQ(tr_dag_output(g, &d, 1), 0);
        } else {
            /* p: a (nccl to c), then b; q: x after b; c reads x and a: in that order p waits
             * at a for c, c at x for q, q for b behind a */
            ASSERT_EQ(tr_dag_bind(g, p, "add", &in, 1, &b), 0);
            ASSERT_EQ(tr_dag_bind(g, q, "add", &b, 1, &x), 0);
            tr_dag_node ins[2] = {x, a};
            if (k.shape == 3) std::swap(ins[0], ins[1]);
            ASSERT_EQ(tr_dag_bind(g, c, "dev_sum", ins, 2, &d), 0);
            ASSERT_EQ(tr_dag_output(g, &d, 1), 0);
        }
        tr_dag_options o = TR_DAG_OPTIONS_INIT;
        o.attach_timeout_ms = 5000;
        EXPECT_EQ(tr_dag_compile(g, &o), k.want) << k.what << ": " << tr_last_error();
        EXPECT_NE(strstr(tr_last_error(), k.says), nullptr) << k.what << ": " << tr_last_error();
        tr_dag_destroy(g);
    }
    expect_nothing_left();
}

/* A device value from an actor: a classic call gets it on the host, a graph's shm edge
 * in its slot, a cuda_ipc edge (two actors sharing the GPU) and an nccl edge (two GPUs)
 * as device memory in the reader. */
void run_device_graph(tr_runtime *rt, tr_dag_transport t, double gpus) {
    tr_actor_id p = make_actor(rt, gpus), c = make_actor(rt, gpus);
    if (t == TR_DAG_NCCL) {
        as_own_nccl_host(rt, p, 0);
        as_own_nccl_host(rt, c, 1);
    }
    tr_ref r;
    int64_t k = 5;
    ASSERT_EQ(tr_call(rt, p, "dev_fill", &k, sizeof k, &r), 0);
    const void *v;
    size_t n;
    ASSERT_EQ(tr_get(rt, r, 30000, &v, &n), 0) << tr_last_error();
    ASSERT_EQ(n, 4000u);
    EXPECT_EQ(((const int32_t *)v)[999], 5 + 999);
    tr_ref_release(rt, r);
    tr_dag *g;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    tr_dag_node in, a, s;
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, p, "dev_fill", &in, 1, &a), 0);
    ASSERT_EQ(tr_dag_set_transport(g, a, t), 0);
    ASSERT_EQ(tr_dag_bind(g, c, "dev_sum", &a, 1, &s), 0);
    tr_dag_node outs[2] = {s, a};
    ASSERT_EQ(tr_dag_output(g, outs, t == TR_DAG_SHM ? 2 : 1), 0);
    ASSERT_EQ(tr_dag_compile(g, nullptr), 0) << tr_last_error();
    for (int64_t e = 0; e < 100; e++) {
        uint64_t x;
        ASSERT_EQ(tr_dag_execute(g, &e, sizeof e, &x), 0) << tr_last_error();
        ASSERT_EQ(tr_dag_get(g, x, 0, 30000, &v, &n), 0) << tr_last_error();
        ASSERT_EQ(n, 8u);
        EXPECT_EQ(*(const int64_t *)v, 1000 * e + 499500) << "execution " << e;
        if (t == TR_DAG_SHM) { /* the device reply, copied into the output's slot */
            ASSERT_EQ(tr_dag_get(g, x, 1, 30000, &v, &n), 0) << tr_last_error();
            ASSERT_EQ(n, 4000u);
            EXPECT_EQ(((const int32_t *)v)[3], (int32_t)e + 3);
        }
        ASSERT_EQ(tr_dag_release(g, x), 0);
    }
    tr_dag_destroy(g);
    tr_actor_kill(rt, p, 1);
    tr_actor_kill(rt, c, 1);
}

TEST_F(Nccl, DeviceValuesCrossGraphEdgesByShmAndCudaIpc) {
    NEED_GPUS(1);
    run_device_graph(rt, TR_DAG_SHM, 0.5);
    run_device_graph(rt, TR_DAG_CUDA_IPC, 0.5);
    expect_nothing_left();
}

/* Two actors sharing the only GPU, no NCCL_HOSTID: NCCL refuses the graph's nccl edge as
 * the graph attaches; the compile fails saying why, well before its timeout, and leaves
 * nothing. */
TEST_F(Nccl, NcclEdgesBetweenActorsSharingTheGpuFailTheCompileSayingWhy) {
    NEED_GPUS(1);
    if (gpus() >= 2) GTEST_SKIP() << "two GPUs: the actors get one each";
    tr_actor_id p = make_actor(rt, 0.5), c = make_actor(rt, 0.5);
    tr_dag *g;
    ASSERT_EQ(tr_dag_create(rt, &g), 0);
    tr_dag_node in, a, s;
    ASSERT_EQ(tr_dag_input(g, &in), 0);
    ASSERT_EQ(tr_dag_bind(g, p, "dev_fill", &in, 1, &a), 0);
    ASSERT_EQ(tr_dag_set_transport(g, a, TR_DAG_NCCL), 0);
    ASSERT_EQ(tr_dag_bind(g, c, "dev_sum", &a, 1, &s), 0);
    ASSERT_EQ(tr_dag_output(g, &s, 1), 0);
    tr_dag_options o = TR_DAG_OPTIONS_INIT;
    o.attach_timeout_ms = 60000;
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_NE(tr_dag_compile(g, &o), 0);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("compile: %s\n", tr_last_error());
    EXPECT_NE(strstr(tr_last_error(), "NCCL_HOSTID"), nullptr) << tr_last_error();
    EXPECT_LT(secs, 30.0);
    tr_dag_destroy(g);
    tr_actor_kill(rt, p, 1);
    tr_actor_kill(rt, c, 1);
    expect_nothing_left();
}

TEST_F(Nccl, DeviceValuesCrossGraphEdgesByNccl) {
    NEED_GPUS(1);
    run_device_graph(rt, TR_DAG_NCCL, gpus_per_rank());
    expect_nothing_left();
}

#endif

} // namespace
