// core/trace_test.cc - slices recorded in bursts (tr__burst): stamped in ticks or clock
// reads, they land on the timeline in the order they ran, inside the clock reads taken
// around them, with their durations, values and names, and in the histogram given.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>

extern "C" {
#include "core/clock.h"
#include "core/counters.h"
#include "core/trace.h"
}

namespace {

class Burst : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/trace_test.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        ASSERT_EQ(tr__trace_open((dir_ + "/node.sock").c_str(), "driver", "trace_test", NULL), 0);
        ASSERT_NE(tr__trace_self, nullptr);
    }
    void TearDown() override {
        tr__trace_close();
        std::string cmd = "rm -rf " + dir_;
        EXPECT_EQ(system(cmd.c_str()), 0);
    }
    static const tr__trace_ev &Ev(uint64_t i) {
        return tr__trace_self->ev[i & (TR__TRACE_EVENTS - 1)];
    }
    static std::string Name(const tr__trace_ev &e) {
        return std::string(reinterpret_cast<const char *>(e.tail) + 2);
    }
    std::string dir_;
};

void Spin(int64_t ns) {
    int64_t until = tr__now_ns() + ns;
    while (tr__now_ns() < until) {
    }
}

TEST_F(Burst, SlicesStampedInTicksLandInOrderInsideTheClockReadsAroundThem) {
    tr__burst *b = static_cast<tr__burst *>(calloc(1, sizeof(tr__burst)));
    tr__hist h = {};
    uint64_t head0 = tr__trace_self->head;
    int64_t before = tr__now_ns();
    const int64_t kWork[3] = {20000, 200000, 50000}; /* each slice's work, ns */
    int64_t measured[3];
    for (int k = 0; k < 3; k++) {
        uint8_t ticks = 0;
        int64_t c0 = tr__now_ns();
        int64_t t0 = tr__burst_stamp(b, &ticks);
        EXPECT_EQ(ticks, tr__ticks_usable());
        Spin(kWork[k]);
        int64_t t1 = tr__burst_stamp(b, &ticks);
        measured[k] = tr__now_ns() - c0;
        tr__burst_push(b, t0, t1, ticks, "echo", 100 + k, k == 1);
        Spin(30000); /* a gap between slices */
    }
    EXPECT_EQ(tr__trace_self->head, head0) << "nothing is recorded before the flush";
    tr__burst_flush(b, TR__EV_STEP, &h);
    int64_t after = tr__now_ns();
    EXPECT_EQ(b->n, 0u);
    EXPECT_EQ(b->tk0, 0u);
    ASSERT_EQ(tr__trace_self->head, head0 + 3);
    int64_t prev_end = before;
    for (int k = 0; k < 3; k++) {
        const tr__trace_ev &e = Ev(head0 + k);
        EXPECT_EQ(e.seq, (uint32_t)(head0 + k + 1));
        EXPECT_EQ(Name(e), "echo");
        EXPECT_EQ(e.value, 100u + k);
        EXPECT_EQ(reinterpret_cast<const char *>(e.tail)[0], TR__EV_STEP);
        EXPECT_EQ(reinterpret_cast<const char *>(e.tail)[1], k == 1);
        EXPECT_GE(e.ts, prev_end) << k;
        EXPECT_LE(e.ts + e.dur, after) << k;
        /* its work, at least, and no more than the clock reads around it saw (+ 2 us for
         * the placement between the anchors) */
        EXPECT_GE(e.dur, kWork[k] - 2000) << k;
        EXPECT_LE(e.dur, measured[k] + 2000) << k;
        prev_end = e.ts + e.dur;
    }
    EXPECT_EQ(h.n, 3u);
    EXPECT_EQ(h.errors, 1u);
    EXPECT_GE(h.ns, (uint64_t)(kWork[0] + kWork[1] + kWork[2] - 6000));
    free(b);
}

TEST_F(Burst, ClockStampedSlicesAreKeptAsTheyAreAndABurstCanBeReused) {
    tr__burst *b = static_cast<tr__burst *>(calloc(1, sizeof(tr__burst)));
    uint64_t head0 = tr__trace_self->head;
    tr__burst_push(b, 1000, 1500, 0, "a.very.long.module.path.method_name", 7, 0);
    tr__burst_flush(b, TR__EV_STEP, NULL);
    ASSERT_EQ(tr__trace_self->head, head0 + 1);
    EXPECT_EQ(Ev(head0).ts, 1000);
    EXPECT_EQ(Ev(head0).dur, 500);
    EXPECT_EQ(Name(Ev(head0)), "method_name");
    tr__burst_flush(b, TR__EV_STEP, NULL); /* empty: nothing */
    EXPECT_EQ(tr__trace_self->head, head0 + 1);
    for (int k = 0; k < TR__BURST; k++) { /* a full burst */
        uint8_t ticks;
        int64_t t0 = tr__burst_stamp(b, &ticks);
        tr__burst_push(b, t0, tr__burst_stamp(b, &ticks), ticks, "f", (uint64_t)k, 0);
    }
    tr__hist h = {};
    tr__burst_flush(b, TR__EV_STEP, &h);
    EXPECT_EQ(h.n, (uint64_t)TR__BURST);
    ASSERT_EQ(tr__trace_self->head, head0 + 1 + TR__BURST);
    for (int k = 1; k < TR__BURST; k++)
        EXPECT_GE(Ev(head0 + 1 + k).ts, Ev(head0 + k).ts + Ev(head0 + k).dur) << k;
    free(b);
}

TEST_F(Burst, WithTicksOffEveryStampIsAClockRead) {
    /* (the verdict is cached per process: this checks the stamp's unit agrees with it) */
    tr__burst *b = static_cast<tr__burst *>(calloc(1, sizeof(tr__burst)));
    uint8_t ticks = 9;
    int64_t c0 = tr__now_ns();
    int64_t t = tr__burst_stamp(b, &ticks);
    if (!tr__ticks_usable()) {
        EXPECT_EQ(ticks, 0);
        EXPECT_GE(t, c0);
        EXPECT_LE(t, tr__now_ns());
        EXPECT_EQ(b->tk0, 0u);
    } else {
        EXPECT_EQ(ticks, 1);
        EXPECT_EQ((uint64_t)t, b->tk0);
        EXPECT_GE(b->ns0, c0);
    }
    free(b);
}

} // namespace
