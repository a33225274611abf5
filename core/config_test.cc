// core/config_test.cc - tr_config: defaults, every key, bad values, class registration,
// deep copy, the node config's msgpack round trip, and the TROUPE_* environment.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

extern "C" {
#include "core/abi.h"
#include "core/codec.h"
#include "core/config.h"
#include "core/frame.h"
#include "core/log.h"
#include "core/status.h"
#include "troupe/troupe.h"
}

namespace {

int m_noop(tr_ctx *, void *, const void *, size_t) {
    return 0;
}

const tr_method_def kMethods[] = {{"ping", m_noop}, {"pong", m_noop}};

class Config : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(tr__config_create(&cfg), 0);
        ASSERT_NE(cfg, nullptr);
    }
    void TearDown() override {
        tr__config_destroy(cfg);
    }
    tr_actor_class cls(const char *name) {
        tr_actor_class c = TR_ACTOR_CLASS_INIT;
        c.name = name;
        c.methods = kMethods;
        c.n_methods = 2;
        return c;
    }
    tr_config *cfg = nullptr;
};

TEST_F(Config, Defaults) {
    EXPECT_EQ(cfg->address, nullptr);
    EXPECT_EQ(cfg->tmpdir, nullptr);
    EXPECT_EQ(cfg->num_cpus, -1.0);
    EXPECT_EQ(cfg->num_gpus, -1.0); /* detected */
    EXPECT_EQ(cfg->resources.n, 0);
    EXPECT_EQ(cfg->log_level, -1);
    EXPECT_EQ(cfg->max_msg, (size_t)TR__DEFAULT_MAX_MSG);
    EXPECT_EQ(cfg->worker_start_timeout_ms, 30000);
    EXPECT_EQ(cfg->n_classes, 0u);
}

TEST(ConfigLifecycle, CreateNullAndDestroyNull) {
    EXPECT_EQ(tr__config_create(nullptr), TR_EINVAL);
    tr__config_destroy(nullptr);
}

TEST_F(Config, SetAddressAndTmpdir) {
    ASSERT_EQ(tr__config_set(cfg, "address", "/tmp/troupe-x/node.sock"), 0);
    EXPECT_STREQ(cfg->address, "/tmp/troupe-x/node.sock");
    ASSERT_EQ(tr__config_set(cfg, "address", "/other"), 0);
    EXPECT_STREQ(cfg->address, "/other");
    ASSERT_EQ(tr__config_set(cfg, "address", ""), 0); // back to an embedded node
    EXPECT_EQ(cfg->address, nullptr);
    ASSERT_EQ(tr__config_set(cfg, "tmpdir", "/var/tmp"), 0);
    EXPECT_STREQ(cfg->tmpdir, "/var/tmp");
    // The value is copied.
    char buf[] = "/mutable";
    ASSERT_EQ(tr__config_set(cfg, "tmpdir", buf), 0);
    buf[1] = 'X';
    EXPECT_STREQ(cfg->tmpdir, "/mutable");
}

TEST_F(Config, SetNumbers) {
    ASSERT_EQ(tr__config_set(cfg, "num_cpus", "2.5"), 0);
    EXPECT_EQ(cfg->num_cpus, 2.5);
    ASSERT_EQ(tr__config_set(cfg, "num_cpus", "0"), 0);
    EXPECT_EQ(cfg->num_cpus, 0.0);
    ASSERT_EQ(tr__config_set(cfg, "num_cpus", "1000000"), 0);
    EXPECT_EQ(cfg->num_cpus, 1e6);
    ASSERT_EQ(tr__config_set(cfg, "num_gpus", "0.5"), 0);
    EXPECT_EQ(cfg->num_gpus, 0.5);
    ASSERT_EQ(tr__config_set(cfg, "max_message_bytes", "4096"), 0);
    EXPECT_EQ(cfg->max_msg, 4096u);
    ASSERT_EQ(tr__config_set(cfg, "max_message_bytes", "4294967295"), 0);
    EXPECT_EQ(cfg->max_msg, 4294967295u);
    ASSERT_EQ(tr__config_set(cfg, "worker_start_timeout_ms", "1"), 0);
    EXPECT_EQ(cfg->worker_start_timeout_ms, 1);
    ASSERT_EQ(tr__config_set(cfg, "worker_start_timeout_ms", "3600000"), 0);
    EXPECT_EQ(cfg->worker_start_timeout_ms, 3600000);
}

