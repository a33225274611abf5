// core/status_test.cc - the status code tables and the per-thread error text.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>

extern "C" {
#include "core/status.h"
}

namespace {

struct Entry {
    int code;
    const char *name;
    const char *desc;
};

const Entry kTable[] = {
#define X(name, val, desc) {val, "TR_" #name, desc},
    TR_ERRNO_MAP(X)
#undef X
};

TEST(Status, StrerrorAndErrnameForEveryCode) {
    std::set<int> codes;
    std::set<std::string> names;
    for (const Entry &e : kTable) {
        EXPECT_STREQ(tr__strerror(e.code), e.desc) << e.name;
        EXPECT_STREQ(tr__errname(e.code), e.name);
        EXPECT_LT(e.code, 0) << e.name;
        EXPECT_TRUE(codes.insert(e.code).second) << "duplicate value " << e.code;
        EXPECT_TRUE(names.insert(e.name).second) << "duplicate name " << e.name;
    }
    EXPECT_EQ(codes.size(), 25u);
}

TEST(Status, Ok) {
    EXPECT_EQ(TR_OK, 0);
    EXPECT_STREQ(tr__strerror(TR_OK), "ok");
    EXPECT_STREQ(tr__errname(TR_OK), "TR_OK");
}

TEST(Status, EnumValuesMatchTheTable) {
    EXPECT_EQ(TR_EINVAL, -1);
    EXPECT_EQ(TR_ETIMEDOUT, -5);
    EXPECT_EQ(TR_EPROTO, -11);
    EXPECT_EQ(TR_EMSGSIZE, -12);
    EXPECT_EQ(TR_ECLOSED, -14);
    EXPECT_EQ(TR_EINTERNAL, -22);
    EXPECT_EQ(TR_EAGAIN, -25);
}

TEST(Status, UnknownCodesAreTotal) {
    const int unknown[] = {1, 2, 23, -26, -100, 1000, INT32_MIN, INT32_MAX};
    for (int c : unknown) {
        EXPECT_STREQ(tr__strerror(c), "unknown error") << c;
        EXPECT_STREQ(tr__errname(c), "TR_E?") << c;
    }
}

TEST(Status, ErrSetsLastErrorAndReturnsCode) {
    tr__err_clear();
    EXPECT_STREQ(tr__last_error(), "");
    EXPECT_EQ(tr__err(TR_ENOTFOUND, "no key '%s' (%d)", "abc", 7), TR_ENOTFOUND);
    EXPECT_STREQ(tr__last_error(), "no key 'abc' (7)");
    EXPECT_EQ(tr__err(TR_EINVAL, "second"), TR_EINVAL);
    EXPECT_STREQ(tr__last_error(), "second");
    tr__err_clear();
    EXPECT_STREQ(tr__last_error(), "");
}

TEST(Status, ErrTruncatesLongText) {
    std::string longtext(2000, 'x');
    EXPECT_EQ(tr__err(TR_EIO, "%s", longtext.c_str()), TR_EIO);
    size_t n = strlen(tr__last_error());
    EXPECT_GT(n, 100u);
    EXPECT_LT(n, longtext.size());
    EXPECT_EQ(std::string(tr__last_error()), std::string(n, 'x'));
}

TEST(Status, LastErrorIsPerThread) {
    EXPECT_EQ(tr__err(TR_EPERM, "main thread"), TR_EPERM);
    std::string seen_before, seen_after;
    std::thread t([&] {
        seen_before = tr__last_error();
        tr__err(TR_EIO, "other thread");
        seen_after = tr__last_error();
    });
    t.join();
    EXPECT_EQ(seen_before, "");
    EXPECT_EQ(seen_after, "other thread");
    EXPECT_STREQ(tr__last_error(), "main thread");
}

TEST(Status, FromErrno) {
    EXPECT_EQ(tr__from_errno(0), TR_OK);
    EXPECT_EQ(tr__from_errno(ENOMEM), TR_ENOMEM);
    EXPECT_EQ(tr__from_errno(EINVAL), TR_EINVAL);
    EXPECT_EQ(tr__from_errno(ENOENT), TR_ENOTFOUND);
    EXPECT_EQ(tr__from_errno(EEXIST), TR_EEXIST);
    EXPECT_EQ(tr__from_errno(ETIMEDOUT), TR_ETIMEDOUT);
    EXPECT_EQ(tr__from_errno(EACCES), TR_EPERM);
    EXPECT_EQ(tr__from_errno(EPERM), TR_EPERM);
    EXPECT_EQ(tr__from_errno(EMSGSIZE), TR_EMSGSIZE);
    EXPECT_EQ(tr__from_errno(ECONNREFUSED), TR_ECONNECT);
    EXPECT_EQ(tr__from_errno(ENOTCONN), TR_ECONNECT);
    EXPECT_EQ(tr__from_errno(EPIPE), TR_ECLOSED);
    EXPECT_EQ(tr__from_errno(ECONNRESET), TR_ECLOSED);
    EXPECT_EQ(tr__from_errno(EBADF), TR_EIO);
    EXPECT_EQ(tr__from_errno(EIO), TR_EIO);
}

TEST(Status, ErrErrnoAppendsStrerror) {
    EXPECT_EQ(tr__err_errno(ENOENT, "open '%s'", "/nope"), TR_ENOTFOUND);
    EXPECT_EQ(std::string(tr__last_error()), std::string("open '/nope': ") + strerror(ENOENT));
    EXPECT_EQ(tr__err_errno(EPIPE, "send"), TR_ECLOSED);
    EXPECT_EQ(std::string(tr__last_error()), std::string("send: ") + strerror(EPIPE));
}

TEST(Status, ErrWrapPutsContextBeforeTheText) {
    tr__err(TR_ENOTFOUND, "no key 'k'");
    EXPECT_EQ(tr__err_wrap(TR_ECONNECT, "node at %s", "/tmp/x"), TR_ECONNECT);
    EXPECT_STREQ(tr__last_error(), "node at /tmp/x: no key 'k'");
    tr__err_clear();
    EXPECT_EQ(tr__err_wrap(TR_EIO, "step %d", 3), TR_EIO);
    EXPECT_STREQ(tr__last_error(), "step 3");
}

} // namespace
