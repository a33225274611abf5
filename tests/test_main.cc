/* tests/test_main.cc - main() of the integration tests: a worker process started by
 * troupe runs the actor and never reaches GoogleTest. */
#include <gtest/gtest.h>
#include <stdlib.h>

#include "tests/test_actors.h"

int main(int argc, char **argv) {
    tr_worker_main(test_config()); /* returns at once unless this is a worker */
    if (const char *p = getenv("ORPHAN_PIDS")) return run_orphan_driver(p);
    if (const char *p = getenv("CALL_AND_LEAVE")) return run_call_and_leave(p);
    if (const char *p = getenv("CLUSTER_DRIVER")) return run_cluster_driver(p);
    if (const char *p = getenv("EXPORT_AND_DIE")) return run_export_and_die(p);
    if (const char *p = getenv("DETACH_AND_LEAVE")) return run_detach_and_leave(p);
    if (const char *p = getenv("RETRY_BY_NAME")) return run_retry_by_name(p);
    ::testing::InitGoogleTest(&argc, argv);
    if (argc > 1) g_troupe_cli = argv[1];
    return RUN_ALL_TESTS();
}