TEST_F(Config, SetResourcesReplaces) {
    ASSERT_EQ(tr__config_set(cfg, "resources", "TPU=2,disk=1.5"), 0);
    EXPECT_EQ(cfg->resources.n, 2);
    EXPECT_EQ(tr__res_get(&cfg->resources, "TPU"), 2.0);
    EXPECT_EQ(tr__res_get(&cfg->resources, "disk"), 1.5);
    ASSERT_EQ(tr__config_set(cfg, "resources", "TPU=1"), 0);
    EXPECT_EQ(cfg->resources.n, 1);
    EXPECT_EQ(tr__res_get(&cfg->resources, "TPU"), 1.0);
    ASSERT_EQ(tr__config_set(cfg, "resources", ""), 0);
    EXPECT_EQ(cfg->resources.n, 0);
}

TEST_F(Config, SetLogLevel) {
    const struct {
        const char *text;
        int level;
    } ok[] = {{"error", TR__LOG_ERROR},
              {"warn", TR__LOG_WARN},
              {"info", TR__LOG_INFO},
              {"debug", TR__LOG_DEBUG},
              {"DEBUG", TR__LOG_DEBUG},
              {"0", 0},
              {"3", 3}};
    for (const auto &c : ok) {
        ASSERT_EQ(tr__config_set(cfg, "log_level", c.text), 0) << c.text;
        EXPECT_EQ(cfg->log_level, c.level) << c.text;
    }
}

TEST_F(Config, BadValuesAreEinvalAndLeaveTheOldValue) {
    ASSERT_EQ(tr__config_set(cfg, "num_cpus", "8"), 0);
    const char *bad_cpus[] = {"-1", "abc", "", "1e7", "nan", "inf", "2x", "4 "};
    for (const char *v : bad_cpus) {
        EXPECT_EQ(tr__config_set(cfg, "num_cpus", v), TR_EINVAL) << v;
        EXPECT_NE(strstr(tr__last_error(), "num_cpus"), nullptr) << tr__last_error();
    }
    EXPECT_EQ(cfg->num_cpus, 8.0);
    EXPECT_EQ(tr__config_set(cfg, "num_gpus", "-0.5"), TR_EINVAL);
    EXPECT_EQ(cfg->num_gpus, -1.0); /* detected */

    ASSERT_EQ(tr__config_set(cfg, "resources", "A=1"), 0);
    EXPECT_EQ(tr__config_set(cfg, "resources", "B=1,C"), TR_EINVAL);
    EXPECT_EQ(cfg->resources.n, 1); // not half-applied
    EXPECT_EQ(tr__res_get(&cfg->resources, "A"), 1.0);
    EXPECT_EQ(tr__config_set(cfg, "resources", "B=-1"), TR_EINVAL);

    const char *bad_levels[] = {"verbose", "4", "", "-1", "10", "warning"};
    for (const char *v : bad_levels)
        EXPECT_EQ(tr__config_set(cfg, "log_level", v), TR_EINVAL) << v;
    EXPECT_EQ(cfg->log_level, -1);

    const char *bad_max[] = {"4095", "4294967296", "0", "-4096", "big"};
    for (const char *v : bad_max)
        EXPECT_EQ(tr__config_set(cfg, "max_message_bytes", v), TR_EINVAL) << v;
    EXPECT_EQ(cfg->max_msg, (size_t)TR__DEFAULT_MAX_MSG);

    const char *bad_timeout[] = {"0", "3600001", "1.5e9", "-5", "soon"};
    for (const char *v : bad_timeout)
        EXPECT_EQ(tr__config_set(cfg, "worker_start_timeout_ms", v), TR_EINVAL) << v;
    EXPECT_EQ(cfg->worker_start_timeout_ms, 30000);
}

TEST_F(Config, UnknownKeyAndNullArguments) {
    EXPECT_EQ(tr__config_set(cfg, "num_cpu", "1"), TR_EINVAL);
    EXPECT_NE(strstr(tr__last_error(), "num_cpu"), nullptr) << tr__last_error();
    EXPECT_EQ(tr__config_set(cfg, "", "1"), TR_EINVAL);
    EXPECT_EQ(tr__config_set(cfg, "ADDRESS", "/x"), TR_EINVAL); // keys are case-sensitive
    EXPECT_EQ(tr__config_set(nullptr, "num_cpus", "1"), TR_EINVAL);
    EXPECT_EQ(tr__config_set(cfg, nullptr, "1"), TR_EINVAL);
    EXPECT_EQ(tr__config_set(cfg, "num_cpus", nullptr), TR_EINVAL);
    EXPECT_EQ(cfg->num_cpus, -1.0);
}

