/* api/cmd/slurm.c - `troupe slurm`: a troupe cluster for the length of a Slurm job.
 *
 *   troupe slurm [--port P] [--worker-path PATH]... [--tmpdir DIR] [--join-timeout S]
 *                -- COMMAND [ARGS...]
 *
 * Run from a batch script (it runs on the allocation's first node): starts the head there
 * (`troupe start --head --block`, binding the address Slurm knows the node by, NodeAddr),
 * the other nodes of SLURM_JOB_NODELIST with one `srun` step (a `troupe start --address
 * HEAD --block` on each), each node's CPUs from SLURM_CPUS_ON_NODE and its GPUs from what
 * CUDA shows it (Slurm's CUDA_VISIBLE_DEVICES), a token made for the job (in the
 * environment, never on a command line), waits until every node has joined, then runs
 * COMMAND with TROUPE_ADDRESS (the head's socket: `troupe.init()` and `tr_init` connect to
 * it) and TROUPE_CLUSTER_TOKEN set. When COMMAND ends, or a SIGTERM/SIGINT comes (scancel;
 * Slurm also signals every process of the job), it stops the nodes (a SIGTERM to the step's
 * processes and to the head, SIGKILL after a grace), removes the job's directory and exits with
 * COMMAND's status (128 + the signal when stopped by one). TROUPE_SLURM_KEEP=1 keeps the
 * head's directory (its node's log: <tmpdir>/troupe-slurm-<job>/troupe-<uid>/node.log).
 */
#include "api/cmd/slurm.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/ids.h"

#define MAX_NODES 4096
#define MAX_PATHS 16
#define GRACE_NS 20000000000LL /* a node's stop, before SIGKILL */

static volatile sig_atomic_t stop_sig;

static void on_signal(int sig) {
    stop_sig = sig;
}

static int fail(const char *fmt, const char *arg) {
    fprintf(stderr, "troupe slurm: ");
    fprintf(stderr, fmt, arg ? arg : "");
    fputc('\n', stderr);
    return 1;
}

/* Whether s is safe between single quotes of a shell command (Slurm node names and lists:
 * letters, digits, and ,-_.[]). */
static int plain(const char *s) {
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr(",-_.[]", *s)) return 0;
    return 1;
}

/* The first line of cmd's output (its stdout), into out. Returns 0, or -1. */
static int first_line(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    int ok = fgets(out, (int)cap, p) != NULL;
    while (ok && fgetc(p) != EOF) {
    }
    int st = pclose(p);
    if (!ok || st != 0) return -1;
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

/* A child running argv (execvp), its stdout and stderr into log (NULL: ours). */
static pid_t spawn(char *const argv[], const char *log) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    if (log) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
    }
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    execvp(argv[0], argv);
    fprintf(stderr, "troupe slurm: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Whether pid (our child) has ended; reaps it. */
static int ended(pid_t pid, int *status) {
    if (pid <= 0) return 1;
    int st;
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid && status) *status = st;
    return w == pid || (w < 0 && errno == ECHILD);
}

static void nap_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* SIGTERM to pid, then SIGKILL after the grace; reaped. */
static void stop_child(pid_t pid) {
    if (pid <= 0 || ended(pid, NULL)) return;
    kill(pid, SIGTERM);
    int64_t t0 = tr__now_ns();
    while (!ended(pid, NULL)) {
        if (tr__now_ns() - t0 > GRACE_NS) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return;
        }
        nap_ms(50);
    }
}

/* The other nodes' step: a SIGTERM to each of its processes (scancel --signal: the step
 * is not killed), which stop their nodes and remove their directories; srun then ends by
 * itself. Whatever has not after the grace is stopped as any child is. */
static void stop_nodes(const char *job, pid_t srun) {
    if (srun <= 0 || ended(srun, NULL)) return;
    char cmd[300], line[256], step[64] = "";
    snprintf(cmd, sizeof cmd, "squeue -h -s -j '%s' -o '%%i %%j' 2>/dev/null", job);
    FILE *p = popen(cmd, "r");
    while (p && fgets(line, sizeof line, p)) {
        char id[64], name[128];
        if (sscanf(line, "%63s %127s", id, name) == 2 && strcmp(name, "troupe-nodes") == 0)
            snprintf(step, sizeof step, "%s", id);
    }
    if (p) pclose(p);
    if (step[0] && plain(step)) {
        char *sc[] = {"scancel", "--quiet", "--signal=TERM", step, NULL};
        pid_t pid = spawn(sc, "/dev/null"); /* (22.05 says an error about the job anyway) */
        if (pid > 0) waitpid(pid, NULL, 0);
        for (int64_t t0 = tr__now_ns(); !ended(srun, NULL) && tr__now_ns() - t0 < GRACE_NS;)
            nap_ms(50);
    }
    stop_child(srun);
}

