/* tests/api_test.cc - the façade itself (api/): the entry points that only it defines
 * (version, tr_free, the option structs' initialisers) and the runtime's shutdown hooks
 * through which it tears down what the layers below made for a runtime. */
#include <gtest/gtest.h>

#include <stdlib.h>

#include <string>
#include <vector>

#include "tests/test_actors.h"

extern "C" {
#include "api/rt.h"
#include "troupe/dag.h"
}

namespace {

TEST(Api, Version) {
    EXPECT_EQ(tr_version(), (unsigned)TR_VERSION_HEX);
    EXPECT_EQ(tr_abi_version(), (unsigned)TR_ABI_VERSION);
    std::string v = std::to_string(TR_VERSION_MAJOR) + "." + std::to_string(TR_VERSION_MINOR) +
                    "." + std::to_string(TR_VERSION_PATCH);
    EXPECT_EQ(std::string(tr_version_string()), v);
}

TEST(Api, FreeNullIsNoop) {
    tr_free(nullptr);
    tr_free(malloc(16));
}

TEST(Api, DagOptionsInitGivesTheMacrosDefaults) {
    tr_dag_options a = TR_DAG_OPTIONS_INIT, b;
    memset(&b, 0xff, sizeof b);
    tr_dag_options_init(&b);
    EXPECT_EQ(memcmp(&a, &b, sizeof a), 0);
    tr_dag_options_init(nullptr); /* no crash */
}

std::vector<int> *g_ran;

void note(void *arg) {
    g_ran->push_back((int)(intptr_t)arg);
}

TEST(Api, ShutdownRunsItsHooksNewestFirstAndNotThoseTakenOff) {
    std::vector<int> ran;
    g_ran = &ran;
    tr_runtime *rt;
    ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    for (intptr_t i = 1; i <= 3; i++)
        ASSERT_EQ(tr__runtime_on_shutdown(rt, note, (void *)i), 0);
    tr__runtime_off_shutdown(rt, note, (void *)2);
    tr__runtime_off_shutdown(rt, note, (void *)7); /* absent: no-op */
    EXPECT_TRUE(ran.empty());
    tr_shutdown(rt);
    EXPECT_EQ(ran, (std::vector<int>{3, 1}));
}

TEST(Api, ShutdownDestroysTheGraphsItsRuntimeStillHas) {
    tr_runtime *rt;
    ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    tr_dag *kept, *gone;
    ASSERT_EQ(tr_dag_create(rt, &kept), 0);
    ASSERT_EQ(tr_dag_create(rt, &gone), 0);
    EXPECT_EQ(tr_dag_destroy(gone), 0); /* takes its hook off: shutdown must not run it */
    pthread_mutex_lock(&rt->hooks_mu);
    int hooks = 0;
    for (tr__shutdown_hook *h = rt->hooks; h; h = h->next)
        hooks++;
    pthread_mutex_unlock(&rt->hooks_mu);
    EXPECT_EQ(hooks, 1);
    tr_shutdown(rt); /* destroys `kept` (ASan: nothing leaks, nothing freed twice) */
}

TEST(Api, AGroupIsJoinedAndItsOldNameStillWorks) {
    tr_runtime *rt;
    ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    tr_group *a, *b;
    ASSERT_EQ(tr_group_join(rt, 1, 0, "shm", "api-join", 5000, &a), 0) << tr_last_error();
    ASSERT_EQ(tr_group_init(rt, 1, 0, "shm", "api-init", 5000, &b), 0) << tr_last_error();
    EXPECT_EQ(tr_group_size(b), 1);
    EXPECT_EQ(tr_group_destroy(a), 0) << tr_last_error();
    EXPECT_EQ(tr_group_destroy(b), 0) << tr_last_error();
    EXPECT_EQ(tr_group_destroy(nullptr), 0);
    tr_shutdown(rt);
}

} // namespace
