/* tools/seccomp.h - a process without getrandom(2), for tests of what troupe does when the
 * kernel gives no random bytes (some sandboxes' seccomp filters refuse the call). */
#ifndef TR_TOOLS_SECCOMP_H
#define TR_TOOLS_SECCOMP_H

#ifdef __cplusplus
extern "C" {
#endif

/* From now on, in this process and every process it starts, getrandom(2) fails with
 * ENOSYS (a seccomp filter; no_new_privs is set). For a child made to test that, never
 * for a test's own process. Returns 0, or -1 with errno. */
int tr_test_deny_getrandom(void);

#ifdef __cplusplus
}
#endif

#endif
