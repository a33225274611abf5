/* tests/gpu_test.cc - GPU placement, without a GPU: the node's capacity given by num_gpus
 * (as on a GPU machine it is detected), actors given whole GPUs or shares of one, their
 * workers seeing only those (CUDA_VISIBLE_DEVICES), and a machine with no driver saying
 * 0 GPUs. */
#include <gtest/gtest.h>

#include <stdlib.h>

#include <string>

#include "tests/test_actors.h"

namespace {

struct Placed {
    int rc;
    tr_actor_id id;
};

Placed create(tr_runtime *rt, double gpus, double cpus = 0) {
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.num_gpus = gpus;
    o.num_cpus = cpus;
    Placed p;
    p.rc = tr_actor_create(rt, "Counter", &o, "g", 1, &p.id);
    return p;
}

std::string seen(tr_runtime *rt, tr_actor_id a) {
    tr_ref r;
    const void *d;
    size_t n;
    if (tr_call(rt, a, "gpus", nullptr, 0, &r)) return std::string("call: ") + tr_last_error();
    std::string out = tr_get(rt, r, 10000, &d, &n) ? std::string("get: ") + tr_last_error()
                                                   : std::string((const char *)d, n);
    tr_ref_release(rt, r);
    return out;
}

/* The tests own the variable: whatever the runner's environment says */
class Gpus : public ::testing::Test {
  protected:
    void SetUp() override {
        unsetenv("CUDA_VISIBLE_DEVICES");
    }
    void TearDown() override {
        if (rt) tr_shutdown(rt);
        tr_config_destroy(cfg);
        unsetenv("CUDA_VISIBLE_DEVICES");
    }
    tr_runtime *start(std::initializer_list<std::pair<const char *, const char *>> kv) {
        cfg = test_config_with(kv);
        EXPECT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
        return rt;
    }
    tr_config *cfg = nullptr;
    tr_runtime *rt = nullptr;
};

TEST_F(Gpus, ActorsGetWholeGpusOrSharesAndSeeOnlyThose) {
    ASSERT_TRUE(start({{"num_gpus", "2"}}));
    Placed a = create(rt, 1), b = create(rt, 1);
    ASSERT_EQ(a.rc, 0);
    ASSERT_EQ(b.rc, 0);
    EXPECT_EQ(seen(rt, a.id), "0|0");
    EXPECT_EQ(seen(rt, b.id), "1|1");
    tr_actor_details d = TR_ACTOR_DETAILS_INIT;
    ASSERT_EQ(tr_actor_info(rt, b.id, &d), 0);
    EXPECT_STREQ(d.gpus, "1");
    Placed none = create(rt, 0);
    ASSERT_EQ(none.rc, 0);
    EXPECT_EQ(seen(rt, none.id), "|") << "asked for none: sees none";
    EXPECT_EQ(create(rt, 1.5).rc, TR_EINVAL) << "more than one: whole GPUs only";
    EXPECT_EQ(create(rt, 3).rc, TR_ERESOURCES) << "more than the node has";
    Placed c = create(rt, 1); /* waits for a GPU */
    ASSERT_EQ(c.rc, 0);
    EXPECT_EQ(tr_actor_wait_ready(rt, c.id, 300), TR_ETIMEDOUT);
    ASSERT_EQ(tr_actor_kill(rt, a.id, 1), 0);
    ASSERT_EQ(tr_actor_wait_ready(rt, c.id, 10000), 0) << tr_last_error();
    EXPECT_EQ(seen(rt, c.id), "0|0") << "the GPU the killed actor had";
    ASSERT_EQ(tr_actor_kill(rt, b.id, 1), 0);
    Placed h1 = create(rt, 0.5), h2 = create(rt, 0.5);
    ASSERT_EQ(h1.rc, 0);
    ASSERT_EQ(h2.rc, 0);
    EXPECT_EQ(seen(rt, h1.id), "1|1");
    EXPECT_EQ(seen(rt, h2.id), "1|1") << "two halves share one device";
    /* a core and a GPU: every variable the worker is given at once (TROUPE_CPUS,
     * CUDA_VISIBLE_DEVICES, TROUPE_GPUS) */
    ASSERT_EQ(tr_actor_kill(rt, c.id, 1), 0);
    Placed both = create(rt, 1, 1);
    ASSERT_EQ(both.rc, 0);
    EXPECT_EQ(seen(rt, both.id), "0|0");
    tr_actor_details d2 = TR_ACTOR_DETAILS_INIT;
    ASSERT_EQ(tr_actor_info(rt, both.id, &d2), 0);
    EXPECT_STREQ(d2.gpus, "0");
}

/* A node started with CUDA_VISIBLE_DEVICES of its own: no more devices than it names,
 * given out by those names, each worker's environment holding the variable once. */
TEST_F(Gpus, TheNodesOwnVisibleDevicesAreWhatItGives) {
    setenv("CUDA_VISIBLE_DEVICES", "7,GPU-5d2e", 1);
    ASSERT_TRUE(start({{"num_gpus", "3"}}));
    EXPECT_EQ(status_field(rt, "gpus_total"), 2) << "it names two";
    Placed a = create(rt, 1), b = create(rt, 1);
    ASSERT_EQ(a.rc, 0);
    ASSERT_EQ(b.rc, 0);
    EXPECT_EQ(seen(rt, a.id), "7|7");
    EXPECT_EQ(seen(rt, b.id), "GPU-5d2e|GPU-5d2e");
    EXPECT_EQ(create(rt, 3).rc, TR_ERESOURCES);
    Placed none = create(rt, 0);
    ASSERT_EQ(none.rc, 0);
    EXPECT_EQ(seen(rt, none.id), "|") << "none, not the node's list";
}

/* No driver here: the node counts 0 GPUs (and logs why) instead of failing. */
TEST_F(Gpus, NoDriverMeansNoGpus) {
    ASSERT_TRUE(start({}));
    if (status_field(rt, "gpus_total") > 0) {
        printf("skipped: this machine has GPUs\n");
        return;
    }
    EXPECT_EQ(create(rt, 1).rc, TR_ERESOURCES);
    EXPECT_EQ(create(rt, 0.5).rc, TR_ERESOURCES);
    Placed none = create(rt, 0);
    ASSERT_EQ(none.rc, 0);
    EXPECT_EQ(seen(rt, none.id), "|(unset)") << "a node without GPUs leaves the variable alone";
}

} // namespace
