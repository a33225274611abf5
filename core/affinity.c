/* core/affinity.c - see affinity.h. */
#include "core/affinity.h"

#include "core/log.h"

static cpu_set_t unbound;
static int have_unbound;

void tr__affinity_note_unbound(void) {
    if (sched_getaffinity(0, sizeof unbound, &unbound) == 0) have_unbound = 1;
}

int tr__affinity_widen(cpu_set_t *saved) {
    if (!have_unbound || sched_getaffinity(0, sizeof *saved, saved) != 0 ||
        CPU_EQUAL(saved, &unbound))
        return 0;
    return sched_setaffinity(0, sizeof unbound, &unbound) == 0;
}

void tr__affinity_restore(const cpu_set_t *saved) {
    if (sched_setaffinity(0, sizeof *saved, saved) != 0)
        TR_LOG_WARN("AFFINITY", "cannot restore this thread's CPUs: it floats");
}
