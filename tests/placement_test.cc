/* tests/placement_test.cc - placement groups (tr_placement_group_*) on one node, with real
 * worker processes: a node of 4 CPUs and 2 (counted, not real) GPUs reserves bundles
 * atomically and refuses what does not fit; a group waits PENDING with its reason and is
 * placed when resources free up; actors and tasks scheduled into a bundle get the
 * bundle's resources and its GPU devices; removing a group kills its actors and gives its
 * resources back (tr_node_status shows it); bad input gets clear errors. */
#include <gtest/gtest.h>
#include <string.h>

#include <string>

#include "tests/test_actors.h"

namespace {

class PlacementTest : public ::testing::Test {
  protected:
    void SetUp() override {
        cfg = test_config_with({{"num_cpus", "4"},
                                {"num_gpus", "2"},
                                {"resources", "slot=2"},
                                {"cpu_binding", "none"}});
        ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
    }
    void TearDown() override {
        tr_shutdown(rt);
        tr_config_destroy(cfg);
    }
    std::string status() {
        char *j = nullptr;
        EXPECT_EQ(tr_node_status(rt, &j), 0) << tr_last_error();
        std::string s = j ? j : "";
        tr_free(j);
        return s;
    }
    /* The node's resources_available (or _total) of name; -1 if it lists none. */
    double res(const char *name, const char *which = "resources_available") {
        std::string s = status();
        size_t at = s.find(std::string("\"") + which + "\":{");
        if (at == std::string::npos) return -2;
        size_t end = s.find('}', at);
        std::string obj = s.substr(at, end - at);
        std::string key = std::string("\"") + name + "\":";
        size_t k = obj.find(key);
        return k == std::string::npos ? -1 : atof(obj.c_str() + k + key.size());
    }
    tr_pg_id make(std::initializer_list<tr_bundle> bs, int strategy = TR_PG_PACK,
                  const char *name = nullptr) {
        std::vector<tr_bundle> v(bs);
        tr_pg_id pg;
        EXPECT_EQ(tr_placement_group_create(rt, v.data(), v.size(), strategy, name, &pg), 0)
            << tr_last_error();
        return pg;
    }
    static tr_bundle bundle(double cpus, double gpus = 0) {
        tr_bundle b = TR_BUNDLE_INIT;
        b.num_cpus = cpus;
        b.num_gpus = gpus;
        return b;
    }
    tr_pg_info info(tr_pg_id pg) {
        tr_pg_info i = TR_PG_INFO_INIT;
        EXPECT_EQ(tr_placement_group_info(rt, pg, &i), 0) << tr_last_error();
        return i;
    }
    int actor_in(tr_pg_id pg, int index, double cpus, double gpus, tr_actor_id *out) {
        tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
        o.num_cpus = cpus;
        o.num_gpus = gpus;
        o.placement_group = pg;
        o.bundle_index = index;
        return tr_actor_create(rt, "Counter", &o, "pg", 2, out);
    }
    tr_actor_details details(tr_actor_id a) {
        tr_actor_details d = TR_ACTOR_DETAILS_INIT;
        EXPECT_EQ(tr_actor_info(rt, a, &d), 0) << tr_last_error();
        return d;
    }
    tr_config *cfg = nullptr;
    tr_runtime *rt = nullptr;
};

TEST_F(PlacementTest, ReservesAtomicallyAndWaitsForResources) {
    ASSERT_EQ(res("CPU"), 4);
    tr_pg_id a = make({bundle(2), bundle(1)});
    ASSERT_EQ(tr_placement_group_wait(rt, a, 10000), 0) << tr_last_error();
    tr_pg_info i = info(a);
    EXPECT_EQ(i.state, TR_PG_CREATED);
    EXPECT_EQ(i.n_bundles, 2);
    EXPECT_STREQ(i.bundles, "CPU=2;CPU=1");
    EXPECT_STREQ(i.reason, "");
    EXPECT_STREQ(i.node, tr_runtime_address(rt));
    EXPECT_EQ(res("CPU"), 1); /* 3 reserved */
    char hex[33];
    tr_pg_id_str(a, hex);
    std::string tag(hex, 8);
    EXPECT_EQ(res(("CPU_g" + tag + "_0").c_str()), 2);
    EXPECT_EQ(res(("CPU_g" + tag + "_1").c_str()), 1);
    EXPECT_EQ(res(("CPU_g" + tag).c_str()), 3);
    EXPECT_EQ(res(("CPU_g" + tag).c_str(), "resources_total"), 3);

    /* {2, 1}: the 1 would fit alone, the 2 not: neither is taken (all or nothing) */
    tr_pg_id b = make({bundle(1), bundle(2)}, TR_PG_STRICT_PACK);
    EXPECT_EQ(tr_placement_group_wait(rt, b, 300), TR_ETIMEDOUT);
    EXPECT_NE(std::string(tr_last_error()).find("waiting for resources: bundle 1 needs {CPU=2}"),
              std::string::npos)
        << tr_last_error();
    i = info(b);
    EXPECT_EQ(i.state, TR_PG_PENDING);
    EXPECT_NE(std::string(i.reason).find("waiting for resources"), std::string::npos) << i.reason;
    EXPECT_EQ(res("CPU"), 1);
    EXPECT_NE(status().find("\"state\":\"PENDING\",\"strategy\":\"STRICT_PACK\""),
              std::string::npos);

    /* an actor outside the groups cannot have the reserved CPUs */
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.num_cpus = 2;
    tr_actor_id outside;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &o, "o", 1, &outside), 0) << tr_last_error();
    EXPECT_EQ(tr_actor_wait_ready(rt, outside, 300), TR_ETIMEDOUT);
    ASSERT_EQ(tr_actor_kill(rt, outside, 1), 0);

    /* removing a gives its CPUs back; b is placed then */
    ASSERT_EQ(tr_placement_group_remove(rt, a), 0) << tr_last_error();
    EXPECT_EQ(info(a).state, TR_PG_REMOVED);
    ASSERT_EQ(tr_placement_group_wait(rt, b, 10000), 0) << tr_last_error();
    EXPECT_EQ(res("CPU"), 1);
    EXPECT_EQ(res(("CPU_g" + tag).c_str()), -1);    /* a's names are gone */
    EXPECT_EQ(tr_placement_group_remove(rt, a), 0); /* again: nothing to do */
    EXPECT_EQ(tr_placement_group_wait(rt, a, 100), TR_ESTATE);
    ASSERT_EQ(tr_placement_group_remove(rt, b), 0);
    EXPECT_EQ(res("CPU"), 4);
    EXPECT_EQ(res("GPU"), 2);
}