TEST_F(Config, ActorClassInit) {
    tr_actor_class a;
    memset(&a, 0xab, sizeof a);
    tr__actor_class_init(&a);
    EXPECT_EQ(a.struct_size, sizeof(tr_actor_class));
    EXPECT_EQ(a.name, nullptr);
    EXPECT_EQ(a.ctor, nullptr);
    EXPECT_EQ(a.dtor, nullptr);
    EXPECT_EQ(a.methods, nullptr);
    EXPECT_EQ(a.n_methods, 0u);
    tr__actor_class_init(nullptr);
    tr_actor_class b = TR_ACTOR_CLASS_INIT;
    EXPECT_EQ(b.struct_size, TR_STRUCT_SIZE(tr_actor_class));
    EXPECT_EQ(b.name, nullptr);
    EXPECT_EQ(b.n_methods, 0u);
}

TEST_F(Config, AddClassCopiesTheStructAndName) {
    char name[] = "Counter";
    tr_actor_class c = cls(name);
    ASSERT_EQ(tr__config_add_class(cfg, &c), 0);
    name[0] = 'X';
    c.n_methods = 0;
    ASSERT_EQ(cfg->n_classes, 1u);
    const tr_actor_class *got = tr__config_find_class(cfg, "Counter");
    ASSERT_NE(got, nullptr);
    EXPECT_STREQ(got->name, "Counter");
    EXPECT_EQ(got->n_methods, 2u);
    EXPECT_EQ(got->methods, kMethods); // borrowed
    EXPECT_EQ(tr__config_find_class(cfg, "Xounter"), nullptr);
    EXPECT_EQ(tr__config_find_class(cfg, "counter"), nullptr);
}

TEST_F(Config, AddClassDuplicateIsEexist) {
    tr_actor_class a = cls("A");
    tr_actor_class b = cls("B");
    ASSERT_EQ(tr__config_add_class(cfg, &a), 0);
    ASSERT_EQ(tr__config_add_class(cfg, &b), 0);
    EXPECT_EQ(tr__config_add_class(cfg, &a), TR_EEXIST);
    EXPECT_NE(strstr(tr__last_error(), "'A'"), nullptr) << tr__last_error();
    tr_actor_class a2 = cls("A");
    a2.n_methods = 0;
    EXPECT_EQ(tr__config_add_class(cfg, &a2), TR_EEXIST);
    EXPECT_EQ(cfg->n_classes, 2u);
}