/* How many nodes the head's status calls alive ("alive":true in its "cluster"). */
static int alive_nodes(const char *self, const char *tmpdir) {
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "'%s' status --tmpdir '%s' 2>/dev/null", self, tmpdir);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    char buf[8192];
    int n = 0;
    size_t k;
    while ((k = fread(buf, 1, sizeof buf - 1, p)) > 0) { /* (the status is one small line) */
        buf[k] = '\0';
        for (const char *s = buf; (s = strstr(s, "\"alive\":true")); s++)
            n++;
    }
    pclose(p);
    return n;
}

int tr__cmd_slurm(const char *self, int argc, char **argv) {
    const char *port = "6380", *tmproot = getenv("TMPDIR");
    const char *paths[MAX_PATHS];
    int n_paths = 0, join_s = 120, i = 2;
    if (!tmproot || !*tmproot) tmproot = "/tmp";
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return fail("%s needs a value", a);
        if (strcmp(a, "--port") == 0)
            port = v;
        else if (strcmp(a, "--worker-path") == 0 && n_paths < MAX_PATHS)
            paths[n_paths++] = v;
        else if (strcmp(a, "--tmpdir") == 0)
            tmproot = v;
        else if (strcmp(a, "--join-timeout") == 0)
            join_s = atoi(v);
        else
            return fail("unknown option %s (usage: troupe slurm [--port P] [--worker-path "
                        "PATH]... [--tmpdir DIR] [--join-timeout S] -- COMMAND [ARGS...])",
                        a);
        i++;
    }
    if (i + 1 >= argc) return fail("no command after -- (what the job runs on its cluster)%s", "");
    char **command = argv + i + 1;
    const char *job = getenv("SLURM_JOB_ID"), *list = getenv("SLURM_JOB_NODELIST"),
               *me = getenv("SLURMD_NODENAME");
    if (!job || !list || !me)
        return fail("not inside a Slurm job (no SLURM_JOB_ID, SLURM_JOB_NODELIST or "
                    "SLURMD_NODENAME): run it from an sbatch script%s",
                    "");
    if (!plain(list) || !plain(me) || !plain(job) || strlen(list) > 4000)
        return fail("an unexpected SLURM_JOB_NODELIST: %s", list);

    /* the nodes, the head first; its address as Slurm reaches it */
    char cmd[4400], head[256], line[8192];
    snprintf(cmd, sizeof cmd, "scontrol show hostnames '%s'", list);
    FILE *p = popen(cmd, "r");
    int n_nodes = 0;
    head[0] = '\0';
    while (p && fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = '\0';
        if (!line[0]) continue;
        if (!n_nodes) snprintf(head, sizeof head, "%.255s", line);
        n_nodes++;
    }
    if (!p || pclose(p) != 0 || !n_nodes) return fail("scontrol show hostnames '%s' failed", list);
    if (strcmp(head, me) != 0)
        return fail("run it in the batch script, on the job's first node (%s), not under srun",
                    head);
    snprintf(cmd, sizeof cmd, "scontrol show node -o '%s'", head);
    char addr[300] = "";
    if (first_line(cmd, line, sizeof line) == 0) {
        const char *at = strstr(line, "NodeAddr=");
        if (at) sscanf(at + 9, "%255[^ ]", addr);
    }
    if (!addr[0] || !plain(addr)) return fail("no NodeAddr for node %s (scontrol show node)", head);

    /* the job's token, in the environment of everything started from here */
    uint8_t raw[32];
    char token[65];
    if (tr__random_bytes(raw, sizeof raw) != 0) return fail("no random bytes for a token%s", "");
    for (size_t k = 0; k < sizeof raw; k++)
        snprintf(token + 2 * k, 3, "%02x", raw[k]);
    setenv("TROUPE_CLUSTER_TOKEN", token, 1);
    char dir[1024], headfile[1200], log[1200];
    snprintf(dir, sizeof dir, "%s/troupe-slurm-%s", tmproot, job);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) return fail("cannot make %s", dir);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    /* the head */
    const char *cpus = getenv("SLURM_CPUS_ON_NODE");
    char hp[400];
    snprintf(hp, sizeof hp, "%s:%s", addr, port);
    const char *hv[12 + 2 * MAX_PATHS];
    int k = 0;
    hv[k++] = self;
    hv[k++] = "start";
    hv[k++] = "--head";
    hv[k++] = "--block";
    hv[k++] = "--bind";
    hv[k++] = addr;
    hv[k++] = "--port";
    hv[k++] = port;
    hv[k++] = "--tmpdir";
    hv[k++] = dir;
    if (cpus) {
        hv[k++] = "--num-cpus";
        hv[k++] = cpus;
    }
    for (int j = 0; j < n_paths; j++) {
        hv[k++] = "--worker-path";
        hv[k++] = paths[j];
    }
    hv[k] = NULL;
    snprintf(log, sizeof log, "%s/head.out", dir);
    pid_t head_pid = spawn((char *const *)hv, log), nodes_pid = 0, cmd_pid = 0;
    snprintf(headfile, sizeof headfile, "%s/troupe-%d/head", dir, (int)getuid());
    char sock[1200] = "";
    int rc = 0, st = 0;
    for (int64_t t0 = tr__now_ns(); !sock[0];) {
        FILE *f = fopen(headfile, "r");
        if (f) {
            if (fgets(sock, sizeof sock, f)) sock[strcspn(sock, "\n")] = '\0';
            fclose(f);
        }
        if (sock[0]) break;
        if (ended(head_pid, NULL) || stop_sig || tr__now_ns() - t0 > 30000000000LL) {
            fail("the head did not start (its output: %s)", log);
            rc = 1;
            goto teardown;
        }
        nap_ms(50);
    }

    /* the other nodes: one step, a node each */
    if (n_nodes > 1) {
        char ntasks[32], nodes[64], exclude[300];
        snprintf(ntasks, sizeof ntasks, "--ntasks=%d", n_nodes - 1);
        snprintf(nodes, sizeof nodes, "--nodes=%d", n_nodes - 1);
        snprintf(exclude, sizeof exclude, "--exclude=%s", head);
        /* (each makes the job's directory in its own /tmp, takes its own CPU count, passes
         * a SIGTERM on to its node, and removes the directory once the node has stopped) */
        const char *script =
            "mkdir -p -m 0700 \"$1\" || exit 1; \"$2\" start --address \"$3\" --block "
            "--tmpdir \"$1\" --num-cpus \"${SLURM_CPUS_ON_NODE:-1}\" \"${@:4}\" & node=$!; "
            "trap 'kill -TERM $node' TERM INT; wait $node; wait $node; st=$?; "
            "[ -n \"$TROUPE_SLURM_KEEP\" ] || rm -rf \"$1\"; exit $st";
        const char *sv[20 + 2 * MAX_PATHS];
        k = 0;
        sv[k++] = "srun";
        sv[k++] = "--overlap";
        sv[k++] = nodes;
        sv[k++] = ntasks;
        sv[k++] = "--ntasks-per-node=1";
        sv[k++] = exclude;
        sv[k++] = "--kill-on-bad-exit=0";
        sv[k++] = "--job-name=troupe-nodes";
        sv[k++] = "bash";
        sv[k++] = "-c";
        sv[k++] = script;
        sv[k++] = "troupe-node";
        sv[k++] = dir;
        sv[k++] = self;
        sv[k++] = hp;
        for (int j = 0; j < n_paths; j++) {
            sv[k++] = "--worker-path";
            sv[k++] = paths[j];
        }
        sv[k] = NULL;
        snprintf(log, sizeof log, "%s/nodes.out", dir);
        nodes_pid = spawn((char *const *)sv, log);
    }
    for (int64_t t0 = tr__now_ns(); alive_nodes(self, dir) < n_nodes;) {
        if (stop_sig || ended(head_pid, NULL) || (nodes_pid && ended(nodes_pid, NULL)) ||
            tr__now_ns() - t0 > (int64_t)join_s * 1000000000LL) {
            snprintf(line, sizeof line, "%d of %d", alive_nodes(self, dir), n_nodes);
            fail("the nodes did not all join (%s; see the head's log under the job's "
                 "directory, and srun's output)",
                 line);
            rc = 1;
            goto teardown;
        }
        nap_ms(200);
    }
    fprintf(stderr, "troupe slurm: %d nodes, head %s (job %s)\n", n_nodes, hp, job);

    /* the job's command, on its cluster */
    setenv("TROUPE_ADDRESS", sock, 1);
    cmd_pid = spawn(command, NULL);
    int asked = 0;
    int64_t asked_at = 0;
    while (!ended(cmd_pid, &st)) {
        if (stop_sig && !asked) {
            kill(cmd_pid, SIGTERM);
            asked = 1;
            asked_at = tr__now_ns();
        }
        if (asked && tr__now_ns() - asked_at > GRACE_NS) kill(cmd_pid, SIGKILL);
        nap_ms(50);
    }
    rc = stop_sig          ? 128 + stop_sig
         : WIFEXITED(st)   ? WEXITSTATUS(st)
         : WIFSIGNALED(st) ? 128 + WTERMSIG(st)
                           : 1;

teardown:
    stop_nodes(job, nodes_pid);
    stop_child(head_pid);
    const char *keep = getenv("TROUPE_SLURM_KEEP"); /* (the logs, to look at) */
    char *rm[] = {"rm", "-rf", dir, NULL};
    pid_t rm_pid = keep && *keep ? 0 : spawn(rm, NULL);
    if (rm_pid > 0) waitpid(rm_pid, NULL, 0);
    return rc;
}