TEST_F(PlacementTest, InfeasibleAndStrictSpreadStayPendingWithTheReason) {
    tr_pg_id big = make({bundle(3), bundle(3)}, TR_PG_PACK);
    tr_pg_id spread = make({bundle(1), bundle(1)}, TR_PG_STRICT_SPREAD);
    tr_pg_id gpus = make({bundle(0, 2), bundle(0, 1)}, TR_PG_SPREAD);
    EXPECT_EQ(tr_placement_group_wait(rt, big, 200), TR_ETIMEDOUT);
    EXPECT_NE(std::string(info(big).reason).find("infeasible"), std::string::npos)
        << info(big).reason;
    EXPECT_NE(std::string(info(spread).reason).find("STRICT_SPREAD"), std::string::npos)
        << info(spread).reason;
    EXPECT_NE(std::string(info(gpus).reason).find("infeasible"), std::string::npos)
        << info(gpus).reason;
    EXPECT_EQ(res("CPU"), 4); /* nothing half placed */
    EXPECT_EQ(res("GPU"), 2);
    /* one bundle STRICT_SPREAD, SPREAD and STRICT_PACK fit on one node */
    tr_pg_id one = make({bundle(1)}, TR_PG_STRICT_SPREAD);
    tr_pg_id s = make({bundle(1), bundle(1)}, TR_PG_SPREAD);
    EXPECT_EQ(tr_placement_group_wait(rt, one, 10000), 0) << tr_last_error();
    EXPECT_EQ(tr_placement_group_wait(rt, s, 10000), 0) << tr_last_error();
    EXPECT_EQ(res("CPU"), 1);
}

