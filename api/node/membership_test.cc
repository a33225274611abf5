/* api/node/membership_test.cc - the head's table of nodes over a fake clock (no network,
 * no root): numbering, rejoining, a full table, heartbeats, losing and forgetting. */
#include <gtest/gtest.h>

#include <stdio.h>
#include <string.h>

#include <string>
#include <vector>

extern "C" {
#include "api/node/membership.h"
#include "core/status.h"
}

namespace {

const int64_t MS = 1000000;

tr__member node(const char *id, const char *address) {
    tr__member m;
    memset(&m, 0, sizeof m);
    snprintf(m.id, sizeof m.id, "%s", id);
    snprintf(m.address, sizeof m.address, "%s", address);
    m.cpus = 2;
    return m;
}

struct Members : ::testing::Test {
    tr__members t;
    int64_t now = 1000 * MS; /* the fake clock */
    std::vector<std::string> lost;
    void SetUp() override {
        tr__member head = node("head", "10.0.0.1:7000");
        tr__members_init(&t, &head, now);
    }
    int join(const char *id, const char *address, int64_t want = 0) {
        tr__member m = node(id, address);
        return tr__members_join(&t, &m, want, now);
    }
    static void on_lost(void *arg, const tr__member *m) {
        static_cast<Members *>(arg)->lost.push_back(m->id);
    }
    void sweep() {
        tr__members_sweep(&t, now, on_lost, this);
    }
};

TEST_F(Members, TheHeadIsRowZeroNumberOne) {
    EXPECT_EQ(t.n, 1);
    EXPECT_EQ(t.nodes[0].num, 1u);
    EXPECT_EQ(t.nodes[0].alive, 1);
}

TEST_F(Members, NewNodesGetTheNextNumbersAndARejoinKeepsItsOwn) {
    EXPECT_EQ(join("a", "10.0.0.2:7000"), 1);
    EXPECT_EQ(join("b", "10.0.0.3:7000"), 2);
    EXPECT_EQ(t.nodes[1].num, 2u);
    EXPECT_EQ(t.nodes[2].num, 3u);
    now += 5 * MS;
    EXPECT_EQ(join("a", "10.0.0.2:7001", 9), 1); /* known: its row and number, new address */
    EXPECT_EQ(t.nodes[1].num, 2u);
    EXPECT_STREQ(t.nodes[1].address, "10.0.0.2:7001");
    EXPECT_EQ(t.nodes[1].last_ns, now);
    EXPECT_EQ(t.n, 3);
}

TEST_F(Members, ANodeKeepsTheNumberItHadBeforeTheHeadRestartedUnlessItIsTaken) {
    EXPECT_EQ(join("a", "10.0.0.2:7000", 40), 1);
    EXPECT_EQ(t.nodes[1].num, 40u);
    EXPECT_EQ(join("b", "10.0.0.3:7000", 40), 2); /* taken: the next free one */
    EXPECT_EQ(t.nodes[2].num, 2u);
    EXPECT_EQ(join("c", "10.0.0.4:7000", 1), 3); /* the head's: refused */
    EXPECT_EQ(t.nodes[3].num, 3u);
    EXPECT_EQ(join("d", "10.0.0.5:7000", TR__MEMBER_NUM_MAX + 1), 4); /* out of range */
    EXPECT_EQ(t.nodes[4].num, 4u);
}

TEST_F(Members, NumbersWrapAndSkipThoseInUse) {
    t.next_num = TR__MEMBER_NUM_MAX;
    EXPECT_EQ(join("a", "10.0.0.2:7000"), 1);
    EXPECT_EQ(t.nodes[1].num, (uint32_t)TR__MEMBER_NUM_MAX);
    EXPECT_EQ(join("b", "10.0.0.3:7000", 2), 2); /* takes 2 */
    EXPECT_EQ(join("c", "10.0.0.4:7000"), 3);    /* wrapped to 2: taken, so 3 */
    EXPECT_EQ(t.nodes[3].num, 3u);
}

TEST_F(Members, AFullTableRefusesANewNodeButNotAKnownOne) {
    char id[17], addr[32];
    for (int i = 1; i < TR__MEMBERS_MAX; i++) {
        snprintf(id, sizeof id, "n%d", i);
        snprintf(addr, sizeof addr, "10.0.%d.%d:1", i / 200, i % 200);
        ASSERT_EQ(join(id, addr), i);
    }
    EXPECT_EQ(join("one-more", "10.9.9.9:1"), TR_ERESOURCES);
    EXPECT_NE(strstr(tr__last_error(), "256 nodes already"), nullptr) << tr__last_error();
    EXPECT_EQ(join("n7", "10.0.0.7:2"), 7);
}

TEST_F(Members, ASilentNodeIsLostAtTheLimitOnceAndBackWithAHeartbeat) {
    join("a", "10.0.0.2:7000");
    join("b", "10.0.0.3:7000");
    now += (TR__MEMBER_LOST_MS - 1) * MS;
    int back = -1;
    EXPECT_EQ(tr__members_beat(&t, "b", now, &back), 2);
    EXPECT_EQ(back, 0);
    sweep();
    EXPECT_TRUE(lost.empty());
    now += 1 * MS; /* a: silent for exactly the limit */
    sweep();
    EXPECT_EQ(lost, (std::vector<std::string>{"a"}));
    EXPECT_EQ(t.nodes[1].alive, 0);
    EXPECT_EQ(tr__members_says(&t, "10.0.0.2:7000"), 0);
    EXPECT_EQ(tr__members_says(&t, "10.0.0.3:7000"), 1);
    EXPECT_EQ(tr__members_says(&t, "10.0.0.9:7000"), -1);
    sweep(); /* lost once, not at every sweep */
    EXPECT_EQ(lost.size(), 1u);
    EXPECT_EQ(tr__members_beat(&t, "a", now, &back), 1);
    EXPECT_EQ(back, 1);
    EXPECT_EQ(tr__members_says(&t, "10.0.0.2:7000"), 1);
}

TEST_F(Members, ALostNodeLeavesTheTableAfterTheForgetLimitAndMustRegisterAgain) {
    join("a", "10.0.0.2:7000");
    join("b", "10.0.0.3:7000");
    now += TR__MEMBER_LOST_MS * MS;
    int back;
    tr__members_beat(&t, "b", now, &back);
    sweep(); /* a lost */
    now += (TR__MEMBER_FORGET_MS - TR__MEMBER_LOST_MS - 1) * MS;
    tr__members_beat(&t, "b", now, &back);
    sweep();
    EXPECT_EQ(t.n, 3);
    now += 1 * MS;
    sweep();
    EXPECT_EQ(t.n, 2); /* forgotten; b moved into its row */
    EXPECT_STREQ(t.nodes[1].id, "b");
    EXPECT_EQ(tr__members_beat(&t, "a", now, &back), TR_ENOTFOUND);
    EXPECT_NE(strstr(tr__last_error(), "register again"), nullptr);
    EXPECT_EQ(join("a", "10.0.0.2:7000"), 2); /* a new row, a new number */
    EXPECT_EQ(t.nodes[2].num, 4u);
}

TEST_F(Members, TheHeadIsNeverLost) {
    now += 10 * TR__MEMBER_FORGET_MS * MS;
    sweep();
    EXPECT_EQ(t.n, 1);
    EXPECT_EQ(t.nodes[0].alive, 1);
    EXPECT_TRUE(lost.empty());
}

TEST_F(Members, TheJsonSaysHowLongAgoEachNodeWasSeen) {
    join("a", "10.0.0.2:7000");
    now += 1500 * MS;
    tr__buf j = TR__BUF_INIT;
    tr__members_json(&t, now, &j);
    std::string s((const char *)j.data, j.len);
    tr__buf_free(&j);
    EXPECT_EQ(s.front(), '[');
    EXPECT_EQ(s.back(), ']');
    EXPECT_NE(s.find("\"id\":\"head\",\"address\":\"10.0.0.1:7000\",\"num\":1,\"head\":true"),
              std::string::npos)
        << s;
    EXPECT_NE(s.find("\"id\":\"a\",\"address\":\"10.0.0.2:7000\",\"num\":2,\"head\":false"),
              std::string::npos)
        << s;
    EXPECT_NE(s.find("\"last_seen_ms\":1500"), std::string::npos) << s;
    EXPECT_NE(s.find("\"last_seen_ms\":0"), std::string::npos) << s; /* the head */
}

} // namespace