TEST_F(Config, AddClassValidation) {
    tr_actor_class c = cls("C");
    EXPECT_EQ(tr__config_add_class(nullptr, &c), TR_EINVAL);
    EXPECT_EQ(tr__config_add_class(cfg, nullptr), TR_EINVAL);

    tr_actor_class small = cls("C");
    small.struct_size = 0;
    EXPECT_EQ(tr__config_add_class(cfg, &small), TR_EINVAL);
    EXPECT_NE(strstr(tr__last_error(), "struct_size"), nullptr) << tr__last_error();
    small.struct_size = TR__SIZE_UPTO(tr_actor_class, n_methods) - 1; /* below 0.1's */
    EXPECT_EQ(tr__config_add_class(cfg, &small), TR_EINVAL);

    tr_actor_class unnamed = cls(nullptr);
    EXPECT_EQ(tr__config_add_class(cfg, &unnamed), TR_EINVAL);
    tr_actor_class empty = cls("");
    EXPECT_EQ(tr__config_add_class(cfg, &empty), TR_EINVAL);
    std::string n256(256, 'n'), n255(255, 'n');
    tr_actor_class long_name = cls(n256.c_str());
    EXPECT_EQ(tr__config_add_class(cfg, &long_name), TR_EINVAL);

    tr_actor_class no_table = cls("D");
    no_table.methods = nullptr;
    EXPECT_EQ(tr__config_add_class(cfg, &no_table), TR_EINVAL);

    const tr_method_def no_fn[] = {{"ok", m_noop}, {"broken", nullptr}};
    tr_actor_class bad_fn = cls("E");
    bad_fn.methods = no_fn;
    EXPECT_EQ(tr__config_add_class(cfg, &bad_fn), TR_EINVAL);
    const tr_method_def no_name[] = {{nullptr, m_noop}};
    tr_actor_class bad_name = cls("F");
    bad_name.methods = no_name;
    bad_name.n_methods = 1;
    EXPECT_EQ(tr__config_add_class(cfg, &bad_name), TR_EINVAL);
    EXPECT_EQ(cfg->n_classes, 0u);

    // The accepted edge cases.
    tr_actor_class max_name = cls(n255.c_str());
    EXPECT_EQ(tr__config_add_class(cfg, &max_name), 0);
    tr_actor_class no_methods = cls("G");
    no_methods.methods = nullptr;
    no_methods.n_methods = 0;
    EXPECT_EQ(tr__config_add_class(cfg, &no_methods), 0);
    tr_actor_class bigger = cls("H"); // a newer caller's larger struct
    bigger.struct_size = (uint32_t)(sizeof(tr_actor_class) + 16) | TR_STRUCT_MAGIC;
    EXPECT_EQ(tr__config_add_class(cfg, &bigger), 0);
    EXPECT_EQ(tr__config_find_class(cfg, "H")->struct_size, sizeof(tr_actor_class));
    tr_actor_class older = cls("I"); // 0.1's struct: no dispatch, whatever lies past it
    older.struct_size = TR__SIZE_UPTO(tr_actor_class, n_methods);
    older.dispatch = m_noop;
    EXPECT_EQ(tr__config_add_class(cfg, &older), 0);
    EXPECT_EQ(tr__config_find_class(cfg, "I")->dispatch, nullptr);
    EXPECT_EQ(cfg->n_classes, 4u);
}

TEST_F(Config, CopyIsDeep) {
    ASSERT_EQ(tr__config_set(cfg, "address", "/a/node.sock"), 0);
    ASSERT_EQ(tr__config_set(cfg, "tmpdir", "/t"), 0);
    ASSERT_EQ(tr__config_set(cfg, "num_cpus", "3"), 0);
    ASSERT_EQ(tr__config_set(cfg, "resources", "X=2"), 0);
    tr_actor_class a = cls("A"), b = cls("B");
    ASSERT_EQ(tr__config_add_class(cfg, &a), 0);
    ASSERT_EQ(tr__config_add_class(cfg, &b), 0);
    tr_config *copy = nullptr;
    ASSERT_EQ(tr__config_copy(cfg, &copy), 0);
    ASSERT_NE(copy, nullptr);
    EXPECT_STREQ(copy->address, "/a/node.sock");
    EXPECT_NE(copy->address, cfg->address);
    EXPECT_STREQ(copy->tmpdir, "/t");
    EXPECT_NE(copy->tmpdir, cfg->tmpdir);
    EXPECT_EQ(copy->num_cpus, 3.0);
    EXPECT_EQ(tr__res_get(&copy->resources, "X"), 2.0);
    ASSERT_EQ(copy->n_classes, 2u);
    EXPECT_NE(copy->classes, cfg->classes);
    EXPECT_STREQ(copy->classes[1].name, "B");
    EXPECT_NE(copy->classes[1].name, cfg->classes[1].name);
    // Destroying the original leaves the copy intact.
    tr__config_destroy(cfg);
    cfg = nullptr;
    EXPECT_STREQ(copy->address, "/a/node.sock");
    EXPECT_NE(tr__config_find_class(copy, "A"), nullptr);
    tr__config_destroy(copy);
}

TEST(ConfigLifecycle, CopyOfNullIsDefaults) {
    tr_config *copy = nullptr;
    ASSERT_EQ(tr__config_copy(nullptr, &copy), 0);
    EXPECT_EQ(copy->num_cpus, -1.0);
    EXPECT_EQ(copy->max_msg, (size_t)TR__DEFAULT_MAX_MSG);
    tr__config_destroy(copy);
}

TEST_F(Config, LogLevelPrecedence) {
    tr__env env;
    memset(&env, 0, sizeof env);
    env.log_level = -1;
    EXPECT_EQ(tr__config_log_level(cfg, &env), TR__LOG_WARN);
    EXPECT_EQ(tr__config_log_level(nullptr, nullptr), TR__LOG_WARN);
    env.log_level = TR__LOG_DEBUG;
    EXPECT_EQ(tr__config_log_level(cfg, &env), TR__LOG_DEBUG);
    ASSERT_EQ(tr__config_set(cfg, "log_level", "error"), 0);
    EXPECT_EQ(tr__config_log_level(cfg, &env), TR__LOG_ERROR);
}