TEST_F(PlacementTest, ActorsInABundleGetItsResourcesAndDevices) {
    tr_bundle b0 = bundle(1, 1), b1 = bundle(1, 1);
    tr_resource slot = {"slot", 1};
    b1.resources = &slot;
    b1.n_resources = 1;
    tr_pg_id pg = make({b0, b1}, TR_PG_STRICT_PACK, "gang");
    ASSERT_EQ(tr_placement_group_wait(rt, pg, 10000), 0) << tr_last_error();
    EXPECT_EQ(res("GPU"), 0);
    EXPECT_EQ(res("slot"), 1);
    tr_actor_id x, y, z, w;
    ASSERT_EQ(actor_in(pg, 0, 1, 1, &x), 0) << tr_last_error();
    ASSERT_EQ(actor_in(pg, 1, 1, 1, &y), 0) << tr_last_error();
    ASSERT_EQ(tr_actor_wait_ready(rt, x, 20000), 0) << tr_last_error();
    ASSERT_EQ(tr_actor_wait_ready(rt, y, 20000), 0) << tr_last_error();
    std::string gx = details(x).gpus, gy = details(y).gpus;
    EXPECT_TRUE((gx == "0" && gy == "1") || (gx == "1" && gy == "0")) << gx << " " << gy;
    std::string out;
    ASSERT_EQ(call_str(rt, x, "gpus", "", &out), 0) << tr_last_error();
    EXPECT_EQ(out, gx + "|" + gx); /* its worker sees its device only */
    /* bundle 0 is full (1 CPU, 1 GPU): another actor waits; one asking more than a bundle
     * has can never fit */
    ASSERT_EQ(actor_in(pg, 0, 1, 0, &z), 0) << tr_last_error();
    EXPECT_EQ(tr_actor_wait_ready(rt, z, 300), TR_ETIMEDOUT);
    EXPECT_EQ(actor_in(pg, 0, 2, 0, &w), TR_ERESOURCES);
    EXPECT_NE(std::string(tr_last_error()).find("more than bundle 0"), std::string::npos)
        << tr_last_error();
    EXPECT_EQ(actor_in(pg, -1, 0, 2, &w), TR_ERESOURCES);
    /* an actor that asks for nothing still lands in the group (any bundle) */
    ASSERT_EQ(actor_in(pg, -1, 0, 0, &w), 0) << tr_last_error();
    ASSERT_EQ(tr_actor_wait_ready(rt, w, 20000), 0) << tr_last_error();
    EXPECT_STREQ(details(w).gpus, "");
    /* by name */
    tr_pg_id got;
    ASSERT_EQ(tr_placement_group_get(rt, "gang", &got), 0) << tr_last_error();
    EXPECT_EQ(memcmp(got.b, pg.b, 16), 0);
    tr_pg_id dup;
    tr_bundle one = bundle(0.5);
    EXPECT_EQ(tr_placement_group_create(rt, &one, 1, TR_PG_PACK, "gang", &dup), TR_EEXIST);
    { /* names are per namespace (Ray's): another driver's namespace has a "gang" of its own */
        tr_runtime *other = nullptr;
        tr_config *cfg =
            test_config_with({{"address", tr_runtime_address(rt)}, {"namespace", "other"}});
        ASSERT_EQ(tr_init(cfg, &other), 0) << tr_last_error();
        tr_config_destroy(cfg);
        EXPECT_EQ(tr_placement_group_get(other, "gang", &got), TR_ENOTFOUND);
        tr_pg_id theirs, found;
        ASSERT_EQ(tr_placement_group_create(other, &one, 1, TR_PG_PACK, "gang", &theirs), 0)
            << tr_last_error();
        ASSERT_EQ(tr_placement_group_get(other, "gang", &found), 0) << tr_last_error();
        EXPECT_EQ(memcmp(found.b, theirs.b, 16), 0);
        tr_pg_info info = TR_PG_INFO_INIT;
        ASSERT_EQ(tr_placement_group_info(other, theirs, &info), 0) << tr_last_error();
        EXPECT_STREQ(info.name, "gang");
        EXPECT_EQ(tr_placement_group_remove(other, theirs), 0);
        tr_shutdown(other);
        ASSERT_EQ(tr_placement_group_get(rt, "gang", &got), 0) << tr_last_error();
        EXPECT_EQ(memcmp(got.b, pg.b, 16), 0);
    }

    /* removal kills x, y, z, w and gives everything back */
    ASSERT_EQ(tr_placement_group_remove(rt, pg), 0) << tr_last_error();
    for (tr_actor_id a : {x, y, z, w}) {
        EXPECT_EQ(tr_actor_wait_ready(rt, a, 10000), TR_EACTOR_DIED);
        tr_actor_details d = details(a);
        EXPECT_EQ(d.state, TR_ACTOR_DEAD);
        EXPECT_NE(std::string(d.reason).find("tr_placement_group_remove"), std::string::npos)
            << d.reason;
    }
    EXPECT_TRUE(eventually(5000, [&] { return res("CPU") == 4 && res("GPU") == 2; }));
    EXPECT_EQ(res("slot"), 2);
    char hex[33];
    std::string s = status(), tag = "_g" + std::string(tr_pg_id_str(pg, hex), 8);
    EXPECT_EQ(s.substr(0, s.find("\"actors\"")).find(tag), std::string::npos) << s;
    EXPECT_EQ(tr_placement_group_get(rt, "gang", &got), TR_ENOTFOUND);
    /* the removed group: a clear error */
    EXPECT_EQ(actor_in(pg, 0, 0, 0, &w), TR_ESTATE);
    EXPECT_NE(std::string(tr_last_error()).find("was removed"), std::string::npos)
        << tr_last_error();
    /* a whole GPU can then go to an actor outside any group */
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.num_gpus = 2;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &o, "g", 1, &w), 0) << tr_last_error();
    ASSERT_EQ(tr_actor_wait_ready(rt, w, 20000), 0) << tr_last_error();
    EXPECT_STREQ(details(w).gpus, "0,1");
}

