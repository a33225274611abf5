/* core/log_test.cc - levels, and the limit on chatty sites (at most TR__LOG_BURST lines a
 * window, the rest counted and reported by the next line or a flush). */
#include <gtest/gtest.h>
#include <stdio.h>
#include <unistd.h>

#include <string>

extern "C" {
#include "core/log.h"
}

namespace {

const int64_t kWindow = (int64_t)TR__LOG_WINDOW_MS * 1000000;

TEST(LogLimit, ABurstGetsOutThenLinesAreCountedUntilTheNextWindow) {
    tr__log_limit l = {};
    uint64_t left = 99;
    int64_t t = 1000;
    for (int i = 0; i < TR__LOG_BURST; i++) {
        ASSERT_EQ(tr__log_limit_take(&l, t + i, &left), 1) << i;
        EXPECT_EQ(left, 0u);
    }
    for (int i = 0; i < 500; i++)
        EXPECT_EQ(tr__log_limit_take(&l, t + 100 + i, &left), 0);
    /* still inside the window */
    EXPECT_EQ(tr__log_limit_take(&l, t + kWindow - 1, &left), 0);
    /* the next window: the first line out says how many were held back */
    ASSERT_EQ(tr__log_limit_take(&l, t + kWindow, &left), 1);
    EXPECT_EQ(left, 501u);
    ASSERT_EQ(tr__log_limit_take(&l, t + kWindow + 1, &left), 1);
    EXPECT_EQ(left, 0u);
}

/* Runs fn with stderr going to a file; returns what was written. */
template <typename F> std::string capture_stderr(F fn) {
    char path[] = "/tmp/troupe-log-XXXXXX";
    int fd = mkstemp(path);
    EXPECT_GE(fd, 0);
    unlink(path);
    int saved = dup(2);
    dup2(fd, 2);
    fn();
    dup2(saved, 2);
    close(saved);
    std::string out(1 << 16, '\0');
    ssize_t n = pread(fd, &out[0], out.size(), 0);
    close(fd);
    out.resize(n > 0 ? (size_t)n : 0);
    return out;
}

size_t count(const std::string &s, const std::string &what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1))
        n++;
    return n;
}

TEST(LogLimit, AFloodWritesABurstAndTheFlushSaysHowManyMore) {
    int saved_level = tr__log_level;
    tr__log_set_level(TR__LOG_WARN);
    std::string out = capture_stderr([] {
        for (int i = 0; i < 1000; i++)
            TR_LOG_WARN_LIMITED("TEST-FLOOD", "bad frame %d", i);
        tr__log_flush_limits();
        tr__log_flush_limits(); /* nothing more to say */
    });
    tr__log_set_level(saved_level);
    EXPECT_EQ(count(out, "bad frame"), (size_t)TR__LOG_BURST) << out;
    EXPECT_EQ(count(out, "TEST-FLOOD:"), (size_t)TR__LOG_BURST + 1) << out;
    EXPECT_NE(
        out.find(std::to_string(1000 - TR__LOG_BURST) + " more TEST-FLOOD line(s) not logged"),
        std::string::npos)
        << out;
}

TEST(LogLimit, BelowTheLevelNothingIsCounted) {
    int saved_level = tr__log_level;
    tr__log_set_level(TR__LOG_ERROR);
    std::string out = capture_stderr([] {
        for (int i = 0; i < 50; i++)
            TR_LOG_WARN_LIMITED("TEST-QUIET", "quiet %d", i);
        tr__log_flush_limits();
    });
    tr__log_set_level(saved_level);
    EXPECT_EQ(out, "");
}

TEST(Log, ParseLevel) {
    EXPECT_EQ(tr__log_parse_level("warn"), TR__LOG_WARN);
    EXPECT_EQ(tr__log_parse_level("DEBUG"), TR__LOG_DEBUG);
    EXPECT_EQ(tr__log_parse_level("2"), TR__LOG_INFO);
    EXPECT_EQ(tr__log_parse_level("loud"), -1);
    EXPECT_EQ(tr__log_parse_level(nullptr), -1);
}

} // namespace