tr_config *decoded(const tr__buf &b, int *rc) {
    tr_config *out = nullptr;
    EXPECT_EQ(tr__config_create(&out), 0);
    *rc = tr__config_decode_node(b.data + b.off, tr__buf_avail(&b), out);
    return out;
}

TEST_F(Config, NodeConfigRoundTrip) {
    ASSERT_EQ(tr__config_set(cfg, "num_cpus", "3"), 0);
    ASSERT_EQ(tr__config_set(cfg, "num_gpus", "0.5"), 0);
    ASSERT_EQ(tr__config_set(cfg, "memory", "123456789012"), 0);
    ASSERT_EQ(tr__config_set(cfg, "resources", "TPU=2,disk=1.5"), 0);
    ASSERT_EQ(tr__config_set(cfg, "max_message_bytes", "1048576"), 0);
    ASSERT_EQ(tr__config_set(cfg, "worker_start_timeout_ms", "1234"), 0);
    ASSERT_EQ(tr__config_set(cfg, "log_level", "info"), 0);
    ASSERT_EQ(tr__config_set(cfg, "address", "/not/encoded"), 0);
    ASSERT_EQ(tr__config_set(cfg, "tmpdir", "/var/tmp/sessions"), 0);
    ASSERT_EQ(tr__config_set(cfg, "spill_dir", "/var/spill"), 0);
    ASSERT_EQ(tr__config_set(cfg, "cpu_binding", "none"), 0);
    EXPECT_EQ(tr__config_set(cfg, "cpu_binding", "sockets"), TR_EINVAL);
    ASSERT_EQ(tr__config_set(cfg, "call_spin_us", "0"), 0);
    EXPECT_EQ(tr__config_set(cfg, "call_spin_us", "10001"), TR_EINVAL);
    EXPECT_EQ(tr__config_set(cfg, "call_spin_us", "2.5"), TR_EINVAL);
    tr__buf b = TR__BUF_INIT;
    ASSERT_EQ(tr__config_encode_node(cfg, &b), 0);
    int rc;
    tr_config *back = decoded(b, &rc);
    ASSERT_EQ(rc, 0) << tr__last_error();
    EXPECT_EQ(back->num_cpus, 3.0);
    EXPECT_EQ(back->num_gpus, 0.5);
    EXPECT_EQ(back->memory, 123456789012.0);
    EXPECT_EQ(back->resources.n, 2);
    EXPECT_EQ(tr__res_get(&back->resources, "TPU"), 2.0);
    EXPECT_EQ(tr__res_get(&back->resources, "disk"), 1.5);
    EXPECT_EQ(back->max_msg, 1048576u);
    EXPECT_EQ(back->worker_start_timeout_ms, 1234);
    EXPECT_EQ(back->log_level, TR__LOG_INFO);
    EXPECT_STREQ(back->tmpdir, "/var/tmp/sessions"); // where the node puts its socket
    EXPECT_STREQ(back->spill_dir, "/var/spill");
    EXPECT_EQ(back->cpu_binding, TR__BIND_NONE);
    EXPECT_EQ(back->call_spin_us, 0);  // the node gives its own to its workers
    EXPECT_EQ(back->address, nullptr); // only the node's part travels
    tr__config_destroy(back);
    tr__buf_free(&b);
}

