// api/cmd/merge_test.cc - the nodes' answers merged (merge.h): items in order, the
// offset and limit over them all, counts summed; broken answers refused, not crashed on.
#include <gtest/gtest.h>

#include <string>

extern "C" {
#include "api/cmd/merge.h"
#include "core/status.h"
}

namespace {

std::string text(const tr__buf &b) {
    return std::string(b.data ? b.data : "", b.len);
}

const char *kA =
    "{\"kind\":\"actors\",\"items\":[{\"id\":\"a1\",\"state\":\"ALIVE\",\"reason\":\"x]},\\\"y\","
    "\"node\":\"10.0.0.1:7\"},{\"id\":\"a2\",\"pid\":12,\"node\":\"10.0.0.1:7\"}],"
    "\"total\":5,\"matched\":2,\"offset\":0,\"limit\":3}";
const char *kB = "{\"kind\":\"actors\",\"items\":[{\"id\":\"b1\",\"ranks\":[{\"rank\":0}],"
                 "\"node\":\"10.0.0.2:7\"}],\"total\":1,\"matched\":1,\"offset\":0,\"limit\":3}";
const char *kEmpty = "{\"kind\":\"actors\",\"items\":[],\"total\":4,\"matched\":0,\"offset\":0,"
                     "\"limit\":3}";

TEST(MergeList, ItemsInOrderThenTheOffsetAndLimitOverAll) {
    const char *answers[] = {kA, kEmpty, kB};
    tr__buf out = TR__BUF_INIT;
    ASSERT_EQ(tr__merge_list("actors", answers, 3, 0, 1, 2, &out), 0);
    EXPECT_EQ(text(out),
              "{\"kind\":\"actors\",\"items\":[{\"id\":\"a2\",\"pid\":12,\"node\":\"10.0.0.1:7\"},"
              "{\"id\":\"b1\",\"ranks\":[{\"rank\":0}],\"node\":\"10.0.0.2:7\"}],"
              "\"total\":10,\"matched\":3,\"offset\":1,\"limit\":2}");
    tr__buf_free(&out);
    ASSERT_EQ(tr__merge_list("actors", answers, 3, 0, 0, 1, &out), 0);
    EXPECT_NE(text(out).find("\"items\":[{\"id\":\"a1\",\"state\":\"ALIVE\",\"reason\":"
                             "\"x]},\\\"y\",\"node\":\"10.0.0.1:7\"}],\"total\":10"),
              std::string::npos)
        << "a string's brackets and quotes are the string's: " << text(out);
    tr__buf_free(&out);
}

TEST(MergeList, TablesKeepOneHeaderAndSayWhatWasShown) {
    const char *a = "ID  STATE\na1  ALIVE\na2  DEAD\n(2 shown of 2 matched, 3 in all)\n";
    const char *none = "(0 shown of 0 matched, 0 in all)\n";
    const char *b = "ID  STATE\nb1  ALIVE\n(1 shown of 1 matched, 1 in all)\n";
    const char *answers[] = {none, a, b};
    tr__buf out = TR__BUF_INIT;
    ASSERT_EQ(tr__merge_list("actors", answers, 3, 1, 0, 100, &out), 0);
    EXPECT_EQ(text(out),
              "ID  STATE\na1  ALIVE\na2  DEAD\nb1  ALIVE\n(3 shown of 3 matched, 4 in all)\n");
    tr__buf_free(&out);
    ASSERT_EQ(tr__merge_list("actors", answers, 3, 1, 5, 10, &out), 0);
    EXPECT_EQ(text(out), "(0 shown of 3 matched, 4 in all)\n");
    tr__buf_free(&out);
}

TEST(MergeList, WhatIsNotAListIsRefused) {
    const char *bad[] = {
        "",
        "{\"error\":\"a filter names a field the items do not have\"}",
        "{\"kind\":\"actors\",\"items\":[{\"id\":\"a1\"",
        "{\"kind\":\"actors\",\"items\":[{\"id\":\"a1\"}x],\"total\":1,\"matched\":1}",
        "{\"kind\":\"actors\",\"items\":[],\"matched\":1}",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
    };
    for (const char *b : bad) {
        const char *answers[] = {kA, b};
        tr__buf out = TR__BUF_INIT;
        EXPECT_EQ(tr__merge_list("actors", answers, 2, 0, 0, 10, &out), TR_EPROTO) << b;
        tr__buf_free(&out);
    }
    const char *tables[] = {"ID\na1\n", "ID\na1\n(2 shown of 2 matched, 2 in all)\n", "\n\n"};
    for (const char *b : tables) {
        tr__buf out = TR__BUF_INIT;
        EXPECT_EQ(tr__merge_list("actors", &b, 1, 1, 0, 10, &out), TR_EPROTO) << b;
        tr__buf_free(&out);
    }
}

TEST(MergeSummary, CountsAreSummedByKeyAndByClass) {
    const char *a = "{\"kind\":\"actors\",\"total\":3,\"by_state\":{\"ALIVE\":2,\"DEAD\":1},"
                    "\"by_class\":{\"Counter\":{\"ALIVE\":2},\"W\\\"x\":{\"DEAD\":1}}}";
    const char *b = "{\"kind\":\"actors\",\"total\":2,\"by_state\":{\"ALIVE\":1,\"RESTARTING\":1},"
                    "\"by_class\":{\"Counter\":{\"ALIVE\":1,\"RESTARTING\":1}}}";
    const char *answers[] = {a, b};
    tr__buf out = TR__BUF_INIT;
    ASSERT_EQ(tr__merge_summary("actors", answers, 2, &out), 0);
    EXPECT_EQ(text(out), "{\"kind\":\"actors\",\"total\":5,\"by_state\":{\"ALIVE\":3,\"DEAD\":1,"
                         "\"RESTARTING\":1},\"by_class\":{\"Counter\":{\"ALIVE\":3,"
                         "\"RESTARTING\":1},\"W\\\"x\":{\"DEAD\":1}}}");
    tr__buf_free(&out);
    const char *objects[] = {"{\"kind\":\"objects\",\"total\":0,\"by_state\":{}}",
                             "{\"kind\":\"objects\",\"total\":2,\"by_state\":{\"SEALED\":2}}"};
    ASSERT_EQ(tr__merge_summary("objects", objects, 2, &out), 0);
    EXPECT_EQ(text(out), "{\"kind\":\"objects\",\"total\":2,\"by_state\":{\"SEALED\":2}}");
    tr__buf_free(&out);
    const char *bad[] = {a, "{\"kind\":\"actors\",\"total\":1,\"by_state\":{\"ALIVE\":x}}"};
    EXPECT_EQ(tr__merge_summary("actors", bad, 2, &out), TR_EPROTO);
    tr__buf_free(&out);
}

} // namespace
