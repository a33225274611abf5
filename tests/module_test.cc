/* tests/module_test.cc - workers that are not the driver's executable: the generic worker
 * (troupe-worker) running actor classes from a shared object (examples/module_adder.c), set
 * by "worker_command" and by "worker_library"; bad commands refused with the reason. The
 * embedded node runs the same command (its libtroupe.so, loaded by troupe-worker). */
#include <gtest/gtest.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

extern "C" {
#include "troupe/troupe.h"
}

namespace {

std::string g_worker, g_module; /* argv[1], argv[2] */

std::string abs_path(const std::string &p) {
    char buf[PATH_MAX];
    return realpath(p.c_str(), buf) ? std::string(buf) : p;
}

/* Runs a ModuleAdder through rt: created with 5, add 7 -> 12, in a process of its own. */
void check_adder(tr_runtime *rt) {
    int64_t init = 5, seven = 7, got = 0;
    tr_actor_id a;
    ASSERT_EQ(tr_actor_create(rt, "ModuleAdder", nullptr, &init, 8, &a), 0) << tr_last_error();
    ASSERT_EQ(tr_actor_wait_ready(rt, a, 30000), 0) << tr_last_error();
    tr_ref r;
    const void *p;
    size_t n;
    ASSERT_EQ(tr_call(rt, a, "add", &seven, 8, &r), 0);
    ASSERT_EQ(tr_get(rt, r, 10000, &p, &n), 0) << tr_last_error();
    ASSERT_EQ(n, 8u);
    memcpy(&got, p, 8);
    EXPECT_EQ(got, 12);
    tr_ref_release(rt, r);
    ASSERT_EQ(tr_call(rt, a, "add", "x", 1, &r), 0); /* a method's error comes back */
    EXPECT_EQ(tr_get(rt, r, 10000, &p, &n), TR_ETASK);
    EXPECT_NE(std::string(tr_last_error()).find("add wants 8 bytes"), std::string::npos)
        << tr_last_error();
    tr_ref_release(rt, r);
    ASSERT_EQ(tr_call(rt, a, "pid", nullptr, 0, &r), 0);
    ASSERT_EQ(tr_get(rt, r, 10000, &p, &n), 0);
    int64_t pid;
    memcpy(&pid, p, 8);
    EXPECT_NE(pid, getpid());
    char exe[64], link[PATH_MAX] = "";
    snprintf(exe, sizeof exe, "/proc/%lld/exe", (long long)pid);
    ssize_t k = readlink(exe, link, sizeof link - 1);
    if (k > 0) link[k] = '\0';
    EXPECT_EQ(std::string(link), abs_path(g_worker)); /* troupe-worker, not this test */
    tr_ref_release(rt, r);
}

TEST(GenericWorker, RunsClassesFromAModuleByCommand) {
    tr_config *cfg;
    ASSERT_EQ(tr_config_create(&cfg), 0);
    ASSERT_EQ(tr_config_set(cfg, "object_store_bytes", "67108864"), 0);
    std::string cmd = g_worker + "  " + abs_path(g_module);
    ASSERT_EQ(tr_config_set(cfg, "worker_command", cmd.c_str()), 0) << tr_last_error();
    tr_runtime *rt;
    ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
    tr_config_destroy(cfg);
    check_adder(rt);
    /* a class the module does not have: the actor dies with the reason */
    tr_actor_id b;
    ASSERT_EQ(tr_actor_create(rt, "NoSuchClass", nullptr, nullptr, 0, &b), 0);
    EXPECT_EQ(tr_actor_wait_ready(rt, b, 30000), TR_EACTOR_DIED);
    tr_shutdown(rt);
}

TEST(GenericWorker, RunsClassesFromAModuleByLibrary) {
    /* troupe-worker is found on PATH (this test's driver links libtroupe statically) */
    std::string dir = abs_path(g_worker);
    dir = dir.substr(0, dir.rfind('/'));
    std::string path = dir + ":" + (getenv("PATH") ? getenv("PATH") : "");
    setenv("PATH", path.c_str(), 1);
    tr_config *cfg;
    ASSERT_EQ(tr_config_create(&cfg), 0);
    ASSERT_EQ(tr_config_set(cfg, "object_store_bytes", "67108864"), 0);
    ASSERT_EQ(tr_config_set(cfg, "worker_library", g_module.c_str()), 0) << tr_last_error();
    tr_runtime *rt;
    ASSERT_EQ(tr_init(cfg, &rt), 0) << tr_last_error();
    tr_config_destroy(cfg);
    check_adder(rt);
    tr_shutdown(rt);
}

TEST(GenericWorker, BadCommandsAreRefused) {
    tr_config *cfg;
    ASSERT_EQ(tr_config_create(&cfg), 0);
    EXPECT_EQ(tr_config_set(cfg, "worker_command", "/no/such/program --x"), TR_EINVAL);
    EXPECT_NE(std::string(tr_last_error()).find("not an executable"), std::string::npos);
    EXPECT_EQ(tr_config_set(cfg, "worker_command", "   "), TR_EINVAL);
    EXPECT_EQ(tr_config_set(cfg, "worker_command", "no-such-program-anywhere"), TR_EINVAL);
    EXPECT_EQ(tr_config_set(cfg, "worker_library", "/no/such/module.so"), TR_EINVAL);
    EXPECT_NE(std::string(tr_last_error()).find("/no/such/module.so"), std::string::npos);
    EXPECT_EQ(tr_config_set(cfg, "worker_command", ""), 0); /* back to this executable */
    tr_config_destroy(cfg);
    /* a module that cannot be loaded: the embedded node cannot start, with no hang */
    ASSERT_EQ(tr_config_create(&cfg), 0);
    std::string cmd = g_worker + " /no/such/module.so";
    ASSERT_EQ(tr_config_set(cfg, "worker_command", cmd.c_str()), 0);
    tr_runtime *rt = nullptr;
    EXPECT_EQ(tr_init(cfg, &rt), TR_ECONNECT);
    EXPECT_EQ(rt, nullptr);
    tr_config_destroy(cfg);
}

} // namespace

int main(int argc, char **argv) {
    ::testing::InitGoogleTest(&argc, argv);
    if (argc < 3) {
        fprintf(stderr, "usage: module_test TROUPE_WORKER MODULE.so\n");
        return 2;
    }
    g_worker = argv[1];
    g_module = argv[2];
    return RUN_ALL_TESTS();
}