TEST_F(Config, ClusterKeysTravelToTheNodeAndAreChecked) {
    ASSERT_EQ(tr__config_set(cfg, "cluster_port", "6380"), 0);
    ASSERT_EQ(tr__config_set(cfg, "cluster_bind", "10.1.2.3"), 0);
    ASSERT_EQ(tr__config_set(cfg, "cluster_token", "s3cret"), 0);
    ASSERT_EQ(tr__config_set(cfg, "cluster_head", "10.1.2.1:6380"), 0);
    EXPECT_EQ(tr__config_set(cfg, "cluster_port", "65536"), TR_EINVAL);
    EXPECT_EQ(tr__config_set(cfg, "cluster_port", "-2"), TR_EINVAL);
    EXPECT_EQ(tr__config_set(cfg, "cluster_token", std::string(256, 't').c_str()), TR_EINVAL);
    tr__buf b = TR__BUF_INIT;
    ASSERT_EQ(tr__config_encode_node(cfg, &b), 0);
    int rc;
    tr_config *back = decoded(b, &rc);
    ASSERT_EQ(rc, 0) << tr__last_error();
    EXPECT_EQ(back->cluster_port, 6380);
    EXPECT_STREQ(back->cluster_bind, "10.1.2.3");
    EXPECT_STREQ(back->cluster_token, "s3cret");
    EXPECT_STREQ(back->cluster_head, "10.1.2.1:6380");
    tr_config *copy = nullptr;
    ASSERT_EQ(tr__config_copy(back, &copy), 0);
    EXPECT_STREQ(copy->cluster_token, "s3cret");
    EXPECT_NE(copy->cluster_token, back->cluster_token);
    tr__config_destroy(copy);
    tr__config_destroy(back);
    tr__buf_free(&b);
}

TEST_F(Config, NodeConfigRoundTripOfDefaults) {
    tr__buf b = TR__BUF_INIT;
    ASSERT_EQ(tr__config_encode_node(cfg, &b), 0);
    int rc;
    tr_config *back = decoded(b, &rc);
    ASSERT_EQ(rc, 0) << tr__last_error();
    EXPECT_EQ(back->num_cpus, -1.0);
    EXPECT_EQ(back->memory, -1.0);   /* computed by the node */
    EXPECT_EQ(back->num_gpus, -1.0); /* detected by the node */
    EXPECT_EQ(back->resources.n, 0);
    EXPECT_EQ(back->max_msg, (size_t)TR__DEFAULT_MAX_MSG);
    EXPECT_EQ(back->worker_start_timeout_ms, 30000);
    EXPECT_EQ(back->log_level, -1);
    EXPECT_EQ(back->tmpdir, nullptr);
    EXPECT_EQ(back->spill_dir, nullptr);
    EXPECT_EQ(back->cpu_binding, TR__BIND_CORES);
    EXPECT_EQ(back->call_spin_us, TR__CALL_SPIN_US);
    EXPECT_EQ(back->cluster_port, -1); /* no cluster */
    EXPECT_EQ(back->cluster_head, nullptr);
    EXPECT_EQ(back->cluster_token, nullptr);
    tr__config_destroy(back);
    tr__buf_free(&b);
}

TEST_F(Config, NodeConfigRoundTripOfLargeResources) {
    // Known core bug (sched.c tr__res_format uses "%g"): 6 significant digits survive.
    ASSERT_EQ(tr__config_set(cfg, "resources", "memory=17179869184"), 0);
    tr__buf b = TR__BUF_INIT;
    ASSERT_EQ(tr__config_encode_node(cfg, &b), 0);
    int rc;
    tr_config *back = decoded(b, &rc);
    ASSERT_EQ(rc, 0);
    EXPECT_EQ(tr__res_get(&back->resources, "memory"), 17179869184.0);
    tr__config_destroy(back);
    tr__buf_free(&b);
}

// A node config message with one field replaced or left out.
void node_msg(tr__buf *b, const char *skip, const char *as_string) {
    const char *keys[] = {"num_cpus", "num_gpus",  "resources",  "max_msg",
                          "start_ms", "log_level", "store_bytes"};
    uint32_t n = 0;
    for (const char *k : keys)
        n += strcmp(k, skip) != 0;
    tr__enc_map(b, n);
    for (const char *k : keys) {
        if (strcmp(k, skip) == 0) continue;
        tr__enc_str(b, k);
        if (strcmp(k, as_string) == 0)
            tr__enc_str(b, "oops");
        else if (strcmp(k, "resources") == 0)
            tr__enc_str(b, "A=1");
        else if (strcmp(k, "num_cpus") == 0 || strcmp(k, "num_gpus") == 0)
            tr__enc_double(b, 1.0);
        else
            tr__enc_int(b, 5000);
    }
}