TEST_F(PlacementTest, ActorsWaitForAPendingGroupAndAFractionalGpuBundleIsShared) {
    tr_actor_options hog = TR_ACTOR_OPTIONS_INIT;
    hog.num_cpus = 4;
    tr_actor_id h;
    ASSERT_EQ(tr_actor_create(rt, "Counter", &hog, "h", 1, &h), 0) << tr_last_error();
    ASSERT_EQ(tr_actor_wait_ready(rt, h, 20000), 0) << tr_last_error();
    tr_pg_id pg = make({bundle(1, 0.5)});
    tr_actor_id a, b;
    ASSERT_EQ(actor_in(pg, 0, 0.5, 0.25, &a), 0) << tr_last_error();
    ASSERT_EQ(actor_in(pg, 0, 0.5, 0.25, &b), 0) << tr_last_error();
    EXPECT_EQ(tr_actor_wait_ready(rt, a, 300), TR_ETIMEDOUT); /* the group waits for CPUs */
    EXPECT_EQ(info(pg).state, TR_PG_PENDING);
    ASSERT_EQ(tr_actor_kill(rt, h, 1), 0);
    ASSERT_EQ(tr_placement_group_wait(rt, pg, 10000), 0) << tr_last_error();
    ASSERT_EQ(tr_actor_wait_ready(rt, a, 20000), 0) << tr_last_error();
    ASSERT_EQ(tr_actor_wait_ready(rt, b, 20000), 0) << tr_last_error();
    EXPECT_STREQ(details(a).gpus, details(b).gpus); /* the bundle's one device */
    EXPECT_EQ(strlen(details(a).gpus), 1u);
}

TEST_F(PlacementTest, TasksRunInABundle) {
    tr_pg_id pg = make({bundle(1, 1)});
    ASSERT_EQ(tr_placement_group_wait(rt, pg, 10000), 0) << tr_last_error();
    tr_task_options o = TR_TASK_OPTIONS_INIT;
    o.num_gpus = 1;
    o.placement_group = pg;
    o.bundle_index = 0;
    tr_ref r;
    ASSERT_EQ(tr_task_submit(rt, "t_echo", "hi", 2, nullptr, 0, &o, &r), 0) << tr_last_error();
    const void *d;
    size_t len;
    ASSERT_EQ(tr_get(rt, r, 30000, &d, &len), 0) << tr_last_error();
    EXPECT_EQ(std::string((const char *)d, len), "hi");
    tr_ref_release(rt, r);
    /* its pool's worker is an actor of the group: it holds the bundle's GPU */
    std::string s = status();
    EXPECT_NE(s.find("\"gpus\":\"0\""), std::string::npos) << s;
    ASSERT_EQ(tr_placement_group_remove(rt, pg), 0);
    EXPECT_TRUE(eventually(5000, [&] { return res("CPU") == 4 && res("GPU") == 2; }));
}

