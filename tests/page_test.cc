/* tests/page_test.cc - the node's status page (api/node/page.html) in a real browser:
 * headless Chromium (Debian's) loads it from a running node and runs its script; the DOM
 * it leaves names the actors' classes and the collective group the test made, with each
 * rank's last op, and the page logged nothing to the console (no error, no exception). A
 * screenshot goes into the test's outputs (TEST_UNDECLARED_OUTPUTS_DIR). Skips, saying
 * why, without Chromium. */
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/test_actors.h"

namespace {

TEST(StatusPage, ChromiumShowsWhatTheNodeRuns) {
    int st;
    std::string chromium = run_cmd("sh -c 'command -v chromium'", &st);
    if (st != 0 || chromium.empty())
        GTEST_SKIP() << "no chromium (Debian's chromium, tools/deps.sh)";
    tr_runtime *rt;
    ASSERT_EQ(tr_init(test_config(), &rt), 0) << tr_last_error();
    /* 3 actors of one class, 2 of another in a group that ran 3 allreduces */
    for (int i = 0; i < 3; i++) {
        tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
        o.class_label = "PageWorker";
        tr_actor_id a;
        ASSERT_EQ(tr_actor_create(rt, "Counter", &o, "c", 1, &a), 0) << tr_last_error();
        ASSERT_EQ(call_i64(rt, a, "add", 1, nullptr), 0);
    }
    tr_actor_id r[2];
    for (auto &a : r) {
        tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
        o.class_label = "PageRank";
        ASSERT_EQ(tr_actor_create(rt, "Counter", &o, "c", 1, &a), 0) << tr_last_error();
    }
    tr_ref j[2];
    for (int k = 0; k < 2; k++) {
        std::string spec = "pagegroup|2|" + std::to_string(k) + "|shm";
        ASSERT_EQ(tr_call(rt, r[k], "join_group", spec.data(), spec.size(), &j[k]), 0);
    }
    for (auto &ref : j)
        ASSERT_EQ(tr_get(rt, ref, 30000, nullptr, nullptr), 0) << tr_last_error();
    for (int i = 0; i < 3; i++) {
        tr_ref o[2];
        for (int k = 0; k < 2; k++)
            ASSERT_EQ(tr_call(rt, r[k], "allreduce_by_name", "pagegroup", 9, &o[k]), 0);
        for (auto &ref : o)
            ASSERT_EQ(tr_get(rt, ref, 30000, nullptr, nullptr), 0) << tr_last_error();
    }
    std::string url = dashboard(rt);
    ASSERT_FALSE(url.empty());
    const char *tmp = getenv("TEST_TMPDIR"), *outs = getenv("TEST_UNDECLARED_OUTPUTS_DIR");
    std::string profile = std::string(tmp ? tmp : "/tmp") + "/chromium-profile";
    std::string base = "timeout 90 chromium --headless=new --no-sandbox --disable-gpu "
                       "--no-first-run --user-data-dir=" +
                       profile + " --virtual-time-budget=5000 ";
    std::string err = std::string(tmp ? tmp : "/tmp") + "/chromium.err";
    std::string dom = run_cmd("sh -c '" + base + "--enable-logging=stderr --v=0 --dump-dom " + url +
                                  " 2>" + err + "'",
                              &st);
    ASSERT_EQ(st, 0) << dom;
    /* the actors' classes, their number, the group with each rank's last op */
    EXPECT_NE(dom.find("id=\"actors-alive\">5 alive<"), std::string::npos) << dom;
    size_t workers = 0;
    for (size_t at = 0; (at = dom.find("<td>PageWorker</td>", at)) != std::string::npos; at++)
        workers++;
    EXPECT_EQ(workers, 3u) << dom;
    EXPECT_NE(dom.find("<td>PageRank</td>"), std::string::npos) << dom;
    EXPECT_NE(dom.find("<td>pagegroup</td><td>shm</td><td class=\"state-ALIVE\">ALIVE</td>"),
              std::string::npos)
        << dom;
    EXPECT_NE(dom.find("0: #3 allreduce  1: #3 allreduce"), std::string::npos) << dom;
    EXPECT_NE(dom.find("id=\"error\" style=\"display: none;\""), std::string::npos)
        << "the page reached the node";
    /* nothing on the console: no error, no exception, no message */
    std::string log = run_cmd("cat " + err, &st);
    EXPECT_EQ(log.find(":CONSOLE"), std::string::npos) << log;
    /* a screenshot, for people (the README shows one) */
    if (outs) {
        std::string png = std::string(outs) + "/status_page.png";
        run_cmd("sh -c '" + base + "--hide-scrollbars --window-size=1280,900 --screenshot=" + png +
                    " " + url + " >/dev/null 2>&1'",
                &st);
        EXPECT_EQ(st, 0);
        EXPECT_EQ(access(png.c_str(), R_OK), 0) << png;
    }
    tr_shutdown(rt);
}

} // namespace
