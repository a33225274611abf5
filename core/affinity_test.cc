// core/affinity_test.cc - a bound thread starts helpers with the CPUs it had before.
#include <gtest/gtest.h>

#include <pthread.h>

#include <thread>

extern "C" {
#include "core/affinity.h"
}

namespace {

cpu_set_t mask_of_new_thread() {
    cpu_set_t m;
    CPU_ZERO(&m);
    std::thread([&] { sched_getaffinity(0, sizeof m, &m); }).join();
    return m;
}

TEST(Affinity, HelpersOfABoundThreadGetTheCpusFromBeforeTheBinding) {
    // A thread of its own: the binding must not leak into the test process.
    std::thread([] {
        cpu_set_t all, one, saved;
        ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
        if (CPU_COUNT(&all) < 2) {
            printf("skipped: one CPU, nothing to widen to\n");
            return;
        }
        EXPECT_EQ(tr__affinity_widen(&saved), 0) << "nothing recorded yet";
        tr__affinity_note_unbound();
        EXPECT_EQ(tr__affinity_widen(&saved), 0) << "not bound: nothing to widen";
        CPU_ZERO(&one);
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &all)) {
                CPU_SET(c, &one);
                break;
            }
        ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
        cpu_set_t m = mask_of_new_thread();
        EXPECT_TRUE(CPU_EQUAL(&m, &one)) << "a bound thread's threads inherit its core";
        ASSERT_EQ(tr__affinity_widen(&saved), 1);
        EXPECT_TRUE(CPU_EQUAL(&saved, &one));
        m = mask_of_new_thread();
        EXPECT_TRUE(CPU_EQUAL(&m, &all)) << "widened: the CPUs from before the binding";
        tr__affinity_restore(&saved);
        ASSERT_EQ(sched_getaffinity(0, sizeof m, &m), 0);
        EXPECT_TRUE(CPU_EQUAL(&m, &one)) << "and the thread is bound again";
    }).join();
}

} // namespace