TEST_F(PlacementTest, BadInputGetsClearErrors) {
    tr_pg_id pg;
    tr_bundle ok = bundle(1), zero = bundle(0), neg = bundle(-1), frac = bundle(0, 1.5);
    EXPECT_EQ(tr_placement_group_create(rt, &ok, 1, 7, nullptr, &pg), TR_EINVAL);
    EXPECT_NE(std::string(tr_last_error()).find("unknown strategy 7"), std::string::npos);
    EXPECT_EQ(tr_placement_group_create(rt, &ok, 0, TR_PG_PACK, nullptr, &pg), TR_EINVAL);
    EXPECT_EQ(tr_placement_group_create(rt, nullptr, 1, TR_PG_PACK, nullptr, &pg), TR_EINVAL);
    EXPECT_EQ(tr_placement_group_create(rt, &zero, 1, TR_PG_PACK, nullptr, &pg), TR_EINVAL);
    EXPECT_NE(std::string(tr_last_error()).find("asks for nothing"), std::string::npos);
    tr_resource none = {"slot", 0};
    zero.resources = &none;
    zero.n_resources = 1;
    EXPECT_EQ(tr_placement_group_create(rt, &zero, 1, TR_PG_PACK, nullptr, &pg), TR_EINVAL);
    EXPECT_EQ(tr_placement_group_create(rt, &neg, 1, TR_PG_PACK, nullptr, &pg), TR_EINVAL);
    EXPECT_EQ(tr_placement_group_create(rt, &frac, 1, TR_PG_PACK, nullptr, &pg), TR_EINVAL);
    tr_resource bad = {"a,b", 1}, longname = {"a_resource_name_too_long", 1};
    ok.resources = &bad;
    ok.n_resources = 1;
    EXPECT_EQ(tr_placement_group_create(rt, &ok, 1, TR_PG_PACK, nullptr, &pg), TR_EINVAL);
    ok.resources = &longname;
    EXPECT_EQ(tr_placement_group_create(rt, &ok, 1, TR_PG_PACK, nullptr, &pg), TR_EINVAL);
    tr_bundle uninit;
    memset(&uninit, 0, sizeof uninit);
    uninit.num_cpus = 1;
    EXPECT_EQ(tr_placement_group_create(rt, &uninit, 1, TR_PG_PACK, nullptr, &pg), TR_EINVAL);
    EXPECT_NE(std::string(tr_last_error()).find("struct_size"), std::string::npos);

    pg = make({bundle(1), bundle(1)});
    tr_actor_id a;
    EXPECT_EQ(actor_in(pg, 2, 0, 0, &a), TR_EINVAL);
    EXPECT_NE(std::string(tr_last_error()).find("bundle_index 2 is out of range"),
              std::string::npos)
        << tr_last_error();
    EXPECT_EQ(actor_in(pg, -5, 0, 0, &a), TR_EINVAL);
    tr_pg_id unknown;
    memset(&unknown, 0x42, sizeof unknown);
    EXPECT_EQ(actor_in(unknown, 0, 0, 0, &a), TR_ENOTFOUND);
    EXPECT_EQ(tr_placement_group_wait(rt, unknown, 100), TR_ENOTFOUND);
    EXPECT_EQ(tr_placement_group_remove(rt, unknown), TR_ENOTFOUND);
    tr_pg_info i = TR_PG_INFO_INIT;
    EXPECT_EQ(tr_placement_group_info(rt, unknown, &i), TR_ENOTFOUND);
    EXPECT_EQ(tr_placement_group_get(rt, "nobody", &unknown), TR_ENOTFOUND);
    EXPECT_EQ(tr_placement_group_get(rt, "", &unknown), TR_EINVAL);
    ASSERT_EQ(tr_placement_group_remove(rt, pg), 0);
    tr_task_options o = TR_TASK_OPTIONS_INIT;
    o.placement_group = pg;
    tr_ref r;
    EXPECT_NE(tr_task_submit(rt, "t_echo", "x", 1, nullptr, 0, &o, &r), 0);
}

} // namespace