TEST_F(Config, NodeConfigDecodeErrors) {
    int rc;
    {
        tr__buf b = TR__BUF_INIT;
        node_msg(&b, "", "");
        tr_config *c = decoded(b, &rc);
        EXPECT_EQ(rc, 0) << tr__last_error(); // the helper's complete message is valid
        tr__config_destroy(c);
        tr__buf_free(&b);
    }
    const char *keys[] = {"num_cpus", "num_gpus",  "resources",  "max_msg",
                          "start_ms", "log_level", "store_bytes"};
    for (const char *k : keys) {
        tr__buf b = TR__BUF_INIT;
        node_msg(&b, k, "");
        tr_config *c = decoded(b, &rc);
        EXPECT_EQ(rc, TR_EPROTO) << "missing " << k;
        EXPECT_NE(strstr(tr__last_error(), k), nullptr) << tr__last_error();
        tr__config_destroy(c);
        tr__buf_free(&b);
        b = TR__BUF_INIT;
        node_msg(&b, "", k);
        c = decoded(b, &rc);
        EXPECT_EQ(rc, k == std::string("resources") ? TR_EINVAL : TR_EPROTO) << "bad " << k;
        tr__config_destroy(c);
        tr__buf_free(&b);
    }
    tr_config *c = nullptr;
    ASSERT_EQ(tr__config_create(&c), 0);
    EXPECT_EQ(tr__config_decode_node("", 0, c), TR_EPROTO);
    EXPECT_EQ(tr__config_decode_node("\xc1", 1, c), TR_EPROTO);
    EXPECT_EQ(tr__config_decode_node("\x90", 1, c), TR_EPROTO); // an array, not a map
    EXPECT_EQ(tr__config_decode_node("\x80", 1, c), TR_EPROTO); // an empty map
    tr__config_destroy(c);
}

TEST(ConfigEnv, ReadsTroupeVariables) {
    const char *vars[] = {"TROUPE_ROLE",        "TROUPE_NODE",     "TROUPE_ACTOR",
                          "TROUPE_NODE_CONFIG", "TROUPE_READY_FD", "TROUPE_STANDALONE",
                          "TROUPE_LOG_LEVEL"};
    for (const char *v : vars)
        unsetenv(v);
    tr__env e;
    tr__env_read(&e);
    EXPECT_EQ(e.role, TR__ROLE_DRIVER);
    EXPECT_EQ(e.node_path, nullptr);
    EXPECT_EQ(e.actor_hex, nullptr);
    EXPECT_EQ(e.node_config, nullptr);
    EXPECT_EQ(e.ready_fd, -1);
    EXPECT_EQ(e.standalone, 0);
    EXPECT_EQ(e.log_level, -1);

    setenv("TROUPE_ROLE", "worker", 1);
    setenv("TROUPE_NODE", "/tmp/n.sock", 1);
    setenv("TROUPE_ACTOR", "00ff", 1);
    setenv("TROUPE_NODE_CONFIG", "80", 1);
    setenv("TROUPE_READY_FD", "7", 1);
    setenv("TROUPE_STANDALONE", "1", 1);
    setenv("TROUPE_LOG_LEVEL", "debug", 1);
    tr__env_read(&e);
    EXPECT_EQ(e.role, TR__ROLE_WORKER);
    EXPECT_STREQ(e.node_path, "/tmp/n.sock");
    EXPECT_STREQ(e.actor_hex, "00ff");
    EXPECT_STREQ(e.node_config, "80");
    EXPECT_EQ(e.ready_fd, 7);
    EXPECT_EQ(e.standalone, 1);
    EXPECT_EQ(e.log_level, TR__LOG_DEBUG);

    setenv("TROUPE_ROLE", "node", 1);
    setenv("TROUPE_STANDALONE", "yes", 1);
    setenv("TROUPE_LOG_LEVEL", "loud", 1);
    tr__env_read(&e);
    EXPECT_EQ(e.role, TR__ROLE_NODE);
    EXPECT_EQ(e.standalone, 0);
    EXPECT_EQ(e.log_level, -1);
    setenv("TROUPE_ROLE", "emperor", 1);
    tr__env_read(&e);
    EXPECT_EQ(e.role, TR__ROLE_DRIVER);
    for (const char *v : vars)
        unsetenv(v);
}

TEST(ConfigLog, ParseLevel) {
    EXPECT_EQ(tr__log_parse_level(nullptr), -1);
    EXPECT_EQ(tr__log_parse_level(""), -1);
    EXPECT_EQ(tr__log_parse_level("Info"), TR__LOG_INFO);
    EXPECT_EQ(tr__log_parse_level("2"), 2);
    EXPECT_EQ(tr__log_parse_level("23"), -1);
    EXPECT_EQ(tr__log_parse_level("4"), -1);
    EXPECT_EQ(tr__log_parse_level("errors"), -1);
}

} // namespace
