// core/sched_test.cc - resource vectors: add, parse, format, fits, take, give.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

extern "C" {
#include "core/sched.h"
#include "core/status.h"
}

namespace {

tr__res parsed(const char *text) {
    tr__res r;
    memset(&r, 0, sizeof r);
    EXPECT_EQ(tr__res_parse(&r, text), 0) << text << ": " << tr__last_error();
    return r;
}

std::string formatted(const tr__res &r) {
    char out[1024];
    tr__res_format(&r, out, sizeof out);
    return out;
}

TEST(Sched, AddAndGet) {
    tr__res r = {};
    EXPECT_EQ(tr__res_get(&r, "CPU"), 0.0);
    ASSERT_EQ(tr__res_add(&r, "CPU", 4), 0);
    ASSERT_EQ(tr__res_add(&r, "GPU", 0.5), 0);
    ASSERT_EQ(tr__res_add(&r, "CPU", 2), 0); // adds to the existing entry
    EXPECT_EQ(r.n, 2);
    EXPECT_EQ(tr__res_get(&r, "CPU"), 6.0);
    EXPECT_EQ(tr__res_get(&r, "GPU"), 0.5);
    EXPECT_EQ(tr__res_get(&r, "cpu"), 0.0); // names are case-sensitive
    ASSERT_EQ(tr__res_add(&r, "zero", 0), 0);
    EXPECT_EQ(r.n, 3);
}

TEST(Sched, AddRejectsBadNames) {
    tr__res r = {};
    EXPECT_EQ(tr__res_add(&r, nullptr, 1), TR_EINVAL);
    EXPECT_EQ(tr__res_add(&r, "", 1), TR_EINVAL);
    std::string max(TR__RES_NAME - 1, 'n');
    std::string over(TR__RES_NAME, 'n');
    EXPECT_EQ(tr__res_add(&r, over.c_str(), 1), TR_EINVAL);
    EXPECT_EQ(r.n, 0);
    EXPECT_EQ(tr__res_add(&r, max.c_str(), 1), 0);
    EXPECT_EQ(tr__res_get(&r, max.c_str()), 1.0);
}

TEST(Sched, AddRejectsBadQuantities) {
    tr__res r = {};
    EXPECT_EQ(tr__res_add(&r, "CPU", -1), TR_EINVAL);
    EXPECT_EQ(tr__res_add(&r, "CPU", -1e-12), TR_EINVAL);
    EXPECT_EQ(tr__res_add(&r, "CPU", NAN), TR_EINVAL);
    EXPECT_EQ(tr__res_add(&r, "CPU", INFINITY), TR_EINVAL);
    EXPECT_EQ(tr__res_add(&r, "CPU", -INFINITY), TR_EINVAL);
    EXPECT_EQ(r.n, 0);
}

TEST(Sched, TableFull) {
    tr__res r = {};
    for (int i = 0; i < TR__MAX_RES; i++)
        ASSERT_EQ(tr__res_add(&r, ("r" + std::to_string(i)).c_str(), i), 0);
    EXPECT_EQ(tr__res_add(&r, "one_more", 1), TR_EINVAL);
    EXPECT_EQ(r.n, TR__MAX_RES);
    EXPECT_EQ(tr__res_add(&r, "r3", 1), 0); // existing names still add
    EXPECT_EQ(tr__res_get(&r, "r3"), 4.0);
}

TEST(Sched, HasAndDrop) {
    tr__res r = parsed("a=1,b=0,c=3");
    EXPECT_TRUE(tr__res_has(&r, "b")); // a name with 0 is there
    EXPECT_FALSE(tr__res_has(&r, "d"));
    tr__res_drop(&r, "a");
    EXPECT_FALSE(tr__res_has(&r, "a"));
    EXPECT_EQ(r.n, 2);
    EXPECT_EQ(tr__res_get(&r, "c"), 3.0);
    tr__res_drop(&r, "nothing");
    tr__res_drop(&r, "c");
    tr__res_drop(&r, "b");
    EXPECT_EQ(r.n, 0);
    tr__res give = parsed("a=2");
    tr__res_give(&r, &give); // a dropped name stays gone
    EXPECT_EQ(r.n, 0);
}

TEST(Sched, Parse) {
    tr__res r = parsed("CPU=4,GPU=0.5,mem=1e9");
    EXPECT_EQ(r.n, 3);
    EXPECT_EQ(tr__res_get(&r, "CPU"), 4.0);
    EXPECT_EQ(tr__res_get(&r, "GPU"), 0.5);
    EXPECT_EQ(tr__res_get(&r, "mem"), 1e9);
    tr__res e = parsed("");
    EXPECT_EQ(e.n, 0);
    tr__res twice = parsed("a=1,a=2");
    EXPECT_EQ(twice.n, 1);
    EXPECT_EQ(tr__res_get(&twice, "a"), 3.0);
    tr__res trailing = parsed("a=1,");
    EXPECT_EQ(tr__res_get(&trailing, "a"), 1.0);
    tr__res null_text = {};
    EXPECT_EQ(tr__res_parse(&null_text, nullptr), 0);
    EXPECT_EQ(null_text.n, 0);
}

TEST(Sched, ParseErrors) {
    const char *bad[] = {"CPU",     "CPU=",    "CPU=abc", "CPU=1x",   "=1",      "CPU=-1",
                         "CPU=nan", "CPU=inf", ",CPU=1",  "a=1,,b=2", "a=1;b=2", "CPU==1"};
    for (const char *text : bad) {
        tr__res r = {};
        EXPECT_EQ(tr__res_parse(&r, text), TR_EINVAL) << text;
        EXPECT_STRNE(tr__last_error(), "") << text;
    }
    std::string long_item = std::string(100, 'x') + "=1";
    tr__res r = {};
    EXPECT_EQ(tr__res_parse(&r, long_item.c_str()), TR_EINVAL);
    std::string long_name = std::string(TR__RES_NAME, 'x') + "=1";
    EXPECT_EQ(tr__res_parse(&r, long_name.c_str()), TR_EINVAL);
}

TEST(Sched, Format) {
    tr__res r = parsed("CPU=4,GPU=0.5,custom=3");
    EXPECT_EQ(formatted(r), "CPU=4,GPU=0.5,custom=3");
    tr__res empty = {};
    EXPECT_EQ(formatted(empty), "");
    // Truncation never overruns and stays NUL-terminated.
    char small[8];
    memset(small, 'X', sizeof small);
    tr__res_format(&r, small, sizeof small);
    EXPECT_EQ(strlen(small), 7u);
    EXPECT_EQ(std::string(small), "CPU=4,G");
    char none[1] = {'X'};
    tr__res_format(&r, none, 1);
    EXPECT_EQ(none[0], '\0');
    tr__res_format(&r, nullptr, 0);
}

TEST(Sched, FormatParseRoundTripOfSmallValues) {
    tr__res r = parsed("CPU=16,GPU=0.25,a=1,b=0,c=123456");
    tr__res back = parsed(formatted(r).c_str());
    ASSERT_EQ(back.n, r.n);
    for (int i = 0; i < r.n; i++)
        EXPECT_EQ(tr__res_get(&back, r.name[i]), r.qty[i]);
}

TEST(Sched, FormatParseRoundTripIsExact) {
    // Known core bug (sched.c tr__res_format): "%g" keeps 6 significant digits, so a
    // node's "memory=17179869184" comes back from tr__config_decode_node as 1.71799e+10.
    tr__res r = parsed("memory=17179869184,frac=0.3333333333,cpu=1234567");
    tr__res back = parsed(formatted(r).c_str());
    ASSERT_EQ(back.n, r.n);
    for (int i = 0; i < r.n; i++)
        EXPECT_EQ(tr__res_get(&back, r.name[i]), r.qty[i]);
}

TEST(Sched, Fits) {
    tr__res node = parsed("CPU=4,GPU=1");
    EXPECT_TRUE(tr__res_fits(&node, &node));
    tr__res empty = {};
    EXPECT_TRUE(tr__res_fits(&empty, &node));
    EXPECT_TRUE(tr__res_fits(&empty, &empty));
    tr__res two_cpu = parsed("CPU=2");
    EXPECT_TRUE(tr__res_fits(&two_cpu, &node));
    tr__res five_cpu = parsed("CPU=5");
    EXPECT_FALSE(tr__res_fits(&five_cpu, &node));
    tr__res custom = parsed("TPU=1");
    EXPECT_FALSE(tr__res_fits(&custom, &node)); // absent means 0
    tr__res zero_custom = parsed("TPU=0,CPU=1");
    EXPECT_TRUE(tr__res_fits(&zero_custom, &node)); // a zero request asks for nothing
    EXPECT_FALSE(tr__res_fits(&node, &two_cpu));
}

TEST(Sched, TakeAndGive) {
    tr__res avail = parsed("CPU=4,GPU=1");
    tr__res req = parsed("CPU=1.5,GPU=0.5");
    ASSERT_TRUE(tr__res_fits(&req, &avail));
    tr__res_take(&avail, &req);
    EXPECT_EQ(tr__res_get(&avail, "CPU"), 2.5);
    EXPECT_EQ(tr__res_get(&avail, "GPU"), 0.5);
    ASSERT_TRUE(tr__res_fits(&req, &avail));
    tr__res_take(&avail, &req);
    EXPECT_EQ(tr__res_get(&avail, "CPU"), 1.0);
    EXPECT_EQ(tr__res_get(&avail, "GPU"), 0.0);
    EXPECT_FALSE(tr__res_fits(&req, &avail));
    tr__res_give(&avail, &req);
    tr__res_give(&avail, &req);
    EXPECT_EQ(tr__res_get(&avail, "CPU"), 4.0);
    EXPECT_EQ(tr__res_get(&avail, "GPU"), 1.0);
    // Names the node does not have are ignored by take/give.
    tr__res other = parsed("TPU=1");
    tr__res_give(&avail, &other);
    tr__res_take(&avail, &other);
    EXPECT_EQ(avail.n, 2);
}

TEST(Sched, FractionsFitWithinEpsilon) {
    tr__res avail = parsed("GPU=1");
    tr__res tenth = parsed("GPU=0.1");
    for (int i = 0; i < 10; i++) {
        ASSERT_TRUE(tr__res_fits(&tenth, &avail)) << i;
        tr__res_take(&avail, &tenth);
    }
    EXPECT_EQ(tr__res_get(&avail, "GPU"), 0.0); // tiny remainders are clamped to 0
    EXPECT_FALSE(tr__res_fits(&tenth, &avail));
    for (int i = 0; i < 10; i++)
        tr__res_give(&avail, &tenth);
    tr__res one = parsed("GPU=1");
    EXPECT_TRUE(tr__res_fits(&one, &avail));
}

TEST(Cores, TakeLowestFirstWholeOrNothing) {
    int ids[] = {3, 1, 5, 1, 2}; /* any order; duplicates once */
    tr__cores c;
    tr__cores_init(&c, ids, 5);
    ASSERT_EQ(c.n, 4);
    int got[8];
    ASSERT_EQ(tr__cores_take(&c, 1, got), 1);
    EXPECT_EQ(got[0], 1);
    ASSERT_EQ(tr__cores_take(&c, 2, got), 2);
    EXPECT_EQ(got[0], 2);
    EXPECT_EQ(got[1], 3);
    EXPECT_EQ(tr__cores_take(&c, 2, got), 0) << "one core left: none is taken";
    EXPECT_EQ(tr__cores_take(&c, 0, got), 0);
    ASSERT_EQ(tr__cores_take(&c, 1, got), 1);
    EXPECT_EQ(got[0], 5);
    int back[] = {2, 99}; /* unknown ids are ignored */
    tr__cores_give(&c, back, 2);
    ASSERT_EQ(tr__cores_take(&c, 1, got), 1);
    EXPECT_EQ(got[0], 2);
}

TEST(Cores, FormatAndParse) {
    int ids[] = {0, 2, 3};
    char text[64];
    tr__cores_format(ids, 3, text, sizeof text);
    EXPECT_STREQ(text, "0,2,3");
    tr__cores_format(ids, 0, text, sizeof text);
    EXPECT_STREQ(text, "");
    int out[16];
    ASSERT_EQ(tr__cores_parse("0,2,3", out, 16), 3);
    EXPECT_EQ(out[2], 3);
    ASSERT_EQ(tr__cores_parse("0-3,6", out, 16), 5);
    EXPECT_EQ(out[3], 3);
    EXPECT_EQ(out[4], 6);
    EXPECT_EQ(tr__cores_parse("", out, 16), 0);
    EXPECT_EQ(tr__cores_parse("1,,2", out, 16), -1);
    EXPECT_EQ(tr__cores_parse("3-1", out, 16), -1);
    EXPECT_EQ(tr__cores_parse("-1", out, 16), -1);
    EXPECT_EQ(tr__cores_parse("0-1023", out, 16), -1) << "more than fit";
    EXPECT_EQ(tr__cores_parse("4096", out, 16), -1);
    EXPECT_EQ(tr__cores_parse("1x", out, 16), -1);
    EXPECT_EQ(tr__cores_parse(nullptr, out, 16), -1);
}

/* Whole GPUs go to actors asking for whole ones, lowest id first; fractions share a
 * device (the fullest that has room, so whole devices stay whole); all come back. */
TEST(Gpus, WholeAndFractionalPlacement) {
    tr__gpus g;
    tr__gpus_init(&g, 2, nullptr);
    int ids[4];
    EXPECT_TRUE(tr__gpus_fit(&g, 0));
    EXPECT_FALSE(tr__gpus_fit(&g, 1.5)) << "more than one: whole numbers only";
    EXPECT_FALSE(tr__gpus_fit(&g, 3));
    ASSERT_EQ(tr__gpus_take(&g, 0.5, ids, 4), 1);
    EXPECT_EQ(ids[0], 0);
    ASSERT_EQ(tr__gpus_take(&g, 0.25, ids + 1, 3), 1);
    EXPECT_EQ(ids[1], 0) << "best fit: the fuller device that has room";
    EXPECT_FALSE(tr__gpus_fit(&g, 2)) << "device 0 is partly taken";
    ASSERT_EQ(tr__gpus_take(&g, 1, ids + 2, 2), 1);
    EXPECT_EQ(ids[2], 1);
    EXPECT_FALSE(tr__gpus_fit(&g, 0.5)) << "0.25 left on device 0, none on 1";
    EXPECT_TRUE(tr__gpus_fit(&g, 0.25));
    tr__gpus_give(&g, 0.5, ids, 1);
    tr__gpus_give(&g, 0.25, ids + 1, 1);
    tr__gpus_give(&g, 1, ids + 2, 1);
    EXPECT_TRUE(tr__gpus_fit(&g, 2)) << "everything back";
    ASSERT_EQ(tr__gpus_take(&g, 2, ids, 4), 2);
    EXPECT_EQ(ids[0], 0);
    EXPECT_EQ(ids[1], 1);
    tr__gpus none;
    tr__gpus_init(&none, 0, nullptr);
    EXPECT_FALSE(tr__gpus_fit(&none, 0.1));
    EXPECT_EQ(tr__gpus_take(&none, 1, ids, 4), 0);
    char text[64];
    int both[] = {0, 1};
    tr__gpus_format(&g, both, 2, text, sizeof text);
    EXPECT_STREQ(text, "0,1");
    tr__gpus named; /* the node itself restricted to some devices: actors get those names */
    tr__gpus_init(&named, 2, "3,GPU-5d2e");
    tr__gpus_format(&named, both + 1, 1, text, sizeof text);
    EXPECT_STREQ(text, "GPU-5d2e");
    tr__gpus_format(&named, both, 2, text, sizeof text);
    EXPECT_STREQ(text, "3,GPU-5d2e");
}

} // namespace
