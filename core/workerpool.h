/* core/workerpool.h - spawns worker processes (exec, via uv_spawn: never a bare fork of
 * a threaded process) and reaps them, reporting each exit once.
 *
 * A process's environment is the node's, without inherited TROUPE_* variables, plus the
 * variables given. Owned by the node's loop thread (not thread-safe).
 */
#ifndef TR_CORE_WORKERPOOL_H
#define TR_CORE_WORKERPOOL_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

typedef struct tr__proc tr__proc;
/* Called once when the process has exited and been reaped; p is freed after it returns. */
typedef void (*tr__proc_exit_fn)(void *ctx, tr__proc *p, int64_t status, int signal);

typedef struct tr__pool {
    uv_loop_t *loop;
    int live; /* spawned and not yet reaped */
} tr__pool;

void tr__pool_init(tr__pool *pool, uv_loop_t *loop);
/* Spawns exe with argv {exe, NULL} and env additions ("K=V" strings, NULL-terminated).
 * Returns 0, TR_EINVAL, TR_ENOMEM, TR_EIO (exec failed: the message says why). */
int tr__proc_spawn(tr__pool *pool, const char *exe, const char *const *env, tr__proc_exit_fn fn,
                   void *ctx, tr__proc **out);
pid_t tr__proc_pid(const tr__proc *p);
/* Sends a signal; harmless after exit. */
void tr__proc_kill(tr__proc *p, int sig);
/* Forgets a live process: its exit callback will not run and its handle is closed (the
 * process is no longer reaped by this loop). For teardown when a worker will not die. */
void tr__proc_detach(tr__proc *p);

#endif
