/* tools/seccomp.h - a process without getrandom(2), for tests of what troupe does when the
 * kernel gives no random bytes (some sandboxes' seccomp filters refuse the call), or
 * without another system call (a thread that cannot write its peers' memory). */
#ifndef TR_TOOLS_SECCOMP_H
#define TR_TOOLS_SECCOMP_H

#ifdef __cplusplus
extern "C" {
#endif

/* From now on, in this process and every process it starts, getrandom(2) fails with
 * ENOSYS (a seccomp filter; no_new_privs is set). For a child made to test that, never
 * for a test's own process. Returns 0, or -1 with errno. */
int tr_test_deny_getrandom(void);

/* From now on, in this thread and every thread and process it starts, the system call
 * numbered nr fails with errno err (as tr_test_deny_getrandom). Returns 0, or -1 with
 * errno. */
int tr_test_deny_syscall(long nr, int err);

#ifdef __cplusplus
}
#endif

#endif
