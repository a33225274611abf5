/* core/affinity.h - what a process bound to cores gives its helper threads.
 *
 * A worker the node binds to one core (cpu_binding) runs every thread it starts there.
 * That is right for the rank's own thread; a helper that must run while the rank waits
 * and may spin at the rank's weight (Gloo's I/O thread at nice 0: 4 KiB allreduce 0.2 ->
 * 4 ms, a scheduler tick) can be started with the CPUs the process had before binding
 * (the node's), then the mask goes back. Gloo's I/O thread now shares the rank's core at
 * SCHED_IDLE instead (collective/gloo/gloo.cc, place_io_threads), and is started widened
 * only for the case where the kernel refuses that; bench/raw_gloo.cc widens raw Gloo's,
 * its best placement, for the baseline.
 * Thread safety: tr__affinity_note_unbound once, before the process starts threads; the
 * rest from any thread.
 */
#ifndef TR_CORE_AFFINITY_H
#define TR_CORE_AFFINITY_H

#include <sched.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Records the CPUs this process may use now, before it binds itself. */
void tr__affinity_note_unbound(void);

/* Widens the calling thread's CPUs to those recorded, the old mask into *saved: threads it
 * starts until tr__affinity_restore inherit them. Returns 1 if widened, 0 if there was
 * nothing to widen (never bound, or the same CPUs). */
int tr__affinity_widen(cpu_set_t *saved);
void tr__affinity_restore(const cpu_set_t *saved);

#ifdef __cplusplus
}
#endif
#endif
