/* tools/without_getrandom.c - runs a command in a process where getrandom(2) fails
 * (tools/seccomp.h): `without_getrandom CMD [ARGS...]`. For tests. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tools/seccomp.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: without_getrandom CMD [ARGS...]\n");
        return 2;
    }
    if (tr_test_deny_getrandom() != 0) {
        fprintf(stderr, "without_getrandom: seccomp: %s\n", strerror(errno));
        return 2;
    }
    execvp(argv[1], argv + 1);
    fprintf(stderr, "without_getrandom: %s: %s\n", argv[1], strerror(errno));
    return 127;
}
